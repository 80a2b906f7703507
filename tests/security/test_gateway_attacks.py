"""The gateway under attack: request bodies from code that holds only a session key.

litellm reads many request fields as routing, credentials, headers, callbacks or canned
answers. Each attack is sent as raw JSON to a real gateway forwarding to the fake provider;
the gateway must refuse it by name, call no provider and no other address, book the refusal
to the caller's node and role, and keep the run's budget.
"""

import http.client
import json
import socket
import threading
from urllib.parse import urlsplit

import pytest
from attack_kit import tripwire  # noqa: F401  (a fixture)

from agent.llm import get_response

PROVIDER_KEY = "sk-provider-secret-0123456789"  # what conftest's gateway_factory gives the gateway


def post(gw, body: dict, key: str) -> tuple[int, dict]:
    """Send one chat request body as it is, the way hostile code could; the status and JSON answer."""
    conn = http.client.HTTPConnection("127.0.0.1", urlsplit(gw.url).port, timeout=60)
    try:
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        reply = conn.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        conn.close()


def chat(content: str = "hello", **fields) -> dict:
    """A plain chat request for the fake provider's model, plus `fields`."""
    return {"model": "openai/fake", "messages": [{"role": "user", "content": content}], **fields}


def message(answer: dict) -> str:
    """The text of an error answer."""
    return answer["error"]["message"]


@pytest.fixture
def gw(gateway_factory):
    """A gateway forwarding to the fake provider, with the default caps."""
    return gateway_factory()


@pytest.fixture
def key(gw):
    """A session key booking to node n1, role task."""
    return gw.new_session(node="n1", role="task", models=["openai/fake"])


@pytest.mark.attack("routing fields in a request body (api_base, base_url, ...) sending the call, with the "
                    "provider key, to an address of the caller's choice")
@pytest.mark.parametrize("field", ["api_base", "base_url", "azure_endpoint", "aws_bedrock_runtime_endpoint"])
def test_routing_fields_never_send_the_call_elsewhere(gw, key, fake_openai, tripwire, field):  # noqa: F811
    """A body field naming the caller's own server as the provider's address."""
    before = tripwire.connections
    status, answer = post(gw, chat(**{field: f"http://127.0.0.1:{tripwire.port}/v1"}), key)
    assert status == 400 and message(answer) == f"field {field!r} is not allowed"
    assert tripwire.connections == before and fake_openai.count == 0


@pytest.mark.attack("mock_response in a request body: a canned answer instead of the provider's, cached for "
                    "honest callers")
def test_mock_response_never_answers_or_skips_the_provider(gw, key, fake_openai):
    """A canned answer smuggled in at temperature 0, to be replayed from the cache to later callers."""
    fake_openai.set_replies(["the provider's answer"])
    status, answer = post(gw, chat("q", temperature=0, mock_response="canned"), key)
    assert status == 400 and message(answer) == "field 'mock_response' is not allowed"
    status, answer = post(gw, chat("q", temperature=0), key)
    assert status == 200 and answer["choices"][0]["message"]["content"] == "the provider's answer"
    assert fake_openai.count == 1


@pytest.mark.attack("extra_headers / headers in a request body reaching the provider")
@pytest.mark.parametrize("field", ["extra_headers", "headers"])
def test_header_fields_never_reach_the_provider(gw, key, fake_openai, field):
    """Headers of the caller's choice (e.g. another tenant's organization) added to the provider call."""
    status, answer = post(gw, chat(**{field: {"X-Evil": "1", "OpenAI-Organization": "org-evil"}}), key)
    assert status == 400 and message(answer) == f"field {field!r} is not allowed"
    assert post(gw, chat(), key)[0] == 200
    assert [r["headers"].get("x-evil") for r in fake_openai.requests] == [None]


@pytest.mark.attack("api_key in a request body replacing the run's provider key")
def test_a_callers_api_key_never_replaces_the_provider_key(gw, key, fake_openai):
    """The caller's own key (or a stolen one) for the provider call, billed elsewhere or probing keys."""
    status, answer = post(gw, chat(api_key="sk-attacker"), key)
    assert status == 400 and message(answer) == "field 'api_key' is not allowed"
    assert post(gw, chat(), key)[0] == 200
    assert [r["headers"]["authorization"] for r in fake_openai.requests] == [f"Bearer {PROVIDER_KEY}"]


@pytest.mark.attack("litellm's own fields in a request body: callbacks, retries, fallbacks, timeouts, "
                    "provider and cloud credentials, prices, MCP hooks")
@pytest.mark.parametrize("field, value", [
    ("metadata", {"callbacks": ["langfuse"]}), ("litellm_params", {"api_base": "http://127.0.0.1:9"}),
    ("fallbacks", ["openai/gpt-4o"]), ("timeout", 100000), ("num_retries", 1000),
    ("custom_llm_provider", "azure"), ("user_api_key", "x"), ("user_api_key_hash", "x"),
    ("aws_access_key_id", "AKIA"), ("aws_region_name", "us-east-1"), ("vertex_project", "p"),
    ("vertex_credentials", "{}"), ("azure_ad_token", "t"), ("api_version", "2024"), ("success_callback", ["s3"]),
    ("callbacks", ["x"]), ("input_cost_per_token", 0), ("output_cost_per_token", 0), ("model_list", []),
    ("mock_tool_calls", []), ("drop_params", False), ("_skip_mcp_handler", False), ("caching", True),
    ("extra_body", {"x": 1}), ("stream_options", {"include_usage": True, "x": 1}), ("functions", []),
])
def test_litellm_fields_are_refused_by_name(gw, key, fake_openai, field, value):
    """A field litellm reads for itself, not a chat parameter of the provider's API."""
    status, answer = post(gw, chat(**{field: value}), key)
    assert status == 400 and message(answer) in (f"field {field!r} is not allowed",
                                                  f"field {field!r} may hold include_usage only")
    assert fake_openai.count == 0


@pytest.mark.attack("max_tokens / n above the gateway's caps, or of the wrong type: a call whose cost has no bound")
@pytest.mark.parametrize("field, value", [
    ("max_tokens", 1001), ("max_completion_tokens", 1001), ("max_tokens", 0), ("max_tokens", True),
    ("max_tokens", 10.5), ("max_tokens", "100"), ("n", 5), ("n", 0),
])
def test_output_caps_are_enforced(gateway_factory, fake_openai, field, value):
    """More output tokens or choices than the run allows, or a cap in a shape a check might misread."""
    gw = gateway_factory(max_output_tokens=1000, max_n=4)
    status, answer = post(gw, chat(**{field: value}), gw.new_session("n", "task", ["openai/fake"]))
    assert status == 400 and message(answer).startswith(f"field {field!r} must be an integer from ")
    assert fake_openai.count == 0
    assert post(gw, chat(max_tokens=1000, n=4), gw.new_session("n", "task", ["openai/fake"]))[0] == 200


@pytest.mark.attack("chat parameters of the wrong type or out of range (NaN temperature, long stop lists, "
                    "unknown tool choices and formats)")
@pytest.mark.parametrize("field, value", [
    ("temperature", "hot"), ("temperature", 3), ("temperature", float("nan")), ("top_p", 2), ("seed", "1"),
    ("stop", ["a", "b", "c", "d", "e"]), ("stop", [1]), ("tool_choice", "any"),
    ("tool_choice", {"type": "mcp", "server_label": "x"}), ("response_format", {"type": "json_object", "url": "x"}),
    ("response_format", {"type": "grammar"}), ("reasoning_effort", "max"), ("logprobs", "yes"),
    ("top_logprobs", 21), ("user", "u" * 1000), ("parallel_tool_calls", 1), ("presence_penalty", -3),
])
def test_parameters_are_type_checked(gw, key, fake_openai, field, value):
    """An allowed parameter with a value the provider's API does not define."""
    status, answer = post(gw, chat(**{field: value}), key)
    assert status == 400 and message(answer).startswith(f"field '{field}")  # the field, or a part of it
    assert fake_openai.count == 0


@pytest.mark.attack("tools other than plain functions (MCP servers, web search, code interpreter) that make "
                    "litellm or the provider reach out")
@pytest.mark.parametrize("tool, where", [
    ({"type": "mcp", "server_url": "http://127.0.0.1:{port}/mcp", "server_label": "x"}, "tools[0].server_url"),
    ({"type": "web_search"}, "tools[0].function"),
    ({"type": "code_interpreter", "function": {"name": "f"}}, "tools[0].type"),
    ({"type": "function", "function": {"name": "f", "server_url": "http://127.0.0.1:{port}"}},
     "tools[0].function.server_url"),
    ({"type": "function", "function": {"name": "f"}, "cache_control": {"type": "ephemeral"}}, "tools[0].cache_control"),
])
def test_only_function_tools_pass(gw, key, fake_openai, tripwire, tool, where):  # noqa: F811
    """A tool the provider or litellm would act on by itself, e.g. connect to an MCP server the caller names."""
    before = tripwire.connections
    tool = json.loads(json.dumps(tool).replace("{port}", str(tripwire.port)))
    status, answer = post(gw, chat(tools=[tool]), key)
    assert status == 400 and message(answer).startswith(f"field {where!r}")
    assert tripwire.connections == before and fake_openai.count == 0


@pytest.mark.attack("messages with unknown roles, keys, non-text content (image and file URLs) or malformed "
                    "tool calls")
@pytest.mark.parametrize("messages, where", [
    ([{"role": "root", "content": "x"}], "messages[0].role"),
    ([{"role": "user", "content": 5}], "messages[0].content"),
    ([{"role": "user", "content": {"text": "x"}}], "messages[0].content"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://127.0.0.1:9/x.png"}}]}],
     "messages[0].content[0].image_url"),
    ([{"role": "user", "content": [{"type": "file", "text": "x"}]}], "messages[0].content[0].type"),
    ([{"role": "user", "content": "x", "cache_control": {"type": "ephemeral"}}], "messages[0].cache_control"),
    ([{"content": "x"}], "messages[0].role"),
    (["hello"], "messages[0]"),
    ([], "messages"),
    ([{"role": "assistant", "content": None, "tool_calls": [{"id": "1", "type": "mcp", "function": {}}]}],
     "messages[0].tool_calls[0].type"),
    ([{"role": "assistant", "content": None, "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]}],
     "messages[0].tool_calls[0].function.arguments"),
])
def test_messages_are_checked_to_their_parts(gw, key, fake_openai, messages, where):
    """Nested message content the provider would read as something other than text."""
    status, answer = post(gw, {"model": "openai/fake", "messages": messages}, key)
    assert status == 400 and message(answer).startswith(f"field {where!r}")
    assert fake_openai.count == 0


def marked_part(mark, text: str = "x") -> list:
    """One user message whose text part carries `mark` as its cache_control."""
    return [{"role": "user", "content": [{"type": "text", "text": text, "cache_control": mark}]}]


@pytest.mark.attack("cache_control past the one bounded kind allowed (ephemeral, on a text part, a lifetime the "
                    "provider takes, at most 4): other types, lifetimes or fields, on tool calls, more than 4, and "
                    "marks sent on to a provider that does not read them as cache breakpoints")
@pytest.mark.parametrize("messages, where", [
    (marked_part({"type": "persistent"}), "messages[0].content[0].cache_control.type"),
    (marked_part({}), "messages[0].content[0].cache_control.type"),
    (marked_part({"type": "ephemeral", "ttl": "24h"}), "messages[0].content[0].cache_control.ttl"),
    (marked_part({"type": "ephemeral", "ttl": 3600}), "messages[0].content[0].cache_control.ttl"),
    (marked_part({"type": "ephemeral", "ttl": None}), "messages[0].content[0].cache_control.ttl"),
    (marked_part({"type": "ephemeral", "scope": "global"}), "messages[0].content[0].cache_control.scope"),
    (marked_part("ephemeral"), "messages[0].content[0].cache_control"),
    ([{"role": "assistant", "content": None, "tool_calls": [{"id": "1", "type": "function", "function": {
        "name": "f", "arguments": "{}"}, "cache_control": {"type": "ephemeral"}}]}],
     "messages[0].tool_calls[0].cache_control"),
    (marked_part({"type": "ephemeral"}) * 5, "messages"),
])
def test_cache_marks_are_bounded(gw, key, fake_openai, messages, where):
    """A mark a provider or litellm would read otherwise, or more than a request may hold."""
    status, answer = post(gw, {"model": "openai/fake", "messages": messages}, key)
    assert status == 400 and message(answer).startswith(f"field {where!r}")
    assert fake_openai.count == 0
    # The bounded form passes, and goes no further than a provider that reads it as a cache breakpoint.
    allowed = marked_part({"type": "ephemeral", "ttl": "1h"}) * 3 + marked_part({"type": "ephemeral"})
    assert post(gw, {"model": "openai/fake", "messages": allowed}, key)[0] == 200
    assert "cache_control" not in json.dumps(fake_openai.requests[-1]["json"])


def raw_post(gw, head: str) -> bytes:
    """Send request headers alone, no body, and read the answer until the gateway closes."""
    with socket.create_connection(("127.0.0.1", urlsplit(gw.url).port), timeout=10) as conn:
        conn.sendall(head.encode())
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    return data


@pytest.mark.attack("a request body larger than gateway.max_request_mb, or of no stated size, to exhaust "
                    "the gateway's memory")
@pytest.mark.parametrize("length, status", [("99999999999", 413), (str(2**20 + 1), 413), (None, 400),
                                            ("12abc", 400), ("-5", 400)])
def test_oversize_or_unsized_bodies_are_refused_unread(gateway_factory, fake_openai, length, status):
    """Headers announcing a huge body (never sent), or none at all: the answer comes without reading it."""
    gw = gateway_factory(max_request_mb=1)
    key = gw.new_session("n1", "meta", ["openai/fake"])
    size = "" if length is None else f"Content-Length: {length}\r\n"
    answer = raw_post(gw, f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\n"
                          f"Content-Type: application/json\r\n{size}\r\n")
    assert answer.startswith(f"HTTP/1.1 {status} ".encode()) and b"Connection: close" in answer
    [row] = gw.ledger.refusals()
    assert (row["node"], row["role"], row["count"]) == ("n1", "meta", 1) and row["reason"].startswith(f"{status} ")


@pytest.mark.attack("refused requests (unknown key, unknown field, disallowed model, call cap, budget) leaving "
                    "no trace of who sent them")
@pytest.mark.parametrize("case, status", [("unknown key", 401), ("field", 400), ("model", 403), ("call cap", 429),
                                          ("budget", 402)])
def test_refusals_are_booked_to_the_callers_node_and_role(gateway_factory, fake_openai, case, status):
    """Probing the gateway with requests it refuses, hoping none is recorded against the sender."""
    gw = gateway_factory(budget_usd=0.001, prices={"openai/fake": [1.0, 1.0]})  # max_tokens 32768 may cost $0.03
    key = gw.new_session("n7", "meta", ["openai/fake"], max_calls=0 if case == "call cap" else None)
    body = {"unknown key": chat(max_tokens=10), "field": chat(api_base="http://127.0.0.1:9", max_tokens=10),
            "model": chat(max_tokens=10) | {"model": "openai/gpt-4o"}, "call cap": chat(max_tokens=10),
            "budget": chat()}[case]
    assert post(gw, body, "gw-not-a-key" if case == "unknown key" else key)[0] == status
    [row] = gw.ledger.refusals()
    node_role = ("unknown", "unknown") if case == "unknown key" else ("n7", "meta")
    assert (row["node"], row["role"], row["count"]) == (*node_role, 1) and gw.ledger.calls() == []
    assert row["reason"].startswith(f"{status} ") and fake_openai.count == 0
    spent = gw.spent()
    assert (spent.calls, spent.errors, spent.refused) == (0, 0, 1)
    assert gw.ledger.totals(run_id="run") == spent


@pytest.mark.attack("many calls at once, each within the budget on its own, together spending far past it")
def test_concurrent_calls_never_spend_past_the_budget(gateway_factory, fake_openai):
    """40 calls of ~$0.10 started together against a $1 budget (before reservations: ~$4 spent)."""
    fake_openai.latency = 0.2
    fake_openai.set_replies(["y" * 400])  # 100 output tokens
    gw = gateway_factory(budget_usd=1.0, prices={"openai/fake": [100.0, 1000.0]})
    key = gw.new_session("n", "task", ["openai/fake"])
    statuses = []

    def one(i: int) -> None:
        statuses.append(post(gw, chat(f"question {i:02d}" * 4, max_tokens=100), key)[0])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    paid = [r for r in gw.ledger.calls() if r["error"] is None]
    one_call = max(r["cost_usd"] for r in paid)
    assert 0.09 < one_call < 0.11
    assert gw.spent().cost_usd <= 1.0 + one_call
    assert statuses.count(200) == len(paid) == fake_openai.count and statuses.count(402) == 40 - len(paid)


def test_the_agent_client_still_works_through_the_gateway(gw, key, fake_openai, monkeypatch):
    """agent/llm.py with native tools and a tool-call history, and with a local model's schema format."""
    monkeypatch.setenv("AGENT_GATEWAY_URL", gw.url)
    monkeypatch.setenv("AGENT_GATEWAY_KEY", key)
    tools = [{"type": "function", "function": {"name": "bash", "description": "Run a command.",
                                               "parameters": {"type": "object", "properties": {}}}}]
    history = [{"role": "user", "content": "list files"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}]
    assert get_response(history, model="openai/fake", tools=tools, temperature=0.0).text
    assert fake_openai.requests[-1]["json"]["tools"] == tools
    monkeypatch.setenv("AGENT_STRUCTURED_MODELS", "openai/fake")
    fake_openai.set_replies(['{"points": 7}'])
    reply = get_response([{"role": "system", "content": "grade"}, {"role": "user", "content": [
        {"type": "text", "text": "a proof"}]}], model="openai/fake", schema={"type": "object"}, max_tokens=50)
    assert reply.text == '{"points": 7}'
    sent = fake_openai.requests[-1]["json"]
    assert sent["response_format"]["type"] == "json_object" and sent["max_tokens"] == 50
    assert not any(r["error"] for r in gw.ledger.calls())
