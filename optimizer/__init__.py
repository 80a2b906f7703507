"""Trusted core: the loop, the sandbox, the LLM gateway."""

import os

# litellm downloads its price map at import unless told otherwise; offline that costs
# seconds and warnings. The copy shipped inside the package is what we want anyway.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
