"""Build `./proofgrader_repo`: an installable `proofgrader` package that grades IMO proofs.

    setup_proofgrader_repo --proofautograder            # from the ProofAutoGrader baseline
    setup_proofgrader_repo --generate_dir outputs/RUN   # from the best grader of an imo_grading run
    pip install -e ./proofgrader_repo

Which node is the best grader: `--choose best` (the default: the most accurate fully evaluated node),
`cheapest_within=D` (the cheapest per row within D of its accuracy), `paper` (the HyperAgents reference's
rule) or `full_eval`; archive/grader_choice.py has them and why they differ.

The package holds the grader's code only, `agent/` and the task agent (a `task_agent/` package or, in the HyperAgents
reference's layout of a run started from an agent folder such as the paper's BetterGrader run
`--initial_agent proofautograder --preset paper`, a top-level `task_agent.py`; either is then `proofgrader.task_agent`),
read as data, laid out under `proofgrader/` as in the node, its imports moved under the `proofgrader.` namespace; and
the packaging files of `proofgrader_template/`. Before it is put in place, two checks run on the built copy: it
imports, in a sandbox, with the project's own `agent`/`task_agent` out of reach, and no row of the IMO grading data
(whose labels the meta agent saw) is copied into it. The import check runs on a throwaway copy, and the built tree
must be byte for byte the same after it: code that runs at import cannot plant a setup.py or edit pyproject.toml of
the package that `pip install` later runs on the host.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from importlib import metadata
from pathlib import Path
from string import Template

from archive import grader_choice
from archive.grader_choice import GRADING_DOMAIN
from services.cli_parser import ArgumentParser
from services.config import PROJECT_ROOT, load_config
from services.errors import Terminated, UserError, advise, exit_on_user_error
from services.fsutil import read_bounded, write_below
from services.local_model import is_local
from services.render import console
from services.startup import choose_run_models

TEMPLATE = PROJECT_ROOT / "proofgrader_template"
PACKAGED = ("agent", "task_agent", "task_agent.py")  # the grader's code; the meta agent and the rest stay behind
ENTRIES = ("task_agent/__init__.py", "task_agent.py")  # its task agent's module, as Python finds it: a package first
RESOURCES = {".py", ".txt", ".md", ".json", ".yaml", ".yml"}  # files an agent may read at run time
LEAK_SNIPPET = 80  # letters and digits from the middle of a data set answer that must not appear in the package
MODEL_VARIABLE = "PROOFGRADER_MODEL"  # the package reads its model from here when a call names none

_FROM_IMPORT = re.compile(r"^(\s*)from\s+(agent|task_agent)((?:\.\w+)*)\s+import\b", re.M)
_IMPORT = re.compile(r"^(\s*)import\s+(agent|task_agent)((?:\.\w+)*)(\s+as\s+\w+)?[ \t]*$", re.M)

# Appended to the module proofgrader.task_agent (ENTRIES): the evolved TaskAgent, its model chosen as `model_for`
# says (the argument, PROOFGRADER_MODEL, the build's default), so `TaskAgent()` works wherever a model is known.
_DEFAULT_MODEL = '''

# Added by setup_proofgrader_repo: model=, else PROOFGRADER_MODEL, else the build's default model.
from proofgrader import model_for as _model_for  # noqa: E402

_EvolvedTaskAgent = TaskAgent


class TaskAgent(_EvolvedTaskAgent):
    def __init__(self, model=None, chat_history_file=None):
        super().__init__(_model_for(model), chat_history_file)
'''

@dataclass
class Grader:
    """Where a grader's code is and what is known about it."""

    tree: Path  # folder holding agent/ and task_agent/ (or task_agent.py)
    title: str
    origin: str
    model: str
    scores: dict = field(default_factory=dict)  # split -> {overall_accuracy, normalized_mean_absolute_error}
    provenance: dict = field(default_factory=dict)

    @property
    def default_model(self) -> str | None:
        """The package's default model: the grader's own, unless only a run of this framework serves it
        (the bundled local model), which the package could not call on its own."""
        return None if is_local(self.model) else self.model

    def model_line(self) -> str:
        """What the package's README says of its model, true to how the grader was made."""
        how = ("the model the run evaluated it with (the scores below)" if self.scores
               else "chosen when it was built; this build evaluated nothing (see Scores)")
        if self.default_model:
            return f"Default model: `{self.model}`, {how}. Pass `model=`, or set `{MODEL_VARIABLE}`, to use another."
        return (f"No default model: `{self.model}`, {how}, is the framework's bundled local model, which only a "
                f"run of the framework serves. Pass `model=`, or set `{MODEL_VARIABLE}`, to a litellm model string "
                "(e.g. `openai/o4-mini`, its key in the provider's usual variable).")


def namespace_imports(source: str) -> str:
    """Rewrite `agent`/`task_agent` imports to `proofgrader.agent`/`proofgrader.task_agent`."""
    source = _FROM_IMPORT.sub(r"\1from proofgrader.\2\3 import", source)

    def plain(m: re.Match) -> str:
        indent, top, rest, alias = m.groups()
        if alias:
            return f"{indent}import proofgrader.{top}{rest}{alias}"
        # `import agent.llm` binds `agent`; keep that name bound to the moved package.
        return f"{indent}import proofgrader.{top}{rest}; from proofgrader import {top}"

    return _IMPORT.sub(plain, source)


# -- where the grader comes from ------------------------------------------------------------
def from_run(run_dir: Path, scratch: Path, choice: str = "paper") -> Grader:
    from archive.run_folder import data_config, read_run_record, repository_read
    from services.workspace import RunRepo

    if not (run_dir / "repo").is_dir():  # then run.json, checked: a one-line UserError when the loop did not write it
        raise UserError(f"--generate_dir {run_dir}: not a run folder (no run.json and repo/ there)")
    record = read_run_record(run_dir, f"--generate_dir {run_dir}")
    if GRADING_DOMAIN not in record.domains:
        raise UserError(f"--generate_dir {run_dir}: the run did not optimize {GRADING_DOMAIN} "
                        f"(its domains: {', '.join(record.domains)})")
    candidates = grader_choice.collect(run_dir, costs=choice not in ("paper", "full_eval"))
    best = grader_choice.choose(candidates, choice)
    if best is None:
        split = grader_choice.selection_split()
        which = "no node has" if choice == "paper" else f"no node finished the full {GRADING_DOMAIN} evaluation with"
        raise UserError(f"--generate_dir {run_dir}: {which} a {split} normalized MAE yet; "
                        "resume the run or pass --proofautograder")
    for line in [*grader_choice.ranking_lines(candidates, choice),
                 f"chosen: node {best.node_id}, by {grader_choice.describe(choice)} (--choose {choice})",
                 *grader_choice.cost_lines(candidates, choice, best)]:
        print(console(line))
    with repository_read(run_dir, best.commit):
        RunRepo(run_dir / "repo").export(best.commit, scratch)
    model = data_config(record, run_dir).resolve_model("task")
    keep = ("overall_accuracy", "normalized_mean_absolute_error")
    scores = {split: {k: report[k] for k in keep if k in report} for split, report in best.scores.items()}
    origin = f"node {best.node_id} (generation {best.generation}) of the run {run_dir}, commit {best.commit[:12]}"
    return Grader(scratch, f"evolved grader, node {best.node_id} of {run_dir.name}", origin, model, scores,
                  {"source": "run", "run_dir": str(run_dir), "node_id": best.node_id, "generation": best.generation,
                   "commit": best.commit, "chosen_by": choice})


def proofautograder(model: str | None, scratch: Path) -> Grader:
    from optimizer.initial_agents import INITIAL_AGENTS
    from services.workspace import copy_evolvable

    copy_evolvable(PROJECT_ROOT, scratch)
    INITIAL_AGENTS["proofautograder"].apply(scratch)
    if not model:
        config = load_config()
        choose_run_models(config)
        model = config.resolve_model("grader")
    origin = ("IMO-Bench's ProofAutoGrader as the HyperAgents reference runs it (its prompt reworded, its reading "
              f"of the reply kept: task_agent/baselines/proofautograder.py) in hyperagents-imo {_framework_version()}")
    return Grader(scratch, "ProofAutoGrader baseline", origin, model, {}, {"source": "proofautograder"})


# -- building ------------------------------------------------------------------------------
def check_destination(dst: Path, force: bool) -> bool:
    """Whether the folder `dst` is there (to replace, with `force`); a UserError when it is a link (a handed folder's:
    the package, and --force's deletion, would go where it points), not a folder, or there without `force`."""
    try:
        mode = os.lstat(dst).st_mode
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(mode):
        raise UserError(f"--dst {dst} is a link: nothing is written through it (or replaced at the other end); "
                        "pass the folder it points to, or another")
    if not stat.S_ISDIR(mode):
        raise UserError(f"--dst {dst} is there and not a folder: nothing is written to it; pass another --dst")
    if not force:
        raise UserError(f"{dst} already exists: pass --force to replace it, or --dst another folder")
    return True


def build(grader: Grader, dst: Path, force: bool) -> Path:
    """Build the package next to `dst`, check it, then put it in place of `dst`, by a rename: what a handed `dst`
    holds (a link to a file of the user) is removed, never written through."""
    check_destination(dst := Path(os.path.abspath(dst)), force)  # its last part not followed: a link is refused
    dst.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dst.name}-", dir=dst.parent))
    try:
        _write_package(grader, staging)
        built = tree_digest(staging)
        _check_imports(staging)
        changed = sorted(set(built) ^ set(tree_digest(staging)))
        if changed:
            raise UserError(f"the package's own code changed {changed[0][0]} of the built folder during its import "
                            "check (the sandbox backend is none, or it escaped): nothing is kept")
        _check_no_data(staging)
        if check_destination(dst, force):  # again: the checks took a while, and a link may be there by now
            shutil.rmtree(dst)  # what is inside, links and all, never followed; rename fails on a link put there since
        staging.rename(dst)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dst


def _write_package(grader: Grader, out: Path) -> None:
    built_at = datetime.now().isoformat(timespec="seconds")
    provenance = {**grader.provenance, "title": grader.title, "origin": grader.origin, "model": grader.model,
                  "default_model": grader.default_model, "scores": grader.scores, "built_at": built_at,
                  "framework_version": _framework_version()}
    fields = {"version": "1.0.0", "source": grader.title, "litellm_requirement": _litellm_requirement(),
              "built_at": built_at, "origin": grader.origin, "model_line": grader.model_line(),
              "scores": _scores_table(grader.scores),
              "provenance": "\n".join(f"- {k}: {v}" for k, v in provenance.items() if k != "scores")}
    files = {p.relative_to(TEMPLATE).as_posix(): Template(p.read_text()).safe_substitute(fields)  # path -> text
             if p.suffix in (".toml", ".md") else p.read_text()
             for p in TEMPLATE.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    files.update(grader_code(grader))
    files["proofgrader/provenance.json"] = json.dumps(provenance, indent=2) + "\n"
    for relative, text in files.items():  # through no link below `out`: a planted one is refused, in one line
        write_below(out, relative, text.encode("utf-8", "backslashreplace"), sync=False)


def grader_code(grader: Grader) -> dict[str, str]:
    """The package's files of the grader's code (path -> text): PACKAGED's that an agent may read, as they lie in
    `grader.tree` (read as data), below `proofgrader/`, imports moved, its task agent's module given a default model."""
    from services.workspace import Quota, read_workspace

    files = {f"proofgrader/{rel}": namespace_imports(text) if rel.endswith(".py") else text
             for rel, (_, data) in read_workspace(grader.tree, Quota(), only=PACKAGED).files.items()
             if Path(rel).suffix in RESOURCES for text in [data.decode("utf-8", "replace")]}
    entry = next((f"proofgrader/{e}" for e in ENTRIES if f"proofgrader/{e}" in files), None)
    if entry is None:
        raise UserError(f"{grader.origin} has neither a task_agent/__init__.py nor a task_agent.py to package")
    files[entry] += _DEFAULT_MODEL
    return files


def tree_digest(root: Path) -> list[tuple[str, str]]:
    """Every entry under `root`, links not followed: its path and what it is (a file by its bytes and
    executable bits, a folder, anything else by its type), sorted by path."""
    found = []
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder) / name
            mode = path.lstat().st_mode
            what = (f"file {mode & 0o111:o} {hashlib.sha256(read_bounded(path, 2**31)).hexdigest()}"
                    if stat.S_ISREG(mode) else "folder" if stat.S_ISDIR(mode) else f"other {stat.S_IFMT(mode):o}")
            found.append((str(path.relative_to(root)), what))
    return sorted(found)


def _check_imports(out: Path) -> None:
    """Import the built package in a sandbox: it is evolved code, never run by a host interpreter.

    The sandbox's writable workspace is a throwaway copy of `out`, so what the code writes at import
    time never reaches the package that is kept."""
    from services.sandbox import open_sandbox

    with tempfile.TemporaryDirectory(prefix="proofgrader-check-", ignore_cleanup_errors=True) as scratch:
        copy = Path(scratch) / "package"
        shutil.copytree(out, copy, symlinks=True)
        with open_sandbox(load_config().sandbox, copy) as box:
            result = box.run([box.python, "-I", "-B", box.trusted_script("check_imports.py"), box.workdir],
                             {**box.base_env(), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}, timeout=300)
    if not result.ok:
        last = (result.stderr.strip().splitlines() or [result.why()])[-1]
        raise UserError(f"the built package does not import on its own: {last[:300]}")


def _check_no_data(out: Path) -> None:
    """Refuse a package that carries answers of the grading data set (the meta agent saw their labels).

    Texts are compared by their letters and digits only, after undoing string escapes, so an
    answer pasted into code as a repr or JSON string is found like one pasted verbatim.
    """
    from domains.registry import get_domain

    domain = get_domain(GRADING_DOMAIN)
    snippets = {}
    for split in domain.splits:
        df = domain.load(split)
        for qid, answer in zip(df[domain.question_id], df[domain.inputs["student_answer"]]):
            text = _letters(str(answer))
            if len(text) >= 2 * LEAK_SNIPPET:
                middle = len(text) // 2
                snippets[text[middle - LEAK_SNIPPET // 2: middle + LEAK_SNIPPET // 2]] = qid
    for path in sorted(out.rglob("*")):
        if path.is_file():
            text = _letters(_ESCAPE.sub(_unescape, path.read_text(errors="replace")))
            for snippet, qid in snippets.items():
                if snippet in text:
                    raise UserError(f"{path.relative_to(out)} contains the answer of {GRADING_DOMAIN} row {qid}: "
                                    "a grader that carries graded data cannot be packaged")


_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.S)


def _unescape(m: re.Match) -> str:
    code = m.group(1)
    return chr(int(code[1:], 16)) if code.startswith("u") and len(code) == 5 else " " if code in "ntr" else code


def _letters(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def _scores_table(scores: dict) -> str:
    if not scores:
        return ("Not evaluated by this build. Measure it once installed: `python -m domains.harness --domain "
                "imo_grading --subset val --agent_path proofgrader.task_agent --output_dir outputs --run_id "
                "proofgrader_val` answers the val split into outputs/proofgrader_val, and `python -m domains.report "
                "--domain imo_grading --dname outputs/proofgrader_val` scores it.")
    lines = ["| split | accuracy | normalized MAE |", "|---|---|---|"]
    for split in ("train", "val", "test"):
        if split in scores:
            s = scores[split]
            lines.append(f"| {split} | {s.get('overall_accuracy', float('nan')):.3f} "
                         f"| {s.get('normalized_mean_absolute_error', float('nan')):.3f} |")
    return "\n".join(lines)


def _framework_version() -> str:
    try:
        return metadata.version("hyperagents-imo")
    except metadata.PackageNotFoundError:
        return "(source tree)"


def _litellm_requirement() -> str:
    try:
        return f"litellm>={metadata.version('litellm')},<2"
    except metadata.PackageNotFoundError:
        return "litellm>=1.70,<2"


# -- command line ------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="setup_proofgrader_repo", description=(__doc__ or "").split("\n\n")[0])
    source = ap.add_mutually_exclusive_group(required=True)
    source.add_argument("--proofautograder", action="store_true", help="package the ProofAutoGrader baseline")
    source.add_argument("--generate_dir", metavar="RUN", help="package the best grader of an imo_grading run (its "
                        "task agent a task_agent/ package, or the reference's top-level task_agent.py)")
    ap.add_argument("--dst", default="./proofgrader_repo", help="where the package goes (./proofgrader_repo)")
    ap.add_argument("--force", action="store_true", help="replace an existing --dst")
    ap.add_argument("--model", default=None,
                    help="--proofautograder only: its default model (default: the config's grader model)")
    ap.add_argument("--choose", metavar="|".join(grader_choice.CHOICES), default=None,
                    help="--generate_dir only: which node is the best grader (archive/grader_choice.py); best (the "
                         "default): the highest val accuracy of nodes fully evaluated; cheapest_within=D: the lowest "
                         "$ per row within D of it; paper: the reference's, the lowest val normalized MAE of any "
                         "node; full_eval: that of nodes fully evaluated")
    return ap


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.model and not args.proofautograder:
        raise UserError("--model goes with --proofautograder; a run's grader keeps the model it was evaluated with")
    if args.choose and not args.generate_dir:
        raise UserError("--choose goes with --generate_dir: it picks a node of the run")
    choice = grader_choice.parse_choice(args.choose or "best")
    dst = Path(os.path.abspath(args.dst))
    check_destination(dst, args.force)  # before any work: a --dst it would refuse at the end is refused now
    try:
        with tempfile.TemporaryDirectory(prefix="proofgrader-src-") as scratch:
            grader = (proofautograder(args.model, Path(scratch)) if args.proofautograder
                      else from_run(Path(args.generate_dir).resolve(), Path(scratch), choice))
            dst = build(grader, dst, args.force)
    except (KeyboardInterrupt, Terminated) as e:
        advise(e, "a build starts afresh, and nothing of an unfinished one is kept; to build it: "
               + build_command(args, dst))
        raise
    if grader.default_model:
        print(console(f"built {dst} from {grader.origin}; default model {grader.model}"))
    else:
        print(console(f"built {dst} from {grader.origin}; no default model: {grader.model} is served only inside a "
                      f"run of this framework, so set {MODEL_VARIABLE} to a litellm model string (e.g. "
                      f"{MODEL_VARIABLE}=openai/o4-mini) or pass model= to grade() or TaskAgent()"))
    print(console(f"install it with: pip install -e {args.dst}"))


def build_command(args: argparse.Namespace, dst: Path) -> str:
    """The command, shell-quoted, that builds what `args` asks for from any folder: a stopped build keeps nothing, so
    the same one, paths absolute, with --force if the package was put in place (`main` refused a `dst` there before)."""
    from optimizer.launch import python_command

    source = ["--proofautograder"] if args.proofautograder else ["--generate_dir", os.path.abspath(args.generate_dir)]
    return shlex.join([python_command(), "-m", "setup_proofgrader_repo", *source, "--dst", str(dst),
                       *(["--force"] if args.force or os.path.lexists(dst) else []),
                       *(["--model", args.model] if args.model else []),
                       *(["--choose", args.choose] if args.choose else [])])


def main_cli() -> None:
    exit_on_user_error(main)


if __name__ == "__main__":
    main_cli()
