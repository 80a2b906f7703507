"""The gateway under attack, round 3: session lifetimes and roles, a bounded gateway, refusal floods,
and the cache as an oracle.

A real gateway (conftest's `gateway_factory`, forwarding to the fake provider) is reached through
its real listeners: its HTTP port and the Unix socket sandboxes are given, and, where a sandbox is
the point, from inside a real sandbox through its relay. Each attack asserts that nothing reached
the provider or another session that should not have, that nothing was printed on the terminal
(no traceback), and that the gateway recorded the attack (a refusal count, a line in gateway.log).
"""

import http.client
import json
import socket
import threading
import time
from urllib.parse import urlsplit

import pytest

from domains.harness import worker_env
from services.config import SandboxConfig
from services.gateway import server as gateway_server
from services.sandbox import open_sandbox
from support.backends import BACKENDS

TASK, META = "openai/fake", "openai/fake-meta"


def chat(model: str = TASK, content: str = "hello", **fields) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": content}], **fields}


def request_bytes(body: dict, key: str) -> bytes:
    data = json.dumps(body).encode()
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (key.encode(), len(data), data))


def unix_connect(gw, timeout: float = 30) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(gw.unix_socket))
    sock.settimeout(timeout)
    return sock


def read_reply(f) -> tuple[int, dict, dict] | None:
    """One HTTP reply from the file `f` of a socket: (status, headers, JSON body), None at EOF."""
    status = f.readline()
    if not status:
        return None
    headers = {}
    while (line := f.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status.split()[1]), headers, json.loads(f.read(int(headers.get("content-length", 0))))


def unix_post(gw, body: dict, key: str) -> tuple[int, dict, dict]:
    with unix_connect(gw) as sock, sock.makefile("rb") as f:
        sock.sendall(request_bytes(body, key))
        return read_reply(f)


def http_post(gw, body: dict, key: str) -> tuple[int, dict, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", urlsplit(gw.url).port, timeout=30)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Authorization": f"Bearer {key}"})
        reply = conn.getresponse()
        return reply.status, {k.lower(): v for k, v in reply.getheaders()}, json.loads(reply.read())
    finally:
        conn.close()


def open_connections(gw) -> int:
    """Connections the gateway's listeners hold open (each with a thread)."""
    return gw._listeners._unix_server.overall.open


def wait_until(check, seconds: float = 10.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.05)
    return check()


@pytest.fixture
def gw(gateway_factory):
    gateway = gateway_factory()
    gateway.allow_models(META)
    return gateway


SANDBOXED_CALL = """
import json, os, urllib.request
body = json.dumps({"model": os.environ["MODEL"], "messages": [{"role": "user", "content": "hi"}]}).encode()
request = urllib.request.Request(os.environ["AGENT_GATEWAY_URL"] + "/chat/completions", body,
                                 {"Authorization": "Bearer " + os.environ["AGENT_GATEWAY_KEY"]})
try:
    print(urllib.request.urlopen(request, timeout=30).status)
except urllib.error.HTTPError as e:
    print(e.code, json.loads(e.read())["error"]["message"])
"""


def call_from_a_sandbox(gw, box, key: str, model: str = TASK) -> str:
    env = {**worker_env(box, box.gateway_url, key, (model,)), "MODEL": model}
    result = box.run([box.python, "-c", SANDBOXED_CALL], env, timeout=60)
    assert result.ok, result.stderr[-2000:]
    return result.stdout.strip()


@pytest.mark.e2e
@pytest.mark.attack("a session key used after its sandbox closed, directly and through the relay of a later "
                    "sandbox (a key leaked to another node's meta agent)")
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_key_dies_with_its_sandbox(gw, fake_openai, tmp_path, capfd, backend):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with open_sandbox(SandboxConfig(), tmp_path / "a", [], gw.unix_socket, backend) as box:
        key = gw.new_session("n1", "task", [TASK], sandbox=box)
        assert call_from_a_sandbox(gw, box, key) == "200"
    assert unix_post(gw, chat(), key)[0] == 401 and http_post(gw, chat(), key)[0] == 401
    with open_sandbox(SandboxConfig(), tmp_path / "b", [], gw.unix_socket, backend) as later:
        gw.new_session("n2", "meta", [META], max_calls=3, sandbox=later)
        answers = [call_from_a_sandbox(gw, later, key) for _ in range(5)]
    assert answers == ["401 this gateway key was revoked: its sandbox closed"] * 5
    assert fake_openai.count == 1 and gw.session_counts(key).answered == 1  # nothing booked to n1 after its close
    refused = [(r["node"], r["role"], r["reason"], r["count"]) for r in gw.ledger.refusals()]
    assert refused == [("n1", "task", "401 authentication_error", 7)]
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.attack("a task agent's key calling the meta agent's model, and a meta key the task model")
def test_a_session_calls_only_its_roles_models(gw, fake_openai, capfd):
    task, meta = gw.new_session("n1", "task", [TASK]), gw.new_session("n1", "meta", [META], max_calls=3)
    for key, role, other, own in ((task, "task", META, TASK), (meta, "meta", TASK, META)):
        for _ in range(10):
            status, _, answer = unix_post(gw, chat(other), key)
            assert status == 403
        assert answer["error"]["message"] == (f"model {other!r} is not allowed for this key: role {role} may call "
                                              f"only {own}")
        assert unix_post(gw, chat(own), key)[0] == 200
    assert fake_openai.count == 2 and [r["json"]["model"] for r in fake_openai.requests] == ["fake", "fake-meta"]
    assert {(r["role"], r["reason"], r["count"]) for r in gw.ledger.refusals()} == {
        ("task", "403 permission_error", 10), ("meta", "403 permission_error", 10)}
    assert gw.session_counts(meta).calls == 1  # refused calls do not use up the meta agent's cap
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.e2e
@pytest.mark.attack("3,000 half-open connections to the gateway's Unix socket and port (a thread each)")
def test_a_connection_flood_is_bounded_and_quiet(gw, fake_openai, capfd, monkeypatch):
    key = gw.new_session("n1", "task", [TASK])
    before = threading.active_count()
    floods = []
    for connect in (lambda: unix_connect(gw, 5), lambda: socket.create_connection(("127.0.0.1",
                                                                                  urlsplit(gw.url).port), 5)):
        floods += [connect() for _ in range(1500)]
    time.sleep(1)
    during = threading.active_count()
    turned_away = floods[-1].recv(4096)
    assert during - before <= gateway_server.MAX_CONNECTIONS_PER_LISTENER * 2 + 4, (before, during)
    assert turned_away.startswith(b"HTTP/1.1 503 ") and b"Retry-After: 1" in turned_away
    for sock in floods:
        sock.close()
    assert wait_until(lambda: threading.active_count() <= before + 2), threading.active_count()
    assert unix_post(gw, chat(), key)[0] == 200 and http_post(gw, chat(), key)[0] == 200
    log = (gw.ledger.path.parent / "gateway.log").read_text()
    assert "turned a connection away: its Unix socket has 256 open" in log and "Traceback" not in log
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.attack("slowloris: a request's headers sent a byte at a time, and connections that never send one")
def test_slow_requests_are_cut_at_their_deadline(gw, fake_openai, capfd, monkeypatch):
    monkeypatch.setattr(gateway_server, "READ_TIMEOUT_S", 1.0)
    monkeypatch.setattr(gateway_server, "IDLE_TIMEOUT_S", 1.5)
    key = gw.new_session("n1", "task", [TASK])
    idle = unix_connect(gw, 10)
    slow = unix_connect(gw, 10)
    line, rest = request_bytes(chat(), key).split(b"\r\n", 1)
    slow.sendall(line + b"\r\n")
    started = time.monotonic()
    closed_after = None
    try:
        for byte in rest:
            slow.sendall(bytes([byte]))
            time.sleep(0.1)
    except OSError:
        closed_after = time.monotonic() - started
    assert closed_after is not None and closed_after < 4, closed_after
    assert idle.recv(10) == b""  # the idle one is closed too, with nothing sent
    assert fake_openai.count == 0 and unix_post(gw, chat(), key)[0] == 200
    log = (gw.ledger.path.parent / "gateway.log").read_text()
    assert "did not send its request in time" in log and "did not start a request in time" in log
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.attack("a caller that never reads its (large) reply, holding a gateway thread")
def test_a_reply_nobody_takes_frees_its_thread_and_stays_paid_for(gw, fake_openai, capfd, monkeypatch):
    monkeypatch.setattr(gateway_server, "READ_TIMEOUT_S", 1.0)
    fake_openai.set_replies(["x" * 8_000_000])
    key = gw.new_session("n1", "task", [TASK])
    sock = unix_connect(gw)
    sock.sendall(request_bytes(chat(temperature=0), key))
    log = gw.ledger.path.parent / "gateway.log"
    assert wait_until(lambda: log.exists() and "did not take its reply in time" in log.read_text(), 15)
    assert wait_until(lambda: open_connections(gw) == 0), "the handler still waits on the reader"
    sock.close()
    assert gw.spent().calls == 1  # paid for and booked; the answer is cached for the same session
    status, headers, answer = unix_post(gw, chat(temperature=0), key)
    assert status == 200 and len(answer["choices"][0]["message"]["content"]) == 8_000_000 and fake_openai.count == 1
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.e2e
@pytest.mark.attack("a flood of refused requests through the Unix socket, to fill the host's disk with ledger rows")
def test_a_refusal_flood_writes_one_counted_row(gw, fake_openai, capfd):
    key = gw.new_session("n1", "task", [TASK])
    sent = closed = 0
    end = time.monotonic() + 3
    while time.monotonic() < end:
        with unix_connect(gw) as sock, sock.makefile("rb") as f:
            while time.monotonic() < end:
                sock.sendall(request_bytes(chat("openai/not-mine"), key))
                sent += 1
                status, headers, _ = read_reply(f)
                assert status == 403
                if headers.get("connection") == "close":
                    closed += 1
                    break
    assert sent > 500 and closed > 0  # past the rate, the gateway closes the connection
    assert unix_post(gw, chat(), key)[0] == 200  # the flooder's own honest call still goes through
    gw.stop()
    [row] = gw.ledger.refusals()
    assert (row["node"], row["role"], row["reason"], row["count"]) == ("n1", "task", "403 permission_error", sent)
    assert [c["error"] for c in gw.ledger.calls()] == [None]
    assert gw.ledger.totals().refused == sent and gw.spent().refused == sent
    ledger = gw.ledger.path
    assert sum(p.stat().st_size for p in ledger.parent.glob(ledger.name + "*")) < 5 * 2**20
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.attack("cache as an oracle: a meta session learning whether another session sent a prompt")
def test_replies_say_nothing_of_other_sessions_prompts(gw, fake_openai):
    task, meta = gw.new_session("n1", "task", [TASK]), gw.new_session("n2", "meta", [TASK])
    first = http_post(gw, chat(content="the secret row", temperature=0), task)
    again = http_post(gw, chat(content="the secret row", temperature=0), task)
    probe = http_post(gw, chat(content="the secret row", temperature=0), meta)
    assert [r[0] for r in (first, again, probe)] == [200, 200, 200]
    assert fake_openai.count == 2  # the other session's identical prompt was not answered from the cache
    for _status, headers, _ in (first, again, probe):
        assert not [h for h in headers if "cache" in h], headers
    assert first[1]["x-gateway-cost-usd"] == probe[1]["x-gateway-cost-usd"]  # both paid (0 on the fake's prices)
    assert [c["cache_hit"] for c in gw.ledger.calls()] == [0, 1, 0]  # the ledger knows


@pytest.mark.attack("a session key of another run's gateway (read from that run's folder)")
def test_another_runs_key_is_unknown_here(gateway_factory, fake_openai):
    other, here = gateway_factory("other"), gateway_factory("here")
    stolen = other.new_session("n1", "task", [TASK])
    status, _, answer = unix_post(here, chat(), stolen)
    assert (status, answer["error"]["message"]) == (401, "unknown gateway key") and fake_openai.count == 0
    assert [(r["node"], r["role"]) for r in here.ledger.refusals()] == [("unknown", "unknown")]
    assert other.ledger.refusals() == [] and here.ledger.calls() == []


@pytest.mark.attack("pipelined requests on one connection mixing a valid key with a revoked one and another "
                    "role's model")
def test_pipelined_requests_are_each_judged_on_their_own_key(gw, fake_openai):
    key, revoked = gw.new_session("n1", "task", [TASK]), gw.new_session("n0", "task", [TASK])
    gw.revoke(revoked)
    with unix_connect(gw) as sock, sock.makefile("rb") as f:
        sock.sendall(request_bytes(chat(), key) + request_bytes(chat(), revoked) + request_bytes(chat(META), key)
                     + request_bytes(chat(), key))
        statuses = [read_reply(f)[0] for _ in range(4)]
    assert statuses == [200, 401, 403, 200] and fake_openai.count == 2
    assert gw.session_counts(revoked).calls == 0 and gw.session_counts(key).answered == 2
    assert {(r["node"], r["reason"]) for r in gw.ledger.refusals()} == {("n0", "401 authentication_error"),
                                                                        ("n1", "403 permission_error")}


@pytest.mark.attack("more choices than gateway.max_n asked through other fields (best_of, extra_body, n as text)")
@pytest.mark.parametrize("fields, named", [({"best_of": 50}, "best_of"), ({"extra_body": {"n": 50}}, "extra_body"),
                                           ({"n": "50"}, "n"), ({"n": 1, "num_completions": 50}, "num_completions")])
def test_choices_cannot_be_multiplied_by_another_field(gw, fake_openai, fields, named):
    key = gw.new_session("n1", "task", [TASK])
    status, _, answer = unix_post(gw, chat(**fields), key)
    assert status == 400 and repr(named) in answer["error"]["message"] and fake_openai.count == 0


@pytest.mark.attack("GET /v1/models without a key, with a revoked key, or with another role's key, to learn the "
                    "run's other models")
def test_the_model_list_is_the_callers_own(gw, fake_openai, capfd):
    task, meta = gw.new_session("n1", "task", [TASK]), gw.new_session("n1", "meta", [META])

    def models(key: str | None) -> tuple[int, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", urlsplit(gw.url).port, timeout=30)
        try:
            conn.request("GET", "/v1/models", headers={"Authorization": f"Bearer {key}"} if key else {})
            reply = conn.getresponse()
            return reply.status, json.loads(reply.read())
        finally:
            conn.close()

    assert models(task) == (200, {"object": "list", "data": [{"id": TASK, "object": "model"}]})
    assert [m["id"] for m in models(meta)[1]["data"]] == [META]
    assert models(None)[0] == 401 and models("gw-" + "x" * 32)[0] == 401
    gw.revoke(task)
    status, answer = models(task)
    assert status == 401 and "revoked" in answer["error"]["message"] and "data" not in answer
    assert fake_openai.count == 0 and "Traceback" not in capfd.readouterr().err
