"""A generation's meta agent: its parent's code checked out into a plain folder, the meta agent run on it in a
sandbox (through the gateway, with the train rows, the earlier generations' feedback and a command to try the task
agent), and the folder read back as data and committed (services/workspace.py).

What the sandbox may write goes to `untrusted/<node>/meta`; the log and the patch are written by the core, in
`nodes/<node>/`. A merge also mounts its second parent's code to read; the no_selfimprove baseline runs the
initial meta agent's code, whatever the workspace's says. A coding agent (`--meta_agent claude-code`, ...) runs
in its place, on the same workspace, inputs and limits (optimizer/agent_launch.py).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from archive.records import MetaResult
from archive.store import META_TRANSCRIPT, Archive, untrusted_dir
from optimizer import agent_launch
from optimizer.feedback import TRY_ROWS
from optimizer.meta_outcome import META_LOG, meta_log, meta_result
from services.config import Baseline
from services.fsutil import atomic_write_text, make_folder
from services.sandbox import Mount, Sandbox
from services.workspace import Quota, RunRepo, discard

if TYPE_CHECKING:
    from optimizer.context import RunContext
    from services.coding_agents.base import CodingAgent

FEEDBACK = "/feedback"  # earlier generations' train results, read-only inside
DATA = "/data"  # train rows with labels, read-only inside
NODE_OUT = "/out/node"  # the node's sandbox output folder (transcript), writable inside
FROZEN_META = "/opt/frozen_meta"  # baseline no_selfimprove: the initial agent code the meta agent runs from
OTHER_PARENT = "/other_parent"  # a merge's second parent's code, read-only inside


class MetaStep:
    """Runs a generation's meta agent on its parent's code; the result, committed or not, is a MetaResult."""

    def __init__(self, ctx: RunContext, archive: Archive, repo: RunRepo) -> None:
        self.ctx, self.archive, self.repo = ctx, archive, repo
        loop = ctx.loop
        self.quota = Quota(int(loop.workspace_file_mb * 2**20), int(loop.workspace_total_mb * 2**20))

    def run(self, node_id: str, parent_commit: str, generation: int, meta_model: str,
            other: str | None = None) -> MetaResult:
        ctx, records = self.ctx, self.archive.node_dir(node_id)
        workspace = self.repo.checkout(parent_commit, ctx.workspaces / node_id)
        extra = self._beside(node_id, other)  # read-only checkouts beside the workspace, removed after the run
        agent, spec = ctx.coding_agent, ctx.workspaces / f"{node_id}-agent"
        started = time.monotonic()
        try:
            box = ctx.sandboxes.open(workspace, self._mounts(node_id) + extra + (agent_launch.mounts(spec)
                                                                                   if agent else []))
            timeout_s = agent_launch.call_timeout(ctx.loop, ctx.config.gateway)
            if agent:
                agent_launch.write_spec(spec, agent, agent_launch.launch_of(box, meta_model, NODE_OUT,
                                                                            timeout_s=timeout_s))
            with box:
                env = self._env(box, node_id, meta_model)
                if agent:
                    argv = self._agent_argv(box, agent, generation, other)
                    env.update(agent_launch.environment(agent, agent_launch.launch_of(
                        box, meta_model, NODE_OUT, env["AGENT_GATEWAY_KEY"], timeout_s)))
                else:
                    argv = self._argv(box, generation, any(m.target == FROZEN_META for m in extra), meta_model)
                    argv += ["--other_parent", OTHER_PARENT, "--other_node", other] if other is not None else []
                result = box.run(argv, env, timeout=ctx.loop.meta_timeout_s)
        finally:
            for folder in [m.source for m in extra] + [spec]:
                discard(folder)
        atomic_write_text(records / META_LOG, meta_log(result.stdout, result.stderr))
        seconds = round(time.monotonic() - started, 3)
        try:
            capture = self.repo.capture(workspace, parent_commit, node_id, self.quota)
        finally:
            discard(workspace)
        atomic_write_text(records / "patch.diff", capture.patch)
        patch = {"files": capture.files, "insertions": capture.insertions, "deletions": capture.deletions,
                 "dropped": capture.dropped, "dropped_why": capture.dropped_why,
                 **({"bidi": capture.bidi} if capture.bidi else {})}  # shown as a warning (Trojan Source)
        # ProviderDown when the provider failed it: nothing is recorded, the generation is redone on resume.
        return meta_result(ctx.gateway, env["AGENT_GATEWAY_KEY"], result, capture.commit, patch, seconds,
                           ctx.loop.meta_failure)

    def _beside(self, node_id: str, other: str | None) -> list[Mount]:
        """The checkouts mounted read-only beside the workspace: under no_selfimprove the initial meta agent
        (its code and the shared agent/ it imports; it still edits the whole workspace), and a merge's second
        parent."""
        repo, workspaces, extra = self.repo, self.ctx.workspaces, []
        if self.ctx.loop.run_baseline == Baseline.NO_SELFIMPROVE:
            extra.append(Mount(repo.checkout(repo.node_commit("initial"), workspaces / f"{node_id}-frozen_meta"),
                               FROZEN_META))
        if other is not None:
            extra.append(Mount(repo.checkout(repo.node_commit(other), workspaces / f"{node_id}-other"), OTHER_PARENT))
        return extra

    def _argv(self, box: Sandbox, generation: int, frozen: bool, meta_model: str) -> list[str]:
        loop = self.ctx.loop
        argv = [box.python, box.trusted_script("run_meta.py"), "--repo", box.workdir, "--eval_path", FEEDBACK,
                "--iterations_left", str(loop.max_generation - generation), "--model", meta_model,
                "--transcript", f"{NODE_OUT}/{META_TRANSCRIPT}", "--max_tool_calls", str(loop.meta_max_calls)]
        if loop.try_command:
            argv += ["--try_command", f"python {box.trusted_script('try_agent.py')} --rows {TRY_ROWS}"]
        return argv + (["--agent_root", FROZEN_META] if frozen else [])

    def _agent_argv(self, box: Sandbox, agent: CodingAgent, generation: int, other: str | None) -> list[str]:
        """The launcher of a coding agent, with what the built-in meta agent's prompt says (a merge's second
        parent included)."""
        loop = self.ctx.loop
        variables = {"repo": box.workdir, "feedback": FEEDBACK, "data": DATA,
                     "iterations_left": str(loop.max_generation - generation),
                     "try_command": (f"python {box.trusted_script('try_agent.py')} --rows {TRY_ROWS}"
                                     if loop.try_command else "(no try command in this run)")}
        if other is not None:
            variables.update(other_parent=OTHER_PARENT, other_node=other)
        return agent_launch.argv(box, agent, f"{NODE_OUT}/{META_TRANSCRIPT}", NODE_OUT, loop.meta_max_calls,
                                 variables)

    def _mounts(self, node_id: str) -> list[Mount]:
        run_dir = self.ctx.run_dir
        feedback = run_dir / "feedback"
        make_folder(feedback)
        return [Mount(run_dir / "train_data", DATA), Mount(feedback, FEEDBACK),
                Mount(untrusted_dir(run_dir, node_id, "meta"), NODE_OUT, writable=True)]

    def _env(self, box: Sandbox, node_id: str, meta_model: str) -> dict:
        from domains.harness import worker_env

        ctx, gateway, loop = self.ctx, self.ctx.gateway, self.ctx.loop
        # Each key calls its role's model only, while `box` is open (services/gateway/sessions.py).
        meta_key = gateway.new_session(node_id, "meta", [meta_model], loop.meta_max_calls, box)
        # The try command's calls are the task agent's, made for the meta agent: booked apart, capped.
        try_key = gateway.new_session(node_id, "try", [ctx.task_model], loop.try_max_calls, box)
        env = worker_env(box, box.gateway_url or gateway.url, meta_key, (meta_model, ctx.task_model))
        env.update(TRY_GATEWAY_KEY=try_key, TRY_MODEL=ctx.task_model, WORKSPACE=box.workdir, PYTHONPATH=box.workdir)
        return env

