"""Rollout workers on Ray: a run's episodes play out on Ray actors, the driver records them.

``tackroom eval --ray`` (a local cluster sized to this machine) or
``--ray-address ADDR`` (an existing cluster) hands the episodes of the grid to
a few :class:`RolloutWorker` actors. Each actor owns

* its own environment pool of the suite (browsers and sandboxes live in the
  actor's process, next to the episodes that use them), and
* its own instance of every policy: plain-data policies (``expert``,
  ``replay``) are sent as they are; the others (``openai:``, ``hf:``) are
  rebuilt on the actor from their spec string, because HTTP clients and
  model weights do not travel — and a checkpoint is better loaded where it
  runs;
* its own model gateways (:class:`~tackroom.runner.agent.Gateways`, one per
  policy) for agent harnesses: the CLIs an actor runs in its sandboxes reach
  a gateway in the actor's process over its Unix socket, in front of the
  actor's instance of the policy. The CLIs come from the node's install cache
  (``~/.cache/tackroom/agents``; installed once under its lock, whichever
  process asks first).

An actor runs the ordinary episode loop (:func:`~tackroom.runner.episode.run_episode`)
and returns each finished :class:`~tackroom.core.episode.Episode` to the
driver. The driver plugs :class:`RayExecutor` into
:func:`~tackroom.runner.grid.run_cells`, so the queue, the infra retry, the
batched writer and the progress callback are the very code of a local run:
one process writes the record store (DuckDB admits one writer anyway), and
``--resume`` finds exactly what a local run would have left.

A worker that dies (killed, out of memory, node lost) costs the episodes it
was running: each comes back as ``infra_error`` — retried once as a new
attempt, like a browser crash — and a fresh actor takes the dead one's place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from tackroom.core import errors, registry
from tackroom.core.episode import Episode, Outcome
from tackroom.core.errors import ConfigError, PolicyError, TackroomError
from tackroom.core.policy import Policy, Sampling
from tackroom.core.task import Expert, Suite, Task
from tackroom.harness.spec import HarnessSpec
from tackroom.runner.agent import Gateways
from tackroom.runner.episode import EpisodeSpec, run_episode

__all__ = ["RayExecutor", "RolloutWorker", "PolicyRecipe", "check_ray", "connect",
           "policy_recipes", "ray_executor", "require_ray"]

#: Policy kinds whose instances are plain data and are sent to the actors as they are.
#: ``replay`` must be: it reads the record store, which the driver holds open for writing.
SHIPPED_KINDS = ("expert", "replay")

#: Seconds an actor gets to close its pool and policies before it is killed.
CLOSE_TIMEOUT = 15.0


def require_ray() -> ModuleType:
    """The ``ray`` module, or one clear line saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError("Ray is not installed", "--ray",
                          "pip install 'tackroom[scale]'") from None
    return ray


def check_ray(address: str | None = None) -> None:
    """Before a run starts: Ray is installed and, when given, ``address`` answers.

    ``ray.init`` retries an unreachable address for minutes, so a typo would
    look like a hang; a plain TCP connect says at once.
    """
    require_ray()
    if not address or address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"cannot read the Ray address {address!r}", "--ray-address",
                          "write HOST:PORT, ray://HOST:PORT or auto")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as e:
        raise ConfigError(f"no Ray cluster answers at {address} ({e.strerror or e})",
                          "--ray-address", "start one with `ray start --head`, or use --ray "
                          "alone for a local cluster") from None


# ---------------------------------------------------------------------------
# What travels to an actor
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class PolicyRecipe:
    """How an actor gets its own instance of one of the run's policies.

    Either ``instance`` (plain data, pickled as is) or ``spec`` + ``opts``,
    which the actor passes to :func:`tackroom.policies.make_policy`.
    """

    policy_id: str
    spec: str | None = None
    opts: dict[str, Any] = field(default_factory=dict)
    instance: Policy | None = None

    def build(self) -> Policy:
        if self.instance is not None:
            return self.instance
        from tackroom.policies import make_policy

        assert self.spec is not None
        return make_policy(self.spec, **self.opts)


def policy_recipes(policies: Sequence[Policy], specs: Sequence[str],
                   opts: dict[str, Any] | None = None) -> list[PolicyRecipe]:
    """One recipe per driver-side policy (``specs[i]`` is the spec ``policies[i]`` came from)."""
    if len(policies) != len(specs):
        raise ValueError("policies and specs must be parallel lists")
    out = []
    for p, spec in zip(policies, specs, strict=True):
        kind = spec.partition(":")[0]
        if kind in SHIPPED_KINDS:
            out.append(PolicyRecipe(p.id, instance=p))
        else:
            out.append(PolicyRecipe(p.id, spec=spec, opts=dict(opts or {})))
    return out


@dataclass(frozen=True)
class _Job:
    """One cell, with the policy named by its index in the run's policy list."""

    task: Task
    harness: HarnessSpec
    policy: int
    seed: int
    sampling: Sampling
    attempt: int
    run_id: str
    #: The registry parts the harness names (renderer, interface, parser), so that parts
    #: registered at run time in the driver (custom Python ones) exist on the actor too.
    parts: tuple[tuple[str, str, Any], ...] = ()


def _harness_parts(h: HarnessSpec) -> tuple[tuple[str, str, Any], ...]:
    named = (("renderer", h.observation["renderer"]), ("interface", h.actions["interface"]),
             ("parser", h.actions["parser"]))
    return tuple((kind, name, registry.get(kind, name)) for kind, name in named)


def _register_parts(parts: tuple[tuple[str, str, Any], ...]) -> None:
    for kind, name, obj in parts:
        if not registry.has(kind, name):
            registry.register(kind, name)(obj)


@dataclass
class _Result:
    """A finished episode, and the error that must stop the run (``PolicyError``), if any."""

    episode: Episode | None = None
    error: tuple[str, str, str, str] | None = None  # (class name, what, where, fix)


def _pack(e: TackroomError) -> tuple[str, str, str, str]:
    return type(e).__name__, e.what, e.where, e.fix


def _unpack(packed: tuple[str, str, str, str]) -> TackroomError:
    """The driver-side copy of an error raised on an actor (same class, same line)."""
    name, what, where, fix = packed
    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, TackroomError)):
        cls = TackroomError
    return cls(what, where, fix)


# ---------------------------------------------------------------------------
# The actor
# ---------------------------------------------------------------------------

class RolloutWorker:
    """A Ray actor's state: one environment pool and one instance of each policy.

    Plain class; :class:`RayExecutor` turns it into an async actor whose
    ``max_concurrency`` is ``slots``, so one actor runs ``slots`` episodes at
    a time on its own event loop, like a local run does.
    """

    def __init__(self, suite: Suite, recipes: list[PolicyRecipe], slots: int) -> None:
        self.suite = suite
        self.recipes = recipes
        self.slots = max(1, slots)
        self.pool: Any = None
        self.policies: list[Policy] = []
        self.experts: dict[str, Expert | None] = {}
        #: Agent harnesses' model gateways, one per policy, in this process (made on first use).
        self.gateways: Gateways | None = None
        self._lock = asyncio.Lock()

    async def _ensure_setup(self) -> None:
        # Lazily, under a lock: the first call of any method builds the pool and the
        # policies, so a replacement actor needs no separate start-up handshake.
        async with self._lock:
            if self.pool is None:
                policies = [r.build() for r in self.recipes]
                self.pool = self.suite.pool(self.slots)
                self.policies = policies
                self.gateways = Gateways()

    async def setup(self) -> list[str] | tuple[str, str, str, str]:
        """Build pool and policies; their ids (to check against the driver's) or the error."""
        try:
            await self._ensure_setup()
        except TackroomError as e:
            return _pack(e)
        return [p.id for p in self.policies]

    async def run(self, job: _Job) -> _Result:
        """Run one episode with :func:`run_episode`, exactly as a local run would."""
        try:
            await self._ensure_setup()
        except TackroomError as e:
            return _Result(error=_pack(e))
        _register_parts(job.parts)
        key = job.task.key
        if key not in self.experts:
            self.experts[key] = self.suite.expert(job.task)
        cell = EpisodeSpec(job.task, job.harness, self.policies[job.policy], job.seed,
                           job.sampling, job.attempt)
        try:
            return _Result(await run_episode(cell, self.pool, job.run_id, self.experts[key],
                                             self.gateways))
        except PolicyError as e:
            ep = e.episode if isinstance(e.episode, Episode) else None
            return _Result(ep, _pack(e))

    async def close(self) -> None:
        """Close the gateways, the pool (browsers) and the policies (connections)."""
        if self.gateways is not None:
            await self.gateways.aclose()
        if self.pool is not None:
            await self.pool.aclose()
        for p in self.policies:
            with contextlib.suppress(Exception):
                await p.aclose()


# ---------------------------------------------------------------------------
# The driver side
# ---------------------------------------------------------------------------

def _lost_episode(cell: EpisodeSpec, run_id: str, why: str) -> Episode:
    """The record of an episode whose worker died: an infra error, retried like any other."""
    now = time.time()
    return Episode(
        episode_id=cell.episode_id, run_id=run_id, task=cell.task.key, suite=cell.task.suite,
        harness=cell.harness.name, harness_hash=cell.harness.hash, policy=cell.policy.id,
        seed=cell.seed, attempt=cell.attempt, sampling=cell.sampling.to_dict(),
        outcome=Outcome.INFRA_ERROR, error=f"Ray rollout worker lost: {why}",
        started_at=now, ended_at=now)


class RayExecutor:
    """Runs cells on ``workers`` Ray actors, ``slots`` episodes each (see :func:`ray_executor`).

    Implements :class:`tackroom.runner.grid.Executor`.
    """

    def __init__(self, ray: ModuleType, suite: Suite, policies: Sequence[Policy],
                 recipes: Sequence[PolicyRecipe], workers: int, slots: int) -> None:
        self.ray = ray
        self.suite = suite
        self.recipes = list(recipes)
        self.policy_index = {id(p): i for i, p in enumerate(policies)}
        self.workers = max(1, workers)
        self.slots = max(1, slots)
        self.actors: list[Any] = []
        self._free: asyncio.Queue[int] | None = None
        self._parts: dict[str, tuple[tuple[str, str, Any], ...]] = {}
        self._actor_cls = ray.remote(RolloutWorker)

    def _spawn(self) -> Any:
        return self._actor_cls.options(num_cpus=1, max_concurrency=self.slots).remote(
            self.suite, self.recipes, self.slots)

    async def _setup(self, actor: Any) -> None:
        got = await actor.setup.remote()
        if isinstance(got, tuple):
            raise _unpack(got)
        want = [r.policy_id for r in self.recipes]
        if list(got) != want:
            raise ConfigError(f"a Ray worker built policies {got}, the driver {want}", "--ray",
                              "use the same tackroom version and model files on every node")

    async def start(self) -> None:
        """Start the actors and wait until each has built its pool and policies."""
        try:
            self.actors = [self._spawn() for _ in range(self.workers)]
        except Exception as e:  # pickling the suite or a policy failed
            raise ConfigError(f"cannot send the suite or policies to Ray workers: {e}", "--ray",
                              "run without --ray, or use policies given by spec") from None
        await asyncio.gather(*(self._setup(a) for a in self.actors))
        self._free = asyncio.Queue()
        for _ in range(self.slots):
            for i in range(self.workers):
                self._free.put_nowait(i)

    async def run(self, cell: EpisodeSpec, run_id: str) -> Episode:
        if self._free is None:
            raise RuntimeError("RayExecutor.start() was not awaited")
        index = self.policy_index.get(id(cell.policy))
        if index is None:
            raise ValueError(f"policy {cell.policy.id!r} is not one of the executor's policies")
        parts = self._parts.get(cell.harness.hash)
        if parts is None:
            parts = self._parts[cell.harness.hash] = _harness_parts(cell.harness)
        job = _Job(cell.task, cell.harness, index, cell.seed, cell.sampling, cell.attempt, run_id,
                   parts)
        i = await self._free.get()
        actor = self.actors[i]
        try:
            result: _Result = await actor.run.remote(job)
        except self.ray.exceptions.RayActorError as e:
            if self.actors[i] is actor:  # the first to notice replaces it
                self.actors[i] = self._spawn()
            return _lost_episode(cell, run_id, _first_line(e))
        except self.ray.exceptions.RayError as e:
            return _lost_episode(cell, run_id, _first_line(e))
        finally:
            self._free.put_nowait(i)
        if result.error is not None:
            err = _unpack(result.error)
            if isinstance(err, PolicyError):
                err.episode = result.episode
            raise err
        assert result.episode is not None
        return result.episode

    async def aclose(self) -> None:
        """Let each actor close its pool and policies, then end it."""
        ray = self.ray

        async def close(actor: Any) -> None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(actor.close.remote(), CLOSE_TIMEOUT)
            with contextlib.suppress(Exception):
                ray.kill(actor)

        await asyncio.gather(*(close(a) for a in self.actors))
        self.actors = []

    def describe(self) -> str:
        return f"{self.workers} Ray rollout worker(s) × {self.slots} episodes at a time"


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:300]


def connect(ray: ModuleType, address: str | None) -> bool:
    """Join the cluster at ``address``, else start a local one; True if we started it.

    An already initialised Ray (a user's own ``ray.init``) is used as it is.
    """
    if ray.is_initialized():
        return False
    quiet: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                             "logging_level": logging.ERROR}
    if address:
        check_ray(address)
        try:
            ray.init(address=address, **quiet)
        except Exception as e:  # ConnectionError, ValueError, …: all mean "no cluster there"
            raise ConfigError(f"cannot connect to a Ray cluster at {address!r}: "
                              f"{_first_line(e)}", "--ray-address",
                              "start one with `ray start --head`, or use --ray for a local "
                              "cluster") from None
        return True
    ray.init(num_cpus=os.cpu_count() or 1, **quiet)
    return True


@contextlib.asynccontextmanager
async def ray_executor(suite: Suite, policies: Sequence[Policy], specs: Sequence[str], *,
                       opts: dict[str, Any] | None = None, concurrency: int = 4,
                       address: str | None = None, workers: int | None = None
                       ) -> AsyncIterator[RayExecutor]:
    """Ray rollout workers for :func:`~tackroom.runner.grid.run_cells`, shut down on exit.

    Args:
        suite: the suite; pickled to every actor, which makes its own pool.
        policies: the driver's policies, those the cells name.
        specs: the spec string of each policy (``policies[i]`` came from ``specs[i]``).
        opts: options for :func:`~tackroom.policies.make_policy` on the actors.
        concurrency: episodes at a time over all actors.
        address: a Ray cluster to join (``auto``, ``ray://host:10001``, ``host:6379``);
            ``None`` starts a local cluster sized to this machine and stops it at the end.
        workers: how many actors; default ``min(concurrency, CPUs of the cluster)``.

    ::

        async with ray_executor(suite, policies, ["expert"], concurrency=8) as ex:
            await run_cells(cells, suite, run_id, store=store, concurrency=8, executor=ex)
    """
    ray = require_ray()
    started = connect(ray, address)
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1)) or 1
        n = max(1, min(workers or cpus, concurrency))
        executor = RayExecutor(ray, suite, policies, policy_recipes(policies, specs, opts),
                               workers=n, slots=math.ceil(concurrency / n))
        try:
            await executor.start()
            yield executor
        finally:
            await executor.aclose()
    finally:
        if started:
            ray.shutdown()
