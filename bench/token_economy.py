"""What prompt caching saves on the meta agent's bill: a recorded 40-call meta agent tool loop replayed
through a real gateway to a fake Anthropic API, with gateway.prompt_caching off and then on.

The conversation, bench/token_economy_loop.json, was recorded (`--record` records it again) by running
the project's real meta agent (meta_agent.MetaAgent: agent/tool_loop.py's tool protocol, its bash and
editor tools, agent/llm.py's client) through a real gateway against a scripted fake model that makes 40
tool calls (SCRIPT: reading the code, the evaluation results and train rows, editing the task agent)
on a copy of the project's agent code and an evaluation folder made of real imo_grading train rows. The
tool results in it are what those tools printed; the paths of the temporary folders are replaced by
/workspace and /evals.

The replay sends each of the 40 requests (the conversation up to that call) as the meta agent sends it,
to a gateway whose meta model is Claude Sonnet 4.5 at tests/support/fake_anthropic.py, which keeps a prompt
cache as Anthropic's does and answers with the recorded replies. For caching off and on it prints the
prompt tokens billed at the full input price, read from the cache and written to it, and the dollars of
one generation's meta agent at Sonnet 4.5's prices (litellm's table, as the gateway's ledger books them),
then their ratio. Target: with caching, at most 40% of the dollars without. Then the peak RSS of this
process (gateways, fake providers and client in one) and, when recording, of the largest process it
started (the tools' shells).

    python bench/token_economy.py [--record]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import shutil
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from services.config import Config  # noqa: E402
from services.gateway import open_gateway  # noqa: E402
from support.fake_anthropic import FakeAnthropic  # noqa: E402
from support.fake_openai import FakeOpenAI  # noqa: E402

LOOP = Path(__file__).with_name("token_economy_loop.json")
CLAUDE = "anthropic/claude-sonnet-4-5"
TARGET = 0.40  # dollars per generation with caching, as a share of those without
TRAIN = ROOT / "domains" / "imo" / "data" / "gradingbench_filtered_100_train.csv"
EVAL = "initial/imo_grading"  # the folder of the earlier evaluation the meta agent studies

# The scripted meta agent: 40 tool calls, each (what it says, tool, input); {ws} and {ev} are the workspace
# and the evaluation folder.
PREDICTIONS = f"{{ev}}/{EVAL}/predictions.csv"
PY = "python3 -c \"import csv,sys; csv.field_size_limit(10**8); rows=list(csv.DictReader(open('" + PREDICTIONS + "')));"
SCRIPT = [
    ("First, the layout of the repository.", "bash", {"command": "find {ws} -type f | sort"}),
    ("Which evaluations are there?", "bash", {"command": "find {ev} -name report.json"}),
    ("The initial node's metrics.", "bash", {"command": f"cat {{ev}}/{EVAL}/report.json"}),
    ("The task agent.", "editor", {"command": "view", "path": "{ws}/task_agent/task_agent.py"}),
    ("The start of the predictions.", "bash", {"command": f"head -c 6000 {PREDICTIONS}"}),
    ("Predicted against true labels.", "bash", {"command": PY + " import collections; print(collections.Counter("
                                                "(r['Reward'], r['prediction']) for r in rows))\""}),
    ("How answers are parsed.", "editor", {"command": "view", "path": "{ws}/agent/extract.py"}),
    ("The LLM client.", "editor", {"command": "view", "path": "{ws}/agent/llm.py"}),
    ("A wrong prediction in full.", "bash", {"command": PY + " r=[r for r in rows if r['Reward'].lower()!="
                                             "r['prediction']][0]; print(r['Problem'], r['Grading guidelines'], "
                                             "r['Response'][:6000], r['Reward'], r['prediction'], sep='\\n---\\n')\""}),
    ("Which grades are confused most?", "bash", {"command": PY + " print([(r['Grading ID'], r['Reward'], "
                                                 "r['prediction']) for r in rows if r['Reward'].lower()!="
                                                 "r['prediction']])\""}),
    ("The meta agent.", "editor", {"command": "view", "path": "{ws}/meta_agent/meta_agent.py"}),
    ("The tool loop.", "editor", {"command": "view", "path": "{ws}/agent/tool_loop.py", "view_range": [1, 120]}),
    ("Guidelines of a partial-credit row.", "bash", {"command": PY + " r=[r for r in rows if r['Reward']=="
                                                     "'Partial'][0]; print(r['Grading guidelines'], "
                                                     "r['Response'][:5000], sep='\\n---\\n')\""}),
    ("An almost-correct row.", "bash", {"command": PY + " r=[r for r in rows if r['Reward']=='Almost'][0]; "
                                        "print(r['Problem'], r['Solution'][:3000], r['Grading guidelines'], "
                                        "sep='\\n---\\n')\""}),
    ("The prompt's grading scale needs the guidelines' own terms.", "editor", {
        "command": "str_replace", "path": "{ws}/task_agent/task_agent.py",
        "old_str": "The grading guidelines are specific to this problem and take precedence over the general scale.",
        "new_str": "The grading guidelines are specific to this problem and take precedence over the general scale: "
                   "first list which of their checkpoints the answer reaches, then decide."}),
    ("Check the edit.", "bash", {"command": "grep -n 'checkpoints' -A3 -B3 {ws}/task_agent/task_agent.py"}),
    ("Does it still import?", "bash", {"command": "cd {ws} && python3 -c 'import task_agent.task_agent as t; "
                                       "print(t.GRADES)'"}),
    ("Compare a correct row's answer length.", "bash", {"command": PY + " print(sorted((len(r['Response']), "
                                                        "r['Reward']) for r in rows)[:60])\""}),
    ("A long incorrect answer.", "bash", {"command": PY + " r=max((r for r in rows if r['Reward']=='Incorrect'), "
                                          "key=lambda r: len(r['Response'])); print(r['Response'][:7000])\""}),
    ("The extractor's label matching.", "bash", {"command": "grep -n 'def ' -A12 {ws}/agent/extract.py"}),
    ("Add an explicit step for the final label.", "editor", {
        "command": "str_replace", "path": "{ws}/task_agent/task_agent.py",
        "old_str": "Think the verification through first. Then give your final label.",
        "new_str": "Think the verification through first: for each step of the student's answer, say whether it "
                   "holds. A missing case or an unproved claim that the guidelines require means at most "
                   "\"partial\". Then give your final label."}),
    ("View the new prompt.", "editor", {"command": "view", "path": "{ws}/task_agent/task_agent.py",
                                        "view_range": [22, 50]}),
    ("The grades' rows by problem.", "bash", {"command": PY + " import collections; print(collections.Counter("
                                              "r['Problem ID'] for r in rows).most_common(30))\""}),
    ("One problem's rows side by side.", "bash", {"command": PY + " p=rows[0]['Problem ID']; print([(r['Reward'], "
                                                  "r['prediction'], r['Response'][:800]) for r in rows "
                                                  "if r['Problem ID']==p])\""}),
    ("The bash tool, to know its limits.", "editor", {"command": "view", "path": "{ws}/agent/tools/bash.py"}),
    ("Is the answer format strict enough?", "bash", {"command": "grep -n '_ANSWER_FORMAT' -A8 "
                                                     "{ws}/task_agent/task_agent.py"}),
    ("Add a worked rule for 'almost'.", "editor", {
        "command": "str_replace", "path": "{ws}/task_agent/task_agent.py",
        "old_str": "- \"almost\" (6 points): essentially correct, with minor mistakes or omissions only;",
        "new_str": "- \"almost\" (6 points): essentially correct, with minor mistakes or omissions only (a "
                   "slip that a line fixes, not a missing idea);"}),
    ("Check the file compiles.", "bash", {"command": "cd {ws} && python3 -m py_compile task_agent/task_agent.py "
                                          "&& echo compiled"}),
    ("Rows where the label is Partial but predicted correct.", "bash", {
        "command": PY + " print([(r['Grading ID'], r['Grading guidelines'][:600]) for r in rows if "
                        "r['Reward']=='Partial' and r['prediction']=='correct'])\""}),
    ("A second look at one of them.", "bash", {"command": PY + " r=[r for r in rows if r['Reward']=='Partial' "
                                               "and r['prediction']=='correct'][1]; print(r['Response'][:6000])\""}),
    ("The editor tool's own code.", "editor", {"command": "view", "path": "{ws}/agent/tools/editor.py",
                                               "view_range": [1, 80]}),
    ("The diff so far.", "bash", {"command": "cd {ws} && diff -u {orig}/task_agent/task_agent.py "
                                  "task_agent/task_agent.py"}),
    ("The whole prompt once more.", "editor", {"command": "view", "path": "{ws}/task_agent/task_agent.py",
                                               "view_range": [1, 60]}),
    ("Make the meta agent read the report first next time.", "editor", {
        "command": "str_replace", "path": "{ws}/meta_agent/meta_agent.py",
        "old_str": "find what to fix.",
        "new_str": "find what to fix. Start from report.json's per-label counts: the most confused pair of labels "
                   "is usually the one to fix first."}),
    ("Check the meta agent still imports.", "bash", {"command": "cd {ws} && python3 -c 'import meta_agent.meta_agent "
                                                     "as m; print(m.MetaAgent)'"}),
    ("The metric per label.", "bash", {"command": f"python3 -m json.tool {{ev}}/{EVAL}/report.json"}),
    ("Count the labels the prompt names.", "bash", {"command": "grep -c '\"' {ws}/task_agent/task_agent.py; "
                                                    "wc -l {ws}/task_agent/task_agent.py"}),
    ("The instruction for proofs, untouched.", "bash", {"command": "grep -n 'def proof_instruction' -A12 "
                                                        "{ws}/task_agent/task_agent.py"}),
    ("Everything changed, once more.", "bash", {"command": "cd {ws} && diff -ru {orig} . | head -c 8000"}),
    ("A last check that both entry points import.", "bash", {
        "command": "cd {ws} && python3 -c 'import task_agent.task_agent, meta_agent.meta_agent; print(\"ok\")'"}),
]


def reply_text(say: str, tool: str, tool_input: dict, ws: str, ev: str, orig: str) -> str:
    """A scripted reply: a sentence, then one tool call in agent/tool_loop.py's text protocol."""
    def fill(value):
        if isinstance(value, str):
            return value.replace("{ws}", ws).replace("{ev}", ev).replace("{orig}", orig)
        return value
    call = {"tool_name": tool, "tool_input": {k: fill(v) for k, v in tool_input.items()}}
    return f"{say}\n<json>\n{json.dumps(call)}\n</json>"


def evaluation_folder(ev: Path) -> None:
    """An earlier evaluation of real train rows: predictions.csv (the rows, their label and a weak grader's
    prediction) and report.json, as the harness writes them."""
    import csv
    import random

    csv.field_size_limit(10**8)
    rows = list(csv.DictReader(TRAIN.open(encoding="utf-8")))[:40]
    rng = random.Random(0)
    for row in rows:  # a grader that calls most answers correct
        row["prediction"] = rng.choice(["correct", "correct", row["Reward"].lower(), "partial"])
    out = ev / EVAL
    out.mkdir(parents=True)
    with (out / "predictions.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    right = sum(r["prediction"] == r["Reward"].lower() for r in rows)
    labels = sorted({r["Reward"].lower() for r in rows})
    (out / "report.json").write_text(json.dumps({
        "overall_accuracy": right / len(rows), "rows": len(rows),
        "per_label": {label: {"rows": sum(r["Reward"].lower() == label for r in rows),
                              "right": sum(r["Reward"].lower() == label == r["prediction"] for r in rows)}
                      for label in labels}}, indent=2))


def record() -> None:
    """Run the real meta agent through a real gateway against the scripted model; store its conversation."""
    from meta_agent.meta_agent import MetaAgent

    with tempfile.TemporaryDirectory() as tmp, FakeOpenAI() as fake:
        tmp_path = Path(tmp)
        ws, ev, orig = tmp_path / "workspace", tmp_path / "evals", tmp_path / "original"
        for name in ("task_agent", "meta_agent", "agent"):
            shutil.copytree(ROOT / name, ws / name, ignore=shutil.ignore_patterns("__pycache__", "baselines"))
        shutil.copytree(ws, orig)
        evaluation_folder(ev)
        fake.set_replies([reply_text(*step, str(ws), str(ev), str(orig)) for step in SCRIPT])
        os.environ.update(OPENAI_API_BASE=fake.base_url, OPENAI_API_KEY="sk-bench")
        gw = open_gateway(Config(), tmp_path / "run", "record")
        try:
            gw.allow_models("openai/fake-meta")
            os.environ.update(AGENT_GATEWAY_URL=gw.url, AGENT_GATEWAY_KEY=gw.new_session(
                "1", "meta", ["openai/fake-meta"]))
            MetaAgent("openai/fake-meta").forward(str(ws), str(ev), iterations_left=5, max_tool_calls=len(SCRIPT))
        finally:
            gw.stop()
            gw.ledger.close()
        sent = fake.requests[-1]["json"]["messages"]
        conversation = [*sent, {"role": "assistant", "content": reply_text(*SCRIPT[-1], str(ws), str(ev), str(orig))}]
        text = json.dumps({"calls": len(fake.requests), "messages": conversation}, indent=1)
        for path, stable in ((ws, "/workspace"), (ev, "/evals"), (orig, "/original")):
            text = text.replace(str(path), stable)
    LOOP.write_text(text + "\n")
    print(f"recorded {len(fake.requests)} calls, {len(conversation)} messages, {LOOP.stat().st_size:,} bytes "
          f"into {LOOP}")


def post(gw, key: str, messages: list) -> dict:
    """One call as the meta agent's client makes it (agent/llm.py: temperature 0, the gateway's own route)."""
    conn = http.client.HTTPConnection("127.0.0.1", urlsplit(gw.url).port, timeout=120)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps({"model": CLAUDE, "messages": messages,
                                                                 "temperature": 0}),
                     {"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        answer = conn.getresponse()
        body = json.loads(answer.read())
    finally:
        conn.close()
    if answer.status != 200:
        raise SystemExit(f"the gateway refused a call: {answer.status} {body}")
    return body


def replay(messages: list, caching: bool, folder: Path) -> dict:
    """Every call of the recorded loop through a gateway with prompt caching on or off; the ledger's sums."""
    asked = [i for i, m in enumerate(messages) if m["role"] == "assistant"]  # call k sends messages[:asked[k]]
    with FakeAnthropic() as fake:
        fake.set_responder(lambda body: messages[asked[len(fake.usages)]]["content"])
        os.environ.update(ANTHROPIC_API_BASE=fake.base_url, ANTHROPIC_API_KEY="sk-ant-bench")
        config = Config()
        config.gateway.prompt_caching = caching
        gw = open_gateway(config, folder, "bench")
        try:
            gw.allow_models(CLAUDE)
            key = gw.new_session("1", "meta", [CLAUDE])
            for end in asked:
                post(gw, key, messages[:end])
            spent = gw.spent()
        finally:
            gw.stop()
            gw.ledger.close()
    return {"calls": spent.calls, "full": spent.prompt_tokens - spent.cached_tokens - spent.cache_write_tokens,
            "read": spent.cached_tokens, "written": spent.cache_write_tokens, "output": spent.completion_tokens,
            "usd": spent.cost_usd, "saved": spent.cache_saved_usd}


def peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true", help="record the meta agent's loop again first")
    args = parser.parse_args()
    if args.record:
        record()
    messages = json.loads(LOOP.read_text())["messages"]
    with tempfile.TemporaryDirectory() as tmp:
        off = replay(messages, False, Path(tmp) / "off")
        on = replay(messages, True, Path(tmp) / "on")
    print(f"meta agent loop: {off['calls']} calls, {len(messages)} messages, {LOOP.name}; model {CLAUDE} "
          f"(fake Anthropic API with its prompt cache)")
    for name, r in (("caching off", off), ("caching on", on)):
        print(f"{name:12} prompt tokens at the full price {r['full']:>9,}, read from the cache {r['read']:>9,}, "
              f"written to it {r['written']:>7,}; output {r['output']:>6,}; ${r['usd']:.4f} per generation's meta "
              f"agent (saved by caching ${r['saved']:.4f})")
    ratio = on["usd"] / off["usd"]
    print(f"dollars per generation's meta agent with caching / without: {ratio:.3f} "
          f"[{'PASS' if ratio <= TARGET else 'FAIL'} <= {TARGET:.2f}]")
    print(f"peak RSS of this process (gateways, fake providers, client; all it runs but a fork): {peak_mb():.0f} MB")
    if args.record:  # a fork counts this process's pages until it execs, so this is at least the line above
        children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"peak RSS of the largest process it started (the tools' shells and commands): {children:.0f} MB")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
