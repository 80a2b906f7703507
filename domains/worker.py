"""The task-agent worker: loads a TaskAgent and answers rows sent as JSON lines.

It runs where agent code may run (a sandbox from the sandbox layer on), so it imports
nothing from the trusted core: stdlib and litellm only. Protocol, one JSON object a line:

  harness -> worker   {"id": ..., "inputs": {...}}
  harness -> worker   one empty line first, when started with --wait_for_go
  worker -> harness   {"ready": true} once loaded, or {"fatal": "..."} and exit
                      {"started": id} when a thread takes a row up (rows may queue here)
                      {"id", "prediction", "error", "usage", "seconds"} per row

Rows run concurrently in a thread pool. Agent code that prints to stdout cannot
corrupt the protocol: file descriptor 1 is pointed at stderr before the agent loads.
"""

from __future__ import annotations

import argparse
import contextvars
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


def _count_usage(completion):
    """Wrap litellm.completion so each row's calls, tokens and gateway cost add up per row."""

    def counted(*args, **kwargs):
        response = completion(*args, **kwargs)
        usage = _usage.get()
        if usage is not None:
            u = getattr(response, "usage", None)
            usage["calls"] += 1
            usage["prompt_tokens"] += getattr(u, "prompt_tokens", 0) or 0
            usage["completion_tokens"] += getattr(u, "completion_tokens", 0) or 0
            headers = (getattr(response, "_hidden_params", None) or {}).get("additional_headers") or {}
            try:
                usage["cost_usd"] += float(headers.get("llm_provider-x-gateway-cost-usd", 0) or 0)
            except ValueError:
                pass
        return response

    return counted


# litellm's providers for an OpenAI-compatible gateway: `agent/llm.py` routes through the
# first; agents that evolved their own client may use the second.
WARM_UP_PROVIDERS = ("hosted_vllm", "openai")


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
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(agent_path)
    if not hasattr(module, "TaskAgent"):
        raise ImportError(f"{agent_path} has no TaskAgent")
    return module.TaskAgent


def _safe_name(question_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", str(question_id))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent_path", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--root", default=".", help="folder put first on sys.path (the agent's workspace)")
    ap.add_argument("--transcripts", default=None, help="folder for chat_history_<id>.md files")
    ap.add_argument("--also_import", action="append", default=[], metavar="MODULE:NAME",
                    help="another entry point of the workspace that must import (the loop's load check)")
    ap.add_argument("--wait_for_go", action="store_true",
                    help="import litellm, then wait for a line on stdin before loading the agent "
                         "(the harness starts the worker before the agent's files are in place)")
    args = ap.parse_args()

    protocol = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    write_lock = threading.Lock()

    def send(obj: dict) -> None:
        with write_lock:
            protocol.write(json.dumps(obj, default=str) + "\n")
            protocol.flush()

    if args.transcripts:
        os.makedirs(args.transcripts, exist_ok=True)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import litellm

        litellm.suppress_debug_info = True
        from warm_up import warm_up  # mounted beside this file

        warm_up(litellm, WARM_UP_PROVIDERS)
        litellm.completion = _count_usage(litellm.completion)
    except BaseException as e:
        send({"fatal": f"cannot import litellm: {type(e).__name__}: {e}"})
        sys.exit(1)
    if args.wait_for_go and not sys.stdin.readline():
        sys.exit(0)  # the harness went away before the agent was needed
    sys.path.insert(0, str(Path(args.root).resolve()))
    try:
        TaskAgent = load_task_agent(args.agent_path)
    except BaseException as e:  # anything the agent's import does is the agent's error
        send({"fatal": f"cannot load TaskAgent from {args.agent_path}: {type(e).__name__}: {e}"})
        sys.exit(1)
    for entry in args.also_import:
        module, _, name = entry.partition(":")
        try:
            getattr(importlib.import_module(module), name)
        except BaseException as e:
            send({"fatal": f"cannot load {name} from {module}: {type(e).__name__}: {e}"})
            sys.exit(1)
    send({"ready": True})

    def run(row: dict) -> None:
        qid = row["id"]
        send({"started": qid})  # the harness times the row from here, not from when it was queued
        usage = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}
        _usage.set(usage)
        started = time.monotonic()
        prediction, error = None, None
        try:
            transcript = (
                os.path.join(args.transcripts, f"chat_history_{_safe_name(qid)}.md") if args.transcripts else None
            )
            agent = TaskAgent(model=args.model, chat_history_file=transcript)
            prediction, _ = agent.forward(row["inputs"])
            prediction = None if prediction is None else str(prediction)
        except BaseException as e:
            tb = traceback.format_exc(limit=3)
            error = f"{type(e).__name__}: {e}"[:1000] + "\n" + tb[-2000:]
        send(
            {
                "id": qid,
                "prediction": prediction,
                "error": error,
                "usage": usage,
                "seconds": round(time.monotonic() - started, 3),
            }
        )

    with ThreadPoolExecutor(max_workers=max(1, args.workers)) as pool:
        for line in sys.stdin:
            if line.strip():
                pool.submit(run, json.loads(line))


if __name__ == "__main__":
    main()
