"""The tilt model: which outcomes KL-regularised optimisation of a learned reward amplifies.

Maximising E_π[r̂] − β·KL(π ‖ π_0) has the closed-form optimum
π*(τ) ∝ π_0(τ)·exp(r̂(τ)/β). Summed over the trajectories of one outcome o::

    P*(o) = P_0(o) · E_{π_0}[exp(r̂/β) | o] / Z,     Z = E_{π_0}[exp(r̂/β)]

so an outcome grows exactly when its starting expected *exponentiated*
reward is above the average — whether or not the outcome is correct. A
learned reward that scores a wrong outcome highly (the research's
wrong-object grasps; the toy suite's near-miss clicks) makes that outcome
grow together with success (docs/research.md §6, docs/lab.md).

Here:

* :func:`exact` — the closed form over a discrete set of trajectories with
  known probabilities;
* :func:`predict` — the plug-in estimate from episodes of π_0 (each an
  outcome label and its r̂): P̂*(o) = Σ_{i∈o} e^{r̂_i/β} / Σ_i e^{r̂_i/β},
  i.e. self-normalised importance weights, with a seeded bootstrap
  percentile interval per outcome (resampling episodes, so the interval
  covers the uncertainty in both P_0(o) and E[exp(r̂/β) | o]);
* :func:`from_records` — those arrays from a recorded run;
* :func:`compare` — predicted vs observed shares after training: side by
  side, total-variation distance, and whether each observed share lies in
  its predicted interval.

Every sum of exponentials is a log-sum-exp: r̂/β reaches hundreds at small β.

This module takes plain arrays and callables; it never imports
``tackroom.train`` (a sibling layer). The built-in proxy rewards live in
:mod:`tackroom.train.rewards`, whose :class:`~tackroom.train.rewards.ProxyReward`
objects are such callables (``from_records(store, run, get_proxy("near-miss"))``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tackroom.analysis.stats import wilson
from tackroom.core.episode import Episode, Outcome

#: Bootstrap resamples drawn per block: bounds memory at ``BLOCK × n`` floats.
BLOCK = 256


@dataclass(frozen=True)
class OutcomeTilt:
    """One outcome's numbers under the tilt.

    Attributes:
        label: the outcome.
        n: episodes of π_0 with this outcome (0 for :func:`exact`).
        p0: P_0(o).
        log_mean_exp: log E_{π_0}[exp(r̂/β) | o] (a log: the mean itself overflows at small β;
            ``-inf`` for an outcome never seen).
        mean_reward: E_{π_0}[r̂ | o].
        p_star: the predicted share P*(o) after optimisation.
        interval: bootstrap percentile interval of ``p_star`` (a point for :func:`exact`).
        log_mean_exp_interval: the same for ``log_mean_exp``.
    """

    label: str
    n: int
    p0: float
    log_mean_exp: float
    mean_reward: float
    p_star: float
    interval: tuple[float, float]
    log_mean_exp_interval: tuple[float, float]

    @property
    def growth(self) -> float:
        """P*(o) / P_0(o): above 1 for an outcome the optimisation amplifies."""
        return self.p_star / self.p0 if self.p0 > 0 else math.nan


@dataclass(frozen=True)
class TiltPrediction:
    """The predicted outcome distribution after optimisation at one β.

    Attributes:
        beta: the KL coefficient (the trainer's ``algo.beta``).
        outcomes: one :class:`OutcomeTilt` per label, in table order.
        n: episodes of π_0 the prediction rests on (0 for :func:`exact`).
        confidence: the intervals' nominal coverage.
        n_boot: bootstrap resamples (0 for :func:`exact`).
        seed: the bootstrap's seed.
    """

    beta: float
    outcomes: tuple[OutcomeTilt, ...]
    n: int = 0
    confidence: float = 0.95
    n_boot: int = 0
    seed: int = 0

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(o.label for o in self.outcomes)

    def __getitem__(self, label: str) -> OutcomeTilt:
        for o in self.outcomes:
            if o.label == label:
                return o
        raise KeyError(f"no outcome {label!r}; the prediction has {', '.join(self.labels)}")

    def shares(self) -> dict[str, float]:
        """``{label: P*(label)}``."""
        return {o.label: o.p_star for o in self.outcomes}

    def start(self) -> dict[str, float]:
        """``{label: P_0(label)}``."""
        return {o.label: o.p0 for o in self.outcomes}


def _check_beta(beta: float) -> float:
    beta = float(beta)
    if not (beta > 0 and math.isfinite(beta)):
        raise ValueError(f"beta = {beta!r} must be a positive finite number: at β = 0 the "
                         "optimum puts all mass on the best-scored outcome (no KL anchor)")
    return beta


def _logsumexp(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """log Σ exp(x) along ``axis``, ``-inf`` where every entry is ``-inf``."""
    m = np.max(x, axis=axis, keepdims=True)
    safe = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(x - safe), axis=axis, keepdims=True)) + safe
    return np.squeeze(out, axis=axis)


def _labels_of(outcomes: Sequence[str], labels: Sequence[str] | None) -> tuple[str, ...]:
    seen = list(dict.fromkeys(outcomes))
    if labels is None:
        return tuple(seen)
    extra = [o for o in seen if o not in labels]
    return tuple(labels) + tuple(extra)  # an unexpected label is shown, never dropped


def exact(probabilities: Sequence[float] | np.ndarray, rewards: Sequence[float] | np.ndarray,
          outcomes: Sequence[str],
          beta: float, labels: Sequence[str] | None = None) -> TiltPrediction:
    """The tilt over a finite trajectory set: π*(τ) ∝ π_0(τ)·exp(r̂(τ)/β), summed per outcome.

    Args:
        probabilities: π_0(τ) per trajectory (normalised here; zeros allowed).
        rewards: r̂(τ) per trajectory.
        outcomes: the outcome label of each trajectory.
        beta: the KL coefficient (> 0).
        labels: the table order (default: first appearance).
    """
    beta = _check_beta(beta)
    p = np.asarray(probabilities, dtype=np.float64)
    r = np.asarray(rewards, dtype=np.float64)
    if not (len(p) == len(r) == len(outcomes)) or len(p) == 0:
        raise ValueError("probabilities, rewards and outcomes need one entry per trajectory")
    if np.any(p < 0) or not np.all(np.isfinite(p)) or p.sum() <= 0:
        raise ValueError("probabilities must be finite, >= 0 and not all 0")
    if not np.all(np.isfinite(r)):
        raise ValueError("rewards must be finite")
    p = p / p.sum()
    with np.errstate(divide="ignore"):
        logp = np.log(p)
    logw = logp + r / beta  # log π_0(τ) + r̂(τ)/β
    log_z = float(_logsumexp(logw))
    lab = np.asarray(outcomes, dtype=object)
    rows = []
    for label in _labels_of(list(outcomes), labels):
        mask = lab == label
        p0 = float(p[mask].sum())
        log_num = float(_logsumexp(logw[mask])) if mask.any() else -math.inf
        log_me = log_num - math.log(p0) if p0 > 0 else -math.inf
        mean_r = float((p[mask] * r[mask]).sum() / p0) if p0 > 0 else math.nan
        ps = math.exp(log_num - log_z) if p0 > 0 else 0.0
        rows.append(OutcomeTilt(label, 0, p0, log_me, mean_r, ps, (ps, ps), (log_me, log_me)))
    return TiltPrediction(beta, tuple(rows))


def predict(outcomes: Sequence[str], proxy_rewards: Sequence[float], beta: float, *,
            groups: Sequence[Any] | None = None, labels: Sequence[str] | None = None,
            confidence: float = 0.95, n_boot: int = 2000, seed: int = 0) -> TiltPrediction:
    """Predict the outcome shares after optimising ``proxy_rewards`` at KL coefficient ``beta``.

    The episodes are samples of π_0 (temperature 1, the distribution the KL
    anchors to).

    Without ``groups`` the episodes are one pool and the estimate is the
    formula on the marginal: P̂*(o) = Σ_{i∈o} e^{r̂_i/β} / Σ_i e^{r̂_i/β}
    (:func:`exact` with each episode weighted 1/n). That is the tilt of a
    policy that sees one context. A policy conditioned on a task instance x
    is tilted per instance, π*(τ|x) ∝ π_0(τ|x)·e^{r̂/β} / Z(x), so with
    ``groups`` (the instance of each episode, e.g. ``(task, seed)``, several
    samples each) the estimate is the mean over instances of the per-instance
    tilt: P̂*(o) = mean_x Σ_{i∈x,o} e^{r̂_i/β} / Σ_{i∈x} e^{r̂_i/β}. (With few
    samples per instance this ratio is biased towards π_0's own shares —
    an instance whose samples all share one outcome is not tilted at all.)

    Intervals are bootstrap percentiles over episodes (pooled) or instances
    (grouped), ``n_boot`` resamples from ``numpy.random.default_rng(seed)``:
    the same inputs always give the same intervals. They cover the
    uncertainty in both P_0(o) and E[exp(r̂/β) | o].

    An outcome that π_0 never produced is predicted at 0: the tilt only
    reweights what π_0 does (and a finite sample cannot see rarer outcomes).
    """
    beta = _check_beta(beta)
    if not 0 < confidence < 1:
        raise ValueError(f"confidence = {confidence!r} must be in (0, 1)")
    r = np.asarray(proxy_rewards, dtype=np.float64)
    n = len(r)
    if n == 0 or len(outcomes) != n or (groups is not None and len(groups) != n):
        raise ValueError("outcomes, proxy_rewards (and groups) need one entry per episode "
                         "(and at least one episode)")
    if not np.all(np.isfinite(r)):
        raise ValueError("proxy rewards must be finite")
    point = exact(np.ones(n), r, outcomes, beta, labels)
    order = point.labels
    k = len(order)
    code = np.array([order.index(o) for o in outcomes])
    w = r / beta
    # Per outcome, weights shifted by that outcome's largest: E[u, o] = Σ e^{w − c_o} over the
    # episodes of unit u with outcome o never overflows, and keeps its precision at small β.
    shift = np.array([w[code == j].max() if (code == j).any() else 0.0 for j in range(k)])
    if groups is None:
        units = np.arange(n)
    else:
        keys = {g: i for i, g in enumerate(dict.fromkeys(groups))}
        units = np.array([keys[g] for g in groups])
    m = int(units.max()) + 1
    e = np.zeros((m, k))
    c = np.zeros((m, k))
    np.add.at(e, (units, code), np.exp(w - shift[code]))
    np.add.at(c, (units, code), 1.0)
    if groups is None:
        p0 = c.sum(axis=0) / n
    else:
        # Q[x, o]: the per-instance tilt; a log-sum-exp per instance, across its outcomes.
        with np.errstate(divide="ignore"):
            log_e = np.log(e) + shift
        q = np.exp(log_e - _logsumexp(log_e, axis=1)[:, None])
        p0 = (c / c.sum(axis=1, keepdims=True)).mean(axis=0)
        p_point = q.mean(axis=0)

    def shares(idx: np.ndarray) -> np.ndarray:
        """P̂*(o) for each row of resampled unit indices ``idx`` (b × m)."""
        if groups is not None:
            return q[idx].mean(axis=1)
        with np.errstate(divide="ignore"):
            log_tot = np.log(e[idx].sum(axis=1)) + shift  # b × k
        return np.exp(log_tot - _logsumexp(log_tot, axis=1)[:, None])

    rng = np.random.default_rng(seed)
    p_star = np.empty((n_boot, k))
    log_me = np.empty((n_boot, k))
    for start in range(0, n_boot, BLOCK):
        b = min(BLOCK, n_boot - start)
        idx = rng.integers(0, m, size=(b, m))
        p_star[start:start + b] = shares(idx)
        with np.errstate(divide="ignore", invalid="ignore"):
            block = np.log(e[idx].sum(axis=1)) + shift - np.log(c[idx].sum(axis=1))
        block[c[idx].sum(axis=1) == 0] = np.nan  # the outcome is absent from this resample
        log_me[start:start + b] = block
    a = (1 - confidence) / 2
    rows = []
    for j, o in enumerate(point.outcomes):
        ps = float(p_point[j]) if groups is not None else o.p_star
        ci = (tuple(float(x) for x in np.quantile(p_star[:, j], [a, 1 - a])) if n_boot
              else (ps, ps))
        col = log_me[:, j][~np.isnan(log_me[:, j])]
        lme = (tuple(float(x) for x in np.quantile(col, [a, 1 - a])) if col.size
               else (o.log_mean_exp, o.log_mean_exp))
        rows.append(OutcomeTilt(o.label, int((code == j).sum()), float(p0[j]), o.log_mean_exp,
                                o.mean_reward, ps, ci, lme))  # type: ignore[arg-type]
    return TiltPrediction(beta, tuple(rows), n, confidence, n_boot, seed)


# ------------------------------------------------------------------------------ records


@dataclass
class OutcomeRecords:
    """Episodes of one run reduced to what the tilt needs: outcome labels and proxy rewards."""

    run_id: str
    outcomes: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    #: each episode's task instance, ``"<task>|<seed>"``: the ``groups`` of :func:`predict`.
    groups: list[str] = field(default_factory=list)

    def counts(self, labels: Iterable[str] = ()) -> dict[str, int]:
        """``{label: episodes}``, every label of ``labels`` included (0 if never seen)."""
        out = {label: 0 for label in labels}
        for o in self.outcomes:
            out[o] = out.get(o, 0) + 1
        return out

    def predict(self, beta: float, **kw: Any) -> TiltPrediction:
        """:func:`predict` on these episodes (pooled; pass ``groups=self.groups`` for the
        per-instance tilt)."""
        return predict(self.outcomes, self.rewards, beta, **kw)


def from_records(store: Any, run_id: str, proxy: Callable[[Episode], float],
                 outcome: Callable[[Episode], str] | None = None, *,
                 policy: str | None = None, tasks: Iterable[str] | None = None
                 ) -> OutcomeRecords:
    """The outcome label and proxy reward of every scored episode of ``run_id``.

    Args:
        store: a :class:`~tackroom.records.store.RecordStore`.
        run_id: the run (e.g. π_0 sampled at temperature 1, or a trained policy's evaluation).
        proxy: r̂(episode). A :class:`~tackroom.train.rewards.ProxyReward` is one, and brings
            its own outcome classifier.
        outcome: the outcome label of an episode (default: ``proxy.outcome``).
        policy: only this policy's episodes (a run may hold several).
        tasks: only these task keys (``toy/click-button``).

    ``infra_error`` episodes are skipped: they say nothing about the policy.
    Only an episode's final attempt counts, as in every other analysis.
    """
    classify = outcome or getattr(proxy, "outcome", None)
    if classify is None:
        raise ValueError("give an outcome classifier (outcome=...) or a proxy with .outcome")
    wanted = set(tasks) if tasks is not None else None
    latest: dict[tuple[str, str, str, int], Episode] = {}
    for ep in store.iter_episodes(run_id):
        if ep.outcome is Outcome.INFRA_ERROR or (policy is not None and ep.policy != policy):
            continue
        if wanted is not None and ep.task not in wanted:
            continue
        key = (ep.task, ep.harness, ep.policy, int(ep.seed))
        if key not in latest or ep.attempt >= latest[key].attempt:
            latest[key] = ep
    recs = OutcomeRecords(run_id)
    for ep in latest.values():
        recs.outcomes.append(str(classify(ep)))
        recs.rewards.append(float(proxy(ep)))
        recs.groups.append(f"{ep.task}|{int(ep.seed)}")
    return recs


# ---------------------------------------------------------------------------- comparison


@dataclass(frozen=True)
class ShareRow:
    """One outcome: its start share, predicted share (and interval), observed share."""

    label: str
    p0: float
    predicted: float
    interval: tuple[float, float]
    observed: float
    observed_n: int
    observed_interval: tuple[float, float]

    @property
    def inside(self) -> bool:
        """The observed share lies in the predicted interval."""
        return self.interval[0] <= self.observed <= self.interval[1]

    @property
    def overlaps(self) -> bool:
        """The observed share's Wilson interval meets the predicted interval."""
        lo, hi = self.observed_interval
        return lo <= self.interval[1] and self.interval[0] <= hi


@dataclass(frozen=True)
class TiltComparison:
    """Predicted vs observed outcome shares at one β."""

    beta: float
    rows: tuple[ShareRow, ...]
    n_observed: int

    @property
    def tv(self) -> float:
        """Total-variation distance between predicted and observed shares."""
        return 0.5 * sum(abs(r.predicted - r.observed) for r in self.rows)

    @property
    def tv_start(self) -> float:
        """The same distance from the start shares: how far the policy moved, for scale."""
        return 0.5 * sum(abs(r.p0 - r.observed) for r in self.rows)

    @property
    def progress(self) -> float:
        """How far the observed shares moved along the predicted shift, as a fraction of it.

        The projection ⟨observed − P_0, P* − P_0⟩ / ‖P* − P_0‖²: 1 at the predicted
        optimum, 0 for no move (or a move at right angles to it), negative for the
        opposite direction. Finite training sits between 0 and 1 when the direction holds.
        """
        d = [(r.predicted - r.p0, r.observed - r.p0) for r in self.rows]
        norm = sum(a * a for a, _ in d)
        return sum(a * b for a, b in d) / norm if norm > 0 else math.nan

    def table(self, title: str = "") -> str:
        """A Markdown table of the rows (percent) and the TV distances."""
        lines = [f"{title}" if title else f"β = {self.beta:g}", "",
                 "| outcome | P_0 | predicted P* [95% CI] | observed [Wilson 95%] | in CI |",
                 "|---|---:|---:|---:|:---:|"]
        for r in self.rows:
            lines.append(
                f"| {r.label} | {100 * r.p0:.1f}% | {100 * r.predicted:.1f}% "
                f"[{100 * r.interval[0]:.1f}, {100 * r.interval[1]:.1f}] | "
                f"{100 * r.observed:.1f}% [{100 * r.observed_interval[0]:.1f}, "
                f"{100 * r.observed_interval[1]:.1f}] ({r.observed_n}/{self.n_observed}) | "
                f"{'yes' if r.inside else 'overlap' if r.overlaps else 'no'} |")
        lines += ["", f"TV(predicted, observed) = {self.tv:.3f}; "
                      f"TV(start, observed) = {self.tv_start:.3f}; "
                      f"progress along the predicted shift = {self.progress:+.2f}"]
        return "\n".join(lines)


def compare(predicted: TiltPrediction, observed_counts: Mapping[str, int]) -> TiltComparison:
    """Line up a prediction with the outcome counts observed after training.

    Labels of either side are all shown (a label missing on one side has share 0).
    """
    n = int(sum(observed_counts.values()))
    labels = list(predicted.labels) + [k for k in observed_counts if k not in predicted.labels]
    rows = []
    for label in labels:
        try:
            o = predicted[label]
            p0, ps, ci = o.p0, o.p_star, o.interval
        except KeyError:
            p0, ps, ci = 0.0, 0.0, (0.0, 0.0)
        c = int(observed_counts.get(label, 0))
        rows.append(ShareRow(label, p0, ps, ci, c / n if n else math.nan, c, wilson(c, n)))
    return TiltComparison(predicted.beta, tuple(rows), n)
