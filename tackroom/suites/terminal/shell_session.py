"""A persistent, interactive shell inside the sandbox, driven by keystrokes.

One long-lived ``bash -i`` per episode, started through the episode's
:class:`~tackroom.sandbox.Sandbox` (so it has the same mounts and rlimits) on
a pseudo-terminal: the model types keys and reads the screen, as in
Terminus. Two invisible escape sequences tell us where bash is —
``PS0`` prints a *started* marker when a command begins and
``PROMPT_COMMAND`` a *ready* marker with the exit status when the prompt
returns — and the tty's input queue (``TIOCINQ``) tells whether typed keys
are still waiting to be read. Both markers are stripped from the screen.

The per-command limit holds here too: a command that keeps the shell busy
for longer than ``limits.wall_s`` gets ``C-c``; one that ignores it is
killed with the whole session, and a fresh shell takes its place.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time

from tackroom.core.errors import InfraError
from tackroom.sandbox import Sandbox, kill

_START = b"\x1b]777;S\x07"
_READY = re.compile(rb"\x1b\]777;R;(\d+)\x07")
_MARK = re.compile(rb"\x1b\]777;[^\x07]*\x07")
_ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
#: The transcript kept (older output is dropped; the screen is its tail).
_KEEP = 256 * 1024
#: No output for this long, with nothing left to read, means the shell has settled.
_QUIET_S = 0.08

#: Named keys a model may send, as the bytes a terminal sends for them.
KEYS: dict[str, bytes] = {
    "Enter": b"\n", "Tab": b"\t", "Escape": b"\x1b", "Backspace": b"\x7f", "Space": b" ",
    **{f"C-{c}": bytes([ord(c) - 96]) for c in "abcdefghijklmnopqrstuvwxyz"},
    "C-\\": b"\x1c", "C-[": b"\x1b",
}


def screen_text(raw: bytes, lines: int) -> str:
    """The last ``lines`` lines of terminal output, as a person would read them."""
    data = _ANSI.sub(b"", _MARK.sub(b"", raw)).decode(errors="replace")
    out: list[str] = []
    for line in data.replace("\r\n", "\n").split("\n"):
        if "\r" in line:  # a carriage return rewrites the line (progress bars)
            line = line.rsplit("\r", 1)[-1]
        while "\b" in line:
            line = re.sub(".?\b", "", line, count=1)
        out.append("".join(ch for ch in line if ch == "\t" or ch >= " "))
    return "\n".join(out[-lines:])


class ShellSession:
    """``bash -i`` on a pty in ``sandbox``; :meth:`send` types, :attr:`screen` reads."""

    def __init__(self, sandbox: Sandbox, screen_lines: int = 40,
                 env: dict[str, str] | None = None) -> None:
        self.sandbox = sandbox
        self.screen_lines = screen_lines
        self._task_env = dict(env or {})  # the task's ENV, as its shell commands get it
        self.notes: list[str] = []
        self._start()

    def _start(self) -> None:
        self._master, self._slave = pty.openpty()
        fcntl.ioctl(self._master, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
        os.set_blocking(self._master, False)
        env = {**self._task_env, "PS1": "$PWD$ ", "PS2": "> ", "PS0": _START.decode(), "HISTFILE": "",
               "PROMPT_COMMAND": r'printf "\033]777;R;%s\007" $?'}
        try:
            # setsid -c makes the pty the shell's controlling terminal (so C-c interrupts).
            self.proc = self.sandbox.popen(
                ["setsid", "-w", "-c", "bash", "--norc", "--noprofile", "--noediting", "+H",
                 "-i"], env, stdin=self._slave, stdout=self._slave, stderr=self._slave)
        except OSError as e:
            self._close_fds()
            raise InfraError(f"cannot start the shell session: {e}", "terminal") from e
        self._raw = bytearray()
        self._scan = 0
        self.busy, self.busy_since = True, time.monotonic()
        self.last_exit: int | None = None
        self._pump(time.monotonic() + 20.0, want_prompt=True)
        if self.busy:
            self.close()
            raise InfraError("the sandboxed shell did not start (no prompt within 20 s)",
                             "terminal", f"screen: {screen_text(bytes(self._raw), 5)!r}")

    # -- reading ----------------------------------------------------------------------
    def _read(self, timeout: float) -> bool:
        """Read what the shell wrote within ``timeout``; whether anything came."""
        ready, _, _ = select.select([self._master], [], [], max(0.0, timeout))
        if not ready:
            return False
        try:
            chunk = os.read(self._master, 65536)
        except (BlockingIOError, OSError):
            return False
        self._raw += chunk
        self._markers()
        if len(self._raw) > _KEEP:
            cut = len(self._raw) - _KEEP
            del self._raw[:cut]
            self._scan = max(0, self._scan - cut)
        return bool(chunk)

    def _markers(self) -> None:
        """Update busy/ready from the markers that arrived since the last scan."""
        region = bytes(self._raw[self._scan:])
        events: list[tuple[int, str, int | None]] = [
            (m.start(), "S", None) for m in re.finditer(re.escape(_START), region)]
        events += [(m.start(), "R", int(m.group(1))) for m in _READY.finditer(region)]
        for _pos, kind, code in sorted(events):
            if kind == "S":
                self.busy, self.busy_since = True, time.monotonic()
            else:
                self.busy, self.last_exit = False, code
        # Keep a partial marker at the end for the next scan.
        tail = region.rfind(b"\x1b")
        keep = len(region) - tail if tail >= 0 and b"\x07" not in region[tail:] else 0
        self._scan = len(self._raw) - keep

    def _pending_input(self) -> int:
        """Typed bytes the shell has not read yet (complete lines only)."""
        try:
            buf = fcntl.ioctl(self._slave, termios.TIOCINQ, b"\0\0\0\0")
            return struct.unpack("i", buf)[0]
        except OSError:
            return 0

    def _pump(self, deadline: float, want_prompt: bool) -> None:
        """Read until the shell settles (at its prompt, input consumed, quiet) or ``deadline``."""
        last = time.monotonic()
        while time.monotonic() < deadline:
            if self._read(min(_QUIET_S, max(0.0, deadline - time.monotonic()))):
                last = time.monotonic()
                continue
            if self.proc.poll() is not None:
                return
            settled = time.monotonic() - last >= _QUIET_S and self._pending_input() == 0
            if settled and (not self.busy or not want_prompt):
                return

    # -- typing -----------------------------------------------------------------------
    def send(self, data: bytes, wait_s: float) -> None:
        """Type ``data``; wait up to ``wait_s`` for the shell to come back to its prompt."""
        self.notes = []
        if self.proc.poll() is not None:
            self.notes.append("[the shell had exited; a new one was started]")
            self.close()
            self._start()
        wall = self.sandbox.limits.wall_s
        start = time.monotonic()
        deadline = start + max(0.05, min(wait_s, wall))
        view = memoryview(data)
        while view and time.monotonic() < deadline:
            _, writable, _ = select.select([], [self._master], [], 0.05)
            if writable:
                with contextlib.suppress(BlockingIOError):
                    view = view[os.write(self._master, view):]
            self._read(0)
        if view:
            self.notes.append(f"[{len(view)} keystrokes were not delivered: the shell was not "
                              "reading input]")
        self._pump(deadline, want_prompt=True)
        # A command about to pass the per-command limit within this wait is stopped now.
        if self.busy and self.busy_since + wall <= start + wait_s + 0.1:
            self._pump(self.busy_since + wall, want_prompt=True)
        self._enforce_wall(wall)

    def wait_idle(self, timeout: float) -> bool:
        """Wait for the prompt (e.g. before the tests run); whether the shell is idle."""
        self._pump(time.monotonic() + timeout, want_prompt=True)
        return not self.busy

    def _enforce_wall(self, wall: float) -> None:
        if not self.busy or time.monotonic() - self.busy_since < wall:
            return
        with contextlib.suppress(OSError):
            os.write(self._master, KEYS["C-c"])
        self._pump(time.monotonic() + 1.0, want_prompt=True)
        if not self.busy:
            self.notes.append(f"[the command ran past the {wall:g} s per-command limit: "
                              "sent C-c]")
            return
        self.close()
        self._start()
        self.notes.append(f"[the command ran past the {wall:g} s per-command limit and "
                          "ignored C-c: the shell was killed and a new one started]")

    @property
    def screen(self) -> str:
        """The last lines of the terminal, followed by any notes about limits."""
        text = screen_text(bytes(self._raw), self.screen_lines)
        return text + ("\n" + "\n".join(self.notes) if self.notes else "")

    # -- the end ----------------------------------------------------------------------
    def _close_fds(self) -> None:
        for fd in (self._master, self._slave):
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        """Kill the shell and everything it started."""
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:
            kill(proc)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self._close_fds()
