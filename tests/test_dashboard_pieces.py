"""The dashboard's pure parts: axis ticks, colour scales, the compare form's default pair, summaries."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from agent.base_agent import AgentSystem
from agent.tool_loop import chat_with_tools
from agent.tools import bash, editor
from apps.dashboard import transcript
from apps.dashboard.pieces import colour_key
from apps.dashboard.reader import Text
from apps.dashboard.svg import TreeNode, line_chart, nice_ticks, score_colour, score_range, tick_labels, tree_svg


def _round(step: float) -> bool:
    """1, 2 or 5 times a power of ten."""
    mantissa = step / 10 ** math.floor(math.log10(step))
    return any(math.isclose(mantissa, m) for m in (1, 2, 5, 10))


@pytest.mark.parametrize("low, high", [(0, 9.25), (0, 0.135), (0.3, 0.55), (0, 1), (-0.05, 0.95), (0, 137),
                                       (1e-4, 3e-4), (2, 2), (0.168, 0.687), (0, 12345.6), (-3, -1)])
@pytest.mark.parametrize("max_ticks", [3, 5, 6, 11])
def test_nice_ticks_are_round_cover_the_range_and_are_few(low, high, max_ticks):
    ticks = nice_ticks(low, high, max_ticks)
    assert 2 <= len(ticks) <= max_ticks
    assert ticks[0] <= low and ticks[-1] >= high
    steps = {round(b - a, 12) for a, b in zip(ticks, ticks[1:])}
    assert len(steps) == 1 and _round(steps.pop())
    step = ticks[1] - ticks[0]
    assert all(math.isclose(t / step, round(t / step), abs_tol=1e-9) for t in ticks)  # multiples of the step


def test_nice_ticks_examples_from_the_issue():
    assert nice_ticks(0, 9.25, 6) == [0, 2, 4, 6, 8, 10]
    assert nice_ticks(0, 0.135, 6) == [0, 0.05, 0.1, 0.15]
    assert nice_ticks(0.3, 0.55, 6) == [0.3, 0.35, 0.4, 0.45, 0.5, 0.55]
    assert nice_ticks(0, 0.3, 4) == [0, 0.1, 0.2, 0.3]  # 0.3 / 0.1 is not quite 3 in floats
    assert all(str(t) != "-0.0" for t in nice_ticks(-1, 1, 3))
    assert nice_ticks(-0.05, 0.95, 2) == [-1, 0, 1]  # across zero, three is the fewest


def test_integer_ticks_never_step_below_one():
    assert nice_ticks(0, 3, 6, integer=True) == [0, 1, 2, 3]
    assert nice_ticks(0, 0, 6, integer=True) == [0, 1]
    assert nice_ticks(0, 40, 6, integer=True) == [0, 10, 20, 30, 40]


def test_nice_ticks_refuses_bounds_that_are_no_numbers():
    with pytest.raises(ValueError, match="finite"):
        nice_ticks(0, math.nan, 6)


def test_tick_labels_share_their_decimals():
    assert tick_labels([0, 0.5, 1]) == ["0.0", "0.5", "1.0"]
    assert tick_labels([0, 5000, 10000]) == ["0", "5,000", "10,000"]
    assert tick_labels([0.0001, 0.00015]) == ["0.00010", "0.00015"]


def test_line_chart_writes_round_ticks_for_awkward_data():
    chart = line_chart({"val": [(0, 0.168), (1, 0.31), (2, 0.687)]}, "generation", "score")
    assert ">0.0<" in chart and ">0.8<" in chart and "0.687<" not in chart
    assert 'class="tick x">1<' in chart and "0.5<" not in chart.split('class="tick x"', 1)[1].split("</svg>")[0]


def test_colours_spread_over_the_scores_shown():
    scale = score_range([0.3, None, 0.42, 0.55])
    assert scale == (0.3, 0.55)
    hues = [score_colour(v, scale).split(",")[0] for v in (0.3, 0.42, 0.55)]
    assert hues == ["hsl(0", "hsl(58", "hsl(120"]  # red, yellow, green: no longer one yellow for all three
    assert score_colour(0.9, scale) == score_colour(0.55, scale) and score_colour(None, scale) == "#d0d0d0"
    assert score_range([0.4, 0.4]) == score_range([None]) == (0.0, 1.0)  # nothing to spread: the absolute scale


def test_tree_and_its_key_use_one_scale():
    nodes = [TreeNode("0", None, 0, "ok", 0.3, "a"), TreeNode("1", "0", 1, "ok", 0.55, "b")]
    tree = tree_svg(nodes, ["1", "0"])
    assert 'fill="hsl(0,65%,55%)"' in tree and 'fill="hsl(120,65%,45%)"' in tree
    key = colour_key(score_range(n.score for n in nodes))
    assert 'data-low="0.300"' in key and 'data-high="0.550"' in key and "0.425" in key
    assert 'fill="hsl(0,65%,55%)"' in key and "lowest and highest" in key
    assert "lowest and highest" not in colour_key((0.0, 1.0))


# -- a meta agent's transcript ----------------------------------------------------------------


def _call(tool_name: str, **tool_input) -> str:
    return f"Next step.\n<json>\n{json.dumps({'tool_name': tool_name, 'tool_input': tool_input})}\n</json>"


@pytest.fixture
def real_transcript(provider, tmp_path) -> str:
    """The transcript agent/tool_loop.py logs for a session of six tool calls, four of them failing in
    the four ways a call fails, ended by a model call refused with HTTP 429."""
    provider.set_replies([
        _call("bash", command="echo fine"),
        _call("bash", command="ls /no/such/folder"),  # exit status 2
        _call("editor", command="view", path=str(tmp_path / "missing.py")),  # Error: ... does not exist
        '<json>{"tool_name": "bash", "tool_input": </json>',  # Error: the tool call could not be read
        _call("search", query="x"),  # no such tool
        _call("bash", command=f"echo '<script>alert(1)</script>' > {tmp_path / 'x'}"),
        "never sent",
    ])
    original, answered = provider.responder, []

    def responder(body):  # the model call after the sixth is refused
        answered.append(body)
        if len(answered) == 6:
            provider.add_faults(["429"])
        return original(body)

    provider.set_responder(responder)
    logged = tmp_path / "chat.md"
    agent = AgentSystem("openai/fake", str(logged))
    bash.reset()
    editor.reset()
    try:
        chat_with_tools([{"role": "user", "content": "Improve the agent."}], "openai/fake", [bash, editor],
                        max_tool_calls=10, log=agent.log)
    finally:
        bash.close()
        editor.reset()
    return logged.read_text(encoding="utf-8")


def test_a_transcript_reads_as_its_calls_tools_and_failures(real_transcript):
    reading = transcript.read(real_transcript)
    assert "".join(t.text for t in reading.turns) == real_transcript  # cut into turns, nothing lost
    # the unreadable call still names bash: it counts as a call of bash that failed
    assert reading.replies == 6 and reading.calls == {"bash": 4, "editor": 1, "search": 1}
    assert [(f.what, f.why.split(":")[0]) for f in reading.failures] == [
        ("tool call 2 (bash)", "exit status 2"), ("tool call 3 (editor)", "Error"),
        ("tool call 4 (bash)", "Error"), ("tool call 5 (search)", "Error"),
        ("model call", "The model call failed (HTTP 429), so the tool loop stops")]
    for failure in reading.failures:  # each links to the turn that made the call (or the failed model call)
        assert reading.turns[failure.turn].role == ("error" if failure.what == "model call" else "assistant")
    assert sum(t.failed for t in reading.turns) == 5


def test_the_transcript_block_puts_the_summary_first_and_links_each_failure(real_transcript):
    shown = transcript.block(Text(real_transcript))
    summary, text = shown.split('<pre class="text" id="transcript">')
    assert "6 model replies, 1 failed model call; 6 tool calls (bash 4, editor 1, search 1)" in summary
    assert "4 of them failed" in summary
    links = re.findall(r'href="#(turn-\d+)"', summary)
    assert len(links) == 5 and all(f'id="{anchor}"' in text for anchor in links)
    assert text.count('class="turn failed"') == 5
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "<script>" not in shown


def test_why_a_tool_result_failed():
    assert transcript.why_failed("Tool result:\nok\n[exit status 0]") is None
    assert transcript.why_failed("Tool result:\n[exit status 1] printed by the command\nok\n[exit status 0]") is None
    assert transcript.why_failed("Tool result:\nboom\n[exit status 127]\n\nNote: only the first") == "exit status 127"
    assert transcript.why_failed("Tool result:\nNot run.\n\nThe limit of 3 tool calls is reached").startswith("not run")
    assert transcript.why_failed("Tool result:\n(no output)\n[timed out after 5 s: the command was killed]") \
        == "timed out: the command was killed"
    assert transcript.why_failed("Error: " + "x" * 500) == "Error: " + "x" * (transcript.MAX_REASON - 7)


def test_a_transcript_that_names_many_tools_counts_the_rest_together():
    text = "".join(f"## assistant\n\n<json>{{\"tool_name\": \"t{i}\"}}</json>\n\n## user\n\nTool result:\nok\n\n"
                   for i in range(40))
    reading = transcript.read(text)
    assert len(reading.calls) == transcript.MAX_TOOLS + 1 and reading.calls["other tools"] == 40 - transcript.MAX_TOOLS


def test_a_hostile_tool_name_and_error_are_text():
    text = ('## assistant\n\n<json>{"tool_name": "<img src=x onerror=alert(1)>"}</json>\n\n'
            "## user\n\nTool result:\nError: <script>alert(2)</script>\n\n## error\n\n<b>bold</b>\n")
    shown = transcript.block(Text(text))
    assert "&lt;img src=x onerror=alert(1)&gt;" in shown and "&lt;script&gt;alert(2)" in shown
    assert "<img" not in shown and "<script" not in shown and "<b>" not in shown


# -- the run page's comparison form ---------------------------------------------------------------


def _read(run: Path):
    from apps.dashboard.reader import RunReader

    return RunReader(run).read()


def test_the_compare_form_offers_a_node_and_its_parent_never_a_node_with_itself(tmp_path):
    from apps.dashboard.pages import compare_form, default_pair
    from support.small_runs import write_run

    improved = _read(write_run(tmp_path / "improved", 0, [0.2, 0.5, 0.3]))
    assert improved.best().node_id == "1" and default_pair(improved) == ("initial", "1")
    # The initial node is still best (the issue's quick run): the newest change, against its parent.
    flat = _read(write_run(tmp_path / "flat", 0, [0.5, 0.3, 0.2], **{"2": {"parent": "1"}}))
    assert flat.best().node_id == "initial" and default_pair(flat) == ("1", "2")
    form = compare_form(flat, *default_pair(flat))
    assert re.search(r'id="compare-a">.*<option value="1" selected>1</option>', form)
    assert re.search(r'id="compare-b">.*<option value="2" selected>2</option>', form)
    assert compare_form(_read(write_run(tmp_path / "alone", 0, [0.4])), "initial", "initial") == ""


def test_a_node_only_too_large_to_screen_is_not_called_one_that_reached_for_the_scoring_side():
    from types import SimpleNamespace

    from apps.dashboard.pieces import suspicious_warning
    from archive.tamper import NOT_SCREENED

    unread = str(suspicious_warning(SimpleNamespace(flags=[f"{NOT_SCREENED} (its meta transcript is over 2 MiB)"])))
    reached = str(suspicious_warning(SimpleNamespace(flags=[f"{NOT_SCREENED} (x)", "its change touches domains/m.py"])))
    assert "Not screened: this node" in unread and "reached for the scoring side" not in unread
    assert "Suspicious: this node" in reached and "its change touches domains/m.py" in reached
    assert str(suspicious_warning(SimpleNamespace(flags=[]))) == ""
