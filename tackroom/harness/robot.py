"""Harness parts for the robot suite: its actions, a state renderer, two interfaces, a parser.

* ``robot_commands`` (with the ``tool_calls`` parser): the robot's HTTP command API as
  tools — ``move_ee(x, y, z)``, ``move_joint(joint, angle)``, ``gripper(action)``,
  ``step(n)``, ``camera(...)``, ``done()`` — each one :class:`RobotCommand`.
* ``robot_controller`` + ``robot_script``: the model writes one ```` ```python ````
  controller script, run once against the robot's API (:class:`RunController`).
* ``robot_state``: the observation as the simulator state in JSON (object poses, the
  zone, drawers), after the last command's result.

The actions live here, beside the interfaces that make them (as ``TypeKeys`` does in
:mod:`tackroom.harness.shell`), so that nothing here imports the simulator.
Experts plan :class:`RobotCommand` sequences and give the same plan as a script
(:class:`RunController`) after it; each interface writes the one it can say (see
:meth:`RobotControllerInterface.express`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tackroom.core.actions import Action
from tackroom.core.observation import Observation
from tackroom.core.policy import PolicyResponse
from tackroom.core.registry import register
from tackroom.harness.coding import fenced_blocks
from tackroom.harness.interfaces import ActionInterface, ActionSpec, Call, CallError, Param
from tackroom.harness.parsers import OutputParser, ParseError

#: The longest controller script accepted (characters).
MAX_SCRIPT = 50_000


# Records store actions as dicts; ``action_from_dict`` finds these kinds in the registry.
@register("action", "robot_command")
@dataclass(frozen=True)
class RobotCommand(Action):
    """One command of the robot's API: ``op`` (``move_ee``, ``gripper``, …) and its fields."""

    op: str
    args: dict[str, Any] = field(default_factory=dict)
    kind: ClassVar[str] = "robot_command"

    def command(self) -> dict[str, Any]:
        """The JSON command the simulator (and the HTTP API) takes."""
        return {"op": self.op, **self.args}

    def __hash__(self) -> int:  # ``args`` is a dict: hash its JSON form
        return hash((self.op, json.dumps(self.args, sort_keys=True, default=str)))


@register("action", "run_controller")
@dataclass(frozen=True)
class RunController(Action):
    """Run ``code``, a Python controller script, once against the robot's API; then verify."""

    code: str
    kind: ClassVar[str] = "run_controller"


# -- renderer --------------------------------------------------------------------------------
def _compact(state: dict[str, Any]) -> str:
    """The state as JSON, one object per line: short, and still easy to scan."""
    lines = ["{"]
    keys = [k for k in ("task", "time", "ee", "gripper", "joints") if k in state]
    for k in keys:
        lines.append(f'  "{k}": {json.dumps(state[k])},')
    for group in ("objects", "zones"):
        items = state.get(group) or {}
        comma = "," if group == "objects" else ""
        if not items:
            lines.append(f'  "{group}": {{}}{comma}')
            continue
        lines.append(f'  "{group}": {{')
        lines.append(",\n".join(f'    "{n}": {json.dumps(v)}' for n, v in items.items()))
        lines.append("  }" + comma)
    lines.append("}")
    return "\n".join(line for line in lines if line)


@register("renderer", "robot_state")
def render_robot_state(obs: Observation, options: dict[str, Any]) -> str:
    """The status line (the last command's result), then the simulator state as JSON.

    Options: ``state = false`` leaves the JSON out (status only); ``max_chars`` cuts.
    """
    parts = []
    if obs.text:
        parts.append(obs.text)
    state = obs.extra.get("state")
    if options.get("state", True) and isinstance(state, dict):
        parts.append("State (metres, world frame, z up; quaternions [w, x, y, z]):\n"
                     + _compact(state))
    text = "\n\n".join(parts)
    limit = int(options.get("max_chars", 0) or 0)
    if limit and len(text) > limit:
        text = text[:limit] + f"\n… ({len(text) - limit} characters cut)"
    return text


# -- interfaces ------------------------------------------------------------------------------
_NUM = "number"


class RobotCommandInterface(ActionInterface):
    """The robot's command API as actions; each call is one :class:`RobotCommand`."""

    name = "robot_commands"
    supports = frozenset({"robot"})
    specs = (
        ActionSpec("move_ee", "Move the end effector (the point between the fingertips) in a "
                   "straight line to (x, y, z), in metres; answers where it stopped.",
                   (Param("x", _NUM, "x in metres, -0.45 to 0.45"),
                    Param("y", _NUM, "y in metres, -0.35 to 0.35"),
                    Param("z", _NUM, "height above the table in metres, 0.015 to 0.4"))),
        ActionSpec("move_joint", "Move one joint to a position: x, y, z (metres) or wrist "
                   "(radians, about the vertical).",
                   (Param("joint", "string", "x, y, z or wrist"),
                    Param("angle", _NUM, "the joint's target (metres for x, y, z; radians "
                          "for wrist)"))),
        ActionSpec("gripper", "Open or close the gripper's two fingers.",
                   (Param("action", "string", "open or close"),)),
        ActionSpec("step", "Let the simulation run n physics steps (2 ms each) unchanged.",
                   (Param("n", "integer", "number of steps, 1 to 10000"),)),
        ActionSpec("camera", "Point the view's camera (what screenshots show): from "
                   "(x, y, z) at (target_x, target_y, target_z).",
                   (Param("x", _NUM, "camera x"), Param("y", _NUM, "camera y"),
                    Param("z", _NUM, "camera z"), Param("target_x", _NUM, "look-at x"),
                    Param("target_y", _NUM, "look-at y"), Param("target_z", _NUM, "look-at z"))),
        ActionSpec("done", "Declare the task finished; the task is then checked."),
    )

    def to_actions(self, call: Call) -> list[Action]:
        a = self.validate(call)
        if call.name == "gripper":
            action = a["action"].strip().lower()
            if action not in ("open", "close"):
                raise CallError(f'gripper: action must be "open" or "close", got {a["action"]!r}')
            a["action"] = action
        if call.name == "camera":
            a = {"pos": [a["x"], a["y"], a["z"]],
                 "target": [a["target_x"], a["target_y"], a["target_z"]]}
        return [RobotCommand(call.name, a)]

    def express(self, action: Action, obs: Observation) -> list[Call] | None:
        if not isinstance(action, RobotCommand) or self.spec(action.op) is None:
            return None
        args = dict(action.args)
        if action.op == "move_ee" and "pos" in args:
            args = dict(zip("xyz", args.pop("pos"), strict=True))
        if action.op == "camera":
            (x, y, z), (tx, ty, tz) = args["pos"], args["target"]
            args = {"x": x, "y": y, "z": z, "target_x": tx, "target_y": ty, "target_z": tz}
        return [Call(action.op, args)]


register("interface")(RobotCommandInterface())


class RobotControllerInterface(ActionInterface):
    """One action: ``run_controller(code)``, a Python script run once against the robot."""

    name = "robot_controller"
    supports = frozenset({"robot"})
    specs = (ActionSpec("run_controller", "Run a Python controller script against the robot "
                        "once; the task is checked when it ends.",
                        (Param("code", "string", "the Python script"),)),)

    def to_actions(self, call: Call) -> list[Action]:
        a = self.validate(call)
        code = a["code"]
        if not code.strip():
            raise CallError("run_controller: the script is empty")
        if len(code) > MAX_SCRIPT:
            raise CallError(f"run_controller: the script is {len(code)} characters; the limit "
                            f"is {MAX_SCRIPT}")
        if "\x00" in code:
            raise CallError("run_controller: the script cannot contain NUL characters")
        return [RunController(code)]

    def express(self, action: Action, obs: Observation) -> list[Call] | None:
        if isinstance(action, RunController):
            return [Call("run_controller", {"code": action.code})]
        if isinstance(action, RobotCommand):
            # An expert gives its plan as commands *and* as the script doing them (see the
            # module doc); here the script says it all, so single commands add no call.
            return []
        return None


register("interface")(RobotControllerInterface())


# -- parser ----------------------------------------------------------------------------------
_PYTHON = {"python", "py", "python3"}

CONTROLLER_API = """\
The script runs once, in a sandbox with no network, with a time limit. It drives the robot
through the module `robot` (already importable; `import robot`):

  robot.state() -> dict          the simulator state: {"ee": {"pos": [x, y, z]},
                                 "gripper": {"opening", "holding"}, "objects": {name: {"pos",
                                 "quat", "kind", "color", "size", ...}}, "zones": {name: {"pos",
                                 "size"}}}  (metres, world frame, z up; drawers also give
                                 "opening" and "pull_direction"; their "pos" is the handle)
  robot.move_ee(x, y, z)         move the end effector (between the fingertips) in a straight
                                 line; returns {"ee": [...], "reached": bool, ...}
  robot.move_joint(joint, angle) joint x, y, z (metres) or wrist (radians)
  robot.gripper("open"|"close")  returns {"opening", "holding"}
  robot.step(n)                  n physics steps of 2 ms
  robot.done()                   declare the task finished (also implied when the script ends)

The workspace is x -0.45..0.45, y -0.35..0.35, z 0.015..0.4. A refused command raises
robot.RobotError with the reason. print() output is shown in the record."""


class RobotScriptParser(OutputParser):
    """The whole controller in one ```` ```python ```` block."""

    name = "robot_script"

    def describe(self, interface: ActionInterface) -> str:
        return ("Write a controller for the robot as one Python script in a single ```python "
                "block. " + CONTROLLER_API + "\nExample:\n```python\nimport robot\n"
                "s = robot.state()\nx, y, z = s[\"objects\"][\"red_marker\"][\"pos\"]\n"
                "robot.move_ee(x, y, z)\nrobot.done()\n```")

    def parse(self, response: PolicyResponse, interface: ActionInterface) -> list[Call]:
        blocks, _ = fenced_blocks(response.text or "")
        code = [body for lang, body in blocks if lang in _PYTHON and body.strip()]
        if not code:
            if blocks:
                raise ParseError("no ```python block found (the controller must be Python); "
                                 "write the whole script in one ```python block")
            if response.tool_calls:
                raise ParseError("tool calls are not read here; write the controller script "
                                 "in one ```python block")
            raise ParseError("no ```python block found; write the controller script as "
                             "```python\nimport robot\n...\n```")
        if len(code) > 1:
            raise ParseError(f"the reply has {len(code)} ```python blocks; the controller "
                             "runs once, so write it as one block")
        return [Call("run_controller", {"code": code[0]})]

    def encode(self, calls: list[Call], interface: ActionInterface) -> PolicyResponse:
        parts = [f"```python\n{str(c.args.get('code', '')).strip(chr(10))}\n```" for c in calls]
        return PolicyResponse(text="\n\n".join(parts))


register("parser")(RobotScriptParser())


__all__ = ["CONTROLLER_API", "RobotCommand", "RobotCommandInterface",
           "RobotControllerInterface", "RobotScriptParser", "RunController",
           "render_robot_state"]
