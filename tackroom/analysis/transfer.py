"""Transfer across harnesses: the train × eval matrix, and what a cross-harness gap is made of.

A policy trained under one harness carries that harness's action
preferences; evaluated under another, its success drops
(:func:`transfer_matrix`). And since ``J_h(π) = C(h) - M(π, h)``, the gap
between two (policy, harness) scores always splits exactly into a ceiling
part and a mismatch part (:func:`conflation`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tackroom.analysis.ceiling import EXPERT, CeilingsArg, best_ceilings
from tackroom.analysis.mismatch import MismatchEstimate, mismatch_one
from tackroom.analysis.stats import (
    BootstrapResult,
    Rate,
    TaskTable,
    paired_bootstrap,
    rate_of,
    scored_rows,
)
from tackroom.core.episode import Outcome

__all__ = ["TransferMatrix", "transfer_matrix", "Conflation", "conflation", "reported_cells",
           "conflation_pairs"]


@dataclass
class TransferMatrix:
    """Success of policies trained under each harness, evaluated under each harness.

    Attributes:
        train_harnesses: harnesses some recorded policy was trained under, sorted.
        eval_harnesses: harnesses those policies were evaluated under, sorted.
        cells: ``(train_h, eval_h) -> Rate`` pooling the scored episodes of
            every policy trained under ``train_h`` (Wilson interval over episodes).
        drop: ``(train_h, eval_h) -> cells[train_h, train_h].rate -
            cells[train_h, eval_h].rate`` wherever both exist (0 on the diagonal).
            Positive means success fell when the harness was changed.
        drop_test: ``(train_h, eval_h) -> BootstrapResult`` for the same drop on
            the cells run under both harnesses, paired by (policy, task, seed,
            sampling); off-diagonal only. Its ``diff`` equals ``drop`` when
            the grid is complete and can differ when it is not.
        policies: train harness -> the policies pooled in its row.
        by_policy: ``(policy, eval_h) -> Rate``: the same matrix one policy at a
            time (a row per trained policy), for when a training harness pools
            several policies (e.g. two base models, or a policy trained further).
        policy_drop: ``(policy, eval_h) -> by_policy[policy, own] - by_policy[policy,
            eval_h]``, where ``own`` is the harness the policy was trained under
            and it was evaluated there.
    """

    train_harnesses: list[str]
    eval_harnesses: list[str]
    cells: dict[tuple[str, str], Rate]
    drop: dict[tuple[str, str], float]
    drop_test: dict[tuple[str, str], BootstrapResult] = field(default_factory=dict)
    policies: dict[str, list[str]] = field(default_factory=dict)
    by_policy: dict[tuple[str, str], Rate] = field(default_factory=dict)
    policy_drop: dict[tuple[str, str], float] = field(default_factory=dict)


def transfer_matrix(rows: Iterable[Mapping[str, Any]], train_harness: Mapping[str, str], *,
                    n_boot: int = 2000, seed: int = 0, confidence: float = 0.95
                    ) -> TransferMatrix:
    """The train-harness × eval-harness success matrix and the drop off the diagonal.

    Args:
        rows: episode rows (final attempts kept, infra errors dropped here).
        train_harness: policy id -> harness it was trained under. Policies not
            in it (base models, the expert) are not part of the matrix.
        n_boot / seed / confidence: the paired bootstrap behind ``drop_test``.
    """
    counts: dict[tuple[str, str], list[int]] = {}
    per_policy: dict[tuple[str, str], list[int]] = {}
    # (train_h, eval_h) -> (policy, task, seed, sampling) -> [n, successes]
    units: dict[tuple[str, str], dict[tuple[Any, ...], list[int]]] = {}
    policies: dict[str, set[str]] = {}
    for r in scored_rows(rows):
        pol = r["policy"]
        th = train_harness.get(pol)
        if th is None or pol == EXPERT:
            continue
        key = (th, r["harness"])
        ok = r["outcome"] == Outcome.SUCCESS
        cell = counts.setdefault(key, [0, 0])
        cell[0] += 1
        cell[1] += ok
        mine = per_policy.setdefault((pol, r["harness"]), [0, 0])
        mine[0] += 1
        mine[1] += ok
        unit = units.setdefault(key, {}).setdefault(
            (pol, r["task"], str(r["seed"]), str(r.get("sampling"))), [0, 0])
        unit[0] += 1
        unit[1] += ok
        policies.setdefault(th, set()).add(pol)

    cells = {k: rate_of(c, n) for k, (n, c) in counts.items()}
    drop: dict[tuple[str, str], float] = {}
    drop_test: dict[tuple[str, str], BootstrapResult] = {}
    for (th, eh), rate in cells.items():
        diag = cells.get((th, th))
        if diag is None:
            continue
        drop[(th, eh)] = diag.rate - rate.rate
        if eh == th:
            continue
        on_diag, off_diag = units[(th, th)], units[(th, eh)]
        keys = sorted(on_diag.keys() & off_diag.keys())
        if keys:
            a = np.array([on_diag[k][1] / on_diag[k][0] for k in keys])
            b = np.array([off_diag[k][1] / off_diag[k][0] for k in keys])
            drop_test[(th, eh)] = paired_bootstrap(a, b, n_boot=n_boot, seed=seed,
                                                   confidence=confidence)
    by_policy = {k: rate_of(c, n) for k, (n, c) in sorted(per_policy.items())}
    policy_drop = {(pol, eh): by_policy[(pol, train_harness[pol])].rate - rate.rate
                   for (pol, eh), rate in by_policy.items()
                   if (pol, train_harness[pol]) in by_policy}
    return TransferMatrix(
        train_harnesses=sorted(policies),
        eval_harnesses=sorted({eh for _, eh in cells}),
        cells=dict(sorted(cells.items())), drop=dict(sorted(drop.items())),
        drop_test=dict(sorted(drop_test.items())),
        policies={th: sorted(ps) for th, ps in sorted(policies.items())},
        by_policy=by_policy, policy_drop=policy_drop)


@dataclass
class Conflation:
    """``J_a - J_b = (C(h_a) - C(h_b)) - (M(a, h_a) - M(b, h_b))``, both parts reported.

    Attributes:
        a / b: the (policy, harness) pairs compared.
        success_a / success_b: J of each, on its ceiling's tasks.
        ceiling_a / ceiling_b: C of each harness on the same tasks.
        mismatch_a / mismatch_b: the full mismatch estimates (intervals included).
        gap: ``success_a - success_b``.
        ceiling_part: ``ceiling_a - ceiling_b``: the share of the gap the
            harnesses' ceilings explain.
        mismatch_part: ``mismatch_a.mismatch - mismatch_b.mismatch``.
            ``gap == ceiling_part - mismatch_part`` (up to float rounding).
        same_tasks: both sides were measured on the same task set; if not,
            the gap also mixes in task difficulty.
    """

    a: tuple[str, str]
    b: tuple[str, str]
    success_a: float
    success_b: float
    ceiling_a: float
    ceiling_b: float
    mismatch_a: MismatchEstimate
    mismatch_b: MismatchEstimate
    gap: float
    ceiling_part: float
    mismatch_part: float
    same_tasks: bool


def conflation(rows: Iterable[Mapping[str, Any]], a: tuple[str, str], b: tuple[str, str],
               ceilings: CeilingsArg, *, n_boot: int = 2000, seed: int = 0,
               confidence: float = 0.95) -> Conflation:
    """Split the gap between policy ``a`` under ``h_a`` and policy ``b`` under ``h_b``.

    Args:
        rows: episode rows.
        a / b: ``(policy, harness)``.
        ceilings: harness -> estimate(s), as :func:`~tackroom.analysis.ceiling.ceilings`
            returns (the best of each list is used).

    Raises:
        ValueError: a harness has no ceiling, or a policy ran none of its tasks.
    """
    table = TaskTable(rows)
    best = best_ceilings(ceilings)
    estimates = []
    for pol, h in (a, b):
        if h not in best:
            raise ValueError(f"no ceiling estimate for harness {h!r}")
        est = mismatch_one(table, pol, h, best[h], n_boot=n_boot, seed=seed,
                           confidence=confidence)
        if est is None:
            raise ValueError(f"policy {pol!r} ran none of the ceiling tasks under {h!r}")
        estimates.append(est)
    ma, mb = estimates
    return Conflation(
        a=tuple(a), b=tuple(b), success_a=ma.success, success_b=mb.success,  # type: ignore[arg-type]
        ceiling_a=ma.ceiling_value, ceiling_b=mb.ceiling_value, mismatch_a=ma, mismatch_b=mb,
        gap=ma.success - mb.success, ceiling_part=ma.ceiling_value - mb.ceiling_value,
        mismatch_part=ma.mismatch - mb.mismatch, same_tasks=ma.tasks == mb.tasks)


def _success_rates(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], float]:
    """``(policy, harness) -> success rate`` over the scored rows."""
    counts: dict[tuple[str, str], list[int]] = {}
    for r in scored_rows(rows):
        c = counts.setdefault((r["policy"], r["harness"]), [0, 0])
        c[0] += 1
        c[1] += r["outcome"] == Outcome.SUCCESS
    return {k: s / n for k, (n, s) in counts.items()}


def _home(rates: Mapping[tuple[str, str], float],
          train_harness: Mapping[str, str] | None) -> dict[str, str]:
    home: dict[str, str] = {}
    for pol in sorted({p for p, _ in rates if p != EXPERT}):
        own = (train_harness or {}).get(pol)
        if own is not None and (pol, own) in rates:
            home[pol] = own
        else:
            home[pol] = min((h for p, h in rates if p == pol),
                            key=lambda h: (-rates[(pol, h)], h))
    return home


def reported_cells(rows: Iterable[Mapping[str, Any]],
                   train_harness: Mapping[str, str] | None = None) -> dict[str, str]:
    """The harness each policy would be *reported* under: policy -> harness.

    A leaderboard shows each agent under its own harness: the one it was
    trained under when known (``train_harness``), otherwise the one where it
    scored best (ties broken by name). The expert is left out: it stands
    behind the ceilings, it is not an agent being compared.
    """
    return _home(_success_rates(rows), train_harness)


def conflation_pairs(rows: Iterable[Mapping[str, Any]],
                     train_harness: Mapping[str, str] | None = None, *, limit: int = 12
                     ) -> list[tuple[tuple[str, str], tuple[str, str]]]:
    """The cross-harness comparisons worth splitting, as ``((pol_a, h_a), (pol_b, h_b))``.

    Every two policies each under its reported harness (:func:`reported_cells`)
    when those harnesses differ — the comparison a leaderboard invites. With a
    single policy, its reported harness against each other harness it ran
    under — the drop a user sees when they swap the harness. ``a`` is the
    higher-scoring side, so gaps are positive. At most ``limit`` pairs.
    """
    rates = _success_rates(rows)
    home = _home(rates, train_harness)
    pairs: list[tuple[tuple[str, str], tuple[str, str]]] = []
    pols = sorted(home)
    if len(pols) == 1:
        (pol,) = pols
        pairs = [((pol, home[pol]), (pol, h))
                 for h in sorted(h for p, h in rates if p == pol and h != home[pol])]
    else:
        pairs = [((pa, home[pa]), (pb, home[pb])) for i, pa in enumerate(pols)
                 for pb in pols[i + 1:] if home[pa] != home[pb]]
    pairs = [(a, b) if rates[a] >= rates[b] else (b, a) for a, b in pairs]
    pairs.sort(key=lambda ab: (-(rates[ab[0]] - rates[ab[1]]), ab))
    return pairs[:limit]
