"""Evaluation runs: plan a grid, run it (here or on Ray), resume it, run a sealed manifest.

The one implementation behind ``tackroom eval``, ``tackroom.evaluate``, the
trainer's evaluations and the examples. A run is

1. **planned** (:func:`plan`): the suite built with its options, tasks chosen,
   harnesses loaded (a resumed or sealed run checks their hashes), each policy
   built once, the grid of (task × harness × policy × seed) cells, and the
   :class:`~tackroom.core.run.RunConfig` the store will hold;
2. **executed** (:func:`execute`): model servers and the suite checked before
   anything is recorded, the run started in the store, the cells run N at a
   time with one infra retry each, the run marked finished or interrupted —
   every finished episode is recorded whatever stops the run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tackroom.app.limits import (
    check_grid_size,
    check_run_options,
    check_sampling,
    parse_seeds,
    seed_list,
)
from tackroom.app.runs import Run, new_run_id, open_store, resolve_run
from tackroom.core.aio import run_sync
from tackroom.core.episode import Episode
from tackroom.core.errors import ConfigError
from tackroom.core.policy import Policy, Sampling
from tackroom.core.run import RunConfig
from tackroom.core.task import Suite, Task
from tackroom.harness.spec import HarnessSpec, load_harness
from tackroom.policies import make_policy
from tackroom.policies.delegation.runtime import load_decision_model
from tackroom.records import RecordStore
from tackroom.runner.grid import GridPlan, plan_grid, resume_attempts, run_cells
from tackroom.runner.sealed import Manifest, sealed_config
from tackroom.suites import get_suite, select_tasks

#: Episodes at a time for runs with an ``openai:`` policy: a server, not this machine, is
#: the limit, and a client that floods it gets timeouts instead of answers.
OPENAI_CONCURRENCY = 8


@dataclass
class RunPlan:
    """A run before it starts: everything :func:`execute` needs, nothing recorded yet.

    ``owned`` are the policies built from specs here; :func:`execute` closes them.
    """

    suite: Suite
    tasks: list[Task]
    harnesses: list[HarnessSpec]
    policies: list[Policy]
    specs: list[str]
    grid: GridPlan
    config: RunConfig
    manifest: Manifest | None = None
    policy_options: dict[str, Any] = field(default_factory=dict)
    owned: list[Policy] = field(default_factory=list)

    @property
    def n_episodes(self) -> int:
        """Cells in the grid (pairs a harness cannot express are not cells)."""
        return len(self.grid.cells)

    def describe(self) -> str:
        """``N episodes (T tasks × H harnesses × P policies × S seeds)``."""
        return (f"{self.n_episodes} episodes ({len(self.tasks)} tasks × {len(self.harnesses)} "
                f"harnesses × {len(self.policies)} policies × {len(self.config.seeds)} seeds)")

    def close(self) -> None:
        """Close the policies built for this plan, for a plan that is not executed (a dry
        run); :func:`execute` closes them itself."""
        run_sync(lambda: close_policies(self.owned))

    def __enter__(self) -> RunPlan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class RunStart:
    """What :func:`execute` tells ``on_start`` once the run is recorded as started."""

    run_id: str
    plan: RunPlan
    to_run: int
    already: int
    resumed: bool


def plan(suite: str | Suite = "toy", *, tasks: Sequence[str | Task] | None = None,
         harnesses: Sequence[str | HarnessSpec] | None = None,
         policies: Sequence[str | Policy] = ("expert",), seeds: Iterable[int] | str = range(5),
         sampling: Sampling | None = None, concurrency: int = 0, base_url: str | None = None,
         timeout: float = 60.0, suite_options: Mapping[str, Any] | None = None,
         policy_options: Mapping[str, Any] | None = None,
         store: RecordStore | str | Path | None = None, train_run: str | None = None,
         manifest: Manifest | None = None, max_episodes: int | None = None) -> RunPlan:
    """Plan a run without recording anything (``tackroom eval --dry-run`` prints this).

    Arguments as :func:`evaluate` (``store`` is only read, by ``replay:`` policies). Policies
    given as specs are built here, once; ``RunPlan.close()`` (or ``with plan(...) as p:``)
    closes them when the plan is not executed. Every number is checked first
    (:func:`check_sampling`, :func:`check_run_options`, seeds), and the grid's size before
    any policy is built.
    """
    check_run_options(concurrency, timeout)
    sampling = check_sampling(sampling or Sampling())
    if max_episodes is not None:
        check_grid_size(0, max_episodes)
    seeds_ = seed_list(seeds)
    suite_opts = dict(suite_options or {})
    the_suite = get_suite(suite, suite_opts) if isinstance(suite, str) else suite
    specs = [p if isinstance(p, str) else p.id for p in policies] or ["expert"]
    if tasks is None or not list(tasks):
        patterns: list[str | Task] = ["@expert"] if all(s == "expert" for s in specs) \
            else ["@all"]
    else:
        patterns = list(tasks)
    task_list = _tasks(the_suite, patterns)
    refs = list(harnesses) if harnesses else list(the_suite.default_harnesses)
    specs_h = manifest.load_harnesses() if manifest is not None else \
        [h if isinstance(h, HarnessSpec) else load_harness(h) for h in refs]
    for h in specs_h:  # a delegating harness whose decision model is missing: say so now
        if h.delegation is not None and "model" in h.delegation:
            load_decision_model(h.delegation)
    n_policies = len(policies) if policies else 1
    check_grid_size(len(task_list) * len(specs_h) * n_policies * len(seeds_), max_episodes)
    if concurrency <= 0:
        concurrency = the_suite.default_concurrency
        if any(s.startswith("openai:") for s in specs):
            concurrency = OPENAI_CONCURRENCY
    # A server policy lets as many requests be in flight as the run has episodes (its own
    # default, 16, would cap `-n 1024` at 16 calls at a time).
    popts: dict[str, Any] = {"timeout": timeout, "max_concurrency": max(16, concurrency),
                             **dict(policy_options or {})}
    if base_url:
        popts["base_url"] = base_url
    db_path = str(store.path) if isinstance(store, RecordStore) else \
        (str(store) if store else None)
    # Last, once everything cheap has been checked: building a policy may load a model.
    built: list[Policy] = []
    owned: list[Policy] = []
    try:
        for p in policies or ["expert"]:
            if isinstance(p, str):
                obj = make_policy(p, db=db_path, **popts)
                owned.append(obj)
            else:
                obj = p
            built.append(obj)
    except BaseException:
        run_sync(lambda: close_policies(owned))
        raise
    grid = plan_grid(task_list, specs_h, built, seeds_, sampling)
    config = RunConfig(
        suite=the_suite.name, tasks=[t.id for t in task_list],
        harnesses=[r if isinstance(r, str) else r.name for r in refs] if manifest is None
        else [h.ref for h in manifest.harnesses],
        harness_hashes={h.name: h.hash for h in specs_h}, policies=specs,
        policy_ids={s: p.id for s, p in zip(specs, built, strict=True)}, seeds=seeds_,
        sampling=sampling, concurrency=concurrency, base_url=base_url, timeout=timeout,
        suite_options=suite_opts,
        inexpressible=sorted([t.key, h.name] for t, h in grid.inexpressible),
        train_run=train_run)
    if manifest is not None:
        sealed = sealed_config(manifest, config.policy_ids,
                               [(t.key, h.name) for t, h in grid.inexpressible])
        config.manifest, config.manifest_hash = sealed["manifest"], sealed["manifest_hash"]
    return RunPlan(the_suite, task_list, specs_h, built, specs, grid, config, manifest,
                   popts, owned)


def _tasks(suite: Suite, patterns: Sequence[str | Task]) -> list[Task]:
    given = [p for p in patterns if isinstance(p, Task)]
    names = [p for p in patterns if isinstance(p, str)]
    chosen = {t.id: t for t in given}
    for t in select_tasks(suite, names) if names else []:
        chosen.setdefault(t.id, t)
    return list(chosen.values())


async def execute_async(plan_: RunPlan, *, store: RecordStore | str | Path | None = None,
                        run_id: str | None = None, resume: bool = False,
                        executor: str = "local", ray_address: str | None = None,
                        on_episode: Callable[[Episode], None] | None = None,
                        on_start: Callable[[RunStart], None] | None = None,
                        on_note: Callable[[str], None] | None = None) -> Run:
    """Run a planned grid and record it; :func:`execute` without the event loop."""
    use_ray = executor == "ray" or bool(ray_address)
    if executor not in ("local", "ray"):
        raise ConfigError(f"unknown executor {executor!r}", "executor",
                          "use 'local' or 'ray'")
    try:
        if use_ray:
            from tackroom.runner.ray_workers import check_ray

            check_ray(ray_address)
        # Before anything is recorded: a down server or a missing sandbox is one line.
        for p in plan_.policies:
            check = getattr(p, "check", None)
            if check is not None:
                await check()
        plan_.suite.preflight()
        with open_store(store) as st:
            return await _record(plan_, st, run_id or new_run_id(), resume, use_ray,
                                 ray_address, on_episode, on_start, on_note)
    finally:
        # Policies hold connection pools bound to this event loop: close them in it.
        await close_policies(plan_.owned)


async def _record(plan_: RunPlan, store: RecordStore, run_id: str, resume: bool,
                  use_ray: bool, ray_address: str | None,
                  on_episode: Callable[[Episode], None] | None,
                  on_start: Callable[[RunStart], None] | None,
                  on_note: Callable[[str], None] | None) -> Run:
    cells, done = plan_.grid.cells, 0
    if resume:
        cells, done = resume_attempts(plan_.grid, store.episode_ids(run_id))
    cfg = plan_.config
    store.start_run(run_id, command="eval", config=cfg.to_dict(),
                    n_planned=plan_.n_episodes, manifest_hash=cfg.manifest_hash)
    if on_start is not None:
        on_start(RunStart(run_id, plan_, len(cells), done, resume))
    status = "interrupted"
    try:
        if not use_ray or not cells:
            # keep=False: the episodes are in the store; memory stays per episode in flight.
            await run_cells(cells, plan_.suite, run_id, store=store,
                            concurrency=cfg.concurrency, on_episode=on_episode, keep=False)
        else:
            from tackroom.runner.ray_workers import ray_executor

            async with ray_executor(plan_.suite, plan_.policies, plan_.specs,
                                    opts=plan_.policy_options, concurrency=cfg.concurrency,
                                    address=ray_address) as ex:
                if on_note is not None:
                    on_note(ex.describe())
                await run_cells(cells, plan_.suite, run_id, store=store,
                                concurrency=cfg.concurrency, on_episode=on_episode,
                                executor=ex, keep=False)
        status = "finished"
    finally:
        store.finish_run(run_id, status)
    return Run.from_record(store.run(run_id) or {"run_id": run_id}, store)


async def close_policies(policies: Sequence[Policy]) -> None:
    """Close the policies a plan built (their connection pools, generation threads)."""
    for p in policies:
        await p.aclose()


def execute(plan_: RunPlan, **kwargs: Any) -> Run:
    """Run a planned grid and record it; arguments as :func:`evaluate`.

    Model servers (``check()``) and the suite (``preflight()``) are checked
    first. Whatever stops the run (Ctrl-C, a policy that refuses every call),
    the episodes that finished are recorded, the run is marked
    ``interrupted``, and the error is raised; ``resume(run_id)`` finishes it.
    """
    return run_sync(lambda: execute_async(plan_, **kwargs))


def evaluate(suite: str | Suite = "toy", *, tasks: Sequence[str | Task] | None = None,
             harnesses: Sequence[str | HarnessSpec] | None = None,
             policies: Sequence[str | Policy] = ("expert",),
             seeds: Iterable[int] | str = range(5), sampling: Sampling | None = None,
             concurrency: int = 0, base_url: str | None = None, timeout: float = 60.0,
             suite_options: Mapping[str, Any] | None = None,
             policy_options: Mapping[str, Any] | None = None,
             store: RecordStore | str | Path | None = None, run_id: str | None = None,
             executor: str = "local", ray_address: str | None = None,
             train_run: str | None = None, max_episodes: int | None = None,
             on_episode: Callable[[Episode], None] | None = None,
             on_start: Callable[[RunStart], None] | None = None,
             on_note: Callable[[str], None] | None = None) -> Run:
    """Run every (task × harness × policy × seed) episode and record it; return the :class:`Run`.

    Args:
        suite: a suite name (``toy``, ``miniwob``, ``terminal``, ``code``) or a Suite.
        tasks: task ids, globs (``click-*``), ``@expert`` or ``@all``, or Task objects;
            default every task with an expert when every policy is ``expert``, else all.
        harnesses: harness names, ``.toml`` paths or loaded specs; default the
            suite's ``default_harnesses``.
        policies: specs (``expert``, ``bundled``, ``hf:DIR[:ADAPTER]``,
            ``openai:MODEL[@URL]``, ``replay:RUN``) or Policy objects (not closed here).
        seeds: an iterable of ints, or text such as ``0-9``.
        sampling: temperature, top-p, max tokens, log-probs (default greedy, 512 tokens).
        concurrency: episodes at a time (0: the suite's default; 8 with ``openai:``).
        base_url, timeout: the OpenAI-compatible server and seconds per model call.
        suite_options: keyword options of the suite, e.g. ``{"unsafe_local": True}``.
        policy_options: extra backend options for spec-built policies (``threads``…).
        store: a RecordStore, or the path of one (default ``$TACKROOM_DB`` or
            ``./tackroom-runs/tackroom.duckdb``).
        run_id: the id to record under (default a new one).
        executor: ``local`` (this process) or ``ray`` (Ray actors; ``ray_address``
            joins a cluster, else a local one is started and stopped).
        train_run: the training run this evaluation belongs to (recorded).
        max_episodes: the largest grid allowed (default :data:`MAX_EPISODES`, 1,000,000);
            a larger one is refused before anything runs.
        on_episode: called with each finished episode (infra-failed attempts too).
        on_start: called once the run is recorded as started (:class:`RunStart`).
        on_note: one-line notices (e.g. where Ray runs the episodes).

    ::

        import tackroom
        run = tackroom.evaluate(suite="toy", harnesses=["som-tools"], policies=["expert"],
                                seeds=range(3))
        print(run.id, run.success_rate)
    """
    p = plan(suite, tasks=tasks, harnesses=harnesses, policies=policies, seeds=seeds,
             sampling=sampling, concurrency=concurrency, base_url=base_url, timeout=timeout,
             suite_options=suite_options, policy_options=policy_options, store=store,
             train_run=train_run, max_episodes=max_episodes)
    return execute(p, store=store, run_id=run_id, executor=executor, ray_address=ray_address,
                   on_episode=on_episode, on_start=on_start, on_note=on_note)


def evaluate_sealed(manifest: Manifest | str | Path, *, concurrency: int = 0,
                    base_url: str | None = None, timeout: float = 60.0,
                    suite_options: Mapping[str, Any] | None = None,
                    policy_options: Mapping[str, Any] | None = None,
                    store: RecordStore | str | Path | None = None, run_id: str | None = None,
                    executor: str = "local", ray_address: str | None = None,
                    max_episodes: int | None = None,
                    on_episode: Callable[[Episode], None] | None = None,
                    on_start: Callable[[RunStart], None] | None = None,
                    on_note: Callable[[str], None] | None = None) -> Run:
    """Run every cell of a sealed manifest (written by :func:`tackroom.seal`), none filtered.

    The manifest is checked against its hash, each harness against the hash it
    was sealed with; the run records the manifest and its hash, and the report
    shows every cell. Other arguments as :func:`evaluate`.
    """
    p = plan_sealed(manifest, concurrency=concurrency, base_url=base_url, timeout=timeout,
                    suite_options=suite_options, policy_options=policy_options, store=store,
                    max_episodes=max_episodes)
    return execute(p, store=store, run_id=run_id, executor=executor, ray_address=ray_address,
                   on_episode=on_episode, on_start=on_start, on_note=on_note)


def plan_sealed(manifest: Manifest | str | Path, **kwargs: Any) -> RunPlan:
    """The plan of a sealed manifest (or its file): its suite, tasks, harnesses, policies,
    seeds, sampling; other arguments as :func:`plan` (``tackroom eval --sealed F --dry-run``)."""
    if not isinstance(manifest, Manifest):
        manifest = Manifest.load(manifest)
    return plan(manifest.suite, tasks=list(manifest.tasks), policies=list(manifest.policies),
                seeds=list(manifest.seeds), sampling=Sampling(**manifest.sampling),
                manifest=manifest, **kwargs)


def plan_resume(run_id: str = "latest", store: RecordStore | str | Path | None = None, *,
                concurrency: int = 0, base_url: str | None = None,
                sealed: Manifest | str | Path | None = None,
                max_episodes: int | None = None) -> RunPlan:
    """The plan of recorded run ``run_id`` (or ``latest``) as it was configured, for
    :func:`resume` (``tackroom eval --resume RUN --dry-run`` prints it).

    Raises:
        ConfigError: no such run; a harness changed since the run; ``sealed``
            given for a run not sealed with it; a recorded manifest that does not
            match its hash.
    """
    given = sealed if sealed is None or isinstance(sealed, Manifest) else Manifest.load(sealed)
    with open_store(store) as st:
        rid = resolve_run(st, run_id)
        return _plan_recorded(rid, st, concurrency, base_url, given, max_episodes)


def _plan_recorded(run_id: str, store: RecordStore, concurrency: int, base_url: str | None,
                   sealed: Manifest | None, max_episodes: int | None) -> RunPlan:
    info = store.run(run_id) or {}
    cfg = RunConfig.from_dict(info.get("config"))
    manifest = _recorded_manifest(run_id, info.get("manifest_hash"), cfg, sealed)
    common: dict[str, Any] = dict(
        concurrency=concurrency or cfg.concurrency, base_url=base_url or cfg.base_url,
        timeout=cfg.timeout, suite_options=cfg.suite_options, store=store,
        max_episodes=max_episodes)
    if manifest is not None:
        p = plan_sealed(manifest, **common)
    else:
        p = plan(cfg.suite, tasks=cfg.tasks, harnesses=cfg.harnesses, policies=cfg.policies,
                 seeds=cfg.seeds, sampling=cfg.sampling, train_run=cfg.train_run, **common)
    for h in p.harnesses:
        was = cfg.harness_hashes.get(h.name)
        if was not in (None, h.hash):
            raise ConfigError(
                f"harness {h.name!r} changed since the run (was {was}, now {h.hash})", h.source,
                "restore the harness file, or start a new run instead of --resume")
    return p


def _recorded_manifest(run_id: str, recorded: str | None, cfg: RunConfig,
                       given: Manifest | None) -> Manifest | None:
    """The manifest of a sealed run being resumed (``None`` for an ordinary run)."""
    if given is not None and given.hash != recorded:
        raise ConfigError(f"run {run_id} was not sealed with this manifest (run: "
                          f"{recorded or 'not sealed'}, manifest: {given.hash})", "--sealed",
                          "resume without --sealed, or give the run's own manifest")
    if not cfg.manifest:
        return None
    manifest = Manifest.from_dict(cfg.manifest, f"run {run_id}")
    if manifest.hash != recorded:
        raise ConfigError(f"the manifest recorded with run {run_id} does not match its hash "
                          f"{recorded}", f"run {run_id}",
                          "the record store was edited; start a new sealed run")
    return manifest


def resume(run_id: str = "latest", *, store: RecordStore | str | Path | None = None,
           concurrency: int = 0, base_url: str | None = None,
           sealed: Manifest | str | Path | None = None, executor: str = "local",
           ray_address: str | None = None, max_episodes: int | None = None,
           on_episode: Callable[[Episode], None] | None = None,
           on_start: Callable[[RunStart], None] | None = None,
           on_note: Callable[[str], None] | None = None) -> Run:
    """Finish a recorded run: re-run only its missing and infra-failed episodes.

    The run's own configuration is used (suite and its options, tasks,
    harnesses — refused if one changed — policies, seeds, sampling); a sealed
    run resumes against its recorded manifest. ``concurrency`` and ``base_url``
    may differ from the first time. Other arguments as :func:`evaluate`.
    """
    with open_store(store) as st:
        rid = resolve_run(st, run_id)
        p = plan_resume(rid, st, concurrency=concurrency, base_url=base_url, sealed=sealed,
                        max_episodes=max_episodes)
        return execute(p, store=st, run_id=rid, resume=True, executor=executor,
                       ray_address=ray_address, on_episode=on_episode, on_start=on_start,
                       on_note=on_note)


__all__ = ["RunPlan", "RunStart", "check_run_options", "check_sampling", "close_policies",
           "evaluate", "evaluate_sealed", "execute", "execute_async", "parse_seeds", "plan",
           "plan_resume", "plan_sealed", "resume", "run_sync", "seed_list"]
