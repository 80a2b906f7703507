"""Ensembles over the archive: the stored predictions of a run's best nodes, combined row by row.

    python -m apps.ensemble RUN --split val --rule majority --top 5

Members are the `--top` K valid nodes with the best selection scores (val where the domain has
one, else train: never test) among those evaluated on `--split`. Their predictions are
combined on the rows every member answered, from what the run stored (evals/<key>/), so an
ensemble costs no model call. With `--rows all` the members are the K best nodes of the whole
archive, and those not yet evaluated on all of `--split` (on test, all but the node the final
test chose) are evaluated first as the run's own command `python -m run_optimization
--resume_from RUN --evaluate NODES --split SPLIT` evaluates them (its launch, called in this
process): in the run's sandbox, under its budget, paying only for rows not already answered. Rules:

- `majority`: the most frequent answer per row (grading labels as the metrics read them, final
  answers as the answer checker extracts them), ties to the member with the better score;
- `weighted`: the same, each vote weighted by its member's selection score;
- `best_per_question`: per row, the answer of the member with the best train score on the rows
  of the same problem (IMO-GradingBench has many graded proofs per problem), else of the best
  member;
- `agent`: a node's own `ensemble.py` (evolvable agent code, the reference's agent-editable
  ensemble; `--agent NODE`, default the best member) combines them, run in a sandbox with no
  label and no network; what it returns is read as untrusted data.

The ensemble's predictions.csv, report.json (the domain's own scorer) and members.json go to
RUN/ensembles/<split>-<rule>-top<K>/; the table printed shows its score beside each member's on
the same rows. Predictions are agent output: read bounded, never through a link, never run. A
domain scored by a function of your own scores only with its spec named again (`--domain_spec
FILE`, checked against the run's record of it): a run's folder never names code to run.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import secrets
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from archive.eval_store import EvalStore
from archive.experiments import EVALUATIONS, FINAL_TEST, read_evaluations, read_final_test
from archive.promotion import row_scores
from archive.records import Node, RunRecord
from archive.run_folder import data_config, read_run_record, repository_read
from archive.store import Archive, observed_rule, observed_sizes, run_score
from optimizer.launch import RunRequest, launch
from search.stats import interval, paired_p
from services.cli_parser import ArgumentParser
from services.errors import UserError, exit_on_user_error
from services.fsutil import (
    atomic_write_csv,
    atomic_write_json,
    csv_values,
    guard_folder,
    read_bounded,
    release_folder,
)
from services.render import console

if TYPE_CHECKING:
    from domains.base import Domain

RULES = ("best_per_question", "majority", "weighted", "agent")
MAX_PREDICTIONS = 64 * 2**20
PROBLEM = "Problem ID"  # rows of IMO-GradingBench that grade proofs of the same problem share it


@dataclass
class Member:
    node: Node
    score: float  # selection score, what members are chosen and ranked by
    key: str  # its evaluation of the split, under evals/
    answers: dict[str, str]  # question id -> prediction text


def show(line: str) -> None:
    """A line for the person at the terminal; agent text in it (a node's ensemble.py's output) is shown
    visibly, never acted on (services.render.console)."""
    print(console(line), flush=True)


def vote_of(domain: Domain, text: str) -> str | None:
    """What a prediction votes for: the label (grading), the final answer (answer domains), or None."""
    if domain.try_match == "math":
        from inside.answers import final_answer

        answer = final_answer(text)
        return " ".join(answer.split()) if answer else None
    from domains.metrics import normalize_label

    return normalize_label(text)


def read_answers(path: Path, qid: str) -> dict[str, str]:
    """question id -> prediction of a stored predictions.csv; OSError or ValueError when it is not one."""
    df = csv_values(pd.read_csv(io.BytesIO(read_bounded(path, MAX_PREDICTIONS)), dtype=str, keep_default_na=False))
    if qid not in df.columns or "prediction" not in df.columns:
        raise ValueError(f"{path.name} lacks the {qid!r} or prediction column")
    return dict(zip(df[qid], df["prediction"]))


def split_keys(run_dir: Path, archive: Archive, domain: str, split: str) -> dict[str, str]:
    """node id -> the key of its full evaluation of `split`: the loop's, the final test's, or one
    evaluated after the run (evaluations.json)."""
    found = [(n.node_id, n.evaluation(domain, split)) for n in archive.nodes.values() if n.full_eval.get(domain)]
    final = read_final_test(run_dir / FINAL_TEST) if split == "test" else None
    found += [(node_id, tested.get(domain)) for node_id, tested in (final.nodes if final else {}).items()]
    later = read_evaluations(run_dir / EVALUATIONS)
    if later is not None:
        found += [(node_id, later.get(node_id, domain, split)) for node_id in later.nodes]
    return {node_id: e.key for node_id, e in found if e is not None and e.key and node_id in archive.nodes}


def ranked(run_dir: Path, archive: Archive, nodes: list[Node]) -> list[tuple[float | None, Node]]:
    """The valid ones of `nodes` with their selection scores, best first (the latest among equals;
    no score counts as 0)."""
    record = read_run_record(run_dir)
    sizes = observed_sizes(record.domains, list(archive.nodes.values()))
    rule = observed_rule(record.config.get("loop"), record.domains)
    return sorted(((run_score(n, sizes, rule), n) for n in nodes if n.valid_parent),
                  key=lambda t: (-(t[0] or 0), -t[1].generation))


def evaluate_missing(run_dir: Path, domain: Domain, split: str, top: int,
                     out: Callable[[str], None] = show, specs: tuple[str, ...] = ()) -> None:
    """--rows all: the `top` best nodes of the archive, each evaluated on all of `split` (those not
    yet evaluated on it as `run_optimization --evaluate` does, through the same launch, which pays only
    for rows not answered before). `specs`: the --domain_spec files to hand it (a run's folder never
    names a scorer of the user's)."""
    archive = Archive(run_dir)
    best = [n.node_id for score, n in ranked(run_dir, archive, list(archive.nodes.values()))
            if score is not None][:top]
    keys = split_keys(run_dir, archive, domain.name, split)
    missing = [n for n in best if n not in keys]
    if not missing:
        return
    command = ["run_optimization", "--resume_from", str(run_dir), "--evaluate", ",".join(missing), "--split", split,
               *(arg for spec in specs for arg in ("--domain_spec", spec))]
    out(f"evaluating node{'s' if len(missing) > 1 else ''} {', '.join(missing)} on {domain.name}/{split} first, "
        f"as python -m {' '.join(command)} does")
    try:
        launch(RunRequest(resume_from=run_dir, domain_specs=specs, evaluate=tuple(missing), split=split))
    except UserError as e:
        raise UserError(f"the evaluation of node(s) {', '.join(missing)} on {split} did not finish: {e}; "
                        f"run it again, or combine what is stored with --rows shared") from None
    finally:
        release_folder(run_dir)  # the run is this process's no longer: the ensemble only reads it


def choose_members(run_dir: Path, domain: Domain, split: str, top: int,
                   out: Callable[[str], None] = show) -> list[Member]:
    archive = Archive(run_dir)
    keys = split_keys(run_dir, archive, domain.name, split)
    store, members = EvalStore(run_dir), []
    for score, node in ranked(run_dir, archive, [archive.nodes[i] for i in keys]):
        if len(members) == top:
            break
        try:
            answers = read_answers(store.predictions(keys[node.node_id]), domain.question_id)
        except FileNotFoundError:
            continue  # an evaluation cut short: no predictions.csv
        except (OSError, ValueError, pd.errors.ParserError) as e:
            out(f"node {node.node_id} left out: its predictions are not a file the run wrote ({str(e)[:200]})")
            continue
        members.append(Member(node, score or 0.0, keys[node.node_id], answers))
    if not members:
        raise UserError(f"{run_dir}: no node has stored predictions for {domain.name}/{split}"
                        + (" (test is evaluated by --final_test)" if split == "test" else ""))
    return members


def _vote(domain: Domain, members: list[Member], qid: str, weighted: bool) -> str:
    tally: dict[str, float] = {}
    first: dict[str, Member] = {}  # each answer's best-ranked supporter
    for m in members:  # ranked best first
        vote = vote_of(domain, m.answers[qid])
        if vote is not None:
            tally[vote] = tally.get(vote, 0.0) + (m.score if weighted else 1.0)
            first.setdefault(vote, m)
    if not tally:
        return members[0].answers[qid]
    top = max(tally.values())
    winner = next(v for v in first if tally[v] >= top - 1e-12)  # `first` is in rank order: ties to the better
    return first[winner].answers[qid]


def _train_by_problem(run_dir: Path, domain: Domain, members: list[Member]) -> dict[tuple[str, str], float]:
    """(node id, problem) -> the member's mean train score on that problem's rows."""
    if "train" not in domain.splits:
        return {}
    train = domain.load("train")
    if PROBLEM not in train.columns or PROBLEM == domain.question_id:
        return {}
    problem_of = dict(zip(train[domain.question_id].astype(str), train[PROBLEM].astype(str)))
    store, found = EvalStore(run_dir), {}
    for m in members:
        key = m.node.eval_key(domain.name, "train")
        report = store.report(key) if key else None
        rows = row_scores(report, domain.score_key) if report else None
        per: dict[str, list[float]] = {}
        for qid, value in (rows or {}).items():
            if qid in problem_of:
                per.setdefault(problem_of[qid], []).append(value)
        found.update({(m.node.node_id, p): sum(v) / len(v) for p, v in per.items()})
    return found


def combine(run_dir: Path, domain: Domain, members: list[Member], rule: str, rows: pd.DataFrame) -> list[str]:
    """The ensemble's prediction for each of `rows` (the split's rows every member answered)."""
    ids = rows[domain.question_id].astype(str)
    if rule != "best_per_question":
        return [_vote(domain, members, q, weighted=rule == "weighted") for q in ids]
    by_problem = _train_by_problem(run_dir, domain, members)
    problems = rows[PROBLEM].astype(str) if PROBLEM in rows.columns else [None] * len(rows)
    chosen = []
    for q, p in zip(ids, problems):
        known = [m for m in members if (m.node.node_id, p) in by_problem]
        pick = max(known, key=lambda m: by_problem[(m.node.node_id, p)]) if known else members[0]
        chosen.append(pick.answers[q])  # max keeps the first of equals: the better-ranked member
    return chosen


def agent_combine(run_dir: Path, record: RunRecord, node: Node, members: list[Member],
                  ids: list[str]) -> tuple[list[str], str]:
    """`node`'s own ensemble.py (agent code) combines the members' answers, in a sandbox with no
    network and no label; what it prints is read as untrusted data. The predictions, and a line
    on what was kept."""
    from services.sandbox import open_sandbox
    from services.workspace import RunRepo

    if node.commit is None:
        raise UserError(f"node {node.node_id} has no code of its own in the run's repository")
    # Rows go in under tokens: an id is the data's, and may say what the split hides.
    token = {q: secrets.token_hex(6) for q in ids}
    given = {"members": [{"node_id": m.node.node_id, "score": m.score} for m in members],
             "rows": [{"id": token[q], "answers": {m.node.node_id: m.answers[q] for m in members}} for q in ids]}
    config = data_config(record, run_dir)  # its sandbox as the defaults allow: never the folder's none or address
    with tempfile.TemporaryDirectory() as scratch:
        with repository_read(run_dir, node.commit):
            workspace = RunRepo(run_dir / "repo").checkout(node.commit, Path(scratch) / "workspace")
        if not (workspace / "ensemble.py").is_file():
            raise UserError(f"node {node.node_id} has no ensemble.py (runs started before it existed)")
        with open_sandbox(config.sandbox, workspace, [], None) as box:
            result = box.run([box.python, box.trusted_script("ensemble_run.py")], box.base_env(),
                             timeout=config.loop.selector_timeout_s, input=json.dumps(given), cwd=box.workdir)
    if not result.ok:
        raise UserError(f"node {node.node_id}'s ensemble.py failed ({result.why()}): "
                        + " | ".join(result.stderr.strip().splitlines()[-2:])[:300])
    lines = result.stdout.strip().splitlines()
    try:
        chosen = json.loads(lines[-1]) if lines else None
    except (ValueError, RecursionError):
        chosen = None
    if not isinstance(chosen, dict):
        raise UserError(f"node {node.node_id}'s ensemble.py printed no mapping of row ids to predictions: "
                        f"{result.stdout[-200:]!r}")
    cap = config.harness.max_prediction_bytes
    answer = {q: a for q in ids if isinstance(a := chosen.get(token[q]), str)
              and len(a.encode("utf-8", "surrogatepass")) <= cap}
    predictions = [answer.get(q, members[0].answers[q]) for q in ids]
    return predictions, (f"node {node.node_id}'s ensemble.py chose {len(answer)} of {len(ids)} rows"
                         + (" (the others: the best member's answer)" if len(answer) < len(ids) else ""))


def _score(domain: Domain, rows: pd.DataFrame, predictions: list[str], path: Path) -> dict:
    frame = rows.copy()
    frame["prediction"] = predictions
    atomic_write_csv(path, frame, agent_text=True)
    return domain.scorer.score(domain, path)


def build(run_dir: Path, domain: Domain, split: str, rule: str, top: int, out: Callable[[str], None] = show,
          agent: str | None = None, rows_of: str = "shared", specs: tuple[str, ...] = ()) -> dict:
    """Build, score and save the ensemble; returns members.json's content. With rule `agent`, the
    ensemble.py of node `agent` (default: the best member) combines the answers; with `rows_of`
    "all", the members missing an evaluation of the whole split get one first (`specs`: the
    --domain_spec files it is handed). Nothing is written through a link planted in the run folder."""
    guard_folder(run_dir)
    if rows_of == "all":
        evaluate_missing(run_dir, domain, split, top, out, specs)
    members = choose_members(run_dir, domain, split, top, out)
    data = domain.load(split)
    shared = set.intersection(*(set(m.answers) for m in members))
    rows = pd.DataFrame(data[data[domain.question_id].astype(str).isin(list(shared))].reset_index(drop=True))
    if rows.empty:
        raise UserError(f"the {len(members)} members share no row of {domain.name}/{split}")
    folder = run_dir / "ensembles" / f"{split}-{rule}-top{top}"
    if rule == "agent":
        nodes = Archive(run_dir).nodes
        node = nodes.get(agent or members[0].node.node_id)
        if node is None:
            raise UserError(f"--agent {agent}: the run has no such node")
        folder = folder.with_name(f"{folder.name}-node{node.node_id}")
        predictions, line = agent_combine(run_dir, read_run_record(run_dir), node, members,
                                          list(rows[domain.question_id].astype(str)))
        out(line)
    else:
        predictions = combine(run_dir, domain, members, rule, rows)
    report = _score(domain, rows, predictions, folder / "predictions.csv")
    atomic_write_json(folder / "report.json", report)
    ids = rows[domain.question_id].astype(str)
    mine = row_scores(report, domain.score_key) or {}
    with tempfile.TemporaryDirectory() as scratch:
        scored = []
        for m in members:
            theirs = _score(domain, rows, [m.answers[q] for q in ids], Path(scratch) / "predictions.csv")
            scored.append({"node": m.node.node_id, "selection_score": m.score, "key": m.key,
                           "score": theirs.get(domain.score_key),
                           "rows": row_scores(theirs, domain.score_key) or {}})
    summary = {"schema_version": 1, "split": split, "rule": rule, "top": top, "domain": domain.name,
               "rows": len(rows), "score_key": domain.score_key, "score": report.get(domain.score_key),
               "interval": interval(list(mine.values())).to_list() if mine else None,
               "members": [{k: v for k, v in s.items() if k != "rows"} for s in scored]}
    best = max(scored, key=lambda s: s["score"] or 0)
    shared_ids = sorted(mine.keys() & best["rows"].keys())
    if shared_ids:
        summary["vs_best"] = {"node": best["node"], "gain": (summary["score"] or 0) - (best["score"] or 0),
                              "p": paired_p([mine[q] for q in shared_ids], [best["rows"][q] for q in shared_ids],
                                            "two-sided")}
    atomic_write_json(folder / "members.json", summary)
    return {**summary, "folder": str(folder)}


def lines(summary: dict) -> list[str]:
    band = summary["interval"]
    shown = [f"ensemble of {len(summary['members'])} nodes, rule {summary['rule']}, on the {summary['rows']} rows of "
             f"{summary['domain']}/{summary['split']} every member answered (no model call)",
             f"  ensemble    {summary['score_key']} {summary['score']:.3f}"
             + (f" [{band[0]:.3f}, {band[1]:.3f}]" if band else "")]
    for m in sorted(summary["members"], key=lambda m: -(m["score"] or 0)):
        shown.append(f"  node {m['node']:<6} {summary['score_key']} {m['score']:.3f}   "
                     f"(selection score {m['selection_score']:.3f})")
    if "vs_best" in summary:
        v = summary["vs_best"]
        shown.append(f"  gain over the best member (node {v['node']}): {v['gain']:+.3f} "
                     f"(paired test on the same rows, p={v['p']:.3f})")
    return shown + [f"saved: {summary['folder']}"]


def build_parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="python -m apps.ensemble", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("run", metavar="RUN", help="a run folder")
    ap.add_argument("--split", default="val", help="the split to combine predictions on (default val)")
    ap.add_argument("--domain", help="the domain, when the run has several")
    ap.add_argument("--rule", choices=RULES, default="majority")
    ap.add_argument("--top", type=int, default=5, help="members: the K best nodes by selection score, chosen on "
                                                       "val (train where a domain has no val), never on test")
    ap.add_argument("--agent", metavar="NODE", help="with --rule agent: the node whose ensemble.py combines "
                                                     "the answers, in a sandbox (default: the best member)")
    ap.add_argument("--rows", choices=("shared", "all"), default="shared",
                    help="shared: the rows every member answered (stored predictions, no model call); all: the "
                         "K best nodes of the archive, each evaluated on the whole split first where it was not "
                         "(only rows not answered before are paid)")
    ap.add_argument("--domain_spec", action="append", type=os.path.abspath, default=[], metavar="FILE",
                    help="the YAML spec the run's domain was defined by, checked against what the run kept: "
                         "needed to score a domain whose scorer is a function of your own (a run folder never "
                         "names code to run)")
    return ap


def main(argv: list[str] | None = None) -> None:
    from domains.registry import get_domain, use_domain_specs

    args = build_parser().parse_args(argv)
    run_dir = Path(args.run).resolve()
    if args.top < 1:
        raise UserError(f"--top {args.top}: expected 1 or more members")
    use_domain_specs(args.domain_spec, run_dir)  # before the run's own record, which then keeps them
    record = read_run_record(run_dir)
    name = args.domain or record.domains[0]
    if name not in record.domains:
        raise UserError(f"--domain {name}: the run's domains are {', '.join(record.domains)}")
    if args.domain is None and len(record.domains) > 1:
        raise UserError(f"the run has domains {', '.join(record.domains)}: pass --domain NAME")
    domain = get_domain(name)
    if args.split not in domain.splits:
        raise UserError(f"--split {args.split}: {name} has splits {', '.join(domain.splits) or 'none'}")
    if domain.label_column is None:
        raise UserError(f"{name}: its predictions are proofs, which cannot be voted on")
    if args.agent is not None and args.rule != "agent":
        raise UserError("--agent NODE goes with --rule agent")
    for line in lines(build(run_dir, domain, args.split, args.rule, args.top, agent=args.agent, rows_of=args.rows,
                            specs=tuple(args.domain_spec))):
        show(line)


if __name__ == "__main__":
    exit_on_user_error(main)
