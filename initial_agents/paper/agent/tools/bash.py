"""A bash tool with the reference's semantics (agent/tools/bash.py): a fresh shell for every call.

Reproduced: the reference makes a new shell session for each call and never reuses it, so nothing
(working directory, variables) carries from one call to the next, whatever its description says.
The command gets the agent's environment and working directory; after TIMEOUT_S seconds (120) it
stops with an "Error: ..." text. The result is the stripped standard output, then "\\nError:\\n"
and the stripped standard error when there is any, all stripped once more.
Different, each for a reason:
- a non-interactive `bash -c`, with no input: the reference's interactive shell waits for a marker
  line that an `exit` or a quoting mistake never prints, so those cost it the whole timeout, and it
  prints job-control noise that it then filters out of standard error;
- on a timeout the whole process group is killed (the reference leaves the shell running);
- each stream keeps at most KEEP_BYTES from each end, with a line saying how much was dropped, so a
  flood of output cannot fill memory (the reference keeps all of it);
- commands left running in the background do not hold the call up (as in the reference) and are
  not killed when it ends (as in the reference: a server started in the background keeps running).
"""

import os
import selectors
import signal
import subprocess
import time

TIMEOUT_S = 120.0
KEEP_BYTES = 64 * 1024
# Once the shell is gone, what it wrote is at most one pipe's buffer; a background job may go on
# writing for ever, so reading after the shell's exit stops after this many bytes.
_AFTER_EXIT_BYTES = 4 * 1024 * 1024
_READ_SIZE = 64 * 1024


def tool_info():
    # Content as the reference's description, including its claim that state persists between
    # calls (it does not, there or here) and its note on package mirrors: the model is told what
    # the paper's model was told.
    return {
        "name": "bash",
        "description": """Executes shell commands with bash.
* The "command" parameter is plain text: there is no need to escape it for XML.
* There is no internet access through this tool.
* apt and pip can install the usual Linux and Python packages from a local mirror.
* State is kept from one command call to the next, and across the conversation with the user.
* To read part of a file, say lines 10 to 25, a command like 'sed -n 10,25p FILE' does it.
* Stay away from commands whose output could be very long.
* Put long-running commands, servers among them, in the background (for instance 'sleep 10 &').""",
        "input_schema": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command to run in bash."},
            },
            "required": ["command"],
        },
    }


class _Kept:
    """The two ends of a stream, and how many bytes between them were dropped."""

    def __init__(self):
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, data):
        room = KEEP_BYTES - len(self.head)
        self.head += data[:room]
        self.tail += data[max(room, 0):]
        if len(self.tail) > KEEP_BYTES:
            self.dropped += len(self.tail) - KEEP_BYTES
            del self.tail[:len(self.tail) - KEEP_BYTES]

    def text(self):
        if not self.dropped:  # decoded whole, so a character split across the two parts survives
            return (self.head + self.tail).decode(errors="ignore")
        return (self.head.decode(errors="ignore") + f"\n[... {self.dropped} bytes of output dropped ...]\n"
                + self.tail.decode(errors="ignore"))


def _collect(proc, kept, deadline):
    """Read the shell's two pipes into `kept` until they close or the shell is gone; False when the
    time ran out first."""
    after_exit = None  # bytes read since the shell exited
    with selectors.DefaultSelector() as selector:
        for pipe in kept:
            selector.register(pipe, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            ready = selector.select(0 if after_exit is not None else min(left, 0.5))
            if after_exit is not None and (not ready or after_exit > _AFTER_EXIT_BYTES):
                break  # only background jobs can still be writing
            for key, _ in ready:
                data = os.read(key.fd, _READ_SIZE)
                if not data:
                    selector.unregister(key.fileobj)
                kept[key.fileobj].add(data)
                after_exit = None if after_exit is None else after_exit + len(data)
            if after_exit is None and proc.poll() is not None:
                after_exit = 0
    return True


def _exited(proc, deadline):
    """Whether the shell ends in time (it may close its pipes and go on running)."""
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return False
    return True


def _run(command):
    proc = subprocess.Popen(["bash", "-c", command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)  # its own group, to kill it whole
    kept = {proc.stdout: _Kept(), proc.stderr: _Kept()}
    deadline = time.monotonic() + TIMEOUT_S
    finished = False
    try:
        finished = _collect(proc, kept, deadline) and _exited(proc, deadline)
    finally:
        # Not reaped yet, so the group's id is still the shell's and cannot name another group.
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.stdout.close()
        proc.stderr.close()
        proc.wait()
    if not finished:
        return f"Error: the command did not finish within {TIMEOUT_S:g} seconds and was killed."
    output, error = (k.text().strip() for k in kept.values())
    return (output + (f"\nError:\n{error}" if error else "")).strip()


def tool_function(command):
    """Run `command` in a new bash process; its output, or "Error: ..." when it could not be run."""
    try:
        return _run(command)
    except Exception as e:
        return f"Error: {e}"
