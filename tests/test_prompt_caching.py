"""Prompt caching end to end: a real gateway forwarding with litellm to a fake Anthropic API that keeps a
prompt cache as the real one does (tests/support/fake_anthropic.py), and the ledger that books and prices it."""

import http.client
import json
import sqlite3
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from services.config import load_config
from services.errors import UserError
from services.gateway.caching import forwarded, marked
from services.gateway.pricing import pricing_of
from services.gateway.sessions import Session
from services.ledger import Call, Ledger, LedgerReader

CLAUDE = "anthropic/claude-sonnet-4-5"
# Claude Sonnet 4.5's prices in litellm's table, USD per token: input, cache write (5 minutes), cached read, output.
INPUT, WRITE, READ, OUTPUT = 3e-6, 3.75e-6, 0.3e-6, 15e-6
SYSTEM = "You edit agent code. " * 300  # 6,300 characters: past Sonnet's 1,024 tokens, so it is cached


def post(gw, body: dict, key: str) -> tuple[int, dict]:
    """One chat request to the gateway as agent code sends it; the status and JSON answer."""
    conn = http.client.HTTPConnection("127.0.0.1", urlsplit(gw.url).port, timeout=60)
    try:
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        reply = conn.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        conn.close()


def marks_sent(request: dict) -> list[tuple[str, dict]]:
    """Where the fake provider saw cache_control: (tools, system or the message's role, the mark)."""
    body = request["json"]
    found = [("tools", t["cache_control"]) for t in body.get("tools") or [] if "cache_control" in t]
    system = body.get("system")
    found += [("system", b["cache_control"]) for b in system if "cache_control" in b] if isinstance(system, list) \
        else []
    for message in body["messages"]:
        content = message["content"] if isinstance(message["content"], list) else []
        found += [(message["role"], b["cache_control"]) for b in content if "cache_control" in b]
    return found


@pytest.fixture
def claude(gateway_factory, fake_anthropic, monkeypatch):
    """Make gateways that may call Claude Sonnet 4.5 at the fake Anthropic API (gateway fields as keywords)."""
    monkeypatch.setenv("ANTHROPIC_API_BASE", fake_anthropic.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-provider-secret-0123456789")

    def make(model=CLAUDE, **fields):
        gw = gateway_factory(**fields)
        gw.allow_models(model)
        return gw, gw.new_session("n1", "meta", [model])

    return make


def conversation(turns: int) -> list[dict]:
    """A meta agent's conversation after `turns` tool calls: system prompt, task, then reply and result each."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Improve the task agent. " * 40}]
    for i in range(turns):
        messages += [{"role": "assistant", "content": f"<json>{{\"tool_name\": \"bash\", \"n\": {i}}}</json>"},
                     {"role": "user", "content": f"Tool result {i}:\n" + "log line\n" * 200}]
    return messages


def test_a_growing_conversation_reads_what_its_turn_before_wrote(claude, fake_anthropic):
    gw, key = claude()
    answers = []
    for turns in range(3):
        status, answer = post(gw, {"model": CLAUDE, "messages": conversation(turns)}, key)
        assert status == 200, answer
        answers.append(answer)
    first, second, third = fake_anthropic.usages
    # A single question: only the system prompt is marked (its own message would be written and never read).
    assert [where for where, _ in marks_sent(fake_anthropic.requests[0])] == ["system"]
    assert first["cache_read_input_tokens"] == 0 and first["cache_creation_input_tokens"] == len(SYSTEM) // 4
    # A conversation: the system prompt, the last message, and where the turn before ended.
    assert [where for where, _ in marks_sent(fake_anthropic.requests[1])] == ["system", "user", "user"]
    assert second["cache_read_input_tokens"] == len(SYSTEM) // 4
    before = second["input_tokens"] + second["cache_creation_input_tokens"] + second["cache_read_input_tokens"]
    assert third["cache_read_input_tokens"] == before  # all of the turn before's prompt
    assert third["input_tokens"] == 0 and 0 < third["cache_creation_input_tokens"] < third["cache_read_input_tokens"]
    # The caller reads its cached tokens where OpenAI reports them.
    for answer, usage in zip(answers, fake_anthropic.usages):
        assert answer["usage"]["prompt_tokens_details"]["cached_tokens"] == usage["cache_read_input_tokens"]
    # The ledger books reads and writes and prices them at Sonnet's cached rates.
    rows = gw.ledger.calls()
    for row, usage in zip(rows, fake_anthropic.usages):
        read, written = usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]
        assert (row["cached_tokens"], row["cache_write_tokens"]) == (read, written)
        assert row["prompt_tokens"] == usage["input_tokens"] + read + written
        assert row["cost_usd"] == pytest.approx(usage["input_tokens"] * INPUT + written * WRITE + read * READ
                                                + usage["output_tokens"] * OUTPUT)
        assert row["cache_saved_usd"] == pytest.approx(read * (INPUT - READ) - written * (WRITE - INPUT))
    assert rows[0]["cache_saved_usd"] < 0 < rows[2]["cache_saved_usd"]  # a write costs; reads pay it back
    spent = gw.spent()
    assert spent.cached_tokens == sum(u["cache_read_input_tokens"] for u in fake_anthropic.usages)
    assert spent.cache_saved_usd == pytest.approx(sum(r["cache_saved_usd"] for r in rows))
    [by_model] = [r for r in LedgerReader(gw.ledger.path).spend() if r["model"] == CLAUDE]
    assert (by_model["cached_tokens"], by_model["cache_write_tokens"]) == (spent.cached_tokens,
                                                                           spent.cache_write_tokens)


def test_native_tool_calls_cache_through_their_tool_results(claude, fake_anthropic):
    """Tool use blocks come back as tool calls; the tool result the gateway marks is read on the next turn."""
    gw, key = claude()
    fake_anthropic.set_replies([[{"type": "tool_use", "name": "bash", "input": {"command": "ls"}}]] * 2 + ["done"])
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}}}}}]
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Look around."}]
    for _ in range(3):
        status, answer = post(gw, {"model": CLAUDE, "messages": messages, "tools": tools}, key)
        assert status == 200, answer
        message = answer["choices"][0]["message"]
        if not message.get("tool_calls"):
            break
        [call] = message["tool_calls"]
        assert json.loads(call["function"]["arguments"]) == {"command": "ls"}
        messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": call["id"], "content": "file\n" * 1500}]
    last = fake_anthropic.requests[-1]["json"]["messages"][-1]["content"]
    assert last[-1]["type"] == "tool_result" and last[-1]["cache_control"] == {"type": "ephemeral"}
    second, third = fake_anthropic.usages[1:]
    assert third["cache_read_input_tokens"] == sum(second[k] for k in ("input_tokens", "cache_read_input_tokens",
                                                                       "cache_creation_input_tokens"))


def test_caching_off_sends_no_marks_and_pays_the_input_price(claude, fake_anthropic):
    gw, key = claude(prompt_caching=False)
    for turns in range(3):
        assert post(gw, {"model": CLAUDE, "messages": conversation(turns)}, key)[0] == 200
    assert [marks_sent(r) for r in fake_anthropic.requests] == [[], [], []]
    assert all(u["cache_read_input_tokens"] == u["cache_creation_input_tokens"] == 0 for u in fake_anthropic.usages)
    for row, usage in zip(gw.ledger.calls(), fake_anthropic.usages):
        assert (row["cached_tokens"], row["cache_write_tokens"], row["cache_saved_usd"]) == (0, 0, 0)
        assert row["cost_usd"] == pytest.approx(usage["input_tokens"] * INPUT + usage["output_tokens"] * OUTPUT)


def test_an_agents_own_marks_pass_and_the_gateway_adds_only_what_is_left(claude, fake_anthropic):
    gw, key = claude()
    own = [{"role": "user", "content": [{"type": "text", "text": f"part {i} " * 600,
                                         "cache_control": {"type": "ephemeral"}}]} for i in range(3)]
    messages = conversation(1)[:1] + own + conversation(1)[2:]
    assert post(gw, {"model": CLAUDE, "messages": messages}, key)[0] == 200
    # Three of the agent's own and one of the gateway's (the last message): Anthropic's 4, never more.
    assert [where for where, _ in marks_sent(fake_anthropic.requests[-1])] == ["user"] * 4
    full = [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]}] * 4
    assert post(gw, {"model": CLAUDE, "messages": conversation(1)[:1] + full + conversation(1)[2:]}, key)[0] == 200
    assert len(marks_sent(fake_anthropic.requests[-1])) == 4
    # A one-hour mark: the gateway marks nothing before it (Anthropic refuses a five-minute mark before one).
    hour = [{"role": "user", "content": [{"type": "text", "text": "y " * 3000,
                                          "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}]
    status, answer = post(gw, {"model": CLAUDE, "messages": conversation(1)[:1] + hour + conversation(1)[2:]}, key)
    assert status == 200, answer
    assert marks_sent(fake_anthropic.requests[-1]) == [("user", {"type": "ephemeral", "ttl": "1h"}),
                                                       ("user", {"type": "ephemeral"})]
    assert fake_anthropic.usages[-1]["cache_creation"]["ephemeral_1h_input_tokens"] > 0


def test_the_replay_key_does_not_change_with_the_gateways_marks(claude, fake_anthropic, tmp_path):
    """A run resumed with caching switched off replays what it answered with caching on: marks are not in the key."""
    messages = conversation(2)
    gw, key = claude(cache="all", folder=tmp_path / "run")
    first = post(gw, {"model": CLAUDE, "messages": messages}, key)[1]
    assert marks_sent(fake_anthropic.requests[-1])  # the gateway did mark it
    gw.stop()
    again, key = claude(cache="all", folder=tmp_path / "run", prompt_caching=False)
    status, replayed = post(again, {"model": CLAUDE, "messages": messages}, key)
    assert status == 200 and replayed["choices"] == first["choices"]
    assert fake_anthropic.count == 1 and again.ledger.calls()[-1]["cache_hit"] == 1


def test_marks_are_placed_within_the_providers_limit_without_changing_the_callers_messages():
    messages = conversation(3)
    before = json.dumps(messages)
    out = marked(messages)
    assert json.dumps(messages) == before  # copied where marked
    assert [i for i, m in enumerate(out) if isinstance(m["content"], list)] == [0, 5, 7]
    single = [{"role": "user", "content": "one question"}]
    assert marked(single) == single  # written and never read: not marked
    tool_only = [*conversation(1), {"role": "assistant", "content": None, "tool_calls": []}]
    assert sum(isinstance(m["content"], list) for m in marked(tool_only)) == 2  # nothing to mark on the last


def test_openai_gets_its_sessions_prompt_cache_key_and_no_marks(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    session = Session("run", "3", "meta", frozenset())
    messages = [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]}]
    sent, params = forwarded("openai/gpt-4o", session, messages, {"temperature": 0}, on=True)
    assert sent == [{"role": "user", "content": [{"type": "text", "text": "x"}]}]  # no model of OpenAI reads marks
    key = params["prompt_cache_key"]
    assert forwarded("openai/gpt-4o", Session("run", "3", "meta", frozenset()), [], {}, on=True)[1][
        "prompt_cache_key"] == key  # one session's turns meet the same cache
    assert forwarded("openai/gpt-4o", Session("run", "3", "task", frozenset()), [], {}, on=True)[1][
        "prompt_cache_key"] != key
    assert "prompt_cache_key" not in forwarded("openai/gpt-4o", session, [], {}, on=False)[1]
    monkeypatch.setenv("OPENAI_API_BASE", "http://127.0.0.1:8000/v1")  # a server of OpenAI's kind may be strict
    assert "prompt_cache_key" not in forwarded("openai/gpt-4o", session, [], {}, on=True)[1]


def test_configured_prices_carry_cached_rates(tmp_path, claude, fake_anthropic):
    # Two numbers: a model litellm does not list gets Anthropic's ratios, one it lists keeps its own.
    unlisted = pricing_of("anthropic/claude-unlisted-test", {"anthropic/claude-unlisted-test": [2.0, 8.0]})
    assert (unlisted.cache_read_usd, unlisted.cache_write_usd) == pytest.approx((0.2e-6, 2.5e-6))
    listed = pricing_of("openai/gpt-4o", {"openai/gpt-4o": [5.0, 20.0]})
    assert listed.cache_read_usd == pytest.approx(2.5e-6)  # gpt-4o's cached reads cost half its input price
    four = pricing_of("openai/x-test", {"openai/x-test": [1.0, 2.0, 0.25, 1.5]})
    assert (four.cache_read_usd, four.cache_write_usd) == pytest.approx((0.25e-6, 1.5e-6))
    # The gateway's bookings use them: litellm prices the call with the registered rates.
    model = "anthropic/claude-priced-test"
    gw, key = claude(model=model, prices={model: [1.0, 2.0]})
    for turns in range(2):
        assert post(gw, {"model": model, "messages": conversation(turns)}, key)[0] == 200
    row, usage = gw.ledger.calls()[-1], fake_anthropic.usages[-1]
    assert row["cached_tokens"] > 0
    assert row["cost_usd"] == pytest.approx((usage["input_tokens"] + 0.1 * usage["cache_read_input_tokens"]
                                             + 1.25 * usage["cache_creation_input_tokens"]
                                             + 2 * usage["output_tokens"]) / 1e6)
    # A config may give the cached rates, and nothing else than two or four prices.
    config = tmp_path / "prices.yaml"
    config.write_text("gateway:\n  prices: {openai/x: [1, 2, 0.1, 1.25]}\n  prompt_caching: false\n")
    assert load_config(config).gateway.prompt_caching is False
    config.write_text("gateway:\n  prices: {openai/x: [1, 2, 0.1]}\n")
    with pytest.raises(UserError, match="gateway.prices"):
        load_config(config)


OLD_CALLS = """CREATE TABLE calls (id INTEGER PRIMARY KEY, ts REAL NOT NULL, run_id TEXT NOT NULL, node TEXT NOT NULL,
    role TEXT NOT NULL, model TEXT NOT NULL, prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0, cost_usd REAL NOT NULL DEFAULT 0, latency_s REAL NOT NULL DEFAULT 0,
    cache_hit INTEGER NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 1, error TEXT)"""


def test_a_ledger_written_before_cached_tokens_is_read_and_migrated(tmp_path):
    path = tmp_path / "ledger.sqlite"
    db = sqlite3.connect(path)
    db.execute(OLD_CALLS)
    db.execute("INSERT INTO calls (ts, run_id, node, role, model, prompt_tokens, completion_tokens, cost_usd) "
               "VALUES (1, 'run', '1', 'meta', 'm', 100, 10, 0.5)")
    db.commit()
    db.close()
    # A reader (the dashboard, the analysis) never writes: the old shape reads as no caching.
    [row] = LedgerReader(path).spend()
    assert (row["cost_usd"], row["cached_tokens"], row["cache_write_tokens"], row["cache_saved_usd"]) == (0.5, 0, 0, 0)
    columns = {r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(calls)")}
    assert "cached_tokens" not in columns
    # A resumed run opens it with the run's Ledger, which adds the columns and keeps what was paid.
    ledger = Ledger(path)
    ledger.record(Call("run", "2", "meta", "m", prompt_tokens=200, cost_usd=0.1, cached_tokens=150,
                       cache_write_tokens=20, cache_saved_usd=0.02))
    old, new = ledger.totals(node="1"), ledger.totals(node="2")
    assert (old.calls, old.cost_usd, old.cached_tokens) == (1, 0.5, 0)
    assert (new.cached_tokens, new.cache_write_tokens, new.cache_saved_usd) == (150, 20, 0.02)
    ledger.close()
    assert sum(r["cached_tokens"] for r in LedgerReader(path).spend()) == 150


def test_the_estimate_counts_the_meta_agents_history_at_the_cached_rates(tmp_path):
    from optimizer.estimate import Estimate, meta_usd

    config = load_config(None)
    full = 40 * (12000 * INPUT + 800 * OUTPUT)  # 40 calls averaging 12,000 prompt tokens at the input price
    config.gateway.prompt_caching = False
    assert meta_usd(CLAUDE, config.gateway, 40) == (pytest.approx(full), 0.0)
    config.gateway.prompt_caching = True
    cost, saved = meta_usd(CLAUDE, config.gateway, 40)
    # The history grows from 3,000 to 21,000 tokens: each token written once, every earlier prompt read again.
    assert cost == pytest.approx(21000 * WRITE + (40 * 12000 - 21000) * READ + 40 * 800 * OUTPUT)
    assert saved == pytest.approx(full - cost) and cost < 0.4 * full
    assert meta_usd("openai/fake", config.gateway, 40)[1] == 0  # no cached rate known: nothing saved
    line = Estimate(1.0, cost, 1.0, 10, caching_saves_usd=saved).line()
    assert f"prompt caching of the meta agent's history saves ~${saved:.2f} a generation (~${10 * saved:.2f} a run)" \
        in line


def run_with_cached_calls(run: Path) -> Path:
    """A run folder of one node whose meta agent's calls read from Anthropic's cache."""
    from archive.records import Node, RunRecord
    from services.fsutil import atomic_write_json

    (run / "nodes").mkdir(parents=True)
    atomic_write_json(run / "run.json", RunRecord(["imo_grading"], {"loop": {"seed": 1}}, "bwrap").to_dict())
    node = Node("initial", None, 0)
    node.scores, node.samples, node.full_eval = ({"imo_grading": {"train": 0.5, "val": 0.5}},
                                                 {"imo_grading": {"train": 10, "val": 10}}, {"imo_grading": True})
    atomic_write_json(run / "nodes" / "initial" / "node.json", node.to_dict())
    ledger = Ledger(run / "ledger.sqlite")
    ledger.record(Call("run", "initial", "meta", CLAUDE, 5000, 100, 0.01, cached_tokens=4000, cache_write_tokens=900,
                       cache_saved_usd=0.0101))
    ledger.record(Call("run", "initial", "task", "openai/fake", 300, 50, 0.002))
    ledger.close()
    return run


def test_report_dashboard_and_analysis_show_what_caching_saved(tmp_path):
    from apps.analyze import Analysis
    from apps.dashboard.pieces import spend_table
    from apps.report import write_report
    from archive.run_groups import load_groups

    run = run_with_cached_calls(tmp_path / "runs" / "seed-1")
    html = write_report(run, tmp_path / "report.html").read_text()
    assert "prompt caching saved $0.0101; 4,000 prompt tokens read from providers&#x27; caches" in html
    table = str(spend_table(LedgerReader(run / "ledger.sqlite").spend()))
    assert "<th>of them cached</th><th>cache writes</th>" in table and "<td class=\"num\">4,000</td>" in table
    [group] = load_groups([str(tmp_path / "runs")], [])
    rows = {row.metric: row.value for row in Analysis([group], [1]).run().rows}
    assert (rows["cached_tokens:meta"], rows["cache_saved_usd:meta"], rows["cached_tokens:task"]) == (4000, 0.0101, 0)


def test_the_console_says_what_caching_saved():
    from optimizer.events import CostBooked, console_line
    from optimizer.plan import caching_text
    from services.ledger import Totals

    assert console_line(CostBooked("3", "meta", 0.25, 10)) is None
    assert console_line(CostBooked("3", "meta", 0.25, 50000, cached_tokens=40000, cache_saved_usd=0.108)) == (
        "node 3: meta read 40,000 prompt tokens from the provider's cache, saving $0.1080 of $0.3580")
    # A free model (the bundled one, whose server reuses its own prompt cache): nothing saved, nothing said.
    assert console_line(CostBooked("3", "task", 0.0, 4000, cached_tokens=3730, cache_saved_usd=0.0)) is None
    assert caching_text(Totals(cached_tokens=40000, cache_write_tokens=5000, cache_saved_usd=0.1)) == (
        "; prompt caching: 40,000 prompt tokens read from the providers' caches, 5,000 written, $0.1000 saved")


@pytest.mark.e2e
def test_a_run_whose_meta_agent_is_claude_reads_its_history_from_the_cache_and_says_what_that_saved(
        tmp_path, fake_openai, fake_anthropic):
    from support.cli import FAST_CONFIG, cli_env, run_cli

    def meta(body: dict) -> str:  # looks around three times, makes one edit, then stops
        turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if turns < 3:
            return '<json>{"tool_name": "bash", "tool_input": {"command": "ls /workspace/task_agent"}}</json>'
        if turns == 3:
            return ('<json>{"tool_name": "bash", "tool_input": {"command": '
                    '"echo \'# cached\' >> /workspace/task_agent/task_agent.py"}}</json>')
        return "Done."

    fake_anthropic.set_responder(meta)
    fake_openai.set_replies(['<json>{"response": "partial"}</json>'])
    config = tmp_path / "c.yaml"
    config.write_text(FAST_CONFIG)
    env = cli_env(fake_openai, ANTHROPIC_API_BASE=fake_anthropic.base_url, ANTHROPIC_API_KEY="sk-ant-test-0123456789")
    r = run_cli("run_optimization", "--domain", "imo_grading", "--output_dir", str(tmp_path / "out"), "--run_id", "run",
                "--task_model", "openai/fake", "--meta_model", CLAUDE, "--config", str(config), "--max_generation", "1",
                "--eval_samples", "2", env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    # The start's check of the model is one short question; then the meta agent's five turns.
    meta_calls = [u for r, u in zip(fake_anthropic.requests, fake_anthropic.usages) if r["json"].get("system")]
    assert len(meta_calls) == 5 and len(fake_anthropic.usages) == 6
    # The first turn is one question (nothing marked: the system prompt alone is under Sonnet's 1,024
    # tokens); from the second on, each turn writes its history and the next reads all of it back.
    reads = [u["cache_read_input_tokens"] for u in meta_calls]
    writes = [u["cache_creation_input_tokens"] for u in meta_calls]
    assert reads[:2] == [0, 0] and writes[1] > 1024
    assert all(reads[i] == reads[i - 1] + writes[i - 1] > 0 for i in range(2, 5))
    with sqlite3.connect(tmp_path / "out" / "run" / "ledger.sqlite") as db:
        booked = db.execute("SELECT SUM(cached_tokens), SUM(cache_saved_usd) FROM calls WHERE role = 'meta'").fetchone()
    assert booked[0] == sum(reads) and booked[1] > 0
    assert f"meta read {sum(reads):,} prompt tokens from the provider's" in r.stdout
    assert f"prompt caching: {sum(reads):,} prompt tokens read from the providers' caches" in r.stdout
