"""The episode of an agent harness: a third-party CLI in the sandbox, its calls through the gateway.

One episode: the environment lays the task out; a route of the policy's model
gateway is opened (a token of its own; the scripted expert's replies when the
policy is ``expert``); the CLI runs in the task's sandbox
(:class:`~tackroom.core.actions.RunAgent`), reaching the gateway only through
its Unix socket and ``tackroom/gateway/forward.py``; then ``Submit`` runs the
task's verifier — always, however the CLI ended (Terminal-Bench's rule: the
tests run even when the agent stops on its budget or its time). Every model
call the CLI made is a turn of the episode.

Outcomes beyond the verifier's verdict:

* the CLI exited non-zero before its first model call: ``infra_error`` with
  its output (it crashed on start: not the model's failure);
* the backend failed under it (the gateway answered 5xx) and the task was not
  solved: ``infra_error``;
* the CLI ran out of time and the task was not solved: ``timeout``;
* the CLI used its turn budget (``[budget] turns`` model calls: the gateway
  refuses the call past it, whatever the CLI; a CLI's own step limit may stop
  it first) and the task was not solved: ``budget_exhausted``;
* the CLI never called the model: failure mode ``no_model_calls``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from tackroom.agents.experts import make_agent_expert
from tackroom.agents.install import ensure_installed, runtime_dir
from tackroom.core.actions import RunAgent, Submit
from tackroom.core.episode import Episode, Outcome
from tackroom.core.errors import ConfigError, InfraError
from tackroom.core.policy import Policy
from tackroom.core.task import Environment, Expert, call_env
from tackroom.gateway import ModelGateway, forward
from tackroom.gateway.calls import read_rules
from tackroom.harness.agent import fill, fill_command
from tackroom.images.agent_layer import AgentLayer, agent_layer

#: The port forward.py listens on inside the sandbox (its own network namespace).
SANDBOX_PORT = 4000
#: Where the CLI's home is inside the sandbox.
HOME = "/agent-home"
#: Seconds an agent episode may take beyond its CLI's own time (reset, verifier).
GRACE_S = 120.0
_FORWARD = str(Path(forward.__file__).resolve())


class Gateways:
    """One model gateway per policy of a run, on a Unix socket the sandboxes can reach."""

    def __init__(self) -> None:
        self._by_policy: dict[int, ModelGateway] = {}
        self._dir: Path | None = None
        self._lock = asyncio.Lock()

    async def get(self, policy: Policy) -> ModelGateway:
        async with self._lock:
            gw = self._by_policy.get(id(policy))
            if gw is None:
                if self._dir is None:  # short: a Unix socket path has at most 107 bytes
                    self._dir = Path(tempfile.mkdtemp(prefix="trk-gw-"))
                    os.chmod(self._dir, 0o755)  # the sandbox's own uid must reach it
                path = self._dir / f"{len(self._by_policy)}.sock"
                gw = ModelGateway(policy, unix_socket=path)
                await gw.start()
                # Any local process may connect; only an episode's token gets an answer.
                os.chmod(path, 0o777)
                self._by_policy[id(policy)] = gw
            return gw

    async def aclose(self) -> None:
        for gw in self._by_policy.values():
            with contextlib.suppress(Exception):
                await gw.aclose()
        self._by_policy.clear()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


async def agent_loop(spec: Any, env: Environment, ep: Episode, expert: Expert | None,
                     gateways: Gateways) -> None:
    """Run one agent-harness episode into ``ep`` (its turns, outcome, ``meta["agent"]``)."""
    agent = spec.harness.agent
    # On a built environment the CLI runs on its own runtime, an agent layer mounted over the
    # image or attached to its Docker container (tackroom/images/agent_layer.py); elsewhere
    # on this machine's, installed for it.
    layer: AgentLayer | None = None
    if getattr(env, "builds_image", False):
        layer = await asyncio.to_thread(agent_layer, agent)
        tool: Path | str = layer.tool
    else:
        tool = await asyncio.to_thread(ensure_installed, agent)
    obs = await call_env(env, env.reset, spec.seed)
    ep.instruction = obs.instruction
    route_policy = None
    if spec.policy.id == "expert":
        if expert is None:
            raise ConfigError(f"task {spec.task.key} has no expert", "--policy expert",
                              "evaluate this task with a model")
        route_policy = make_agent_expert(expert(obs, {}), agent["expert"] or "shell-tool",
                                         agent["expert_submit"], agent["expert_fence"])
    gateway = await gateways.get(spec.policy)
    # The turn budget, enforced at the gateway whatever the CLI: the call past it is refused.
    turns = int(spec.harness.budget["turns"])
    route = gateway.open_episode(spec.sampling, label=ep.episode_id, policy=route_policy,
                                 max_turns=turns, side_calls=read_rules(
                                     agent.get("side_calls"),
                                     f"{spec.harness.name} [agent] side_calls"))
    try:
        sandboxed = not getattr(env, "unsafe_local", False)
        base_url = f"http://127.0.0.1:{SANDBOX_PORT}/v1" if sandboxed else gateway.base_url
        workdir = str((obs.extra or {}).get("workdir") or "/task")
        values = {"instruction": obs.instruction, "model": agent["model"],
                  "base_url": base_url, "origin": base_url.removesuffix("/v1"),
                  "api_key": route.token, "tool": str(tool),
                  "workdir": workdir, "home": HOME,
                  "turns": str(turns)}
        argv = fill_command(agent["command"], values, _task_files(obs))
        if layer is not None:
            argv, ro_binds = layer.command(argv, str(gateway.unix_socket), _FORWARD,
                                           SANDBOX_PORT)
        else:
            ro_binds = {str(tool): str(tool)}
            if (runtime := runtime_dir(Path(tool))) is not None:  # e.g. a pyenv Python 3.12
                ro_binds[runtime] = runtime
        if sandboxed and layer is None:  # its own network: relay its loopback to the socket
            socket = str(gateway.unix_socket)
            argv = ["python3", _FORWARD, "--port", str(SANDBOX_PORT), "--socket", socket,
                    "--", *argv]
            ro_binds |= {_FORWARD: _FORWARD, str(Path(socket).parent): str(Path(socket).parent)}
        env_vars = {"OPENAI_BASE_URL": base_url, "OPENAI_API_BASE": base_url,
                    "OPENAI_API_KEY": route.token, "OPENAI_MODEL": agent["model"],
                    **{k: fill(v, values) for k, v in agent["env"].items()}}
        action = RunAgent(argv=tuple(argv), env=env_vars, ro_binds=ro_binds, home=HOME,
                          files={k: fill(v, values) for k, v in agent["files"].items()},
                          timeout_s=float(spec.harness.budget["wall_seconds"]) or 600.0,
                          memory_mb=agent["memory_mb"], processes=agent["processes"])
        started = time.time()
        ran = await call_env(env, env.step, action)
        info = ran.info.get("agent", {})
        # Start-up: from the sandbox's start to the CLI's first model call.
        startup = None if route.first_call_at is None else round(route.first_call_at - started, 3)
        ep.meta["agent"] = {**info, "cli": agent["cli"], "version": agent["version"],
                            "calls": len(route.turns), "startup_s": startup,
                            "backend_errors": route.errors, "refused_calls": route.refused,
                            "unanswered_calls": route.unanswered,
                            # Calls that were not agent turns: labelled turns, token counts.
                            "agent_turns": route.agent_turns, "side_calls": route.side_calls}
        # The CLI's tools, which no harness file holds: training on these records needs them.
        distinct = {json.dumps(t, sort_keys=True) for t in route.tools}
        ep.meta["agent"]["tools"] = route.tools[0] if route.tools else None
        if len(distinct) > 1:
            ep.meta["agent"]["tools_per_call"] = route.tools
        final = await call_env(env, env.step, Submit())
    finally:
        gateway.close_episode(route.token)
    for i, turn in enumerate(route.turns):
        turn.index = i
    ep.turns = list(route.turns)
    if "verifier" in final.info:
        ep.meta["verifier"] = final.info["verifier"]
    ep.reward = final.reward
    if final.success:
        ep.outcome = Outcome.SUCCESS
        return
    if (missing := route.missing_api(f"the {agent['cli']} CLI")) and not route.turns:
        # It needed an API the gateway does not speak: that, not the harness file, is the cause.
        raise InfraError(missing, "gateway", "use a CLI (or CLI setting) whose API the gateway "
                         "answers (docs/agents.md, dialects), or add a dialect for this one")
    if any(e.get("kind") in _CONFIG_ERRORS for e in route.errors):
        # The harness's own setup failed the call (its expert format cannot answer this CLI):
        # re-running it as it is would fail the same way, so no --resume here.
        raise InfraError(f"the {agent['cli']} CLI's calls could not be answered: "
                         f"{route.errors[-1].get('message', '')[:300]}", spec.harness.name,
                         "fix the harness's [agent] table (its expert format, command or "
                         "settings), then run it again")
    if not route.turns and info.get("exit") not in (0, None):
        raise InfraError(f"the {agent['cli']} CLI exited {info.get('exit')} before its first "
                         f"model call: {_tail(info.get('output', ''))}", spec.harness.name,
                         "check the harness's [agent] command and environment")
    if any(e.get("status", 0) >= 500 for e in route.errors):
        raise InfraError(f"the model backend failed under {agent['cli']}: "
                         f"{route.errors[-1].get('message', '')[:300]}", spec.policy.id,
                         "check the model server; --resume retries the episode")
    if info.get("timed_out"):
        ep.outcome, ep.error = Outcome.TIMEOUT, f"{agent['cli']} ran out of time"
        return
    if route.refused or route.agent_turns >= turns:
        # It used every call of its budget: the gateway refused it more, or the CLI's own
        # step limit (given as {turns}) stopped it. The verifier has run all the same.
        ep.outcome = Outcome.BUDGET_EXHAUSTED
        ep.error = f"turn budget of {turns} model call(s) used"
        return
    ep.outcome = Outcome.FAILURE
    ep.error = missing  # a call the gateway could not answer may be why, even after turns
    ep.failure_mode = final.info.get("failure_mode") or (
        "no_model_calls" if not route.turns else None)


#: Error kinds (recorded per failed call) whose cause is the harness's configuration.
_CONFIG_ERRORS = ("ConfigError", "HarnessError")


def _task_files(obs: Any, limit: int = 200) -> list[str]:
    """The task's files (relative paths) as its first observation lists them."""
    files = (obs.extra or {}).get("files") or []
    names = sorted(files) if isinstance(files, dict) else [str(f) for f in files]
    return [n for n in names if not n.startswith(".")][:limit]


def _tail(text: str, n: int = 400) -> str:
    return " ".join(str(text).split())[-n:] or "(no output)"
