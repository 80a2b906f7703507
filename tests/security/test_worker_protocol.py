"""The worker protocol under attack: a task agent whose answers, exceptions or writes are hostile.

One run of the harness CLI in a real bwrap sandbox carries every attack, one train row each
(a plain row first and last). The run must end fast (the row timeout, 600 s, is far beyond
the run's allowance of 240 s, which leaves room for a loaded machine), exit 0, record each
attacking row's outcome with a clear reason, and answer the plain rows as if nothing happened.
"""

import json
import sys
import time

import pandas as pd
import pytest

from support.cli import FAST_CONFIG, REPO_ROOT, cli_env

pytestmark = pytest.mark.e2e  # every test here runs a whole process (the loop, a sandbox, a browser)

NAMES = ("str_raises", "str_and_repr_raise", "exception_str_raises", "returns_string", "returns_generator",
         "returns_none", "huge_prediction", "surrogate_prediction", "surrogate_error", "forged_answer",
         "forged_start", "long_line", "garbage", "forged_on_stdout")
ROWS = pd.read_csv(REPO_ROOT / "domains/imo/data/gradingbench_filtered_100_train.csv", dtype=str).head(len(NAMES) + 2)
ROW_OF = {name: i + 1 for i, name in enumerate(NAMES)}  # rows 0 and len(NAMES) + 1 are plain
CAP = 1_000_000  # harness.max_prediction_bytes's default

AGENT = r'''
import json, os, stat
from pathlib import Path

ATTACK_OF = {attack_of!r}  # a row's student answer -> its attack
NEXT = {next_answer!r}  # a row's student answer -> the next row's, which is queued in the worker while it runs


class NoStr:
    def __str__(self):
        raise RuntimeError("no str")

    def __repr__(self):
        return "NoStr()"


class NoText:
    def __str__(self):
        raise SystemExit("no str")

    def __repr__(self):
        raise KeyboardInterrupt


class NoTextError(BaseException):
    def __str__(self):
        raise SystemExit("no str")

    def __repr__(self):
        raise RuntimeError("no repr")


def protocol_fd():
    """The worker's pipe to the harness: the one pipe that is neither its stdin nor its stderr."""
    others = {{os.fstat(fd).st_ino for fd in (0, 1, 2)}}
    for fd in range(3, 256):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if stat.S_ISFIFO(st.st_mode) and st.st_ino not in others:
            return fd
    raise RuntimeError("no protocol pipe")


def write(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def line(msg):
    return json.dumps(msg).encode() + b"\n"


def raise_(e):
    raise e


def queued(answer):
    """What the worker knows the next row by: found among the objects of its process, as agent code can,
    once the harness sent it (rows this fast may finish before it does)."""
    import gc, time
    for _ in range(400):
        for obj in gc.get_objects():
            if type(obj) is dict and set(obj) == {{"id", "inputs"}} and \
                    obj["inputs"].get("student_answer") == NEXT[answer]:
                return obj["id"]
        time.sleep(0.05)
    raise RuntimeError("the next row is not queued")


def forged(me, answer=None):
    return {{"id": queued(answer) if answer else me, "prediction": "forged", "error": None, "usage": {{}},
            "seconds": 0.1}}


ATTACKS = {{
    "str_raises": lambda me: (NoStr(), []),
    "str_and_repr_raise": lambda me: (NoText(), []),
    "exception_str_raises": lambda me: raise_(NoTextError()),
    "returns_string": lambda me: "correct",
    "returns_generator": lambda me: (x for x in ("correct", [])),
    "returns_none": lambda me: None,
    "huge_prediction": lambda me: ("x" * (300 * 2**20), []),
    "surrogate_prediction": lambda me: ("ok \ud800 done", []),
    "surrogate_error": lambda me: raise_(RuntimeError("bad \udcff text")),
    "forged_answer": lambda me, answer: (write(protocol_fd(), line(forged(me, answer))), ("correct", []))[1],
    "forged_start": lambda me: (write(protocol_fd(), line({{"started": me}})), ("correct", []))[1],
    "long_line": lambda me: write(protocol_fd(), b"x" * (100 * 2**20)),
    "garbage": lambda me: (write(protocol_fd(), b"\xff\xfe\x00 garbage\n"), ("correct", []))[1],
    "forged_on_stdout": lambda me: (write(1, line(forged(me))), print(json.dumps(forged(me))),
                                    ("correct", []))[2],
}}


class TaskAgent:
    def __init__(self, model, chat_history_file=None):
        self.me = Path(chat_history_file).stem.removeprefix("chat_history_")  # this row's id

    def forward(self, inputs):
        attack = ATTACK_OF.get(inputs["student_answer"])
        if attack == "forged_answer":
            return ATTACKS[attack](self.me, inputs["student_answer"])
        return ATTACKS[attack](self.me) if attack else ("correct", [])
'''

# Runs the harness CLI and writes the harness process's own peak RSS (KiB) to argv[1] at exit.
# VmHWM, not getrusage's ru_maxrss: exec carries the spawning process's peak into ru_maxrss, so
# the harness would be charged with the pytest worker's memory (619-679 MB in a full suite).
PEAK_RSS_WRAPPER = """
import atexit, re, runpy, sys
out = sys.argv.pop(1)


def peak_kib():
    return re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)


atexit.register(lambda: open(out, "w").write(peak_kib()))
sys.argv[0] = "domains.harness"
runpy.run_module("domains.harness", run_name="__main__", alter_sys=True)
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory, fake_openai_session) -> tuple[pd.DataFrame, dict, object]:
    """The hostile agent over ROWS: the predictions, what the run cost in time and memory, its folder."""
    import subprocess

    tmp_path = tmp_path_factory.mktemp("worker-protocol")
    agent = tmp_path / "hostile.py"
    answers = list(ROWS["Response"])
    agent.write_text(AGENT.format(attack_of={answers[i]: name for name, i in ROW_OF.items()},
                                  next_answer=dict(zip(answers, answers[1:]))))
    config = tmp_path / "c.yaml"
    config.write_text(FAST_CONFIG.replace("harness:\n", "harness:\n  row_timeout_s: 600\n  num_workers: 1\n"))
    peak = tmp_path / "peak_rss_kib"
    fake_openai_session.reset()
    started = time.monotonic()
    r = subprocess.run([sys.executable, "-c", PEAK_RSS_WRAPPER, str(peak), "--domain", "imo_grading", "--subset",
                        "train", "--num_samples", str(len(ROWS)), "--agent_path", str(agent), "--output_dir",
                        str(tmp_path / "out"), "--run_id", "r", "--model", "openai/fake", "--config", str(config),
                        "--sandbox", "bwrap"],
                       env=cli_env(fake_openai_session), cwd=REPO_ROOT, capture_output=True, text=True, timeout=400)
    seconds = time.monotonic() - started
    assert r.returncode == 0, r.stderr
    assert seconds < 240, f"the run took {seconds:.0f} s: a row waited for its timeout"
    csv = tmp_path / "out/r/predictions.csv"
    df = pd.read_csv(csv, dtype=str, keep_default_na=False, encoding="utf-8")
    return df, {"peak_rss_mb": int(peak.read_text()) / 1024, "csv_mb": csv.stat().st_size / 2**20}, tmp_path


def outcome(run, name: str) -> tuple[str, str]:
    """The attacking row's prediction and error."""
    df = run[0]
    return df["prediction"][ROW_OF[name]], df["error"][ROW_OF[name]]


def test_the_plain_rows_are_answered_as_if_nothing_happened(run):
    df = run[0]
    for i in (0, len(ROWS) - 1):
        assert (df["prediction"][i], df["error"][i]) == ("correct", ""), df.loc[i].to_dict()


def attack(name: str, description: str, prediction: str, error: str):
    """One parametrized case: the attacking row's expected prediction and error (a prefix of it)."""
    return pytest.param(name, prediction, error, id=name, marks=pytest.mark.attack(description))


@pytest.mark.parametrize("name, prediction, error", [
    attack("str_raises", "a prediction whose __str__ raises", "NoStr()", ""),
    attack("str_and_repr_raise", "a prediction whose __str__ and __repr__ raise BaseExceptions",
           "<unprintable NoText>", ""),
    attack("exception_str_raises", "forward raises a BaseException whose __str__ and __repr__ raise",
           "", "NoTextError: <unprintable NoTextError>"),
    attack("returns_string", "forward returns a string, not a pair", "",
           "forward returned str, not a (prediction, messages) pair"),
    attack("returns_generator", "forward returns a generator that would unpack as a pair", "",
           "forward returned generator, not a (prediction, messages) pair"),
    attack("returns_none", "forward returns None", "",
           "forward returned NoneType, not a (prediction, messages) pair"),
    attack("surrogate_prediction", "a prediction with a lone surrogate, which UTF-8 cannot encode",
           "ok \\ud800 done", ""),
    attack("surrogate_error", "an exception message with a lone surrogate", "",
           "RuntimeError: bad \\udcff text"),
])
def test_whatever_forward_returns_or_raises_the_row_is_answered(run, name, prediction, error):
    got_prediction, got_error = outcome(run, name)
    assert got_prediction == prediction
    assert got_error.startswith(error) and bool(got_error) == bool(error)


@pytest.mark.attack("a prediction of 300 MiB, to bloat the harness's memory and predictions.csv")
def test_a_huge_prediction_is_an_error_and_never_reaches_the_harness(run):
    cost = run[1]
    assert outcome(run, "huge_prediction") == ("", f"prediction of {300 * 2**20} bytes is over the cap of {CAP}")
    assert cost["peak_rss_mb"] < 600, cost
    assert cost["csv_mb"] < 2, cost


@pytest.mark.parametrize("name, violation", [
    pytest.param("forged_answer", "an answer for row '",
                 id="forged_answer", marks=pytest.mark.attack(
                     "a forged answer on the protocol pipe for a row that is queued, not running")),
    pytest.param("forged_start", "a start of row", id="forged_start", marks=pytest.mark.attack(
        "a second 'started' for its own row, to reset the row's timeout clock")),
    pytest.param("long_line", f"a line of more than {6 * CAP + 65536} characters", id="long_line",
                 marks=pytest.mark.attack("100 MB without a newline on the protocol pipe")),
    pytest.param("garbage", "a line that is not JSON", id="garbage",
                 marks=pytest.mark.attack("bytes that are not UTF-8 or JSON on the protocol pipe")),
])
def test_a_forged_protocol_line_kills_the_worker_and_fails_the_row(run, name, violation):
    prediction, error = outcome(run, name)
    assert prediction == "" and error.startswith(f"protocol violation: the worker wrote {violation}"), error
    if name == "forged_answer":  # the queued row, by the token the worker knows it by: never by its id
        assert error.endswith("which is not running; it was killed"), error
        assert ROWS["Grading ID"][ROW_OF[name] + 1] not in error


@pytest.mark.attack("a forged answer for another row written to stdout (fd 1)")
def test_a_forged_answer_on_stdout_lands_in_the_log(run):
    folder = run[2] / "out" / "r"
    assert outcome(run, "forged_on_stdout") == ("correct", "")
    assert '"prediction": "forged"' in (folder / "worker.log").read_text()
    records = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
    assert not any(rec.get("prediction") == "forged" for rec in records)
