"""Export one node's agent code from a run: python -m apps.export RUN [--node best|ID] --out DIR [--force]

DIR gets the node's code as a folder of its own (`code/`: an agent folder, which `--initial_agent DIR/code`
starts a run from), its change from the run's initial agent (`changes.patch`, a git diff that applies to the
initial agent's code), and what it is (`export.json`, and the same in words in `README.md`): the node,
its scores, the run and the commit.

The run folder may be someone else's (archive/run_folder.py): run.json and the node records are read as
the loop's readers read them, and its repository (`RUN/repo`) is checked before git runs on it
(services/git_safety.py: one that would steer git is refused in one line). The commit is exported only
when it looks like one the loop writes (services/workspace.py's capture): regular files only, no git
metadata or start-up hook, no unprintable name, within the capture's quotas. Nothing is written through
a link: DIR may not be one, and every file and folder below it is made afresh without following any.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from archive.promotion import BestChoice
from archive.records import NODE_ID, Node
from archive.run_folder import read_run_record, repository_read
from archive.store import Archive, observed_best, observed_sizes
from services.cli_parser import ArgumentParser
from services.errors import UserError, exit_on_user_error
from services.fsutil import make_folder, write_below
from services.render import console
from services.workspace import RunRepo, discard
from services.workspace_read import _MAX_DEPTH, Quota, _unsafe_name
from services.write_failures import guard_folder

SCHEMA = 1  # export.json
CODE, PATCH, RECORD, README = "code", "changes.patch", "export.json", "README.md"  # what an export writes in DIR
MODES = ("100644", "100755")  # the modes of the files a capture commits


@dataclass(frozen=True)
class Chosen:
    node: Node
    why: str  # how it was chosen, in words


def build_parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="python -m apps.export", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("run", metavar="RUN", help="a run folder of run_optimization")
    ap.add_argument("--node", default="best",
                    help="a node id (initial, 3, ...) or best: the run's best as the run chose it (default: best)")
    ap.add_argument("--out", required=True, metavar="DIR", help="the folder to write (new, or empty)")
    ap.add_argument("--force", action="store_true",
                    help=f"write into a DIR that is not empty (its {CODE}/, {PATCH}, {RECORD} and {README} are "
                         "replaced; nothing else there is touched)")
    return ap


def check_out(out: Path, force: bool) -> None:
    """Refuse, before anything is read, a DIR that is a link or a file, or one holding something unless `force`."""
    if out.is_symlink():
        raise UserError(f"--out {out} is a link: name a folder of its own")
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is not a folder")
    if out.is_dir() and any(os.scandir(out)) and not force:
        raise UserError(f"--out {out} is not empty: pass --force to write the export into it (its {CODE}/, "
                        f"{PATCH}, {RECORD} and {README} are replaced)")


def choose(run_dir: Path, nodes: list[Node], domains: list[str], config: dict, which: str) -> Chosen:
    """The node `which` names: an id of the run's, or `best` as the run chose it (loop.best_choice, with its
    search settings; `config` is run.json's)."""
    loop, search = config.get("loop"), config.get("search")
    if which == "best":
        try:
            best = observed_best(nodes, observed_sizes(domains, nodes), run_dir, loop, search)
        except ValueError as e:
            raise UserError(f"{run_dir / 'run.json'}: {e}") from None
        if best is None:
            raise UserError(f"{run_dir}: no node is scored yet, so the run has no best; name one with --node ID")
        rule = BestChoice.of(loop if isinstance(loop, dict) else {}).rule
        return Chosen(best, f"the run's best node (loop.best_choice: {rule})")
    found = {n.node_id: n for n in nodes}
    if not NODE_ID.fullmatch(which) or which not in found:
        known = ", ".join(list(found)[:20]) + (", ..." if len(found) > 20 else "")
        raise UserError(f"--node {which!r}: no such node in {run_dir} (its nodes: {known or 'none'})")
    return Chosen(found[which], f"node {which}, named with --node")


def check_commit(repo: RunRepo, commit: str, where: str) -> int:
    """The number of files of `commit` when it is a tree the capture could have made; else a UserError."""
    quota, files, total = Quota(), 0, 0
    for entry in repo.git("ls-tree", "-r", "-l", "-z", "--full-tree", commit).split("\0"):
        if not entry:
            continue
        meta, path = entry.split("\t", 1)
        mode, kind, _, size = meta.split()
        files, total = files + 1, total + (int(size) if size.isdigit() else 0)
        why = entry_problem(path, mode, kind, size, quota)
        if why is None and (files > quota.files or total > quota.total_bytes):
            why = "over the capture's quota of a commit"
        if why is not None:
            raise UserError(f"{where}: commit {commit[:12]} is not one the loop writes ({console(path)[:200]}: "
                            f"{why}); not exported")
    return files


def entry_problem(path: str, mode: str, kind: str, size: str, quota: Quota) -> str | None:
    """Why a tree entry is not one the capture makes (services/workspace.py read_workspace), or None."""
    if kind != "blob" or mode not in MODES:
        return "a link" if mode == "120000" else f"not a regular file (mode {mode})"
    parts = path.split("/")
    for part in parts:
        if part in ("", ".", "..") or (why := _unsafe_name(part)):
            return why or "not a plain name"
    if len(parts) > _MAX_DEPTH + 1:
        return "nested too deep"
    if not size.isdigit() or int(size) > quota.file_bytes:
        return "over the capture's quota of one file"
    return None


def diff_text(repo: RunRepo, initial: str, commit: str) -> str:
    """The change from the initial agent to the node; its files only when git cannot diff it in time."""
    try:
        return repo.diff(initial, commit)
    except subprocess.TimeoutExpired:
        names = [n for n in repo.git("diff", "--no-renames", "--name-only", "-z", initial, commit).split("\0") if n]
        return "# not shown: this change took too long to diff; the files it changes:\n" + \
            "".join(f"#   {console(n)}\n" for n in names)


def scores_of(node: Node) -> dict:
    return {domain: {split: {"score": e.score, "rows": e.rows, "interval": list(e.interval) if e.interval else None}
                     for d, split, e in node.evaluations() if d == domain} for domain in node.scores}


def readme(record: dict) -> str:
    lines = [f"# Node {record['node']} of the run {record['run_name'] or Path(record['run']).name}", "",
             f"Exported from `{record['run']}` on {record['exported_at']}: {record['chosen_by']}.", "",
             f"- generation {record['generation']}, parent {record['parent'] or 'none'}, status {record['status']}",
             f"- commit `{record['commit']}` of the run's repository (initial agent: `{record['initial_commit']}`)"]
    for domain, splits in record["scores"].items():
        for split, s in splits.items():
            band = f" [{s['interval'][0]:.3f}, {s['interval'][1]:.3f}]" if s["interval"] else ""
            value = "none" if s["score"] is None else f"{s['score']:.3f}"
            lines.append(f"- {domain} {split}: {value}{band}" + (f", {s['rows']} rows" if s["rows"] else "") +
                         ("" if record["full_eval"].get(domain) else " (screening only)"))
    lines += ["", f"`{CODE}/` is the node's agent code: `python -m run_optimization --initial_agent "
              f"THIS_FOLDER/{CODE} ...` starts a run from it.",
              f"`{PATCH}` is its change from the run's initial agent (`git apply` it to a copy of that code).",
              f"`{RECORD}` holds the same facts as data.", ""]
    return "\n".join(lines)


def export(run: str | Path, which: str, out: str | Path, force: bool = False) -> dict:
    """Write the node `which` of the run in `run` to the folder `out`; the facts written to export.json."""
    run_dir, out = Path(run).resolve(), Path(out)
    check_out(out, force)
    if (run_dir / "predictions.jsonl").exists() or (run_dir / "predictions.csv").exists():
        raise UserError(f"{run}: an evaluation folder of domains.harness, not a run of run_optimization: "
                        "it has no nodes to export")
    record = read_run_record(run_dir, str(run))
    nodes = Archive(run_dir).ordered()
    chosen = choose(run_dir, nodes, record.domains, record.config, which)
    node, initial = chosen.node, next((n for n in nodes if n.node_id == "initial"), None)
    if node.commit is None:
        raise UserError(f"{run}: node {node.node_id}'s record names no commit (its change was not kept): "
                        "nothing to export")
    with repository_read(run_dir, node.commit):
        repo = RunRepo(run_dir / "repo")
        files = check_commit(repo, node.commit, str(run_dir / "repo"))
        start = initial.commit if initial is not None and initial.commit else repo.node_commit("initial")
        patch = diff_text(repo, start, node.commit)
        make_folder(out)
        guard_folder(out)  # from here on no write below DIR passes through a link
        discard(out / CODE)  # --force: the export's own folder, a link there removed, never followed
        make_folder(out / CODE)
        repo.export(node.commit, out / CODE)
    facts = {"schema_version": SCHEMA, "run": str(run_dir), "run_name": record.name, "node": node.node_id,
             "chosen_by": chosen.why, "generation": node.generation, "parent": node.parent, "status": str(node.status),
             "commit": node.commit, "initial_commit": start, "files": files, "scores": scores_of(node),
             "full_eval": dict(node.full_eval), "exported_at": datetime.now().isoformat(timespec="seconds")}
    write_below(out, PATCH, patch.encode("utf-8", "backslashreplace"))
    write_below(out, RECORD, (json.dumps(facts, indent=2, ensure_ascii=False) + "\n").encode())
    write_below(out, README, readme(facts).encode("utf-8", "backslashreplace"))
    return facts


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    facts = export(args.run, args.node, args.out, args.force)
    print(console(f"exported {facts['chosen_by']}, node {facts['node']} of {facts['run']} (commit "
                  f"{facts['commit'][:12]}, {facts['files']} files) to {Path(args.out).resolve()}: {CODE}/, {PATCH}, "
                  f"{RECORD}, {README}"))


if __name__ == "__main__":
    exit_on_user_error(main)
