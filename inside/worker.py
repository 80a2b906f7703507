"""The task-agent worker: loads a TaskAgent and answers rows sent as JSON lines.

It runs where agent code may run (a sandbox from the sandbox layer on), so it imports
nothing from the trusted core: the standard library only. Protocol, one JSON object a line:

  harness -> worker   {"id": ..., "inputs": {...}}   (id: the harness's token for the row, not the data's id)
  worker -> harness   {"ready": true} once loaded, or {"fatal": "..."} and exit
                      {"started": id} when a thread takes a row up (rows may queue here)
                      {"id", "prediction", "error", "usage", "seconds"} per row

Rows run concurrently in a thread pool. Agent code that prints to stdout cannot
corrupt the protocol: file descriptor 1 is pointed at stderr before the agent loads.
Every row is answered whatever its agent code returns or raises: a prediction is text
made here (a __str__ that raises cannot stop it), at most --max_prediction_bytes long.

Each row's usage (calls, tokens, the gateway's cost) is counted from two sources: the audit
event agent/llm.py raises per call (USAGE_EVENT), and litellm's completion, wrapped when an
agent that brings its own client imports litellm (inside/route.py). The worker itself never
imports litellm: most agents do not need it, and it costs seconds and ~180 MB per process.
"""

from __future__ import annotations

import argparse
import contextvars
import functools
import importlib
import importlib.util
import json
import os
import re
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# A row's usage; a context variable, so threads the agent starts with copy_context() add to it too.
_usage: contextvars.ContextVar = contextvars.ContextVar("usage", default=None)
# The audit event agent/llm.py raises after each call through the gateway, with the call's prompt
# tokens, completion tokens and cost in dollars (the gateway's x-gateway-cost-usd header).
USAGE_EVENT = "agent.llm.usage"


def add_usage(prompt_tokens, completion_tokens, cost_usd) -> None:
    """Count one model call to the row of the current context, if a row runs there."""
    usage = _usage.get()
    if usage is not None:
        usage["calls"] += 1
        usage["prompt_tokens"] += int(prompt_tokens)
        usage["completion_tokens"] += int(completion_tokens)
        usage["cost_usd"] += float(cost_usd)


def _on_audit(event: str, args: tuple) -> None:
    # Called for every audit event of the process (imports, opens, ...), so it does one comparison
    # for all others. It must not raise: the exception would fail the audited operation.
    if event == USAGE_EVENT:
        try:
            add_usage(*args)
        except Exception:  # agent code can raise the event with anything in it
            pass


def count_litellm(litellm) -> None:
    """Wrap litellm.completion so an agent's own litellm calls count for its row too."""
    completion = litellm.completion

    @functools.wraps(completion)
    def counted(*args, **kwargs):
        response = completion(*args, **kwargs)
        u = getattr(response, "usage", None)
        headers = (getattr(response, "_hidden_params", None) or {}).get("additional_headers") or {}
        try:
            add_usage(getattr(u, "prompt_tokens", 0) or 0, getattr(u, "completion_tokens", 0) or 0,
                      headers.get("llm_provider-x-gateway-cost-usd", 0) or 0)
        except (TypeError, ValueError):
            pass
        return response

    litellm.completion = counted


def is_file_path(agent_path: str) -> bool:
    """Whether --agent_path names a .py file rather than a module path."""
    return agent_path.endswith(".py") or os.path.sep in agent_path


def load_task_agent(agent_path: str):
    """TaskAgent from a .py file or an importable module path (e.g. proofgrader.task_agent)."""
    if is_file_path(agent_path):
        path = Path(agent_path).resolve()
        if not path.is_file():
            raise ImportError(f"agent file {agent_path} does not exist")
        spec = importlib.util.spec_from_file_location("agent_module", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"agent file {agent_path} cannot be loaded as a module")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(agent_path)
    if not hasattr(module, "TaskAgent"):
        raise ImportError(f"{agent_path} has no TaskAgent")
    return module.TaskAgent


def type_name(value) -> str:
    """The name of `value`'s type; a metaclass could make `__name__` anything, so it is checked."""
    try:
        return str.__str__(type(value).__name__)  # raises (caught) unless an exact str or a subclass
    except BaseException:
        return "?"


def as_text(value) -> str:
    """`value` as an exact str, whatever its __str__ and __repr__ do: str(), else repr(), else its
    type's name. Exact, so no method of a str subclass runs on it later."""
    for convert in (str, repr):
        try:
            return str.__str__(convert(value))
        except BaseException:  # agent code may raise anything, SystemExit too
            pass
    return f"<unprintable {type_name(value)}>"


def utf8_text(text: str) -> tuple[str, int]:
    """An exact str made encodable (a lone surrogate becomes a visible \\udXXX) and its UTF-8 size."""
    if text.isascii():  # constant time, and nearly every prediction
        return text, len(text)
    try:
        return text, len(text.encode("utf-8"))
    except UnicodeEncodeError:
        data = text.encode("utf-8", "backslashreplace")
        return data.decode("utf-8"), len(data)


def describe(e: BaseException) -> str:
    """'Type: message' of an exception, cut short; cannot raise."""
    return f"{type_name(e)}: {as_text(e)[:1000]}"


def error_text(e: BaseException) -> str:
    """What a row's error records: the exception and the end of its traceback; cannot raise.
    Call it while handling `e`."""
    try:
        tb = traceback.format_exc(limit=3)[-2000:]
    except BaseException:  # it formats agent objects too
        tb = ""
    return utf8_text(f"{describe(e)}\n{tb}")[0]


def prediction_text(result, cap: int) -> tuple[str | None, str | None]:
    """forward()'s (prediction, messages) as (the prediction's text, None), or (None, why not)."""
    if type(result) not in (tuple, list) or len(result) != 2:  # exact types: no agent __len__ runs
        return None, f"forward returned {type_name(result)}, not a (prediction, messages) pair"
    if result[0] is None:
        return None, None
    text, size = utf8_text(as_text(result[0]))
    if size > cap:
        return None, f"prediction of {size} bytes is over the cap of {cap}"
    return text, None


USAGE_KEYS = ("calls", "prompt_tokens", "completion_tokens", "cost_usd")


def plain_usage(usage: dict) -> dict:
    """The row's usage as plain numbers: agent code can reach the dict and put anything in it."""
    try:
        return {k: v for k in USAGE_KEYS if type(v := usage.get(k)) in (int, float)}
    except BaseException:
        return {}


def _safe_name(question_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", str(question_id))


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent_path", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--root", default=".", help="folder put first on sys.path (the agent's workspace)")
    ap.add_argument("--transcripts", default=None, help="folder for chat_history_<token>.md files")
    ap.add_argument("--also_import", action="append", default=[], metavar="MODULE:NAME",
                    help="another entry point of the workspace that must import (the loop's load check)")
    ap.add_argument("--max_prediction_bytes", type=int, default=1_000_000,
                    help="a longer prediction (UTF-8) is answered as an error")
    return ap.parse_args(argv)


def protocol_writer():
    """send(obj): one protocol line on the real stdout. File descriptor 1 (and sys.stdout) then
    point at stderr, so nothing the agent prints can reach the protocol."""
    # backslashreplace: a lone surrogate that reached a message still cannot make a write raise.
    protocol = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8", errors="backslashreplace")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    write_lock = threading.Lock()

    def send(obj: dict) -> None:
        with write_lock:
            protocol.write(json.dumps(obj, ensure_ascii=False) + "\n")
            protocol.flush()

    return send


def load_agent(args, send):
    """The TaskAgent class, once the other entry points of --also_import load too; exits on failure."""
    sys.path.insert(0, str(Path(args.root).resolve()))
    try:
        TaskAgent = load_task_agent(args.agent_path)
    except BaseException as e:  # anything the agent's import does is the agent's error
        send({"fatal": f"cannot load TaskAgent from {args.agent_path}: {describe(e)}"})
        sys.exit(1)
    for entry in args.also_import:
        module, _, name = entry.partition(":")
        try:
            getattr(importlib.import_module(module), name)
        except BaseException as e:
            send({"fatal": f"cannot load {name} from {module}: {describe(e)}"})
            sys.exit(1)
    return TaskAgent


def answer(TaskAgent, args, qid, inputs: dict) -> dict:
    """One row's reply: a fresh agent's prediction or the error that stopped it, with its usage."""
    usage = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}
    _usage.set(usage)
    started = time.monotonic()
    try:
        transcript = (
            os.path.join(args.transcripts, f"chat_history_{_safe_name(qid)}.md") if args.transcripts else None
        )
        agent = TaskAgent(model=args.model, chat_history_file=transcript)
        prediction, error = prediction_text(agent.forward(inputs), args.max_prediction_bytes)
    except BaseException as e:
        prediction, error = None, error_text(e)
    return {"id": qid, "prediction": prediction, "error": error, "usage": plain_usage(usage),
            "seconds": round(time.monotonic() - started, 3)}


def run_row(send, TaskAgent, args, row: dict) -> None:
    # Whatever happens, the row is answered now: a thread that died silently would leave
    # the harness waiting for the row's timeout.
    qid = row["id"]
    try:
        send({"started": qid})  # the harness times the row from here, not from when it was queued
        reply = answer(TaskAgent, args, qid, row["inputs"])
    except BaseException as e:
        reply = {"id": qid, "prediction": None, "error": error_text(e)}
    try:
        send(reply)
    except BaseException as e:
        send({"id": qid, "prediction": None, "error": f"cannot send the answer: {describe(e)}"})


def main() -> None:
    args = parse_args()
    send = protocol_writer()
    if args.transcripts:
        os.makedirs(args.transcripts, exist_ok=True)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # for an agent that imports litellm
    sys.addaudithook(_on_audit)
    from route import route_on_import  # mounted beside this file

    route_on_import(count_litellm)
    TaskAgent = load_agent(args, send)
    send({"ready": True})
    with ThreadPoolExecutor(max_workers=max(1, args.workers)) as pool:
        for line in sys.stdin:
            if line.strip():
                pool.submit(run_row, send, TaskAgent, args, json.loads(line))


if __name__ == "__main__":
    main()
