"""The local model's server runs in a session of its own: a Ctrl-C in the terminal (SIGINT to the foreground
process group) reaches the run alone, which then stops its server in order; the server never takes it as a
death of its own (`dead_reason`)."""

import os
import signal
import subprocess
import sys

import pytest

from services.providers import LOCAL_DEFAULT
from support.cli import REPO_ROOT
from support.waiting import process_gone

SCRIPT = f"""
import sys, time
sys.path.insert(0, {str(REPO_ROOT)!r})
from services.local_model import LocalServer
server = LocalServer({LOCAL_DEFAULT!r}).ensure_started()
try:
    print(server.proc.pid, flush=True)
    time.sleep(120)
except KeyboardInterrupt:
    time.sleep(2)  # a server that the SIGINT reached too has ended by now
    print(server.dead_reason(), flush=True)
    server.stop()
"""


@pytest.mark.e2e
def test_ctrl_c_reaches_the_run_and_not_its_model_server():
    run = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, text=True,
                           env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
                           start_new_session=True)  # a process group of its own, as a terminal's job
    try:
        server = int(run.stdout.readline())
        assert os.getsid(server) == server != os.getsid(run.pid)
        os.killpg(run.pid, signal.SIGINT)  # what Ctrl-C sends
        out, _ = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    assert out.strip() == "None"  # it did not die of the signal: the run stopped it
    if not process_gone(server, 15):
        os.kill(server, signal.SIGKILL)
        pytest.fail("the model server outlived the run that stopped it")
