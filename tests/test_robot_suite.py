"""The robot suite end to end: experts through each harness, models' bad output, controllers.

Everything is real: MuJoCo physics, the runner and records through the CLI, an
OpenAI-compatible server on 127.0.0.1 for the model turns, the bubblewrap sandbox for
controller scripts and, where Chromium is installed, the browser for screenshots.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil

import pytest

pytest.importorskip("mujoco")

from conftest import run_cli  # noqa: E402

from tackroom.core.actions import Submit, action_from_dict  # noqa: E402
from tackroom.core.episode import Outcome  # noqa: E402
from tackroom.core.errors import ActionError, InfraError  # noqa: E402
from tackroom.core.observation import Observation  # noqa: E402
from tackroom.core.policy import PolicyResponse, Sampling, ToolCall  # noqa: E402
from tackroom.core.registry import get, has  # noqa: E402
from tackroom.harness.interfaces import Call, CallError  # noqa: E402
from tackroom.harness.robot import RobotCommand, RunController  # noqa: E402
from tackroom.harness.session import HarnessSession  # noqa: E402
from tackroom.harness.spec import load_harness  # noqa: E402
from tackroom.policies.openai_policy import OpenAIPolicy  # noqa: E402
from tackroom.runner.grid import plan_grid, run_cells  # noqa: E402
from tackroom.sandbox import sandbox_available  # noqa: E402
from tackroom.suites import get_suite  # noqa: E402
from tackroom.suites.robot.controller import run_controller  # noqa: E402
from tackroom.suites.robot.sim import RobotSim  # noqa: E402
from tackroom.testing import ScriptedOpenAIServer, text, tool_call  # noqa: E402

SUITE = get_suite("robot", {"screenshots": False})
needs_sandbox = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap cannot run here")
HAS_BROWSER = (has("renderer", "robot_screenshot") and shutil.which("chromium") is not None
               and shutil.which("chromedriver") is not None)


def _table(stdout: str) -> dict[tuple[str, str], tuple[int, int]]:
    """(task, harness) -> (successes, episodes) from the CLI's per-task table."""
    lines = stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("┃ task"))
    harnesses = [c.strip() for c in lines[head].strip("┃").split("┃")][1:]
    out = {}
    for ln in lines[head + 2:]:
        if not ln.startswith("│"):
            break
        cells = [c.strip() for c in ln.strip("│").split("│")]
        for h, cell in zip(harnesses, cells[1:], strict=True):
            k, n = map(int, re.search(r"\((\d+)/(\d+)\)", cell).groups())
            out[(cells[0], h)] = (k, n)
    return out


@needs_sandbox
def test_experts_succeed_through_every_harness_from_the_cli(tmp_path):
    harnesses = ["robot-state", "robot-code"] + (["robot-screenshot"] if HAS_BROWSER else [])
    proc = run_cli("eval", "--suite", "robot", "--harness", ",".join(harnesses),
                   "--policy", "expert", "--seeds", "0-9", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    table = _table(proc.stdout)
    assert {t for t, _ in table} == {"reach", "push", "pick-place", "open-drawer"}
    for (task, harness), (k, n) in table.items():
        assert n == 10 and k >= 9, (task, harness, k)
    assert "Success by harness × policy" in proc.stdout
    for h in harnesses:
        assert re.search(rf"│ {h}\s+│ expert\s+│", proc.stdout), h


def test_screenshot_harness_validates_once_its_renderer_exists():
    if not has("renderer", "robot_screenshot"):
        pytest.skip("the robot_screenshot renderer is not registered yet")
    spec = load_harness("robot-screenshot")
    assert spec.observation["renderer"] == "robot_screenshot"
    assert spec.interface.name == "robot_commands"


def test_web_harnesses_cannot_express_robot_tasks():
    task = SUITE.task("robot/pick-place")
    for name in ("som-tools", "terminal-bash"):
        assert not load_harness(name).interface.can_express(task.requires)
    for name in ("robot-state", "robot-code"):
        assert load_harness(name).interface.can_express(task.requires)


# -- models' output --------------------------------------------------------------------------
def _run_model(script, harness: str, task_id: str, seed: int = 0):
    task = SUITE.task(task_id)

    async def go():
        with ScriptedOpenAIServer(script) as srv:
            policy = OpenAIPolicy("scripted", base_url=srv.base_url, api_key="x",
                                  backoff_base=0.01, backoff_max=0.05)
            try:
                plan = plan_grid([task], [load_harness(harness)], [policy], [seed], Sampling())
                (ep,) = await run_cells(plan.cells, SUITE, "r", concurrency=1)
            finally:
                await policy.aclose()
            return ep, srv.requests

    return asyncio.run(go())


def _marker(seed: int = 0) -> list[float]:
    sim = RobotSim()
    sim.reset("reach", seed)
    return sim.state()["objects"][sim.scene_plan.target]["pos"]


def test_garbage_model_output_is_feedback_then_a_good_reply_succeeds():
    x, y, z = _marker()
    script = [
        text("I think I should move the arm somewhere."),
        tool_call("move_ee", '{"x": 0.1, "y": '),
        tool_call("fly", {"to": "moon"}),
        tool_call("move_ee", {"x": "left", "y": 0, "z": 0.1}),
        tool_call("step", {"n": 10}),  # a good one: the harness allows 5 errors in a row
        tool_call("move_ee", {"x": 3.0, "y": 0.0, "z": 0.1}),
        tool_call("gripper", {"action": "squeeze"}),
        tool_call("move_ee", {"x": x, "y": y, "z": z}),
        tool_call("done", {}),
    ]
    ep, requests = _run_model(script, "robot-state", "reach")
    assert ep.outcome is Outcome.SUCCESS and ep.n_turns == 9
    feedback = [t.feedback or "" for t in ep.turns[:7]]
    assert "no tool call found" in feedback[0]
    assert "not valid JSON" in feedback[1]
    assert "unknown action 'fly'" in feedback[2]
    assert "argument 'x' must be number" in feedback[3]
    assert feedback[4] == "" and ep.turns[4].actions == [
        {"kind": "robot_command", "op": "step", "args": {"n": 10}}]
    assert "outside the reachable workspace" in feedback[5]  # the simulator's own message
    assert 'must be "open" or "close"' in feedback[6]
    # The model saw the state as JSON, and the robot's tools.
    first = requests[0]
    shown = first["messages"][1]["content"]
    state = json.loads(shown[shown.index("{"):shown.rindex("}") + 1])
    sim = RobotSim()
    sim.reset("reach", 0)
    assert state["objects"] == sim.state()["objects"] and state["ee"] == sim.state()["ee"]
    assert {t["function"]["name"] for t in first["tools"]} == {
        "move_ee", "move_joint", "gripper", "step", "camera", "done"}


def test_wrong_object_from_a_model_is_its_failure_mode():
    sim = RobotSim()
    sim.reset("reach", 0)
    other = next(n for n in sim.state()["objects"] if n != sim.scene_plan.target)
    x, y, z = sim.state()["objects"][other]["pos"]
    ep, _ = _run_model([tool_call("move_ee", {"x": x, "y": y, "z": z}), tool_call("done", {})],
                       "robot-state", "reach")
    assert ep.outcome is Outcome.FAILURE and ep.failure_mode == "wrong_object"


@needs_sandbox
def test_code_harness_reads_one_python_block_and_runs_it():
    x, y, z = _marker()
    good = f"```python\nimport robot\nprint('moving')\nrobot.move_ee({x}, {y}, {z})\n```"
    script = [text("Here is my plan: move to the marker."),
              text("```python\nimport robot\n```\n```python\nrobot.done()\n```"),
              text("```bash\necho hi\n```"),
              text(good)]
    ep, requests = _run_model(script, "robot-code", "reach")
    assert ep.outcome is Outcome.SUCCESS and ep.n_turns == 4
    assert "no ```python block found" in ep.turns[0].feedback
    assert "2 ```python blocks" in ep.turns[1].feedback
    assert "must be Python" in ep.turns[2].feedback
    verifier = ep.meta["verifier"]
    assert verifier["exit"] == 0 and verifier["commands"] == 1
    assert "moving" in verifier["output"] and "exited with code 0" in verifier["output"]
    assert "robot.move_ee(x, y, z)" in requests[0]["messages"][0]["content"]  # the API


@needs_sandbox
def test_a_crashing_controller_is_a_failure_with_its_traceback():
    ep, _ = _run_model([text("```python\nimport robot\nrobot.move_ee(0, 0)\n```")],
                       "robot-code", "push")
    assert ep.outcome is Outcome.FAILURE and ep.failure_mode == "not_in_zone"
    out = ep.meta["verifier"]["output"]
    assert "TypeError" in out and "exited with code 1" in out


# -- controller scripts ----------------------------------------------------------------------
@needs_sandbox
def test_controller_limits_and_protocol():
    sim = RobotSim()
    sim.reset("reach", 1)
    r = run_controller(sim, "import robot\ntry:\n    robot.move_ee(5, 0, 0.1)\n"
                       "except robot.RobotError as e:\n    print('refused:', e)\n"
                       "print(robot.state()['ee'])\n")
    assert r.exit_code == 0 and r.commands == 1 and r.errors == 1
    assert "refused: move_ee: x = 5 is outside" in r.output and "'pos'" in r.output
    r = run_controller(sim, "import time\ntime.sleep(30)", timeout_s=1.5)
    assert r.stopped == "timeout" and "time limit" in r.summary()
    r = run_controller(sim, "import robot\nwhile True:\n    robot.step(1)\n", max_commands=20)
    assert r.stopped == "commands" and r.commands == 20
    r = run_controller(sim, "import os\nos.write(1, b'not json\\n')\n")
    assert r.stopped == "protocol"
    r = run_controller(sim, "import socket\nsocket.create_connection(('1.1.1.1', 80), 3)\n")
    assert r.exit_code == 1 and ("OSError" in r.output or "unreachable" in r.output)


# -- the environment and the harness parts ---------------------------------------------------
def test_env_refuses_bad_actions_and_ends_on_done():
    env = SUITE.make_env(SUITE.task("reach"))
    with pytest.raises(ActionError, match="before reset"):
        env.step(RobotCommand("step", {"n": 1}))
    obs = env.reset(3)
    assert obs.extra["state"]["task"] == "robot/reach" and obs.extra["commands"] == 0
    assert "screenshot" not in obs.extra and obs.text == "The robot is ready."
    with pytest.raises(ActionError, match="unknown command op 'jump'"):
        env.step(RobotCommand("jump"))
    with pytest.raises(ActionError, match="does not take 'shell' actions"):
        env.step(action_from_dict({"kind": "shell", "cmd": "ls"}))
    step = env.step(RobotCommand("move_ee", {"x": 0.0, "y": 0.0, "z": 0.2}))
    assert not step.terminated and step.observation.extra["commands"] == 1
    assert step.observation.text.startswith("Last command move_ee: ok; ee (0.000, 0.000, 0.200)")
    step = env.step(Submit())
    assert step.terminated and step.success is False
    assert step.info["failure_mode"] == "not_reached"
    with pytest.raises(ActionError, match="episode is over"):
        env.step(RobotCommand("done"))
    env.close()


@pytest.mark.skipif(not HAS_BROWSER, reason="no Chromium or no robot_screenshot renderer")
def test_env_screenshots_are_lazy_and_of_their_own_state():
    from tackroom.suites.robot.browser import Screenshotter

    with Screenshotter() as shooter:
        env = SUITE.make_env(SUITE.task("pick-place"), screenshotter=shooter)
        obs = env.reset(0)
        assert shooter.driver is None  # nothing rendered until asked
        png = obs.extra["screenshot"]()
        assert png.startswith(b"\x89PNG") and obs.extra["screenshot"]() is png  # cached
        unseen = env.step(RobotCommand("move_ee", {"x": 0.3, "y": 0.2, "z": 0.1})).observation
        nxt = env.step(RobotCommand("gripper", {"action": "close"})).observation
        with pytest.raises(InfraError, match="moved on"):  # never a picture of a later state
            unseen.extra["screenshot"]()
        assert obs.extra["screenshot"]() is png  # taken in time: kept
        assert nxt.extra["screenshot"]() != png


def test_interfaces_round_trip_the_expert_plan():
    commands, controller = get("interface", "robot_commands"), get("interface", "robot_controller")
    obs = Observation("x")
    cam = RobotCommand("camera", {"pos": [1.0, 0.0, 1.0], "target": [0.0, 0.0, 0.0]})
    (call,) = commands.express(cam, obs)
    assert commands.to_actions(call) == [cam]
    assert commands.express(RunController("import robot"), obs) is None
    assert controller.express(cam, obs) == []  # the script says it all
    with pytest.raises(CallError, match="the script is empty"):
        controller.to_actions(Call("run_controller", {"code": "  "}))
    with pytest.raises(CallError, match="missing argument 'z'"):
        commands.to_actions(Call("move_ee", {"x": 0, "y": 0}))
    act = RobotCommand("gripper", {"action": "open"})
    assert action_from_dict(act.to_dict()) == act
    parser = get("parser", "robot_script")
    reply = parser.encode([Call("run_controller", {"code": "import robot\n"})], controller)
    assert parser.parse(reply, controller) == [Call("run_controller", {"code": "import robot"})]
    tools = PolicyResponse(tool_calls=[ToolCall("c1", "run_controller", "{}")])
    with pytest.raises(Exception, match="tool calls are not read here"):
        parser.parse(tools, controller)


def test_expert_follows_its_plan_through_a_session():
    """The expert offers the rest of its plan; the command harness writes ≤ 5 calls of it."""
    task = SUITE.task("pick-place")
    env = SUITE.make_env(task)
    obs = env.reset(5)
    expert, state = SUITE.expert(task), {}
    session = HarnessSession(load_harness("robot-state"), obs.instruction)
    turns = 0
    while True:
        response = session.encode(expert(obs, state), obs)
        parsed = session.parse(response)
        assert parsed.error is None and 1 <= len(parsed.actions) <= 5
        turns += 1
        for a in parsed.actions:
            step = env.step(a)
            obs = step.observation
        if step.terminated:
            break
    assert step.success and turns == 2
    code = HarnessSession(load_harness("robot-code"), obs.instruction)
    obs = env.reset(5)
    (run,) = code.parse(code.encode(SUITE.expert(task)(obs, {}), obs)).actions
    assert isinstance(run, RunController) and run.code.count("robot.move_ee(") == 6
