"""A run: the grid of (task × harness × policy × seed) episodes, N at a time.

Cells a harness cannot express (the task needs a capability the harness's
action interface lacks) are not run; they are listed apart and reported as
such, never as failures. Finished episodes are appended to the record store
as they complete, in small batches, each episode in one transaction, so a
crash loses at most the episodes in flight — which ``--resume`` re-runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tackroom.core.episode import Episode, Outcome, episode_id
from tackroom.core.errors import PolicyError
from tackroom.core.policy import Policy, Sampling
from tackroom.core.task import Expert, Suite, Task
from tackroom.harness.spec import HarnessSpec
from tackroom.runner.agent import Gateways
from tackroom.runner.episode import EpisodeSpec, run_episode

#: How many times an infra-failed episode is retried within the same run.
INFRA_RETRIES = 1


@dataclass
class GridPlan:
    """The cells to run and the (task, harness) pairs that cannot be expressed."""

    cells: list[EpisodeSpec]
    inexpressible: list[tuple[Task, HarnessSpec]] = field(default_factory=list)


def plan_grid(tasks: Sequence[Task], harnesses: Sequence[HarnessSpec],
              policies: Sequence[Policy], seeds: Sequence[int], sampling: Sampling) -> GridPlan:
    """Every (task, harness, policy, seed), grouped by task so browsers are reused."""
    plan = GridPlan(cells=[])
    for task in tasks:
        for h in harnesses:
            if not h.can_express(task.requires):
                plan.inexpressible.append((task, h))
                continue
            for p in policies:
                for seed in seeds:
                    plan.cells.append(EpisodeSpec(task, h, p, seed, sampling))
    return plan


def resume_attempts(plan: GridPlan, recorded: dict[str, str]) -> tuple[list[EpisodeSpec], int]:
    """Cells still to run given ``recorded`` (episode id → outcome), with their next attempt.

    A cell whose latest recorded attempt is not ``infra_error`` is done. Returns
    the cells to run and how many were already done.
    """
    todo, done = [], 0
    for cell in plan.cells:
        attempt, last = 0, None
        for a in range(0, 50):
            eid = episode_id(cell.task.key, cell.harness.hash, cell.policy.id,
                             cell.sampling.to_dict(), cell.seed, a)
            if eid not in recorded:
                break
            attempt, last = a, recorded[eid]
        if last is None:
            todo.append(cell)
        elif last == Outcome.INFRA_ERROR.value:
            todo.append(EpisodeSpec(cell.task, cell.harness, cell.policy, cell.seed,
                                    cell.sampling, attempt + 1))
        else:
            done += 1
    return todo, done


class _Writer:
    """Hands each finished episode to the store at once; the store does the batching.

    :meth:`RecordStore.append` converts and queues the episode and returns;
    the store's background flusher group-commits its queue within
    ``commit_interval``. Nothing is held back here, so a crash loses at most
    the episodes in flight and the store's last uncommitted fraction of a
    second. ``flush`` commits the store's queue now. A store without
    ``append`` / ``flush`` (a test double with only ``append_many``) gets
    one episode per call.
    """

    def __init__(self, store) -> None:
        self.store = store

    def add(self, ep: Episode) -> None:
        if self.store is None:
            return
        if hasattr(self.store, "append"):
            self.store.append(ep)
        else:
            self.store.append_many([ep])

    def flush(self) -> None:
        if self.store is not None and hasattr(self.store, "flush"):
            self.store.flush()


class Executor(Protocol):
    """Where the episode of a cell runs: in this process or on Ray actors.

    :func:`run_cells` owns what is common to both — the queue, the infra
    retry, recording through one batched writer, the ``on_episode`` callback —
    so an executor only turns a cell into its finished :class:`Episode`. Like
    :func:`run_episode`, ``run`` never raises for task or infra failures and
    raises :class:`PolicyError` (with ``.episode`` set) when the run must stop.
    """

    async def run(self, cell: EpisodeSpec, run_id: str) -> Episode: ...

    async def aclose(self) -> None: ...


class LocalExecutor:
    """Runs episodes in this process's event loop, on one environment pool of the suite."""

    def __init__(self, suite: Suite, size: int) -> None:
        self.suite = suite
        self.pool = suite.pool(size)
        self._experts: dict[str, Expert | None] = {}
        self.gateways = Gateways()  # agent harnesses' model gateways, one per policy

    async def run(self, cell: EpisodeSpec, run_id: str) -> Episode:
        key = cell.task.key
        if key not in self._experts:
            self._experts[key] = self.suite.expert(cell.task)
        return await run_episode(cell, self.pool, run_id, self._experts[key], self.gateways)

    async def aclose(self) -> None:
        await self.gateways.aclose()
        await self.pool.aclose()


async def run_cells(cells: Sequence[EpisodeSpec], suite: Suite, run_id: str, *,
                    store=None, concurrency: int = 4,
                    on_episode: Callable[[Episode], None] | None = None,
                    pool_size: int | None = None,
                    executor: Executor | None = None) -> list[Episode]:
    """Run the cells, ``concurrency`` at a time; return the final episode of each cell.

    Each finished episode goes to ``store`` (if given) and to ``on_episode``.
    An ``infra_error`` episode is recorded and retried up to ``INFRA_RETRIES``
    times as a new attempt. A :class:`PolicyError` stops the run (after the
    finished episodes are written) and is re-raised.

    ``executor`` runs the episodes elsewhere (e.g.
    :func:`tackroom.runner.ray_workers.ray_executor`); the caller owns and
    closes it. Without one, episodes run here on a pool of ``pool_size``
    (default ``concurrency``) environments.
    """
    owned = executor is None
    runner: Executor = LocalExecutor(suite, pool_size or concurrency) if executor is None \
        else executor
    queue: asyncio.Queue[EpisodeSpec] = asyncio.Queue()
    for c in cells:
        queue.put_nowait(c)
    writer = _Writer(store)
    finals: list[Episode] = []

    async def worker() -> None:
        while True:
            try:
                cell = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            while True:
                ep = await runner.run(cell, run_id)
                writer.add(ep)
                if on_episode is not None:
                    on_episode(ep)
                if ep.outcome is Outcome.INFRA_ERROR and cell.attempt < INFRA_RETRIES:
                    cell = EpisodeSpec(cell.task, cell.harness, cell.policy, cell.seed,
                                       cell.sampling, cell.attempt + 1)
                    continue
                finals.append(ep)
                break
            # Episodes of in-process suites may never suspend (toy: pure CPU). Yield once
            # per episode, so Ctrl-C / SIGTERM (a task cancellation) and the other workers
            # get their turn.
            await asyncio.sleep(0)

    workers = [asyncio.create_task(worker()) for _ in range(max(1, concurrency))]
    try:
        await asyncio.gather(*workers)
    except PolicyError as e:
        if isinstance(e.episode, Episode):
            writer.add(e.episode)
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        raise
    finally:
        writer.flush()
        if owned:
            await runner.aclose()
    return finals
