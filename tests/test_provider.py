"""The provider seam: litellm is one module's on the host (services/provider/), the gateway needs only the
Provider protocol, and a caller's protocol is one file of the gateway's inbound/ that every check applies to."""

from __future__ import annotations

import ast
import json
import threading
import urllib.error
import urllib.request
from pathlib import Path

import litellm
import pytest

from services.config import PROJECT_ROOT, Config
from services.gateway import Gateway
from services.gateway.inbound import BY_PATH, PROTOCOLS, Reply
from services.gateway.params import Refusal, checked
from services.ledger import Ledger
from services.provider import LITELLM, Answer, Failure, Route, Usage

OWNER = PROJECT_ROOT / "services" / "provider" / "litellm_provider.py"
HOST = ("services", "domains", "search", "archive", "optimizer", "run_optimization.py", "setup_proofgrader_repo.py",
        "hyperagents.py")  # the trusted code that runs on the host (inside/ runs in sandboxes)


def litellm_uses(path: Path) -> list[int]:
    """The lines of `path` that import litellm (at any depth, for the type checker too) or call `_litellm`."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] + [alias.name for alias in node.names]
        elif isinstance(node, ast.Name | ast.Attribute):
            names = [node.id if isinstance(node, ast.Name) else node.attr]
        else:
            continue
        if any(n == "litellm" or n.startswith("litellm.") or n == "_litellm" for n in names):
            lines.append(node.lineno)
    return lines


def host_sources() -> list[Path]:
    return sorted(p for top in HOST for p in ((PROJECT_ROOT / top).rglob("*.py") if (PROJECT_ROOT / top).is_dir()
                                              else [PROJECT_ROOT / top]))


def test_only_the_provider_module_imports_litellm_on_the_host():
    found = {str(p.relative_to(PROJECT_ROOT)): lines for p in host_sources() if p != OWNER
             and (lines := litellm_uses(p))}
    assert found == {}
    assert litellm_uses(OWNER)


def test_the_scan_finds_every_way_in(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import os\nif TYPE_CHECKING:\n    from litellm import ModelResponse\n"
                      "def f():\n    import litellm.types\n    return providers._litellm()\n")
    assert litellm_uses(source) == [3, 5, 6]


@pytest.mark.parametrize(("error", "retry", "fault", "status"), [
    (litellm.RateLimitError("slow down", "openai", "m"), True, True, 429),
    (litellm.APIConnectionError("Connection error.", "openai", "m"), True, True, 500),
    (litellm.AuthenticationError("bad key", "openai", "m"), False, True, 401),
    (litellm.NotFoundError("no such model", "m", "openai"), False, True, 404),
    (litellm.BadRequestError("context length exceeded", "m", "openai"), False, False, 400),
    (ValueError("a bug of no status"), False, True, 502),
])
def test_litellms_failures_are_classified_as_the_gateway_acts_on_them(error, retry, fault, status):
    failure = LITELLM.failure(error)
    assert (failure.retry, failure.providers_fault, failure.status) == (retry, fault, status)


class Scripted:
    """A Provider that is not litellm: each call's answer, or its error, from a list."""

    def __init__(self, outcomes: list, family: str = "scripted") -> None:
        self.outcomes = outcomes
        self.routes: list[Route] = []
        self.registered: dict[str, dict] = {}
        self.sent: list[list] = []
        self._family = family

    def complete(self, route: Route, messages: list, params: dict, timeout: float | None) -> Answer:
        self.routes.append(route)
        self.sent.append(messages)
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        payload = {"choices": [{"index": 0, "message": {"role": "assistant", "content": outcome}}]}
        return Answer(payload, Usage(prompt_tokens=7, completion_tokens=3, cost_usd=0.25))

    def failure(self, error: Exception) -> Failure:
        down = isinstance(error, ConnectionError)
        return Failure(retry=False, providers_fault=down, status=503 if down else 400)

    def family(self, model: str) -> str:
        return self._family

    def missing_keys(self, model: str) -> list[str]:
        return []

    def prices(self, model: str) -> tuple[bool, dict]:
        return True, {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6, "max_output_tokens": 100}

    def register_prices(self, model: str, rates: dict) -> None:
        self.registered[model] = rates

    def warm_up(self, families: list[str]) -> threading.Thread | None:
        return None


def post(url: str, key: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Authorization": f"Bearer {key}",
                                                                      "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_the_gateway_calls_books_and_judges_failures_through_any_provider(tmp_path):
    config = Config()
    config.gateway.max_retries, config.gateway.breaker_failures = 0, 1
    provider = Scripted(["forty-two", ValueError("prompt too long"), ConnectionError("down"), ConnectionError("down")])
    with Gateway(config, Ledger(tmp_path / "ledger.sqlite"), "run", provider=provider) as gw:
        gw.allow_models("scripted/m")
        key = gw.new_session("n", "task", ["scripted/m"])
        message = {"model": "scripted/m", "messages": [{"role": "user", "content": "6 x 7?"}]}
        status, body = post(f"{gw.url}/chat/completions", key, message)
        assert (status, body["choices"][0]["message"]["content"], body["model"]) == (200, "forty-two", "scripted/m")
        assert provider.routes == [Route("scripted/m")] and "scripted/m" not in provider.registered  # it was known
        assert post(f"{gw.url}/chat/completions", key, message)[0] == 400  # the request's fault, as it says
        assert gw.provider_failures(key) == 0 and gw.budget_left_message() is None
        status, body = post(f"{gw.url}/chat/completions", key, message)  # the provider's: the probe fails too
        assert status == 503 and gw.provider_failures(key) == 1
        assert "provider for scripted/m failed 1 times in a row" in post(f"{gw.url}/chat/completions", key,
                                                                         message)[1]["error"]["message"]
        rows = gw.ledger.calls()
    assert [(r["role"], r["prompt_tokens"], r["completion_tokens"], r["cost_usd"]) for r in rows][0] == (
        "task", 7, 3, 0.25)
    assert [r["role"] for r in rows] == ["task", "task", "task", "probe"]


def marked(messages: list) -> bool:
    return any(isinstance(part, dict) and "cache_control" in part
               for m in messages for part in (m["content"] if isinstance(m["content"], list) else [m]))


@pytest.mark.parametrize(("family", "marks"), [("anthropic", True), ("scripted", False)])
def test_prompt_cache_marks_follow_the_gateways_provider_not_litellms_table(tmp_path, family, marks):
    # litellm knows no "scripted/" models: the gateway's own provider says which family takes marks.
    provider = Scripted(["ok"], family)
    with Gateway(Config(), Ledger(tmp_path / "ledger.sqlite"), "run", provider=provider) as gw:
        gw.allow_models("scripted/m")
        key = gw.new_session("n", "meta", ["scripted/m"])
        system = {"role": "system", "content": "You edit code. " * 200}
        body = {"model": "scripted/m", "messages": [system, {"role": "user", "content": "go"}]}
        assert post(f"{gw.url}/chat/completions", key, body)[0] == 200
    assert marked(provider.sent[0]) is marks


class Plain:
    """A protocol of another shape, as Anthropic's Messages or OpenAI's Responses will be: a prompt in, a text
    out, errors in its own form; the gateway's form inside."""

    name = "plain-test"
    paths = ("/v1/plain-test",)
    counts = False

    @staticmethod
    def model(body: dict) -> str:
        if not isinstance(body.get("model"), str):
            raise Refusal(400, "a plain request needs a model")
        return body["model"]

    @staticmethod
    def request(body: dict, gw: object) -> tuple[list, dict]:
        chat = {"model": body["model"], "messages": [{"role": "user", "content": str(body.get("prompt"))}],
                "temperature": 0}
        return checked(chat, gw)  # type: ignore[arg-type]

    @staticmethod
    def reply(payload: dict, body: dict) -> dict:
        return {"text": payload["choices"][0]["message"]["content"], "by": body["model"]}

    @staticmethod
    def streams(body: dict) -> bool:
        return False

    @staticmethod
    def events(answer: dict) -> list:
        return []

    @staticmethod
    def error(status: int, message: str, kind: str) -> Reply:
        return Reply(status, {"failed": message, "why": kind}, {})


def test_a_protocol_of_one_file_gets_the_sessions_caps_cache_budget_and_ledger(gateway_factory, fake_openai,
                                                                               monkeypatch):
    plain = Plain()
    monkeypatch.setitem(PROTOCOLS, plain.name, plain)
    monkeypatch.setitem(BY_PATH, plain.paths[0], plain)
    fake_openai.set_replies(["plain words"])
    gw = gateway_factory()
    url = gw.url.removesuffix("/v1") + plain.paths[0]
    key = gw.new_session("n", "task", ["openai/fake"], max_calls=2)
    assert post(url, key, {"model": "openai/fake", "prompt": "hi"}) == (200, {"text": "plain words",
                                                                            "by": "openai/fake"})
    assert post(url, key, {"model": "openai/fake", "prompt": "hi"})[0] == 200  # replayed from the cache
    assert fake_openai.count == 1
    assert post(url, key, {"model": "openai/fake", "prompt": "hi"}) == (
        429, {"failed": "this session's limit of 2 model calls is reached", "why": "call_limit_reached"})
    assert post(url, "gw-" + "x" * 32, {"model": "openai/fake"})[1]["why"] == "authentication_error"
    other = gw.new_session("n", "meta", ["openai/other"])
    assert post(url, other, {"model": "openai/fake", "prompt": "hi"})[0] == 403
    rows = gw.ledger.calls()
    assert [(r["role"], bool(r["cache_hit"])) for r in rows] == [("task", False), ("task", True)]
    assert gw.spent().refused == 3
