"""Scripted experts for the robot tasks, acting through each harness's own interface.

An expert plans the task once from the first observation's state
(:func:`tackroom.suites.robot.plans.plan`) and then offers, at every turn, the rest of the
plan as :class:`RobotCommand` s followed by the whole plan as one controller script
(:class:`RunController`). Each harness writes what its interface can say: the command
harnesses (``robot_commands``) post the next commands as tool calls, as many as a turn
allows; the code harness (``robot_controller``) writes the script. How far the plan has
got is read from the observation (``extra["commands"]``: commands the environment has
executed), so a refused command is offered again.
"""

from __future__ import annotations

import json
from typing import Any

from tackroom.core.actions import Action
from tackroom.core.observation import Observation
from tackroom.harness.robot import RobotCommand, RunController
from tackroom.suites.robot.plans import plan


def script_of(commands: list[dict[str, Any]]) -> str:
    """A controller script that sends ``commands`` in order through the ``robot`` client."""
    lines = ["import robot", ""]
    for c in commands:
        args = {k: v for k, v in c.items() if k != "op"}
        op = c["op"]
        if op == "move_ee":
            lines.append(f"print(robot.move_ee({args['x']!r}, {args['y']!r}, {args['z']!r}))")
        elif op == "gripper":
            lines.append(f"print(robot.gripper({args['action']!r}))")
        elif op == "move_joint":
            lines.append(f"print(robot.move_joint({args['joint']!r}, {args['angle']!r}))")
        elif op == "step":
            lines.append(f"robot.step({args['n']!r})")
        elif op == "done":
            lines.append("robot.done()")
        else:  # pragma: no cover - plans use only the ops above
            lines.append(f"robot._call({json.dumps(c)})")
    return "\n".join(lines) + "\n"


class PlanExpert:
    """The plan of one task, replayed through whichever interface the harness has."""

    def __init__(self, task_key: str) -> None:
        self.task_key = task_key

    def __call__(self, obs: Observation, state: dict[str, Any]) -> list[Action]:
        x = obs.extra
        if "plan" not in state:
            state["plan"] = plan(self.task_key, x["state"], obs.instruction)
            state["start"] = int(x.get("commands", 0))
        commands: list[dict[str, Any]] = state["plan"]
        done = int(x.get("commands", 0)) - state["start"]
        rest: list[Action] = [RobotCommand(c["op"], {k: v for k, v in c.items() if k != "op"})
                              for c in commands[done:]]
        return [*rest, RunController(script_of(commands))]


__all__ = ["PlanExpert", "script_of"]
