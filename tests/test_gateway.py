"""The gateway end to end: agent-side litellm -> gateway -> litellm -> fake provider."""

import json
import os
import subprocess
import sys
import threading
import time

import litellm
import openai
import pytest

from agent.llm import get_response
from support.cli import REPO_ROOT


def call(gw, key, content="hello", model="openai/fake", **params):
    return litellm.completion(model=f"openai/{model}", api_base=gw.url, api_key=key, num_retries=0,
                              messages=[{"role": "user", "content": content}], **params)


def test_forwards_and_books_every_call(gateway_factory, fake_openai):
    fake_openai.set_replies(["forty-two"])
    gw = gateway_factory()
    key = gw.new_session(node="n1", role="task", models=["openai/fake"])
    reply = call(gw, key, "what is 6 x 7?")
    assert reply.choices[0].message.content == "forty-two"
    # The provider saw the real model name and the provider key, never the session key.
    sent = fake_openai.requests[-1]
    assert sent["json"]["model"] == "fake"
    assert sent["headers"]["authorization"] == "Bearer sk-provider-secret-0123456789"
    assert sent["json"]["max_tokens"] == 32768  # none asked: gateway.max_output_tokens bounds the reply
    [row] = gw.ledger.calls()
    assert ((row["node"], row["role"], row["model"], row["cache_hit"], row["error"])
            == ("n1", "task", "openai/fake", 0, None))
    assert row["prompt_tokens"] == len("what is 6 x 7?") // 4 and row["completion_tokens"] == len("forty-two") // 4


def test_role_alias_resolves_to_configured_model(gateway_factory, fake_openai):
    gw = gateway_factory()
    gw.config.models.task = "openai/fake"
    key = gw.new_session(node="n", role="task", models=["openai/fake"])
    call(gw, key, model="task")
    assert fake_openai.requests[-1]["json"]["model"] == "fake"


def test_transient_errors_are_retried_with_backoff(gateway_factory, fake_openai):
    fake_openai.set_replies(["ok"])
    fake_openai.add_faults(["429", "500", "503", "disconnect"])
    gw = gateway_factory(max_retries=5)
    reply = call(gw, gw.new_session("n", "task", ["openai/fake"]))
    assert reply.choices[0].message.content == "ok"
    assert len(fake_openai.requests) == 5
    [row] = gw.ledger.calls()
    assert row["attempts"] == 5 and row["error"] is None


def test_retries_are_bounded_and_the_error_is_booked(gateway_factory, fake_openai):
    fake_openai.add_faults(["429"] * 10)
    gw = gateway_factory(max_retries=2)
    with pytest.raises(litellm.RateLimitError):
        call(gw, gw.new_session("n", "task", ["openai/fake"]))
    assert len(fake_openai.requests) == 3  # first try + 2 retries
    [row] = gw.ledger.calls()
    assert "RateLimitError" in row["error"]


def test_temperature_zero_requests_are_served_from_cache(gateway_factory, fake_openai):
    fake_openai.set_replies(["first", "second"])
    gw = gateway_factory()
    key = gw.new_session("n", "task", ["openai/fake"])
    a = call(gw, key, "same", temperature=0)
    b = call(gw, key, "same", temperature=0)
    assert a.choices[0].message.content == b.choices[0].message.content == "first"
    assert fake_openai.count == 1
    c = call(gw, key, "same", temperature=1)  # sampling: never replayed
    assert c.choices[0].message.content == "second"
    assert [r["cache_hit"] for r in gw.ledger.calls()] == [0, 1, 0]


def test_cache_survives_a_restart_of_the_run(gateway_factory, fake_openai, tmp_path):
    fake_openai.set_replies(["paid once"])
    first = gateway_factory(folder=tmp_path / "run")
    call(first, first.new_session("n", "task", ["openai/fake"]), "q", temperature=0)
    first.stop()
    second = gateway_factory(folder=tmp_path / "run")
    assert second.spent().calls == 1  # totals are read back from the ledger
    reply = call(second, second.new_session("n", "task", ["openai/fake"]), "q", temperature=0)
    assert reply.choices[0].message.content == "paid once" and fake_openai.count == 1


def test_usd_budget_holds_each_calls_worst_case(gateway_factory, fake_openai):
    # 1M tokens cost $1 each way. A call with 100 prompt tokens (400 characters) costs about $0.0001,
    # but its worst case is ~$0.0005: a token per byte of its ~490-byte request, and max_tokens=20.
    gw = gateway_factory(budget_usd=0.00075, prices={"openai/fake": [1.0, 1.0]})
    key = gw.new_session("n", "task", ["openai/fake"])
    content = "x" * 400
    paid = 0
    with pytest.raises(litellm.exceptions.APIError) as err:
        for _ in range(10):
            call(gw, key, content, max_tokens=20)
            paid += 1
    # The 4th call's worst case, on top of ~$0.0003 spent, could pass $0.00075: it never starts.
    assert paid == 3 and fake_openai.count == 3
    assert err.value.status_code == 402 and "gateway.budget_usd" in str(err.value)
    assert gw.spent().cost_usd == pytest.approx(3 * (100 + len(fake_openai.responder({})) // 4) / 1e6)
    assert gw.budget_left_message()  # an ordinary call no longer fits: the loop starts no more rows


@pytest.mark.parametrize("budget", [{"budget_usd": 0.1}, {"budget_tokens": 100_000}])
@pytest.mark.parametrize("prompt, params", [(2**20, {"max_tokens": 20}), (400, {"max_tokens": 32768, "n": 4})],
                         ids=["1 MB prompt", "4 choices of 32768 tokens"])
def test_one_oversized_call_is_refused_and_the_run_goes_on(gateway_factory, fake_openai, budget, prompt, params):
    # At $1 per million tokens, its worst case is past either budget; an ordinary call (one choice, a
    # prompt of at most 64 KiB) is not.
    gw = gateway_factory(prices={"openai/fake": [1.0, 1.0]}, **budget)
    key = gw.new_session("n", "task", ["openai/fake"])
    with pytest.raises(litellm.exceptions.APIError) as err:
        call(gw, key, "x" * prompt, **params)
    assert err.value.status_code == 402 and "still holds an ordinary call" in str(err.value)
    assert fake_openai.count == 0 and gw.budget_left_message() is None
    fake_openai.set_replies(["still here"])
    assert call(gw, key, "x" * 400, max_tokens=20).choices[0].message.content == "still here"
    assert fake_openai.count == 1 and gw.budget_left_message() is None


def test_a_call_that_fits_but_for_calls_in_flight_waits_for_them(gateway_factory, fake_openai):
    # Each call's worst case (~$0.0005) fits the budget, two at once do not: the second waits for the
    # first to end (its real cost is a fifth of its worst case), then goes through.
    fake_openai.latency = 0.5
    gw = gateway_factory(budget_usd=0.0008, prices={"openai/fake": [1.0, 1.0]})
    key = gw.new_session("n", "task", ["openai/fake"])
    replies = []
    threads = [threading.Thread(target=lambda: replies.append(call(gw, key, "x" * 400, max_tokens=20)))
               for _ in range(2)]
    for t in threads:
        t.start()
        time.sleep(0.1)
    for t in threads:
        t.join()
    assert len(replies) == 2 and fake_openai.count == 2
    assert gw.spent().calls == 2 and gw.budget_left_message() is None


def test_an_exhausted_budget_refuses_every_call(gateway_factory, fake_openai, tmp_path):
    first = gateway_factory(folder=tmp_path / "run")
    call(first, first.new_session("n", "task", ["openai/fake"]), "x" * 400)
    first.stop()
    resumed = gateway_factory(folder=tmp_path / "run", budget_tokens=50)  # already spent more than that
    with pytest.raises(litellm.exceptions.APIError, match="token budget exhausted"):
        call(resumed, resumed.new_session("n", "task", ["openai/fake"]), "x", max_tokens=1)
    assert fake_openai.count == 1


def test_cost_comes_from_litellms_price_table_and_unknown_models_cost_zero(gateway_factory, fake_openai):
    gw = gateway_factory()
    gw.allow_models("openai/gpt-4o-mini")  # in litellm's table; the fake server answers for it
    key = gw.new_session("n", "task", ["openai/fake", "openai/gpt-4o-mini"])
    reply = call(gw, key, "x" * 400, model="openai/gpt-4o-mini")
    info = litellm.get_model_info("openai/gpt-4o-mini")
    assert fake_openai.requests[-1]["json"]["max_tokens"] == info["max_output_tokens"] < 32768
    expected = (reply.usage.prompt_tokens * info["input_cost_per_token"]
                + reply.usage.completion_tokens * info["output_cost_per_token"])
    assert expected > 0 and gw.spent().cost_usd == pytest.approx(expected)
    call(gw, key, "x" * 400)  # openai/fake: no price anywhere, tokens still counted
    assert gw.spent().cost_usd == pytest.approx(expected) and gw.spent().prompt_tokens >= 200


def test_a_model_in_litellms_table_that_get_model_info_misses_keeps_its_price():
    from services.gateway.pricing import _own_listing, pricing_of, register_price

    model = "azure/mistral-large-latest"  # in litellm's table, yet get_model_info fails on it
    listed = dict(litellm.model_cost[model])
    assert not _own_listing(model)[0] and listed["input_cost_per_token"] > 0
    register_price(model, None)
    entry = litellm.model_cost[model]
    assert (entry["input_cost_per_token"], entry["output_cost_per_token"]) == pytest.approx(
        (listed["input_cost_per_token"], listed["output_cost_per_token"]))
    assert pricing_of(model, {}).input_usd == pytest.approx(listed["input_cost_per_token"])


def test_token_budget_holds_each_calls_worst_case(gateway_factory, fake_openai):
    gw = gateway_factory(budget_tokens=750)
    key = gw.new_session("n", "task", ["openai/fake"])
    for _ in range(3):
        call(gw, key, "x" * 400, max_tokens=20)  # ~105 tokens, ~510 at worst
    with pytest.raises(litellm.exceptions.APIError, match="token budget exhausted: 315 spent.*budget_tokens 750"):
        call(gw, key, "x" * 400, max_tokens=20)
    assert fake_openai.count == 3 and gw.spent().tokens <= 750


def test_unknown_key_and_disallowed_model_are_refused(gateway_factory, fake_openai):
    gw = gateway_factory()
    with pytest.raises(litellm.AuthenticationError):
        call(gw, "sk-provider-secret-0123456789")  # a provider key is not a gateway key
    with pytest.raises(litellm.exceptions.APIError, match="not allowed in this run") as err:
        call(gw, gw.new_session("n", "task", ["openai/gpt-expensive"]), model="openai/gpt-expensive")
    assert err.value.status_code == 403
    assert fake_openai.count == 0


def test_a_session_call_limit_is_enforced_by_the_gateway(gateway_factory, fake_openai):
    gw = gateway_factory()
    key = gw.new_session("n", "meta", ["openai/fake"], max_calls=2)
    call(gw, key)
    call(gw, key)
    with pytest.raises(litellm.RateLimitError, match="limit of 2 model calls") as err:
        call(gw, key)
    assert err.value.status_code == 429 and fake_openai.count == 2
    call(gw, gw.new_session("n", "task", ["openai/fake"]))  # other sessions are not affected
    assert fake_openai.count == 3


def test_provider_key_never_reaches_the_ledger_or_the_caller(gateway_factory, fake_openai, tmp_path, monkeypatch):
    import services.provider.litellm_provider as provider_module

    secret = os.environ["OPENAI_API_KEY"]

    def leaky_provider(**kwargs):  # a provider whose error message echoes the key, as some do
        raise litellm.BadRequestError(message=f"invalid key {secret}", model="fake", llm_provider="openai")

    gw = gateway_factory(max_retries=0)
    key = gw.new_session("n", "task", ["openai/fake"])
    class Shim:  # the gateway's view of litellm: real except for the provider call
        def __getattr__(self, name):
            return leaky_provider if name == "completion" else getattr(litellm, name)

    monkeypatch.setattr(provider_module, "_litellm", lambda: Shim())
    with pytest.raises(litellm.BadRequestError) as err:
        call(gw, key)
    assert secret not in str(err.value) and "***" in str(err.value)
    gw.stop()
    [row] = gw.ledger.calls()
    assert "***" in row["error"]
    for path in (tmp_path / "run").iterdir():
        assert secret.encode() not in path.read_bytes(), path


def call_at_once(gw, key, n: int) -> None:
    """`n` calls from `n` threads started together; returns when all are answered."""
    threads = [threading.Thread(target=call, args=(gw, key, f"q{i}")) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_concurrent_calls_are_all_booked(gateway_factory, fake_openai):
    fake_openai.latency = 0.2
    gw = gateway_factory()
    key = gw.new_session("n", "task", ["openai/fake"])
    call_at_once(gw, key, 8)
    assert gw.spent().calls == 8 == len(gw.ledger.calls()) == fake_openai.count


def test_calls_over_the_concurrency_limit_wait_for_a_slot(gateway_factory, fake_openai):
    fake_openai.latency = 0.3
    gw = gateway_factory(max_concurrent_calls=2)
    key = gw.new_session("n", "task", ["openai/fake"])
    call_at_once(gw, key, 6)
    arrivals = sorted(r["time"] for r in fake_openai.requests)
    # With two in flight, each arrival has at most one other within the 0.3 s before it.
    assert max(sum(1 for a in arrivals if t - 0.25 <= a <= t) for t in arrivals) == 2
    assert arrivals[-1] - arrivals[0] >= 0.55  # three waves, 0.3 s apart
    assert gw.spent().calls == 6 and not any(r["error"] for r in gw.ledger.calls())


def test_requests_per_minute_are_counted_per_model():
    from services.rate_limit import CallLimits

    limits = CallLimits(max_concurrent=None, per_minute=2, window_s=0.5)
    starts = {}

    def take(name, model):
        with limits.slot(model):
            starts[name] = time.monotonic()

    began = time.monotonic()
    for name, model in (("a1", "a"), ("a2", "a"), ("b1", "b"), ("a3", "a")):
        take(name, model)
    assert max(starts["a1"], starts["a2"], starts["b1"]) - began < 0.2  # within both models' limits
    assert starts["a3"] - starts["a1"] >= 0.45  # model a's third waits for its window to slide


def test_agent_client_uses_the_gateway_from_the_environment(gateway_factory, fake_openai, monkeypatch):
    fake_openai.set_replies(["", "second try"])  # an empty answer is asked again once
    gw = gateway_factory()
    monkeypatch.setenv("AGENT_GATEWAY_URL", gw.url)
    monkeypatch.setenv("AGENT_GATEWAY_KEY", gw.new_session("n", "task", ["openai/fake"]))
    reply = get_response([{"role": "user", "content": "hi"}], model="openai/fake")
    assert reply.text == "second try"
    assert reply.usage.calls == 2 and gw.spent().calls == 2


def test_agent_client_and_gateway_price_unknown_models_without_a_warning(gateway_factory, fake_openai, monkeypatch,
                                                                        capfd):
    gw = gateway_factory()
    gw.allow_models("openai/fake-unpriced")  # a name no earlier test registered, on either side
    monkeypatch.setenv("AGENT_GATEWAY_URL", gw.url)
    monkeypatch.setenv("AGENT_GATEWAY_KEY", gw.new_session("n", "task", ["openai/fake-unpriced"]))
    assert get_response([{"role": "user", "content": "hi"}], model="openai/fake-unpriced").text
    assert gw.ledger.calls()[-1]["cost_usd"] == 0
    assert "register_model" not in capfd.readouterr().err


def test_warm_up_answers_through_each_provider_and_leaves_no_server_behind():
    from inside.warm_up import STUB_THREAD, warm_up

    assert warm_up(litellm, ["hosted_vllm", "openai"]) == ["hosted_vllm", "openai"]
    assert warm_up(litellm, ["no_such_provider"]) == []  # a failing provider is skipped, not raised
    assert not [t for t in threading.enumerate() if t.name.startswith(STUB_THREAD)]


def test_stop_waits_for_the_warm_up_so_no_import_is_cut_at_exit(gateway_factory):
    # A warm-up thread cut by the interpreter's exit in the middle of an import held that module's
    # lock, and litellm's finalizers, importing at exit, hung on it (a run refused at start hung).
    gw = gateway_factory()
    gw.allow_models("anthropic/claude-warm", "mistral/warm")  # providers not warmed yet: a thread starts
    assert [t for t in threading.enumerate() if t.name == "gateway-warm-up"]
    gw.stop()
    assert not [t for t in threading.enumerate() if t.name == "gateway-warm-up" and t.is_alive()]


def test_socket_folders_of_dead_gateways_are_removed_and_live_ones_kept(gateway_factory, tmp_path):
    import socket
    import tempfile
    from pathlib import Path

    from services.gateway import SOCKET_DIR_PREFIX

    dead = Path(tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(dead / "gateway.sock"))  # what a SIGKILLed gateway leaves: a socket file, no listener
    listener.close()
    os.utime(dead, (0, 0))  # an old folder: one a starting gateway has just made is left alone
    starting = Path(tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX))
    live = gateway_factory(run_id="live")
    gateway_factory(run_id="next")
    assert not dead.exists() and live.unix_socket.exists() and starting.exists()
    starting.rmdir()


def test_a_history_of_dumped_response_messages_is_accepted_without_their_echoed_fields(gateway_factory, fake_openai):
    """Agents often append `message.model_dump()` to their history: its response-only fields are
    dropped, not refused, and never reach the provider."""
    fake_openai.set_replies(["first", "second"])
    gw = gateway_factory()
    key = gw.new_session(node="n", role="task", models=["openai/fake"])
    first = call(gw, key, "hi")
    history = [{"role": "user", "content": "hi"}, first.choices[0].message.model_dump(),
               {"role": "user", "content": "and?"}]
    assert "provider_specific_fields" in history[1]
    reply = litellm.completion(model="openai/openai/fake", api_base=gw.url, api_key=key, num_retries=0,
                               messages=history)
    assert reply.choices[0].message.content == "second"
    sent = fake_openai.requests[-1]["json"]["messages"][1]
    assert sent["content"] == "first" and "provider_specific_fields" not in sent and "function_call" not in sent


GATEWAY_UNDER_O = """
import http.client, json, sys
from pathlib import Path
from urllib.parse import urlsplit
from services.config import Config
from services.gateway import open_gateway
assert not __debug__  # python -O: assert statements are gone
gw = open_gateway(Config(), Path(sys.argv[1]), "run")
key = gw.new_session("n", "task", ["openai/fake"])
answers = []
for body in (b"[1, 2]", b'"a string"', b"7", b"[" * 100000, b"\\xff"):
    conn = http.client.HTTPConnection("127.0.0.1", urlsplit(gw.url).port, timeout=30)
    try:
        conn.request("POST", "/v1/chat/completions", body=body, headers={"Authorization": "Bearer " + key})
        reply = conn.getresponse()
        answers.append([reply.status, json.loads(reply.read())["error"]["message"]])
    except Exception as e:
        answers.append([None, type(e).__name__])
    finally:
        conn.close()
gw.stop()
print(json.dumps(answers))
"""


def test_a_body_that_is_not_a_json_object_is_a_400_also_under_python_O(tmp_path):
    r = subprocess.run([sys.executable, "-O", "-c", GATEWAY_UNDER_O, str(tmp_path)], cwd=REPO_ROOT,
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    assert r.returncode == 0, r.stderr[-2000:]
    answers = json.loads(r.stdout.strip().splitlines()[-1])
    assert answers == [[400, "request body is not a JSON object"]] * 5


def refused(gw, key, content="hello"):
    """The error a call that must fail raises (litellm's class for its status)."""
    with pytest.raises(openai.OpenAIError) as err:
        call(gw, key, content)
    return err.value


def breaker_state(gw, key):
    from services.errors import ProviderDown

    try:
        gw.check_breaker()
    except ProviderDown as e:
        return e.reason, gw.provider_failures(key)
    return None, gw.provider_failures(key)


def test_provider_failures_in_a_row_trip_the_breaker_and_one_answer_resets_the_count(gateway_factory, fake_openai):
    gw = gateway_factory(max_retries=1, breaker_failures=3)
    key = gw.new_session("n", "task", ["openai/fake"])
    # Two failures (each after its retry), an answer, two more: never three in a row.
    for faults in (["500", "503"], ["429", "500"], [], ["500", "500"], ["503", "500"]):
        fake_openai.add_faults(faults)
        if faults:
            refused(gw, key)
        else:
            call(gw, key)
    assert breaker_state(gw, key) == (None, 4) and len(fake_openai.requests) == 9
    # The third in a row makes the gateway probe the provider itself; the probe fails too: tripped.
    fake_openai.add_faults(["disconnect", "500"] + ["500", "500"])
    failed = refused(gw, key, "row 7")
    assert failed.status_code == 500 and "provider call for openai/fake failed" in str(failed)
    reason, failures = breaker_state(gw, key)
    assert reason.startswith("provider for openai/fake failed 3 times in a row: InternalServerError") and failures == 5
    assert "\n" not in reason
    probes = [r for r in gw.ledger.calls() if r["role"] == "probe"]
    assert len(probes) == 1 and probes[0]["error"] and len(fake_openai.requests) == 9 + 2 + 2
    # From now on every call of every session is refused at once, with an error of its own.
    asked = len(fake_openai.requests)
    other = gw.new_session("m", "meta", ["openai/fake"])
    error = refused(gw, other)
    assert error.status_code == 503 and "calls no provider any more: provider for openai/fake" in str(error)
    assert len(fake_openai.requests) == asked and breaker_state(gw, other)[1] == 1
    assert gw.ledger.refusals()[-1]["reason"] == "503 provider_down"


def test_the_breaker_trips_only_when_the_gateways_own_probe_fails_too(gateway_factory, fake_openai):
    # Agent code can make its own calls fail (replies too long for the timeout, say); the probe is
    # the gateway's: answered, the provider is up, the count starts again and calls go on.
    gw = gateway_factory(max_retries=0, breaker_failures=2)
    key = gw.new_session("n", "task", ["openai/fake"])
    fake_openai.add_faults(["500", "500"])
    for _ in range(2):
        refused(gw, key)
    assert breaker_state(gw, key) == (None, 2)
    [probe] = [r for r in gw.ledger.calls() if r["role"] == "probe"]
    assert probe["error"] is None and probe["node"] == "probe"
    fake_openai.add_faults(["500"])
    refused(gw, key)
    assert breaker_state(gw, key)[0] is None  # one failure after the probe: the count started again
    assert call(gw, key).choices[0].message.content == "This is a fake reply."


def test_a_request_the_provider_refuses_is_not_a_provider_failure(gateway_factory, fake_openai, monkeypatch):
    import services.provider.litellm_provider as provider_module

    def refusing_provider(**kwargs):  # the request's own fault: too long a prompt, say
        raise litellm.BadRequestError(message="maximum context length exceeded", model="fake", llm_provider="openai")

    class Shim:
        def __getattr__(self, name):
            return refusing_provider if name == "completion" else getattr(litellm, name)

    gw = gateway_factory(max_retries=0, breaker_failures=1)
    key = gw.new_session("n", "task", ["openai/fake"])
    monkeypatch.setattr(provider_module, "_litellm", lambda: Shim())
    for _ in range(3):
        with pytest.raises(litellm.BadRequestError):
            call(gw, key)
    assert breaker_state(gw, key) == (None, 0)


def test_a_dead_provider_trips_the_breaker_with_the_connection_error(gateway_factory, monkeypatch):
    from support.fake_openai import FakeOpenAI

    server = FakeOpenAI().start()
    monkeypatch.setenv("OPENAI_API_BASE", server.base_url)
    gw = gateway_factory(max_retries=1, breaker_failures=2)
    key = gw.new_session("n", "task", ["openai/fake"])
    call(gw, key)
    server.stop()
    for _ in range(2):
        refused(gw, key)
    reason = breaker_state(gw, key)[0]
    assert reason.startswith("provider for openai/fake failed 2 times in a row: ") and "Connection error" in reason


def test_a_model_whose_server_is_known_dead_trips_the_breaker_at_once(tmp_path, fake_openai, monkeypatch):
    from services.config import Config
    from services.gateway import Gateway
    from services.ledger import Ledger

    monkeypatch.setenv("OPENAI_API_BASE", fake_openai.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    config = Config()
    config.gateway.max_retries = 0
    health = {"openai/fake": None}
    gw = Gateway(config, Ledger(tmp_path / "ledger.sqlite"), "run", provider_health=health.get).start()
    try:
        gw.allow_models("openai/fake")
        key = gw.new_session("n", "task", ["openai/fake"])
        fake_openai.add_faults(["500"])
        refused(gw, key)
        assert breaker_state(gw, key)[0] is None  # one failure of five, and the server lives
        health["openai/fake"] = "the local model server for openai/fake was killed by SIGKILL"
        fake_openai.add_faults(["500"])
        refused(gw, key)
        assert breaker_state(gw, key)[0] == "the local model server for openai/fake was killed by SIGKILL"
    finally:
        gw.stop()
        gw.ledger.close()
