"""Tamper flags (issue 30): a node whose change reaches for how it is scored, or whose meta agent
looked where the scores are made, is flagged `suspicious` with the reasons. Flags inform, they do
not censor: the node runs and is scored like any other; the console, report.html and the
dashboard show why it was flagged, for a person to read the change.

What is looked at, all written by the core from what the agent did (read bounded, never run):
- the files its change touches (patch.diff's file headers) and the protected paths it tried to
  change (dropped from the commit, patch["dropped"]): scoring code (domains/, graders, metrics,
  the try command, the loop's records) and label-like data files (names with label, answer, gold,
  truth, solution, reward or grading, as CSV, JSON(L), TSV or parquet);
- the lines it adds: a domain's hidden column named as a string (the agent never sees those
  columns, so naming one is reaching for the label);
- its meta agent's transcript, the assistant's turns only (the prompts name paths themselves):
  the same paths in the commands it ran, but the try command and the train rows, which it is
  told to use (each path read normalised, `try_agent/../domains/` as `domains/`, and let through
  only when it is exactly the command or a train file).
Added lines and commands are read after `archive.text_pass.plain` undid escapes, chr(), joined
literals and shell variables, so `"\\x52eward"` or `D=dom; cat ${D}ains/metrics.py` is flagged as
its plain spelling is. A hint for a reader, not a detector: text built at run time is not read.

Every pass is linear in the text and bounded (archive/text_pass.py): input caps here, a count of
matches and a deadline per node. A pass that reaches one stops, and the node carries a reason
that starts with NOT_SCREENED, first in its list, so a screen cannot be stalled nor quietly dodged.
"""

from __future__ import annotations

import codecs
import posixpath
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path

from archive.text_pass import Budget, TooLarge, joined, plain, unquoted
from services.fsutil import read_below
from services.render import console

# What the meta agent is told to use, in its commands: the try command (inside/try_agent.py, which the
# prompt names by its path, /opt/hyperagents/try_agent.py in a sandbox) and the train rows with their
# labels (optimizer/feedback.py's `<domain>_train.jsonl`, mounted at /data); only changing them is
# reaching. A word is let through only when, normalised, it is one of these exactly (see `allowed_to_use`).
TRY_COMMAND = ("try_agent", "try_agent.py")  # the command's last segment, in a folder off the scoring side
TRAIN_FOLDER = "/data/"
TRAIN_FILE = "_train.jsonl"  # how a train file's name ends, in TRAIN_FOLDER or alone
READ_BYTES = 2 * 2**20  # of a patch.diff and of a meta transcript read for tamper flags
MAX_FLAGS = 8  # reasons kept for one node
MAX_SHOWN = 80  # characters of an agent-written name in a reason
MAX_FILES = 10_000  # files of a change read from patch.diff (the workspace quota allows 5,000)
MAX_LINES = 200_000  # lines of patch.diff read for the lines it adds
MAX_TURNS = 10_000  # headed sections of a meta transcript (a meta agent makes 2 a call)
MAX_TOKEN = 4096  # characters of a path-like word looked at on each side of a scoring word (PATH_MAX)
MAX_PATHS = 3  # scoring paths named in a transcript, kept as reasons
_HEADER_CHARS = 2**18  # of a file's section read for its header (a name git quotes takes up to 4 bytes a byte)
NOT_SCREENED = "not screened: too large"

_SCORING_WORDS = ("domains/", "proofgrader", "evals/", "scoring.py", "try_agent.py", "ledger.sqlite", "run.json",
                  "archive.jsonl")
# Matched on lowered text. A label-like data file: one of the words, then at most 64 characters of
# the same name, then one of the extensions; looked for back from each extension.
_METRICS = re.compile(r"(?<!\w)metrics?\.py")
_DATA_FILE = re.compile(r"\.(?:csv|jsonl?|tsv|parquet)(?!\w)")
_LABEL_WORD = re.compile(r"label|answer|gold|truth|solution|reward|grading")
_LABEL_GAP = 64 + len("solution")
# Where a scoring path may be: any of the words above or a data file's extension.
_HIT = re.compile(r"domains/|proofgrader|evals/|scoring\.py|try_agent\.py|ledger\.sqlite|run\.json|"
                  r"archive\.jsonl|metrics?\.py|\.csv|\.jsonl?|\.tsv|\.parquet")
_PATH_RUN = re.compile(rf"[\w./-]{{0,{MAX_TOKEN}}}")
_PATH_CHAR = re.compile(r"[\w./-]")
_LONGEST_HIT = max(map(len, (*_SCORING_WORDS, "metrics.py", ".parquet")))  # the longest text _HIT matches
# Of a long word cut where a window ends, characters the next window looks at again: enough for a
# scoring word the cut falls in, and for a label word with its extension (`gold.csv`), to be seen whole.
_OVERLAP = _LABEL_GAP + _LONGEST_HIT


def read_text(root: Path, relative: str, what: str, unread: list[str]) -> str:
    """The first READ_BYTES of an agent-written file below `root` as text ("" when there is none or it
    is not a regular file); when there was more, `what` is added to `unread` (see `flags`)."""
    try:
        data, cut = read_below(root, relative, READ_BYTES)
    except (OSError, ValueError):
        return ""
    if cut:
        unread.append(f"{what} is over {READ_BYTES // 2**20} MiB: its start was read")
    return data.decode("utf-8", "replace")


def _shown(text: str) -> str:
    return console(text, MAX_SHOWN)


def lowered(text: str) -> str:
    """`text` in lower case, one character for one (positions stay those of `text`)."""
    return text.replace("\u0130", "I").lower()  # U+0130 is the one character whose lower case is two


def scoring_path(path: str, budget: Budget | None = None) -> bool:
    """Whether `path` names scoring code, the loop's records or a label-like data file."""
    low = lowered(path)
    if any(w in low for w in _SCORING_WORDS) or _METRICS.search(low):
        return True
    budget = budget or Budget.starting_now()
    for extension in _DATA_FILE.finditer(low):
        budget.step("data file names")
        name_start = max(low.rfind("/", 0, extension.start()) + 1, extension.start() - _LABEL_GAP)
        if _LABEL_WORD.search(low, name_start, extension.start()):
            return True
    return False


def changed_files(patch: str, budget: Budget | None = None) -> list[str]:
    """The files a diff touches, from its file headers, in order, once each (/dev/null left out).
    Only the header of each file's section is read: a line of content cannot pose as a header."""
    budget = budget or Budget.starting_now()
    sections = ("\n" + patch).split("\ndiff --git ", MAX_FILES + 1)
    if len(sections) > MAX_FILES + 1:
        raise TooLarge(f"its change touches over {MAX_FILES:,} files")
    found: dict[str, None] = {}
    for section in sections[1:]:
        budget.check()
        end = section.find("\n@@", 0, _HEADER_CHARS)  # git's header lines of a file, before its first hunk
        header = section[:end if end >= 0 else _HEADER_CHARS].split("\n")[1:]
        names = [_header_name(line) for line in header]
        names = [n for n in names if n is not None] or [_git_line_name(section.partition("\n")[0])]
        found.update((n, None) for n in names if n and n != "/dev/null")
    return list(found)


def _header_name(line: str) -> str | None:
    for plain_prefix, quoted_prefix in (("--- a/", '--- "a/'), ("+++ b/", '+++ "b/')):
        if line.startswith(plain_prefix):
            return line[len(plain_prefix):]
        if line.startswith(quoted_prefix) and line.endswith('"'):  # git's C quoting of unusual names
            try:
                return codecs.escape_decode(line[len(quoted_prefix):-1])[0].decode("utf-8", "replace")
            except ValueError:
                return line[len(quoted_prefix):-1]
    return "/dev/null" if line in ("--- /dev/null", "+++ /dev/null") else None


def _git_line_name(line: str) -> str:
    """P of `a/P b/P`, the first line of a section with no ---/+++ (a binary file, a mode change)."""
    half = (len(line) - 5) // 2
    name = line[2:2 + half]
    return name if line.startswith("a/") and line[2 + half:] == f" b/{name}" else ""


def file_flags(files: Iterable[str], dropped: Iterable[str], budget: Budget | None = None) -> list[str]:
    budget = budget or Budget.starting_now()
    flags = [f"its change touches {_shown(f)}, on the scoring side" for f in files if scoring_path(f, budget)]
    flags += [f"it tried to change the protected path {_shown(str(f))}" for f, _ in zip(dropped, range(MAX_FLAGS))]
    return flags


def added_lines(patch: str) -> str:
    """The lines a diff adds (file headers among them: names, never quoted), at most MAX_LINES lines read."""
    lines = patch.split("\n", MAX_LINES)
    if len(lines) > MAX_LINES:
        raise TooLarge(f"its change is over {MAX_LINES:,} lines")
    return "\n".join([line for line in lines if line[:1] == "+"])  # the sign kept: one pass of C, not two


def hidden_column_flags(patch: str, hidden: Sequence[str], budget: Budget | None = None) -> list[str]:
    """Added lines naming a hidden column as a string literal, however the literal is spelled."""
    budget = budget or Budget.starting_now()
    text = plain(added_lines(patch), budget)
    spellings = (text, joined(text, budget))
    return [f"its change names the hidden column {column!r}" for column in hidden
            if any(f"{q}{column}{e}" in s for s in spellings for q in "'\"" for e in "'\"")]


def assistant_turns(transcript: str) -> list[str]:
    """The assistant's turns of a meta transcript (markdown `## <role>` sections)."""
    sections = ("\n" + transcript).split("\n## ", MAX_TURNS + 1)
    if len(sections) > MAX_TURNS + 1:
        raise TooLarge(f"its meta agent's transcript has over {MAX_TURNS:,} sections")
    turns: list[list[str]] = []
    speaking = False
    for section in sections[1:]:
        heading, _, body = section.partition("\n")
        role = heading.rstrip(" \t")
        if role.replace("_", "a").isalnum():  # a heading: `## <word>` alone on its line
            speaking = role == "assistant"
            if speaking:
                turns.append([body])
        elif speaking:
            turns[-1].append("## " + section)
    return ["\n".join(parts) for parts in turns]


def path_words(text: str, budget: Budget) -> Iterator[tuple[str, int, bool]]:
    """The path-like words of `text` (runs of word characters, `.`, `/`, `-`) that hold a scoring
    word or a data file's extension, in order, each with where that is in it and whether it is
    whole; a long word is looked at MAX_TOKEN around each, so a part of it is not whole. Where such
    a window cuts a word, the next one starts _OVERLAP before the cut: what the cut falls in (a
    scoring word, the label word before `.csv`) is looked at whole, however long the path before it."""
    low = lowered(text)
    backwards = low[::-1]  # where a word starts, matched forwards from the hit in the reversed text
    pos = floor = seen = 0  # where the next hit and the next word may start; where the last window ended
    while found := _HIT.search(low, pos):
        budget.step("path-like words")
        if found.end() <= seen:  # within the overlap, and whole in the last window already
            pos = found.start() + 1
            continue
        before = _PATH_RUN.match(backwards, len(low) - found.start(), len(low) - floor)  # never back past floor
        start = found.start() - (before.end() - before.start() if before else 0)
        after = _PATH_RUN.match(low, found.end())
        end = after.end() if after else found.end()
        cut = _PATH_CHAR.match(low, end) is not None  # the word goes on past this window
        whole = not (start and _PATH_CHAR.match(low, start - 1) or cut)
        yield text[start:end], found.start() - start, whole
        pos, floor, seen = (end - _LONGEST_HIT + 1, end - _OVERLAP, end) if cut else (end, end, end)


def _shown_at(word: str, at: int) -> str:
    """A path-like word as a reason shows it: a long one around `at`, where its scoring word is."""
    if len(word) <= MAX_SHOWN:
        return _shown(word)
    start = max(0, min(at - MAX_SHOWN // 3, len(word) - MAX_SHOWN))
    more = "..." if start + MAX_SHOWN < len(word) else ""
    return ("..." if start else "") + _shown(word[start:start + MAX_SHOWN]) + more


def transcript_flags(transcript: str, budget: Budget | None = None) -> list[str]:
    """Scoring-side paths in the assistant's turns of a meta agent's transcript."""
    named = islice(_scoring_words(transcript, budget or Budget.starting_now()), MAX_PATHS)
    return [f"its meta agent's commands name {path}, on the scoring side" for path in dict.fromkeys(named)]


def _scoring_words(transcript: str, budget: Budget) -> Iterator[str]:
    """Each scoring-side path of the assistant's turns, as a reason shows it, once (a word repeated
    all over a transcript is looked at once). A path is shown normalised when that is on the scoring
    side too, as a spelling is shown plain: `try_agent/../domains/metrics.py` as `domains/metrics.py`."""
    looked_at: set[tuple[str, bool]] = set()
    for turn in assistant_turns(transcript):
        for word, at, whole in path_words(unquoted(joined(plain(turn, budget), budget)), budget):
            if (word, whole) not in looked_at:
                looked_at.add((word, whole))
                if scoring_path(word, budget) and not (whole and allowed_to_use(word, budget)):
                    path = normalised(word)
                    if not whole or path == word or not scoring_path(path, budget) or allowed_to_use(path, budget):
                        yield _shown_at(word, at)
                    else:
                        hit = _HIT.search(lowered(path))
                        yield _shown_at(path, hit.start() if hit else 0)


def normalised(path: str) -> str:
    """`path` as posixpath.normpath reads it (`.` segments and repeated slashes dropped, `..` taking
    its parent away; above the root is the root), which is linear in it. Unlike normpath, a path
    never starts with two slashes and a folder keeps its final slash (`evals/.` is `evals/`): the
    scoring words are matched with it. Read as names, not as the filesystem would: a `..` after a
    symbolic link is not followed."""
    text = posixpath.normpath("/" + path.lstrip("/") if path.startswith("//") else path)
    folder = path.endswith(("/", "/.", "/..")) or path in (".", "..")
    return text + "/" if folder and text not in ("/", ".") else text


def allowed_to_use(word: str, budget: Budget) -> bool:
    """Whether a path word is exactly what the meta agent is told to use, read normalised: the try
    command (`try_agent`, `try_agent.py`, or either in a folder that names nothing on the scoring side,
    such as /opt/hyperagents/try_agent.py) or a train file (`/data/<name>_train.jsonl`, or
    `<name>_train.jsonl` alone, read from /data), with nothing after it. A word that merely holds one,
    such as `try_agent/../domains/` or `/data/x_train.jsonl/../../`, is not, nor one whose folders as
    written pass through the scoring side (`domains/../../try_agent.py`). Full stops after the name are
    left out: a sentence may end with the command. Only a whole word can be one (see `path_words`)."""
    path = normalised(word).rstrip(".")
    name = path[path.rfind("/") + 1:]
    exact = name in TRY_COMMAND or (name.endswith(TRAIN_FILE) and path in (name, TRAIN_FOLDER + name))
    # Normalising only drops folders: the folders of `path` name nothing the written ones do not.
    return exact and not scoring_path(word[:word.rfind("/") + 1], budget)


def flags(patch: str, dropped: Iterable[str], hidden: Sequence[str], transcript: str,
          unread: Sequence[str] = (), budget: Budget | None = None) -> list[str]:
    """Every reason to flag a node, at most MAX_FLAGS, each one line an agent's text cannot break.
    `unread`: what was too large to read whole (e.g. "its meta agent's transcript is over 2 MiB");
    it and every pass that stopped at a cap or the deadline come first, as NOT_SCREENED reasons."""
    budget = budget or Budget.starting_now()
    not_screened = [f"{NOT_SCREENED} ({why})" for why in unread]
    found: list[str] = []
    passes: list[Callable[[Budget], list[str]]] = [
        lambda b: file_flags(changed_files(patch, b), dropped, b),
        lambda b: hidden_column_flags(patch, hidden, b),
        lambda b: transcript_flags(transcript, b)]
    for one in passes:
        try:
            this = budget.fresh()
            this.check()
            found += one(this)
        except TooLarge as e:
            not_screened.append(f"{NOT_SCREENED} ({e.why})")
    return list(dict.fromkeys(not_screened + found))[:MAX_FLAGS]
