"""No browser outlives the tackroom process that started it, however that process ends.

Three layers, each covering what the one before cannot:

1. **Orderly exit** (``close``, Ctrl-C, SIGTERM, interpreter exit): ``env._reap``
   kills the browser's process group and deletes its directory.
2. **Sudden death** (SIGKILL, a crash): chromedriver is forked with
   ``PR_SET_PDEATHSIG(SIGKILL)`` (Linux), so the kernel kills it with us, and
   Chrome, which talks to it over ``--remote-debugging-pipe``, exits when that
   pipe closes. The kernel sends the signal when the *thread* that forked the
   child exits, not the process, so every chromedriver is forked by
   :func:`launch`'s one thread, which lives as long as the process; the
   runner's worker threads (``asyncio.to_thread``) end with their event loop
   while a pool's browsers may live on.
3. **Whatever still survives** (a Chrome that ignored the closed pipe, the
   directories a killed run leaves): every browser directory records its
   owner (pid and start time, which survives pid reuse) and its process
   group; :func:`reap_orphans`, run when a pool is made and at a process's
   first browser start, kills the groups of dead owners and deletes their
   directories. It kills a group only if one of its processes still carries
   that directory in its command line or ``TMPDIR`` (so never an unrelated
   group that reused the id), and never touches a live owner's directory, nor
   one written in another pid namespace or boot, where its pid means nothing.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import os
import queue
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from tackroom.core import owner

T = TypeVar("T")

#: Prefix of every browser's temporary directory (profile and TMPDIR).
PREFIX = "tackroom-chrome-"
#: The file in that directory naming its owner: ``{"pid", "start", "where", "pgid"}``.
OWNER_FILE = owner.OWNER_FILE

_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_prctl = _load_prctl()


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` giving the child ``PR_SET_PDEATHSIG(SIGKILL)``; ``None`` off Linux."""
    if _prctl is None:
        return None
    parent, sigkill = os.getpid(), int(signal.SIGKILL)

    def preexec() -> None:
        _prctl(_PR_SET_PDEATHSIG, sigkill)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), sigkill)

    return preexec


class _Launcher:
    """One daemon thread, never stopped, that runs the calls forking browsers (see layer 2)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def call(self, fn: Callable[[], T]) -> T:
        if threading.current_thread() is self._thread:
            return fn()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():  # first use, or after fork()
                self._jobs = queue.SimpleQueue()
                self._thread = threading.Thread(target=self._serve, args=(self._jobs,),
                                                name="tackroom-browser-launcher", daemon=True)
                self._thread.start()
            jobs = self._jobs
        done: concurrent.futures.Future[T] = concurrent.futures.Future()
        jobs.put((fn, done))
        return done.result()

    @staticmethod
    def _serve(jobs: queue.SimpleQueue[Any]) -> None:
        while True:
            fn, done = jobs.get()
            try:
                done.set_result(fn())
            except BaseException as exc:  # handed to the caller
                done.set_exception(exc)


launch = _Launcher().call


def record_owner(base: str, pgid: int | None = None) -> None:
    """Write (atomically) that this process owns ``base`` and its browser's group ``pgid``."""
    owner.record_owner(base, pgid=pgid)


def make_browser_dir() -> str:
    """A fresh ``tackroom-chrome-*`` directory, its owner recorded before anything starts."""
    base = tempfile.mkdtemp(prefix=PREFIX)
    record_owner(base)
    return base


def remove_dir(path: str) -> None:
    """Delete ``path``, retrying briefly: processes killed a moment ago may still write."""
    for _ in range(20):
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            return
        time.sleep(0.05)


def reap(leftovers: dict[str, Any]) -> None:
    """Kill a browser's process group and delete its directory (``leftovers``: ``pgid``
    and ``dir``, as the browser recorded them when it started).

    Runs from a browser's ``kill``, or through ``weakref.finalize`` when it is garbage-
    collected or the interpreter exits without closing it, so no Chrome outlives the
    process that started it. Holds no reference to the browser.
    """
    pgid = leftovers.pop("pgid", None)
    if pgid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    path = leftovers.pop("dir", None)
    if path:
        remove_dir(path)


def _group_is_ours(pgid: int, base: str) -> bool:
    """Whether a live process in group ``pgid`` belongs to the browser of ``base``."""
    marker = os.fsencode(base) + b"/"  # Chrome: --user-data-dir=BASE/profile; all: TMPDIR=BASE/tmp
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return False
    for pid in pids:
        try:
            if os.getpgid(pid) != pgid:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker in f.read():
                    return True
            with open(f"/proc/{pid}/environ", "rb") as f:
                if b"TMPDIR=" + marker in f.read():
                    return True
        except OSError:
            continue
    return False


def reap_orphans(root: str | None = None) -> list[str]:
    """Kill and delete the browsers of dead tackroom processes in ``root`` (the temp dir).

    Returns the directories removed. Directories of live owners, of other
    users and without an owner file (an older tackroom) are left alone.
    """
    root = root or tempfile.gettempdir()
    removed: list[str] = []
    uid = os.getuid() if hasattr(os, "getuid") else None
    try:
        entries = [e for e in os.scandir(root) if e.name.startswith(PREFIX)]
    except OSError:
        return removed
    for entry in entries:
        try:
            if not entry.is_dir(follow_symlinks=False) or uid not in (None, entry.stat().st_uid):
                continue  # another user's: not ours to judge (and unreadable anyway)
        except OSError:
            continue
        dead = owner.orphaned(entry.path)
        if dead is None:
            continue
        pgid = dead.get("pgid")
        if isinstance(pgid, int) and pgid > 1 and _group_is_ours(pgid, entry.path):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        remove_dir(entry.path)
        removed.append(entry.path)
    return removed
