"""Why a meta agent's run that ended well still failed: its model calls, or its tool calls.

A meta agent's code sees a failed model call as an error and may just stop, leaving nothing
changed: recorded as such it would read "ok; changed 0 files" and the child `no_change`, as if
the agent had chosen to change nothing. What its calls came to is the gateway's to say (its
session's counts, from the gateway's own calls to the provider); what its tool calls came to,
only the conversation the agent returned can say (inside/run_meta.py counts them), a claim
read here as hostile data, and used only to say why a meta agent that changed nothing failed.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from archive.records import MetaResult, Status
from inside.run_meta import read_summary
from services.choices import MetaFailure

if TYPE_CHECKING:
    from services.gateway import Gateway
    from services.gateway.sessions import Session
    from services.sandbox import RunResult

META_LOG = "meta_stdout.log"  # in the node's records: what the meta agent's run printed


def meta_log(stdout: str, stderr: str) -> str:
    """The text of META_LOG: the run's stdout, then its stderr."""
    return stdout + "\n--- stderr ---\n" + stderr


def meta_result(gateway: Gateway, key: str, run: RunResult, commit: str | None, patch: dict, seconds: float,
                rule: str) -> MetaResult:
    """What the meta agent's `run` (its calls made with session `key`) left: its change `commit` (None:
    nothing changed that counts) and how it ended, under loop.meta_failure `rule`. A run that failed
    (exited non-zero, timed out, every call failed) is META_FAILED, its change kept to read and never
    evaluated (the reference's run_meta_agent.py writes its diff only once forward() returned).

    The gateway's refusals are not the agent's failure, whatever a coding agent's exit code says of them:
    a run the budget cut short is BUDGET_STOPPED (not logged as done, so a resume with more budget runs it
    again), and one whose last call was refused at the session's call cap ended as the built-in agent's run
    ends at its cap, its change taken."""
    failed = meta_failure(gateway, key, commit is not None)
    session = gateway.session_counts(key)
    if session and session.budget_refused and (spent := gateway.budget_left_message()):
        return MetaResult(Status.BUDGET_STOPPED, commit, patch, seconds, f"meta agent stopped: {spent}")
    if at_cap(run, session):
        run = dataclasses.replace(run, returncode=0)
    if not run.ok:
        tail = (run.stderr.strip().splitlines() or [""])[-1][:300]
        return MetaResult(Status.META_FAILED, commit, patch, seconds, f"meta agent {run.why()}: {tail}")
    if failed:
        return MetaResult(Status.META_FAILED, commit, patch, seconds, f"meta agent: {failed}")
    if malformed := malformed_calls(run.stdout, commit is not None):
        # The reference's run ends well here, with an empty diff: under `parent` the child is a plain
        # no_change (saying why), and its parent stays a parent.
        return MetaResult(Status.OK if rule == MetaFailure.PARENT else Status.META_FAILED, None, patch, seconds,
                          f"meta agent: {malformed}")
    return MetaResult(Status.OK, commit, patch, seconds)


def at_cap(run: RunResult, session: Session | None) -> bool:
    """Whether the run exited with an error of its own (not killed) after the gateway refused a call at its
    session's call cap: a coding agent ends so when its turns outlast the calls the run gives it."""
    over = session is not None and session.max_calls is not None and session.calls > session.max_calls
    return over and (run.returncode or 0) > 0 and not (run.timed_out or run.output_capped or run.disk_capped)


def meta_failure(gateway: Gateway, key: str, changed: bool) -> str | None:
    """Why the meta agent whose calls went with session `key` failed at the provider though its run
    ended well; None when it did not.

    ProviderDown when the gateway's breaker tripped, or when a model call failed at the provider
    and the provider fails the gateway's probe too (an outage cut the conversation short): then
    nothing of the run is kept and the generation is redone on resume. A provider that answers
    the probe had failed the agent's own requests (replies too long for the timeout, say): what
    the run did stands, and if every call failed and nothing changed, that is why it failed (the
    reference's agent raises on such a call, and its run exits non-zero)."""
    gateway.check_breaker()
    session = gateway.session_counts(key)
    if session and session.provider_failures:
        gateway.confirm_outage(key, "in the meta agent's run")
        if not session.answered and not changed:
            return f"every model call failed at the provider ({session.provider_failures} calls)"
    return None


def malformed_calls(stdout: str, changed: bool) -> str | None:
    """Why a meta agent that changed nothing and whose run printed `stdout` failed by its own tool
    calls: every one could not be read. The reference's agent skips a tool call it cannot read and
    returns, so there its run ends well, with an empty change."""
    if changed:
        return None
    summary = read_summary(stdout)
    if summary and summary["tool_calls"] and summary["malformed"] == summary["tool_calls"]:
        return f"all {summary['tool_calls']} tool calls were malformed"
    return None
