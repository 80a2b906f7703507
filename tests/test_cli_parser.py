"""services/cli_parser.py: a command line's mistake is one line with the flag probably meant, exit code 2."""

import ast
import subprocess
import sys

import pytest

from services.cli_parser import ArgumentParser, unrecognized
from support.cli import REPO_ROOT

CORE = ("services", "domains", "archive", "optimizer", "apps")
# Started by the gateway by its path, with the standard library and xllamacpp alone; no person types it.
OWN_PARSER = {"services/local_serve.py"}


def parser() -> ArgumentParser:
    ap = ArgumentParser(prog="python -m tool", description="A tool.")
    ap.add_argument("--max_generation", type=int, default=None)
    ap.add_argument("--model")
    ap.add_argument("--meta_model")
    ap.add_argument("--dname", required=True)
    return ap


def error_of(capsys, argv: list[str], ap: ArgumentParser | None = None) -> str:
    with pytest.raises(SystemExit) as stopped:
        (ap or parser()).parse_args(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert err.rstrip().endswith("(python -m tool --help lists every flag)"), err
    return err


@pytest.mark.parametrize("argv, said", [
    (["--dname", "d", "--max_generations", "3"], "unrecognized argument --max_generations; did you mean "
                                                 "--max_generation?"),
    (["--dname", "d", "--max_generations=3"], "unrecognized argument --max_generations; did you mean --max_gen"),
    (["--dname", "d", "--modle", "x", "--meta_modle", "y"],
     "unrecognized arguments --modle, --meta_modle; did you mean --model for --modle, --meta_model for --meta_modle?"),
    (["--dname", "d", "--zzz"], "unrecognized argument --zzz ("),
    (["--dname", "d", "stray", "-1"], "unrecognized arguments stray, -1 ("),
    # The typo is what a missing required flag comes from: it is what the line names.
    (["--dnmae", "d"], "unrecognized argument --dnmae; did you mean --dname?"),
    ([], "the following arguments are required: --dname"),
    (["--dname", "d", "--max_generation", "x"], "argument --max_generation: invalid int value: 'x'"),
    (["--dname", "d", "--m", "x"], "ambiguous option: --m could match"),
])
def test_a_mistake_is_one_line_naming_the_flag_meant(capsys, argv, said):
    assert said in error_of(capsys, argv)


def test_an_abbreviation_and_a_correct_line_parse_as_before():
    args = parser().parse_args(["--dname", "d", "--max_gen", "4"])
    assert (args.dname, args.max_generation) == ("d", 4)


def test_a_subcommands_flags_are_guessed_and_its_errors_are_one_line(capsys):
    ap = ArgumentParser(prog="python -m tool")
    commands = ap.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build")
    build.add_argument("--full", action="store_true")
    assert "unrecognized argument --fulll; did you mean --full?" in error_of(capsys, ["build", "--fulll"], ap)
    assert "invalid choice: 'biuld'" in error_of(capsys, ["biuld"], ap)


def test_text_a_terminal_would_act_on_is_shown_escaped(capsys):
    assert "--x\\x1b[2J" in error_of(capsys, ["--dname", "d", "--x\x1b[2J"])


def test_the_message_alone():
    assert unrecognized(["--max_generations", "3"], ["--max_generation", "--model"]) == (
        "unrecognized argument --max_generations; did you mean --max_generation?")
    assert unrecognized(["3"], ["--max_generation"]) == "unrecognized argument 3"


def test_every_command_of_the_project_builds_its_parser_here():
    """A new entry point with argparse's own parser would print its usage again: each parser of the core is
    made from services.cli_parser.ArgumentParser."""
    sources = [p for top in CORE for p in (REPO_ROOT / top).rglob("*.py")] + sorted(REPO_ROOT.glob("*.py"))
    found = []
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "ArgumentParser" and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "argparse"):
                found.append(path.relative_to(REPO_ROOT).as_posix())
    assert sorted(set(found) - OWN_PARSER) == []
    assert OWN_PARSER <= set(found)  # still there, still exempt for its reason


@pytest.mark.parametrize("module, argv, said", [
    ("run_optimization", ["--max_generations", "3"],
     "error: unrecognized argument --max_generations; did you mean --max_generation? "
     "(python -m run_optimization --help lists every flag)"),
    ("domains.harness", ["--domain", "imo_grading", "--num_workerz", "2"],
     "error: unrecognized argument --num_workerz; did you mean --num_workers? "
     "(python -m domains.harness --help lists every flag)"),
    ("domains.report", ["--domain", "imo_grading", "--dnmae", "x"],
     "error: unrecognized argument --dnmae; did you mean --dname? (python -m domains.report --help lists every flag)"),
    ("setup_proofgrader_repo", ["--proofautogarder"],
     "error: unrecognized argument --proofautogarder; did you mean --proofautograder? "
     "(setup_proofgrader_repo --help lists every flag)"),
    ("apps.analyze", ["runs", "--outt", "x"],
     "error: unrecognized argument --outt; did you mean --out? (python -m apps.analyze --help lists every flag)"),
    ("services.sandbox", ["build-image", "--tga", "x"],
     "error: unrecognized argument --tga; did you mean --tag? (python -m services.sandbox --help lists every flag)"),
    ("services.install", ["--hlep"],
     "error: unrecognized argument --hlep; did you mean --help? (python -m services.install --help lists every flag)"),
])
def test_each_command_says_a_mistyped_flag_in_one_line(tmp_path, module, argv, said):
    r = subprocess.run([sys.executable, "-m", module, *argv], cwd=REPO_ROOT, capture_output=True, text=True,
                       timeout=120)
    assert (r.returncode, r.stderr, r.stdout) == (2, said + "\n", "")
