"""Small tabular MDPs, solved exactly: the test beds of the PMD lab (docs/lab.md).

An MDP here is ``(P, R, γ, μ0)`` with ``P[s, a, s']`` the transition kernel,
``R[s, a]`` the expected reward, ``γ`` the discount and ``μ0`` the start
distribution. A bandit is the one-state MDP that returns to itself. Policies
are arrays ``π[s, a]`` whose rows sum to one.

Everything is exact linear algebra (no sampling): ``V^π`` is the solution of
``(I − γ P_π) V = r_π``, the optimum comes from policy iteration, which ends
in finitely many steps on a finite MDP. Generators take a
:class:`numpy.random.Generator`, so every instance is reproducible from a seed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "FAMILIES",
    "TabularMDP",
    "bandit",
    "chain_mdp",
    "grid_mdp",
    "make_instances",
    "random_mdp",
    "uniform_policy",
]


@dataclass(frozen=True, eq=False)
class TabularMDP:
    """A finite discounted MDP with exact evaluation.

    Attributes:
        P: transition kernel, shape ``(S, A, S)``; each ``P[s, a]`` sums to one.
        R: expected reward of taking ``a`` in ``s``, shape ``(S, A)``.
        gamma: discount factor in ``[0, 1)``.
        mu0: start-state distribution, shape ``(S,)``.
        name: a label for tables (family and size).
    """

    P: np.ndarray
    R: np.ndarray
    gamma: float
    mu0: np.ndarray
    name: str = ""
    _optimal: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        S, A = self.R.shape
        if self.P.shape != (S, A, S) or self.mu0.shape != (S,):
            raise ValueError(f"shapes disagree: P {self.P.shape}, R {self.R.shape}, "
                             f"mu0 {self.mu0.shape}")
        if not np.allclose(self.P.sum(-1), 1.0) or (self.P < 0).any():
            raise ValueError("each P[s, a] must be a probability distribution over s'")
        if not np.isclose(self.mu0.sum(), 1.0) or (self.mu0 < 0).any():
            raise ValueError("mu0 must be a probability distribution")
        if not 0.0 <= self.gamma < 1.0:
            raise ValueError(f"gamma must be in [0, 1), got {self.gamma}")

    @property
    def n_states(self) -> int:
        return self.R.shape[0]

    @property
    def n_actions(self) -> int:
        return self.R.shape[1]

    def state_values(self, pi: np.ndarray) -> np.ndarray:
        """``V^π``, shape ``(S,)``: the solution of ``(I − γ P_π) V = r_π``."""
        p_pi = np.einsum("sa,sat->st", pi, self.P)
        r_pi = (pi * self.R).sum(-1)
        return np.linalg.solve(np.eye(self.n_states) - self.gamma * p_pi, r_pi)

    def q_values(self, pi: np.ndarray) -> np.ndarray:
        """``Q^π(s, a) = R(s, a) + γ Σ_s' P(s'|s, a) V^π(s')``, shape ``(S, A)``."""
        return self.R + self.gamma * self.P @ self.state_values(pi)

    def value(self, pi: np.ndarray) -> float:
        """``J(π) = Σ_s μ0(s) V^π(s)``: the objective every policy loss is measured on."""
        return float(self.mu0 @ self.state_values(pi))

    def optimal_policy(self) -> np.ndarray:
        """A deterministic optimal policy (policy iteration from uniform; cached)."""
        if "pi" not in self._optimal:
            pi = uniform_policy(self.n_states, self.n_actions)
            for _ in range(10_000):
                q = self.q_values(pi)
                # Keep the current action on ties, so the iteration cannot cycle.
                best = q.max(-1, keepdims=True)
                keep = (pi > 0.5) & (q >= best - 1e-12)
                greedy = np.where(keep.any(-1), keep.argmax(-1), q.argmax(-1))
                new = np.eye(self.n_actions)[greedy]
                if np.array_equal(new, pi):
                    break
                pi = new
            self._optimal["pi"] = pi
        return self._optimal["pi"]

    def optimal_value(self) -> float:
        """``J(π*)`` (cached)."""
        if "j*" not in self._optimal:
            self._optimal["j*"] = np.array(self.value(self.optimal_policy()))
        return float(self._optimal["j*"])

    def uniform_value(self) -> float:
        """``J(π_0)`` for the uniform ``π_0`` (cached): the policy loss's other end."""
        if "j0" not in self._optimal:
            self._optimal["j0"] = np.array(self.value(uniform_policy(self.n_states,
                                                                     self.n_actions)))
        return float(self._optimal["j0"])


def uniform_policy(n_states: int, n_actions: int) -> np.ndarray:
    """``π(a|s) = 1/A`` everywhere: PMD's starting point ``π_0``."""
    return np.full((n_states, n_actions), 1.0 / n_actions)


def random_mdp(rng: np.random.Generator, n_states: int, n_actions: int, *,
               gamma: float = 0.9, concentration: float = 1.0) -> TabularMDP:
    """Dirichlet(``concentration``) transitions, U[0, 1] rewards, a uniform start.

    Small ``concentration`` gives near-deterministic transitions.
    """
    P = rng.dirichlet(np.full(n_states, concentration), size=(n_states, n_actions))
    R = rng.uniform(0.0, 1.0, size=(n_states, n_actions))
    return TabularMDP(P, R, gamma, np.full(n_states, 1.0 / n_states),
                      name=f"random S={n_states} A={n_actions}")


def bandit(rng: np.random.Generator, n_actions: int, *, gamma: float = 0.9) -> TabularMDP:
    """A one-state MDP: U[0, 1] arm means; every action returns to the state."""
    R = rng.uniform(0.0, 1.0, size=(1, n_actions))
    return TabularMDP(np.ones((1, n_actions, 1)), R, gamma, np.ones(1),
                      name=f"bandit A={n_actions}")


def chain_mdp(rng: np.random.Generator, n_states: int, *, gamma: float = 0.9) -> TabularMDP:
    """A RiverSwim-like chain: actions left/right, start at the left end.

    Reward 1 for "right" at the right end; a small distractor reward
    ``U[0.05, 0.3]`` for "left" at the left end; "right" slips back with
    probability ``U[0, 0.3]``. The distractor is what makes it hard: the uniform
    policy rarely reaches the far end, so early Q favours the near reward.
    """
    slip = rng.uniform(0.0, 0.3)
    near = rng.uniform(0.05, 0.3)
    P = np.zeros((n_states, 2, n_states))
    R = np.zeros((n_states, 2))
    for s in range(n_states):
        P[s, 0, max(s - 1, 0)] = 1.0
        P[s, 1, min(s + 1, n_states - 1)] += 1.0 - slip
        P[s, 1, max(s - 1, 0)] += slip
    R[0, 0] = near
    R[n_states - 1, 1] = 1.0
    mu0 = np.zeros(n_states)
    mu0[0] = 1.0
    return TabularMDP(P, R, gamma, mu0, name=f"chain S={n_states}")


def grid_mdp(rng: np.random.Generator, side: int, *, gamma: float = 0.9) -> TabularMDP:
    """A ``side × side`` grid, four moves, start in a corner, reward 1 at a random goal.

    Each move goes to a uniformly random neighbour instead with probability
    ``U[0, 0.2]``; walls keep the agent in place. The goal is absorbing (reward
    every step spent there), any cell but the start.
    """
    S = side * side
    slip = rng.uniform(0.0, 0.2)
    goal = int(rng.integers(1, S))
    moves = [(-1, 0), (1, 0), (0, -1), (0, 1)]
    P = np.zeros((S, 4, S))
    R = np.zeros((S, 4))
    for s in range(S):
        r, c = divmod(s, side)
        dest = [min(max(r + dr, 0), side - 1) * side + min(max(c + dc, 0), side - 1)
                for dr, dc in moves]
        for a in range(4):
            if s == goal:
                P[s, a, s] = 1.0
                R[s, a] = 1.0
                continue
            P[s, a, dest[a]] += 1.0 - slip
            for d in dest:
                P[s, a, d] += slip / 4
    mu0 = np.zeros(S)
    mu0[0] = 1.0
    return TabularMDP(P, R, gamma, mu0, name=f"grid {side}x{side}")


#: Named MDP families: name -> ``make(rng) -> TabularMDP``. The learned actor is
#: meta-trained on ``random`` MDPs and bandits of other sizes; chain and grid
#: are never seen in training.
FAMILIES: dict[str, Callable[[np.random.Generator], TabularMDP]] = {
    "bandit A=5": lambda rng: bandit(rng, 5),
    "random S=5 A=3": lambda rng: random_mdp(rng, 5, 3),
    "random S=12 A=4": lambda rng: random_mdp(rng, 12, 4),
    "chain S=8": lambda rng: chain_mdp(rng, 8),
    "grid 3x3": lambda rng: grid_mdp(rng, 3),
}


def make_instances(family: str, n: int, seed: int) -> list[TabularMDP]:
    """``n`` instances of a family from ``FAMILIES``, all drawn from one seeded generator.

    Instances whose uniform policy is already optimal (``J* − J(π_0) ≈ 0``) are
    skipped and redrawn: the normalised policy loss is undefined on them.
    """
    if family not in FAMILIES:
        raise KeyError(f"unknown MDP family {family!r}; known: {', '.join(FAMILIES)}")
    rng = np.random.default_rng(seed)
    out: list[TabularMDP] = []
    while len(out) < n:
        mdp = FAMILIES[family](rng)
        pi0 = uniform_policy(mdp.n_states, mdp.n_actions)
        if mdp.optimal_value() - mdp.value(pi0) > 1e-6:
            out.append(mdp)
    return out
