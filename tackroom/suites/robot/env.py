"""The robot environment: a :class:`RobotSim` behind the Environment contract.

Actions:

* :class:`~tackroom.harness.robot.RobotCommand` — one API command (``move_ee``,
  ``move_joint``, ``gripper``, ``step``, ``camera``, ``done``). A command the robot
  refuses is an :class:`~tackroom.core.errors.ActionError` (its message is the
  simulator's). ``done`` ends the episode and the task is verified.
* :class:`~tackroom.harness.robot.RunController` — a controller script, run once in the
  sandbox against the API (:mod:`.controller`); when it ends, the task is verified.
* ``Submit()`` — the same as ``done``.

Observations: ``instruction``; ``text``, a status line (what the last command answered);
``extra``:

* ``"state"`` — :meth:`RobotSim.state` after the step;
* ``"result"`` — the last command's result dict (``None`` after reset);
* ``"commands"`` — commands executed so far in the episode (scripted experts use it as
  their cursor into a plan);
* ``"task"``, ``"seed"``;
* ``"screenshot"`` — only when the environment has a screenshotter: a zero-argument
  callable returning a PNG of the browser view of *this* observation's state. It is
  lazy (nothing is rendered unless a renderer calls it) and cached; called after a later
  step, it raises ``InfraError`` rather than show another state.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from tackroom.core.actions import Action, Submit
from tackroom.core.errors import ActionError, InfraError, TackroomError
from tackroom.core.observation import Observation
from tackroom.core.task import StepResult, Task
from tackroom.harness.robot import RobotCommand, RunController
from tackroom.suites.robot.controller import run_controller
from tackroom.suites.robot.sim import CommandError, RobotSim

#: Commands an episode may execute before it is cut off (truncated).
MAX_COMMANDS = 200


class Screenshotter(Protocol):
    """What takes the browser screenshots (:class:`tackroom.suites.robot.browser.Screenshotter`)."""

    def capture(self, sim: RobotSim) -> bytes: ...


class _Shot:
    """A lazily taken, cached screenshot of one observation's state."""

    def __init__(self, shooter: Screenshotter, sim: RobotSim) -> None:
        self._shooter, self._sim, self._version = shooter, sim, sim.version
        self._png: bytes | None = None

    def __call__(self) -> bytes:
        if self._png is None:
            if self._sim.version != self._version:
                raise InfraError("a screenshot was asked for an observation the robot has "
                                 "moved on from", "robot env",
                                 "render an observation before the next step")
            self._png = self._shooter.capture(self._sim)
        return self._png


def _fmt(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, list):
        return "(" + ", ".join(f"{round(x, 3) + 0.0:.3f}" if isinstance(x, float) else str(x) for x in v) + ")"
    return json.dumps(v)


def status_line(op: str | None, result: dict[str, Any] | None) -> str:
    """The last command's answer in one line, e.g. ``move_ee: reached; ee (0.1, 0.2, 0.1).``"""
    if op is None or result is None:
        return "The robot is ready."
    bits = []
    for k, v in result.items():
        if k in ("ok",):
            continue
        bits.append(f"{k} {_fmt(v)}")
    return f"Last command {op}: ok; " + "; ".join(bits) + "."


class RobotEnv:
    """One live robot episode over a fresh :class:`RobotSim`.

    Args:
        task: the robot task.
        screenshotter: an object with ``capture(sim) -> bytes`` (PNG); when given,
            observations carry ``extra["screenshot"]``.
        unsafe_local: run controller scripts without the sandbox.
        controller_timeout_s: wall time a controller script may run.
        max_commands: commands an episode (or a script) may execute.
    """

    blocking = True  # physics steps and the controller's subprocess take real time

    def __init__(self, task: Task, *, screenshotter: Screenshotter | None = None,
                 unsafe_local: bool = False, controller_timeout_s: float = 60.0,
                 max_commands: int = MAX_COMMANDS) -> None:
        self.task = task
        self.sim = RobotSim()
        self.screenshotter = screenshotter
        self.unsafe_local = unsafe_local
        self.controller_timeout_s = controller_timeout_s
        self.max_commands = max_commands
        self.seed: int | None = None
        self.done = False
        self.commands = 0

    # -- Gymnasium-shaped API --------------------------------------------------------------
    def reset(self, seed: int) -> Observation:
        try:
            self.sim.reset(self.task.id, int(seed))
        except CommandError as e:
            raise InfraError(str(e), f"robot/{self.task.id}") from None
        self.seed = int(seed)
        self.done = False
        self.commands = 0
        return self._observation(None, None)

    def step(self, action: Action) -> StepResult:
        if self.seed is None:
            raise ActionError(f"{self.task.id}: step() before reset(); call reset(seed) first")
        if self.done:
            raise ActionError("the episode is over; no more actions")
        if isinstance(action, RunController):
            return self._run_controller(action.code)
        if isinstance(action, Submit):
            action = RobotCommand("done")
        if not isinstance(action, RobotCommand):
            raise ActionError(f"the robot suite does not take {action.kind!r} actions; it takes "
                              "robot commands (move_ee, move_joint, gripper, step, camera, "
                              "done) or a controller script")
        try:
            result = self.sim.command(action.command())
        except CommandError as e:
            raise ActionError(str(e)) from None
        if action.op != "camera":
            self.commands += 1
        if action.op == "done":
            return self._verdict(self._observation(action.op, result), {})
        obs = self._observation(action.op, result)
        if self.commands >= self.max_commands:
            self.done = True
            ok, mode = self.sim.verify()
            return StepResult(obs, 1.0 if ok else 0.0, False, True, ok,
                              {"failure_mode": mode or "command_limit"})
        return StepResult(obs, 0.0, False)

    def close(self) -> None:
        self.seed = None

    # -- helpers ---------------------------------------------------------------------------
    def _run_controller(self, code: str) -> StepResult:
        try:
            run = run_controller(self.sim, code, timeout_s=self.controller_timeout_s,
                                 max_commands=self.max_commands, unsafe_local=self.unsafe_local)
        except InfraError:
            raise
        except TackroomError as e:  # the sandbox is unavailable here
            raise InfraError(e.what, e.where or "robot controller", e.fix) from None
        self.commands += run.commands
        obs = self._observation("run_controller", None, text=run.summary())
        # What ``tackroom show`` prints as the episode's verifier panel.
        info = {"verifier": {"exit": run.exit_code, "stopped": run.stopped,
                             "commands": run.commands, "refused": run.errors,
                             "seconds": round(run.seconds, 3), "output": run.summary()}}
        return self._verdict(obs, info)

    def _verdict(self, obs: Observation, info: dict[str, Any]) -> StepResult:
        self.done = True
        ok, mode = self.sim.verify()
        if mode is not None:
            info["failure_mode"] = mode
        verdict = "success" if ok else f"failure ({mode})"
        obs.text = f"{obs.text}\nThe task was checked: {verdict}." if obs.text else verdict
        return StepResult(obs, 1.0 if ok else 0.0, True, False, ok, info)

    def _observation(self, op: str | None, result: dict[str, Any] | None,
                     text: str | None = None) -> Observation:
        extra: dict[str, Any] = {"state": self.sim.state(), "result": result,
                                 "commands": self.commands, "task": self.sim.task,
                                 "seed": self.seed}
        if self.screenshotter is not None:
            extra["screenshot"] = _Shot(self.screenshotter, self.sim)
        return Observation(instruction=self.sim.instruction,
                           text=text if text is not None else status_line(op, result),
                           extra=extra)


__all__ = ["MAX_COMMANDS", "RobotEnv", "Screenshotter", "status_line"]
