"""Acceptance rules: which candidate harnesses the optimiser keeps, from their dev scores.

A rule is a function over aligned per-candidate score vectors::

    rule(scores, baseline, *, units=None) -> accepted candidate names

``scores[c][i]`` and ``baseline[i]`` measure the same unit ``i`` (a (task, seed)
cell, success 0/1); ``units[i]`` optionally labels it (the Pareto rule groups units
by task with it). Every rule registers itself under the ``acceptance`` kind of
:mod:`tackroom.core.registry`, which is what ``optimize.toml``'s ``acceptance``
names; :func:`get_rule` looks one up. A rule registered with ``takes_threshold=True``
gets the config's ``threshold`` as its ``threshold`` argument. :func:`unit_scores` aligns recorded episodes
into such vectors.

The optimiser applies a rule at run time (:mod:`tackroom.app.optimization`); the
audit (:mod:`tackroom.optimize.audit`) replays the same rule on fresh seeds.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from tackroom.core.episode import Episode, Outcome
from tackroom.core.registry import get, register

__all__ = ["Rule", "Scores", "accept_greedy", "accept_threshold", "accept_pareto",
           "pareto_rule", "get_rule", "unit_scores", "cell_means", "unit_order",
           "mean_or_nan"]

Scores = Mapping[str, Sequence[float]]
#: An acceptance rule: ``rule(scores, baseline, *, units=None) -> accepted candidate names``.
Rule = Callable[..., list[str]]

#: The name the Pareto rule gives the baseline inside its pool.
BASELINE = "__baseline__"
NAN = float("nan")


def mean_or_nan(x: Sequence[float] | np.ndarray) -> float:
    """The mean of ``x``; NaN when it is empty (no units: no estimate)."""
    a = np.asarray(x, dtype=float)
    return float(a.mean()) if a.size else NAN


@register("acceptance", "greedy",
          summary="the best mean, accepted when it beats the baseline's")
def accept_greedy(scores: Scores, baseline: Sequence[float], *,
                  units: Sequence[Any] | None = None) -> list[str]:
    """The candidate with the best mean, accepted if its mean beats the baseline's.

    Ties go to the first candidate in ``scores``' order. Returns ``[name]`` or ``[]``.
    """
    best, best_mean = None, -math.inf
    for name, s in scores.items():
        m = mean_or_nan(s)
        if m > best_mean:
            best, best_mean = name, m
    return [best] if best is not None and best_mean > mean_or_nan(baseline) else []


@register("acceptance", "threshold",
          summary="every candidate whose mean gain exceeds `threshold`, best first",
          takes_threshold=True)
def accept_threshold(scores: Scores, baseline: Sequence[float], threshold: float = 0.0, *,
                     units: Sequence[Any] | None = None) -> list[str]:
    """Every candidate whose mean gain over the baseline exceeds ``threshold`` (strictly),
    best gain first (ties in ``scores``' order)."""
    b = mean_or_nan(baseline)
    gains = [(name, mean_or_nan(s) - b) for name, s in scores.items()]
    kept = [(name, g) for name, g in gains if g > threshold]
    return [name for name, _ in sorted(kept, key=lambda ng: -ng[1])]


def accept_pareto(scores_by_task: Mapping[str, Mapping[Any, float]]) -> list[str]:
    """The Pareto front over tasks (GEPA-style): the candidates no other candidate dominates.

    ``a`` dominates ``b`` when ``a`` scores at least as well on every task and
    strictly better on one. Candidates with identical scores do not dominate
    each other, so both stay. Returned in input order.

    Raises:
        ValueError: when candidates were scored on different task sets.
    """
    names = list(scores_by_task)
    if not names:
        return []
    tasks = sorted(scores_by_task[names[0]], key=str)
    for n in names:
        if set(scores_by_task[n]) != set(tasks):
            raise ValueError(f"accept_pareto needs every candidate scored on the same tasks; "
                             f"{n!r} differs from {names[0]!r}")
    m = np.array([[float(scores_by_task[n][t]) for t in tasks] for n in names], dtype=float)
    front = []
    for i, n in enumerate(names):
        ge = (m >= m[i]).all(axis=1)
        gt = (m > m[i]).any(axis=1)
        if not (ge & gt).any():
            front.append(n)
    return front


def _task_of(unit: Any, i: int) -> Any:
    if unit is None:
        return i
    return unit[0] if isinstance(unit, tuple | list) else unit


def _by_task(values: Sequence[float], units: Sequence[Any] | None) -> dict[Any, float]:
    sums: dict[Any, list[float]] = {}
    for i, v in enumerate(values):
        t = _task_of(units[i] if units is not None else None, i)
        sums.setdefault(t, []).append(float(v))
    return {t: sum(v) / len(v) for t, v in sums.items()}


@register("acceptance", "pareto",
          summary="GEPA's Pareto front over tasks, less what only ties the baseline")
def pareto_rule(scores: Scores, baseline: Sequence[float], *,
                units: Sequence[Any] | None = None) -> list[str]:
    """:func:`accept_pareto` as an acceptance rule over unit vectors.

    Units are grouped into tasks by ``units`` (a unit label is a task name or a
    ``(task, seed)`` tuple; without labels each unit is its own task) and
    scored by their per-task mean. The baseline joins the pool; accepted are
    the candidates on the front that beat the baseline on at least one task
    (a front member equal to the baseline everywhere adds nothing).
    """
    pool = {BASELINE: _by_task(baseline, units)}
    pool.update({name: _by_task(s, units) for name, s in scores.items()})
    base = pool[BASELINE]
    return [n for n in accept_pareto(pool)
            if n != BASELINE and any(pool[n][t] > base[t] for t in base)]


def get_rule(rule: str | Rule, *, where: str = "acceptance", **params: Any) -> Rule:
    """The acceptance rule registered as ``rule`` (``params`` bound, e.g. ``threshold``),
    or ``rule`` itself when it is already a function.

    Raises:
        ConfigError: naming the registered rules, when ``rule`` is none of them.
    """
    fn: Rule = rule if callable(rule) else get("acceptance", rule, where=where)
    return functools.partial(fn, **params) if params else fn


# -- aligned scores from episodes ------------------------------------------------------------
def _field(ep: Episode | Mapping[str, Any], name: str) -> Any:
    return getattr(ep, name) if isinstance(ep, Episode) else ep[name]


def cell_means(episodes: Iterable[Episode | Mapping[str, Any]], value: Callable[[Any], float]
               ) -> dict[tuple[str, Any], float]:
    """``(task, seed) -> mean value(episode)`` over the non-infra episodes, the latest attempt
    of each sampling (several samplings on one cell are averaged)."""
    latest: dict[tuple, Any] = {}
    for ep in episodes:
        if str(_field(ep, "outcome")) == Outcome.INFRA_ERROR.value:
            continue
        sampling = ep.sampling if isinstance(ep, Episode) else ep.get("sampling")
        attempt = ep.attempt if isinstance(ep, Episode) else ep.get("attempt", 0)
        key = (_field(ep, "task"), _field(ep, "seed"),
               json.dumps(sampling, sort_keys=True, default=str))
        if key not in latest or attempt > latest[key][0]:
            latest[key] = (attempt, ep)
    sums: dict[tuple[str, Any], list[float]] = {}
    for (task, seed, _), (_, ep) in latest.items():
        sums.setdefault((task, seed), []).append(value(ep))
    return {k: sum(v) / len(v) for k, v in sums.items()}


def _success(ep: Any) -> float:
    return float(str(_field(ep, "outcome")) == Outcome.SUCCESS.value)


def unit_order(key: tuple[str, Any]) -> tuple[str, float, str]:
    """Sort key of a ``(task, seed)`` unit: by task, then seeds numerically."""
    task, seed = key
    return (str(task), float(seed) if isinstance(seed, int | float) else math.inf, str(seed))


def unit_scores(by_candidate: Mapping[str, Iterable[Episode | Mapping[str, Any]]]
                ) -> tuple[list[tuple[str, Any]], dict[str, list[float]]]:
    """Success of each candidate on the (task, seed) units every candidate ran, aligned.

    ``by_candidate`` maps a name (a candidate, or the baseline) to its episodes
    (:class:`Episode` objects or record rows). Infra errors are dropped, the
    latest attempt of a cell is kept, and several samplings on one (task,
    seed) are averaged. Returns the sorted units and ``name -> scores``, ready
    for the acceptance rules (pass the units as ``units=``).
    """
    cells = {name: cell_means(eps, _success) for name, eps in by_candidate.items()}
    shared = set.intersection(*(set(c) for c in cells.values())) if cells else set()
    units = sorted(shared, key=unit_order)
    return units, {name: [c[u] for u in units] for name, c in cells.items()}

