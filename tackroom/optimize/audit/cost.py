"""Cost: the input tokens and turns per episode an accepted edit adds.

:func:`edit_cost` pairs the episodes before and after an edit on shared (task, seed)
units; :func:`edit_costs` walks a chain of accepted edits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tackroom.analysis.stats import paired_bootstrap
from tackroom.core.episode import Episode
from tackroom.optimize.acceptance import cell_means, mean_or_nan, unit_order
from tackroom.optimize.audit.results import JsonResult

__all__ = ["Cost", "CostDelta", "edit_cost", "edit_costs"]


@dataclass(frozen=True)
class CostDelta(JsonResult):
    """One per-episode quantity before and after an edit, on shared (task, seed) units.

    ``diff`` is ``after − before`` (mean over units) with its paired-bootstrap
    interval (``lo``, ``hi``) and p-value.
    """

    before: float
    after: float
    diff: float
    lo: float
    hi: float
    p_value: float


@dataclass(frozen=True)
class Cost(JsonResult):
    """What an accepted edit costs: input tokens and turns per episode, after − before."""

    label: str
    input_tokens: CostDelta
    turns: CostDelta
    n: int


def _prompt_tokens(ep: Any) -> float:
    if isinstance(ep, Episode):
        return float(ep.prompt_tokens)
    return float(ep["prompt_tokens"])


def _n_turns(ep: Any) -> float:
    if isinstance(ep, Episode):
        return float(ep.n_turns)
    return float(ep["n_turns"])


def _delta(a: np.ndarray, b: np.ndarray, n_boot: int, seed: int) -> CostDelta:
    r = paired_bootstrap(b, a, n_boot=n_boot, seed=seed)
    return CostDelta(before=mean_or_nan(a), after=mean_or_nan(b), diff=r.diff, lo=r.lo, hi=r.hi,
                     p_value=r.p_value)


def edit_cost(before_episodes: Iterable[Episode | Mapping[str, Any]],
              after_episodes: Iterable[Episode | Mapping[str, Any]], *, label: str = "",
              n_boot: int = 2000, seed: int = 0) -> Cost:
    """Input tokens (sum of the turns' ``prompt_tokens``) and turns per episode, after − before.

    Episodes (or record rows with ``prompt_tokens`` and ``n_turns``) are paired
    on the (task, seed) both sides ran; infra errors are dropped, the latest
    attempt kept, samplings averaged. Successes and failures both count: a
    rule that makes episodes longer costs whatever they end in.
    """
    before, after = list(before_episodes), list(after_episodes)
    tb, ta = cell_means(before, _prompt_tokens), cell_means(after, _prompt_tokens)
    nb, na = cell_means(before, _n_turns), cell_means(after, _n_turns)
    keys = sorted(tb.keys() & ta.keys(), key=unit_order)
    arr = lambda d: np.array([d[k] for k in keys], dtype=float)  # noqa: E731
    return Cost(label=label, input_tokens=_delta(arr(tb), arr(ta), n_boot, seed),
                turns=_delta(arr(nb), arr(na), n_boot, seed + 1), n=len(keys))


def edit_costs(versions: Sequence[tuple[str, Iterable[Episode | Mapping[str, Any]]]], *,
               n_boot: int = 2000, seed: int = 0) -> list[Cost]:
    """:func:`edit_cost` of each accepted edit in a chain ``[(name, episodes), ...]``
    (the seed skill first): one :class:`Cost` per consecutive pair, labelled ``a → b``."""
    eps = [(name, list(e)) for name, e in versions]
    return [edit_cost(a, b, label=f"{na} → {nb}", n_boot=n_boot, seed=seed)
            for (na, a), (nb, b) in zip(eps, eps[1:], strict=False)]
