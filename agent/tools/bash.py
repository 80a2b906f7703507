"""A bash tool backed by one long-lived shell, so `cd`, variables and functions persist.

Each command is written to a script file and `source`d by the shell: the shell
itself parses it, so heredocs and multi-line scripts work, and a quoting mistake
fails fast as a syntax error instead of leaving the shell waiting for more input.
After the script, the shell prints a random sentinel with the exit status; seeing
it means the command is done.
"""

from __future__ import annotations

import atexit
import os
import re
import secrets
import shlex
import signal
import subprocess
import tempfile
import threading
import time

from agent.tools import MAX_OUTPUT_CHARS, truncate

DEFAULT_TIMEOUT_S = 120
MAX_TIMEOUT_S = 3600
# Bytes kept at each end of a command's output while it runs, so a flood (`yes`)
# cannot fill memory. More than truncate() shows even at 4 bytes per character.
_KEEP_BYTES = 64 * 1024

TOOL = {
    "name": "bash",
    "description": (
        "Run commands in a persistent bash shell: the working directory, variables and functions carry over "
        "between calls. Stdout and stderr are merged and the exit status is reported. Commands get no input "
        "(stdin is empty), so use non-interactive flags. A command still running after `timeout` seconds "
        f"(default {DEFAULT_TIMEOUT_S}) is killed and the shell restarts. Output longer than "
        f"{MAX_OUTPUT_CHARS} characters keeps only its beginning and end."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The bash command or script to run."},
            "timeout": {
                "type": "integer",
                "description": f"Seconds before the command is killed (default {DEFAULT_TIMEOUT_S}, "
                f"at most {MAX_TIMEOUT_S}).",
            },
        },
        "required": ["command"],
    },
}


class Session:
    """One bash process and a reader thread collecting its merged output."""

    def __init__(self, cwd: str | None = None):
        self.cwd = cwd
        token = "__TOOL_DONE_" + secrets.token_hex(8) + "__"
        self._done_line = f"printf '{token}%d\\n' $?\n"
        self._done = re.compile(re.escape(token.encode()) + rb"(\d+)\n")
        fd, self._script = tempfile.mkstemp(prefix="bash-tool-", suffix=".sh")
        os.close(fd)
        # Own process group, so a timeout can kill the command's children with the shell.
        self._proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True,
        )
        assert self._proc.stdin and self._proc.stdout  # both piped just above
        self._stdin, self._stdout = self._proc.stdin, self._proc.stdout
        self._buf = bytearray()
        self._dropped = 0
        self._eof = False
        self._cond = threading.Condition()
        threading.Thread(target=self._read, name="bash-tool-reader", daemon=True).start()

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None and not self._eof

    def _read(self) -> None:
        fd = self._stdout.fileno()
        while chunk := os.read(fd, 65536):
            with self._cond:
                self._buf += chunk
                if len(self._buf) > 4 * _KEEP_BYTES:
                    drop = len(self._buf) - 2 * _KEEP_BYTES
                    del self._buf[_KEEP_BYTES:_KEEP_BYTES + drop]
                    self._dropped += drop
                self._cond.notify_all()
        self._stdout.close()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def run(self, command: str, timeout: float) -> str:
        with open(self._script, "w", encoding="utf-8") as f:
            f.write(command + "\n")
        with self._cond:
            self._buf.clear()  # whatever background jobs printed since the last command
            self._dropped = 0
        self._stdin.write(f"source {shlex.quote(self._script)} </dev/null\n{self._done_line}".encode())
        self._stdin.flush()

        deadline = time.monotonic() + timeout
        with self._cond:
            while not (done := self._done.search(self._buf)) and not self._eof:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            # Copy out before deleting: a match object views the bytearray it was found in.
            raw = bytes(self._buf[:done.start()] if done else self._buf)
            status = int(done.group(1)) if done else None
            del self._buf[:done.end() if done else len(self._buf)]
            dropped = self._dropped
        text = truncate(raw.decode("utf-8", "replace"), already_cut=dropped).rstrip("\n")
        text = text or "(no output)"

        if done:
            return f"{text}\n[exit status {status}]"
        where = f" in {self.cwd}" if self.cwd else ""
        exited = self._eof  # read before close(): killing the shell makes the reader see EOF too
        self.close()
        if exited:
            return (f"{text}\n[the shell exited with status {self._proc.returncode}; "
                    f"the next command starts a new shell{where}]")
        return (f"{text}\n[timed out after {timeout:g} s: the command was killed and the shell restarted{where}; "
                "variables and the working directory are reset]")

    def close(self) -> None:
        if self._stdin.closed:
            return
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._proc.wait()
        self._stdin.close()
        try:
            os.unlink(self._script)
        except FileNotFoundError:
            pass


_session: Session | None = None
_cwd: str | None = None


def reset(cwd: str | None = None) -> None:
    """Kill the current shell; the next command starts a fresh one in `cwd`."""
    global _cwd
    close()
    _cwd = cwd


def close() -> None:
    global _session
    if _session is not None:
        _session.close()
        _session = None


atexit.register(close)


def run(tool_input: dict) -> str:
    global _session
    try:
        command = tool_input.get("command")
        if not isinstance(command, str) or not command.strip():
            return "Error: `command` must be a non-empty string."
        timeout = tool_input.get("timeout") or DEFAULT_TIMEOUT_S
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            return "Error: `timeout` must be a positive number of seconds."
        if _session is None or not _session.alive:
            close()
            _session = Session(_cwd)
        result = _session.run(command, min(timeout, MAX_TIMEOUT_S))
        if not _session.alive:
            _session = None
        return result
    except Exception as e:  # the loop must go on; the model reads what went wrong
        return f"Error: {type(e).__name__}: {e}"
