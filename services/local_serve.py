"""llama-cpp-python's OpenAI-compatible server, ended when the process that started it is gone.

    python -m services.local_serve --model PATH ...   (the arguments of `python -m llama_cpp.server`)

A run killed with SIGKILL cannot stop its model server, which would keep its memory and
port forever; this wrapper watches its parent and exits as soon as it changes. (The
kernel's parent-death signal cannot do it: it follows the thread that spawned the
server, and the gateway starts it from a request thread that ends at once.)
"""

import os
import runpy
import threading
import time

POLL_S = 1.0


def _exit_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_S)
    os._exit(0)


def main() -> None:
    threading.Thread(target=_exit_when_orphaned, args=(os.getppid(),), daemon=True).start()
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
