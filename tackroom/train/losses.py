"""Policy-gradient losses: GRPO, Dr.GRPO, GSPO and GSPO-token, on plain tensors.

Every function here is pure torch on tensors the trainer already has — no
model, no optimiser, no config object (``policy_loss_from_config`` is the one
convenience that reads an :class:`~tackroom.train.config.RLConfig`):

    logp       [B, T]  log π_θ(o_t | ·) of each completion token, *with* grad
    old_logp   [B, T]  log π_old (the policy that sampled, or the one before
                       this optimisation pass); no grad
    ref_logp   [B, T]  log π_ref (the frozen reference, for the KL term); no grad
    advantages [B]     one per completion (or [B, T] per token for GRPO and
                       GSPO-token, e.g. from a critic with GAE)
    mask       [B, T]  1 where the token is the model's own and is trained on,
                       0 for padding and for tokens the model did not write
                       (observations, tool results inside a multi-turn episode)

Each loss returns ``PolicyLoss(loss, metrics)``: a scalar to minimise (the
*negated* objective J) and floats to log — clip fractions, KL to the
reference, importance-ratio statistics. Every formula is written out at the
point of use; docs/training.md has them all side by side, with the mapping to
TRL's ``GRPOTrainer`` option names. tests/test_losses.py checks values and
gradients against TRL's own ``_compute_loss``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import torch

from tackroom.core.registry import get, register
from tackroom.train.config import LOSS_AGGREGATIONS

if TYPE_CHECKING:
    from tackroom.train.config import RLConfig

Aggregation = Literal["token_mean", "seq_mean_token_mean", "constant"]
AGGREGATIONS: tuple[str, ...] = LOSS_AGGREGATIONS  # the choices, spelled once (config)


class PolicyLoss(NamedTuple):
    """A scalar loss to minimise and the per-batch metrics that explain it."""

    loss: torch.Tensor
    metrics: dict[str, float]


# --------------------------------------------------------------------------- pieces


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor,
                   temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / temperature)[token] for each position: ``[B, T, V], [B, T] → [B, T]``.

    The caller aligns the two (the logits *before* each token, i.e. shifted by
    one). Computed as ``logit[token] − logsumexp(logits)`` so no second [B, T, V]
    tensor is made; half-precision logits are upcast first because
    ``logsumexp`` over a large vocabulary loses the digits the ratio needs.
    """
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    picked = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(π_θ ‖ π_ref) (Schulman's unbiased, non-negative estimator).

        KL_t = π_ref/π_θ − log(π_ref/π_θ) − 1 = exp(ref − logp) − (ref − logp) − 1

    Its expectation under π_θ is the true KL, and every sample is ≥ 0.
    """
    d = ref_logp - logp
    return torch.exp(d) - d - 1


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, how: Aggregation, *,
              max_completion_length: int | None = None, num_sequences: int | None = None,
              num_tokens: float | None = None) -> torch.Tensor:
    """Reduce a per-token loss ``[B, T]`` (or ``[B, 1]``, broadcast) to a scalar.

    With m the mask and L the per-token loss:

    - ``token_mean`` (DAPO; TRL ``bnpo``):         Σ_i Σ_t m·L / Σ_i Σ_t m
      — every token weighs the same, so long completions weigh more.
    - ``seq_mean_token_mean`` (original GRPO; TRL ``grpo``):
      (1/B) Σ_i [ Σ_t m·L / Σ_t m ] — every completion weighs the same.
    - ``constant`` (Dr.GRPO; TRL ``dr_grpo``):     Σ_i Σ_t m·L / (B · max_completion_length)
      — no length normalisation at all, so no length bias in the gradient.

    When one optimiser step accumulates several micro-batches, pass the totals
    of the whole step — ``num_sequences`` (replaces B) and ``num_tokens``
    (replaces Σ m for ``token_mean``) — and the micro-batch losses then *sum*
    to the full-batch loss. Left ``None`` they are this batch's own counts.
    """
    mask = mask.to(per_token.dtype)
    per_token = per_token * mask  # also broadcasts a [B, 1] sequence-level loss
    if how == "token_mean":
        denom = mask.sum() if num_tokens is None else torch.as_tensor(
            num_tokens, dtype=per_token.dtype, device=per_token.device)
        return per_token.sum() / denom.clamp(min=1.0)
    n_seq = per_token.size(0) if num_sequences is None else num_sequences
    if how == "seq_mean_token_mean":
        per_seq = per_token.sum(-1) / mask.sum(-1).clamp(min=1.0)
        return per_seq.sum() / max(n_seq, 1)
    if how == "constant":
        if not max_completion_length or max_completion_length < 1:
            raise ValueError("the 'constant' aggregation needs max_completion_length >= 1")
        return per_token.sum() / (max(n_seq, 1) * max_completion_length)
    raise ValueError(f"unknown loss aggregation {how!r}; use one of {', '.join(AGGREGATIONS)}")


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean of ``x`` over the tokens of ``mask``; a ``[B, 1]`` ``x`` is one value per sequence."""
    if x.size(-1) == 1 and mask.size(-1) != 1:
        return float(x.mean())
    mask = mask.to(x.dtype)
    return float((x * mask).sum() / mask.sum().clamp(min=1.0))


def _as_column(advantages: torch.Tensor) -> torch.Tensor:
    """``[B]`` advantages become ``[B, 1]`` so they broadcast over tokens; ``[B, T]`` stay."""
    return advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages


def _clipped_surrogate(log_w: torch.Tensor, adv: torch.Tensor, eps_low: float,
                       eps_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The PPO-clip term −min(w·A, clip(w, 1−ε_low, 1+ε_high)·A) and the weights w = exp(log_w).

    Where the clipped branch is the smaller one, its gradient is zero: the
    update stops pushing a ratio that has already moved ε in A's direction.
    """
    w = torch.exp(log_w)
    w_clipped = torch.clamp(w, 1 - eps_low, 1 + eps_high)
    return -torch.min(w * adv, w_clipped * adv), w


def _metrics(loss: torch.Tensor, w: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
             log_ratio: torch.Tensor, eps_low: float, eps_high: float,
             kl: torch.Tensor | None) -> dict[str, float]:
    """What to log about one loss evaluation (no grad).

    ``clip_frac`` counts the weights the clip actually binds — below 1−ε_low
    with A < 0, or above 1+ε_high with A > 0 — as TRL's ``clip_ratio/region_mean``
    does; ``kl_old`` is the k3 estimate of KL(π_old ‖ π_θ), the usual "has the
    policy moved too far this pass" signal; ``kl`` is the KL to the reference.
    """
    with torch.no_grad():
        low = (w < 1 - eps_low) & (adv < 0)
        high = (w > 1 + eps_high) & (adv > 0)
        m = mask.bool()
        w_seen = w.expand_as(mask)[m] if w.size(-1) == 1 else w[m]
        out = {
            "loss": float(loss),
            "clip_frac": _masked_mean((low | high).to(log_ratio.dtype), mask),
            "clip_frac_low": _masked_mean(low.to(log_ratio.dtype), mask),
            "clip_frac_high": _masked_mean(high.to(log_ratio.dtype), mask),
            "ratio_mean": _masked_mean(w, mask),
            "ratio_min": float(w_seen.min()) if w_seen.numel() else 1.0,
            "ratio_max": float(w_seen.max()) if w_seen.numel() else 1.0,
            "kl_old": _masked_mean(torch.exp(log_ratio) - 1 - log_ratio, mask),
            "tokens": float(mask.sum()),
        }
        if kl is not None:
            out["kl"] = _masked_mean(kl, mask)
    return out


def _kl_term(logp: torch.Tensor, ref_logp: torch.Tensor | None, ratio: torch.Tensor,
             correct: bool) -> torch.Tensor | None:
    """The per-token KL penalty: k3, times the importance ratio when ``correct``."""
    if ref_logp is None:
        return None
    kl = k3_kl(logp, ref_logp)
    return kl * ratio if correct else kl


def _check(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor,
           ref_logp: torch.Tensor | None, beta: float) -> None:
    if logp.dim() != 2 or old_logp.shape != logp.shape or mask.shape != logp.shape:
        raise ValueError(f"logp, old_logp and mask must share one [B, T] shape; got "
                         f"{tuple(logp.shape)}, {tuple(old_logp.shape)}, {tuple(mask.shape)}")
    if beta and ref_logp is None:
        raise ValueError(f"beta = {beta} needs ref_logp (the reference policy's log-probs)")
    if ref_logp is not None and ref_logp.shape != logp.shape:
        raise ValueError(f"ref_logp has shape {tuple(ref_logp.shape)}, not {tuple(logp.shape)}")


# --------------------------------------------------------------------------- losses


def grpo_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, *, epsilon_low: float = 0.2, epsilon_high: float = 0.2,
              beta: float = 0.0, ref_logp: torch.Tensor | None = None,
              kl_ratio_correction: bool = False,
              aggregation: Aggregation = "seq_mean_token_mean",
              max_completion_length: int | None = None, num_sequences: int | None = None,
              num_tokens: float | None = None) -> PolicyLoss:
    """GRPO (DeepSeekMath): PPO-clip on *token* ratios, group advantages, k3 KL to a reference.

        r_{i,t} = π_θ(o_{i,t}|q, o_{i,<t}) / π_old(o_{i,t}|q, o_{i,<t})
        L_{i,t} = −min(r_{i,t}·A_i, clip(r_{i,t}, 1−ε_low, 1+ε_high)·A_i) + β·KL_k3(π_θ‖π_ref)_{i,t}
        loss    = aggregate(L, mask)          (GRPO's own: seq_mean_token_mean)

    A_i is the group-normalised advantage from :mod:`tackroom.train.advantages`
    (``[B]``), or a per-token ``[B, T]`` advantage (e.g. GAE from a critic).
    ε_low = ε_high = ε is the paper's symmetric clip; unequal values are DAPO's
    "clip-higher". The KL term is added per token *before* aggregation, as TRL
    does, so it is averaged the same way as the surrogate.

    ``kl_ratio_correction`` weights the KL term by the importance ratio,
    KL_t ← r_{i,t}·KL_t (gradient through r too): the tokens were sampled from
    π_old, so this makes the estimate one of KL(π_θ‖π_ref) rather than of
    the KL under π_old. Off in the paper; on by default in TRL
    (``use_bias_correction_kl``). The logged ``kl`` is the term as used.
    """
    _check(logp, old_logp, mask, ref_logp, beta)
    adv = _as_column(advantages).to(logp.dtype)

    log_ratio = logp - old_logp                                   # log r_{i,t}
    per_token, ratio = _clipped_surrogate(log_ratio, adv, epsilon_low, epsilon_high)

    kl = _kl_term(logp, ref_logp, ratio, kl_ratio_correction)
    if beta:
        assert kl is not None  # _check: a beta needs ref_logp
        per_token = per_token + beta * kl

    loss = aggregate(per_token, mask, aggregation, max_completion_length=max_completion_length,
                     num_sequences=num_sequences, num_tokens=num_tokens)
    return PolicyLoss(loss, _metrics(loss, ratio, adv, mask, log_ratio.detach(),
                                     epsilon_low, epsilon_high, kl))


def dr_grpo_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                 mask: torch.Tensor, *, max_completion_length: int,
                 epsilon_low: float = 0.2, epsilon_high: float = 0.2, beta: float = 0.0,
                 ref_logp: torch.Tensor | None = None, kl_ratio_correction: bool = False,
                 num_sequences: int | None = None) -> PolicyLoss:
    """Dr.GRPO ("GRPO done right"): GRPO's token objective without its two biases.

        A_i  = R_i − mean_group(R)                  (no division by the group std:
                                                     set ``scale_std=False`` upstream)
        loss = Σ_i Σ_t m_{i,t}·L_{i,t} / (B · max_completion_length)

    with L_{i,t} exactly GRPO's per-token clipped term (+ β·KL). Dividing by a
    constant instead of |o_i| removes the length bias (short wrong answers are
    not favoured over long ones); dropping the std removes the difficulty bias
    (near-solved or near-hopeless groups are not up-weighted). The advantage
    half of Dr.GRPO lives in :func:`tackroom.train.advantages.compute_advantages`.
    """
    return grpo_loss(logp, old_logp, advantages, mask, epsilon_low=epsilon_low,
                     epsilon_high=epsilon_high, beta=beta, ref_logp=ref_logp,
                     kl_ratio_correction=kl_ratio_correction,
                     aggregation="constant", max_completion_length=max_completion_length,
                     num_sequences=num_sequences)


def gspo_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, *, epsilon_low: float = 3e-4, epsilon_high: float = 4e-4,
              beta: float = 0.0, ref_logp: torch.Tensor | None = None,
              kl_ratio_correction: bool = False, token_level: bool = False,
              aggregation: Aggregation = "seq_mean_token_mean",
              max_completion_length: int | None = None, num_sequences: int | None = None,
              num_tokens: float | None = None) -> PolicyLoss:
    """GSPO (Qwen): one length-normalised *sequence* ratio per completion, clipped.

        s_i  = (π_θ(y_i|x) / π_old(y_i|x))^(1/|y_i|) = exp( (1/|y_i|) Σ_t log π_θ/π_old )
        L_i  = −min(s_i·A_i, clip(s_i, 1−ε_low, 1+ε_high)·A_i)
        loss = (1/B) Σ_i L_i                        (the paper's; = seq_mean_token_mean)

    The 1/|y_i| keeps s_i on one scale whatever the length, which is why the
    clip range is tiny (paper: ε_low = 3e-4, ε_high = 4e-4) and whole
    sequences, not single tokens, are clipped. The paper has no KL term
    (β = 0); a β > 0 adds the per-token k3 KL as in GRPO (with
    ``kl_ratio_correction`` weighted by s_i, or s_{i,t} for GSPO-token).

    ``token_level=True`` is **GSPO-token**, which allows per-token advantages:

        s_{i,t} = sg[s_i] · π_θ(y_{i,t}) / sg[π_θ(y_{i,t})]      (sg = stop-gradient)
        L_{i,t} = −min(s_{i,t}·A_{i,t}, clip(s_{i,t}, 1−ε_low, 1+ε_high)·A_{i,t})

    s_{i,t} has the value s_i and the gradient s_i·∇log π_θ(y_{i,t}); with
    A_{i,t} = A_i and the seq_mean_token_mean aggregation it equals GSPO in
    value and gradient (the test suite checks this).

    Other aggregations broadcast L_i over the completion's tokens first (as TRL
    does), which weights each sequence by its length — not the paper's objective.
    """
    _check(logp, old_logp, mask, ref_logp, beta)
    if not token_level and advantages.dim() != 1:
        raise ValueError("sequence-level GSPO takes one advantage per completion ([B]); "
                         "use token_level=True (GSPO-token) for per-token advantages")
    adv = _as_column(advantages).to(logp.dtype)
    m = mask.to(logp.dtype)

    log_ratio = logp - old_logp
    seq_log_ratio = (log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0)       # log s_i, [B]
    if token_level:
        log_w = seq_log_ratio.detach().unsqueeze(-1) + logp - logp.detach()  # log s_{i,t}, [B, T]
    else:
        log_w = seq_log_ratio.unsqueeze(-1)                                  # log s_i, [B, 1]
    per_token, weight = _clipped_surrogate(log_w, adv, epsilon_low, epsilon_high)

    kl = _kl_term(logp, ref_logp, weight, kl_ratio_correction)
    if beta:
        assert kl is not None  # _check: a beta needs ref_logp
        per_token = per_token + beta * kl                                     # → [B, T]

    loss = aggregate(per_token, mask, aggregation, max_completion_length=max_completion_length,
                     num_sequences=num_sequences, num_tokens=num_tokens)
    return PolicyLoss(loss, _metrics(loss, weight, adv, mask, log_ratio.detach(),
                                     epsilon_low, epsilon_high, kl))


# --------------------------------------------------------------------------- the registry
#
# An ``algorithm`` entry is a loss ``fn(logp, old_logp, advantages, mask, **settings)`` taking
# the keyword settings below; its meta says what ``None`` means for it (``defaults``: the
# ε range, loss_agg and scale_std it resolves to) and whether it takes a critic's per-turn
# advantages (``per_token_advantages``). ``RLConfig`` validates ``algo.algorithm`` against
# these names and resolves its defaults from this meta; a plug-in adds an algorithm the
# same way (docs/training.md, "Adding an algorithm").

_TOKEN_CLIP = {"epsilon_low": 0.2, "epsilon_high": 0.2}
_GSPO_CLIP = {"epsilon_low": 3e-4, "epsilon_high": 4e-4}


@register("algorithm", "grpo", summary="GRPO (DeepSeekMath): PPO-clip on token ratios",
          defaults={**_TOKEN_CLIP, "loss_agg": "seq_mean_token_mean", "scale_std": True},
          per_token_advantages=True)
def _grpo(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
          mask: torch.Tensor, **settings: Any) -> PolicyLoss:
    return grpo_loss(logp, old_logp, advantages, mask, **settings)


# Dr.GRPO is GRPO's token objective; what makes it Dr.GRPO (constant aggregation, no std
# scaling) is in its defaults, which the resolved config applies.
@register("algorithm", "dr_grpo", summary="Dr.GRPO: GRPO without the length and std biases",
          defaults={**_TOKEN_CLIP, "loss_agg": "constant", "scale_std": False},
          per_token_advantages=True)
def _dr_grpo(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
             mask: torch.Tensor, **settings: Any) -> PolicyLoss:
    return grpo_loss(logp, old_logp, advantages, mask, **settings)


@register("algorithm", "gspo", summary="GSPO (Qwen): one clipped sequence ratio per completion",
          defaults={**_GSPO_CLIP, "loss_agg": "seq_mean_token_mean", "scale_std": True},
          per_token_advantages=False)
def _gspo(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
          mask: torch.Tensor, **settings: Any) -> PolicyLoss:
    return gspo_loss(logp, old_logp, advantages, mask, token_level=False, **settings)


@register("algorithm", "gspo_token", summary="GSPO-token: GSPO with per-token advantages",
          defaults={**_GSPO_CLIP, "loss_agg": "seq_mean_token_mean", "scale_std": True},
          per_token_advantages=True)
def _gspo_token(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor, **settings: Any) -> PolicyLoss:
    return gspo_loss(logp, old_logp, advantages, mask, token_level=True, **settings)


def policy_loss_from_config(cfg: RLConfig, logp: torch.Tensor, old_logp: torch.Tensor,
                            advantages: torch.Tensor, mask: torch.Tensor, *,
                            ref_logp: torch.Tensor | None = None,
                            num_sequences: int | None = None,
                            num_tokens: float | None = None) -> PolicyLoss:
    """The loss ``cfg.algorithm`` names (the registry's entry), with every hyper-parameter
    taken from ``cfg``.

    ``cfg`` is resolved first, so algorithm defaults (GSPO's clip range,
    Dr.GRPO's constant aggregation) apply wherever the config left a value unset.
    """
    c = cfg.resolved()
    loss = get("algorithm", c.algorithm, where="algo.algorithm")
    return loss(logp, old_logp, advantages, mask, epsilon_low=c.epsilon_low,
                epsilon_high=c.epsilon_high, beta=c.beta, ref_logp=ref_logp,
                kl_ratio_correction=c.kl_ratio_correction, aggregation=c.loss_agg,
                max_completion_length=c.max_completion_length,
                num_sequences=num_sequences, num_tokens=num_tokens)
