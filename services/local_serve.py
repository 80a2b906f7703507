"""The local model's server: llama.cpp's own OpenAI-compatible HTTP server, from the xllamacpp wheel.

    HYPERAGENTS_LOCAL_MODEL_KEY=KEY python services/local_serve.py --model PATH --alias NAME --port N \
        --n_ctx N --threads N

xllamacpp runs llama.cpp's C++ server inside this process: /v1/models, /v1/chat/completions
with `response_format` (a JSON schema constrains decoding), on 127.0.0.1 only. Its wheel is
built for x86-64-v3 (AVX2, FMA, F16C), not for the CPU it was built on, so it runs on an
AVX-512 or AMX machine as on any other; `services.local_model.missing_cpu_features` says
beforehand when a CPU is older than that.

It answers only requests that carry the run's key (`Authorization: Bearer KEY`, a 401 otherwise): any
local user can reach 127.0.0.1, and the key comes in the environment variable KEY_ENV, which, unlike
the command line, other users cannot read in /proc.

A run killed with SIGKILL cannot stop its model server, which would keep its memory and
port forever; this process watches its parent and exits as soon as it changes. (The
kernel's parent-death signal cannot do it: it follows the thread that spawned the
server, and the gateway starts it from a request thread that ends at once.)
"""

import argparse
import os
import time

POLL_S = 1.0
KEY_ENV = "HYPERAGENTS_LOCAL_MODEL_KEY"  # the key requests must carry (services/local_model.py makes one per run)
# Host memory for the prompts of idle requests, so the next one that shares their beginning (the
# same instructions, the same problem) skips it; llama.cpp's default is 8 GiB, on a shared machine.
PROMPT_CACHE_MIB = 256


def serve(args: argparse.Namespace, key: str) -> object:
    """Load the model and start serving requests that carry `key`; the server answers until the returned
    object is dropped."""
    import xllamacpp

    params = xllamacpp.CommonParams()  # pyright: ignore[reportAttributeAccessIssue] - a compiled module, unread
    params.model.path = args.model
    params.model_alias = {args.alias}
    params.hostnames = ["127.0.0.1"]
    params.port = args.port
    params.n_ctx = args.n_ctx
    params.n_parallel = 1  # one request at a time gets the whole context (the gateway fits prompts to it)
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.cache_ram_mib = PROMPT_CACHE_MIB
    params.offline = True  # never a download
    params.ui = False
    params.endpoint_slots = False  # it would show other requests' prompts to any local process
    params.cors_origins = f"http://127.0.0.1:{args.port}"  # no web page's script may call it (the default is *)
    params.api_keys = [key]
    return xllamacpp.Server(params)  # pyright: ignore[reportAttributeAccessIssue] - a compiled module, unread


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the GGUF file")
    ap.add_argument("--alias", required=True, help="the model name requests use")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--n_ctx", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    args = ap.parse_args()
    key = os.environ.pop(KEY_ENV, "")
    if not key:
        ap.error(f"set {KEY_ENV}: the server answers only requests that carry a key")
    parent = os.getppid()
    server = serve(args, key)  # noqa: F841 (it serves for as long as it is referenced)
    while os.getppid() == parent:
        time.sleep(POLL_S)
    os._exit(0)


if __name__ == "__main__":
    main()
