"""The gateway's protocols for coding agents, end to end: Anthropic's Messages (Claude Code) and OpenAI's
Responses (Codex CLI), each sent as plain HTTP to a real gateway on 127.0.0.1 that forwards with litellm to
a fake provider (a fake Anthropic API with its prompt cache, or the fake OpenAI server), plain and streamed,
with tool calls, the ledger, the response cache and the caps; and each through its official SDK when it is
installed."""

import http.client
import json
from urllib.parse import urlsplit

import pytest

CLAUDE = "anthropic/claude-sonnet-4-5"
SYSTEM = "You edit agent code. " * 300  # past Sonnet's 1,024 tokens: cached
BASH = {"name": "bash", "description": "Run a command.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}
SHELL = {"type": "function", "name": "shell", "description": "Run a command.", "parameters": BASH["input_schema"]}


def post(gw, path: str, body: dict, headers: dict) -> tuple[int, dict, bytes]:
    """One request as a coding agent sends it; the status, headers and raw body."""
    conn = http.client.HTTPConnection("127.0.0.1", urlsplit(gw.url).port, timeout=60)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json", **headers})
        reply = conn.getresponse()
        return reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read()
    finally:
        conn.close()


def events(raw: bytes) -> list[tuple[str | None, dict | str]]:
    """A server-sent event stream parsed: (event name, JSON data, or chat's "[DONE]") per event."""
    found = []
    for chunk in raw.decode().split("\n\n"):
        name, data = None, []
        for line in chunk.splitlines():
            field, _, value = line.partition(": ")
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
        if data:
            text = "\n".join(data)
            found.append((name, text if text == "[DONE]" else json.loads(text)))
    return found


def anthropic(gw, key, body, path="/v1/messages"):
    status, headers, raw = post(gw, path, body, {"x-api-key": key, "anthropic-version": "2023-06-01"})
    return status, headers, (events(raw) if headers.get("content-type") == "text/event-stream" else json.loads(raw))


def openai(gw, key, body):
    status, headers, raw = post(gw, "/v1/responses", body, {"Authorization": f"Bearer {key}"})
    return status, headers, (events(raw) if headers.get("content-type") == "text/event-stream" else json.loads(raw))


@pytest.fixture
def claude(gateway_factory, fake_anthropic, monkeypatch):
    """A gateway that may call Claude at the fake Anthropic API, and a meta session's key for it."""
    monkeypatch.setenv("ANTHROPIC_API_BASE", fake_anthropic.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-provider-secret-0123456789")
    gw = gateway_factory()
    gw.allow_models(CLAUDE)
    return gw, gw.new_session("n1", "meta", [CLAUDE, "openai/fake"], max_calls=20)


def test_messages_tool_use_round_trip_is_booked_with_its_cache_tokens(claude, fake_anthropic):
    gw, key = claude
    fake_anthropic.set_replies([[{"type": "text", "text": "Looking."},
                                 {"type": "tool_use", "name": "bash", "input": {"command": "ls"}}], "Done."])
    body = {"model": CLAUDE, "max_tokens": 64000, "metadata": {"user_id": "u"}, "tools": [BASH],
            "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": "List the files."}]}
    status, _, first = anthropic(gw, key, body, "/v1/messages?beta=true")  # Claude Code's path
    assert status == 200, first
    text, use = first["content"]
    assert (text, first["stop_reason"]) == ({"type": "text", "text": "Looking."}, "tool_use")
    assert (use["type"], use["name"], use["input"]) == ("tool_use", "bash", {"command": "ls"})
    sent = fake_anthropic.requests[-1]["json"]
    assert sent["max_tokens"] == gw.gw.max_output_tokens  # lowered to the gateway's cap
    assert "metadata" not in sent and [t["name"] for t in sent["tools"]] == ["bash"]
    body["messages"] += [{"role": "assistant", "content": first["content"]}, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": use["id"], "content": [{"type": "text", "text": "a.py\n" * 900}]}]}]
    status, _, second = anthropic(gw, key, body)
    assert (status, second["content"], second["stop_reason"]) == (200, [{"type": "text", "text": "Done."}], "end_turn")
    [result] = [b for b in fake_anthropic.requests[-1]["json"]["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert result["tool_use_id"] == use["id"] and "a.py" in json.dumps(result["content"])
    rows = gw.ledger.calls()
    assert [(r["node"], r["role"], r["model"]) for r in rows] == [("n1", "meta", CLAUDE)] * 2
    for answer, usage, row in zip((first, second), fake_anthropic.usages, rows):
        assert answer["usage"] == {k: usage[k] for k in ("input_tokens", "output_tokens", "cache_read_input_tokens",
                                                         "cache_creation_input_tokens")}
        assert (row["cached_tokens"], row["cache_write_tokens"]) == (usage["cache_read_input_tokens"],
                                                                     usage["cache_creation_input_tokens"])
    assert second["usage"]["cache_read_input_tokens"] >= len(SYSTEM) // 4  # the system prompt, read back


def test_a_streamed_message_is_the_answer_as_anthropics_events(claude, fake_anthropic):
    gw, key = claude
    fake_anthropic.set_replies([[{"type": "text", "text": "Sure."},
                                 {"type": "tool_use", "name": "bash", "input": {"command": "pwd"}}]])
    body = {"model": CLAUDE, "max_tokens": 100, "temperature": 0, "tools": [BASH],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Where am I?"}]}]}
    status, headers, stream = anthropic(gw, key, {**body, "stream": True})
    assert status == 200 and float(headers["x-gateway-cost-usd"]) > 0
    names = [name for name, _ in stream]
    assert names == ["message_start", *["content_block_start", "content_block_delta", "content_block_stop"] * 2,
                     "message_delta", "message_stop"]
    assert [data["type"] for _, data in stream] == names
    deltas = [data["delta"] for name, data in stream if name == "content_block_delta"]
    assert deltas[0] == {"type": "text_delta", "text": "Sure."}
    assert json.loads(deltas[1]["partial_json"]) == {"command": "pwd"}
    assert stream[4][1]["content_block"]["name"] == "bash"
    assert stream[-2][1]["delta"]["stop_reason"] == "tool_use" and stream[-2][1]["usage"]["output_tokens"] > 0
    # The same request unstreamed is replayed from the response cache: one provider call for both.
    status, _, whole = anthropic(gw, key, body)
    assert status == 200 and whole["id"] == stream[0][1]["message"]["id"] and fake_anthropic.count == 1
    assert [r["cache_hit"] for r in gw.ledger.calls()] == [0, 1]


def test_responses_function_call_round_trip_streamed(claude, fake_anthropic):
    """Codex's requests (always streamed, store false) on a Claude model: a function_call, then its output."""
    gw, key = claude
    fake_anthropic.set_replies([[{"type": "tool_use", "name": "shell", "input": {"command": "ls"}}], "All done."])
    body = {"model": CLAUDE, "instructions": "You are a coding agent.", "stream": True, "store": False,
            "tools": [SHELL, {"type": "web_search"}], "tool_choice": "auto", "parallel_tool_calls": False,
            "include": ["reasoning.encrypted_content"], "prompt_cache_key": "abc", "reasoning": {"effort": "high"},
            "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List."}]}]}
    status, _, stream = openai(gw, key, body)
    assert status == 200
    names = [name for name, _ in stream]
    assert names == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.function_call_arguments.delta", "response.function_call_arguments.done",
                     "response.output_item.done", "response.completed"]
    assert [data["sequence_number"] for _, data in stream] == list(range(len(stream)))
    call = stream[-2][1]["item"]
    assert (call["type"], call["name"], json.loads(call["arguments"])) == ("function_call", "shell", {"command": "ls"})
    sent = fake_anthropic.requests[-1]["json"]
    assert [t["name"] for t in sent["tools"]] == ["shell"]  # web_search left out
    assert sent["system"][0]["text"] == "You are a coding agent." and "thinking" not in sent
    body["input"] += [{"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"}, call,
                      {"type": "function_call_output", "call_id": call["call_id"], "output": "a.py"}]
    status, _, stream = openai(gw, key, body)
    done = stream[-1][1]["response"]
    assert (status, done["status"], done["output"][0]["content"][0]["text"]) == (200, "completed", "All done.")
    assert [n for n, _ in stream][2:8] == ["response.output_item.added", "response.content_part.added",
                                            "response.output_text.delta", "response.output_text.done",
                                            "response.content_part.done", "response.output_item.done"]
    messages = fake_anthropic.requests[-1]["json"]["messages"]
    assert messages[1]["content"][0]["type"] == "tool_use"
    assert messages[2]["content"][0]["tool_use_id"] == call["call_id"]
    used, [_, row] = done["usage"], gw.ledger.calls()
    assert (used["input_tokens"], used["output_tokens"]) == (row["prompt_tokens"], row["completion_tokens"])


def test_a_freeform_tool_is_a_function_of_its_text(claude, fake_anthropic):
    """Codex's apply_patch for GPT-5 models: a `custom` tool with a grammar, called with free text."""
    gw, key = claude
    patch = "*** Begin Patch\n*** Add File: a.py\n+x = 1\n*** End Patch"
    fake_anthropic.set_replies([[{"type": "tool_use", "name": "apply_patch", "input": {"input": patch}}], "Done."])
    tool = {"type": "custom", "name": "apply_patch", "description": "Edit files.",
            "format": {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch hunk+ end_patch"}}
    body = {"model": CLAUDE, "stream": True, "tools": [tool, SHELL], "input": "Add a.py."}
    status, _, stream = openai(gw, key, body)
    assert status == 200 and [n for n, _ in stream][3:5] == ["response.custom_tool_call_input.delta",
                                                            "response.custom_tool_call_input.done"]
    call = stream[-2][1]["item"]
    assert (call["type"], call["name"], call["input"]) == ("custom_tool_call", "apply_patch", patch)
    [sent] = [t for t in fake_anthropic.requests[-1]["json"]["tools"] if t["name"] == "apply_patch"]
    assert sent["input_schema"]["required"] == ["input"] and "start: begin_patch" in sent["description"]
    body["input"] = [{"type": "message", "role": "user", "content": "Add a.py."}, call,
                     {"type": "custom_tool_call_output", "call_id": call["call_id"], "output": "Success."}]
    status, _, stream = openai(gw, key, {**body, "stream": False})
    assert status == 200 and stream["output"][0]["content"][0]["text"] == "Done."
    assistant, result = fake_anthropic.requests[-1]["json"]["messages"][1:3]
    assert assistant["content"][0]["input"] == {"input": patch} and result["content"][0]["content"] == "Success."


def test_responses_plain_answer_and_its_output_cap(gateway_factory, fake_openai):
    fake_openai.set_replies(["Hello there."])
    gw = gateway_factory()
    key = gw.new_session("n2", "meta", ["openai/fake"])
    status, _, answer = openai(gw, key, {"model": "openai/fake", "input": "Hi", "max_output_tokens": 10**9})
    assert (status, answer["object"], answer["status"]) == (200, "response", "completed")
    assert answer["output"][0]["content"][0] == {"type": "output_text", "text": "Hello there.", "annotations": []}
    assert fake_openai.requests[-1]["json"]["max_tokens"] == gw.gw.max_output_tokens
    assert fake_openai.requests[-1]["json"]["messages"] == [{"role": "user", "content": "Hi"}]
    [row] = gw.ledger.calls()
    assert (row["role"], answer["usage"]["input_tokens"], answer["usage"]["output_tokens"]) == (
        "meta", row["prompt_tokens"], row["completion_tokens"])


def test_kept_responses_are_refused_in_openais_shape(gateway_factory, fake_openai):
    gw = gateway_factory()
    key = gw.new_session("n", "meta", ["openai/fake"])
    for field in ({"previous_response_id": "resp_1"}, {"conversation": "conv_1"}, {"background": True}):
        status, _, answer = openai(gw, key, {"model": "openai/fake", "input": "Hi", **field})
        assert status == 400 and "send the whole conversation" in answer["error"]["message"]
    assert fake_openai.count == 0


def test_count_tokens_is_estimated_without_a_call_or_a_cap(claude, fake_anthropic):
    gw, key = claude
    body = {"model": CLAUDE, "messages": [{"role": "user", "content": "x" * 4000}], "tools": [BASH]}
    status, _, counted = anthropic(gw, key, body, "/v1/messages/count_tokens?beta=true")
    assert status == 200 and 1000 < counted["input_tokens"] < 1200
    assert fake_anthropic.count == 0 and gw.ledger.calls() == [] and gw.session_counts(key).calls == 0


def test_caps_refuse_in_each_protocols_shape(claude, fake_anthropic):
    gw, _ = claude
    key = gw.new_session("n3", "meta", [CLAUDE], max_calls=1)
    message = {"model": CLAUDE, "max_tokens": 50, "messages": [{"role": "user", "content": "Hi"}]}
    assert anthropic(gw, key, message)[0] == 200
    status, headers, refused = anthropic(gw, key, {**message, "stream": True})
    assert (status, refused["type"], refused["error"]["type"]) == (429, "error", "rate_limit_error")
    assert "limit of 1 model calls" in refused["error"]["message"] and headers["x-should-retry"] == "false"
    status, headers, refused = openai(gw, key, {"model": CLAUDE, "input": "Hi", "stream": True})
    assert (status, refused["error"]["type"], headers["x-should-retry"]) == (429, "call_limit_reached", "false")
    status, _, refused = anthropic(gw, key, {**message, "model": "openai/fake"})  # not this role's model
    assert (status, refused["error"]["type"]) == (403, "permission_error")
    assert fake_anthropic.count == 1 and gw.spent().refused == 3


def test_the_budget_refuses_in_each_protocols_shape(gateway_factory, fake_openai):
    gw = gateway_factory(budget_tokens=10)  # less than any call's worst case
    key = gw.new_session("n", "meta", ["openai/fake"])
    status, headers, refused = anthropic(gw, key, {"model": "openai/fake", "max_tokens": 50, "stream": True,
                                                   "messages": [{"role": "user", "content": "Hi"}]})
    assert (status, refused["error"]["type"], headers["x-should-retry"]) == (402, "billing_error", "false")
    status, _, refused = openai(gw, key, {"model": "openai/fake", "input": "Hi", "stream": True})
    assert (status, refused["error"]["type"]) == (402, "budget_exceeded") and fake_openai.count == 0


def test_what_other_providers_cannot_read_is_left_out_or_noted(gateway_factory, fake_openai):
    """Thinking blocks of earlier turns go; an image or a failed tool's result is said in text."""
    gw = gateway_factory()
    key = gw.new_session("n", "meta", ["openai/fake"])
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    body = {"model": "openai/fake", "max_tokens": 50, "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Look:"}, image]},
                         {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": "s"},
                                                           {"type": "tool_use", "id": "t1", "name": "cat",
                                                            "input": {"path": "a.png"}}]},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": True,
                                                       "content": [{"type": "text", "text": "no such file"}]}]}]}
    assert anthropic(gw, key, body)[0] == 200
    sent = fake_openai.requests[-1]["json"]
    assert sent["messages"][0]["content"][1]["text"] == "[image left out: the gateway forwards text only]"
    assert sent["messages"][1].get("content") is None and sent["messages"][1]["tool_calls"][0]["id"] == "t1"
    assert sent["messages"][2] == {"role": "tool", "tool_call_id": "t1", "content": "Error: no such file"}
    assert "thinking" not in json.dumps(sent) and "reasoning_effort" not in sent


def test_a_system_message_in_the_conversation_stays_in_its_place(gateway_factory, fake_openai):
    """Claude Code says its environment as a system message after the user's first one (as text blocks, one
    with a cache mark): it reaches the provider as a system message where it was, after the request's system."""
    gw = gateway_factory()
    key = gw.new_session("n", "meta", ["openai/fake"])
    body = {"model": "openai/fake", "max_tokens": 50, "system": "You are a coding agent.",
            "messages": [{"role": "user", "content": "Fix the bug."},
                         {"role": "system", "content": [{"type": "text", "text": "# Environment\ncwd: /workspace",
                                                         "cache_control": {"type": "ephemeral"}}]},
                         {"role": "system", "content": ""}]}
    assert anthropic(gw, key, body)[0] == 200
    sent = fake_openai.requests[-1]["json"]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "system"]  # an empty one is left out
    assert sent[2]["content"] == [{"type": "text", "text": "# Environment\ncwd: /workspace"}]  # no mark: not Claude


def test_the_sdks_drive_both_protocols(claude, fake_anthropic):
    """Anthropic's and OpenAI's own clients, pointed at the gateway, plain and streamed."""
    anthropic_sdk = pytest.importorskip("anthropic")
    openai_sdk = pytest.importorskip("openai")
    gw, key = claude
    fake_anthropic.set_replies([[{"type": "tool_use", "name": "bash", "input": {"command": "ls"}}], "Fine."])
    base = gw.url.removesuffix("/v1")
    client = anthropic_sdk.Anthropic(api_key=key, base_url=base, max_retries=0)
    reply = client.messages.create(model=CLAUDE, max_tokens=100, tools=[BASH],
                                   messages=[{"role": "user", "content": "Look."}])
    assert reply.stop_reason == "tool_use" and reply.content[0].input == {"command": "ls"}
    with client.messages.stream(model=CLAUDE, max_tokens=100, messages=[{"role": "user", "content": "Again."}]) as s:
        assert "".join(s.text_stream) == "Fine." and s.get_final_message().usage.output_tokens > 0
    responses = openai_sdk.OpenAI(api_key=key, base_url=gw.url, max_retries=0).responses
    assert responses.create(model=CLAUDE, input="Hi").output_text == "Fine."
    with responses.stream(model=CLAUDE, input="Once more.") as stream:
        assert stream.get_final_response().output_text == "Fine."
    bearer = anthropic_sdk.Anthropic(auth_token=key, base_url=base, max_retries=0)  # ANTHROPIC_AUTH_TOKEN's way
    assert bearer.messages.count_tokens(model=CLAUDE, messages=[{"role": "user", "content": "Hi"}]).input_tokens > 0
    with pytest.raises(anthropic_sdk.AuthenticationError):
        anthropic_sdk.Anthropic(api_key="gw-" + "x" * 32, base_url=base, max_retries=0).messages.create(
            model=CLAUDE, max_tokens=10, messages=[{"role": "user", "content": "Hi"}])
    assert [r["role"] for r in gw.ledger.calls()] == ["meta"] * 4



def test_chat_completions_stream_as_chunks(claude, fake_anthropic):
    """OpenAI's SDK and litellm, streaming chat completions: the text, a tool call, the usage, and [DONE]."""
    openai_sdk = pytest.importorskip("openai")
    import litellm

    gw, key = claude
    fake_anthropic.set_replies(["Streamed words.", [{"type": "tool_use", "name": "bash", "input": {"command": "ls"}}]])
    client = openai_sdk.OpenAI(api_key=key, base_url=gw.url, max_retries=0)
    parts = list(client.chat.completions.create(model=CLAUDE, stream=True, stream_options={"include_usage": True},
                                                messages=[{"role": "user", "content": "Say it."}]))
    assert "".join(p.choices[0].delta.content or "" for p in parts if p.choices) == "Streamed words."
    assert {"stream", "stream_options"}.isdisjoint(fake_anthropic.requests[-1]["json"])  # read here, never sent
    assert parts[-1].choices[0].finish_reason == "stop" and parts[-1].usage.completion_tokens > 0
    tools = [{"type": "function", "function": {"name": "bash", "parameters": BASH["input_schema"]}}]
    stream = litellm.completion(model=f"openai/{CLAUDE}", api_base=gw.url, api_key=key, stream=True, tools=tools,
                                messages=[{"role": "user", "content": "List."}])
    calls = [c for part in stream for c in (part.choices[0].delta.tool_calls or [])]
    assert calls[0].function.name == "bash" and json.loads(calls[0].function.arguments) == {"command": "ls"}
    status, headers, raw = post(gw, "/v1/chat/completions", {"model": CLAUDE, "stream": "yes", "messages": [
        {"role": "user", "content": "Hi"}]}, {"Authorization": f"Bearer {key}"})
    assert status == 400 and "'stream'" in json.loads(raw)["error"]["message"]
    assert [r["role"] for r in gw.ledger.calls()] == ["meta"] * 2


class _Door:
    """What services/sandbox/ray_host.Door does, with the Mailbox and the channel's thread taken out: each
    request forwarded as the controller's channel forwards it (ray_channel.forward) to the gateway's socket."""

    def __init__(self, socket_path, config):
        from services.sandbox.ray_channel import forward

        self.forward, self.socket_path, self.gw = forward, str(socket_path), config

    def handle(self, protocol, api_key, body):
        from services.gateway.inbound import Reply

        return Reply(*self.forward(self.socket_path, protocol, api_key, body, 30))

    def refuse(self, api_key, status, message, kind):
        from services.gateway.inbound import error_reply

        return error_reply(status, message, kind)

    def models_for(self, api_key):
        return []


def test_a_ray_nodes_door_asks_for_json_and_streams_on_the_node(claude, fake_anthropic, tmp_path):
    pytest.importorskip("ray")
    from services.gateway.server import Listeners

    gw, key = claude
    node = Listeners(_Door(gw.unix_socket, gw.gw), "127.0.0.1", 0, tmp_path / "door.log")
    try:
        body = {"model": CLAUDE, "max_tokens": 50, "stream": True, "messages": [{"role": "user", "content": "Hi"}]}
        status, headers, stream = anthropic(node, key, body)
    finally:
        node.close()
    assert status == 200 and headers["content-type"] == "text/event-stream"
    assert [name for name, _ in stream][-1] == "message_stop" and float(headers["x-gateway-cost-usd"]) > 0
    assert [r["role"] for r in gw.ledger.calls()] == ["meta"]


@pytest.mark.parametrize("protocol", ["messages", "responses", "chat"])
def test_an_answer_no_utf_8_can_hold_still_streams(gateway_factory, fake_openai, protocol):
    """A model can be asked to write a lone surrogate (JSON's "\\ud800"): the stream escapes it."""
    fake_openai.set_replies(["half \ud800 of a pair"])
    gw = gateway_factory()
    key = gw.new_session("n", "meta", ["openai/fake"])
    body, path = {"model": "openai/fake", "stream": True, "max_tokens": 20}, f"/v1/{protocol}"
    body.update(input="Hi") if protocol == "responses" else body.update(messages=[{"role": "user", "content": "Hi"}])
    status, headers, raw = post(gw, "/v1/chat/completions" if protocol == "chat" else path, body,
                                {"Authorization": f"Bearer {key}"})
    assert status == 200 and raw.isascii()
    assert "half \ud800 of a pair" in json.dumps(events(raw), ensure_ascii=False)
