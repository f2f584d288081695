"""A causal softmax-attention actor for the PMD protocol (torch; docs/lab.md).

The actor reads, for each (state, action) pair, the sequence of past rounds'
tokens ``x_j = η (Q_j(s, a) − mean_a Q_j(s, ·))`` and outputs the next policy's
logit increment for that pair; the softmax over actions is taken outside. One
layer, one head, so its routing is a single matrix ``α`` that can be read off:

    h_j = W_e x_j + p_j                                   (value + position)
    α_kj = softmax_{j ≤ k}((W_q h_k) · (W_k h_j) / √d)    (causal)
    y_k = g_k · w_r · Σ_j α_kj W_v h_j + MLP([h_k, Σ_j α_kj W_v h_j])

``g_k`` is a learned per-position *count gain*. Softmax weights sum to one, so
attention alone gives the average of past tokens; PMD needs their sum. The
frozen audit model (:meth:`AttentionActor.audit`) sets ``W_q = W_k = 0``
(uniform routing), ``W_e, W_v, w_r`` to pass ``x`` through, ``g_k = k + 1`` and
the MLP to zero: then ``y_k = Σ_{j≤k} x_j``, the exact PMD update.

Why per (state, action) and not per state: the update is separable over
actions up to the softmax, so one small model serves every action-set size
and every number of states, and is permutation-equivariant by construction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from tackroom.lab.mdp import TabularMDP, bandit, random_mdp
from tackroom.lab.pmd import UpdateRule, pmd_oracle

__all__ = ["AttentionActor", "TrainConfig", "fit_count_gain", "gain_rule", "learned_rule",
           "routing_rule", "train_actor", "training_contexts"]


class AttentionActor(nn.Module):
    """One-layer, one-head causal attention over past rounds (module docstring)."""

    def __init__(self, d_model: int = 16, d_mlp: int = 32, max_rounds: int = 32) -> None:
        super().__init__()
        self.d_model, self.max_rounds = d_model, max_rounds
        self.embed = nn.Linear(1, d_model)
        self.pos = nn.Parameter(0.1 * torch.randn(max_rounds, d_model))
        self.wq = nn.Linear(d_model, d_model, bias=False)
        self.wk = nn.Linear(d_model, d_model, bias=False)
        self.wv = nn.Linear(d_model, d_model, bias=False)
        self.readout = nn.Linear(d_model, 1, bias=False)
        # Starts at 1: plain (normalised) attention; training has to find the count.
        self.gain = nn.Parameter(torch.ones(max_rounds))
        self.mlp = nn.Sequential(nn.Linear(2 * d_model, d_mlp), nn.GELU(), nn.Linear(d_mlp, 1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x``: tokens ``(N, T)`` → increments ``y`` ``(N, T)`` and weights ``α`` ``(N, T, T)``.

        ``y[:, k]`` depends on ``x[:, :k+1]`` only (causal mask).
        """
        T = x.shape[1]
        if T > self.max_rounds:
            raise ValueError(f"context of {T} rounds exceeds max_rounds={self.max_rounds}")
        h = self.embed(x.unsqueeze(-1)) + self.pos[:T]
        scores = self.wq(h) @ self.wk(h).transpose(1, 2) / math.sqrt(self.d_model)
        future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)
        alpha = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        a = alpha @ self.wv(h)
        y = self.gain[:T] * self.readout(a).squeeze(-1) + self.mlp(torch.cat([h, a], -1)).squeeze(-1)
        return y, alpha

    @classmethod
    def audit(cls, max_rounds: int = 32, dtype: torch.dtype = torch.float64) -> AttentionActor:
        """The frozen audit model: hand-set weights that compute ``Σ_{j≤k} x_j`` exactly."""
        m = cls(d_model=1, d_mlp=1, max_rounds=max_rounds).to(dtype)
        with torch.no_grad():
            m.embed.weight.fill_(1.0)
            m.embed.bias.zero_()
            m.pos.zero_()
            m.wq.weight.zero_()  # zero scores: uniform weights over rounds 0..k
            m.wk.weight.zero_()
            m.wv.weight.fill_(1.0)
            m.readout.weight.fill_(1.0)
            m.gain.copy_(torch.arange(1, max_rounds + 1, dtype=dtype))  # undo the 1/(k+1)
            for p in m.mlp.parameters():
                p.zero_()
        return m.requires_grad_(False).eval()


def _tokens(context: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """Context ``(T, S, A)`` → one sequence per (s, a): ``(S·A, T)``."""
    T, S, A = context.shape
    return torch.as_tensor(context.reshape(T, S * A).T.copy(), dtype=dtype)


def _dtype(model: AttentionActor) -> torch.dtype:
    return next(model.parameters()).dtype


def learned_rule(model: AttentionActor) -> UpdateRule:
    """The actor as a protocol update rule: the increment at the last position."""
    def rule(context: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            y, _ = model(_tokens(context, _dtype(model)))
        return y[:, -1].double().numpy().reshape(context.shape[1:])
    return rule


def routing_rule(model: AttentionActor) -> UpdateRule:
    """Exact values and count, the actor's routing: ``(k+1) · Σ_j α_kj x_j``.

    Isolates where the actor attends: with ``α`` uniform this is exact PMD.
    """
    def rule(context: np.ndarray) -> np.ndarray:
        x = _tokens(context, _dtype(model))
        with torch.no_grad():
            _, alpha = model(x)
        inc = x.shape[1] * (alpha[:, -1, :] * x).sum(-1)
        return inc.double().numpy().reshape(context.shape[1:])
    return rule


def gain_rule(model: AttentionActor) -> UpdateRule:
    """The actor's magnitude along the exact direction: ``g · Σ_j x_j`` per state.

    ``g = ⟨y, Σ_j x_j⟩ / ‖Σ_j x_j‖²`` projects the actor's (action-centred)
    output ``y`` onto the exact increment, in each state of this very context;
    ``(k+1)·g`` is its effective count gain (exact: ``k+1``). Isolates the
    error of undoing softmax attention's normalisation: the direction is exact.
    """
    actor = learned_rule(model)

    def rule(context: np.ndarray) -> np.ndarray:
        exact = context.sum(0)
        exact = exact - exact.mean(-1, keepdims=True)  # softmax ignores per-state shifts
        y = actor(context)
        y = y - y.mean(-1, keepdims=True)
        g = (y * exact).sum(-1, keepdims=True) / np.maximum(
            (exact * exact).sum(-1, keepdims=True), 1e-300)
        return g * exact
    return rule


@dataclass(frozen=True)
class TrainConfig:
    """Meta-training of the actor on oracle traces of random MDPs and bandits.

    The training sizes (``states`` up to 8, ``actions`` 2–5) and families
    (Dirichlet random MDPs, bandits) differ from the evaluation families on
    purpose: chain, grid and 12-state MDPs are never seen.
    """

    seed: int = 0
    n_mdps: int = 400
    states: tuple[int, ...] = (1, 2, 3, 4, 6, 8)  # 1 = a bandit
    actions: tuple[int, ...] = (2, 3, 4, 5)
    eta_range: tuple[float, float] = (0.03, 3.0)  # log-uniform
    rounds: int = 20
    steps: int = 2000
    batch: int = 256
    lr: float = 3e-3
    d_model: int = 16
    d_mlp: int = 32


def training_contexts(cfg: TrainConfig) -> tuple[np.ndarray, np.ndarray]:
    """Oracle contexts per state, padded over actions: tokens ``(M, A_max, T)``, mask ``(M, A_max)``.

    The target of every prefix is a function of the prefix (its sum), so any
    trajectory's contexts are valid data; the oracle's are the ones the actor
    meets when it is close to right.
    """
    rng = np.random.default_rng(cfg.seed)
    a_max = max(cfg.actions)
    xs, masks = [], []
    for _ in range(cfg.n_mdps):
        S, A = int(rng.choice(cfg.states)), int(rng.choice(cfg.actions))
        eta = float(np.exp(rng.uniform(*np.log(cfg.eta_range))))
        mdp: TabularMDP = (bandit(rng, A) if S == 1 else
                           random_mdp(rng, S, A, concentration=float(rng.choice([0.1, 1.0]))))
        ctx = pmd_oracle(mdp, eta, cfg.rounds).context(eta)  # (T, S, A)
        x = np.zeros((S, a_max, cfg.rounds))
        x[:, :A, :] = ctx.transpose(1, 2, 0)
        m = np.zeros((S, a_max), dtype=bool)
        m[:, :A] = True
        xs.append(x)
        masks.append(m)
    return np.concatenate(xs), np.concatenate(masks)


def _masked_log_softmax(z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(z.masked_fill(~mask.unsqueeze(-1), -1e9), dim=1)


def train_actor(cfg: TrainConfig = TrainConfig()) -> tuple[AttentionActor, list[float]]:
    """Fit the actor to imitate the oracle update: ``KL(π_oracle,k+1 ‖ π_actor,k+1)``.

    The KL is taken per state over its actions, at every prefix length, on
    oracle contexts (:func:`training_contexts`). Returns the model (eval mode)
    and the loss every 100 steps. Deterministic for a given ``cfg.seed`` on a
    given machine (torch CPU kernels, one thread recommended).
    """
    torch.manual_seed(cfg.seed)
    x_np, m_np = training_contexts(cfg)
    x = torch.as_tensor(x_np, dtype=torch.float32)
    mask = torch.as_tensor(m_np)
    target = _masked_log_softmax(x.cumsum(-1), mask)  # exact PMD at every prefix
    model = AttentionActor(cfg.d_model, cfg.d_mlp, max_rounds=max(32, cfg.rounds))
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, cfg.steps)
    gen = torch.Generator().manual_seed(cfg.seed)
    M, A, T = x.shape
    history: list[float] = []
    for step in range(cfg.steps):
        idx = torch.randint(0, M, (cfg.batch,), generator=gen)
        y, _ = model(x[idx].reshape(-1, T))
        logp = _masked_log_softmax(y.reshape(cfg.batch, A, T), mask[idx])
        p_t = target[idx].exp() * mask[idx].unsqueeze(-1)
        kl = (p_t * (target[idx] - logp)).sum(1).mean()
        opt.zero_grad()
        kl.backward()
        opt.step()
        sched.step()
        if step % 100 == 0 or step == cfg.steps - 1:
            history.append(kl.detach().item())
    return model.eval(), history


def fit_count_gain(model: AttentionActor, x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The actor's typical effective count gain per position ``k``; exact: ``k + 1``.

    For each state's context prefix (tokens ``(M, A, T)``, ``mask`` the real
    actions) the actor's action-centred output is projected on the exact
    increment ``Σ_{j≤k} x_j`` (as in :func:`gain_rule`); the gain is ``(k+1)``
    times that ratio, its median over states. A summary for tables: the
    residual itself is measured with :func:`gain_rule`, context by context.
    """
    M, A, T = x.shape
    xt = torch.as_tensor(x, dtype=_dtype(model))
    with torch.no_grad():
        y, _ = model(xt.reshape(-1, T))
    y = y.reshape(M, A, T).double().numpy()
    w = mask[:, :, None].astype(float)

    def centred(v: np.ndarray) -> np.ndarray:  # over the real actions: softmax ignores shifts
        return (v - (v * w).sum(1, keepdims=True) / w.sum(1, keepdims=True)) * w

    y, exact = centred(y), centred(np.cumsum(x, -1))
    norm = (exact * exact).sum(1)
    ratio = (y * exact).sum(1) / np.maximum(norm, 1e-300)  # (M, T)
    ratio = np.where(norm > 1e-12, ratio, np.nan)  # an all-equal Q has no direction
    return np.arange(1, T + 1) * np.nanmedian(ratio, axis=0)
