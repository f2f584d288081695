"""Policy mirror descent (PMD) as a repeated protocol, and its exact oracle (docs/research.md §7).

PMD with the KL mirror map updates a policy by

    π_{k+1}(a|s) ∝ π_k(a|s) · exp(η Q^{π_k}(s, a)),

so after K rounds ``log π_K = log π_0 + η Σ_{j<K} Q_j`` up to a per-state
constant: a softmax over *accumulated* logits. A causal attention layer whose
context is one token per past round, with values ``η Q_j``, computes exactly
that sum when it attends uniformly to the past rounds and undoes the softmax
normalisation (multiplies the average by the round count); docs/lab.md.

The repeated protocol (:func:`run_protocol`), one round:

1. the actor's current policy ``π_k`` acts in the environment;
2. a one-step critic returns ``Q_k ≈ Q^{π_k}`` (exact, :func:`exact_critic`, or
   Monte-Carlo rollouts, :class:`MonteCarloCritic`);
3. the token ``η (Q_k − mean_a Q_k)`` is appended to the context;
4. an update rule reads the whole context and outputs ``π_{k+1}``'s logits.

The oracle is the protocol with the exact critic and the exact rule
:func:`accumulate`. Everything here is numpy; the learned attention actor
(torch) lives in :mod:`tackroom.lab.actor` and plugs in as an :data:`UpdateRule`.

*Policy loss* (the number every table reports): for a policy π on an MDP,
``ℓ(π) = (J(π*) − J(π)) / (J(π*) − J(π_0))`` with ``π_0`` uniform — 1 at the
start, 0 at the optimum, comparable across MDPs of different reward scales.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tackroom.lab.mdp import TabularMDP, uniform_policy

__all__ = [
    "RESIDUALS",
    "Critic",
    "StepFit",
    "MonteCarloCritic",
    "Residuals",
    "Trace",
    "UpdateRule",
    "accumulate",
    "average",
    "decompose",
    "exact_critic",
    "final_losses",
    "fit_step",
    "log_softmax",
    "pmd_oracle",
    "pmd_update",
    "policy_loss",
    "run_protocol",
    "softmax",
]

#: ``critic(mdp, π) -> Q`` of shape ``(S, A)``: the one-step critic of the protocol.
Critic = Callable[[TabularMDP, np.ndarray], np.ndarray]
#: ``rule(context) -> Δlogits``: context ``(k+1, S, A)`` of tokens ``η (Q_j − mean_a Q_j)``
#: for rounds ``j = 0..k``; returns the increment over ``log π_0``, shape ``(S, A)``.
UpdateRule = Callable[[np.ndarray], np.ndarray]


def log_softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    """Normalised log-probabilities; stable for large logits."""
    z = z - z.max(axis=axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))


def softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.exp(log_softmax(z, axis))


def pmd_update(logits: np.ndarray, q: np.ndarray, eta: float) -> np.ndarray:
    """One exact KL-PMD step: ``log π_{k+1} = log_softmax(log π_k + η Q_k)``."""
    return log_softmax(logits + eta * q)


def policy_loss(mdp: TabularMDP, pi: np.ndarray) -> float:
    """``(J(π*) − J(π)) / (J(π*) − J(π_0))``, ``π_0`` uniform: 1 at the start, 0 at optimum."""
    j_star, j_0 = mdp.optimal_value(), mdp.uniform_value()
    return (j_star - mdp.value(pi)) / (j_star - j_0)


def exact_critic(mdp: TabularMDP, pi: np.ndarray) -> np.ndarray:
    """``Q^π`` by exact policy evaluation (a linear solve)."""
    return mdp.q_values(pi)


class MonteCarloCritic:
    """``Q^π(s, a)`` from ``n_rollouts`` sampled rollouts per (s, a).

    Each rollout starts in ``s``, takes ``a``, then follows π for ``horizon − 1``
    more steps, sampling transitions from ``P`` and actions from π; the return
    is the discounted sum of expected rewards ``R(s_t, a_t)`` (so the noise is
    that of the trajectory, not of the reward). The default horizon makes the
    truncation bias at most ``γ^H · max R / (1 − γ) ≤ 1e-3 · max R / (1 − γ)``.
    Seeded: the same seed and calls give the same estimates.
    """

    def __init__(self, n_rollouts: int, seed: int, horizon: int | None = None) -> None:
        self.n_rollouts = n_rollouts
        self.horizon = horizon
        self.rng = np.random.default_rng(seed)

    def __call__(self, mdp: TabularMDP, pi: np.ndarray) -> np.ndarray:
        S, A, n = mdp.n_states, mdp.n_actions, self.n_rollouts
        horizon = self.horizon or max(1, math.ceil(math.log(1e-3) / math.log(max(mdp.gamma,
                                                                                   1e-9))))
        s = np.repeat(np.arange(S), A * n)
        a = np.tile(np.repeat(np.arange(A), n), S)
        ret = np.zeros(S * A * n)
        cum_p = np.cumsum(mdp.P, axis=-1)
        cum_pi = np.cumsum(pi, axis=-1)
        for t in range(horizon):
            ret += mdp.gamma ** t * mdp.R[s, a]
            # Inverse-CDF sampling, vectorised over all rollouts at once.
            s = np.minimum((self.rng.random(s.size)[:, None] > cum_p[s, a]).sum(-1), S - 1)
            a = np.minimum((self.rng.random(s.size)[:, None] > cum_pi[s]).sum(-1), A - 1)
        return ret.reshape(S, A, n).mean(-1)


def accumulate(context: np.ndarray) -> np.ndarray:
    """The exact PMD rule: ``Σ_j η Q_j`` — uniform attention times the round count."""
    return context.sum(0)


def average(context: np.ndarray) -> np.ndarray:
    """What plain softmax attention gives with uniform weights: ``mean_j η Q_j``.

    Softmax attention weights sum to one, so without the count gain the
    increment is the *average* of past rounds: PMD with a step that shrinks
    like ``η/(k+1)`` (dual averaging). The ``normalisation`` gap is measured
    against this and the learned gain (docs/lab.md).
    """
    return context.mean(0)


@dataclass(frozen=True)
class Trace:
    """One run of the protocol on one MDP.

    Attributes:
        logits: ``log π_k`` for ``k = 0..K``, shape ``(K+1, S, A)``.
        q: the critic's ``Q_k`` for ``k = 0..K−1``, shape ``(K, S, A)``.
        loss: exact policy loss of each ``π_k``, shape ``(K+1,)``.
    """

    logits: np.ndarray
    q: np.ndarray
    loss: np.ndarray

    def context(self, eta: float) -> np.ndarray:
        """The actor's context after all rounds: tokens ``η (Q_j − mean_a Q_j)``."""
        return eta * (self.q - self.q.mean(-1, keepdims=True))


def run_protocol(mdp: TabularMDP, rule: UpdateRule, eta: float, rounds: int, *,
                 critic: Critic = exact_critic) -> Trace:
    """``rounds`` rounds of actor → environment → critic → append, from ``π_0`` uniform."""
    base = np.log(uniform_policy(mdp.n_states, mdp.n_actions))
    logits, qs, tokens = [base], [], []
    for _ in range(rounds):
        q = critic(mdp, softmax(logits[-1]))
        qs.append(q)
        # Centring per state changes no policy (softmax is shift-invariant) and keeps
        # the tokens' scale independent of the reward offset.
        tokens.append(eta * (q - q.mean(-1, keepdims=True)))
        logits.append(log_softmax(base + rule(np.stack(tokens))))
    loss = np.array([policy_loss(mdp, softmax(z)) for z in logits])
    return Trace(np.stack(logits), np.stack(qs) if qs else np.zeros((0, *base.shape)), loss)


def pmd_oracle(mdp: TabularMDP, eta: float, rounds: int) -> Trace:
    """The exact PMD oracle: exact critic, exact accumulation."""
    return run_protocol(mdp, accumulate, eta, rounds)


def final_losses(instances: Sequence[TabularMDP], rule: UpdateRule, eta: float, rounds: int,
                 critic: Callable[[int], Critic] | None = None) -> np.ndarray:
    """Policy loss after ``rounds`` rounds on each instance, shape ``(n,)``.

    ``critic(i)`` makes instance ``i``'s critic (e.g. a seeded
    :class:`MonteCarloCritic`); the default is the exact critic.
    """
    return np.array([
        run_protocol(m, rule, eta, rounds,
                     critic=critic(i) if critic else exact_critic).loss[-1]
        for i, m in enumerate(instances)])


#: The protocol runs :func:`decompose` needs, by key: what each one swaps.
RESIDUALS: dict[str, str] = {
    "oracle": "exact critic, exact rule Σ_j ηQ_j",
    "actor": "exact critic, the learned actor",
    "routing": "exact critic, (k+1)·Σ_j α_kj ηQ_j with the learned actor's attention weights α",
    "normalisation": "exact critic, the exact Σ_j ηQ_j rescaled to the learned actor's magnitude",
    "average": "exact critic, mean_j ηQ_j (softmax attention, normalisation not undone)",
    "oracle_sampled": "Monte-Carlo critic, exact rule",
    "actor_sampled": "Monte-Carlo critic, the learned actor",
}


@dataclass(frozen=True)
class Residuals:
    """Median policy losses and the residuals between them, over MDP instances.

    Each residual is the median over instances of a per-instance difference in
    final policy loss ``ℓ`` between two protocol runs that differ in one
    component (:data:`RESIDUALS`); negative means the swapped-in component
    did *better* than the exact one. ``other`` is the median of the
    per-instance remainder ``(actor − oracle) − routing − normalisation``;
    medians are not additive, so the three medians need not sum to ``gap``.
    """

    oracle: float  #: median ℓ of the oracle
    actor: float  #: median ℓ of the learned actor (exact critic)
    gap: float  #: median of ℓ_actor − ℓ_oracle
    relative: float  #: median ℓ_actor / median ℓ_oracle − 1 ("within 5%": |relative| ≤ 0.05)
    routing: float  #: median of ℓ_routing − ℓ_oracle
    normalisation: float  #: median of ℓ_normalisation − ℓ_oracle
    other: float  #: median of the remainder: values, read-out, MLP, closed-loop drift
    sampling: float  #: median of ℓ_actor_sampled − ℓ_actor
    sampling_oracle: float  #: median of ℓ_oracle_sampled − ℓ_oracle
    unnormalised: float  #: median of ℓ_average − ℓ_oracle: what undoing normalisation buys


def decompose(losses: Mapping[str, np.ndarray]) -> Residuals:
    """The residual decomposition from per-instance final losses keyed as :data:`RESIDUALS`."""
    missing = set(RESIDUALS) - set(losses)
    if missing:
        raise KeyError(f"decompose needs losses for {sorted(missing)}")
    x = {k: np.asarray(v, dtype=float) for k, v in losses.items()}
    o = x["oracle"]
    med = {k: float(np.median(v)) for k, v in x.items()}
    return Residuals(
        oracle=med["oracle"], actor=med["actor"],
        gap=float(np.median(x["actor"] - o)),
        relative=med["actor"] / med["oracle"] - 1 if med["oracle"] > 0 else math.nan,
        routing=float(np.median(x["routing"] - o)),
        normalisation=float(np.median(x["normalisation"] - o)),
        other=float(np.median((x["actor"] - o) - (x["routing"] - o) - (x["normalisation"] - o))),
        sampling=float(np.median(x["actor_sampled"] - x["actor"])),
        sampling_oracle=float(np.median(x["oracle_sampled"] - o)),
        unnormalised=float(np.median(x["average"] - o)),
    )


@dataclass(frozen=True)
class StepFit:
    """How PMD-like one policy update is (:func:`fit_step`)."""

    eta: float  #: the least-squares step size η in Δlog π ≈ η·Q (per-state shifts removed)
    r2: float  #: share of the (centred) change in log-probs that η·Q explains; 1 for exact PMD
    n_states: int  #: states with at least two candidate actions


def fit_step(states: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> StepFit:
    """Fit ``log π_after − log π_before ≈ η Q + c(s)`` over recorded states.

    ``states``: per state, the log-probs of its candidate actions before and
    after one update and the critic's ``Q`` for them (three arrays of the same
    length; candidate sets may differ between states). Log-probs over a subset
    of actions are fine: a per-state constant is removed, as PMD's own
    normaliser is. A one-step KL-PMD update gives ``r2 = 1`` and its ``η``.
    """
    num = den = ss_tot = 0.0
    deltas, qs, used = [], [], 0
    for before, after, q in states:
        d, q = np.asarray(after, float) - np.asarray(before, float), np.asarray(q, float)
        if d.shape != q.shape:
            raise ValueError(f"log-probs {d.shape} and Q {q.shape} disagree")
        if d.size < 2:
            continue  # one candidate: nothing to compare
        d, q = d - d.mean(), q - q.mean()
        num, den, ss_tot = num + float(d @ q), den + float(q @ q), ss_tot + float(d @ d)
        deltas.append(d)
        qs.append(q)
        used += 1
    if den <= 0:
        raise ValueError("Q is constant within every state: no step size to fit")
    eta = num / den
    ss_res = sum(float(((d - eta * q) ** 2).sum()) for d, q in zip(deltas, qs, strict=True))
    return StepFit(eta, 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0, used)
