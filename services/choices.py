"""The config's fixed choices (those no plug-in adds to), one enum each: the config's validation reads their
members, and the code compares a setting with a member, never with a string written again. A setting stays the
plain text its YAML holds; a StrEnum member is equal to that text."""

from __future__ import annotations

from enum import StrEnum


class Ties(StrEnum):
    """loop.ties: which of equal scores wins, wherever a best is taken."""

    LATEST = "latest"  # the later node: the more evolved
    EARLIEST = "earliest"  # the earlier node: the reference's `max` over the archive in order


class MetaFailure(StrEnum):
    """loop.meta_failure: whose failure a crashed meta agent run is."""

    CHILD = "child"  # the child's: it is recorded meta_failed, the parent stays a candidate
    PARENT = "parent"  # the reference's: the parent may not be chosen again


class NoScore(StrEnum):
    """loop.no_score: what parent selection does when no node has a score."""

    STOP = "stop"  # the run stops, saying why
    INITIAL_AT_ZERO = "initial_at_zero"  # the reference's: the initial node at 0.0, whatever became of it


class InitialEval(StrEnum):
    """loop.initial_eval: how the initial node is evaluated."""

    FULL = "full"  # screened, then on the full splits like any node
    STAGE = "stage"  # the reference's: on the first stage's rows only


class RowError(StrEnum):
    """loop.row_error: what a row on which the task agent's own code raised counts as."""

    WRONG = "wrong"  # a wrong answer
    INVALID = "invalid"  # the reference's: the evaluation has no score of its own


class StageSplits(StrEnum):
    """loop.stage_splits: what each screening stage runs."""

    TRAIN = "train"
    TRAIN_AND_VAL = "train_and_val"  # the reference's: the same rows of val too


class StagedScore(StrEnum):
    """loop.staged_score: the split a node that only passed screening is selected on."""

    TRAIN = "train"
    SELECTION = "selection"  # the reference's: its selection split's rows


class Feedback(StrEnum):
    """loop.feedback: what feedback/<node>/ gives later meta agents."""

    TRAIN_REPORTS = "train_reports"
    PAPER = "paper"  # also the meta transcript, a generation log and each train row's transcript


class LabelCase(StrEnum):
    """harness.label_case: how a predicted label is compared with the true one."""

    LENIENT = "lenient"  # case and surrounding spaces ignored
    EXACT = "exact"  # the reference's: the same text
