"""Statistics used everywhere: success rates with Wilson intervals, pass@k, the
paired bootstrap, and the per-task index the harness-dependence estimators read.

Every function that takes episode rows (dicts as the record store returns
them) first keeps the latest attempt of each cell and drops infra errors
(:func:`scored_rows`), so callers may pass raw rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tackroom.core.episode import Outcome


def wilson(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (95% by default).

    Well-behaved at 0 and n successes, unlike the normal approximation.
    Returns ``(0.0, 1.0)`` for ``n == 0``.
    """
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def final_attempts(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Keep the latest attempt of each (task, harness hash, policy, seed, sampling) cell."""
    best: dict[tuple, Any] = {}
    for r in rows:
        key = (r["task"], r["harness_hash"], r["policy"], r["seed"], str(r.get("sampling")))
        if key not in best or r["attempt"] > best[key]["attempt"]:
            best[key] = r
    return list(best.values())


def scored_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The rows a success rate may count: latest attempt per cell, infra errors dropped.

    Applies :func:`final_attempts` (one row per (task, harness hash, policy,
    seed, sampling), the highest ``attempt``) and then removes ``infra_error``
    episodes, which are never task failures. Idempotent, so functions may call
    it on rows already filtered.
    """
    return [r for r in final_attempts(rows) if r["outcome"] != Outcome.INFRA_ERROR]


@dataclass(frozen=True)
class Rate:
    """A success rate with its Wilson 95% interval (``n == 0``: rate 0, interval [0, 1])."""

    successes: int
    n: int
    rate: float
    lo: float
    hi: float


def rate_of(successes: int, n: int) -> Rate:
    """:class:`Rate` from counts."""
    lo, hi = wilson(successes, n)
    return Rate(successes=successes, n=n, rate=successes / n if n else 0.0, lo=lo, hi=hi)


def success_rate(rows: Iterable[Mapping[str, Any]]) -> Rate:
    """Success over the scored episodes of ``rows`` (see :func:`scored_rows`), Wilson interval."""
    scored = scored_rows(rows)
    return rate_of(sum(1 for r in scored if r["outcome"] == Outcome.SUCCESS), len(scored))


def wilson_mean(mean: float, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson interval for a mean of ``n`` values in [0, 1] (e.g. per-task success rates).

    Treats the mean as a binomial proportion over the ``n`` units. For values
    strictly inside [0, 1] (tasks run with several seeds) the true variance of
    the mean is at most the binomial one, so the interval is conservative.
    """
    if n <= 0:
        return (0.0, 1.0)
    return wilson(mean * n, n, z)  # type: ignore[arg-type]  # the algebra takes a float


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples with ``c`` successes (Chen et al., 2021).

    ``1 - C(n-c, k) / C(n, k)``, the probability that a random ``k``-subset of
    the ``n`` samples holds at least one success, computed as the stable
    product ``1 - prod_{i=n-c+1}^{n} (1 - k/i)`` (no huge binomials).

    Raises:
        ValueError: unless ``0 <= c <= n`` and ``1 <= k <= n`` (with fewer than
            ``k`` samples the estimator is undefined).
    """
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:  # every k-subset holds a success
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


@dataclass(frozen=True)
class BootstrapResult:
    """A paired bootstrap of ``mean(a) - mean(b)``.

    Attributes:
        diff: the observed mean difference.
        lo / hi: percentile bootstrap interval of the difference.
        p_value: two-sided bootstrap p-value for "no difference" (the centred
            bootstrap distribution compared with ``|diff|``, with the +1
            correction so it is never 0).
        n: number of pairs. With ``n == 0`` every other field is NaN.
    """

    diff: float
    lo: float
    hi: float
    p_value: float
    n: int


# Bootstrap draws are made in blocks of at most this many numbers.
_BLOCK = 4_000_000


def bootstrap_means(values: Sequence[float] | np.ndarray, *, n_boot: int = 2000,
                    seed: int = 0) -> np.ndarray:
    """``n_boot`` bootstrap resample means of ``values`` (seeded, deterministic).

    Resampling ``n`` values with replacement only matters through how many
    times each *distinct* value is drawn, which is multinomial. Success data
    has few distinct values (0/1, or per-task rates over a few seeds), so the
    means come from ``n_boot`` multinomial draws over the distinct values:
    exactly the ordinary bootstrap distribution, at a cost independent of
    ``n`` (24,000 pairs take milliseconds). With many distinct values it falls
    back to drawing indices, in bounded blocks.
    """
    x = np.asarray(values, dtype=float).ravel()
    n = x.size
    if n == 0:
        return np.full(n_boot, np.nan)
    rng = np.random.default_rng(seed)
    distinct, counts = np.unique(x, return_counts=True)
    if distinct.size <= 512:
        draws = rng.multinomial(n, counts / n, size=n_boot)
        return (draws @ distinct) / n
    out = np.empty(n_boot)
    block = max(1, _BLOCK // n)
    for start in range(0, n_boot, block):
        m = min(block, n_boot - start)
        out[start:start + m] = x[rng.integers(0, n, size=(m, n))].mean(axis=1)
    return out


def percentile_interval(samples: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """The central ``confidence`` percentile interval of bootstrap samples."""
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(samples, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def paired_bootstrap(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, *,
                     n_boot: int = 2000, seed: int = 0,
                     confidence: float = 0.95) -> BootstrapResult:
    """Paired bootstrap of ``mean(a) - mean(b)`` over aligned pairs.

    ``a[i]`` and ``b[i]`` must measure the same unit (e.g. the same task and
    seed, see :func:`paired_cells`), so the pair is resampled as one and
    task difficulty cancels. Same ``seed``, same result.
    """
    xa = np.asarray(a, dtype=float).ravel()
    xb = np.asarray(b, dtype=float).ravel()
    if xa.shape != xb.shape:
        raise ValueError(f"paired_bootstrap needs equal lengths, got {xa.size} and {xb.size}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    n = int(xa.size)
    if n == 0:
        nan = float("nan")
        return BootstrapResult(diff=nan, lo=nan, hi=nan, p_value=nan, n=0)
    d = xa - xb
    diff = float(d.mean())
    means = bootstrap_means(d, n_boot=n_boot, seed=seed)
    lo, hi = percentile_interval(means, confidence)
    # Under "no difference" the centred bootstrap distribution stands in for the null.
    extreme = int(np.count_nonzero(np.abs(means - diff) >= abs(diff) - 1e-12))
    p_value = min(1.0, (extreme + 1) / (n_boot + 1))
    return BootstrapResult(diff=diff, lo=lo, hi=hi, p_value=p_value, n=n)


def _cell_key(key: tuple[Any, Any]) -> tuple[str, int, str]:
    task, seed = key
    return (str(task), seed if isinstance(seed, int) else math.inf, str(seed))  # type: ignore[return-value]


def paired_cells(rows: Iterable[Mapping[str, Any]], a: tuple[str, str], b: tuple[str, str]
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Success of two (policy, harness) cells aligned by (task, seed).

    Returns two float arrays of equal length, one entry per (task, seed) run
    by both, in sorted order. An entry is the success (0/1) of the scored
    episode there, or the mean when several samplings share the (task, seed).
    Feed them to :func:`paired_bootstrap`.
    """
    (pol_a, h_a), (pol_b, h_b) = a, b
    sums: dict[tuple[str, str], dict[tuple[Any, Any], list[int]]] = {a: {}, b: {}}
    for r in scored_rows(rows):
        side = (r["policy"], r["harness"])
        if side not in sums:
            continue
        cell = sums[side].setdefault((r["task"], r["seed"]), [0, 0])
        cell[0] += 1
        cell[1] += r["outcome"] == Outcome.SUCCESS
    sa, sb = sums[(pol_a, h_a)], sums[(pol_b, h_b)]
    keys = sorted(sa.keys() & sb.keys(), key=_cell_key)
    xa = np.array([sa[k][1] / sa[k][0] for k in keys], dtype=float)
    xb = np.array([sb[k][1] / sb[k][0] for k in keys], dtype=float)
    return xa, xb


class TaskTable:
    """Scored episodes counted per (harness, policy, task): the index every estimator reads.

    Built in one pass over the rows (after :func:`scored_rows`), so all the
    per-task numbers of a 24,000-episode report come from one dict.
    ``cells[harness][policy][task] == [n, successes]``.
    """

    def __init__(self, rows: Iterable[Mapping[str, Any]]) -> None:
        flat: dict[tuple[str, str, str], list[int]] = {}
        scored = scored_rows(rows)
        for r in scored:
            key = (r["harness"], r["policy"], r["task"])
            cell = flat.get(key)
            if cell is None:
                cell = flat[key] = [0, 0]
            cell[0] += 1
            cell[1] += r["outcome"] == Outcome.SUCCESS
        self.n_episodes = len(scored)
        self.cells: dict[str, dict[str, dict[str, list[int]]]] = {}
        for (h, p, t), cell in flat.items():
            self.cells.setdefault(h, {}).setdefault(p, {})[t] = cell

    def harnesses(self) -> list[str]:
        """Harness names with scored episodes, sorted."""
        return sorted(self.cells)

    def policies(self, harness: str) -> list[str]:
        """Policies with scored episodes under ``harness``, sorted."""
        return sorted(self.cells.get(harness, {}))

    def tasks(self, harness: str, policy: str | None = None) -> list[str]:
        """Tasks run under ``harness`` (by ``policy``, or by anyone), sorted."""
        by_policy = self.cells.get(harness, {})
        if policy is not None:
            return sorted(by_policy.get(policy, {}))
        return sorted({t for tasks in by_policy.values() for t in tasks})

    def counts(self, harness: str, policy: str, task: str) -> tuple[int, int]:
        """``(n, successes)`` of one cell; ``(0, 0)`` when never run."""
        cell = self.cells.get(harness, {}).get(policy, {}).get(task)
        return (cell[0], cell[1]) if cell else (0, 0)

    def rate(self, harness: str, policy: str, task: str) -> float | None:
        """Per-task success rate, ``None`` when the cell was never run."""
        n, c = self.counts(harness, policy, task)
        return c / n if n else None
