"""`python -m domains.harness --resume_from DIR` with no --domain: the domain, subset and rows come from DIR's
run.json, read as a stranger's data (a handed folder): a link, a fifo, a file past its size or values of other
types are refused in one line or left out, never followed, waited on or used."""

import json
import os

import pytest

from domains.harness.__main__ import MAX_RUN_RECORD, build_parser, completed
from services.errors import UserError


def args_of(folder, *flags):
    return completed(build_parser().parse_args(["--resume_from", str(folder), *flags]))


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


def test_a_hostile_run_json_is_refused_in_one_line(tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"domain": "imo_grading"}))
    cases = {"link": lambda p: p.symlink_to(secret), "fifo": lambda p: os.mkfifo(p),
             "big": lambda p: p.write_text(json.dumps({"domain": "imo_grading", "pad": "x" * MAX_RUN_RECORD})),
             "deep": lambda p: p.write_text("[" * 100_000), "not json": lambda p: p.write_bytes(b"\xff{"),
             "no domain": lambda p: p.write_text(json.dumps({"domain": ["imo_grading"]}))}
    for name, make in cases.items():
        folder = tmp_path / name
        folder.mkdir()
        make(folder / "run.json")
        with pytest.raises(UserError) as refused:
            args_of(folder)
        assert "pass --domain NAME or --domain_spec FILE" in str(refused.value), name
        assert "\n" not in str(refused.value), name
    with pytest.raises(UserError, match="no run.json there"):
        args_of(tmp_path / "no run")
