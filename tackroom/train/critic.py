"""A critic for PPO-style training: value heads V(s) and V(s, e), GAE, the value loss.

docs/research.md §5: when parallel environments give different returns from the same
state, a shared critic V(s) regresses to their mixture and biases every
advantage computed from it. Conditioning the critic on the environment index,
V(s, e), removes that bias; the actor stays π(a|s), so deployment needs no
index. In tackroom the environment index is the harness (or task family):
the same observation can be worth different returns under harnesses with
different ceilings.

- :class:`ValueHead` sits on a causal LM's hidden states (``output_hidden_states``)
  — shared, or with a learned harness embedding added to or concatenated with
  the hidden state.
- :func:`gae` turns per-turn rewards and values into advantages and returns.
- :func:`value_loss` is the (optionally clipped) regression of V on the returns.

Wiring (for the trainer): one value per *turn* of an episode, read at the
last prompt token before the turn's reply — the state the policy acted in;
the GAE advantage of a turn then applies to every token of that turn's reply
(GRPO or GSPO-token losses accept ``[B, T]`` advantages).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, NamedTuple

import torch
from torch import nn

from tackroom.train.config import CRITICS, HARNESS_EMBEDS  # the choices, spelled once

CriticKind = Literal["none", "shared", "harness"]
HarnessEmbed = Literal["add", "concat"]


def harness_vocab(names: Iterable[str]) -> dict[str, int]:
    """A stable harness → index map (sorted names), for :class:`ValueHead`'s embedding.

    Save it with the checkpoint: the index is only meaningful with the same map.
    """
    return {name: i for i, name in enumerate(sorted(set(names)))}


class ValueHead(nn.Module):
    """V(s) or V(s, e) on top of a language model's hidden states.

    Args:
        hidden_size: the LM's hidden size H.
        n_harnesses: 0 for a shared critic V(s); otherwise the number of
            harnesses (environment indices) the critic distinguishes: V(s, e).
        harness_embed: how the learned harness embedding E[e] enters —
            ``add``: h' = h + E[e] (E[e] ∈ R^H); ``concat``: h' = [h; E[e]].
        embed_dim: size of E[e] for ``concat`` (``add`` needs H).
        mlp_hidden: width of the hidden layer of the head; 0 makes the head
            linear, and then E[e] can only shift V by a per-harness constant
            (w·(h + E[e]) = w·h + w·E[e]). The hidden layer lets the harness
            change *how* the state is valued, which is the point of V(s, e).

    The embedding starts at zero, so V(s, e) starts equal to the shared V(s)
    and learns per-harness differences only where the returns demand them.
    The head computes in float32 whatever the LM's dtype, since value targets
    need more precision than bf16 keeps.

    ``forward(hidden [B, T, H] or [B, H], harness [B] long) → values [B, T] or [B]``.
    """

    def __init__(self, hidden_size: int, *, n_harnesses: int = 0,
                 harness_embed: HarnessEmbed = "add", embed_dim: int | None = None,
                 mlp_hidden: int = 256) -> None:
        super().__init__()
        if harness_embed not in HARNESS_EMBEDS:
            raise ValueError(f"harness_embed must be one of {HARNESS_EMBEDS}, not {harness_embed!r}")
        self.hidden_size = hidden_size
        self.n_harnesses = n_harnesses
        self.harness_embed = harness_embed
        self.embedding: nn.Embedding | None = None
        width = hidden_size
        if n_harnesses:
            dim = hidden_size if harness_embed == "add" else (embed_dim or 32)
            if harness_embed == "add" and embed_dim not in (None, hidden_size):
                raise ValueError(f"harness_embed='add' needs embed_dim == hidden_size ({hidden_size})")
            self.embedding = nn.Embedding(n_harnesses, dim)
            nn.init.zeros_(self.embedding.weight)
            if harness_embed == "concat":
                width = hidden_size + dim
        if mlp_hidden:
            self.net: nn.Module = nn.Sequential(nn.Linear(width, mlp_hidden), nn.Tanh(),
                                                nn.Linear(mlp_hidden, 1))
        else:
            self.net = nn.Linear(width, 1)

    @property
    def conditioned(self) -> bool:
        """Whether this is V(s, e) (needs a harness index) rather than V(s)."""
        return self.embedding is not None

    def forward(self, hidden: torch.Tensor, harness: torch.Tensor | None = None) -> torch.Tensor:
        h = hidden.float()
        if self.embedding is not None:
            if harness is None:
                raise ValueError("V(s, e) needs the harness index of each sequence")
            harness = harness.to(device=h.device, dtype=torch.long)
            if harness.dim() != 1 or harness.size(0) != h.size(0):
                raise ValueError(f"harness index must be [B] = [{h.size(0)}], "
                                 f"got {tuple(harness.shape)}")
            if harness.numel() and not 0 <= int(harness.min()) <= int(harness.max()) \
                    < self.n_harnesses:
                raise ValueError(f"harness index out of range 0..{self.n_harnesses - 1}: "
                                 f"{harness.tolist()}")
            e = self.embedding(harness)                      # [B, D]
            if h.dim() == 3:
                e = e.unsqueeze(1).expand(-1, h.size(1), -1)  # the same e at every position
            h = h + e if self.harness_embed == "add" else torch.cat([h, e], dim=-1)
        return self.net(h).squeeze(-1)


def make_value_head(kind: CriticKind, hidden_size: int, *, n_harnesses: int = 0,
                    harness_embed: HarnessEmbed = "add", mlp_hidden: int = 256,
                    embed_dim: int | None = None) -> ValueHead | None:
    """The head for ``critic = kind``: ``none`` → None, ``shared`` → V(s), ``harness`` → V(s, e)."""
    if kind == "none":
        return None
    if kind == "shared":
        return ValueHead(hidden_size, mlp_hidden=mlp_hidden)
    if kind == "harness":
        if n_harnesses < 1:
            raise ValueError("critic 'harness' needs n_harnesses >= 1 (the training harnesses)")
        return ValueHead(hidden_size, n_harnesses=n_harnesses, harness_embed=harness_embed,
                         embed_dim=embed_dim, mlp_hidden=mlp_hidden)
    raise ValueError(f"critic must be one of {CRITICS}, not {kind!r}")


@torch.no_grad()
def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None = None, *,
        gamma: float, lam: float, last_values: torch.Tensor | None = None
        ) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over per-turn rewards: ``(advantages, returns)``.

        δ_t = r_t + γ·V(s_{t+1}) − V(s_t)
        A_t = δ_t + γλ·A_{t+1}          (A after the last step = 0)
        R_t = A_t + V(s_t)              (the value target)

    Shapes ``[B, K]`` (K turns, right-padded) or ``[K]`` for one episode.
    ``mask`` marks real turns; a masked step is skipped, as if absent.
    V(s_K), the value after an episode's last real turn, is ``last_values``
    ([B]; default 0 — right for an episode that *ended*: success, failure).
    An episode cut off by a budget or timeout did not end; pass V of its final
    state there if it is known, else 0 treats the cut as an ending.

    λ = 1 gives Monte-Carlo returns minus V; λ = 0 the one-step TD error.
    No gradient flows: advantages and returns are targets.
    """
    one = rewards.dim() == 1
    r = (rewards.unsqueeze(0) if one else rewards).to(torch.float64)
    v = (values.unsqueeze(0) if one else values).detach().to(torch.float64)
    if r.shape != v.shape:
        raise ValueError(f"rewards {tuple(r.shape)} and values {tuple(v.shape)} differ in shape")
    m = torch.ones_like(r, dtype=torch.bool) if mask is None else \
        (mask.unsqueeze(0) if one else mask).bool()
    next_v = torch.zeros(r.size(0), dtype=torch.float64, device=r.device) \
        if last_values is None else last_values.detach().to(torch.float64).reshape(-1)
    next_a = torch.zeros_like(next_v)
    adv = torch.zeros_like(r)
    for t in reversed(range(r.size(1))):
        delta = r[:, t] + gamma * next_v - v[:, t]
        a = delta + gamma * lam * next_a
        real = m[:, t]
        adv[:, t] = torch.where(real, a, 0.0)
        # Padding leaves the carried V(s_{t+1}) and A_{t+1} untouched, so the
        # last real turn bootstraps from last_values, not from a padded slot.
        next_v = torch.where(real, v[:, t], next_v)
        next_a = torch.where(real, a, next_a)
    returns = torch.where(m, adv + v, 0.0)
    out_dtype = values.dtype if values.is_floating_point() else torch.float32
    adv, returns = adv.to(out_dtype), returns.to(out_dtype)
    return (adv[0], returns[0]) if one else (adv, returns)


class ValueLoss(NamedTuple):
    """The value loss to minimise and its metrics."""

    loss: torch.Tensor
    metrics: dict[str, float]


def value_loss(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor | None = None, *,
               old_values: torch.Tensor | None = None, clip: float | None = None) -> ValueLoss:
    """½·E[(V − R)²] over the masked positions, PPO-clipped when ``clip`` is set.

        V_clip = V_old + clip(V − V_old, −c, c)
        loss   = ½ · mean( max((V − R)², (V_clip − R)²) )

    The clip keeps one pass from moving a value far from the one the
    advantages were computed with. Metrics: ``value_loss``, ``value_clip_frac``
    (how often the clipped branch is the larger), ``explained_variance``
    (1 − Var[R − V]/Var[R]: 1 perfect, ≤ 0 no better than a constant),
    ``value_mean``, ``return_mean``.
    """
    returns = returns.detach().to(values.dtype)
    m = torch.ones_like(values) if mask is None else mask.to(values.dtype)
    n = m.sum().clamp(min=1.0)
    err = (values - returns) ** 2
    clipped_frac = torch.zeros(())
    if clip is not None:
        if old_values is None:
            raise ValueError("a clipped value loss needs old_values")
        old = old_values.detach().to(values.dtype)
        v_clip = old + torch.clamp(values - old, -clip, clip)
        err_clip = (v_clip - returns) ** 2
        clipped_frac = ((err_clip > err).to(values.dtype) * m).sum() / n
        err = torch.max(err, err_clip)
    loss = 0.5 * (err * m).sum() / n
    with torch.no_grad():
        sel = m.bool()
        r, v = returns[sel].double(), values[sel].double()
        var_r = r.var(unbiased=False) if r.numel() > 1 else torch.zeros((), dtype=r.dtype)
        ev = 1 - (r - v).var(unbiased=False) / var_r if var_r > 0 else torch.tensor(float("nan"))
        metrics = {"value_loss": float(loss), "value_clip_frac": float(clipped_frac),
                   "explained_variance": float(ev),
                   "value_mean": float(v.mean()) if v.numel() else 0.0,
                   "return_mean": float(r.mean()) if r.numel() else 0.0}
    return ValueLoss(loss, metrics)
