"""The Ray executor on a real multi-node Ray cluster on this machine (ray.cluster_utils.Cluster):
a head with no CPU, where the controller runs, and two worker nodes of one CPU each, where
every sandbox runs in the node's own bwrap sandbox. Everything talks on 127.0.0.1.

    python -m pytest -q -m ray
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

# Before Ray is imported: its one-machine mode, every process of the cluster on the loopback only.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ray = pytest.importorskip("ray")

from services.config import Config  # noqa: E402
from services.sandbox import Mount, SandboxLost, open_sandbox  # noqa: E402
from services.sandbox.bwrap import bwrap_unavailable  # noqa: E402
from services.sandbox.ray_backend import connect, describe_cluster  # noqa: E402
from support.fake_openai import DEFAULT_REPLY  # noqa: E402
from support.little_servers import free_port  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.e2e,
              pytest.mark.skipif(bwrap_unavailable() is not None, reason="the worker nodes need bubblewrap")]

PROVIDER_KEY = "sk-provider-secret-0123456789"  # what conftest's gateway_factory gives the gateway


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    # Worker nodes are other machines, which never hold the controller's keys: started without them.
    keys = {k: os.environ.pop(k) for k in list(os.environ) if k.endswith("_API_KEY")}
    client_port = free_port()  # the head's Ray Client server, for ray:// addresses
    # That server forks a server process for each driver while gRPC threads run; with gRPC's fork
    # handlers on, the child sometimes dies at once (SIGSEGV, 4 first connections of 26 here), and the
    # driver learns it only after the channel timeout. A failure then costs minutes. It allows 30 s for
    # the process to start; under this suite's load (three files at once on two cores) 60. Head
    # settings, as the README tells users.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
    os.environ.setdefault("RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S", "60")
    try:
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "node_ip_address": "127.0.0.1",
                                                                "include_dashboard": False,
                                                                "ray_client_server_port": client_port})
        cluster.client_port = client_port
        for _ in range(2):
            cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
        cluster.wait_for_nodes()
    finally:
        os.environ.update(keys)
    ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def ray_config(cluster, **sandbox) -> Config:
    config = Config()
    config.sandbox.executor, config.sandbox.backend, config.sandbox.ray_address = "ray", "bwrap", cluster.address
    for key, value in sandbox.items():
        setattr(config.sandbox, key, value)
    return config


def test_plan_line_counts_the_nodes_sandboxes_run_on(cluster):
    line = describe_cluster(ray_config(cluster).sandbox)
    assert line == f"bwrap on each node; cluster at {cluster.address}: 2 nodes, 2 CPUs"


def test_a_command_runs_on_a_worker_node_and_its_files_come_back_as_data(cluster, tmp_path):
    config = ray_config(cluster, disk_mb=16)
    workspace, data, out = tmp_path / "ws", tmp_path / "data", tmp_path / "out"
    (workspace / "task_agent").mkdir(parents=True)
    (workspace / "task_agent" / "agent.py").write_text("ANSWER = 1\n")
    data.mkdir()
    (data / "rows.jsonl").write_text('{"q": 1}\n')
    out.mkdir()
    (out / "earlier.md").write_text("kept")
    script = """if True:
        import os, sys
        print(open('/data/rows.jsonl').read().strip(), os.getuid(), open('task_agent/agent.py').read().strip())
        open('task_agent/agent.py', 'w').write('ANSWER = 2\\n')
        os.makedirs('task_agent/new')
        open('task_agent/new/tool.py', 'w').write('print(1)\\n')
        open('/out/transcript.md', 'w').write('# chat\\n')
        os.symlink('/etc/passwd', 'task_agent/passwd')
        os.symlink('/etc', '/out/etc')
        os.mkfifo('task_agent/pipe')
        with open('task_agent/huge.bin', 'wb') as f:
            f.truncate(64 * 2**20)  # sparse: over the quota of what comes back, not of the disk
        print('done', file=sys.stderr)
    """
    mounts = [Mount(data, "/data"), Mount(out, "/out", writable=True)]
    with connect(config, None), open_sandbox(config.sandbox, workspace, mounts, None, "ray") as box:
        assert box.remote_backend == "bwrap" and box.node_id != ray.get_runtime_context().get_node_id()
        result = box.run([box.python, "-c", script], box.base_env(), timeout=60)
        assert result.ok, result.stderr
        assert result.stdout.split() == ['{"q":', "1}", "65534", "ANSWER", "=", "1"] and result.stderr == "done\n"
        # Taken back at once, as data: a link, a fifo and a file over the quota stay on the node.
        assert (workspace / "task_agent" / "agent.py").read_text() == "ANSWER = 2\n"
        assert (workspace / "task_agent" / "new" / "tool.py").read_text() == "print(1)\n"
        assert sorted(p.name for p in (workspace / "task_agent").iterdir()) == ["agent.py", "new"]
        assert box.dropped == {"task_agent/huge.bin": f"{64 * 2**20} bytes, over the quota of {16 * 2**20} "
                               "for one file", "task_agent/passwd": "a link", "task_agent/pipe":
                               "not a regular file"}
        assert sorted(p.name for p in out.iterdir()) == ["earlier.md", "transcript.md"]
        assert (out / "transcript.md").read_text() == "# chat\n" and not (out / "etc").is_symlink()
        assert (data / "rows.jsonl").read_text() == '{"q": 1}\n'  # a read-only mount is not written back
        # A command that streams: lines in, lines out, its stderr apart, its exit code.
        echo = box.popen([box.python, "-c", "import sys\nfor line in sys.stdin: print(line.upper(), end='', "
                          "flush=True)\nprint('bye', file=sys.stderr)\nsys.exit(3)"], box.base_env())
        for i in range(3):
            echo.stdin.write(f"row {i}\n")
            echo.stdin.flush()
            assert echo.stdout.readline(100) == f"ROW {i}\n"
        echo.stdin.close()
        assert echo.wait(30) == 3 and echo.stdout.read(10) == "" and echo.stderr.read() == "bye\n"
        os.unlink(workspace / "task_agent" / "agent.py")  # the host's copy is replaced by the pull at close
    assert (workspace / "task_agent" / "agent.py").read_text() == "ANSWER = 2\n"


SANDBOXED_CALL = """if True:
    import json, os, urllib.error, urllib.request
    import litellm
    url, key = os.environ["AGENT_GATEWAY_URL"], os.environ["AGENT_GATEWAY_KEY"]
    reply = litellm.completion(model="openai/openai/fake", api_base=url, api_key=key, num_retries=0,
                               messages=[{"role": "user", "content": "hello"}])
    request = urllib.request.Request(url + "/chat/completions", method="POST",
                                      data=json.dumps({"model": "openai/fake", "messages": []}).encode(),
                                      headers={"Authorization": "Bearer gw-not-a-key",
                                               "Content-Type": "application/json"})
    try:
        urllib.request.urlopen(request)
        wrong = None
    except urllib.error.HTTPError as e:
        wrong = [e.code, e.read().decode()]
    models = json.load(urllib.request.urlopen(urllib.request.Request(url + "/models",
                                                                     headers={"Authorization": f"Bearer {key}"})))
    print(json.dumps({"content": reply.choices[0].message.content, "reply": reply.model_dump(), "wrong": wrong,
                      "models": [m["id"] for m in models["data"]], "env": dict(os.environ)}))
"""


def test_sandboxed_calls_reach_the_controllers_gateway_through_ray(cluster, gateway_factory, fake_openai, tmp_path):
    gateway = gateway_factory()
    config = ray_config(cluster)
    key = gateway.new_session("node-7", "task", ["openai/fake"])
    (tmp_path / "ws").mkdir()
    with connect(config, gateway.unix_socket), \
            open_sandbox(config.sandbox, tmp_path / "ws", [], gateway.unix_socket, "ray") as box:
        env = {**box.base_env(), "AGENT_GATEWAY_URL": box.gateway_url, "AGENT_GATEWAY_KEY": key,
               "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        result = box.run([box.python, "-c", SANDBOXED_CALL], env, timeout=120)
        assert result.ok, result.stderr[-2000:]
        seen = json.loads(result.stdout)
        node_env = ray.get(ray.remote(num_cpus=0, scheduling_strategy=ray.util.scheduling_strategies
                                      .NodeAffinitySchedulingStrategy(box.node_id, soft=False))(
            lambda: dict(os.environ)).remote())
    assert seen["content"] == DEFAULT_REPLY and seen["models"] == ["openai/fake"]
    # The provider was called by the controller's gateway, with the provider key, and only there.
    chats = [r for r in fake_openai.requests if r["path"].endswith("/chat/completions")]
    assert len(chats) == 1 and chats[0]["headers"]["authorization"] == f"Bearer {PROVIDER_KEY}"
    assert PROVIDER_KEY not in result.stdout + result.stderr
    assert PROVIDER_KEY not in json.dumps(node_env) and "OPENAI_API_KEY" not in node_env
    # A key the gateway never made is refused by the gateway itself, and booked as refused.
    assert seen["wrong"][0] == 401 and "unknown gateway key" in seen["wrong"][1]
    calls = gateway.ledger.calls()
    assert [(c["node"], c["role"]) for c in calls if not c["error"]] == [("node-7", "task")]
    assert not any(c["error"] for c in calls)
    assert [(r["node"], r["role"], r["count"]) for r in gateway.ledger.refusals()] == [("unknown", "unknown", 1)]


def test_closing_a_sandbox_from_another_thread_ends_its_command_at_once(cluster, tmp_path):
    """Ctrl-C with generations in flight: close_all on the main thread, SandboxClosed in the slot's."""
    from services.sandbox import SandboxClosed, close_all

    config = ray_config(cluster)
    (tmp_path / "ws").mkdir()
    raised = []
    with connect(config, None), open_sandbox(config.sandbox, tmp_path / "ws", [], None, "ray") as box:
        def slot():
            try:
                box.run([box.python, "-c", "import time; time.sleep(120)"], box.base_env(), timeout=300)
            except SandboxClosed as e:
                raised.append((e, time.monotonic()))

        thread = threading.Thread(target=slot)
        thread.start()
        time.sleep(1.0)
        closed_at = time.monotonic()
        assert close_all() >= 1
        thread.join(30)
    assert raised and type(raised[0][0]) is SandboxClosed and raised[0][1] - closed_at < 10


def test_a_lost_worker_node_raises_sandbox_lost(cluster, tmp_path):
    config = ray_config(cluster)
    (tmp_path / "ws").mkdir()
    with connect(config, None), open_sandbox(config.sandbox, tmp_path / "ws", [], None, "ray") as box:
        sleeper = box.popen([box.python, "-c", "import time; print('up', flush=True); time.sleep(120)"],
                            box.base_env())
        assert sleeper.stdout.readline() == "up\n"
        node = next(n for n in cluster.worker_nodes if n.node_id == box.node_id)
        started = time.monotonic()
        cluster.remove_node(node)
        assert sleeper.stdout.read(100) == "" and sleeper.poll() is not None  # as if killed here
        with pytest.raises(SandboxLost, match="is gone"):
            box.run([box.python, "-c", "print(1)"], box.base_env())
        with pytest.raises(SandboxLost):
            box.popen([box.python, "-c", "print(1)"], box.base_env())
        assert time.monotonic() - started < 30


def add_worker(cluster) -> None:
    """One more 1-CPU worker node, started without the controller's keys, as a machine of its own would be."""
    keys = {k: os.environ.pop(k) for k in list(os.environ) if k.endswith("_API_KEY")}
    try:
        cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
        cluster.wait_for_nodes()
    finally:
        os.environ.update(keys)


def sandbox_hosts() -> int:
    """How many sandbox host actors the cluster has ever had, alive or not."""
    from ray._private import state

    return sum(info.get("ActorClassName", "").endswith("SandboxHost") for info in state.actors().values())


def busiest(cluster):
    """The worker node that hosts the most sandboxes now (Ray's table of live actors)."""
    from collections import Counter

    from ray._private import state

    hosts = Counter(info["Address"]["NodeID"] for info in state.actors(actor_state_name="ALIVE").values()
                    if info.get("ActorClassName", "").endswith("SandboxHost"))
    assert hosts, "no sandbox of the run is alive on the cluster"
    return max(cluster.worker_nodes, key=lambda n: hosts.get(n.node_id, 0))


def test_a_loop_on_the_cluster_loses_a_node_and_ends_as_a_local_run_with_the_same_seed(cluster, fake_openai,
                                                                                         tmp_path):
    import subprocess
    import sys

    from support.cli import REPO_ROOT, cli_env
    from support.scripted_loop import IMPROVE, META_ONLY, events, loop_config, nodes, responder

    while len(cluster.worker_nodes) < 2:  # an earlier test removed one
        add_worker(cluster)
    # The Ray run's meta agent has a model name of its own, and its calls are held until the node is
    # gone: the loss then always cuts a sandbox of the run short, however loaded the machine is.
    answer, released, held = responder({3: [IMPROVE], 2: [META_ONLY]}, [], by_iterations_left=True), \
        threading.Event(), threading.Semaphore(0)

    def held_until_the_node_is_gone(request: dict) -> str:
        meta_agent = "/workspace" in " ".join(str(m["content"]) for m in request["messages"][:2])  # not preflight
        if request.get("model") == "fake-meta-ray" and meta_agent and not released.is_set():
            held.release()
            released.wait(300)
        return answer(request)

    fake_openai.set_responder(held_until_the_node_is_gone)
    fake_openai.latency = 0.2
    config = loop_config(tmp_path)
    common = ["--domain", "imo_grading", "--run_id", "run", "--task_model", "openai/fake", "--config", config,
              "--max_generation", "4", "--parallel", "2", "--seed", "7", "--parent_selection", "random",
              "--eval_samples", "10"]

    def start(name, *extra):
        return subprocess.Popen([sys.executable, "-m", "run_optimization", *common, "--output_dir",
                                 str(tmp_path / name), *extra], cwd=REPO_ROOT, env=cli_env(fake_openai),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    local = start("local", "--meta_model", "openai/fake-meta")
    on_ray = start("ray", "--meta_model", "openai/fake-meta-ray", "--executor", "ray", "--ray_address",
                   cluster.address)
    ray_run = tmp_path / "ray" / "run"
    try:
        # Once a meta agent of the run is waiting for its model on the cluster, the busiest worker node goes.
        deadline, waiting = time.time() + 400, False
        while not waiting and time.time() < deadline and on_ray.poll() is None:
            waiting = held.acquire(timeout=0.5)
        assert waiting, on_ray.stderr.read()[-3000:] if on_ray.poll() is not None else "no meta call came"
        cluster.remove_node(busiest(cluster))
        released.set()
        outputs = {name: proc.communicate(timeout=600) for name, proc in (("local", local), ("ray", on_ray))}
    finally:
        released.set()
        for proc in (local, on_ray):
            if proc.poll() is None:
                proc.kill()
    for name, proc in (("local", local), ("ray", on_ray)):
        assert proc.returncode == 0, outputs[name][1][-3000:]
    assert "running it again" in outputs["ray"][0]  # the lost node had a sandbox of the run

    def outcome(run_dir):
        starts = [(e["node_id"], e["parent"]) for e in events(run_dir) if e["event"] == "gen_start"]
        return dict(starts), {k: (v["status"], v["scores"]) for k, v in nodes(run_dir).items()}

    assert outcome(ray_run) == outcome(tmp_path / "local" / "run")
    assert set(nodes(ray_run)) == {"initial", "1", "2", "3", "4"}
    add_worker(cluster)  # for whatever runs after


def test_a_ray_client_address_runs_the_harness_on_the_cluster(cluster, fake_openai, tmp_path):
    """--ray_address ray://HOST:PORT: a driver elsewhere, through the head's Ray Client server."""
    import subprocess
    import sys

    from support.cli import REPO_ROOT, cli_env

    while len(cluster.worker_nodes) < 2:  # an earlier test removed one
        add_worker(cluster)
    port = cluster.client_port
    fake_openai.set_replies(['<json>{"response": "Partial"}</json>'])
    config = tmp_path / "ray.yaml"
    config.write_text(f"sandbox:\n  executor: ray\n  backend: bwrap\n  ray_address: ray://127.0.0.1:{port}\n")
    hosts_before = sandbox_hosts()
    harness = subprocess.Popen([sys.executable, "-m", "domains.harness", "--domain", "imo_grading", "--num_samples",
                                "4", "--num_workers", "2", "--model", "openai/fake", "--config", str(config),
                                "--output_dir", str(tmp_path / "out"), "--run_id", "r"], cwd=REPO_ROOT,
                               env=cli_env(fake_openai), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = harness.communicate(timeout=400)
    except subprocess.TimeoutExpired:
        harness.kill()
        pytest.fail("the harness did not end in 400 s:\n" + harness.communicate()[1][-3000:])
    assert harness.returncode == 0, stderr[-3000:]
    journal = tmp_path / "out" / "r" / "predictions.jsonl"
    rows = [json.loads(line) for line in journal.read_text().splitlines()]
    assert len(rows) == 4 and {row["prediction"] for row in rows} == {"partial"}
    assert fake_openai.count == 4  # every call went out through the controller's gateway
    assert sandbox_hosts() == hosts_before + 1  # the worker's sandbox was a host actor on the cluster
