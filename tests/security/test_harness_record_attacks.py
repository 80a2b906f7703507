"""A harness folder someone handed over, resumed with `python -m domains.harness --resume_from DIR` and no
--domain: its run.json is read as a stranger's data, so a link, a fifo, a file past its size, deep nesting,
bad UTF-8 or a domain that is not a name is one line, never followed, waited on or used."""

import json
import os

import pytest

from domains.harness.__main__ import MAX_RUN_RECORD, build_parser, completed
from domains.harness.request import EvalRequest
from services.errors import UserError


def args_of(folder, *flags):
    return completed(EvalRequest.from_args(build_parser().parse_args(["--resume_from", str(folder), *flags])))


@pytest.mark.attack("a handed harness folder whose run.json, read to resume it without --domain, is a link to "
                    "another file, a fifo, larger than its cap, nested 100,000 deep, not UTF-8 or names no domain")
def test_a_hostile_run_json_is_refused_in_one_line(tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"domain": "imo_grading"}))
    cases = {"link": lambda p: p.symlink_to(secret), "fifo": lambda p: os.mkfifo(p),
             "big": lambda p: p.write_text(json.dumps({"domain": "imo_grading", "pad": "x" * MAX_RUN_RECORD})),
             "deep": lambda p: p.write_text("[" * 100_000), "not json": lambda p: p.write_bytes(b"\xff{"),
             "no domain": lambda p: p.write_text(json.dumps({"domain": ["imo_grading"]})),
             "empty domain": lambda p: p.write_text(json.dumps({"domain": " "}))}
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
