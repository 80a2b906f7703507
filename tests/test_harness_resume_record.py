"""`python -m domains.harness --resume_from DIR` with no --domain: the domain, subset and rows come from DIR's
run.json, read as a stranger's data (a handed folder): a link, a fifo, a file past its size or values of other
types are refused in one line or left out, never followed, waited on or used."""

import json

import pytest

from domains.harness.__main__ import build_parser, completed
from domains.harness.request import EvalRequest


def args_of(folder, *flags):
    return completed(EvalRequest.from_args(build_parser().parse_args(["--resume_from", str(folder), *flags])))


def test_a_resume_takes_what_its_run_asked_for_and_the_flags_given(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"domain": "imo_grading", "subset": "val", "num_samples": 3,
                                                   "agent_path": "/elsewhere/agent.py"}))
    args = args_of(tmp_path)
    assert (args.domain, args.subset, args.num_samples, args.agent_path) == ("imo_grading", "val", 3, "task_agent")
    args = args_of(tmp_path, "--subset", "train", "--num_samples", "-1")
    assert (args.domain, args.subset, args.num_samples) == ("imo_grading", "train", -1)
    args = args_of(tmp_path, "--domain", "imo_proof")  # a domain named: nothing is read
    assert (args.domain, args.subset, args.num_samples) == ("imo_proof", "", -1)


@pytest.mark.parametrize("values", [{"subset": 7, "num_samples": 0}, {"subset": ["val"], "num_samples": True},
                                    {"subset": None, "num_samples": 2.5}])
def test_values_of_other_types_are_left_out(tmp_path, values):
    (tmp_path / "run.json").write_text(json.dumps({"domain": "imo_grading", **values}))
    args = args_of(tmp_path)
    assert (args.domain, args.subset, args.num_samples) == ("imo_grading", "", -1)
