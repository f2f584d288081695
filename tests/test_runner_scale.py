"""The runner with many episodes in flight: threads, memory and environment slots.

Structural checks only (how many threads, which episodes are still alive, how
many environment calls ran at once), never a rate or a memory figure: those are
``bench/concurrency.py``'s.
"""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
import weakref
from pathlib import Path

import pytest

from tackroom.core import Outcome, Sampling
from tackroom.harness.spec import load_harness
from tackroom.policies import make_policy
from tackroom.policies.openai_policy import OpenAIPolicy
from tackroom.runner import grid
from tackroom.runner.grid import plan_grid, run_cells
from tackroom.suites import get_suite

TOY = get_suite("toy")
TASK = next(t for t in TOY.tasks() if t.id == "click-button")

_REPLY = json.dumps({
    "id": "c", "object": "chat.completion", "created": 0, "model": "M",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "Let me look."}}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
}).encode()


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Keep-alive HTTP/1.1 on this event loop (no thread): every request gets ``_REPLY``."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            await asyncio.sleep(0.02)  # a model takes a while: every episode stays in flight
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\n\r\n" % len(_REPLY) + _REPLY)
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


class DropStore:
    """A store that takes episodes through the writer thread, as the real one does,
    and takes its time over each (``slow`` seconds), as converting to rows does."""

    def __init__(self, slow: float = 0.0) -> None:
        self.slow = slow
        self.n = 0

    def append(self, ep) -> None:
        time.sleep(self.slow)
        self.n += 1

    def flush(self) -> None:
        return None


def test_256_openai_episodes_in_flight_use_no_thread_per_episode():
    n = 256
    before = threading.active_count()
    most = [0]
    seen: list = []

    async def go():
        server = await asyncio.start_server(_serve, "127.0.0.1", 0, backlog=1024)
        port = server.sockets[0].getsockname()[1]
        policy = OpenAIPolicy("M", base_url=f"http://127.0.0.1:{port}/v1", api_key="k",
                              max_concurrency=n, client="lean")

        async def sample():
            while True:
                most[0] = max(most[0], threading.active_count())
                await asyncio.sleep(0.01)

        sampler = asyncio.create_task(sample())
        try:
            plan = plan_grid([TASK], [load_harness("som-tools")], [policy], range(n),
                             Sampling())
            return await run_cells(plan.cells, TOY, "scale", store=DropStore(),
                                   concurrency=n, on_episode=seen.append)
        finally:
            sampler.cancel()
            await policy.aclose()
            server.close()

    eps = asyncio.run(go())
    assert len(eps) == n and len(seen) == n
    # Five malformed turns each: every episode talked to the server.
    assert all(e.outcome is Outcome.FAILURE and e.n_turns == 5 for e in eps)
    # The writer thread, nothing per episode (a thread each would be 256 more).
    assert most[0] <= before + 2, most[0]


def test_finished_episodes_are_let_go_when_not_kept():
    alive: list[weakref.ref] = []
    most_alive = [0]
    concurrency = 8

    def on_episode(ep) -> None:
        alive.append(weakref.ref(ep))
        most_alive[0] = max(most_alive[0], sum(r() is not None for r in alive))

    plan = plan_grid([TASK], [load_harness("som-tools")], [make_policy("expert")], range(200),
                     Sampling())
    store = DropStore(slow=0.002)  # slower than the episodes finish: the queue fills
    out = asyncio.run(run_cells(plan.cells, TOY, "scale", store=store,
                                concurrency=concurrency, on_episode=on_episode, keep=False))
    assert out == [] and len(alive) == 200 and store.n == 200
    # Not kept by the runner, and not piling up for a slow store: at most the queue's
    # room (``concurrency``), the one the writer has in hand and the one just finished.
    assert most_alive[0] <= concurrency + 2, most_alive[0]
    gc.collect()
    assert sum(r() is not None for r in alive) == 0


def test_kept_episodes_are_returned():
    plan = plan_grid([TASK], [load_harness("som-tools")], [make_policy("expert")], range(6),
                     Sampling())
    eps = asyncio.run(run_cells(plan.cells, TOY, "scale", concurrency=3))
    assert sorted(e.seed for e in eps) == list(range(6))


class BlockingToy:
    """The toy suite with environments that block: each call sleeps, as a sandbox's would."""

    name = "toy"

    def __init__(self, sleep: float = 0.02) -> None:
        self.sleep = sleep
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.threads: set[str] = set()

    def expert(self, task):
        return TOY.expert(task)

    def pool(self, size=None):
        from tackroom.core.task import SimplePool

        return SimplePool(self.make_env, size or 1)

    def make_env(self, task):
        env = TOY.make_env(task)
        env.blocking = True
        suite = self

        def timed(fn):
            def call(*args):
                with suite.lock:
                    suite.running += 1
                    suite.most = max(suite.most, suite.running)
                    suite.threads.add(threading.current_thread().name)
                try:
                    time.sleep(suite.sleep)
                    return fn(*args)
                finally:
                    with suite.lock:
                        suite.running -= 1
            return call

        env.reset, env.step, env.close = timed(env.reset), timed(env.step), timed(env.close)
        return env


def test_blocking_environment_calls_run_on_the_runs_bounded_threads(monkeypatch):
    monkeypatch.setenv("TACKROOM_ENV_THREADS", "3")
    suite = BlockingToy()
    plan = plan_grid([TASK], [load_harness("som-tools")], [make_policy("expert")], range(24),
                     Sampling())
    eps = asyncio.run(run_cells(plan.cells, suite, "scale", concurrency=24))
    assert len(eps) == 24 and all(e.success for e in eps)
    # 24 episodes in flight, never more than 3 environment calls at once, close included,
    # and all of them on the run's own threads (not asyncio's default executor).
    assert 1 <= suite.most <= 3
    assert suite.threads and all(t.startswith("tackroom-env") for t in suite.threads)


def test_env_threads_setting(monkeypatch):
    monkeypatch.setenv("TACKROOM_ENV_THREADS", "7")
    assert grid.env_threads() == 7
    monkeypatch.delenv("TACKROOM_ENV_THREADS")
    assert grid.env_threads() >= grid.ENV_THREADS_PER_CPU
    monkeypatch.setenv("TACKROOM_ENV_THREADS", "0")
    with pytest.raises(ValueError, match="TACKROOM_ENV_THREADS"):
        grid.env_threads()


class OneAtATime(BlockingToy):
    """A pool of one environment, as a pool of browsers is bounded: the rest wait for it."""

    def pool(self, size=None):
        import contextlib

        inner = super().pool(size)
        sem = asyncio.Semaphore(1)

        class Pool:
            size = 1

            @contextlib.asynccontextmanager
            async def acquire(self, task):
                async with sem, inner.acquire(task) as env:
                    yield env

            async def aclose(self):
                return None

        return Pool()


def test_waiting_for_an_environment_is_not_the_episodes_wall_time(tmp_path: Path):
    # Each episode holds the only environment for ~0.15 s (reset, a step, close: 0.05 s
    # each); twelve of them queue for ~1.8 s, past the 1 s wall budget, which must not
    # count the queue.
    h = tmp_path / "h.toml"
    h.write_text('extends = "som-tools"\n[budget]\nwall_seconds = 1.0\n')
    suite = OneAtATime(sleep=0.05)
    plan = plan_grid([TASK], [load_harness(str(h))], [make_policy("expert")], range(12),
                     Sampling())
    eps = asyncio.run(run_cells(plan.cells, suite, "scale", concurrency=12))
    assert [e.outcome for e in eps] == [Outcome.SUCCESS] * 12, [e.error for e in eps]


def test_miniwob_pool_never_asks_for_more_browsers_than_memory_holds(monkeypatch):
    pytest.importorskip("selenium")
    import tackroom.suites.miniwob as miniwob
    import tackroom.suites.miniwob.pool as pool
    import tackroom.suites.reaper as reaper

    monkeypatch.setattr(reaper, "reap_orphans", lambda: None)
    monkeypatch.setattr(pool, "browsers_that_fit", lambda: 3)
    suite = miniwob.make_suite()
    assert suite.pool(1000).size == 3
    assert suite.pool(2).size == 2
