"""Run a controller script against a :class:`RobotSim`: the ``robot-code`` harness's one step.

The script runs as ``python3 controller.py`` in the bubblewrap sandbox
(:mod:`tackroom.sandbox`: no network, a private ``/tmp``, memory and process limits),
with a tiny client module ``robot.py`` beside it. The client speaks JSON lines over the
script's stdin and stdout — one request per line (``{"op": "move_ee", ...}`` or
``{"op": "state"}``), one answer per line (``{"ok": true, ...}`` or ``{"error": "..."}``)
— and points ``print`` at stderr, which is what the record shows. The simulator stays in
this process: the script only ever sees the API.

Limits: ``timeout_s`` of wall time for the whole script, ``max_commands`` commands; past
either the script is killed and the task is checked as it stands.
"""

from __future__ import annotations

import io
import json
import os
import selectors
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from tackroom.core.errors import InfraError
from tackroom.sandbox import BubblewrapSandbox, Limits, kill

#: Output (stderr) kept from a script, in characters.
OUTPUT_LIMIT = 4000
#: The longest request line a script may send (bytes).
MAX_LINE = 1 << 16

CLIENT = r'''"""The robot's API for a controller script (tackroom robot suite)."""
import json as _json
import sys as _sys

_out, _in = _sys.stdout, _sys.stdin
_sys.stdout = _sys.stderr  # print() goes to the output shown in the record, not the protocol


class RobotError(Exception):
    """The robot refused a command; the message says why."""


def _call(req):
    _out.write(_json.dumps(req) + "\n")
    _out.flush()
    line = _in.readline()
    if not line:
        raise SystemExit("robot: the simulator ended the session (a limit was reached)")
    ans = _json.loads(line)
    if "error" in ans:
        raise RobotError(ans["error"])
    return ans


def state():
    """The simulator state (end effector, gripper, objects, zones)."""
    return _call({"op": "state"})["state"]


def move_ee(x, y, z):
    """Move the end effector in a straight line to (x, y, z) metres."""
    return _call({"op": "move_ee", "x": x, "y": y, "z": z})


def move_joint(joint, angle):
    """Move joint x, y, z (metres) or wrist (radians) to ``angle``."""
    return _call({"op": "move_joint", "joint": joint, "angle": angle})


def gripper(action):
    """"open" or "close" the gripper."""
    return _call({"op": "gripper", "action": action})


def step(n=1):
    """Run ``n`` physics steps (2 ms each)."""
    return _call({"op": "step", "n": n})


def done():
    """Declare the task finished."""
    return _call({"op": "done"})
'''


@dataclass
class ControllerRun:
    """What a controller script did."""

    exit_code: int | None
    output: str
    commands: int
    errors: int
    seconds: float
    stopped: str | None = None  # "timeout", "commands", "protocol" or None

    def summary(self) -> str:
        """One paragraph for the observation and the record."""
        how = {"timeout": "was stopped at its time limit",
               "commands": "was stopped at its command limit",
               "protocol": "was stopped: it broke the robot protocol"}.get(
            self.stopped or "", f"exited with code {self.exit_code}")
        text = (f"The controller {how} after {self.commands} command(s) "
                f"({self.errors} refused) in {self.seconds:.1f} s.")
        if self.output.strip():
            text += "\nIts output:\n" + self.output.rstrip()
        return text


def _python() -> str:
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else (
        shutil.which("python3") or "python3")


def run_controller(sim: Any, code: str, *, timeout_s: float = 60.0, max_commands: int = 500,
                   unsafe_local: bool = False) -> ControllerRun:
    """Run ``code`` against ``sim`` (its commands go to ``sim.command``) until it ends."""
    from tackroom.suites.robot.sim import CommandError

    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tackroom-robot-") as tmp:
        work = Path(tmp)
        (work / "robot.py").write_text(CLIENT)
        (work / "controller.py").write_text(code)
        box = BubblewrapSandbox(work, Limits(wall_s=timeout_s, memory_mb=512, processes=32,
                                             disk_mb=16), unsafe_local=unsafe_local)
        try:
            where = str(work) if unsafe_local else box.task_path
            proc = box.popen([_python(), "-E", "-s", f"{where}/controller.py"],
                             {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"},
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
            err = bytearray()

            def drain() -> None:
                assert proc.stderr is not None
                # A PIPE at the default buffering is a BufferedReader, which has read1.
                stderr = cast(io.BufferedReader, proc.stderr)
                for chunk in iter(lambda: stderr.read1(4096), b""):
                    if len(err) < 4 * OUTPUT_LIMIT:
                        err.extend(chunk)

            reader = threading.Thread(target=drain, daemon=True)
            reader.start()
            commands = errors = 0
            stopped = None
            try:
                stopped, commands, errors = _serve(sim, proc, start + timeout_s, max_commands,
                                                   CommandError)
            finally:
                if stopped is not None or proc.poll() is None:
                    try:
                        proc.wait(timeout=0.5 if stopped is None else 0)
                    except subprocess.TimeoutExpired:
                        pass
                    kill(proc)
                code_ = proc.wait()
                reader.join(timeout=2)
        finally:
            box.close()
    out = err.decode(errors="replace")
    if not unsafe_local and code_ == 1 and out.startswith("bwrap:") and commands == 0:
        raise InfraError(f"the sandbox failed to start: {out.strip()[:300]}", "robot controller")
    if len(out) > OUTPUT_LIMIT:
        half = OUTPUT_LIMIT // 2
        out = f"{out[:half]}\n[... {len(out) - OUTPUT_LIMIT} characters cut ...]\n{out[-half:]}"
    return ControllerRun(None if stopped else code_, out, commands, errors,
                         time.monotonic() - start, stopped)


def _serve(sim: Any, proc: subprocess.Popen, deadline: float, max_commands: int,
           command_error: type[Exception]) -> tuple[str | None, int, int]:
    """Answer the script's requests until it exits; ``(stopped, commands, refused)``."""
    assert proc.stdout is not None and proc.stdin is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    buf = b""
    commands = errors = 0
    try:
        while True:
            while b"\n" not in buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    return "timeout", commands, errors
                if not sel.select(timeout=min(left, 0.5)):
                    if proc.poll() is not None and not buf:
                        return None, commands, errors
                    continue
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    return None, commands, errors
                buf += chunk
                if len(buf) > MAX_LINE and b"\n" not in buf:
                    return "protocol", commands, errors
            line, buf = buf.split(b"\n", 1)
            try:
                req = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                # Something other than the client wrote to the protocol stream.
                return "protocol", commands, errors
            if isinstance(req, dict) and req.get("op") == "state":
                answer: dict[str, Any] = {"ok": True, "state": sim.state()}
            else:
                if commands >= max_commands:
                    return "commands", commands, errors
                commands += 1
                try:
                    answer = sim.command(req)
                except command_error as e:
                    errors += 1
                    answer = {"error": str(e)}
            try:
                proc.stdin.write((json.dumps(answer) + "\n").encode())
                proc.stdin.flush()
            except (BrokenPipeError, OSError):
                return None, commands, errors
    finally:
        sel.close()
