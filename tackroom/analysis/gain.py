"""Do ceiling and mismatch predict the gain from further training under a new harness?

docs/research.md §1: moving a policy π to a harness h' and training it further
there gains ``ΔJ = J_{h'}(π_after) - J_{h'}(π)``; the claim is that C(h') and
M(π, h'), both measured *before* the training, predict it. :func:`gain_points`
measures the points, :func:`fit_gain` fits ``ΔJ ≈ a + b·C + c·M`` by least
squares.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tackroom.analysis.ceiling import CeilingsArg, best_ceilings, ceilings_from_table
from tackroom.analysis.stats import TaskTable, paired_bootstrap

__all__ = ["GainPoint", "gain_points", "GainFit", "fit_gain"]

Rows = Iterable[Mapping[str, Any]]


@dataclass
class GainPoint:
    """One (policy, new harness h') point of the gain regression.

    Attributes:
        policy: the policy before further training.
        harness: h'.
        ceiling: C(h') on the tasks used, measured before.
        mismatch: M(π, h') = ceiling - success_before on those tasks.
        gain: success_after - success_before on those tasks.
        gain_lo / gain_hi: paired bootstrap 95% interval over tasks (``None``
            for points built by hand).
        policy_after: the policy after further training under h'.
        success_before / success_after: mean per-task success under h'.
        n_tasks: the ceiling's tasks both policies ran under h'.
    """

    policy: str
    harness: str
    ceiling: float
    mismatch: float
    gain: float
    gain_lo: float | None = None
    gain_hi: float | None = None
    policy_after: str = ""
    success_before: float = float("nan")
    success_after: float = float("nan")
    n_tasks: int = 0


def gain_points(before_rows: Rows, after_rows: Rows | None, ceilings: CeilingsArg | None,
                pairs: Iterable[tuple[str, str, str] | tuple[str, str]], *,
                train_harness: Mapping[str, str] | None = None, n_boot: int = 2000,
                seed: int = 0, confidence: float = 0.95) -> list[GainPoint]:
    """Measure ``(C(h'), M(π, h'), ΔJ)`` for each pair.

    Args:
        before_rows: episodes before further training (ceilings and mismatch
            come from here).
        after_rows: episodes of the further-trained policies (``None``: look
            in ``before_rows`` too, e.g. one store holding both).
        ceilings: harness -> estimate(s), measured before; ``None`` computes
            them from ``before_rows`` (with ``train_harness``).
        pairs: ``(policy_before, policy_after, h')``, or ``(policy, h')`` when
            the trained policy keeps its id (then ``after_rows`` must be
            separate records).
        train_harness: passed to the ceiling estimate when ``ceilings`` is ``None``.

    Everything is measured on the ceiling's tasks that both policies ran
    under h', so ``mismatch == ceiling - success_before`` and
    ``gain == success_after - success_before`` hold on one task set. A pair
    with no such task is left out.
    """
    before = TaskTable(before_rows)
    after = before if after_rows is None else TaskTable(after_rows)
    if ceilings is None:
        ceilings = ceilings_from_table(before, train_harness=train_harness)
    best = best_ceilings(ceilings)
    points = []
    for pair in pairs:
        if len(pair) == 2:
            pol_before, h = pair  # type: ignore[misc]
            pol_after = pol_before
        else:
            pol_before, pol_after, h = pair  # type: ignore[misc]
        ceiling = best.get(h)
        if ceiling is None:
            continue
        c, jb, ja = [], [], []
        for t in ceiling.tasks:
            rb, ra = before.rate(h, pol_before, t), after.rate(h, pol_after, t)
            if rb is None or ra is None:
                continue
            c.append(ceiling.per_task.get(t, 0.0))
            jb.append(rb)
            ja.append(ra)
        if not c:
            continue
        cv, sb, sa = float(np.mean(c)), float(np.mean(jb)), float(np.mean(ja))
        test = paired_bootstrap(ja, jb, n_boot=n_boot, seed=seed, confidence=confidence)
        points.append(GainPoint(policy=pol_before, harness=h, ceiling=cv, mismatch=cv - sb,
                                gain=sa - sb, gain_lo=test.lo, gain_hi=test.hi,
                                policy_after=pol_after, success_before=sb, success_after=sa,
                                n_tasks=len(c)))
    return points


@dataclass
class GainFit:
    """Least-squares ``gain ≈ intercept + coef_ceiling·C + coef_mismatch·M``.

    Attributes:
        coef_ceiling / coef_mismatch / intercept: NaN where not fitted.
        r2: coefficient of determination (NaN when the gains do not vary or
            no model could be fitted; trivially 1 for an exact fit).
        n: number of points.
        residuals: ``gain - fitted`` per point fitted, in input order (empty
            when nothing was fitted; points with NaN/inf values are left out).
        model: which terms were fitted: ``"ceiling+mismatch"``, ``"mismatch"``,
            ``"ceiling"``, ``"intercept"`` or ``"none"``.
        note: why a smaller model was fitted, if one was.
    """

    coef_ceiling: float
    coef_mismatch: float
    intercept: float
    r2: float
    n: int
    residuals: list[float] = field(default_factory=list)
    model: str = "ceiling+mismatch"
    note: str = ""

    def predict(self, ceiling: float, mismatch: float) -> float:
        """The fitted gain at (C, M); terms not fitted count 0."""
        def term(coef: float, x: float) -> float:
            return 0.0 if math.isnan(coef) else coef * x

        if math.isnan(self.intercept):
            return float("nan")
        return self.intercept + term(self.coef_ceiling, ceiling) + term(self.coef_mismatch,
                                                                        mismatch)


# Candidate models, largest first: (name, use ceiling, use mismatch).
_MODELS = (("ceiling+mismatch", True, True), ("mismatch", False, True),
           ("ceiling", True, False), ("intercept", False, False))


def fit_gain(points: Sequence[GainPoint]) -> GainFit:
    """Fit ``ΔJ ≈ a + b·C(h') + c·M(π, h')`` by least squares; never raises.

    With fewer than 3 points, or when C or M does not vary (e.g. every point
    uses the same h', so C is constant), the full model is not identified:
    the largest model that is (intercept + mismatch, then intercept +
    ceiling, then the intercept alone) is fitted instead, and ``model`` and
    ``note`` say so. Points with a NaN/inf value are left out (``n`` counts
    the rest). With no points everything is NaN and ``model == "none"``.
    """
    nan = float("nan")
    finite = [p for p in points
              if all(math.isfinite(v) for v in (p.gain, p.ceiling, p.mismatch))]
    dropped = len(points) - len(finite)
    dropped_note = [f"{dropped} point(s) with a NaN/inf value left out"] if dropped else []
    points = finite
    n = len(points)
    if n == 0:
        return GainFit(coef_ceiling=nan, coef_mismatch=nan, intercept=nan, r2=nan, n=0,
                       model="none", note="; ".join(dropped_note + ["no points"]))
    y = np.array([p.gain for p in points], dtype=float)
    cols = {"ceiling": np.array([p.ceiling for p in points], dtype=float),
            "mismatch": np.array([p.mismatch for p in points], dtype=float)}
    skipped = []
    for name, use_c, use_m in _MODELS:
        parts = [np.ones(n)]
        if use_c:
            parts.append(cols["ceiling"])
        if use_m:
            parts.append(cols["mismatch"])
        x = np.column_stack(parts)
        p = x.shape[1]
        if n < p or np.linalg.matrix_rank(x) < p:
            skipped.append(name)
            continue
        coef, *_ = np.linalg.lstsq(x, y, rcond=None)
        fitted = x @ coef
        resid = y - fitted
        ss_res = float(np.sum(resid ** 2))
        ss_tot = float(np.sum((y - y.mean()) ** 2))
        r2 = 1.0 - ss_res / ss_tot if ss_tot > 1e-300 else nan
        it = iter(coef[1:])
        coef_c = float(next(it)) if use_c else nan
        coef_m = float(next(it)) if use_m else nan
        notes = list(dropped_note)
        if skipped:
            notes.append(f"{n} points: could not fit {', '.join(skipped)} "
                         "(too few points or a regressor that does not vary); "
                         f"fitted {name}")
        if n == p:
            notes.append("as many points as parameters: the fit is exact and r2 says nothing")
        return GainFit(coef_ceiling=coef_c, coef_mismatch=coef_m, intercept=float(coef[0]),
                       r2=r2, n=n, residuals=[float(v) for v in resid], model=name,
                       note="; ".join(notes))
    raise AssertionError("the intercept-only model always fits n >= 1 points")  # unreachable
