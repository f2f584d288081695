"""The robot environment: a :class:`RobotSim` behind the Environment contract.

Actions:

* :class:`~tackroom.harness.robot.RobotCommand` — one API command (``move_ee``,
  ``move_joint``, ``gripper``, ``step``, ``camera``, ``done``). A command the robot
  refuses is an :class:`~tackroom.core.errors.ActionError` (its message is the
  simulator's). ``done`` ends the episode and the task is verified.
* :class:`~tackroom.harness.robot.RunController` — a controller script, run once in the
  sandbox against the API (:mod:`.controller`); when it ends, the task is verified.
* :class:`~tackroom.core.actions.RunAgent` — an agent harness's CLI, run once in the
  sandbox with the robot's HTTP command API forwarded into it (:meth:`RobotEnv._run_agent`:
  a :class:`RobotServer` on a Unix socket bound into the sandbox, relayed to the sandbox's
  ``127.0.0.1:8765`` — ``$ROBOT_API`` —, and a ``./robot`` client in its working
  directory); the ``Submit`` after it verifies the task, whether or not the CLI sent
  ``done``.
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
import os
import shlex
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from tackroom.core.actions import Action, RunAgent, Submit
from tackroom.core.errors import ActionError, InfraError, TackroomError
from tackroom.core.observation import Observation
from tackroom.core.task import StepResult, Task
from tackroom.gateway import forward
from tackroom.harness.robot import RobotCommand, RunController
from tackroom.sandbox import Limits, run_agent
from tackroom.suites.robot.controller import run_controller
from tackroom.suites.robot.sim import CommandError, RobotSim

#: Commands an episode may execute before it is cut off (truncated).
MAX_COMMANDS = 200
#: The port the robot's API is relayed to inside an agent CLI's sandbox (its own network
#: namespace; the model gateway's relay is on 4000).
AGENT_PORT = 8765
#: Output of an agent CLI kept in the observation and the verifier's record.
AGENT_OUTPUT = 4000
_FORWARD = str(Path(forward.__file__).resolve())

#: ``./robot``, the shell client an agent CLI finds in its working directory: the HTTP
#: command API at ``$ROBOT_API``, standard library only (the sandbox's ``python3``).
AGENT_CLIENT = r'''#!/usr/bin/env python3
"""robot: the robot's HTTP command API from the shell (tackroom robot suite).

  ./robot state                  the simulator state as JSON
  ./robot move_ee X Y Z          move the end effector in a straight line (metres)
  ./robot move_joint JOINT VALUE joint x, y, z (metres) or wrist (radians)
  ./robot gripper open|close     drive the fingers until they stop
  ./robot step N                 N physics steps of 2 ms
  ./robot done                   declare the task finished (then it is checked)
  ./robot '{"op": "move_ee", "x": 0.1, "y": 0.0, "z": 0.2}'   any command as JSON

It prints the robot's answer as JSON; a refused command prints the reason and exits 1.
The same API over HTTP: GET $ROBOT_API/state, POST $ROBOT_API/command (a JSON object).
"""
import json
import os
import sys
import urllib.error
import urllib.request

API = os.environ.get("ROBOT_API", "http://127.0.0.1:8765/api").rstrip("/")
ARGS = {"move_ee": ("x", "y", "z"), "move_joint": ("joint", "angle"), "gripper": ("action",),
        "step": ("n",), "done": ()}


def call(path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(API + path, data=data,
                                 headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=120) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        try:
            msg = json.loads(e.read()).get("error", str(e))
        except ValueError:
            msg = str(e)
        sys.exit(f"robot: refused: {msg}")
    except OSError as e:
        sys.exit(f"robot: cannot reach the robot API at {API}: {e}")


def number(text):
    try:
        value = float(text)
    except ValueError:
        sys.exit(f"robot: {text!r} is not a number")
    return int(value) if value.is_integer() and "." not in text else value


def main(argv):
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(__doc__.strip())
        return 0
    op, rest = argv[0], argv[1:]
    if op == "state":
        print(json.dumps(call("/state"), indent=1))
        return 0
    if op.startswith("{"):
        print(json.dumps(call("/command", json.loads(" ".join(argv)))))
        return 0
    if op not in ARGS:
        sys.exit(f"robot: unknown command {op!r}; see ./robot help")
    names = ARGS[op]
    if len(rest) != len(names):
        sys.exit(f"robot: {op} takes {len(names)} argument(s): {' '.join(names) or 'none'}")
    body = {"op": op}
    for name, value in zip(names, rest):
        body[name] = value if name in ("joint", "action") else number(value)
    print(json.dumps(call("/command", body)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
'''

#: ``API.md`` beside the client: the API an agent CLI controls the robot through.
AGENT_API = """\
# The robot's command API

A simulated robot arm (a gantry: x, y, z slides, a wrist, two fingers up to 9 cm apart)
on a table. Metres, z up, the table top at z = 0. The end effector (`ee`) is the point
between the fingertips; its workspace is x -0.45..0.45, y -0.35..0.35, z 0.015..0.40.

From the shell, `./robot` (in this directory) sends one command and prints the answer:

    ./robot state                  # the state: ee, gripper, objects {name: pos, quat,
                                   #   kind, color, size}, zones {name: pos, size}
    ./robot move_ee X Y Z          # a straight line; answers reached (true/false)
    ./robot move_joint JOINT VALUE # x, y, z (metres) or wrist (radians)
    ./robot gripper open|close     # answers opening and holding (the block held, or null)
    ./robot step N                 # N physics steps of 2 ms
    ./robot done                   # the task is finished: it is checked, no more commands

The same over HTTP at `$ROBOT_API` (http://127.0.0.1:8765/api):

    curl -s $ROBOT_API/state
    curl -s -X POST $ROBOT_API/command -d '{"op": "move_ee", "x": 0.1, "y": 0.0, "z": 0.2}'

A refused command answers 400 with {"error": "..."} (./robot prints it and exits 1).
Grasps are friction grasps: a block let go falls.
"""


def agent_script(commands: list[dict[str, Any]]) -> str:
    """``commands`` (a plan) as a shell script of ``./robot`` calls, for an agent CLI's shell."""
    lines = []
    for c in commands:
        args = {k: v for k, v in c.items() if k != "op"}
        if c["op"] == "move_ee" and "pos" in args:
            args = dict(zip("xyz", args.pop("pos"), strict=True))
        names = _CLIENT_ARGS.get(c["op"])
        if names is not None and sorted(args) == sorted(names):
            lines.append(shlex.join(["./robot", c["op"], *(str(args[k]) for k in names)]))
        else:  # anything else, as the JSON command
            lines.append(shlex.join(["./robot", json.dumps(c)]))
    return "\n".join(lines)


#: The positional arguments of ``./robot``'s commands.
_CLIENT_ARGS = {"move_ee": ("x", "y", "z"), "move_joint": ("joint", "angle"),
                "gripper": ("action",), "step": ("n",), "done": ()}


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
        #: What the agent CLI did (``None``: no agent has run this episode).
        self.agent_run: dict[str, Any] | None = None

    # -- Gymnasium-shaped API --------------------------------------------------------------
    def reset(self, seed: int) -> Observation:
        try:
            self.sim.reset(self.task.id, int(seed))
        except CommandError as e:
            raise InfraError(str(e), f"robot/{self.task.id}") from None
        self.seed = int(seed)
        self.done = False
        self.commands = 0
        self.agent_run = None
        return self._observation(None, None)

    def step(self, action: Action) -> StepResult:
        if self.seed is None:
            raise ActionError(f"{self.task.id}: step() before reset(); call reset(seed) first")
        if self.done:
            raise ActionError("the episode is over; no more actions")
        if isinstance(action, RunController):
            return self._run_controller(action.code)
        if isinstance(action, RunAgent):
            return self._run_agent(action)
        if isinstance(action, Submit) and self.agent_run is not None:
            return self._agent_verdict()
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

    def _run_agent(self, action: RunAgent) -> StepResult:
        """An agent CLI in the sandbox, the robot's API forwarded to it; the sim stays here.

        A :class:`RobotServer` on a Unix socket (no reset, the episode's command limit)
        is bound read-only into the sandbox, and ``forward.py`` relays the sandbox's
        ``127.0.0.1:8765`` to it before the CLI starts (the model gateway's relay wraps
        the CLI inside that). The working directory holds ``./robot`` and ``API.md``.
        Without the sandbox (``unsafe_local``) the server listens on a TCP port instead.
        """
        from tackroom.suites.robot.server import RobotServer

        if self.agent_run is not None:
            raise ActionError("the agent has already run in this episode")
        tmp = Path(tempfile.mkdtemp(prefix="trk-robot-"))  # short: a socket path <= 107 bytes
        try:
            os.chmod(tmp, 0o755)  # the sandbox's own uid must reach the socket
            work, sock_dir = tmp / "task", tmp / "sock"
            work.mkdir()
            sock_dir.mkdir(mode=0o755)
            (work / "robot").write_text(AGENT_CLIENT)
            (work / "robot").chmod(0o755)
            (work / "API.md").write_text(AGENT_API)
            left = max(0, self.max_commands - self.commands)
            if self.unsafe_local:
                server = RobotServer(self.sim, allow_reset=False, max_commands=left)
                api, argv, binds = f"{server.url}api", action.argv, action.ro_binds
            else:
                sock = sock_dir / "robot.sock"
                server = RobotServer(self.sim, unix_socket=sock, allow_reset=False,
                                     max_commands=left)
                os.chmod(sock, 0o777)
                api = f"http://127.0.0.1:{AGENT_PORT}/api"
                argv = ("python3", _FORWARD, "--port", str(AGENT_PORT), "--socket", str(sock),
                        "--", *action.argv)
                binds = {**action.ro_binds, _FORWARD: _FORWARD, str(sock_dir): str(sock_dir)}
            try:
                res = run_agent(replace(action, argv=tuple(argv), ro_binds=binds,
                                        env={**action.env, "ROBOT_API": api}),
                                work, Limits(wall_s=action.timeout_s),
                                unsafe_local=self.unsafe_local)
            finally:
                server.close()
                # A keep-alive connection's handler may outlive the server: wait for a
                # command in flight, then detach (any later request answers 503).
                server.attach(None)
        except InfraError:
            raise
        except TackroomError as e:  # the sandbox is unavailable here
            raise InfraError(e.what, e.where or "robot agent", e.fix) from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.commands += server.commands
        self.agent_run = {"exit": res.exit_code, "timed_out": res.timed_out,
                          "commands": server.commands, "refused": server.refused,
                          "done_sent": self.sim.done, "seconds": round(res.duration_s, 3)}
        text = (f"The agent exited with code {res.exit_code} after {server.commands} robot "
                f"command(s) ({server.refused} refused).")
        return StepResult(self._observation("run_agent", None, text=text), 0.0, False,
                          info={"agent": res.record(AGENT_OUTPUT)})

    def _agent_verdict(self) -> StepResult:
        """The check after an agent's run: the state as the CLI left it (``done`` or not)."""
        assert self.agent_run is not None
        run = self.agent_run
        if not self.sim.done:
            self.sim.command({"op": "done"})
        ended = "sent done" if run["done_sent"] else "ended without sending done"
        summary = (f"The agent {ended} after {run['commands']} robot command(s) "
                   f"({run['refused']} refused).")
        obs = self._observation("done", {"done": True}, text=summary)
        return self._verdict(obs, {"verifier": {**run, "output": summary}})

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


__all__ = ["AGENT_API", "AGENT_CLIENT", "AGENT_PORT", "MAX_COMMANDS", "RobotEnv", "Screenshotter",
           "agent_script", "status_line"]
