"""Where an RL run's data comes from: the tasks and harnesses it trains on, and its rollout sources.

:func:`open_data` reads ``[data]`` and ``[eval]`` once: the suite (looked up in the
registry, so training imports no suite), the training tasks and harnesses, or the
frozen records; the held-out evaluation cells.

A *rollout source* hands the trainer one iteration's ``optim.grad_accum`` rollout
batches at a time (:meth:`RolloutSource.batches`), with metrics about them:

* :class:`RecordRollouts` — frozen episodes from the store (``data.source = "records"``);
* :class:`LocalRollouts` — the model being trained plays them, here or on Ray workers
  (``rollout.backend = "hf"``);
* :class:`ServedRollouts` — an inference server plays them, each weight version
  hot-loaded as a LoRA adapter, synchronously or up to ``rollout.max_staleness``
  updates behind (``rollout.backend = "openai"``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tackroom.core.episode import Episode, Outcome
from tackroom.core.errors import ConfigError, TackroomError
from tackroom.core.policy import Sampling
from tackroom.core.registry import get
from tackroom.core.selection import select_tasks
from tackroom.core.task import Suite, Task
from tackroom.harness.spec import HarnessSpec, load_harness
from tackroom.records.store import RecordStore
from tackroom.train.checkpoints import Checkpoints
from tackroom.train.config import RLConfig
from tackroom.train.engine import TrainEngine
from tackroom.train.samples import TurnSample

Note = Callable[[str], None]
Batches = tuple[list[list[Episode]], dict[str, float]]


# ---------------------------------------------------------------------- the data


@dataclass
class TrainingData:
    """What a run trains and evaluates on (see :func:`open_data`)."""

    suite: Suite | None = None
    tasks: list[Task] = field(default_factory=list)
    harness_specs: list[HarnessSpec] = field(default_factory=list)
    #: harness name → the tools it offers (``None``: an agent CLI's own, recorded per episode).
    tools: dict[str, Any] = field(default_factory=dict)
    train_harnesses: list[str] = field(default_factory=list)
    records: Any = None  # a tackroom.train.offline.RecordSource
    eval_tasks: list[Task] = field(default_factory=list)
    eval_specs: list[HarnessSpec] = field(default_factory=list)

    def fingerprint(self) -> str:
        """What was trained on, so that ``--resume`` refuses changed data."""
        if self.records is not None:
            return f"records:{self.records.fingerprint}"
        return "online:" + ",".join(sorted(t.key for t in self.tasks)) + "|" + ",".join(
            f"{h.name}@{h.hash}" for h in self.harness_specs)

    def tools_for(self, ep: Episode, turn: int = 0) -> Any:
        """The tools ``ep``'s turn ``turn`` offered: the harness's, or an agent CLI's own."""
        if self.records is not None:
            return self.records.tools_for(ep, turn)
        from tackroom.train.sft import episode_tools

        return episode_tools(ep, self.tools[ep.harness], turn)


def make_suite(name: str, where: str = "data.suite") -> Suite:
    """The registered suite ``name`` (or an importable ``module:factory``), built."""
    return get("suite", name, where=where, dotted=True)()


def open_data(cfg: RLConfig, store: RecordStore, *, ray: bool, note: Note) -> TrainingData:
    """The suite, tasks and harnesses (or records) of ``[data]``, and ``[eval]``'s cells."""
    c = cfg
    data = TrainingData()
    if c.source == "online":
        if not c.suite:
            raise ConfigError("data.suite is empty", "[data]",
                              "name the suite to roll out on, e.g. data.suite = \"toy\"")
        if not c.harnesses:
            raise ConfigError("data.harnesses is empty", "[data]",
                              "list the training harnesses, e.g. data.harnesses = "
                              "[\"som-tools\", \"html-commands\"]")
        data.suite = make_suite(c.suite)
        data.tasks = select_tasks(data.suite, c.tasks, "data.tasks")
        data.harness_specs = [load_harness(h) for h in c.harnesses]
        # An agent harness's tools are its CLI's own, recorded with each episode
        # (meta.agent.tools): no harness file holds them.
        data.tools = {h.name: h.tools for h in data.harness_specs}
        data.train_harnesses = [h.name for h in data.harness_specs]
        if ray:
            from tackroom.runner.ray_workers import require_ray

            require_ray()
    else:
        from tackroom.train.offline import RecordSource

        data.records = RecordSource.open(store, runs=c.runs, suite=c.suite,
                                         harnesses=c.harnesses, tasks=c.tasks,
                                         tasks_per_step=c.tasks_per_step, seed=c.seed)
        data.train_harnesses = data.records.harnesses
        if ray:
            note("--ray is for online rollouts; training on records runs here")
        if c.suite:
            data.suite = make_suite(c.suite)
    # Evaluation: held-out seeds of the chosen (or training) tasks and harnesses.
    if c.eval_tasks or c.eval_harnesses or c.eval_every:
        if data.suite is None:
            raise ConfigError("evaluation needs a suite", "[eval]",
                              "set data.suite, or drop the [eval] settings")
        data.eval_tasks = select_tasks(data.suite, c.eval_tasks, "eval.tasks") \
            if c.eval_tasks else (data.tasks or select_tasks(
                data.suite, data.records.tasks if data.records else [], "eval.tasks"))
        data.eval_specs = [load_harness(h) for h in c.eval_harnesses or data.train_harnesses]
    return data


@contextlib.contextmanager
def eval_mode(engine: TrainEngine) -> Iterator[None]:
    """The model in eval mode (no dropout) while it generates, back in train mode after."""
    engine.model.eval()
    try:
        yield
    finally:
        engine.model.train()


# ---------------------------------------------------------------------- sources


class RolloutSource:
    """One iteration's rollout batches at a time; :meth:`close` when the run ends."""

    def batches(self, iteration: int) -> Batches:
        """Iteration ``iteration``'s ``optim.grad_accum`` batches and metrics about them."""
        raise NotImplementedError

    def check(self, samples: list[TurnSample]) -> None:
        """Refuse samples this source cannot train on (after they are built)."""

    def close(self) -> None:
        """Release what the source holds (threads, adapters on a server, Ray)."""


class RecordRollouts(RolloutSource):
    """Frozen episodes from the store, ``data.tasks_per_step`` tasks per batch."""

    def __init__(self, cfg: RLConfig, records: Any) -> None:
        self.cfg, self.records = cfg, records

    def batches(self, iteration: int) -> Batches:
        k = self.cfg.grad_accum
        return [self.records.batch(iteration * k + b) for b in range(k)], {}


class LocalRollouts(RolloutSource):
    """The model being trained plays each batch: here, from memory, or on Ray workers."""

    def __init__(self, cfg: RLConfig, data: TrainingData, store: RecordStore, run_id: str,
                 engine: TrainEngine, policy: Any, checkpoints: Checkpoints, *, ray: bool,
                 ray_address: str | None) -> None:
        self.cfg, self.data, self.store, self.run_id = cfg, data, store, run_id
        self.engine, self.policy, self.checkpoints = engine, policy, checkpoints
        self.ray, self.ray_address = ray, ray_address
        self._ray_mod, self._ray_started = None, False
        if ray:
            from tackroom.runner.ray_workers import connect, require_ray

            self._ray_mod = require_ray()
            self._ray_started = connect(self._ray_mod, ray_address)

    def batches(self, iteration: int) -> Batches:
        return [self._play(iteration, b) for b in range(self.cfg.grad_accum)], {}

    def _play(self, iteration: int, batch: int) -> list[Episode]:
        from tackroom.train.rollouts import RemotePolicy, draw_cells, play, save_rollout_weights

        c, suite = self.cfg, self.data.suite
        assert suite is not None
        version = self.checkpoints.version
        sampling = Sampling(temperature=c.temperature, top_p=c.top_p, max_tokens=c.max_tokens)
        common: dict[str, Any] = dict(seed=c.seed, iteration=iteration, batch=batch,
                                      tasks_per_step=c.tasks_per_step,
                                      group_size=c.group_size, sampling=sampling)
        if not self.ray:
            self.policy.id = f"train:{version}"
            self.policy.set_version(version)
            cells = draw_cells(self.data.tasks, self.data.harness_specs, self.policy, **common)
            with eval_mode(self.engine):
                return asyncio.run(play(cells, suite, self.run_id, store=self.store,
                                        concurrency=c.concurrency))
        from tackroom.runner.ray_workers import ray_executor

        spec = save_rollout_weights(self.engine, version,
                                    self.checkpoints.write_version(version))
        remote = RemotePolicy(spec, spec)
        cells = draw_cells(self.data.tasks, self.data.harness_specs, remote, **common)

        async def go() -> list[Episode]:
            async with ray_executor(suite, [remote], [spec],
                                    opts={"threads": 1, "max_batch": c.concurrency},
                                    concurrency=c.concurrency, address=self.ray_address) as ex:
                return await play(cells, suite, self.run_id, store=self.store,
                                  concurrency=c.concurrency, executor=ex)

        return asyncio.run(go())

    def close(self) -> None:
        if self._ray_started and self._ray_mod is not None:
            self._ray_mod.shutdown()


def connect_server(cfg: RLConfig, data: TrainingData, *, ray: bool, note: Note) -> Any:
    """With ``rollout.backend = "openai"``: the server, checked to answer before any model
    loads (``None`` for another backend, or on records)."""
    from tackroom.train.server import InferenceServer

    c = cfg
    if c.rollout_backend != "openai":
        return None
    if data.records is not None:
        note("rollout.backend = openai is for online rollouts; training on records runs here")
        return None
    if ray:
        raise ConfigError("--ray and rollout.backend = \"openai\" both say who plays the "
                          "rollouts", "--ray",
                          "drop --ray (the server generates), or set rollout.backend = \"hf\"")
    server = InferenceServer(c.base_url)
    names = server.models()
    mode = (f"async, at most {c.max_staleness} update(s) behind" if c.max_staleness
            else "synchronous")
    note(f"rollouts: {c.base_url} (serving {', '.join(names[:3]) or 'nothing'}); "
         f"each weight version hot-loaded as a LoRA adapter; {mode}")
    return server


class ServedRollouts(RolloutSource):
    """An inference server plays each batch with the version the trainer publishes to it."""

    def __init__(self, cfg: RLConfig, data: TrainingData, store: RecordStore, run_id: str,
                 engine: TrainEngine, checkpoints: Checkpoints, server: Any) -> None:
        self.cfg, self.data, self.store, self.run_id = cfg, data, store, run_id
        self.engine, self.checkpoints, self.server = engine, checkpoints, server
        self.producer: Any = None
        #: weight version → the last iteration it was published for (on the server).
        self._version_iter: dict[str, int] = {}

    def batches(self, iteration: int) -> Batches:
        """Iteration ``iteration``'s rollout batches from the server, and their staleness."""
        from tackroom.train.server import RolloutProducer

        c = self.cfg
        version = self._publish(iteration)
        if c.max_staleness == 0:
            batches = [self._play(iteration, b, version) for b in range(c.grad_accum)]
        else:
            # Iterations still to train if none comes back empty: play no further.
            left = -(-(c.steps - self.engine.step) // c.num_iterations)
            if self.producer is None:
                self.producer = RolloutProducer(
                    lambda j, v: [self._play(j, b, v) for b in range(c.grad_accum)],
                    start=iteration, staleness=c.max_staleness, limit=iteration + left)
            self.producer.allow(iteration + left)
            self.producer.publish(iteration, version)
            _, batches = self.producer.get(iteration)
        lags = []
        for ep in (e for b in batches for e in b):
            for turn in ep.turns:
                if turn.adapter not in self._version_iter:
                    raise TackroomError(
                        f"a rollout turn was answered by {turn.adapter!r}, not by a weight "
                        "version this run loaded", "rollout.base_url",
                        "the server must answer with the adapter a request names (its "
                        "'model' field), as vLLM does")
                lags.append(iteration - self._version_iter[turn.adapter])
        if lags and max(lags) > c.max_staleness:
            raise TackroomError(f"rollouts {max(lags)} updates old exceed rollout.max_staleness"
                                f" = {c.max_staleness}", "train", "report this as a bug")
        metrics = {"staleness_max": float(max(lags, default=0)),
                   "staleness_mean": sum(lags) / max(1, len(lags))}
        return batches, metrics

    def _publish(self, iteration: int) -> str:
        """The current weights as a version on the server, for iteration ``iteration``."""
        from tackroom.train.rollouts import ROLLOUT_WEIGHTS, save_rollout_weights

        c = self.cfg
        version = self.checkpoints.version
        if version not in self._version_iter:
            save_rollout_weights(self.engine, version, self.checkpoints.write_version(version),
                                 keep=c.max_staleness + 2)
            path = (Path(self.engine.out_dir) / ROLLOUT_WEIGHTS / version).resolve()
            self.server.load(version, str(path))
        self._version_iter[version] = iteration
        # Batches from this iteration on play weights of iteration >= iteration - s.
        for old, last in list(self._version_iter.items()):
            if old != version and last < iteration - c.max_staleness:
                self.server.unload(old)
                del self._version_iter[old]
        return version

    def _play(self, iteration: int, batch: int, version: str) -> list[Episode]:
        """One rollout batch played by weight version ``version`` on the server."""
        from tackroom.train.rollouts import draw_cells, play
        from tackroom.train.server import ServedPolicy

        c, suite = self.cfg, self.data.suite
        assert suite is not None
        policy = ServedPolicy(version, c.base_url, concurrency=c.concurrency)
        sampling = Sampling(temperature=c.temperature, top_p=c.top_p, max_tokens=c.max_tokens)
        cells = draw_cells(self.data.tasks, self.data.harness_specs, policy, seed=c.seed,
                           iteration=iteration, batch=batch, tasks_per_step=c.tasks_per_step,
                           group_size=c.group_size, sampling=sampling)

        async def go() -> list[Episode]:
            try:
                return await play(cells, suite, self.run_id, store=self.store,
                                  concurrency=c.concurrency)
            finally:
                await policy.aclose()

        episodes = asyncio.run(go())
        if episodes and all(e.outcome is Outcome.INFRA_ERROR for e in episodes):
            raise TackroomError(f"every rollout of iteration {iteration} failed "
                                f"({(episodes[0].error or '').splitlines()[0][:300]})",
                                "rollout.base_url", f"check the server at {c.base_url}")
        return episodes

    def check(self, samples: list[TurnSample]) -> None:
        """Off-policy samples need the sampler's own log-probs: π_old cannot be recomputed."""
        if self.cfg.max_staleness == 0:
            return
        missing = sum(not s.recorded_logp for s in samples)
        if missing:
            raise TackroomError(f"{missing} of {len(samples)} rollout turns came back without "
                                "token ids and log-probs", "rollout.base_url",
                                "async training needs the server's own (vLLM and tackroom "
                                "serve return them with logprobs and return_token_ids); or set "
                                "rollout.max_staleness = 0")

    def close(self) -> None:
        if self.producer is not None:
            self.producer.close(timeout=60)
        for name in list(self.server.loaded):
            with contextlib.suppress(Exception):
                self.server.unload(name)
