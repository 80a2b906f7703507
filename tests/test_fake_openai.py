import json
import threading
import time
import urllib.error
import urllib.request

import litellm
import pytest

from support.fake_openai import DEFAULT_REPLY, FakeOpenAI

litellm.suppress_debug_info = True

MESSAGES = [{"role": "user", "content": "What is two plus two? Answer briefly."}]


def complete(server, **kwargs):
    return litellm.completion(
        model="openai/fake-model", api_base=server.base_url, api_key="sk-test",
        messages=kwargs.pop("messages", MESSAGES), num_retries=0, **kwargs,
    )


def test_default_reply_and_usage(fake_openai):
    response = complete(fake_openai)
    content = response.choices[0].message.content
    assert content == DEFAULT_REPLY
    assert response.choices[0].finish_reason == "stop"
    prompt_tokens = max(1, len(MESSAGES[0]["content"]) // 4)
    completion_tokens = max(1, len(DEFAULT_REPLY) // 4)
    assert response.usage.prompt_tokens == prompt_tokens
    assert response.usage.completion_tokens == completion_tokens
    assert response.usage.total_tokens == prompt_tokens + completion_tokens
    assert fake_openai.count == 1


def test_replies_served_in_order_then_last_repeats(fake_openai):
    fake_openai.set_replies(["one", "two"])
    got = [complete(fake_openai).choices[0].message.content for _ in range(4)]
    assert got == ["one", "two", "two", "two"]


def post_chat(url, body):
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as resp:
        return json.load(resp)


def test_responder_sees_request_and_response_format_is_recorded(fake_openai):
    fake_openai.set_responder(lambda req: req["messages"][-1]["content"].upper())
    response = complete(fake_openai, messages=[{"role": "user", "content": "echo"}],
                        response_format={"type": "json_object"})
    assert response.choices[0].message.content == "ECHO"
    record = fake_openai.requests[-1]
    assert record["path"] == "/v1/chat/completions"
    assert record["fault"] is None
    assert record["json"]["model"] == "fake-model"
    assert record["json"]["response_format"] == {"type": "json_object"}
    assert record["headers"]["authorization"] == "Bearer sk-test"
    assert isinstance(record["time"], float)


def test_tools_are_ignored_but_recorded(fake_openai):
    # Sent over plain HTTP: litellm 1.106 imports the optional `mcp` package
    # whenever `tools` is passed, and that package is not a dependency here.
    tools = [{"type": "function", "function": {
        "name": "add", "parameters": {"type": "object", "properties": {}}}}]
    body = post_chat(fake_openai.base_url + "/chat/completions",
                     {"model": "m", "messages": MESSAGES, "tools": tools})
    assert body["choices"][0]["message"]["content"] == DEFAULT_REPLY
    assert fake_openai.requests[-1]["json"]["tools"] == tools


def test_models_endpoint_and_unprefixed_chat_path(fake_openai):
    with urllib.request.urlopen(fake_openai.base_url + "/models", timeout=5) as resp:
        assert json.load(resp)["data"][0]["id"] == "fake-model"
    root = fake_openai.base_url[: -len("/v1")]
    body = post_chat(root + "/chat/completions", {"model": "m", "messages": MESSAGES})
    assert body["object"] == "chat.completion"
    assert body["model"] == "m"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": DEFAULT_REPLY}


@pytest.mark.parametrize("fault, error", [
    ("429", litellm.RateLimitError),
    ("500", litellm.InternalServerError),
    ("503", litellm.ServiceUnavailableError),
    ("malformed", litellm.InternalServerError),
    ("disconnect", litellm.InternalServerError),
])
def test_fault_maps_to_litellm_exception(fake_openai, fault, error):
    fake_openai.add_faults([fault])
    with pytest.raises(error):
        complete(fake_openai)
    assert [r["fault"] for r in fake_openai.requests] == [fault]
    assert fake_openai.count == 0
    # The fault is consumed: the next request is answered normally.
    assert complete(fake_openai).choices[0].message.content == DEFAULT_REPLY


def test_rate_limit_response_shape(fake_openai):
    fake_openai.add_faults(["429"])
    request = urllib.request.Request(
        fake_openai.base_url + "/chat/completions",
        data=json.dumps({"model": "m", "messages": MESSAGES}).encode(),
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=5)
    assert info.value.code == 429
    assert info.value.headers["Retry-After"] == "0"
    assert json.load(info.value)["error"]["type"] == "rate_limit_error"


def test_empty_fault_gives_empty_content(fake_openai):
    fake_openai.add_faults(["empty"])
    assert complete(fake_openai).choices[0].message.content == ""
    assert fake_openai.count == 1


def test_slow_fault_delays_then_answers(fake_openai):
    fake_openai.add_faults(["slow:0.3"])
    start = time.monotonic()
    assert complete(fake_openai).choices[0].message.content == DEFAULT_REPLY
    assert time.monotonic() - start >= 0.3


def test_faults_are_fifo(fake_openai):
    fake_openai.add_faults(["500", "429"])
    with pytest.raises(litellm.InternalServerError):
        complete(fake_openai)
    with pytest.raises(litellm.RateLimitError):
        complete(fake_openai)
    assert fake_openai.pending_faults() == []


def test_unknown_fault_is_rejected(fake_openai):
    with pytest.raises(ValueError):
        fake_openai.add_faults(["418"])


def test_latency_is_served_concurrently(fake_openai):
    complete(fake_openai)  # warm litellm's client cache outside the timed part
    fake_openai.latency = 0.3
    results, errors = [], []

    def call():
        try:
            results.append(complete(fake_openai).choices[0].message.content)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(10)]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - start
    assert errors == []
    assert results == [DEFAULT_REPLY] * 10
    assert 0.3 <= elapsed < 0.8 * 10 * 0.3  # one at a time would take 3 s at the least, however loaded the machine
    assert fake_openai.count == 11


def test_standalone_start_stop():
    server = FakeOpenAI(responder=lambda req: "standalone")
    server.start()
    try:
        assert server.base_url.startswith("http://127.0.0.1:")
        assert complete(server).choices[0].message.content == "standalone"
    finally:
        server.stop()
    with pytest.raises(RuntimeError):
        _ = server.base_url
