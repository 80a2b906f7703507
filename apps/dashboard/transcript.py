"""A meta agent's transcript on its node's page: a summary first (model replies, tool calls by tool,
the calls that failed, each a link into the text), then the text, one anchor per turn.

The transcript is the markdown agent/tool_loop.py logs: `## <role>` sections, a tool call in an
assistant turn (`"tool_name": ...` in text mode, `Tool call: <name> ...` natively), its result in
the next user turn (`Tool result:`) or tool turn, a failed model call as `## error`. The agent could
have written any of it (its own code logs it), so this is a reading of the text, said as such on
the page: the counts are what the text shows, and every piece of it is escaped like the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from apps.dashboard.markup import Markup, h, join
from apps.dashboard.reader import Text

ROLES = ("system", "user", "assistant", "tool", "error", "usage")
_HEADING = re.compile(rf"^## ({'|'.join(ROLES)})[ \t]*$", re.M)
_TEXT_CALL = re.compile(r'"tool_name"\s*:\s*"([^"\\\n]{1,64})"')
_NATIVE_CALL = re.compile(r"^Tool call: (\S{1,64})", re.M)
_EXIT = re.compile(r"^\[exit status (\d+)\]", re.M)
MAX_TOOLS = 12  # tool names counted one by one; calls to any other are counted together
MAX_LISTED = 50  # failures linked from the summary
MAX_REASON = 160  # characters of a failure's first line
MAX_TURNS = 2000  # turns anchored one by one (a meta agent makes 2 a call); the rest of the text is the last one


@dataclass
class Turn:
    role: str  # one of ROLES, or "" for text before the first heading
    text: str  # the heading and what follows it
    failed: bool = False


@dataclass
class Failure:
    turn: int  # the turn to link: the tool call's, or the failed model call's
    what: str  # "tool call 3 (bash)" or "model call"
    why: str


@dataclass
class Reading:
    turns: list[Turn]
    replies: int = 0  # assistant turns: model calls that answered
    calls: dict[str, int] = field(default_factory=dict)  # tool -> calls
    failures: list[Failure] = field(default_factory=list)


def turns_of(text: str) -> list[Turn]:
    """The text cut before each `## <role>` heading, at most MAX_TURNS pieces (a page of 80,000 took
    0.6 s to build); together they are the text again."""
    starts = [m.start() for m, _ in zip(_HEADING.finditer(text), range(MAX_TURNS))]
    bounds = ([0] if not starts or starts[0] > 0 else []) + starts + [len(text)]
    turns = []
    for start, end in zip(bounds, bounds[1:]):
        found = _HEADING.match(text, start)
        turns.append(Turn(found.group(1) if found else "", text[start:end]))
    return turns


def why_failed(result: str) -> str | None:
    """Why a tool call's result (a turn's text after its heading) says it failed, in agent/tool_loop.py's
    and the tools' wording; None when it does not."""
    body = result.removeprefix("Tool result:\n").lstrip("\n")
    if body.startswith("Error:"):
        return body[:MAX_REASON].splitlines()[0]
    if body.startswith("Not run."):
        return "not run: the limit of tool calls was reached"
    statuses = _EXIT.findall(body)
    if statuses and statuses[-1] != "0":
        return f"exit status {statuses[-1]}"
    if "\n[timed out after " in body:
        return "timed out: the command was killed"
    if "\n[the shell exited with status " in body:
        return "the shell exited"
    return None


def _tool_named(turn: str) -> str:
    found = _TEXT_CALL.search(turn) or _NATIVE_CALL.search(turn)
    return found.group(1) if found else "unreadable call"


def read(text: str) -> Reading:
    """The transcript's turns, and what its summary says of them."""
    reading = Reading(turns_of(text))
    call_turn, number = None, 0
    for i, turn in enumerate(reading.turns):
        body = turn.text.split("\n", 2)[-1].lstrip("\n")
        if turn.role == "assistant":
            reading.replies += 1
            call_turn = i
        elif call_turn is not None and (turn.role == "tool" or (turn.role == "user" and
                                                                body.startswith("Tool result:"))):
            number += 1
            tool = _tool_named(reading.turns[call_turn].text)
            if tool not in reading.calls and len(reading.calls) >= MAX_TOOLS:
                tool = "other tools"
            reading.calls[tool] = reading.calls.get(tool, 0) + 1
            why = why_failed(body)
            if why is not None:
                turn.failed = True
                reading.failures.append(Failure(call_turn, f"tool call {number} ({tool})", why))
            call_turn = None
        elif turn.role == "error":
            turn.failed = True
            first = body[:MAX_REASON].splitlines()[0] if body else "no reason given"
            reading.failures.append(Failure(i, "model call", first))
    return reading


def _counted(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def summary(reading: Reading, cut: bool) -> Markup:
    """One line of counts, then each failure linked to its turn."""
    calls = sum(reading.calls.values())
    by_tool = ", ".join(f"{tool} {n}" for tool, n in sorted(reading.calls.items(), key=lambda kv: -kv[1]))
    tool_failures = sum(1 for f in reading.failures if f.what != "model call")
    model_failures = len(reading.failures) - tool_failures
    line = (_counted(reading.replies, "model reply", "model replies")
            + (f", {_counted(model_failures, 'failed model call', 'failed model calls')}" if model_failures else "")
            + f"; {_counted(calls, 'tool call', 'tool calls')}" + (f" ({by_tool})" if by_tool else "")
            + f"; {tool_failures} of them failed" + (" (in the part shown)" if cut else "") + ".")
    listed = [h("li", {}, h("a", {"href": f"#turn-{f.turn}"}, f.what), f": {f.why}")
              for f in reading.failures[:MAX_LISTED]]
    more = h("li", {}, f"and {len(reading.failures) - MAX_LISTED} more") \
        if len(reading.failures) > MAX_LISTED else ""
    return h("section", {"class": "transcript-summary", "id": "transcript-summary"},
             h("p", {"class": "counts"}, line),
             h("ul", {"class": "failures"}, join(listed), more) if listed else "",
             h("p", {"class": "note"}, "As the transcript reads: the agent's own code writes it, so its text "
                                       "could mimic a turn."))


def block(text: Text) -> Markup:
    """The transcript read from the run (not missing): its summary, then its text with an anchor at each turn."""
    reading = read(text.text)
    turns = join(h("span", {"class": "turn failed" if t.failed else "turn", "id": f"turn-{i}",
                            "data-role": t.role or None}, t.text) for i, t in enumerate(reading.turns))
    return summary(reading, text.cut) + h("pre", {"class": "text", "id": "transcript"}, turns)
