"""The robot simulator: real MuJoCo physics behind the command API, and its verifiers.

Commands move the end effector, the gripper grasps by friction, each task's verifier
tells success from the wrong object, refused commands are clear messages, and a seed
fixes the scene.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("mujoco")

from tackroom.suites.robot.plans import plan  # noqa: E402
from tackroom.suites.robot.sim import TASK_IDS, CommandError, RobotSim  # noqa: E402


def fresh(task: str, seed: int = 0) -> RobotSim:
    sim = RobotSim()
    sim.reset(task, seed)
    return sim


def run(sim: RobotSim, commands: list[dict]) -> list[dict]:
    return [sim.command(c) for c in commands]


def pos(sim: RobotSim, name: str) -> list[float]:
    return sim.state()["objects"][name]["pos"]


def test_move_ee_moves_the_end_effector_through_physics():
    sim = fresh("reach", 3)
    v0, t0 = sim.state()["version"], sim.state()["time"]
    r = sim.command({"op": "move_ee", "x": 0.2, "y": 0.1, "z": 0.12})
    s = sim.state()
    assert r["ok"] and r["reached"] and r["steps"] > 100
    assert math.dist(s["ee"]["pos"], [0.2, 0.1, 0.12]) < 0.005
    assert s["time"] > t0 + 0.2 and s["version"] > v0
    # The same API in its other spelling (as the HTTP interface documents it).
    sim.command({"op": "move_ee", "pos": [-0.1, -0.1, 0.3]})
    assert math.dist(sim.state()["ee"]["pos"], [-0.1, -0.1, 0.3]) < 0.005
    # A joint move: the wrist turns, x slides.
    sim.command({"op": "move_joint", "joint": "wrist", "angle": 1.0})
    sim.command({"op": "move_joint", "joint": "x", "angle": 0.3})
    joints = {j["name"]: j["value"] for j in sim.state()["joints"]}
    assert abs(joints["wrist"] - 1.0) < 0.03 and abs(joints["x"] - 0.3) < 0.005


def test_gripper_grasps_lifts_and_releases_a_block():
    sim = fresh("pick-place", 0)
    target = sim.scene_plan.target
    x, y, z = pos(sim, target)
    run(sim, [{"op": "move_ee", "x": x, "y": y, "z": 0.15}, {"op": "move_ee", "x": x, "y": y, "z": 0.02}])
    r = sim.command({"op": "gripper", "action": "close"})
    assert r["holding"] == target and 0.03 < r["opening"] < 0.06  # closed on a 4 cm block
    sim.command({"op": "move_ee", "x": x, "y": y, "z": 0.2})
    assert pos(sim, target)[2] > 0.17  # lifted with the hand, by friction alone
    assert sim.state()["gripper"]["holding"] == target
    sim.command({"op": "gripper", "action": "open"})
    sim.command({"op": "step", "n": 300})
    assert pos(sim, target)[2] < 0.03 and sim.state()["gripper"]["holding"] is None  # fell back


def test_closed_hand_is_stopped_by_a_block():
    sim = fresh("push", 1)
    x, y, _ = pos(sim, sim.scene_plan.target)
    run(sim, [{"op": "gripper", "action": "close"}, {"op": "move_ee", "x": x, "y": y, "z": 0.2}])
    r = sim.command({"op": "move_ee", "x": x, "y": y, "z": 0.02})
    assert not r["reached"] and "in the way" in r["note"] and r["ee"][2] > 0.05


@pytest.mark.parametrize("task", TASK_IDS)
def test_each_plan_succeeds_and_verifies(task):
    for seed in (0, 1):
        sim = fresh(task, seed)
        assert sim.verify()[0] is False  # nothing is solved at the start
        run(sim, plan(task, sim.state(), sim.instruction))
        assert sim.verify() == (True, None), (task, seed)


def _other(sim: RobotSim, kind: str) -> str:
    return next(n for n, o in sim.state()["objects"].items()
                if o["kind"] == kind and n != sim.scene_plan.target)


def _wrong_instruction(sim: RobotSim, kind: str) -> str:
    """The instruction, naming another object of the same kind."""
    other = _other(sim, kind)
    return sim.instruction.replace(sim.scene_plan.target.split("_")[0], other.split("_")[0])


@pytest.mark.parametrize("task,kind", [("reach", "marker"), ("pick-place", "block"),
                                       ("push", "block"), ("open-drawer", "drawer")])
def test_acting_on_the_wrong_object_is_detected(task, kind):
    sim = fresh(task, 2)
    run(sim, plan(task, sim.state(), _wrong_instruction(sim, kind)))
    assert sim.verify() == (False, "wrong_object")


def test_other_failure_modes():
    sim = fresh("pick-place", 4)
    assert sim.verify() == (False, "not_in_zone")
    steps = plan("pick-place", sim.state(), sim.instruction)
    run(sim, steps[:7])  # carried to the zone and lowered, not let go
    assert sim.verify() == (False, "not_released")
    sim = fresh("open-drawer", 0)
    assert sim.verify() == (False, "not_open")
    sim = fresh("reach", 0)
    assert sim.verify() == (False, "not_reached")
    # Pushing a block off the table's edge drops it to the floor.
    sim = fresh("push", 0)
    x, y, _ = pos(sim, sim.scene_plan.target)
    run(sim, [{"op": "gripper", "action": "close"}, {"op": "move_ee", "x": x - 0.09, "y": y, "z": 0.2},
              {"op": "move_ee", "x": x - 0.09, "y": y, "z": 0.03},
              {"op": "move_ee", "x": 0.45, "y": y, "z": 0.03}, {"op": "step", "n": 400}])
    assert pos(sim, sim.scene_plan.target)[2] < -0.5  # on the floor
    assert sim.verify() == (False, "dropped")


@pytest.mark.parametrize("cmd,message", [
    ({"op": "fly"}, "unknown command op 'fly'; commands: move_ee, move_joint"),
    ({"x": 1}, "unknown command op None"),
    ({"op": "move_ee", "x": 0.1, "y": 0.0}, "move_ee: missing 'z'"),
    ({"op": "move_ee", "x": "left", "y": 0.0, "z": 0.1}, "'x' must be a finite number"),
    ({"op": "move_ee", "x": float("nan"), "y": 0.0, "z": 0.1}, "'x' must be a finite number"),
    ({"op": "move_ee", "x": 0.9, "y": 0.0, "z": 0.1}, "x = 0.9 is outside the reachable workspace"),
    ({"op": "move_ee", "pos": [0.1, 0.2]}, "pos must be a list of three finite numbers"),
    ({"op": "move_ee", "x": 0, "y": 0, "z": 0.1, "speed": 3}, "unexpected field(s) 'speed'"),
    ({"op": "move_joint", "joint": "elbow", "angle": 1}, "unknown joint 'elbow'; joints: x (m)"),
    ({"op": "move_joint", "joint": "wrist", "angle": 7}, "wrist = 7 rad is out of range"),
    ({"op": "gripper", "action": "squeeze"}, 'action must be "open" or "close"'),
    ({"op": "step", "n": 0}, "n must be an integer from 1 to 10000"),
    ({"op": "step", "n": 2.5}, "n must be an integer"),
    ({"op": "camera", "pos": [0, 0, 1], "target": [0, 0, 1]}, "pos and target must differ"),
])
def test_bad_commands_are_clear_errors(cmd, message):
    sim = fresh("reach")
    before = sim.state()
    with pytest.raises(CommandError) as e:
        sim.command(cmd)
    assert message in str(e.value)
    after = sim.state()
    assert after["ee"] == before["ee"] and after["time"] == before["time"]  # nothing moved


def test_bad_input_outside_commands():
    sim = RobotSim()
    with pytest.raises(CommandError, match="no scene yet"):
        sim.command({"op": "step", "n": 1})
    with pytest.raises(CommandError, match="unknown robot task 'fly'; tasks: robot/reach"):
        sim.reset("fly", 0)
    with pytest.raises(CommandError, match="unknown robot task 7"):
        sim.reset(7, 0)  # type: ignore[arg-type]
    with pytest.raises(CommandError, match="the seed must be an integer"):
        sim.reset("reach", "zero")  # type: ignore[arg-type]
    with pytest.raises(CommandError, match="a command is a JSON object"):
        fresh("reach").command(["move_ee"])  # type: ignore[arg-type]
    sim = fresh("reach")
    sim.command({"op": "done"})
    with pytest.raises(CommandError, match="the episode is over"):
        sim.command({"op": "move_ee", "x": 0, "y": 0, "z": 0.1})


def test_seeds_fix_the_scene_and_vary_it():
    a, b = fresh("pick-place", 7), fresh("pick-place", 7)
    cmds = plan("pick-place", a.state(), a.instruction)[:5]
    run(a, cmds)
    run(b, cmds)
    assert a.state() == b.state() and a.instruction == b.instruction
    scenes = {json.dumps(fresh("pick-place", s).state()["objects"], sort_keys=True)
              for s in range(6)}
    assert len(scenes) == 6
    targets = {fresh("push", s).scene_plan.target for s in range(10)}
    assert len(targets) >= 3  # the named colour varies with the seed
    counts = {len(fresh("reach", s).state()["objects"]) for s in range(10)}
    assert counts == {2, 3}  # so does the number of distractors


def test_state_and_scene_are_json_and_current():
    sim = fresh("open-drawer", 1)
    state, scene = sim.state(), sim.scene()
    json.dumps(state, allow_nan=False)
    json.dumps(scene, allow_nan=False)
    assert set(state) >= {"task", "time", "version", "ee", "gripper", "joints", "objects", "zones"}
    drawer = state["objects"][sim.scene_plan.target]
    assert drawer["kind"] == "drawer" and drawer["opening"] == 0.0
    types = {g["type"] for g in scene["geoms"]}
    assert {"box", "plane", "capsule"} <= types
    names = {g["name"]: g for g in scene["geoms"]}
    finger = names["finger_left"]["pos"]
    sim.command({"op": "move_ee", "x": 0.0, "y": -0.1, "z": 0.3})
    moved = {g["name"]: g for g in sim.scene()["geoms"]}
    assert moved["finger_left"]["pos"] != finger and sim.scene()["version"] > scene["version"]
    r = sim.command({"op": "camera", "pos": [1, 1, 1], "target": [0, 0, 0]})
    assert r["camera"]["pos"] == [1.0, 1.0, 1.0] and sim.scene()["camera"]["target"] == [0, 0, 0]


def test_raw_steps_advance_time():
    sim = fresh("reach")
    v = sim.version
    sim.step(50)
    assert abs(sim.state()["time"] - 0.1) < 1e-6 and sim.version == v + 1


_junk = st.one_of(st.none(), st.booleans(), st.integers(), st.just(10**400),
                  st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                  st.lists(st.floats(-2, 2) | st.just(10**400), max_size=4), st.dictionaries(st.text(max_size=4),
                                                                          st.integers(), max_size=2))
_commands = st.one_of(
    st.dictionaries(st.sampled_from(["op", "x", "y", "z", "pos", "joint", "angle", "action",
                                     "n", "target", "fovy", "speed", 3, None]), _junk, max_size=5),
    st.builds(lambda op, d: {"op": op, **d}, st.sampled_from(["move_ee", "move_joint", "gripper",
                                                              "step", "camera", "done"]),
              st.dictionaries(st.sampled_from(["x", "y", "z", "pos", "joint", "angle", "action",
                                               "n", "target", "fovy"]), _junk, max_size=4)),
    _junk,
)


@settings(max_examples=250, deadline=None, derandomize=True, database=None)
@given(cmds=st.lists(_commands, min_size=1, max_size=4))
def test_any_command_is_a_result_or_a_command_error(cmds):
    """Whatever a model or a client sends: a JSON-able result, or a CommandError message."""
    sim = _FUZZ_SIM
    sim.reset("pick-place", 0)
    for cmd in cmds:
        if isinstance(cmd, dict) and cmd.get("op") == "step" and isinstance(cmd.get("n"), int):
            cmd = {**cmd, "n": min(abs(cmd["n"]), 50) or 1}  # keep the run short
        try:
            out = sim.command(cmd)
        except CommandError as e:
            assert str(e) and "Traceback" not in str(e)
        else:
            assert out["ok"] is True
            json.dumps(out, allow_nan=False)
    json.dumps(sim.state(), allow_nan=False)


_FUZZ_SIM = RobotSim()
