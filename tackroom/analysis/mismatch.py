"""Mismatch M(π, h): how far a policy falls short of what a harness allows.

Two forms (docs/research.md §1):

Return form
    ``M(π, h) = C(h) - J_h(π)``, from episode outcomes alone
    (:func:`mismatch_return`). ``J_h(π) = C(h) - M(π, h)`` by construction,
    with J measured on the *same tasks* as the ceiling.
Action form
    ``E_s KL(π*_h(·|s) ‖ π(·|s))``, when log-probabilities of candidate
    actions are known (:func:`action_kl`, :func:`mismatch_action`), and the
    log-odds analysis (:func:`log_odds_regression`): under KL-regularised
    training towards a harness's reference policy π_h, the trained policy's
    log-odds between two actions are the harness's preference log-odds plus
    ``(Q(s,a) - Q(s,a'))/β``, so regressing one on the other measures how much
    of the harness's preferences a policy carries.

The action-form inputs come from *scoring* a fixed set of candidate actions
in a state with a model that returns log-probabilities (the ``hf`` backend,
a later issue): the policy under test gives ``π``, a reference policy under
h (e.g. one trained to convergence there) gives ``π*_h`` or ``π_h``. Nothing
here reads them from the records yet; the functions take plain
``{action: logprob}`` dicts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tackroom.analysis.ceiling import CeilingEstimate, CeilingsArg, best_ceilings
from tackroom.analysis.stats import (
    TaskTable,
    bootstrap_means,
    percentile_interval,
    wilson_mean,
)

__all__ = [
    "MismatchEstimate", "mismatch_return", "mismatch_from_table", "mismatch_one",
    "ActionMismatch", "action_kl", "mismatch_action", "log_odds", "LogOddsFit",
    "log_odds_regression",
]


# ---------------------------------------------------------------------------
# Return form
# ---------------------------------------------------------------------------

@dataclass
class MismatchEstimate:
    """``M(π, h) = C(h) - J_h(π)`` for one (policy, harness), on the ceiling's tasks.

    Attributes:
        policy / harness: the pair.
        ceiling: the ceiling estimate used (its ``value`` is over all its tasks).
        success: J_h(π), mean per-task success over the tasks used.
        success_lo / success_hi: Wilson 95% over those tasks.
        mismatch: ``ceiling_value - success`` exactly.
        lo / hi: percentile bootstrap 95% interval over tasks, resampling
            (ceiling, success) per task together.
        n_tasks: tasks used: the ceiling's tasks the policy ran under h.
        ceiling_value: the ceiling on those tasks (equals ``ceiling.value``
            when the policy ran all of them, ``n_missing == 0``).
        n_missing: ceiling tasks the policy never ran (left out of both terms).
        tasks: the tasks used, sorted.
    """

    policy: str
    harness: str
    ceiling: CeilingEstimate
    success: float
    success_lo: float
    success_hi: float
    mismatch: float
    lo: float
    hi: float
    n_tasks: int = 0
    ceiling_value: float = float("nan")
    n_missing: int = 0
    tasks: tuple[str, ...] = ()


def _per_task_pairs(table: TaskTable, policy: str, harness: str, ceiling: CeilingEstimate
                    ) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Tasks of the ceiling the policy ran, with the ceiling's and the policy's per-task values."""
    tasks, c, j = [], [], []
    for t in ceiling.tasks:
        r = table.rate(harness, policy, t)
        if r is None:
            continue
        tasks.append(t)
        c.append(ceiling.per_task.get(t, 0.0))
        j.append(r)
    return tasks, np.array(c, dtype=float), np.array(j, dtype=float)


def mismatch_one(table: TaskTable, policy: str, harness: str, ceiling: CeilingEstimate, *,
                 n_boot: int = 2000, seed: int = 0, confidence: float = 0.95
                 ) -> MismatchEstimate | None:
    """Return-form mismatch of one pair; ``None`` if the policy ran none of the ceiling's tasks."""
    tasks, c, j = _per_task_pairs(table, policy, harness, ceiling)
    if not tasks:
        return None
    n = len(tasks)
    ceiling_value = float(c.mean())
    success = float(j.mean())
    s_lo, s_hi = wilson_mean(success, n)
    lo, hi = percentile_interval(bootstrap_means(c - j, n_boot=n_boot, seed=seed), confidence)
    return MismatchEstimate(
        policy=policy, harness=harness, ceiling=ceiling, success=success, success_lo=s_lo,
        success_hi=s_hi, mismatch=ceiling_value - success, lo=lo, hi=hi, n_tasks=n,
        ceiling_value=ceiling_value, n_missing=len(ceiling.tasks) - n, tasks=tuple(tasks))


def mismatch_from_table(table: TaskTable, ceilings: CeilingsArg, *,
                        policies: Iterable[str] | None = None, n_boot: int = 2000,
                        seed: int = 0, confidence: float = 0.95) -> list[MismatchEstimate]:
    """:func:`mismatch_return` on an already-built :class:`~tackroom.analysis.stats.TaskTable`."""
    wanted = None if policies is None else set(policies)
    out = []
    for h, ceiling in sorted(best_ceilings(ceilings).items()):
        for p in table.policies(h):
            if wanted is not None and p not in wanted:
                continue
            est = mismatch_one(table, p, h, ceiling, n_boot=n_boot, seed=seed,
                               confidence=confidence)
            if est is not None:
                out.append(est)
    return out


def mismatch_return(rows: Iterable[Mapping[str, Any]], ceilings: CeilingsArg, *,
                    policies: Iterable[str] | None = None, n_boot: int = 2000, seed: int = 0,
                    confidence: float = 0.95) -> list[MismatchEstimate]:
    """``M(π, h) = C(h) - J_h(π)`` for every (policy, harness) with a ceiling, sorted.

    Args:
        rows: episode rows (final attempts kept, infra errors dropped here).
        ceilings: harness -> a :class:`CeilingEstimate` or a list of them (as
            :func:`~tackroom.analysis.ceiling.ceilings` returns; the best is used).
        policies: only these policies (default: every policy under each harness,
            the expert included).
        n_boot / seed / confidence: the bootstrap over tasks; the same seed
            is used for every pair, so results do not depend on order.

    J is the policy's mean per-task success on the ceiling's task set (tasks
    it never ran are left out of both terms and counted in ``n_missing``).
    """
    return mismatch_from_table(TaskTable(rows), ceilings, policies=policies, n_boot=n_boot,
                               seed=seed, confidence=confidence)


# ---------------------------------------------------------------------------
# Action form
# ---------------------------------------------------------------------------

def _log_normalise(logprobs: Mapping[str, float], actions: Sequence[str]) -> np.ndarray:
    x = np.array([logprobs[a] for a in actions], dtype=float)
    top = x.max()
    if not math.isfinite(top):
        raise ValueError("every candidate action has log-prob -inf (or one is NaN/+inf)")
    return x - (top + math.log(float(np.exp(x - top).sum())))


def action_kl(policy_logprobs: Mapping[str, float], reference_logprobs: Mapping[str, float]
              ) -> float:
    """``KL(π*_h ‖ π)`` in one state, over a shared set of candidate actions (nats).

    Args:
        policy_logprobs: action -> log π(a|s) of the policy under test.
        reference_logprobs: action -> log π*_h(a|s) of the harness's reference
            (e.g. a policy trained to convergence under h).

    Both are renormalised over the candidate set, so unnormalised scores
    (sequence log-likelihoods of each candidate) are fine. Actions the
    reference gives probability 0 (log-prob ``-inf``) contribute nothing; an
    action the reference allows but the policy rules out makes the KL ``inf``.

    Raises:
        ValueError: the two dicts name different actions, or are empty.
    """
    if set(policy_logprobs) != set(reference_logprobs):
        raise ValueError("action_kl needs the same candidate actions in both dicts; "
                         f"only in policy: {sorted(set(policy_logprobs) - set(reference_logprobs))}, "
                         f"only in reference: {sorted(set(reference_logprobs) - set(policy_logprobs))}")
    if not reference_logprobs:
        raise ValueError("action_kl needs at least one candidate action")
    actions = sorted(reference_logprobs)
    lr = _log_normalise(reference_logprobs, actions)
    lp = _log_normalise(policy_logprobs, actions)
    pr = np.exp(lr)
    keep = pr > 0
    with np.errstate(invalid="ignore"):
        kl = float(np.sum(pr[keep] * (lr[keep] - lp[keep])))
    return max(0.0, kl)  # rounding can give -1e-17


@dataclass
class ActionMismatch:
    """Action-form mismatch: mean per-state KL with a bootstrap interval over states."""

    mean_kl: float
    lo: float
    hi: float
    n_states: int


def mismatch_action(states: Iterable[tuple[Mapping[str, float], Mapping[str, float]]], *,
                    n_boot: int = 2000, seed: int = 0, confidence: float = 0.95
                    ) -> ActionMismatch:
    """``E_s KL(π*_h ‖ π)`` over scored states.

    Args:
        states: ``(policy_logprobs, reference_logprobs)`` per state, as for
            :func:`action_kl`.

    The interval is a percentile bootstrap over states. States from one
    episode are correlated, so with few episodes it is too narrow. With no
    states every field is NaN but ``n_states`` (0).
    """
    kls = np.array([action_kl(p, r) for p, r in states], dtype=float)
    if kls.size == 0:
        nan = float("nan")
        return ActionMismatch(mean_kl=nan, lo=nan, hi=nan, n_states=0)
    mean = float(kls.mean())
    if not math.isfinite(mean):
        return ActionMismatch(mean_kl=mean, lo=mean, hi=mean, n_states=int(kls.size))
    lo, hi = percentile_interval(bootstrap_means(kls, n_boot=n_boot, seed=seed), confidence)
    return ActionMismatch(mean_kl=mean, lo=lo, hi=hi, n_states=int(kls.size))


def log_odds(logprobs: Mapping[str, float], a: str, b: str) -> float:
    """``log p(a) - log p(b)`` (normalisation cancels, so raw scores are fine)."""
    return float(logprobs[a]) - float(logprobs[b])


@dataclass
class LogOddsFit:
    """Least-squares fit ``policy_log_odds ≈ slope · harness_log_odds + intercept``.

    ``slope`` near 1: the policy carries the harness's preferences whole (the
    log-odds identity with the Q-term uncorrelated); near 0: it ignores them.
    ``intercept`` absorbs the mean ``ΔQ/β``. ``slope_se`` is the ordinary
    standard error (NaN with fewer than 3 pairs). Degenerate inputs (fewer
    than 2 pairs, or all harness log-odds equal) give NaN slope and r².
    """

    slope: float
    intercept: float
    r2: float
    n: int
    slope_se: float = float("nan")


def log_odds_regression(pairs: Iterable[tuple[float, float]]) -> LogOddsFit:
    """Regress a policy's log-odds on the harness's preference log-odds.

    Args:
        pairs: ``(harness_log_odds, policy_log_odds)`` per (state, action
            pair): ``log π_h(a|s)/π_h(a'|s)`` measured from a reference policy
            under h, and ``log π(a|s)/π(a'|s)`` of the policy under test (see
            :func:`log_odds`).

    Plain least squares (numpy). The log-odds identity predicts
    ``policy = harness + (Q(s,a) - Q(s,a'))/β`` for a policy trained under h.
    """
    arr = np.array([(float(x), float(y)) for x, y in pairs], dtype=float).reshape(-1, 2)
    n = int(arr.shape[0])
    nan = float("nan")
    if n == 0:
        return LogOddsFit(slope=nan, intercept=nan, r2=nan, n=0)
    x, y = arr[:, 0], arr[:, 1]
    xm, ym = x.mean(), y.mean()
    sxx = float(np.sum((x - xm) ** 2))
    if n < 2 or sxx <= 1e-300:
        return LogOddsFit(slope=nan, intercept=float(ym), r2=nan, n=n)
    slope = float(np.sum((x - xm) * (y - ym)) / sxx)
    intercept = float(ym - slope * xm)
    resid = y - (slope * x + intercept)
    ss_res = float(np.sum(resid ** 2))
    ss_tot = float(np.sum((y - ym) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else nan
    se = math.sqrt(ss_res / (n - 2) / sxx) if n > 2 else nan
    return LogOddsFit(slope=slope, intercept=intercept, r2=r2, n=n, slope_se=se)
