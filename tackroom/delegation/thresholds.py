"""Thresholds τ_c per choice type, fitted on validation points for a target precision.

The decision model takes over a point when its best choice is an action (not
``continue``) and that choice's probability is ≥ τ_c. Its *precision* at τ is the
share of those take-overs where its choice is the expert's; its *coverage* is the
share of the type's points it takes over. :func:`fit_thresholds` picks, per type, the
lowest τ (the most take-overs) whose precision on the validation points reaches the
target with at least ``min_support`` take-overs; a type that cannot reach it gets no
threshold, so it is never delegated. ``per_type=False`` fits one τ for every type
together: the naive baseline the benchmark compares against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tackroom.core.errors import ConfigError


@dataclass(frozen=True)
class Scored:
    """One validation point: its type, p_D over its choices, the expert's choice, and
    which choices are actions (``False``: ``continue``)."""

    type: str
    p: Sequence[float]
    label: int
    is_action: Sequence[bool]

    @property
    def best(self) -> int:
        return max(range(len(self.p)), key=lambda i: (self.p[i], -i))

    @property
    def confidence(self) -> float | None:
        """p of the best choice when it is an action (a take-over candidate), else ``None``."""
        b = self.best
        return float(self.p[b]) if self.is_action[b] else None


@dataclass(frozen=True)
class ThresholdFit:
    """The fitted τ of one type (``None``: never delegate) and what it achieves."""

    type: str
    tau: float | None
    precision: float | None   # on the validation points, at tau
    coverage: float           # share of the type's points taken over at tau
    takeovers: int
    n: int


def fit_thresholds(points: Sequence[Scored], target_precision: float = 0.9, *,
                   min_support: int = 5, per_type: bool = True) -> list[ThresholdFit]:
    """τ per type (or one shared τ, named ``*``) reaching ``target_precision``."""
    if not 0.0 < target_precision <= 1.0:
        raise ConfigError(f"target precision {target_precision} must be in (0, 1]",
                          "--target-precision", "e.g. 0.9")
    if min_support < 1:
        raise ConfigError("min_support must be at least 1", "--min-support")
    groups: dict[str, list[Scored]] = {}
    for s in points:
        groups.setdefault(s.type if per_type else "*", []).append(s)
    return [_fit_one(t, g, target_precision, min_support) for t, g in sorted(groups.items())]


def _fit_one(kind: str, group: list[Scored], target: float, min_support: int) -> ThresholdFit:
    cands = sorted(((s.confidence, s.best == s.label) for s in group
                    if s.confidence is not None), key=lambda c: -c[0])
    n = len(group)
    best: ThresholdFit = ThresholdFit(kind, None, None, 0.0, 0, n)
    correct = 0
    # Walk the take-over candidates from the most confident down: at each distinct
    # confidence, τ = that value takes over every candidate at or above it.
    for i, (conf, ok) in enumerate(cands):
        correct += ok
        if i + 1 < len(cands) and cands[i + 1][0] == conf:
            continue  # ties go together: one τ cannot split them
        k = i + 1
        if k >= min_support and correct / k >= target:
            best = ThresholdFit(kind, round(conf, 6), correct / k, k / n, k, n)
    return best


def precision_at(points: Sequence[Scored], tau: float) -> tuple[float | None, float, int]:
    """Precision, coverage and take-overs of one τ on ``points`` (the check of a fit)."""
    taken = [s for s in points if s.confidence is not None and s.confidence >= tau]
    if not points:
        return None, 0.0, 0
    prec = sum(s.best == s.label for s in taken) / len(taken) if taken else None
    return prec, len(taken) / len(points), len(taken)
