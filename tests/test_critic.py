"""Value heads V(s) and V(s, e), GAE by hand, and the (clipped) value loss."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tackroom.train.critic import (  # noqa: E402
    ValueHead,
    gae,
    harness_vocab,
    make_value_head,
    value_loss,
)

torch.set_num_threads(1)
D = torch.float64


def t(x) -> torch.Tensor:
    return torch.tensor(x, dtype=D)


# --------------------------------------------------------------------------- GAE


def test_gae_by_hand() -> None:
    """r = [0, 0, 1], V = [0.5, 0.6, 0.7], γ = 0.9, λ = 0.8, the episode ends after turn 2.

    δ2 = 1 + 0.9·0 − 0.7 = 0.3                      A2 = 0.3
    δ1 = 0 + 0.9·0.7 − 0.6 = 0.03                   A1 = 0.03 + 0.72·0.3 = 0.246
    δ0 = 0 + 0.9·0.6 − 0.5 = 0.04                   A0 = 0.04 + 0.72·0.246 = 0.21712
    """
    adv, ret = gae(t([0.0, 0.0, 1.0]), t([0.5, 0.6, 0.7]), gamma=0.9, lam=0.8)
    assert adv.tolist() == pytest.approx([0.21712, 0.246, 0.3], abs=1e-12)
    assert ret.tolist() == pytest.approx([0.71712, 0.846, 1.0], abs=1e-12)


def test_gae_batch_with_padding_and_bootstrap() -> None:
    """Row 1 has two real turns and was cut off: it bootstraps from V(s_2) = 0.5.

    δ1 = 2 + 0.9·0.5 − 0.4 = 2.05                   A1 = 2.05
    δ0 = 1 + 0.9·0.4 − 0.2 = 1.16                   A0 = 1.16 + 0.72·2.05 = 2.636
    """
    rewards = t([[0.0, 0.0, 1.0], [1.0, 2.0, 99.0]])
    values = t([[0.5, 0.6, 0.7], [0.2, 0.4, 99.0]])
    mask = t([[1, 1, 1], [1, 1, 0]])
    adv, ret = gae(rewards, values, mask, gamma=0.9, lam=0.8, last_values=t([0.0, 0.5]))
    assert adv[0].tolist() == pytest.approx([0.21712, 0.246, 0.3], abs=1e-12)
    assert adv[1].tolist() == pytest.approx([2.636, 2.05, 0.0], abs=1e-12)
    assert ret[1].tolist() == pytest.approx([2.836, 2.45, 0.0], abs=1e-12)


def test_gae_lambda_limits() -> None:
    r, v = t([1.0, 0.0, 2.0]), t([0.3, 0.1, 0.4])
    mc, _ = gae(r, v, gamma=0.5, lam=1.0)           # λ = 1: discounted return − V
    returns = [1 + 0.5 * 0 + 0.25 * 2, 0 + 0.5 * 2, 2.0]
    assert mc.tolist() == pytest.approx([g - b for g, b in zip(returns, v.tolist(),
                                                                 strict=True)], abs=1e-12)
    td, _ = gae(r, v, gamma=0.5, lam=0.0)           # λ = 0: one-step TD error
    assert td.tolist() == pytest.approx([1 + 0.05 - 0.3, 0 + 0.2 - 0.1, 2 - 0.4], abs=1e-12)
    with pytest.raises(ValueError, match="differ in shape"):
        gae(r, v[:2], gamma=1.0, lam=1.0)


def test_gae_takes_no_gradient() -> None:
    v = t([0.5, 0.5]).requires_grad_()
    adv, ret = gae(t([0.0, 1.0]), v, gamma=1.0, lam=0.95)
    assert not adv.requires_grad and not ret.requires_grad


# --------------------------------------------------------------------------- value loss


def test_value_loss_unclipped_and_clipped_by_hand() -> None:
    v = t([1.0, 2.0]).requires_grad_()
    out = value_loss(v, t([0.0, 0.0]))
    assert out.loss.item() == pytest.approx(0.5 * (1 + 4) / 2)

    # c = 0.5, V_old = [1, 1], V = [1, 3], R = [0, 4]:
    # V_clip = [1, 1.5]; (V − R)² = [1, 1]; (V_clip − R)² = [1, 6.25]; max = [1, 6.25]
    v = t([1.0, 3.0]).requires_grad_()
    out = value_loss(v, t([0.0, 4.0]), old_values=t([1.0, 1.0]), clip=0.5)
    assert out.loss.item() == pytest.approx(0.5 * (1 + 6.25) / 2)
    assert out.metrics["value_clip_frac"] == pytest.approx(0.5)
    out.loss.backward()
    assert v.grad.tolist() == pytest.approx([0.5, 0.0])  # the clipped value gets no push

    masked = value_loss(t([1.0, 50.0]), t([0.0, 0.0]), t([1, 0]))
    assert masked.loss.item() == pytest.approx(0.5)
    assert value_loss(t([1.0, 2.0, 3.0]), t([1.0, 2.0, 3.0])).metrics["explained_variance"] == 1
    with pytest.raises(ValueError, match="old_values"):
        value_loss(v, t([0.0, 0.0]), clip=0.2)


# --------------------------------------------------------------------------- value heads


def test_shared_head_ignores_harness_and_shapes() -> None:
    torch.manual_seed(0)
    head = ValueHead(8, mlp_hidden=16)
    h = torch.randn(3, 5, 8)
    assert head(h).shape == (3, 5) and head(h[:, -1]).shape == (3,)
    assert not head.conditioned
    assert torch.equal(head(h, torch.tensor([0, 1, 2])), head(h))


@pytest.mark.parametrize("mode", ["add", "concat"])
def test_harness_head_uses_the_harness_index(mode: str) -> None:
    torch.manual_seed(0)
    head = ValueHead(8, n_harnesses=2, harness_embed=mode, mlp_hidden=16)
    h = torch.randn(4, 8)
    e0, e1 = torch.zeros(4, dtype=torch.long), torch.ones(4, dtype=torch.long)
    # The embedding starts at zero: V(s, e) starts as the shared V(s) ...
    assert torch.equal(head(h, e0), head(h, e1))
    # ... yet receives gradient, so it can learn per-harness differences.
    head(h, e1).sum().backward()
    assert head.embedding.weight.grad[1].abs().sum() > 0
    assert head.embedding.weight.grad[0].abs().sum() == 0
    with torch.no_grad():
        head.embedding.weight[1] += 1.0
    assert not torch.allclose(head(h, e0), head(h, e1))
    seq = torch.randn(2, 3, 8)  # [B, T, H]: one harness per sequence, same at every position
    assert head(seq, torch.tensor([0, 1])).shape == (2, 3)
    with pytest.raises(ValueError, match="needs the harness index"):
        head(h)
    with pytest.raises(ValueError, match="out of range"):
        head(h, torch.tensor([0, 1, 2, 0]))
    with pytest.raises(ValueError, match=r"must be \[B\]"):
        head(h, torch.tensor([0, 1]))


def test_conditioned_critic_fits_harness_dependent_returns() -> None:
    """docs/research.md §5 in miniature: the same states return +1 under harness 0 and −1 under 1.

    A shared V(s) can only learn the mixture (0), leaving a unit error on every
    sample; V(s, e) learns both.
    """
    torch.manual_seed(0)
    states = torch.randn(16, 8)
    h = torch.cat([states, states])
    e = torch.cat([torch.zeros(16), torch.ones(16)]).long()
    returns = torch.cat([torch.ones(16), -torch.ones(16)])

    def fit(head: ValueHead) -> float:
        opt = torch.optim.Adam(head.parameters(), lr=0.03)
        for _ in range(150):
            opt.zero_grad()
            loss = value_loss(head(h, e), returns).loss
            loss.backward()
            opt.step()
        return value_loss(head(h, e), returns).loss.item()

    shared = fit(ValueHead(8, mlp_hidden=16))
    conditioned = fit(ValueHead(8, n_harnesses=2, mlp_hidden=16))
    assert shared > 0.45          # ½·E[(V − R)²] ≥ ½ at the best constant-in-e fit
    assert conditioned < 0.01


def test_value_head_on_a_causal_lm() -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(vocab_size=40, hidden_size=16, intermediate_size=32,
                                   num_hidden_layers=1, num_attention_heads=2,
                                   num_key_value_heads=1, max_position_embeddings=32)
    lm = transformers.Qwen2ForCausalLM(cfg)
    vocab = harness_vocab(["swe-agent", "aider", "aider"])
    assert vocab == {"aider": 0, "swe-agent": 1}
    head = make_value_head("harness", cfg.hidden_size, n_harnesses=len(vocab), mlp_hidden=8)
    ids = torch.randint(0, 40, (2, 6))
    out = lm(input_ids=ids, attention_mask=torch.ones_like(ids), output_hidden_states=True)
    values = head(out.hidden_states[-1], torch.tensor([vocab["aider"], vocab["swe-agent"]]))
    assert values.shape == (2, 6) and values.dtype == torch.float32
    value_loss(values, torch.zeros(2, 6)).loss.backward()
    assert lm.model.layers[0].mlp.up_proj.weight.grad is not None  # trains through the LM


def test_make_value_head() -> None:
    assert make_value_head("none", 8) is None
    assert not make_value_head("shared", 8).conditioned
    assert make_value_head("harness", 8, n_harnesses=3).conditioned
    with pytest.raises(ValueError, match="n_harnesses"):
        make_value_head("harness", 8)
    with pytest.raises(ValueError, match="critic must be"):
        make_value_head("both", 8)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="embed_dim"):
        ValueHead(8, n_harnesses=2, harness_embed="add", embed_dim=4)
