import os
import sys
from pathlib import Path

# litellm fetches its price map from the internet at import unless told not to;
# this must run before anything imports litellm.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
for path in (str(REPO_ROOT), str(TESTS_DIR)):
    if path not in sys.path:
        sys.path.insert(0, path)

import pytest  # noqa: E402

from fake_openai import FakeOpenAI  # noqa: E402


@pytest.fixture(scope="session")
def fake_openai_session():
    """One server for the whole session; use `fake_openai` for a clean state."""
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def fake_openai(fake_openai_session):
    """The shared server, reset to default replies, no faults and no latency."""
    fake_openai_session.reset()
    yield fake_openai_session
    fake_openai_session.reset()
