"""A run: the grid of (task × harness × policy × seed) episodes, N at a time.

Cells a harness cannot express (the task needs a capability the harness's
action interface lacks) are not run; they are listed apart and reported as
such, never as failures. Finished episodes are appended to the record store
as they complete, in small batches, each episode in one transaction, so a
crash loses at most the episodes in flight — which ``--resume`` re-runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from tackroom.core.episode import Episode, Outcome, episode_id
from tackroom.core.errors import PolicyError
from tackroom.core.policy import Policy, Sampling
from tackroom.core.task import ENV_EXECUTOR, Expert, Suite, Task
from tackroom.harness.spec import HarnessSpec
from tackroom.runner.agent import Gateways
from tackroom.runner.episode import EpisodeSpec, run_episode

if TYPE_CHECKING:
    from tackroom.records.converter import RowConverter

#: How many times an infra-failed episode is retried within the same run.
INFRA_RETRIES = 1
#: The youngest GC generation's threshold while a run is in progress (CPython's is 700).
RUN_GC_THRESHOLD = 100_000
#: Threads per CPU for blocking environment calls (``TACKROOM_ENV_THREADS`` overrides).
ENV_THREADS_PER_CPU = 2


def env_threads() -> int:
    """How many blocking environment calls (sandbox commands, browser actions) run at once.

    ``$TACKROOM_ENV_THREADS`` if set, else :data:`ENV_THREADS_PER_CPU` per CPU this
    process may use. Two per CPU because a step is partly waiting (a sandboxed
    command's I/O, a browser's reply) and partly work in another process: more
    than that would only make the machine's cores take turns.
    """
    setting = os.environ.get("TACKROOM_ENV_THREADS", "").strip()
    if setting:
        if not setting.isdigit() or int(setting) < 1:
            raise ValueError(f"TACKROOM_ENV_THREADS must be a positive integer, not {setting!r}")
        return int(setting)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return ENV_THREADS_PER_CPU * (cpus or 1)


@contextlib.contextmanager
def _gc_for_a_run() -> Iterator[None]:
    """Fewer, cheaper garbage collections while episodes run; as before afterwards.

    With a thousand episodes in flight the interpreter holds millions of live
    objects, and CPython's default thresholds scan them all again and again:
    measured with ``bench/concurrency.py`` (n = 1024), the client's CPU per model
    call went from 0.46 ms to 0.32 ms with collections off, 0.34 ms with the
    threshold below. Objects that exist when the run
    starts (modules, the plan) are frozen out of collections, and the young
    generation is collected every :data:`RUN_GC_THRESHOLD` allocations instead
    of 700. Reference counting still frees almost everything at once; only
    cyclic garbage waits a little longer. Both are undone when the run ends.
    """
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(before[0], RUN_GC_THRESHOLD), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


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


#: Runs with at least this many episodes in flight convert their records in a process
#: of their own (:mod:`tackroom.records.converter`); smaller ones on the writer thread,
#: where the child's start-up would cost more than it saves.
OFFLOAD_AT = 256
#: Most episodes the writer converts and commits together.
WRITE_BATCH = 256


class _Writer:
    """Hands each finished episode to the store, off the event loop, in batches.

    Turning an episode into rows is CPU work (every message of every turn scrubbed
    and JSON-encoded): with a thousand episodes in flight that end together it held
    the event loop for about a second, every model reply waiting behind it
    (``bench/concurrency.py``). So ``add`` puts the episode on a queue and one
    writer thread takes what has queued, up to :data:`WRITE_BATCH` at a time. With
    ``offload`` that thread hands the batch to a :class:`~tackroom.records.converter.RowConverter`
    process and commits the tables it returns (:meth:`RecordStore.append_tables`),
    so the conversion does not even share the run's interpreter lock; without it,
    or once that process is lost, the thread converts itself (:meth:`RecordStore.append`,
    whose background flusher group-commits). A batch the converter refuses (bad
    data) is converted again on the thread, which raises the store's own error.

    Nothing is held back for long — a crash loses at most the episodes in flight and
    the few queued — and ``flush`` drains the queue, then commits the store's queue
    now; an error the store raised (a bad episode) is raised by the next ``add`` or
    by ``flush``. A store without ``append`` / ``flush`` (a test double with only
    ``append_many``) gets one episode per call, at once, on the caller's thread.

    At most ``backlog`` episodes wait in the queue: when the store falls behind,
    ``add`` waits for room (that worker only; the other episodes run on), so
    memory stays proportional to the episodes in flight instead of growing with
    the run's length.
    """

    _DONE = object()

    def __init__(self, store, backlog: int, offload: bool = False) -> None:
        self.store = store
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._room = asyncio.Semaphore(max(1, backlog))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.offload = offload and hasattr(store, "append_tables")
        self._converter: RowConverter | None = None
        #: Episodes whose rows the converter process made (for tests and the bench).
        self.offloaded = 0

    async def add(self, ep: Episode) -> None:
        if self.store is None:
            return
        self._raise()
        if not hasattr(self.store, "append"):
            self.store.append_many([ep])
            return
        if self._thread is None:
            self._loop = asyncio.get_running_loop()
            if self.offload:
                from tackroom.records.converter import ConverterLost, RowConverter
                try:
                    self._converter = RowConverter(self.store.blobs.root)
                except ConverterLost:
                    self.offload = False
            self._thread = threading.Thread(target=self._drain, name="tackroom-writer",
                                            daemon=True)
            self._thread.start()
        await self._room.acquire()
        self._queue.put(ep)

    def _drain(self) -> None:
        assert self._loop is not None
        done = False
        while not done:
            batch: list[Episode] = []
            item = self._queue.get()
            while True:
                if item is self._DONE:
                    done = True
                    break
                batch.append(item)  # type: ignore[arg-type]
                if len(batch) >= WRITE_BATCH:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            # After a failed append the run is failing: the rest is dropped, as a crash would.
            if batch and self._error is None:
                try:
                    self._write(batch)
                except BaseException as e:  # noqa: BLE001 - raised on the run's thread instead
                    self._error = e
            if batch:
                n = len(batch)
                del batch, item  # not held while waiting for the next ones
                with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                    self._loop.call_soon_threadsafe(self._release, n)
        if self._converter is not None:
            self._converter.close()
            self._converter = None

    def _write(self, batch: list[Episode]) -> None:
        if self._converter is not None:
            from tackroom.records.converter import ConverterLost
            try:
                tables = self._converter.convert(batch, time.time())
            except ConverterLost:
                self._converter.close()
                self._converter = None  # this batch and the rest: on this thread
            except ValueError:
                pass  # a bad episode: converted again below, for the store's own error
            else:
                self.store.append_tables(*tables)
                self.offloaded += len(batch)
                return
        for ep in batch:
            self.store.append(ep)

    def _release(self, n: int) -> None:
        for _ in range(n):
            self._room.release()

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def flush(self) -> None:
        if self.store is None:
            return
        if self._thread is not None:
            self._queue.put(self._DONE)
            self._thread.join()
            self._thread = None
        self._raise()
        if hasattr(self.store, "flush"):
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
    """Runs episodes in this process's event loop, on one environment pool of the suite.

    Blocking environment calls run on the executor's own threads, :func:`env_threads`
    of them, started as needed: a thousand episodes may be in flight while only
    that many sandbox or browser steps execute, the rest waiting their turn as
    the others wait on model calls. Their own threads, not asyncio's default
    executor, so that environment steps never queue the loop's other thread work
    (a model server's DNS lookup) behind them. In-process environments (toy)
    never use them.
    """

    def __init__(self, suite: Suite, size: int, threads: int | None = None) -> None:
        self.suite = suite
        self.pool = suite.pool(size)
        self._experts: dict[str, Expert | None] = {}
        self.gateways = Gateways()  # agent harnesses' model gateways, one per policy
        self.env_executor = ThreadPoolExecutor(threads or env_threads(),
                                               thread_name_prefix="tackroom-env")

    async def run(self, cell: EpisodeSpec, run_id: str) -> Episode:
        key = cell.task.key
        if key not in self._experts:
            self._experts[key] = self.suite.expert(cell.task)
        token = ENV_EXECUTOR.set(self.env_executor)
        try:
            return await run_episode(cell, self.pool, run_id, self._experts[key],
                                     self.gateways)
        finally:
            ENV_EXECUTOR.reset(token)

    async def aclose(self) -> None:
        await self.gateways.aclose()
        await self.pool.aclose()
        # Not waiting: a step whose episode timed out may still be running in its thread.
        self.env_executor.shutdown(wait=False, cancel_futures=True)


async def run_cells(cells: Sequence[EpisodeSpec], suite: Suite, run_id: str, *,
                    store=None, concurrency: int = 4,
                    on_episode: Callable[[Episode], None] | None = None,
                    pool_size: int | None = None,
                    executor: Executor | None = None, keep: bool = True,
                    writer: str = "auto") -> list[Episode]:
    """Run the cells, ``concurrency`` at a time; return the final episode of each cell.

    Each finished episode goes to ``store`` (if given) and to ``on_episode``.
    With ``keep=False`` none is kept and ``[]`` is returned: a caller that takes
    them from the store or ``on_episode`` (``tackroom eval``) then holds memory
    for the episodes in flight only, not for every episode of the run.
    An ``infra_error`` episode is recorded and retried up to ``INFRA_RETRIES``
    times as a new attempt. A :class:`PolicyError` stops the run (after the
    finished episodes are written) and is re-raised.

    ``executor`` runs the episodes elsewhere (e.g.
    :func:`tackroom.runner.ray_workers.ray_executor`); the caller owns and
    closes it. Without one, episodes run here on a pool of ``pool_size``
    (default ``concurrency``) environments.

    ``writer`` says where finished episodes become rows: ``"process"`` (a converter
    process of their own, off this interpreter's lock), ``"thread"`` (the writer
    thread), or ``"auto"``: a process from :data:`OFFLOAD_AT` episodes in flight.
    """
    owned = executor is None
    runner: Executor = LocalExecutor(suite, pool_size or concurrency) if executor is None \
        else executor
    queue: asyncio.Queue[EpisodeSpec] = asyncio.Queue()
    for c in cells:
        queue.put_nowait(c)
    offload = {"auto": concurrency >= OFFLOAD_AT, "process": True, "thread": False}.get(writer)
    if offload is None:
        raise ValueError(f"writer must be 'auto', 'process' or 'thread', not {writer!r}")
    recorder = _Writer(store, backlog=concurrency, offload=offload)
    finals: list[Episode] = []

    async def worker() -> None:
        while True:
            try:
                cell = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            while True:
                ep = await runner.run(cell, run_id)
                await recorder.add(ep)
                if on_episode is not None:
                    on_episode(ep)
                if ep.outcome is Outcome.INFRA_ERROR and cell.attempt < INFRA_RETRIES:
                    cell = EpisodeSpec(cell.task, cell.harness, cell.policy, cell.seed,
                                       cell.sampling, cell.attempt + 1)
                    continue
                if keep:
                    finals.append(ep)
                break
            del ep  # not held by this worker while its next episode runs
            # Episodes of in-process suites may never suspend (toy: pure CPU). Yield once
            # per episode, so Ctrl-C / SIGTERM (a task cancellation) and the other workers
            # get their turn.
            await asyncio.sleep(0)

    workers = [asyncio.create_task(worker()) for _ in range(max(1, concurrency))]
    try:
        with _gc_for_a_run():
            await asyncio.gather(*workers)
    except PolicyError as e:
        if isinstance(e.episode, Episode):
            await recorder.add(e.episode)
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        raise
    finally:
        recorder.flush()
        if owned:
            await runner.aclose()
    return finals
