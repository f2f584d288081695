"""A pool of MiniWoB++ browsers: at most ``size`` Chromes, reused across episodes and tasks."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator

import tackroom.suites.reaper as reaper
from tackroom.core.errors import InfraError
from tackroom.core.task import Task
from tackroom.suites.miniwob.env import MiniWoBEnv

#: Rough resident memory of one headless Chrome running a MiniWoB++ page.
BROWSER_GB = 0.5
MAX_DEFAULT_SIZE = 8


def _available_gb() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return 4.0


def browsers_that_fit() -> int:
    """Browsers the memory available now holds: memory / :data:`BROWSER_GB`, at least 1."""
    return max(1, int(_available_gb() / BROWSER_GB))


def default_pool_size() -> int:
    """Browsers this machine can run side by side: min(CPUs, memory / 0.5 GB, 8), at least 1."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cpus or 1, browsers_that_fit(), MAX_DEFAULT_SIZE))


class MiniWoBPool:
    """Hands out :class:`MiniWoBEnv` browsers, at most ``size`` at a time.

    A released browser stays open. ``acquire(task)`` prefers an idle browser
    already on ``task``'s page, then the least recently used idle one (which
    navigates to the new task at its next ``reset``, about 0.1 s, instead of
    a 2 s Chrome start), and starts a new browser only while fewer than
    ``size`` exist. A browser that crashed is replaced when its environment
    next resets; the episode that hit the crash got an ``InfraError``.
    """

    def __init__(self, size: int | None = None, *, with_html: bool = True,
                 wait_ms: float = 0.0) -> None:
        self.size = size if size is not None else default_pool_size()
        if self.size < 1:
            raise ValueError("pool size must be at least 1")
        self.with_html = with_html
        self.wait_ms = wait_ms
        self._idle: list[MiniWoBEnv] = []  # least recently used first
        self._envs: list[MiniWoBEnv] = []
        self._retired_starts = 0
        self._closed = False
        self._sem: asyncio.Semaphore | None = None
        self._sem_loop: asyncio.AbstractEventLoop | None = None
        # A new pool is the cheap moment to clear up after runs that were
        # killed outright (SIGKILL): their leftover browsers and directories.
        reaper.reap_orphans()

    # -- accounting (tests, reports) -------------------------------------------

    @property
    def browsers(self) -> int:
        """Environments (each at most one browser) the pool holds now."""
        return len(self._envs)

    @property
    def starts(self) -> int:
        """Chrome starts so far, restarts after crashes included."""
        return self._retired_starts + sum(env.starts for env in self._envs)

    # -- the EnvironmentPool contract ------------------------------------------

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._sem is None or self._sem_loop is not loop:
            self._sem, self._sem_loop = asyncio.Semaphore(self.size), loop
        return self._sem

    @contextlib.asynccontextmanager
    async def acquire(self, task: Task) -> AsyncIterator[MiniWoBEnv]:
        """An environment for ``task``; ``reset`` it (from a worker thread) to start."""
        if self._closed:
            raise InfraError("MiniWoB++ pool used after aclose()", f"miniwob/{task.id}",
                             "create a new pool")
        async with self._semaphore():
            env = self._take(task)
            try:
                yield env
            finally:
                await self._release(env)

    def _take(self, task: Task) -> MiniWoBEnv:
        self._idle = [e for e in self._idle if not e.closed]
        for env in self._idle:  # a browser already on this task's page
            if env.task_id == task.id and env.alive():
                self._idle.remove(env)
                return env
        if self._idle:
            # Navigating an idle browser (~0.1 s) beats starting Chrome (~2 s).
            env = self._idle.pop(0)  # least recently used
            env.retarget(task)
            return env
        env = MiniWoBEnv(task, with_html=self.with_html, wait_ms=self.wait_ms)
        self._envs.append(env)
        return env

    async def _release(self, env: MiniWoBEnv) -> None:
        if env.closed or self._closed:
            await asyncio.to_thread(env.close)
            self._forget(env)
            return
        if env.broken:
            # Kill the dead browser now, so no half-dead Chrome lingers; the
            # environment starts a fresh one at its next reset.
            await asyncio.to_thread(env.kill_browser)
        self._idle.append(env)

    def _forget(self, env: MiniWoBEnv) -> None:
        if env in self._envs:
            self._envs.remove(env)
            self._retired_starts += env.starts
        if env in self._idle:
            self._idle.remove(env)

    async def aclose(self) -> None:
        """Quit every browser. Idempotent."""
        self._closed = True
        envs, self._idle = list(self._envs), []
        await asyncio.gather(*(asyncio.to_thread(env.close) for env in envs))
        for env in envs:
            self._forget(env)

    def __repr__(self) -> str:
        return f"MiniWoBPool(size={self.size}, browsers={self.browsers}, starts={self.starts})"
