"""The ground floor: services every layer above stands on, importing nothing above them.

config, errors, fsutil (atomic writes, bounded reads), the LLM gateway with its ledger,
providers, rate limits and local model, the sandboxes, and the run's git repository of
agent versions (workspace). `open_services` starts what an entry point needs, in order.
"""

import os

# litellm downloads its price map at import unless told otherwise; offline that costs
# seconds and warnings. The copy shipped inside the package is what we want anyway.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
