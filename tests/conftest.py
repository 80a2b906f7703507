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

# The dashboard fixtures (`runs`, `server`) of tests/test_dashboard.py and tests/security/.
from support.dashboard import runs, server  # noqa: E402, F401
from support.fake_anthropic import FakeAnthropic  # noqa: E402
from support.fake_openai import FakeOpenAI  # noqa: E402

ATTACKS = pytest.StashKey[dict]()  # description -> node ids of the attack tests collected
COUNTS = pytest.StashKey[tuple]()  # (tests, of them e2e), when the whole suite was collected


def whole_suite(config) -> bool:
    """Whether this session collected every test: no path narrower than tests/, no -k, no --deselect."""
    given = {(config.invocation_params.dir / arg.split("::")[0]).resolve() for arg in config.args}
    return (given <= {TESTS_DIR, REPO_ROOT} and not config.option.keyword
            and not config.getoption("deselect", None) and not config.getoption("lf", False))


def pytest_collection_modifyitems(session, config, items):
    """Remember the attacks collected (tests marked `attack`), for the check of SECURITY.md, and on a whole
    run the counts of tests (before -m deselects any), for the docs' (tests/test_readme_setup.py)."""
    found: dict[str, list[str]] = {}
    for item in items:
        mark = item.get_closest_marker("attack")
        if mark and mark.args:
            found.setdefault(mark.args[0], []).append(item.nodeid)
    config.stash[ATTACKS] = found
    if whole_suite(config):
        config.stash[COUNTS] = (len(items), sum(1 for item in items if item.get_closest_marker("e2e")))


@pytest.fixture(scope="session")
def fake_openai_session():
    """One server for the whole session; use `fake_openai` for a clean state."""
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def api_provider(fake_openai, monkeypatch):
    """The fake server as the provider of a run started in this process (hyperagents.run), its key set."""
    monkeypatch.setenv("OPENAI_API_BASE", fake_openai.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-provider-secret-0123456789")
    return fake_openai


@pytest.fixture
def provider(fake_openai, monkeypatch):
    """agent.llm calling the fake server directly, as it does outside a run."""
    monkeypatch.delenv("AGENT_GATEWAY_URL", raising=False)
    monkeypatch.delenv("AGENT_GATEWAY_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_BASE", fake_openai.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    return fake_openai


@pytest.fixture
def fake_openai(fake_openai_session):
    """The shared server, reset to default replies, no faults and no latency."""
    fake_openai_session.reset()
    yield fake_openai_session
    fake_openai_session.reset()


@pytest.fixture
def fake_anthropic():
    """A fake Anthropic Messages API with its own, empty prompt cache (tests/support/fake_anthropic.py)."""
    with FakeAnthropic() as server:
        yield server


@pytest.fixture
def gateway_factory(tmp_path, fake_openai, monkeypatch):
    """Start in-process gateways that forward to the fake provider; all stopped at teardown."""
    from services.config import Config
    from services.gateway import open_gateway

    monkeypatch.setenv("OPENAI_API_BASE", fake_openai.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-provider-secret-0123456789")
    started = []

    def make(run_id="run", folder=None, **gateway_fields):
        config = Config()
        config.gateway.backoff_base_s = 0.01
        config.gateway.backoff_max_s = 0.05
        for k, v in gateway_fields.items():
            setattr(config.gateway, k, v)
        gw = open_gateway(config, folder or tmp_path / run_id, run_id)
        gw.allow_models("openai/fake")
        started.append(gw)
        return gw

    yield make
    for gw in started:
        gw.stop()
        gw.ledger.close()
