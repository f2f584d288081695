"""What every provider's sandbox shares: running one command as a process with a deadline.

:class:`ProcessSandbox` implements :meth:`~tackroom.sandbox.contract.Sandbox.run` over a
provider's :meth:`popen` (bubblewrap's ``bwrap …``, Docker's ``docker exec …``): output
drained up to :data:`OUTPUT_CAP` per stream, the process group killed at the deadline, the
limit a command ran into read from its traces. :func:`copy_tree` is how a task directory
leaves a sandbox: only regular files, directories and symlinks.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import selectors
import shutil
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Self

from tackroom.sandbox.contract import CommandResult, Limits

#: Output kept per stream (the rest is drained and counted, never stored).
OUTPUT_CAP = 1 << 20


class ProcessSandbox:
    """The shared part of a sandbox whose commands are host processes (see the module doc).

    Subclasses set :attr:`limits` and implement :meth:`popen`, :meth:`copy_in`,
    :meth:`copy_out` and :meth:`close`; :meth:`_started` and :meth:`_which_limit` read a
    finished command's traces their own way.
    """

    limits: Limits
    unsafe_local: bool = False

    def popen(self, argv: list[str], env: Mapping[str, str] | None = None,
              **kwargs: Any) -> subprocess.Popen:
        raise NotImplementedError

    def run(self, command: str, *, timeout_s: float | None = None, stdin: str | None = None,
            env: Mapping[str, str] | None = None) -> CommandResult:
        """Run ``bash -c command`` in the task directory; never raises for the command's faults.

        ``timeout_s`` overrides ``limits.wall_s`` for this call. Raises
        :class:`~tackroom.core.errors.InfraError` only when the sandbox itself fails to start.
        """
        timeout = self.limits.wall_s if timeout_s is None else timeout_s
        start = time.monotonic()
        if (bad := _unpassable(command, *(env or {}).values(), *(env or {}))) is not None:
            return CommandResult(2, "", f"tackroom: the command cannot be run: {bad}\n",
                                 False, 0.0)
        proc = self.popen(["bash", "-c", command], env,
                          stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if stdin is not None:
            threading.Thread(target=_feed, args=(proc, stdin), daemon=True).start()
        out, err, timed_out = _drain(proc, start + timeout)
        if timed_out:
            kill(proc)
        code = proc.wait()
        duration = time.monotonic() - start
        stdout = out.decode(errors="replace")
        stderr = err.decode(errors="replace")
        self._started(code, stdout, stderr)
        killed = self._which_limit(code, stderr)
        if timed_out and killed != "processes":
            # A fork bomb stopped by the process limit may still run out of time: bash
            # retries a refused fork with growing back-offs (``fork: retry``). The limit it
            # hit is the process limit, whatever the machine's load made the clock say.
            killed = "timeout"
        return CommandResult(code if not timed_out else -signal.SIGKILL, stdout, stderr,
                             timed_out, duration, killed)

    def _started(self, code: int, stdout: str, stderr: str) -> None:
        """Raise an InfraError when a command's traces say the sandbox did not start."""

    def _which_limit(self, code: int, stderr: str) -> str | None:
        """Best-effort: which limit a finished command ran into, from its traces."""
        return limit_in_output(code, stderr)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        raise NotImplementedError


def copy_tree(src: Path | str, dst: Path | str) -> None:
    """Copy the directory ``src`` over ``dst``: regular files, directories, symlinks (as links).

    FIFOs, sockets and device nodes are skipped: a command in a sandbox may make them
    (``mkfifo``, a server's Unix socket), they hold no content to keep, and copying one
    would block or fail — a task's outcome must not turn on them (see docs/security.md).
    """
    shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True, ignore=special_files)


def special_files(folder: str, names: list[str]) -> set[str]:
    """Of ``names`` in ``folder``, those that are not regular files, directories or
    symlinks (a ``shutil.copytree`` ``ignore``)."""
    skip = set()
    for name in names:
        try:
            mode = os.lstat(os.path.join(folder, name)).st_mode
        except OSError:
            continue  # gone meanwhile: copytree says so if it matters
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            skip.add(name)
    return skip


def limit_in_output(code: int, stderr: str) -> str | None:
    """Which limit (disk, processes, memory) a command's exit code and stderr show it hit."""
    low = stderr.lower()
    if (code == 128 + signal.SIGXFSZ or "file too large" in low
            or "no space left on device" in low or "disk quota" in low):
        return "disk"
    if "fork: retry" in low or "resource temporarily unavailable" in low:
        return "processes"
    if ("cannot allocate" in low or "memoryerror" in low or "out of memory" in low
            or "memory exhausted" in low or "bad_alloc" in low):
        return "memory"
    return None


def _unpassable(*texts: str) -> str | None:
    """Why these strings cannot be passed to a process (NUL, text that is not UTF-8)."""
    for text in texts:
        if "\x00" in text:
            return "it contains a NUL character"
        try:
            os.fsencode(text)
        except UnicodeEncodeError:
            return "it is not valid UTF-8 text"
    return None


def kill(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``'s process group; in a sandbox that ends its whole pid namespace."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _feed(proc: subprocess.Popen, data: str) -> None:
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError, OSError):
        proc.stdin.write(data.encode())
        proc.stdin.close()


def _drain(proc: subprocess.Popen, deadline: float) -> tuple[bytes, bytes, bool]:
    """Read stdout and stderr until both close or ``deadline``; keep ``OUTPUT_CAP`` bytes each."""
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    bufs = {out_fd: bytearray(), err_fd: bytearray()}
    sel = selectors.DefaultSelector()
    for f in (proc.stdout, proc.stderr):
        sel.register(f, selectors.EVENT_READ)
    timed_out = False
    try:
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in sel.select(timeout=left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buf = bufs[key.fd]
                if len(buf) < OUTPUT_CAP:
                    buf += chunk[: OUTPUT_CAP - len(buf)]
        if timed_out:
            # Everything in the sandbox dies with it; a short, bounded drain after.
            kill(proc)
            end = time.monotonic() + 2.0
            while sel.get_map() and time.monotonic() < end:
                for key, _ in sel.select(timeout=0.1):
                    if not os.read(key.fd, 65536):
                        sel.unregister(key.fileobj)
    finally:
        sel.close()
        proc.stdout.close()
        proc.stderr.close()
    return bytes(bufs[out_fd]), bytes(bufs[err_fd]), timed_out


#: The terminal's signals a sandboxed program must get at their defaults.
TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGQUIT)
_libc = ctypes.CDLL(None, use_errno=True)
_libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
_libc.signal.restype = ctypes.c_void_p


def _default_terminal_signals() -> None:
    # In the forked child, before exec: libc's signal(), since Python's signal.signal may be
    # called from the main thread only and Popen runs from worker threads too.
    for sig in TERMINAL_SIGNALS:
        _libc.signal(int(sig), None)  # NULL is SIG_DFL


def child_setup(then: Callable[[], None] | None = None) -> Callable[[], None] | None:
    """A ``preexec_fn`` that gives a sandboxed program SIGINT and SIGQUIT at their defaults,
    then runs ``then`` (entering a network namespace, say); ``then`` alone when no reset
    is needed.

    An ignored signal stays ignored across ``exec`` and bash cannot un-ignore one it was
    started with: a run started from a script (``tackroom eval … &`` ignores SIGINT) would
    otherwise give the agent a shell on which Ctrl-C does nothing.
    """
    if not any(signal.getsignal(sig) is signal.SIG_IGN for sig in TERMINAL_SIGNALS):
        return then

    def setup() -> None:
        _default_terminal_signals()
        if then is not None:
            then()

    return setup
