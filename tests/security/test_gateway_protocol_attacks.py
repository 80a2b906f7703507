"""The gateway's protocols for coding agents under attack: Anthropic's Messages (and its count_tokens) and
OpenAI's Responses, sent as raw HTTP by code that holds only a session key, as a coding agent in a sandbox
could. A real gateway (conftest's `gateway_factory`) forwards to the fake OpenAI server; each attack asserts
the refusal in the protocol's own shape, that nothing reached the provider or another address, that the
refusal is booked, and that nothing was printed on the terminal.
"""

import json
import socket
import time
from urllib.parse import urlsplit

import pytest
from attack_kit import tripwire  # noqa: F401  (a fixture)

from services.gateway import server as gateway_server

TASK, META = "openai/fake", "openai/fake-meta"
MESSAGE = {"model": META, "max_tokens": 100, "messages": [{"role": "user", "content": "hello"}]}
RESPONSE = {"model": META, "input": "hello"}
# Each protocol: its path, a request of it, how it sends the key, and where its error's type is.
PROTOCOLS = {
    "messages": ("/v1/messages", MESSAGE, "x-api-key", lambda body: body["error"]["type"]),
    "count_tokens": ("/v1/messages/count_tokens", MESSAGE, "x-api-key", lambda body: body["error"]["type"]),
    "responses": ("/v1/responses", RESPONSE, "Authorization", lambda body: body["error"]["type"]),
    "chat": ("/v1/chat/completions", {"model": META, "messages": MESSAGE["messages"]}, "Authorization",
             lambda body: body["error"]["type"]),
}


def raw_request(path: str, data: bytes, key: str, header: str = "x-api-key", length: int | None = None) -> bytes:
    value = f"Bearer {key}" if header == "Authorization" else key
    return (f"POST {path} HTTP/1.1\r\nHost: gw\r\n{header}: {value}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data) if length is None else length}\r\n\r\n").encode() + data


def send(gw, path: str, body: dict | bytes, key: str, header: str = "x-api-key") -> tuple[int, dict, dict]:
    """One request over TCP; the status, headers and JSON body of the reply."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", urlsplit(gw.url).port), timeout=30) as sock, \
            sock.makefile("rb") as f:
        sock.sendall(raw_request(path, data, key, header))
        status = int(f.readline().split()[1])
        headers = {}
        while (line := f.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        return status, headers, json.loads(f.read(int(headers["content-length"])))


@pytest.fixture
def gw(gateway_factory):
    gw = gateway_factory()
    gw.allow_models(META)
    return gw


@pytest.mark.attack("a key of another role, a revoked key or none, on every protocol (Messages, count_tokens, "
                    "Responses, chat), as x-api-key or Authorization")
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_protocol_holds_the_key_to_its_role(gw, fake_openai, capfd, protocol):
    path, body, header, kind = PROTOCOLS[protocol]
    task = gw.new_session("n1", "task", [TASK])  # may call the task model only
    revoked = gw.new_session("n1", "meta", [META])
    gw.revoke(revoked)
    for key, status in ((task, 403), (revoked, 401), ("", 401), ("gw-" + "0" * 32, 401)):
        for how in (header, "Authorization" if header == "x-api-key" else "x-api-key"):
            got, _, answer = send(gw, path, body, key, how)
            assert got == status, (key, how, answer)
            assert kind(answer) in ("permission_error", "authentication_error")
            if protocol in ("messages", "count_tokens"):
                assert answer["type"] == "error"
    assert fake_openai.count == 0 and gw.ledger.calls() == [] and gw.spent().refused == 8
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.attack("a Messages or Responses body over gateway.max_request_mb, or nested too deep to parse")
@pytest.mark.parametrize("protocol", ["messages", "responses"])
def test_oversize_and_deep_bodies_are_refused_in_the_protocols_shape(gw, fake_openai, capfd, protocol):
    path, _, header, kind = PROTOCOLS[protocol]
    key = gw.new_session("n1", "meta", [META])
    with socket.create_connection(("127.0.0.1", urlsplit(gw.url).port), timeout=30) as sock:
        sock.sendall(raw_request(path, b"", key, header, length=gw.gw.max_request_mb * 2**20 + 1))
        reply = sock.makefile("rb").read()  # answered at once, unread, and closed
    head, _, rest = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413") and b"Connection: close" in head
    assert kind(json.loads(rest)) == "request_too_large"
    status, _, answer = send(gw, path, b"[" * 200_000 + b"]" * 200_000, key, header)
    assert status == 400 and "not a JSON object" in json.dumps(answer)
    assert fake_openai.count == 0
    deep = json.loads('{"a":' * 900 + "1" + "}" * 900)  # as deep as a body may parse: translated and sent
    tool = {"name": "f", "input_schema": deep} if protocol == "messages" else {"type": "function", "name": "f",
                                                                                "parameters": deep}
    status, _, answer = send(gw, path, {**PROTOCOLS[protocol][1], "tools": [tool]}, key, header)
    assert status == 200 and fake_openai.count == 1
    assert "Traceback" not in capfd.readouterr().err


BAD_MESSAGES = [
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "system", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "system", "content": [{"type": "image"}]}]}, "messages[0].content[0].text"),
    ({"messages": [{"role": "system", "content": [{"type": "text", "text": "x", "cache_control": {"type": "x"}}]}]},
     "messages[0].content[0].cache_control"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}}]}]},
     "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages[0].content[0].text"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": 5}]}]},
     "messages[0].content[0].tool_use_id"),
    ({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "x", "input": "rm"}]}]},
     "messages[0].content[0].input"),
    ({"messages": [{"role": "user", "content": [{"type": "server_tool_use"}]}]}, "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": {"type": "text"}}]}, "messages[0].content"),
    ({"system": [{"type": "text", "text": "x", "cache_control": {"type": "persistent"}}]}, "system[0].cache_control"),
    ({"tools": [{"name": "x"}]}, "tools[0].input_schema"),
    ({"tools": [{"name": "x", "input_schema": {}}], "tool_choice": {"type": "all"}}, "tool_choice.type"),
    ({"max_tokens": "many"}, "max_tokens"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"temperature": float("nan")}, "temperature"),
    ({"stop_sequences": ["a"] * 50}, "stop"),
]
BAD_RESPONSES = [
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
    ({"input": [{"type": "message", "role": "tool", "content": "x"}]}, "input[0].role"),
    ({"input": [{"type": "message", "role": "user", "content": [{"type": "input_text"}]}]}, "input[0].content[0]"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "x", "arguments": {"a": 1}}]}, "arguments"),
    ({"input": [{"type": "function_call_output", "call_id": ["c"], "output": "x"}]}, "input[0].call_id"),
    ({"tools": [{"type": "hosted_shell"}]}, "tools[0].type"),
    ({"tools": [{"type": "function", "name": "f", "parameters": "{}"}]}, "tools[0].parameters"),
    ({"tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "file_search"}}, "tool_choice"),
    ({"tools": [{"type": "custom", "name": "f", "format": {"type": "grammar", "definition": 5}}]},
     "tools[0].format.definition"),
    ({"input": [{"type": "custom_tool_call", "call_id": "c", "name": "f", "input": ["x"]}]}, "input[0].input"),
    ({"instructions": ["x"]}, "instructions"),
    ({"max_output_tokens": -1}, "max_output_tokens"),
    ({"input": [{"type": "message", "role": "user", "content": "x"}] * 2, "top_p": 7}, "top_p"),
]


@pytest.mark.attack("malformed Messages blocks and Responses items (unknown kinds, wrong types, tool calls in "
                    "the wrong role, broken cache marks, system messages mid-conversation of other than text)")
@pytest.mark.parametrize(("protocol", "fields", "where"), [("messages", f, w) for f, w in BAD_MESSAGES]
                         + [("responses", f, w) for f, w in BAD_RESPONSES])
def test_malformed_requests_get_one_clear_400(gw, fake_openai, capfd, protocol, fields, where):
    path, body, header, kind = PROTOCOLS[protocol]
    key = gw.new_session("n1", "meta", [META])
    status, _, answer = send(gw, path, {**body, **fields}, key, header)
    assert status == 400 and kind(answer) == "invalid_request_error", answer
    assert where in answer["error"]["message"]
    assert fake_openai.count == 0 and gw.spent().refused == 1
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.attack("routing, credential and canned-answer fields, and hosted tools (web search, MCP servers), "
                    "in a Messages or Responses body")
@pytest.mark.parametrize("protocol", ["messages", "responses"])
def test_fields_the_protocols_do_not_read_never_reach_the_provider(gw, fake_openai, tripwire, protocol):  # noqa: F811
    path, body, header, _ = PROTOCOLS[protocol]
    key = gw.new_session("n1", "meta", [META])
    fake_openai.set_replies(["the provider's answer"])
    elsewhere = f"http://127.0.0.1:{tripwire.port}/v1"
    hosted = [{"type": "web_search"}, {"type": "mcp", "server_url": elsewhere}, {"type": "code_interpreter"}] \
        if protocol == "responses" else [{"type": "web_search_20250305", "name": "web_search"}]
    smuggled = {"api_base": elsewhere, "base_url": elsewhere, "api_key": "sk-mine", "mock_response": "canned",
                "extra_headers": {"x-evil": "1"}, "metadata": {"api_base": elsewhere}, "tools": hosted,
                "mcp_servers": [{"type": "url", "url": elsewhere, "name": "evil"}]}
    status, _, answer = send(gw, path, {**body, **smuggled}, key, header)
    assert status == 200 and "the provider's answer" in json.dumps(answer)
    sent = fake_openai.requests[-1]
    assert sent["headers"]["authorization"] == "Bearer sk-provider-secret-0123456789"
    assert "x-evil" not in sent["headers"] and "tools" not in sent["json"]
    assert set(sent["json"]) <= {"model", "messages", "max_tokens"}
    assert tripwire.connections == 0


@pytest.mark.attack("a model the run does not allow, asked through Messages, count_tokens or Responses")
@pytest.mark.parametrize("protocol", ["messages", "count_tokens", "responses"])
def test_a_model_outside_the_run_is_refused(gw, fake_openai, protocol):
    path, body, header, kind = PROTOCOLS[protocol]
    key = gw.new_session("n1", "meta", ["anthropic/claude-opus-4-1"])  # its role's model, not the run's
    status, _, answer = send(gw, path, {**body, "model": "anthropic/claude-opus-4-1"}, key, header)
    assert status == 403 and kind(answer) == "permission_error" and "not allowed in this run" in json.dumps(answer)
    assert fake_openai.count == 0


@pytest.mark.attack("a streamed Messages or Responses answer that the caller never reads, holding a gateway thread")
@pytest.mark.parametrize("protocol", ["messages", "responses"])
def test_a_stream_nobody_reads_frees_its_thread(gw, fake_openai, capfd, monkeypatch, protocol):
    monkeypatch.setattr(gateway_server, "READ_TIMEOUT_S", 1.0)
    fake_openai.set_replies(["x" * 8_000_000])
    path, body, header, _ = PROTOCOLS[protocol]
    key = gw.new_session("n1", "meta", [META])
    sock = socket.create_connection(("127.0.0.1", urlsplit(gw.url).port), timeout=30)
    sock.sendall(raw_request(path, json.dumps({**body, "stream": True}).encode(), key, header))
    log = gw.ledger.path.parent / "gateway.log"
    deadline = time.monotonic() + 15
    while not (log.exists() and "did not take its reply in time" in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "did not take its reply in time" in log.read_text()
    while gw._listeners._server.overall.open and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gw._listeners._server.overall.open == 0, "the handler still waits on the reader"
    sock.close()
    assert gw.spent().calls == 1 and "Traceback" not in capfd.readouterr().err
