"""Where this project departs from the HyperAgents reference (facebookresearch/HyperAgents @59a68f6),
item by item: the one source of `configs/presets/paper.yaml`, of the table "The paper's semantics
and this project's defaults" in docs/paper.md and of the `departs` lines `--dry_run` prints.

An item with a config key has the value the reference's behaviour needs (`paper`): `--preset paper`
sets exactly those, and a run whose value differs departs there. An item without a key is a choice
no setting reverts (the models, the sandbox, how an outage is counted); `--dry_run` names those of
the run's domains and its initial agent. Each says what the reference does (a file of the mirror at
that commit), what the default does, and why the default differs; `why` is "-" where it does not.

`python -m services.departures --write` rewrites the preset and docs/paper.md's table from this list;
tests/test_departures.py fails while either differs from what it would write.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass

from services.cli_parser import ArgumentParser
from services.config import PRESETS_DIR, PROJECT_ROOT, Config

_NONE = object()  # an item no config key sets


@dataclass(frozen=True)
class Departure:
    item: str  # what it is about, as the table's first column says it
    reference: str  # what the reference does (and where)
    default: str  # what a run without the preset does
    why: str  # why the default differs; "-" when it does not
    key: str = ""  # the config key (SECTION.NAME) that decides it; "" for an item no key sets
    paper: object = _NONE  # the key's value under --preset paper
    note: str = ""  # the preset file's comment on its line
    applies: Callable[[Config, list[str]], bool] | None = None  # for an item without a key: whether a run
    # (its config and domain names) meets it, for --dry_run

    def value(self, config: Config) -> object:
        section, name = self.key.split(".")
        return getattr(getattr(config, section), name)

    def departs(self, config: Config, domains: list[str]) -> bool:
        """Whether a run with `config` on `domains` departs from the reference here."""
        if self.key:
            return self.value(config) != self.paper
        return self.why != "-" and self.applies is not None and self.applies(config, domains)


def _initial(*names: str) -> Callable[[Config, list[str]], bool]:
    return lambda config, domains: config.loop.initial_agent in names


def _domain(*names: str) -> Callable[[Config, list[str]], bool]:
    return lambda config, domains: any(d in names for d in domains)


def _always(config: Config, domains: list[str]) -> bool:
    return True


DEPARTURES: tuple[Departure, ...] = (
    Departure("initial task and meta agent",
              "generic agents: a task agent given the raw inputs, its answer the `\"response\"` of the last "
              "`<json>` or fenced JSON object, else \"None\" (temperature 0, 16,384 tokens); a one-line meta "
              "agent (modify any part of the code at a path) with text tool calls, bash in a fresh shell per "
              "call (120 s) and an editor, at most 40 tool calls; `baselines/` left out of the workspace",
              "`default`: a prompt per domain (rubric, proof, final answer) read leniently (case, wording; JSON "
              "under constrained decoding for local models); a meta agent told the code's parts, the feedback "
              "folder and the generations left, with native tool calls and one persistent shell; the workspace "
              "also holds `task_agent/baselines/` (ProofAutoGrader, proof_solver, SC-TIR)",
              "a generic agent spends its first generations finding out what the task is, small local models "
              "answer usably only under a schema, and the meta agent can read the baselines and switch to one",
              key="loop.initial_agent", paper="paper",
              note="initial_agents/paper: generic task agent (strict JSON reading), one-line meta agent"),
    Departure("the meta agent that starts from a project task agent (`--initial_agent proofautograder`, the "
              "BetterGrader run)",
              "its one-line meta agent and agent code, ProofAutoGrader copied over `task_agent.py` "
              "(domains/imo/setup_proofgrader_repo.py)",
              "`default`: the project's meta agent beside `task_agent/baselines/`",
              "the guided meta agent wastes fewer calls finding its way",
              key="loop.initial_meta_agent", paper="paper",
              note="ProofAutoGrader (and other project task agents it ran) with the one-line meta agent"),
    Departure("a command to try the task agent",
              "none: the meta agent has bash and an editor",
              "`python /opt/hyperagents/try_agent.py` on train rows",
              "the meta agent can test a change before it ends, instead of learning of a crash a generation later",
              key="loop.try_command", paper=False, note="the meta agent has its bash and editor only"),
    Departure("meta agent limits",
              "6 hours a run (`timeout 21600`); its agent stops after 40 tool calls",
              "1 hour",
              "bounds a generation's wall time; the paper's agent ends at its 40th tool call long before 6 hours",
              key="loop.meta_timeout_s", paper=21600, note="6 hours a meta agent run"),
    Departure("meta agent calls",
              "no cap of the loop's: the agent stops itself after 40 tool calls (41 model calls, plus retries "
              "of a reply cut off at the output limit)",
              "40 model calls",
              "the project's meta agent is told its calls left and plans within 40; the paper's needs room for "
              "its 41 calls and retried cut replies",
              key="loop.meta_max_calls", paper=60,
              note="the gateway's cap above the agent's own 40 tool calls (41 calls, plus retries of cut replies)"),
    Departure("what the meta agent reads of earlier generations",
              "the whole output folder but val and test evaluations: each generation's meta transcript, its "
              "`generate.log` (with val scores) and the task agent's transcript of every train row "
              "(generate_loop.py)",
              "`train_reports`: `feedback/<node>/` with `patch.diff`, `metadata.json` (train scores) and per "
              "domain `report.json` and `predictions.csv` of train",
              "transcripts are large, hostile text, and the log shows val scores the meta agent could fit",
              key="loop.feedback", paper="paper",
              note="also meta transcripts, a generation log (val scores) and train rows' transcripts, bounded"),
    Departure("screening rows",
              "10 train and the same 10 val rows; the child goes on when its train score is above 0",
              "`train`: 10 train rows, the same verdict",
              "val rows of a child that stops there are paid for only to give it the scaled score below",
              key="loop.stage_splits", paper="train_and_val",
              note="a stage runs 10 train and the same 10 val rows; the verdict reads train"),
    Departure("a node that stopped at the screening",
              "selected on its 10 val rows x 10/100",
              "`train`: its 10 train rows x 10/100",
              "the same scale, on rows that were paid for anyway",
              key="loop.staged_score", paper="selection",
              note="a node that stopped at the stage is selected on its 10 val rows x 10/100"),
    Departure("how the initial node is evaluated",
              "on 10 rows of each split (setup_initial.sh's `--num_samples 10`)",
              "`full`: screened, then on the full splits like any node",
              "the score every child is compared with should rest on 100 + 100 rows, not 10",
              key="loop.initial_eval", paper="stage",
              note="the initial node runs the stage's rows only: 10 train, 10 val"),
    Departure("the initial node's selection score",
              "its val score x 10/100, as a node that stopped at the screening",
              "its val score",
              "scaled, it is almost never chosen again (0.5% against 12% in tests/test_paper_semantics.py's archive)",
              key="loop.scale_initial", paper=True,
              note="the initial node's val score x 10/100 too, as a node that stopped at the stage"),
    Departure("equal scores for `best`",
              "the earliest node", "the latest node", "of equals, the later one is the more evolved",
              key="loop.ties", paper="earliest", note="`best` among equal scores: the earliest node"),
    Departure("when two scores are equal",
              "bit-equal floats only (select_parent's plain `max`), the scaled score computed as score x share",
              "within 1e-12", "one value reached by two orders of arithmetic is one score, not a difference "
              "between agents",
              key="loop.tie_tolerance", paper=0, note="scores equal only when bit-equal floats"),
    Departure("a meta agent that failed (exited non-zero, timed out, overflowed its context)",
              "no diff and no evaluation for the child; its parent is no parent any more (never the initial node)",
              "the child is recorded `meta_failed` and not evaluated; the parent stays a parent",
              "one crash of a sampled run says little about the code it started from",
              key="loop.meta_failure", paper="parent",
              note="a failed meta agent: its child is not evaluated and its parent is no longer chosen"),
    Departure("no node with a score",
              "the initial node is the parent, at score 0",
              "the run stops with one line",
              "a meta agent given nothing scored improves blind, one paid generation after another",
              key="loop.no_score", paper="initial_at_zero",
              note="no node with a score: the initial node is the parent, at 0"),
    Departure("a child that changed only the meta agent",
              "evaluated anew, like every child, so the best val score so far is a maximum over more draws",
              "takes the evaluations of the earlier node with the same task agent code",
              "same code, same rows: a second draw buys only noise",
              key="loop.reuse_evaluations", paper=False,
              note="every child is evaluated anew, also one whose task agent did not change"),
    Departure("a task agent that raises on a row",
              "its harness re-raises: the evaluation has no predictions and no score (a full run keeps the "
              "screening's 10-row report)",
              "that row is a wrong answer and the evaluation stands",
              "one crash on one input says what the agent does on it, not on the rest",
              key="loop.row_error", paper="invalid",
              note="the task agent raising on a row leaves that evaluation no score of its own"),
    Departure("proof labels (`imo_proof`'s grader)",
              "only the four lower-case words; anything else is 0 points (domains/imo/proof_eval.py); grading "
              "labels are read in any case",
              "`lenient`: case and surrounding space ignored",
              "an evolved grader answering \"Correct\" should not score 0",
              key="harness.label_case", paper="exact", note="proof labels read exactly as written"),
    Departure("parent selection", "`score_child_prop`", "the same", "-",
              key="loop.parent_selection", paper="score_child_prop", note="the paper's parent selection"),
    Departure("promotion after the screening", "train score above 0", "the same", "-",
              key="loop.promotion", paper="score_above",
              note="the stage promotes a child whose train score is above 0"),
    Departure("the full evaluation of a promoted child",
              "every row of train and val",
              "`racing`: val in chunks of 10 rows, stopped once the child can reach neither the best node's score "
              "nor its promotion rule's bar (a one-sided bound, 5% error over the looks); train's other rows only "
              "for a child that finished its race",
              "most children cannot become the best, and their rows are most of a run's bill "
              "(bench/evaluation_cost.py)",
              key="loop.racing", paper=False, note="every promoted child is evaluated on all its rows"),
    Departure("the run's best node", "the highest selection score", "the same", "-",
              key="loop.best_choice", paper="highest", note="the run's best: the highest selection score"),
    Departure("ProofAutoGrader (`--initial_agent proofautograder`, `setup_proofgrader_repo --proofautograder`)",
              "one call at temperature 0 and 16,384 tokens; the first `<points>` tag, 0/1/6/7 only, else invalid",
              "the same", "-"),
    Departure("ProofAutoGrader's prompt",
              "IMO-Bench's grading prompt word for word (baselines/imo_grading/proofautograder.py)",
              "the same scale, steps and `<points>` reply, in this project's own words",
              "this project writes every prompt in its own words; the reply is read as the reference reads it",
              applies=_initial("proofautograder")),
    Departure("the packaged grader (`setup_proofgrader_repo --generate_dir`)",
              "the lowest val normalized MAE, ties to the earlier node",
              "the highest val accuracy of the nodes evaluated in full (`--choose best`); `--choose paper` is the "
              "reference's, `--choose cheapest_within=D` the cheapest within D of the best's accuracy",
              "a grader is deployed for its accuracy and its price; the reference's rule ranks 10-row screening "
              "MAEs beside 100-row ones, so one lucky screening can win", applies=_domain("imo_grading")),
    Departure("a row whose model call failed at the provider",
              "the exception ends the harness: the evaluation has no score",
              "not scored: the run stops in one line and `--resume_from` redoes the row (with the preset too)",
              "an outage is not the agent's answer", applies=_always),
    Departure("a failure of this machine (a full disk, a folder turned read-only, the sandbox engine gone)",
              "nothing tells it from the agent's failure: the evaluation or the loop fails with it",
              "the run stops in one line (exit 74) and `--resume_from` redoes what was interrupted (with the "
              "preset too)",
              "a full disk is not the agent's doing", applies=_always),
    Departure("the models",
              "o4-mini (task) and Claude Sonnet 4.5 (meta) of its time",
              "whatever `--task_model` and `--meta_model` name", "the paper's model versions cannot be sampled "
              "again", applies=_always),
    Departure("the sandbox",
              "the meta agent in Docker with the whole repository, data folders included",
              "only the agent code and the train rows, in bubblewrap or Docker with no network",
              "labels of val and test rows never enter a sandbox", applies=_always),
    Departure("the data",
              "IMO-Bench's files of its time",
              "the bundled files at the commit domains/imo/data/README.md names",
              "a run must not depend on a download", applies=_domain("imo_grading", "imo_proof")),
    Departure("IMO-AnswerBench answers",
              "(not in the reference; IMO-Bench's own:) an LLM grader (AnswerAutoGrader) on every output, "
              "temperature 0 (`--domain imo_answer_judged`)",
              "`imo_answer`: math-verify, right only where it is sure (decimals exact, never rounded); "
              "`imo_answer_hybrid`: math-verify where it is sure, else the grader",
              "a rule costs nothing and cannot be talked into a verdict",
              applies=_domain("imo_answer", "imo_answer_hybrid")),
    Departure("AIME 2025",
              "(not in the reference; the benchmark's own rule:) any number in the output equal to the answer",
              "`accuracy`: the last answer the output commits to (a box or an answer marker; a later one "
              "overrides an earlier one); the benchmark's rule is reported beside it as `accuracy_any_number`",
              "an agent optimized where any number counts learns to list many numbers",
              applies=_domain("aime2025")),
    Departure("SC-TIR (`--initial_agent sc_tir_recipe`, AIME only)",
              "(not in the reference; NuminaMath's recipe:) 48 traces at T=0.8, 4 calls of 2,048 tokens, 5 s a "
              "code block, integer answers mod 1000, none -> 0",
              "`sc_tir`: 8 traces, 5 calls, 10 s a block, any answer votes, none -> \"None\"",
              "48 x 4 long calls a problem is dollars with an API model and days with the local one",
              applies=_initial("sc_tir")),
    Departure("AMO-Bench",
              "(not in the reference; AMO-Bench's official grader:) extraction after `</think>`, two-way verify, "
              "a retry on an answer cut at `\\medskip`, integer substitution points, 5 judges", "the same", "-"),
)


def keyed() -> list[Departure]:
    return [d for d in DEPARTURES if d.key]


def departures_of(config: Config, domains: list[str]) -> list[Departure]:
    """The items where a run with `config` on `domains` departs from the reference."""
    return [d for d in DEPARTURES if d.departs(config, domains)]


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def dry_run_lines(config: Config, domains: list[str]) -> list[str]:
    """--dry_run's `departs` lines: each way this run differs from the reference, and why."""
    default, lines = Config(), []
    for d in departures_of(config, domains):
        if d.key:
            ours = d.value(config)
            why = d.why if ours == d.value(default) and d.why != "-" else "this run's own setting"
            what = f"{d.key} {_shown(ours)} (the reference's: {_shown(d.paper)})"
        else:
            what, why = d.item, d.why
        lines.append(f"{'' if lines else 'departs':9}{what}: {why}")
    return lines


def preset_text() -> str:
    """configs/presets/paper.yaml as this list makes it."""
    lines = ["# --preset paper: the HyperAgents reference's semantics (facebookresearch/HyperAgents @59a68f6).",
             "# Written by `python -m services.departures --write` from services/departures.py, which says for",
             "# each line what the reference does, what the default does and why. Models, generations and data",
             "# are yours to set (--task_model, --meta_model, ...)."]
    sections: dict[str, list[Departure]] = {}
    for d in keyed():
        sections.setdefault(d.key.split(".")[0], []).append(d)
    for section, items in sections.items():
        lines.append(f"{section}:")
        for d in items:
            setting = f"  {d.key.split('.')[1]}: {_shown(d.paper)}"
            lines.append(f"{setting:<32} # {d.note}")
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table_text() -> str:
    """The docs' table (docs/paper.md), a row an item."""
    default = Config()
    rows = ["| item | the reference (`--preset paper` where a key sets it; a benchmark's own rule where the "
            "reference has none) | this project's default | why the default differs |", "|---|---|---|---|"]
    for d in DEPARTURES:
        item = f"{d.item} (`{d.key}`)" if d.key else d.item
        reference = f"`{_shown(d.paper)}`: {d.reference}" if d.key else d.reference
        ours = f"`{_shown(d.value(default))}`: {d.default}" if d.key and not d.default.startswith("`") \
            and d.default != "the same" else d.default
        rows.append(f"| {_cell(item)} | {_cell(reference)} | {_cell(ours)} | {_cell(d.why)} |")
    return "\n".join(rows) + "\n"


PAGE = PROJECT_ROOT / "docs" / "paper.md"
PRESET = PRESETS_DIR / "paper.yaml"
BEGIN, END = "<!-- departures: written by python -m services.departures --write -->\n", "<!-- departures end -->\n"


def page_with_table(page: str) -> str:
    """`page` with the text between its markers replaced by the table; ValueError without the markers."""
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    if not pattern.search(page):
        raise ValueError(f"{PAGE.relative_to(PROJECT_ROOT)} has no departures markers")
    return pattern.sub(lambda m: BEGIN + table_text() + END, page)


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m services.departures", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite configs/presets/paper.yaml and docs/paper.md's table")
    args = ap.parse_args(argv)
    if not args.write:
        sys.stdout.write(table_text())
        return 0
    PRESET.write_text(preset_text())
    PAGE.write_text(page_with_table(PAGE.read_text()))
    print(f"wrote {PRESET.relative_to(PROJECT_ROOT)} and the table of {PAGE.relative_to(PROJECT_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
