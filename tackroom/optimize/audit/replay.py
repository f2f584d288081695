"""Acceptance replay: the selection effect (winner's curse) of an acceptance rule.

:func:`acceptance_replay` re-runs a rule on the same candidates scored on fresh
seeds. The gain seen at selection minus the gain of the same selected candidates on
fresh units is the *selection effect*: how much of the reported gain was picked noise.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tackroom.analysis.stats import bootstrap_means, paired_bootstrap, percentile_interval
from tackroom.optimize.acceptance import Rule, Scores, get_rule
from tackroom.optimize.audit.results import NAN, Interval, JsonResult

__all__ = ["Agreement", "SelectionEffect", "acceptance_replay", "replay_agreement"]


@dataclass(frozen=True)
class Agreement(JsonResult):
    """Whether the rule picks the same candidates on fresh seeds as at selection.

    ``same``: the accepted sets are equal; ``jaccard``: |A ∩ B| / |A ∪ B| (1.0
    when both are empty); ``top_same``: the first accepted (the rule's best) agrees.
    """

    selected: tuple[str, ...]
    replayed: tuple[str, ...]
    same: bool
    jaccard: float
    top_same: bool


@dataclass(frozen=True)
class SelectionEffect(JsonResult):
    """What :func:`acceptance_replay` measured.

    Attributes:
        rule: the rule's name (or the function's).
        selected: the candidates the rule accepted on the selection units.
        gain_selection: mean over ``selected`` of (candidate − baseline) on the
            selection units, with the paired-bootstrap interval of that fixed set.
        gain_fresh: the same on the fresh units.
        effect: ``gain_selection − gain_fresh``, the selection effect, with the
            bootstrap interval of the selected set (both sides resampled).
        curse_bootstrap: the selection-only estimate of the same effect: the
            mean, over bootstrap replicates of the selection units that re-run
            the rule, of (gain of the re-pick on the replicate − its gain on the
            original selection units). Needs no fresh units; compare it with
            ``effect``.
        n_selection / n_fresh: units per side; n_boot: replicates drawn;
            n_boot_empty: re-selection replicates where the rule accepted nothing
            (left out of ``curse_bootstrap``).
        agreement: does the rule pick the same candidates on the fresh units.
    """

    rule: str
    selected: tuple[str, ...]
    gain_selection: Interval
    gain_fresh: Interval
    effect: Interval
    curse_bootstrap: float
    n_selection: int
    n_fresh: int
    n_boot: int
    n_boot_empty: int
    agreement: Agreement


def _matrix(scores: Scores, names: Sequence[str], what: str) -> np.ndarray:
    rows = [np.asarray(scores[n], dtype=float).ravel() for n in names]
    if rows and any(r.size != rows[0].size for r in rows):
        raise ValueError(f"{what}: every candidate needs the same number of units")
    return np.vstack(rows) if rows else np.empty((0, 0))


def _rule_name(rule: str | Rule) -> str:
    if isinstance(rule, str):
        return rule
    base = rule.func if isinstance(rule, functools.partial) else rule
    return getattr(base, "__name__", repr(base))


def _agreement(selected: Sequence[str], replayed: Sequence[str]) -> Agreement:
    a, b = set(selected), set(replayed)
    jac = len(a & b) / len(a | b) if a | b else 1.0
    top = (selected[0] if selected else None) == (replayed[0] if replayed else None)
    return Agreement(selected=tuple(selected), replayed=tuple(replayed), same=a == b,
                     jaccard=jac, top_same=top)


def replay_agreement(selection: Scores, fresh: Scores, baseline_sel: Sequence[float],
                     baseline_fresh: Sequence[float], rule: str | Rule = "greedy", *,
                     units_sel: Sequence[Any] | None = None,
                     units_fresh: Sequence[Any] | None = None) -> Agreement:
    """Run ``rule`` on the selection units and again on the fresh units; compare the picks."""
    fn = get_rule(rule)
    return _agreement(fn(selection, baseline_sel, units=units_sel),
                      fn(fresh, baseline_fresh, units=units_fresh))


def acceptance_replay(selection: Scores, fresh: Scores, baseline_sel: Sequence[float],
                      baseline_fresh: Sequence[float], rule: str | Rule = "greedy", *,
                      units_sel: Sequence[Any] | None = None,
                      units_fresh: Sequence[Any] | None = None,
                      n_boot: int = 2000, seed: int = 0,
                      confidence: float = 0.95) -> SelectionEffect:
    """The selection effect of ``rule``: gain at selection minus gain on fresh seeds.

    ``selection[c]`` / ``baseline_sel`` are aligned scores on the units the
    optimiser selected on; ``fresh[c]`` / ``baseline_fresh`` are the same
    candidates on fresh units (new seeds, same task distribution). The rule
    picks ``S`` on the selection units; then

        gain_selection = mean_{c∈S} (mean(selection[c]) − mean(baseline_sel))
        gain_fresh     = mean_{c∈S} (mean(fresh[c]) − mean(baseline_fresh))
        effect         = gain_selection − gain_fresh

    Fresh units are independent of the pick, so ``gain_fresh`` is unbiased
    for the true gain of the picked candidates and ``effect`` estimates the
    winner's curse of the procedure.

    The interval of ``effect`` holds the selected set ``S`` fixed and
    resamples the selection units and the fresh units independently (within
    a side the candidates' mean and the baseline are resampled as pairs):
    ``bootstrap_means(d_sel) − bootstrap_means(d_fresh)`` with ``d`` the
    per-unit gain of ``S``. It is centred on the observed effect and covers
    the sampling noise of both gains.

    Why not re-run the rule inside each replicate? Because then the
    replicate's pick is measured against the fresh units while its selection
    gain carries a *second* winner's curse (the resample's noise on top of the
    sample's), so the replicates centre near twice the effect: a bootstrap
    world in which the observed selection means are the truth must measure the
    re-pick against those means, not against fresh data. That correct version
    is ``curse_bootstrap``: the classic bootstrap estimate of the bias of a
    selected maximum, from the selection units alone; it tends to understate
    the curse when many candidates are near-tied, which is why the fresh-seed
    replay is the measurement and ``curse_bootstrap`` only a cross-check.

    The intervals of the two gains are ordinary paired bootstraps of the fixed
    set ``S`` (:func:`~tackroom.analysis.stats.paired_bootstrap`). Seeded: same
    inputs, same result. ``n_boot=0`` skips the bootstraps (intervals NaN).
    """
    fn = get_rule(rule)
    names = list(selection)
    if set(fresh) != set(names):
        raise ValueError("acceptance_replay needs the same candidates in selection and fresh")
    sel = _matrix(selection, names, "selection")
    fr = _matrix(fresh, names, "fresh")
    bs = np.asarray(baseline_sel, dtype=float).ravel()
    bf = np.asarray(baseline_fresh, dtype=float).ravel()
    if sel.size and sel.shape[1] != bs.size or fr.size and fr.shape[1] != bf.size:
        raise ValueError("acceptance_replay: baseline and candidates differ in units")
    index = {n: i for i, n in enumerate(names)}
    us = list(units_sel) if units_sel is not None else None
    uf = list(units_fresh) if units_fresh is not None else None

    chosen = fn({n: sel[index[n]] for n in names}, bs, units=us)
    replayed = fn({n: fr[index[n]] for n in names}, bf, units=uf)
    rows = [index[n] for n in chosen]

    def gains(rows: list[int], a: np.ndarray, b: np.ndarray) -> float:
        return float(a[rows].mean(axis=1).mean() - b.mean())

    if rows:
        g_sel = paired_bootstrap(sel[rows].mean(axis=0), bs, n_boot=max(n_boot, 1), seed=seed,
                                 confidence=confidence)
        g_fr = paired_bootstrap(fr[rows].mean(axis=0), bf, n_boot=max(n_boot, 1),
                                seed=seed + 1, confidence=confidence)
        point = g_sel.diff - g_fr.diff
        gain_sel = Interval(g_sel.diff, *((g_sel.lo, g_sel.hi) if n_boot else (NAN, NAN)))
        gain_fr = Interval(g_fr.diff, *((g_fr.lo, g_fr.hi) if n_boot else (NAN, NAN)))
    else:
        point = NAN
        gain_sel = gain_fr = Interval(NAN, NAN, NAN)

    if rows and n_boot:
        d_sel = sel[rows].mean(axis=0) - bs
        d_fr = fr[rows].mean(axis=0) - bf
        boots = (bootstrap_means(d_sel, n_boot=n_boot, seed=seed)
                 - bootstrap_means(d_fr, n_boot=n_boot, seed=seed + 1))
        lo, hi = percentile_interval(boots, confidence)
    else:
        lo = hi = NAN

    # The selection-only bootstrap estimate of the winner's curse: in each replicate the
    # observed selection means play the truth, the rule re-picks on resampled units.
    rng = np.random.default_rng(seed + 2)
    curses: list[float] = []
    empty = 0
    n_s, n_f = bs.size, bf.size
    observed = sel.mean(axis=1) if sel.size else np.empty(0)
    base_obs = float(bs.mean()) if n_s else NAN
    for _ in range(n_boot if n_s else 0):
        i = rng.integers(0, n_s, n_s)
        s_i, b_i = sel[:, i], bs[i]
        picked = fn({n: s_i[index[n]] for n in names}, b_i,
                    units=[us[k] for k in i] if us is not None else None)
        if not picked:
            empty += 1
            continue
        r = [index[n] for n in picked]
        curses.append(gains(r, s_i, b_i) - float(observed[r].mean() - base_obs))
    curse = float(np.mean(curses)) if curses else NAN
    return SelectionEffect(
        rule=_rule_name(rule), selected=tuple(chosen), gain_selection=gain_sel,
        gain_fresh=gain_fr, effect=Interval(point, lo, hi), curse_bootstrap=curse,
        n_selection=int(n_s), n_fresh=int(n_f), n_boot=int(n_boot), n_boot_empty=empty,
        agreement=_agreement(chosen, replayed))
