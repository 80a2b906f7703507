"""Host CPU of screening one node's agent text: tamper flags, novelty and rendering, typical and worst.

What the controller does with a node's text after its sandbox closed, on the text of a typical node
(a change of 3 files and 40 lines, a transcript of 20 tool calls) and on the worst text an agent
can write within the quotas: patch.diff and the meta transcript at what tamper flags read of them
(archive.tamper.READ_BYTES, 2 MiB), each of several kinds of text built to make the scanners work
hardest, the worst kind kept; novelty against 200 earlier nodes of novelty.MAX_LINES changed lines
each, all of the same size (so none is skipped by size) and none alike; rendering: the capture's
bidi scan of a whole change at the workspace quota (loop.workspace_total_mb) with a bidi control on
every line, and the console line of the node. Apart, what novelty does once per start or resume:
read and parse the 200 earlier patches it then keeps. CPU is time.process_time, the median of --repeat.
The passes before issue 35 are not run: on these inputs they take minutes.

    python bench/host_screening.py --repeat 3
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from archive.novelty import MAX_LINES, MAX_PATCH_BYTES, Change, changed_lines, nearest, node_change  # noqa: E402
from archive.tamper import READ_BYTES, flags  # noqa: E402
from services.config import LoopConfig  # noqa: E402
from services.render import bidi_files, console  # noqa: E402

TARGET_S = 0.5  # per node, worst case
EARLIER = 200  # earlier nodes a child is compared with
HIDDEN = ["Points", "Reward"]


def section(path: str, body: str) -> str:
    return f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n{body}"


def repeated(unit: str, size: int = READ_BYTES) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def turn(text: str) -> str:
    return "## system\n\nYou improve an agent.\n\n## assistant\n\n" + text


TRANSCRIPTS = {  # each cut to what tamper flags read of a transcript
    "scoring words end to end": turn(repeated("domains/")),
    "label words before an extension": turn(repeated("gold" * 2000 + ".csv ")),
    "data file names": turn(repeated("answer.csv/answer.csv/answer.csv ")),
    "a path built to backtrack": turn("cat " + repeated("a/")),
    "escapes": turn(repeated("\\x41")),
    "joined literals": turn(repeated("' '")),
    "shell variables": turn(repeated("a=b $a ")),
    "spaces": turn(repeated(" ")),
    "headings": repeated("\n## assistant"),
}
PATCHES = {  # the same for patch.diff
    "4 KB paths": repeated(section("task_agent/" + "a-b." * 1000 + ".py", "+x\n")),
    "many files": repeated(section("task_agent/x.py", "+x\n")),
    "escapes on added lines": section("task_agent/a.py", repeated("+'\\x41\\u0042\\103'\n")),
    "joined literals on added lines": section("task_agent/a.py", repeated("+'R' 'e' + 'w'\n")),
    "chr() calls": section("task_agent/a.py", repeated("+chr(82)+chr(0x65)\n")),
    "one-character lines": section("task_agent/a.py", repeated("+\n")),
}
CALL = json.dumps({"tool_name": "bash", "tool_input": {"command": "sed -n 1,80p /workspace/task_agent/task_agent.py"}})
TYPICAL_TRANSCRIPT = "## system\n\nYou improve an agent.\n\n" + "".join(
    f"## assistant\n\nI will look at the agent.\n<json>{CALL}</json>\n\n## user\n\nTool result:\n"
    + "".join(f"    line {j} of the agent's code = {j}\n" for j in range(60)) for _ in range(20))
TYPICAL_PATCH = "".join(section(f"task_agent/part{i}.py", "".join(f"+    prompt_{i}_{j} = 'check step {j}'\n"
                                                                    for j in range(13))) for i in range(3))


def cpu(work: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.process_time()
        work()
        times.append(time.process_time() - started)
    return statistics.median(times)


def worst(cases: dict[str, str], work: Callable[[str], object], repeat: int) -> tuple[str, float]:
    timed = {name: cpu(lambda text=text: work(text), repeat) for name, text in cases.items()}
    name = max(timed, key=timed.__getitem__)
    return name, timed[name]


def novelty_inputs(lines: int) -> tuple[list[str], list[tuple[str, Change]]]:
    mine = [f"+    step_{i} = check(proof, {i})" for i in range(lines)]
    earlier = [(str(n), Change.of([f"+    other_{n}_{i} = {i}" for i in range(lines)])) for n in range(EARLIER)]
    return mine, earlier


def resumed_cache(folder: Path, earlier: int) -> Callable[[], object]:
    """What the loop does once after a start or a resume: read and parse every earlier node's patch
    (MAX_PATCH_BYTES of each, the most changed lines) into the Changes it then keeps."""
    body = "".join(f"+    step_{i} = check(proof, {i}) {'x' * 100}\n" for i in range(MAX_LINES * 2))
    for n in range(earlier):
        (folder / str(n)).mkdir()
        (folder / str(n) / "patch.diff").write_text(section("task_agent/a.py", body)[:MAX_PATCH_BYTES + 1000])
    return lambda: [Change.of(node_change(folder, str(n))) for n in range(earlier)]


def quota_patch(total_bytes: int) -> str:
    """A change at the workspace quota with a bidi control on every line, most on removed lines."""
    body = "-\u202e\n" * 40 + "+\u202e\n"
    one = section("agent/f.py", body)
    return "".join(section(f"agent/f{i}.py", body) for i in range(total_bytes // len(one)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    r = args.repeat
    typical_tamper = cpu(lambda: flags(TYPICAL_PATCH, [], HIDDEN, TYPICAL_TRANSCRIPT), r)
    kind_t, worst_transcript = worst(TRANSCRIPTS, lambda text: flags("", [], HIDDEN, text), r)
    kind_p, worst_patch = worst(PATCHES, lambda text: flags(text, [], HIDDEN, ""), r)
    worst_tamper = worst_transcript + worst_patch

    typical_mine, typical_earlier = novelty_inputs(40)
    typical_novelty = cpu(lambda: nearest(changed_lines(TYPICAL_PATCH), typical_earlier, 0.95), r)
    mine, earlier = novelty_inputs(MAX_LINES)
    mine_patch = section("task_agent/a.py", "".join(line + "\n" for line in mine))
    worst_novelty = cpu(lambda: nearest(Change.of(changed_lines(mine_patch)), earlier, 0.95), r)

    with tempfile.TemporaryDirectory(prefix="host_screening_") as folder:
        cache = cpu(resumed_cache(Path(folder), EARLIER), r)

    total_mb = LoopConfig().workspace_total_mb
    big = quota_patch(int(total_mb * 2**20))
    flagged = flags(big[:READ_BYTES], [], HIDDEN, TRANSCRIPTS[kind_t])
    typical_render = cpu(lambda: (bidi_files(TYPICAL_PATCH), console("node 7 (parent 3): ok, suspicious: ...")), r)
    worst_render = cpu(lambda: (bidi_files(big), console("; ".join(flagged))), r)

    ms = 1000
    print(f"tamper flags     typical {typical_tamper * ms:7.1f} ms   worst {worst_tamper * ms:7.1f} ms  "
          f"(transcript: {kind_t} {worst_transcript * ms:.1f} ms; patch: {kind_p} {worst_patch * ms:.1f} ms; "
          f"{READ_BYTES // 2**20} MiB each)")
    print(f"novelty vs {EARLIER}  typical {typical_novelty * ms:7.1f} ms   worst {worst_novelty * ms:7.1f} ms  "
          f"({MAX_LINES} changed lines a node)")
    print(f"novelty, once after a start or resume: {EARLIER} earlier patches read and parsed {cache * ms:.1f} ms "
          f"({MAX_PATCH_BYTES // 1024} KiB each)")
    print(f"rendering        typical {typical_render * ms:7.1f} ms   worst {worst_render * ms:7.1f} ms  "
          f"(bidi scan of a {len(big) / 2**20:.0f} MiB change, {total_mb:g} MB quota)")
    typical = typical_tamper + typical_novelty + typical_render
    worst_total = worst_tamper + worst_novelty + worst_render
    print(f"per node         typical {typical * ms:7.1f} ms   worst {worst_total * ms:7.1f} ms  "
          f"ratio {worst_total / typical:.0f}x  target worst < {TARGET_S * ms:.0f} ms: "
          f"{'PASS' if worst_total < TARGET_S else 'FAIL'}")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
