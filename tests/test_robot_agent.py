"""The robot suite under an agent harness: mini-swe-agent, unmodified, drives the robot.

The CLI runs in the bubblewrap sandbox with only two things reachable: the model gateway
and the robot's HTTP command API (a :class:`RobotServer` on a Unix socket, relayed to the
sandbox's ``127.0.0.1:8765``); the simulator stays in tackroom's process and the task is
checked on its state after the CLI exits. The CLI is installed on first use into
``~/.cache/tackroom`` (a cache hit afterwards), as in ``tests/test_agents.py``.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("mujoco")

import tackroom  # noqa: E402
from tackroom.agents.install import ensure_installed  # noqa: E402
from tackroom.core.errors import HarnessError  # noqa: E402
from tackroom.harness.spec import load_harness, parse_harness  # noqa: E402
from tackroom.sandbox import sandbox_available  # noqa: E402
from tackroom.suites import get_suite  # noqa: E402
from tackroom.suites.robot.server import RobotServer  # noqa: E402
from tackroom.suites.robot.sim import RobotSim  # noqa: E402
from tackroom.testing import ScriptedOpenAIServer, tool_call  # noqa: E402

HARNESS = "robot-mini-swe-agent"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
needs_bwrap = pytest.mark.skipif(not sandbox_available(), reason="needs bubblewrap")


def _suite():
    return get_suite("robot", {"screenshots": False})


def _bash(command: str):
    return tool_call("bash", {"command": command})


def _marker(seed: int, target: bool = True) -> list[float]:
    sim = RobotSim()
    sim.reset("reach", seed)
    names = [n for n in sim.state()["objects"] if (n == sim.scene_plan.target) == target]
    return sim.state()["objects"][names[0]]["pos"]


# -- no CLI: the harness file and the API server --------------------------------------------
def test_only_a_harness_that_says_so_can_express_robot_tasks():
    task = _suite().task("robot/reach")
    assert load_harness(HARNESS).can_express(task.requires)
    assert not load_harness("mini-swe-agent").can_express(task.requires)  # not by default
    assert load_harness(HARNESS).agent["install"] == load_harness("mini-swe-agent").agent[
        "install"]  # the same install in the cache
    plan = tackroom.plan("terminal", tasks=["csv-column-sum"], harnesses=[HARNESS],
                         policies=["expert"], seeds=[0])
    assert [h.name for _, h in plan.grid.inexpressible] == [HARNESS]
    raw = {"name": "x", "agent": {**load_harness(HARNESS).agent, "can": ["robot", "fly"]}}
    with pytest.raises(HarnessError, match="names what an agent CLI cannot do"):
        parse_harness(raw)


def test_the_episode_server_refuses_reset_and_commands_past_its_limit(tmp_path):
    import http.client
    import socket

    sim = RobotSim()
    sim.reset("reach", 0)

    class Unix(http.client.HTTPConnection):
        def connect(self):
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.connect(str(tmp_path / "r.sock"))

    def post(path: str, body: dict) -> tuple[int, dict]:
        conn = Unix("localhost")
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, json.loads(r.read())

    with RobotServer(sim, unix_socket=tmp_path / "r.sock", allow_reset=False,
                     max_commands=2) as srv:
        assert srv.vendor is None  # no three.js needed to serve the API
        assert post("/api/reset", {"task": "robot/push", "seed": 1})[0] == 403
        assert post("/api/command", {"op": "step", "n": 1})[0] == 200
        status, body = post("/api/command", {"op": "move_ee", "x": 3.0, "y": 0, "z": 0.1})
        assert status == 400 and "workspace" in body["error"]
        assert post("/api/camera", {"pos": [1, 0, 1], "target": [0, 0, 0]})[0] == 200
        status, body = post("/api/command", {"op": "step", "n": 1})
        assert status == 400 and "command limit (2)" in body["error"]
        assert (srv.commands, srv.refused) == (2, 1)
    assert sim.task == "robot/reach" and not (tmp_path / "r.sock").exists()
    with RobotServer(sim) as tcp:  # the TCP server is as it was, reset included
        req = urllib.request.Request(f"{tcp.url}api/reset", json.dumps(
            {"task": "robot/reach", "seed": 1}).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200


# -- the CLI in the sandbox -----------------------------------------------------------------
@pytest.fixture(scope="module")
def installed() -> Path:
    return ensure_installed(load_harness(HARNESS).agent)


@needs_bwrap
@pytest.mark.slow
@pytest.mark.usefixtures("installed")
def test_the_expert_solves_every_task_through_the_cli(tmp_path):
    """The expert answers behind the gateway with mini-swe-agent's bash tool: the task's plan
    as ``./robot`` calls, then its submit; every task succeeds on the simulator's state."""
    run = tackroom.evaluate(_suite(), tasks=["@all"], harnesses=[HARNESS],
                            policies=["expert"], seeds=[0], concurrency=4,
                            store=tmp_path / "r.duckdb")
    episodes = run.load_episodes()
    assert sorted(ep.task for ep in episodes) == ["robot/open-drawer", "robot/pick-place",
                                                  "robot/push", "robot/reach"]
    for ep in episodes:
        assert ep.outcome.value == "success", (ep.task, ep.error, ep.meta.get("agent"))
        agent, verifier = ep.meta["agent"], ep.meta["verifier"]
        assert agent["exit"] == 0 and agent["calls"] == len(ep.turns) == 2, agent
        assert [t["function"]["name"] for t in agent["tools"]] == ["bash"]
        command = json.loads(ep.turns[0].tool_calls[0]["function"]["arguments"])["command"]
        assert "./robot move_ee" in command and "./robot done" in command
        assert verifier["done_sent"] and verifier["refused"] == 0 and verifier["commands"] >= 2
        # What the robot answered came back to the model through the CLI.
        answer = json.loads(ep.turns[1].messages[-1]["content"])
        assert answer["returncode"] == 0 and '"reached": true' in answer["output"]


@needs_bwrap
@pytest.mark.slow
@pytest.mark.usefixtures("installed")
def test_a_model_drives_the_robot_with_curl_and_reaches_nothing_else(tmp_path):
    """A scripted model behind the gateway: curl on $ROBOT_API and ./robot reach the robot;
    reset is refused, a bad command is the robot's message; the host's loopback (this
    model server) is not reachable from the sandbox."""
    x, y, z = _marker(0)
    replies: list = []
    with ScriptedOpenAIServer(lambda request: replies.pop(0) if replies else None) as srv:
        replies += [
            _bash("./robot state | grep -c \"orange_marker\"; head -1 API.md"),
            _bash(f"curl -s -m 3 http://127.0.0.1:{srv.port}/v1/models || echo HOST-BLOCKED"),
            _bash("curl -s -X POST $ROBOT_API/reset -d '{\"task\": \"robot/reach\", "
                  "\"seed\": 1}'"),
            _bash("./robot move_ee 3 0 0.1"),
            _bash(f"curl -s -X POST $ROBOT_API/command -d '{{\"op\": \"move_ee\", \"x\": {x},"
                  f" \"y\": {y}, \"z\": {z}}}'"),
            _bash("./robot done"),
            _bash(SUBMIT),
        ]
        run = tackroom.evaluate(_suite(), tasks=["reach"], harnesses=[HARNESS],
                                policies=["openai:scripted-model"], base_url=srv.base_url,
                                seeds=[0], store=tmp_path / "r.duckdb")
        chat = [r for r in srv.requests if "messages" in r]
    [ep] = run.load_episodes()
    assert ep.outcome.value == "success", (ep.error, ep.meta.get("agent"))
    assert len(ep.turns) == len(chat) == 7
    outputs = [json.loads(t.messages[-1]["content"])["output"] for t in ep.turns[1:]]
    assert outputs[0] == "1\n# The robot's command API\n"  # the state has the marker
    assert "HOST-BLOCKED" in outputs[1]
    assert "reset is not available" in outputs[2]
    assert "robot: refused:" in outputs[3] and "workspace" in outputs[3]
    assert '"reached": true' in outputs[4]
    assert '"done": true' in outputs[5]
    # The task text told the CLI how to reach the robot (the harness's part, not the CLI's).
    assert "./robot move_ee X Y Z" in json.dumps(chat[0]["messages"])
    assert ep.meta["verifier"] | {"seconds": 0} == {
        "exit": 0, "timed_out": False, "commands": 3, "refused": 1, "done_sent": True,
        "seconds": 0, "output": "The agent sent done after 3 robot command(s) (1 refused)."}


@needs_bwrap
@pytest.mark.slow
@pytest.mark.usefixtures("installed")
def test_without_done_the_state_is_checked_as_the_cli_left_it(tmp_path):
    x, y, z = _marker(0, target=False)
    with ScriptedOpenAIServer([_bash(f"./robot move_ee {x} {y} {z}"), _bash(SUBMIT)]) as srv:
        run = tackroom.evaluate(_suite(), tasks=["reach"], harnesses=[HARNESS],
                                policies=["openai:scripted-model"], base_url=srv.base_url,
                                seeds=[0], store=tmp_path / "r.duckdb")
    [ep] = run.load_episodes()
    assert ep.outcome.value == "failure" and ep.failure_mode == "wrong_object", ep.error
    assert not ep.meta["verifier"]["done_sent"] and ep.meta["verifier"]["commands"] == 1
