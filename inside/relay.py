"""The sandbox's only way out: a TCP port on its own loopback, relayed to the gateway's Unix socket.

Runs inside the sandbox, stdlib only. It listens on 127.0.0.1:PORT in the sandbox's
network namespace, pipes every connection to the gateway's Unix socket (mounted in),
then runs the command and exits with its exit code. Unchanged litellm code reaches
the gateway with `api_base=http://127.0.0.1:PORT/v1`; there is no other route out,
and what the gateway accepts is decided by the gateway (session keys, models, budget).

    python relay.py --socket /run/gateway/gateway.sock --port 18080 -- CMD ARGS...

If the port is taken, another relay in the same namespace already serves it (one
container, several commands) and the command runs without a second one.

A trusted script of this folder run by this interpreter (`python .../worker.py ...`) runs
in this very process, as `python` would run it, instead of in a second interpreter started
for it: the relay holds no secret and only serves code of this sandbox, and a sandbox's
start is one interpreter's start-up shorter.
"""

import argparse
import os
import runpy
import signal
import socket
import subprocess
import sys
import threading


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _serve(client: socket.socket, socket_path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(socket_path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _accept(listener: socket.socket, socket_path: str) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=_serve, args=(client, socket_path), daemon=True).start()


HERE = os.path.dirname(os.path.realpath(__file__))


def own_script(command: list[str]) -> str | None:
    """The script of this folder that `command` runs with this interpreter and no options, or None."""
    if len(command) < 2 or not command[1].endswith(".py"):
        return None
    if os.path.realpath(command[0]) != os.path.realpath(sys.executable):
        return None
    return command[1] if os.path.dirname(os.path.realpath(command[1])) == HERE else None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", args.port))
        listener.listen(128)
        threading.Thread(target=_accept, args=(listener, args.socket), daemon=True).start()
    except OSError:
        listener.close()  # taken: a relay of this namespace already listens
    if not command:
        threading.Event().wait()
    script = own_script(command)
    if script:
        sys.argv = command[1:]  # sys.path[0] is this folder already, as `python script` makes it
        runpy.run_path(script, run_name="__main__")
        return 0
    child = subprocess.Popen(command)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    code = child.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
