"""Build `./proofgrader_repo`: an installable `proofgrader` package that grades IMO proofs.

    setup_proofgrader_repo --proofautograder            # from the ProofAutoGrader baseline
    setup_proofgrader_repo --generate_dir outputs/RUN   # from the best grader of an imo_grading run
    pip install -e ./proofgrader_repo

The package holds the grader's code only, `agent/` and `task_agent/` moved under the
`proofgrader.` namespace, and the packaging files of `proofgrader_template/`. Before it
is put in place, two checks run on the built copy: it imports, in a sandbox, with the project's own
`agent`/`task_agent` out of reach, and no row of the IMO grading data (whose labels the
meta agent saw) is copied into it.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from importlib import metadata
from pathlib import Path
from string import Template

from services.config import PROJECT_ROOT, Config, load_config
from services.errors import UserError, exit_on_user_error
from services.startup import choose_run_models

TEMPLATE = PROJECT_ROOT / "proofgrader_template"
PACKAGED = ("agent", "task_agent")  # the grader's code; the meta agent and the rest stay behind
RESOURCES = {".py", ".txt", ".md", ".json", ".yaml", ".yml"}  # files an agent may read at run time
GRADING_DOMAIN = "imo_grading"
TOP_N = 3
LEAK_SNIPPET = 80  # letters and digits from the middle of a data set answer that must not appear in the package

_FROM_IMPORT = re.compile(r"^(\s*)from\s+(agent|task_agent)((?:\.\w+)*)\s+import\b", re.M)
_IMPORT = re.compile(r"^(\s*)import\s+(agent|task_agent)((?:\.\w+)*)(\s+as\s+\w+)?[ \t]*$", re.M)

# Appended to proofgrader/task_agent/__init__.py: the evolved TaskAgent, with the model it
# was evaluated with as its default, so `TaskAgent()` works on its own.
_DEFAULT_MODEL = '''

# Added by setup_proofgrader_repo: the model this grader was evaluated with is the default.
from proofgrader import DEFAULT_MODEL as _DEFAULT_MODEL  # noqa: E402

_EvolvedTaskAgent = TaskAgent


class TaskAgent(_EvolvedTaskAgent):
    def __init__(self, model=None, chat_history_file=None):
        super().__init__(model or _DEFAULT_MODEL, chat_history_file)
'''

# Imports the built package with the project's agent code blocked, in a fresh interpreter.
_IMPORT_CHECK = '''
import importlib.abc, sys
class Outside(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("agent", "task_agent"):
            raise ImportError(f"it imports {name}, which is outside the proofgrader package")
sys.meta_path.insert(0, Outside())
sys.path.insert(0, sys.argv[1])
from proofgrader.task_agent import TaskAgent
'''


@dataclass
class Grader:
    """Where a grader's code is and what is known about it."""

    tree: Path  # folder holding agent/ and task_agent/
    title: str
    origin: str
    model: str
    scores: dict = field(default_factory=dict)  # split -> {overall_accuracy, normalized_mean_absolute_error}
    provenance: dict = field(default_factory=dict)


@dataclass
class Candidate:
    node_id: str
    generation: int
    commit: str
    scores: dict  # split -> that split's report


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


# -- choosing the node --------------------------------------------------------------------
def grader_candidates(run_dir: Path) -> list[Candidate]:
    """Nodes of a run that finished the full imo_grading evaluation, with their split reports."""
    from archive.store import Archive
    from optimizer.eval_store import EvalStore

    evals = EvalStore(run_dir)
    found = []
    for node in Archive(run_dir).ordered():
        keys = node.eval_keys.get(GRADING_DOMAIN, {})
        if node.status != "ok" or not node.full_eval.get(GRADING_DOMAIN) or "val" not in keys:
            continue
        scores = {}
        for split, key in keys.items():
            report = evals.report(key)
            if report is not None:
                scores[split] = report
        if "val" in scores:
            found.append(Candidate(node.node_id, node.generation, node.commit, scores))
    return found


def rank_key(c: Candidate) -> tuple:
    """Lowest val normalized MAE, then highest val accuracy, then the earlier node."""
    val = c.scores["val"]
    return val["normalized_mean_absolute_error"], -val["overall_accuracy"], c.generation, c.node_id


def choose_grader(candidates: list[Candidate]) -> Candidate:
    return min(candidates, key=rank_key)


def ranking_lines(candidates: list[Candidate]) -> list[str]:
    def row(c: Candidate) -> str:
        val = c.scores["val"]
        return (f"  node {c.node_id:>8} (generation {c.generation}): val normalized MAE "
                f"{val['normalized_mean_absolute_error']:.3f}, val accuracy {val['overall_accuracy']:.3f}")

    by_mae = sorted(candidates, key=rank_key)[:TOP_N]
    by_acc = sorted(candidates, key=lambda c: (-c.scores["val"]["overall_accuracy"], rank_key(c)))[:TOP_N]
    return [f"top {len(by_mae)} by val normalized MAE (lower is better):", *map(row, by_mae),
            f"top {len(by_acc)} by val accuracy:", *map(row, by_acc)]


def from_run(run_dir: Path, scratch: Path) -> Grader:
    from services.workspace import RunRepo

    if not (run_dir / "run.json").is_file() or not (run_dir / "repo").is_dir():
        raise UserError(f"--generate_dir {run_dir}: not a run folder (no run.json and repo/ there)")
    state = json.loads((run_dir / "run.json").read_text())
    if GRADING_DOMAIN not in state.get("domains", []):
        raise UserError(f"--generate_dir {run_dir}: the run did not optimize {GRADING_DOMAIN} "
                        f"(its domains: {', '.join(state.get('domains', []))})")
    candidates = grader_candidates(run_dir)
    if not candidates:
        raise UserError(f"--generate_dir {run_dir}: no node finished the full {GRADING_DOMAIN} evaluation "
                        "with a val score yet; resume the run or pass --proofautograder")
    print("\n".join(ranking_lines(candidates)))
    best = choose_grader(candidates)
    RunRepo(run_dir / "repo").export(best.commit, scratch)
    config = Config.from_dict(state.get("config", {}))
    model = config.resolve_model("task")
    keep = ("overall_accuracy", "normalized_mean_absolute_error")
    scores = {split: {k: report[k] for k in keep if k in report} for split, report in best.scores.items()}
    origin = f"node {best.node_id} (generation {best.generation}) of the run {run_dir}, commit {best.commit[:12]}"
    return Grader(scratch, f"evolved grader, node {best.node_id} of {run_dir.name}", origin, model, scores,
                  {"source": "run", "run_dir": str(run_dir), "node_id": best.node_id, "generation": best.generation,
                   "commit": best.commit})


def proofautograder(model: str | None, scratch: Path) -> Grader:
    from optimizer.initial_agents import INITIAL_AGENTS
    from services.workspace import copy_evolvable

    copy_evolvable(PROJECT_ROOT, scratch)
    INITIAL_AGENTS["proofautograder"].apply(scratch)
    if not model:
        config = load_config()
        choose_run_models(config)
        model = config.resolve_model("grader")
    origin = f"the ProofAutoGrader baseline of IMO-Bench, as written in hyperagents-imo {_framework_version()}"
    return Grader(scratch, "ProofAutoGrader baseline", origin, model, {}, {"source": "proofautograder"})


# -- building ------------------------------------------------------------------------------
def build(grader: Grader, dst: Path, force: bool) -> Path:
    """Build the package next to `dst`, check it, then put it in place of `dst`."""
    dst = dst.resolve()
    if dst.exists() and not force:
        raise UserError(f"{dst} already exists: pass --force to replace it, or --dst another folder")
    dst.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dst.name}-", dir=dst.parent))
    try:
        _write_package(grader, staging)
        _check_no_data(staging)
        _check_imports(staging)
        if dst.exists():
            shutil.rmtree(dst)
        staging.rename(dst)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dst


def _write_package(grader: Grader, out: Path) -> None:
    built_at = datetime.now().isoformat(timespec="seconds")
    provenance = {**grader.provenance, "title": grader.title, "origin": grader.origin, "model": grader.model,
                  "scores": grader.scores, "built_at": built_at, "framework_version": _framework_version()}
    fields = {"version": "1.0.0", "source": grader.title, "litellm_requirement": _litellm_requirement(),
              "built_at": built_at, "origin": grader.origin, "model": grader.model,
              "scores": _scores_table(grader.scores),
              "provenance": "\n".join(f"- {k}: {v}" for k, v in provenance.items() if k != "scores")}
    for path in TEMPLATE.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            target = out / path.relative_to(TEMPLATE)
            target.parent.mkdir(parents=True, exist_ok=True)
            text = path.read_text()
            target.write_text(Template(text).safe_substitute(fields) if path.suffix in (".toml", ".md") else text)
    package = out / "proofgrader"
    for top in PACKAGED:
        for path in sorted((grader.tree / top).rglob("*")):
            if not path.is_file() or path.suffix not in RESOURCES or "__pycache__" in path.parts:
                continue
            target = package / path.relative_to(grader.tree)
            target.parent.mkdir(parents=True, exist_ok=True)
            text = path.read_text()
            target.write_text(namespace_imports(text) if path.suffix == ".py" else text)
    entry = package / "task_agent" / "__init__.py"
    if not entry.is_file():
        raise UserError(f"{grader.origin} has no task_agent/__init__.py to package")
    entry.write_text(entry.read_text() + _DEFAULT_MODEL)
    (package / "provenance.json").write_text(json.dumps(provenance, indent=2) + "\n")


def _check_imports(out: Path) -> None:
    """Import the built package in a sandbox: it is evolved code, never run by a host interpreter."""
    from services.sandbox import open_sandbox

    with open_sandbox(load_config().sandbox, out) as box:
        result = box.run([box.python, "-I", "-B", "-c", _IMPORT_CHECK, box.workdir],
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
    if code.startswith("u") and len(code) == 5:
        return chr(int(code[1:], 16))
    return " " if code in "ntr" else code


def _letters(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def _scores_table(scores: dict) -> str:
    if not scores:
        return ("Not evaluated by this build. Measure it with `python -m domains.harness --domain imo_grading "
                "--subset val --agent_path proofgrader.task_agent` and `python -m domains.report`.")
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
    ap = argparse.ArgumentParser(prog="setup_proofgrader_repo", description=__doc__.split("\n\n")[0])
    source = ap.add_mutually_exclusive_group(required=True)
    source.add_argument("--proofautograder", action="store_true", help="package the ProofAutoGrader baseline")
    source.add_argument("--generate_dir", metavar="RUN", help="package the best grader of an imo_grading run")
    ap.add_argument("--dst", default="./proofgrader_repo", help="where the package goes (./proofgrader_repo)")
    ap.add_argument("--force", action="store_true", help="replace an existing --dst")
    ap.add_argument("--model", default=None,
                    help="--proofautograder only: its default model (default: the config's grader model)")
    return ap


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    if args.model and not args.proofautograder:
        raise UserError("--model goes with --proofautograder; a run's grader keeps the model it was evaluated with")
    with tempfile.TemporaryDirectory(prefix="proofgrader-src-") as scratch:
        grader = (proofautograder(args.model, Path(scratch)) if args.proofautograder
                  else from_run(Path(args.generate_dir).resolve(), Path(scratch)))
        dst = build(grader, Path(args.dst), args.force)
    print(f"built {dst} from {grader.origin}; default model {grader.model}")
    print(f"install it with: pip install -e {args.dst}")


def main_cli() -> None:
    exit_on_user_error(main)


if __name__ == "__main__":
    main_cli()
