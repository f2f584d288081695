"""GRPO, Dr.GRPO, GSPO(-token) losses: hand-computed cases, then value and gradient vs TRL."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from tackroom.train.config import RLConfig  # noqa: E402
from tackroom.train.losses import (  # noqa: E402
    aggregate,
    dr_grpo_loss,
    grpo_loss,
    gspo_loss,
    k3_kl,
    policy_loss_from_config,
    token_logprobs,
)

torch.set_num_threads(1)
D = torch.float64


def t(x) -> torch.Tensor:
    return torch.tensor(x, dtype=D)


# --------------------------------------------------------------------------- pieces


def test_k3_kl_hand_value() -> None:
    # π_θ = 0.5, π_ref = 0.25: ratio 0.5, KL_k3 = 0.5 − log 0.5 − 1 = log 2 − 0.5
    kl = k3_kl(t([math.log(0.5)]), t([math.log(0.25)]))
    assert kl.item() == pytest.approx(math.log(2) - 0.5, abs=1e-12)
    assert k3_kl(t([-1.3]), t([-1.3])).item() == 0.0


def test_aggregations_hand_values() -> None:
    loss = t([[1.0, 2.0, 3.0], [4.0, 99.0, 99.0]])
    mask = t([[1, 1, 1], [1, 0, 0]])
    assert aggregate(loss, mask, "token_mean").item() == pytest.approx(10 / 4)
    assert aggregate(loss, mask, "seq_mean_token_mean").item() == pytest.approx((2 + 4) / 2)
    assert aggregate(loss, mask, "constant", max_completion_length=5).item() == \
        pytest.approx(10 / (2 * 5))
    # Totals over the whole optimiser step, for gradient accumulation.
    assert aggregate(loss, mask, "token_mean", num_tokens=8).item() == pytest.approx(10 / 8)
    assert aggregate(loss, mask, "seq_mean_token_mean", num_sequences=4).item() == \
        pytest.approx(6 / 4)
    # A sequence-level loss [B, 1] broadcasts over the mask.
    per_seq = t([[2.0], [6.0]])
    assert aggregate(per_seq, mask, "token_mean").item() == pytest.approx((3 * 2 + 6) / 4)
    assert aggregate(per_seq, mask, "seq_mean_token_mean").item() == pytest.approx(4.0)
    with pytest.raises(ValueError, match="max_completion_length"):
        aggregate(loss, mask, "constant")
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        aggregate(loss, mask, "sum")  # type: ignore[arg-type]


def test_token_logprobs_matches_log_softmax() -> None:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 7, generator=g, dtype=D)
    tokens = torch.randint(0, 7, (2, 3), generator=g)
    want = torch.log_softmax(logits / 0.7, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(token_logprobs(logits, tokens, temperature=0.7), want, atol=1e-12)


# --------------------------------------------------------------------------- GRPO by hand


def test_grpo_clipping_by_hand() -> None:
    """Four one-token completions, one per corner of the clip (ε = 0.2).

    r = 1.5, A = +1: clipped at 1.2  → L = −1.2, no gradient
    r = 0.5, A = +1: not clipped     → L = −0.5, dL/dlogp = −r·A = −0.5
    r = 0.5, A = −1: clipped at 0.8  → L = +0.8, no gradient
    r = 1.5, A = −1: not clipped     → L = +1.5, dL/dlogp = −r·A = +1.5
    """
    old = t([[0.0], [0.0], [0.0], [0.0]]) - 1.0
    logp = (old + torch.log(t([[1.5], [0.5], [0.5], [1.5]]))).requires_grad_()
    adv = t([1.0, 1.0, -1.0, -1.0])
    mask = torch.ones(4, 1, dtype=D)
    out = grpo_loss(logp, old, adv, mask, epsilon_low=0.2, epsilon_high=0.2)
    out.loss.backward()
    assert out.loss.item() == pytest.approx((-1.2 - 0.5 + 0.8 + 1.5) / 4)
    assert logp.grad.squeeze(-1).tolist() == pytest.approx([0.0, -0.5 / 4, 0.0, 1.5 / 4])
    m = out.metrics
    assert m["clip_frac"] == pytest.approx(0.5)
    assert m["clip_frac_high"] == pytest.approx(0.25) and m["clip_frac_low"] == pytest.approx(0.25)
    assert (m["ratio_min"], m["ratio_max"]) == pytest.approx((0.5, 1.5))
    assert "kl" not in m


def test_grpo_clip_higher_and_kl_by_hand() -> None:
    # ε_high = 0.6 leaves r = 1.5 unclipped for A > 0 (DAPO's clip-higher).
    old = t([[-1.0]])
    logp = (old + math.log(1.5)).requires_grad_()
    ref = logp.detach() + math.log(0.5)                     # π_ref/π_θ = 0.5
    out = grpo_loss(logp, old, t([1.0]), torch.ones(1, 1, dtype=D), epsilon_low=0.2,
                    epsilon_high=0.6, beta=0.1, ref_logp=ref)
    kl = 0.5 - math.log(0.5) - 1
    assert out.loss.item() == pytest.approx(-1.5 + 0.1 * kl)
    assert out.metrics["kl"] == pytest.approx(kl)
    assert out.metrics["clip_frac"] == 0.0


def test_dr_grpo_is_grpo_with_constant_divisor() -> None:
    logp, old, ref, adv, mask = _random_batch(seed=1)
    a = dr_grpo_loss(logp, old, adv, mask, max_completion_length=9, beta=0.05, ref_logp=ref)
    b = grpo_loss(logp, old, adv, mask, beta=0.05, ref_logp=ref, aggregation="constant",
                  max_completion_length=9)
    assert a.loss.item() == b.loss.item()


def test_per_token_advantages() -> None:
    logp, old, _, adv, mask = _random_batch(seed=2)
    per_token = adv.unsqueeze(-1).expand_as(logp).contiguous()
    a = grpo_loss(logp, old, adv, mask)
    b = grpo_loss(logp, old, per_token, mask)
    assert a.loss.item() == pytest.approx(b.loss.item(), abs=1e-12)
    with pytest.raises(ValueError, match="GSPO-token"):
        gspo_loss(logp, old, per_token, mask)


def test_input_checks() -> None:
    logp, old, _, adv, mask = _random_batch(seed=3)
    with pytest.raises(ValueError, match="ref_logp"):
        grpo_loss(logp, old, adv, mask, beta=0.1)
    with pytest.raises(ValueError, match="one \\[B, T\\] shape"):
        grpo_loss(logp, old[:, :-1], adv, mask)


# --------------------------------------------------------------------------- GSPO by hand


def test_gspo_sequence_ratio_by_hand() -> None:
    """s_i = exp(mean_t log r): seq 0 moved (clipped), seq 1 barely (inside [1−3e-4, 1+4e-4])."""
    old = t([[-2.0, -1.0, -3.0], [-1.0, -2.0, 0.0]])
    moved = t([[0.1, 0.3, 0.0], [2e-5, -1e-5, 0.0]])   # log r per token
    logp = (old + moved).requires_grad_()
    mask = t([[1, 1, 0], [1, 1, 0]])
    adv = t([1.0, -2.0])
    out = gspo_loss(logp, old, adv, mask)                 # ε_low = 3e-4, ε_high = 4e-4
    s0, s1 = math.exp(0.2), math.exp(0.5e-5)
    assert s0 > 1 + 4e-4 and 1 - 3e-4 < s1 < 1 + 4e-4
    assert out.loss.item() == pytest.approx((-(1 + 4e-4) * 1.0 + 2.0 * s1) / 2, abs=1e-12)
    out.loss.backward()
    # seq 0 clipped: no gradient; seq 1: d(−s·A)/dlogp_t = −A·s/|y| per real token, then / B.
    g = logp.grad
    assert g[0].abs().max().item() == 0.0
    assert g[1].tolist() == pytest.approx([2.0 * s1 / 2 / 2] * 2 + [0.0], abs=1e-12)
    assert out.metrics["clip_frac"] == pytest.approx(0.5)


def test_gspo_token_equals_gspo_in_value_and_gradient() -> None:
    logp, old, _, adv, mask = _random_batch(seed=4, scale=1e-3)
    logp2 = logp.detach().clone().requires_grad_()
    a = gspo_loss(logp, old, adv, mask)
    b = gspo_loss(logp2, old, adv, mask, token_level=True)
    a.loss.backward()
    b.loss.backward()
    assert 0 < a.metrics["clip_frac"] < 1  # both branches are exercised
    assert b.loss.item() == pytest.approx(a.loss.item(), abs=1e-12)
    assert torch.allclose(logp.grad, logp2.grad, atol=1e-12)


def _random_batch(seed: int, scale: float = 0.3, B: int = 6, T: int = 5):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g, dtype=D) * 3
    logp = (old + scale * torch.randn(B, T, generator=g, dtype=D)).requires_grad_()
    ref = old + 0.2 * torch.randn(B, T, generator=g, dtype=D)
    adv = torch.randn(B, generator=g, dtype=D)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).to(D)
    return logp, old, ref, adv, mask


# --------------------------------------------------------------------------- against TRL
#
# TRL's GRPOTrainer._compute_loss (trl 1.16.0, trl/trainer/grpo_trainer.py) runs
# on a real trainer (tests/trl_reference.py): it does its own forward pass and
# its own loss. tackroom computes log-probs with its own forward of the same
# model and its own loss on the same batch. Values, every parameter's gradient,
# and the clip fraction / KL TRL logs must agree.

PROMPTS = ["t1 t2"] * 4 + ["t3 t4 t5"] * 4
REWARDS = [1.0, 0.0, 0.5, 1.0, 0.0, 0.0, 1.0, 0.25]
COMPLETIONS = [[3, 9, 4], [5, 1, 7, 2, 8], [6, 6], [11, 2, 30, 4], [12, 13, 14, 15, 16],
               [17], [18, 19, 20], [21, 22]]
MAX_LEN = 6  # TRL's max_completion_length: the constant divisor of dr_grpo
#: per-sequence scale of the noise that moves π_old away from π_θ: large ones get
#: clipped under GRPO's ε = 0.2, tiny ones stay inside GSPO's (3e-4, 4e-4).
NOISE = [0.4, 1e-5, 0.3, 2e-5, 0.5, 1e-5, 0.4, 3e-5]

CASES = {
    # name: (TRL attributes _compute_loss reads, the tackroom config)
    "grpo": ({"loss_type": "grpo", "importance_sampling_level": "token", "epsilon_low": 0.2,
              "epsilon_high": 0.2, "beta": 0.04, "use_bias_correction_kl": False},
             RLConfig(algorithm="grpo", epsilon=0.2, beta=0.04)),
    "grpo_kl_corrected": ({"loss_type": "grpo", "importance_sampling_level": "token",
                           "epsilon_low": 0.2, "epsilon_high": 0.2, "beta": 0.04,
                           "use_bias_correction_kl": True},
                          RLConfig(algorithm="grpo", beta=0.04, kl_ratio_correction=True)),
    "grpo_clip_higher": ({"loss_type": "grpo", "importance_sampling_level": "token",
                          "epsilon_low": 0.2, "epsilon_high": 0.28, "beta": 0.0},
                         RLConfig(algorithm="grpo", epsilon_low=0.2, epsilon_high=0.28)),
    "grpo_token_mean": ({"loss_type": "bnpo", "importance_sampling_level": "token",
                         "epsilon_low": 0.2, "epsilon_high": 0.2, "beta": 0.04,
                         "use_bias_correction_kl": False},
                        RLConfig(algorithm="grpo", beta=0.04, loss_agg="token_mean")),
    "dr_grpo": ({"loss_type": "dr_grpo", "importance_sampling_level": "token",
                 "epsilon_low": 0.2, "epsilon_high": 0.2, "beta": 0.04,
                 "use_bias_correction_kl": True},
                RLConfig(algorithm="dr_grpo", beta=0.04, kl_ratio_correction=True,
                         max_completion_length=MAX_LEN)),
    "gspo": ({"loss_type": "grpo", "importance_sampling_level": "sequence",
              "epsilon_low": 3e-4, "epsilon_high": 4e-4, "beta": 0.0},
             RLConfig(algorithm="gspo")),
    "gspo_kl": ({"loss_type": "grpo", "importance_sampling_level": "sequence",
                 "epsilon_low": 3e-4, "epsilon_high": 4e-4, "beta": 0.04,
                 "use_bias_correction_kl": False},
                RLConfig(algorithm="gspo", beta=0.04)),
    "gspo_kl_corrected": ({"loss_type": "grpo", "importance_sampling_level": "sequence",
                           "epsilon_low": 3e-4, "epsilon_high": 4e-4, "beta": 0.04,
                           "use_bias_correction_kl": True},
                          RLConfig(algorithm="gspo", beta=0.04, kl_ratio_correction=True)),
    # GSPO-token with sequence advantages is GSPO: TRL's sequence level is the reference.
    "gspo_token": ({"loss_type": "grpo", "importance_sampling_level": "sequence",
                    "epsilon_low": 3e-4, "epsilon_high": 4e-4, "beta": 0.0},
                   RLConfig(algorithm="gspo_token")),
}


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    pytest.importorskip("trl")
    pytest.importorskip("datasets")
    from trl_reference import make_trainer

    return make_trainer(str(tmp_path_factory.mktemp("trl")), num_generations=4,
                        max_completion_length=MAX_LEN)


@pytest.fixture(scope="module")
def batch(trainer):
    """TRL's own batch for the fixed rollouts, plus π_old and π_ref log-probs near π_θ."""
    from trl_reference import trl_batch

    inputs = trl_batch(trainer, PROMPTS, REWARDS, COMPLETIONS)
    with torch.no_grad():
        lp = _tackroom_logprobs(trainer.model, inputs)
    g = torch.Generator().manual_seed(7)
    scale = torch.tensor(NOISE, dtype=D).unsqueeze(1)
    mask = inputs["completion_mask"].to(D)
    inputs["old_per_token_logps"] = lp + scale * torch.randn(lp.shape, generator=g, dtype=D) * mask
    inputs["ref_per_token_logps"] = lp + 0.2 * torch.randn(lp.shape, generator=g, dtype=D) * mask
    inputs["advantages"] = inputs["advantages"].to(D)  # TRL's group advantages (scale "group")
    return inputs


def _tackroom_logprobs(model, inputs) -> torch.Tensor:
    """log π_θ of each completion token from a plain forward pass (not TRL's fused head)."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    n = inputs["completion_ids"].size(1)
    logits = model(input_ids=ids, attention_mask=attn).logits[:, -n - 1:-1]
    return token_logprobs(logits, inputs["completion_ids"])


def _grads(model) -> dict[str, torch.Tensor]:
    out = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_loss_and_gradients_match_trl(trainer, batch, case: str) -> None:
    trl_attrs, cfg = CASES[case]
    for k, v in trl_attrs.items():
        # use_bias_correction_kl is read from trainer.args, the rest from the trainer itself
        setattr(trainer.args if k == "use_bias_correction_kl" else trainer, k, v)
    model = trainer.model
    model.zero_grad(set_to_none=True)

    trl_loss = trainer._compute_loss(model, batch)      # TRL's own forward and loss
    trl_loss.backward()
    trl_grads = _grads(model)

    logp = _tackroom_logprobs(model, batch)
    ours = policy_loss_from_config(cfg, logp, batch["old_per_token_logps"], batch["advantages"],
                                   batch["completion_mask"], ref_logp=batch["ref_per_token_logps"])
    ours.loss.backward()
    our_grads = _grads(model)

    assert ours.loss.item() == pytest.approx(trl_loss.item(), abs=1e-5, rel=1e-5)
    assert our_grads.keys() == trl_grads.keys() and len(our_grads) > 10
    for name, g in trl_grads.items():
        assert torch.allclose(our_grads[name], g, atol=1e-5, rtol=1e-5), name
    assert any(g.abs().max() > 1e-3 for g in trl_grads.values())  # not vacuously equal

    # The batch exercises the clip (some sequences or tokens clipped, not all).
    assert 0 < ours.metrics["clip_frac"] < 1
    if case != "gspo_token":  # GSPO-token counts clipped tokens, TRL's sequence level sequences
        assert ours.metrics["clip_frac"] == pytest.approx(
            trainer._metrics["train"]["clip_ratio/region_mean"][-1], abs=1e-6)
    if trl_attrs["beta"]:
        assert ours.metrics["kl"] == pytest.approx(trainer._metrics["train"]["kl"][-1],
                                                   abs=1e-5)
