"""Delegation in the API: fit a decision model, and grade it on the ladder.

``tackroom.fit_delegation`` and ``tackroom.bench_delegation`` (``tackroom delegate fit``
and ``tackroom delegate bench``; docs/delegation.md). The ladder's logic is
:mod:`tackroom.delegation.bench`, below this layer; here it gets the API's
:func:`~tackroom.app.evaluation.evaluate` to run its episodes with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tackroom.app.evaluation import evaluate
from tackroom.core.policy import Sampling
from tackroom.delegation.bench import RUNGS, BenchResult, RungRow, run_ladder
from tackroom.delegation.fit import TRAIN_ON, FitResult, TypeReport, fit_decision_model

__all__ = ["RUNGS", "TRAIN_ON", "BenchResult", "FitResult", "RungRow", "TypeReport",
           "bench_delegation", "fit_delegation"]


def bench_delegation(suite: str, *, tasks: Sequence[str], seeds: Sequence[int] | str,
                     policy: str, delegating: Sequence[str], workdir: str | Path,
                     store: str | Path | None = None, sampling: Sampling | None = None,
                     concurrency: int = 0, rungs: Sequence[str] = RUNGS,
                     suite_options: Mapping[str, Any] | None = None,
                     policy_options: Mapping[str, Any] | None = None,
                     every_rung_for_each: bool = False,
                     on_start: Callable[[Any], None] | None = None,
                     on_episode: Callable[[Any], None] | None = None) -> BenchResult:
    """Grade delegating harnesses on the ladder (llm → isolated → one → confident → alone).

    One recorded run (in ``store``, default ``WORKDIR/bench.duckdb``) holds every rung; the
    rung harnesses and ``ladder.json`` go to ``workdir``. The first delegating harness
    runs every rung of ``rungs``; the others (decision models to compare) run
    ``isolated`` and ``confident`` only, unless ``every_rung_for_each``. ``on_start`` and
    ``on_episode`` are :func:`tackroom.evaluate`'s progress callbacks.

    ::

        result = tackroom.bench_delegation("miniwob", tasks=["click-test"], seeds="0-9",
                                           policy="bundled", delegating=["som-delegate.toml"],
                                           workdir="delegate-bench")
        for row in result.rows:
            print(row.rung, row.model, row.success)
    """
    return run_ladder(evaluate, suite, tasks=tasks, seeds=seeds, policy=policy,
                      delegating=delegating, workdir=workdir, db=store, sampling=sampling,
                      concurrency=concurrency, rungs=rungs, suite_options=suite_options,
                      policy_options=policy_options, every_rung_for_each=every_rung_for_each,
                      on_start=on_start, on_episode=on_episode)


def fit_delegation(store: str | Path, base: str, out: str | Path, *, kind: str = "logistic",
                   train_on: str = "all", target_precision: float = 0.9,
                   per_type: bool = True, points: Sequence[str] = (), runs: Sequence[str] = (),
                   validation: float = 0.25, min_support: int = 5,
                   post_mistake_weight: float = 4.0, seed: int = 0,
                   options: dict[str, Any] | None = None, name: str | None = None) -> FitResult:
    """Train a decision model on ``store``'s recorded decision points and write the
    delegating harness ``out`` that uses it (``tackroom delegate fit``).

    ``base`` is the harness that recorded the points; ``kind`` a registered decision
    model (``tackroom list decision_model``); one τ per choice type is fitted to reach
    ``target_precision`` on held-out episodes. The arguments are those of
    :func:`tackroom.delegation.fit.fit_decision_model`, which does the work.

    ::

        res = tackroom.fit_delegation("runs.duckdb", "som-record", "som-delegate.toml")
        print(res.thresholds)
    """
    return fit_decision_model(store, base, out, kind=kind, train_on=train_on,
                              target_precision=target_precision, per_type=per_type,
                              points=points, runs=runs, validation=validation,
                              min_support=min_support, post_mistake_weight=post_mistake_weight,
                              seed=seed, options=options, name=name)
