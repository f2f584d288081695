"""Policy mirror descent lab (tackroom.lab, docs/lab.md): exact math first, then the actor.

The PMD oracle is checked against a hand computation; the frozen audit model
(hand-set attention weights) against the oracle's update; the learned actor
only for determinism, causality and that training reduces its loss — no test
depends on how good one training run happens to be.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tackroom.lab import (
    RESIDUALS,
    MonteCarloCritic,
    TabularMDP,
    accumulate,
    average,
    decompose,
    fit_step,
    make_instances,
    pmd_oracle,
    pmd_update,
    policy_loss,
    random_mdp,
    run_protocol,
    uniform_policy,
)
from tackroom.lab.mdp import FAMILIES, bandit
from tackroom.lab.pmd import log_softmax, softmax


def two_state_mdp() -> TabularMDP:
    """s0: a0 stays (r=1), a1 → s1 (r=0); s1: a0 → s0 (r=0), a1 stays (r=2); γ = 1/2."""
    P = np.zeros((2, 2, 2))
    P[0, 0, 0] = P[0, 1, 1] = P[1, 0, 0] = P[1, 1, 1] = 1.0
    R = np.array([[1.0, 0.0], [0.0, 2.0]])
    return TabularMDP(P, R, 0.5, np.array([1.0, 0.0]))


def test_oracle_matches_a_hand_computation_on_two_states():
    mdp = two_state_mdp()
    pi0 = uniform_policy(2, 2)
    # By hand: V0 = ½(1 + ½V0) + ½(½V1), V1 = ½(½V0) + ½(2 + ½V1) ⇒ V1 − V0 = ½,
    # V0 = 5/4, V1 = 7/4; Q = R + ½·V(next).
    np.testing.assert_allclose(mdp.state_values(pi0), [1.25, 1.75])
    q0 = np.array([[1 + 0.5 * 1.25, 0.5 * 1.75], [0.5 * 1.25, 2 + 0.5 * 1.75]])
    np.testing.assert_allclose(mdp.q_values(pi0), q0)
    # π1(a|s) ∝ ½·exp(η Q0(s, a)): a logistic in the Q gap, 0.75 in s0 and 2.25 in s1.
    eta = 1.0
    trace = pmd_oracle(mdp, eta, rounds=1)
    sig = lambda z: 1 / (1 + math.exp(-z))  # noqa: E731
    np.testing.assert_allclose(softmax(trace.logits[1]),
                               [[sig(0.75), 1 - sig(0.75)], [1 - sig(2.25), sig(2.25)]])
    np.testing.assert_allclose(trace.q[0], q0)
    # Optimal: stay in s1 (V1* = 2/(1−½) = 4); in s0 staying (1/(1−½)) and moving over
    # (0 + ½·4) tie at V0* = 2.
    np.testing.assert_allclose(mdp.state_values(mdp.optimal_policy()), [2.0, 4.0])
    assert mdp.optimal_value() == pytest.approx(2.0)
    assert policy_loss(mdp, pi0) == pytest.approx(1.0)
    assert policy_loss(mdp, mdp.optimal_policy()) == pytest.approx(0.0)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_accumulated_logits_equal_the_iterated_update(family):
    # π_K ∝ π_0 · exp(η Σ_k Q_k): the closed form the attention actor computes.
    mdp = make_instances(family, 1, seed=3)[0]
    eta, trace = 0.7, pmd_oracle(mdp, 0.7, rounds=6)
    z = log_softmax(np.log(uniform_policy(mdp.n_states, mdp.n_actions)))
    for k in range(6):
        z = pmd_update(z, trace.q[k], eta)
        np.testing.assert_allclose(z, trace.logits[k + 1], atol=1e-10)
        np.testing.assert_allclose(trace.q[k], mdp.q_values(softmax(trace.logits[k])))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("eta", [0.1, 1.0, 10.0])
def test_exact_pmd_improves_monotonically(seed, eta):
    rng = np.random.default_rng(seed)
    mdp = random_mdp(rng, 6, 3, concentration=0.3)
    trace = pmd_oracle(mdp, eta, rounds=15)
    # Q^{π_{k+1}} ≥ Q^{π_k} everywhere (the multiplicative step raises E_π Q in every state).
    for k in range(14):
        assert (trace.q[k + 1] >= trace.q[k] - 1e-10).all()
    assert (np.diff(trace.loss) <= 1e-12).all()
    assert trace.loss[0] == pytest.approx(1.0) and 0.0 <= trace.loss[-1] < 1.0


def test_optimal_policy_beats_random_policies():
    rng = np.random.default_rng(0)
    for _ in range(5):
        mdp = random_mdp(rng, 5, 3)
        v_star = mdp.state_values(mdp.optimal_policy())
        for _ in range(20):
            pi = rng.dirichlet(np.ones(3), size=5)
            assert (mdp.state_values(pi) <= v_star + 1e-10).all()
        q_star = mdp.q_values(mdp.optimal_policy())
        np.testing.assert_allclose(q_star.max(-1), v_star)  # Bellman optimality


def test_mdp_validation_and_seeded_instances():
    with pytest.raises(ValueError, match="probability distribution"):
        TabularMDP(np.full((1, 2, 1), 0.5), np.zeros((1, 2)), 0.9, np.ones(1))
    with pytest.raises(ValueError, match="gamma"):
        TabularMDP(np.ones((1, 2, 1)), np.zeros((1, 2)), 1.0, np.ones(1))
    with pytest.raises(KeyError, match="unknown MDP family"):
        make_instances("torus", 1, 0)
    a, b = make_instances("grid 3x3", 3, 7), make_instances("grid 3x3", 3, 7)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.P, y.P)
        np.testing.assert_array_equal(x.R, y.R)


def test_monte_carlo_critic_is_seeded_and_unbiased_enough():
    mdp = random_mdp(np.random.default_rng(1), 3, 2, gamma=0.5)
    pi = uniform_policy(3, 2)
    q1 = MonteCarloCritic(4000, seed=5)(mdp, pi)
    np.testing.assert_array_equal(q1, MonteCarloCritic(4000, seed=5)(mdp, pi))
    # Returns lie in [0, 2]: the standard error of a mean of 4000 is ≤ 0.016.
    np.testing.assert_allclose(q1, mdp.q_values(pi), atol=0.08)
    # A bandit's Q is its arm's reward plus γ·V, with no sampling noise from transitions
    # and none from actions either at horizon 1.
    b = bandit(np.random.default_rng(2), 4)
    np.testing.assert_allclose(MonteCarloCritic(1, seed=0, horizon=1)(b, uniform_policy(1, 4)),
                               b.R)


def test_average_rule_is_dual_averaging():
    ctx = np.random.default_rng(0).normal(size=(4, 2, 3))
    np.testing.assert_allclose(average(ctx), ctx.sum(0) / 4)
    np.testing.assert_allclose(accumulate(ctx), ctx.sum(0))


def test_decompose_on_known_losses():
    n = 5
    o = np.linspace(0.1, 0.5, n)
    losses = {k: o.copy() for k in RESIDUALS}
    losses["actor"] = o + 0.03
    losses["routing"] = o + 0.01
    losses["normalisation"] = o + 0.015
    losses["actor_sampled"] = o + 0.05
    losses["average"] = o + 0.4
    r = decompose(losses)
    assert r.oracle == pytest.approx(0.3) and r.actor == pytest.approx(0.33)
    assert r.gap == pytest.approx(0.03) and r.relative == pytest.approx(0.1)
    assert (r.routing, r.normalisation, r.other) == pytest.approx((0.01, 0.015, 0.005))
    assert r.sampling == pytest.approx(0.02) and r.sampling_oracle == pytest.approx(0.0)
    assert r.unnormalised == pytest.approx(0.4)
    with pytest.raises(KeyError, match="needs losses"):
        decompose({"oracle": o})


def test_fit_step_recovers_a_pmd_step_from_records():
    mdp = random_mdp(np.random.default_rng(4), 4, 3)
    trace = pmd_oracle(mdp, 0.6, rounds=2)
    # As records give them: log-probs over candidate subsets, each shifted arbitrarily.
    states = [(trace.logits[1][s][:k] + 3.0, trace.logits[2][s][:k] - 1.0, trace.q[1][s][:k])
              for s, k in zip(range(4), (3, 2, 3, 1), strict=True)]
    fit = fit_step(states)
    assert fit.eta == pytest.approx(0.6) and fit.r2 == pytest.approx(1.0)
    assert fit.n_states == 3  # a one-candidate state says nothing
    noisy = [(b, a + np.random.default_rng(0).normal(0, 0.5, a.shape), q) for b, a, q in states]
    assert fit_step(noisy).r2 < 0.99
    with pytest.raises(ValueError, match="disagree"):
        fit_step([(np.zeros(2), np.zeros(2), np.zeros(3))])


# --- the attention actor (torch) -------------------------------------------------
# torch is the ``train`` extra: without it these tests skip, the numpy ones above still run.


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_frozen_audit_model_reproduces_the_oracle_update(family, torch):
    from tackroom.lab.actor import AttentionActor, gain_rule, learned_rule, routing_rule

    audit = AttentionActor.audit()
    mdp = make_instances(family, 1, seed=11)[0]
    eta, K = 0.8, 12
    oracle = pmd_oracle(mdp, eta, K)
    ctx = oracle.context(eta)
    base = np.log(uniform_policy(mdp.n_states, mdp.n_actions))
    rule = learned_rule(audit)
    for k in range(K):
        # One step: the audit model, reading rounds 0..k, gives π_{k+1} = PMD(π_k, Q_k).
        step = log_softmax(base + rule(ctx[:k + 1]))
        np.testing.assert_allclose(step, pmd_update(oracle.logits[k], oracle.q[k], eta),
                                   atol=1e-5)
    # Its routing is uniform over past rounds …
    x = torch.as_tensor(ctx.reshape(K, -1).T.copy())
    _, alpha = audit(x)
    expect = np.tril(np.ones((K, K))) / np.arange(1, K + 1)[:, None]
    np.testing.assert_allclose(alpha[0].numpy(), expect, atol=1e-12)
    # … and in closed loop (its own policies, exact critic) it is the oracle.
    for r in (rule, routing_rule(audit), gain_rule(audit)):
        np.testing.assert_allclose(run_protocol(mdp, r, eta, K).logits, oracle.logits,
                                   atol=1e-5)


def test_audit_model_count_gain_and_normalised_attention(torch):
    from tackroom.lab.actor import AttentionActor, fit_count_gain, gain_rule, learned_rule

    audit = AttentionActor.audit(max_rounds=8)
    x = np.random.default_rng(0).normal(size=(10, 3, 8))
    mask = np.ones((10, 3), dtype=bool)
    np.testing.assert_allclose(fit_count_gain(audit, x, mask), np.arange(1, 9), rtol=1e-9)
    # Gain 1 is plain softmax attention: the average of past rounds, not the sum.
    with torch.no_grad():
        audit.gain.fill_(1.0)
    ctx = x[0].T[:, None, :]  # (T, S=1, A=3)
    ctx = ctx - ctx.mean(-1, keepdims=True)  # tokens are centred over actions
    np.testing.assert_allclose(learned_rule(audit)(ctx), average(ctx), atol=1e-12)
    np.testing.assert_allclose(gain_rule(audit)(ctx), average(ctx), atol=1e-12)
    np.testing.assert_allclose(fit_count_gain(audit, x, mask), np.ones(8), rtol=1e-9)


def test_actor_is_causal(torch):
    from tackroom.lab.actor import AttentionActor

    torch.manual_seed(0)
    m = AttentionActor(max_rounds=10).eval()
    x = torch.randn(4, 10)
    y, alpha = m(x)
    x2 = x.clone()
    x2[:, 6:] = 100.0
    y2, _ = m(x2)
    torch.testing.assert_close(y[:, :6], y2[:, :6])
    assert torch.all(alpha.triu(1) == 0)
    torch.testing.assert_close(alpha.sum(-1), torch.ones(4, 10))
    with pytest.raises(ValueError, match="max_rounds"):
        m(torch.zeros(1, 11))


def test_training_is_deterministic_and_learns(torch):
    from tackroom.lab.actor import TrainConfig, train_actor

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the same reductions in the same order, twice
    try:
        cfg = TrainConfig(n_mdps=30, steps=150, batch=64, rounds=8)
        m1, h1 = train_actor(cfg)
        m2, h2 = train_actor(cfg)
    finally:
        torch.set_num_threads(threads)
    assert h1 == h2
    for p, q in zip(m1.parameters(), m2.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    assert h1[-1] < h1[0] / 10
