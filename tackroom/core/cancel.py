"""Stopping a run from outside: tackroom's own cancellation path for SIGTERM, SIGHUP and SIGINT.

A run in progress is an asyncio task started by :func:`tackroom.core.aio.run_sync`, which
registers it here. :func:`install` (the ``tackroom`` command does, once) makes SIGTERM,
SIGHUP and SIGINT — unless SIGINT was inherited as ignored — call :func:`request`, which
cancels every registered task: the runner then records the episodes that finished, marks
the run ``interrupted`` (resumable), and :func:`~tackroom.core.aio.run_sync` raises
:class:`Cancelled`, a ``KeyboardInterrupt``, exactly as Ctrl-C does.

Not the SIGINT path asyncio installs: that one exists only while SIGINT is at its default,
and a background job started by a script (``tackroom eval … &``) inherits SIGINT ignored,
so a SIGTERM re-raised as SIGINT did nothing there. Outside a run (planning, a synchronous
training loop) a signal raises :class:`Cancelled` at once; a second signal while a
cancellation is under way does too, for a run that does not stop.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["Cancelled", "install", "registered", "request", "requested"]

#: The signals :func:`install` routes to :func:`request` (SIGINT only when not ignored).
SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)

_lock = threading.Lock()
_running: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Task[object]]] = {}
_requested: int | None = None


class Cancelled(KeyboardInterrupt):
    """A run stopped by a signal: a ``KeyboardInterrupt`` that knows which signal it was."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """The shell's status for a process stopped by this signal: 128 + its number."""
        return 128 + self.signum


def requested() -> int | None:
    """The signal that asked this process to stop, or ``None``."""
    return _requested


def request(signum: int = signal.SIGINT) -> bool:
    """Ask every registered run to stop; ``True`` if one was running (and is now cancelled).

    Safe from a signal handler and from any thread: tasks are cancelled in their own loop.
    """
    global _requested
    with _lock:
        _requested = signum
        running = list(_running.values())
    for loop, task in running:
        if not loop.is_closed():
            loop.call_soon_threadsafe(task.cancel)
    return bool(running)


@contextmanager
def registered(task: asyncio.Task[object]) -> Iterator[None]:
    """While the block runs, :func:`request` cancels ``task`` (the main task of a run).

    A stop requested before the task was registered cancels it at once.
    """
    loop = task.get_loop()
    with _lock:
        _running[id(task)] = (loop, task)
        early = _requested is not None
    if early:
        task.cancel()
    try:
        yield
    finally:
        with _lock:
            _running.pop(id(task), None)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    first = _requested is None
    if not request(signum) or not first:
        raise Cancelled(signum)


def install() -> None:
    """Route SIGTERM, SIGHUP and SIGINT (unless ignored) to :func:`request`; main thread only.

    SIGINT inherited as ignored stays ignored (a background job is not stopped by the
    terminal's Ctrl-C), while SIGTERM and SIGHUP stop it whatever SIGINT's disposition.
    """
    for sig in SIGNALS:
        if sig == signal.SIGINT and signal.getsignal(sig) is signal.SIG_IGN:
            continue
        signal.signal(sig, _on_signal)
