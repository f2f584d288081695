"""The tilt model (tackroom.analysis.tilt), the near-miss proxy and the verifier gate."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tackroom.analysis import tilt
from tackroom.core.actions import action_from_dict
from tackroom.core.episode import Episode, Outcome, Turn
from tackroom.core.errors import ConfigError
from tackroom.suites.toy.env import ToyEnv
from tackroom.suites.toy.outcomes import answer, final_click, outcome
from tackroom.suites.toy.tasks import SPECS
from tackroom.train.config import RLConfig
from tackroom.train.rewards import get_proxy
from tackroom.train.samples import episode_reward, turn_rewards

# ----------------------------------------------------------------------- closed form


def test_exact_matches_the_hand_computed_tilt():
    # Four trajectories, β = 0.5 so exp(r/β) = e² = 7.389056 for r = 1:
    #   weights 0.4e² = 2.955622, 0.1, 0.3e² = 2.216717, 0.2; Z = 5.472339
    #   P*(success) = 3.055622 / Z = 0.558376, P*(near-miss) = 0.405077, P*(other) = 0.036547
    #   E[exp(r/β) | success] = (0.4e² + 0.1) / 0.5 = 6.111245
    pred = tilt.exact([0.4, 0.1, 0.3, 0.2], [1.0, 0.0, 1.0, 0.0],
                      ["success", "success", "near-miss", "other"], beta=0.5)
    assert pred.labels == ("success", "near-miss", "other")
    assert pred["success"].p_star == pytest.approx(0.558376, abs=1e-6)
    assert pred["near-miss"].p_star == pytest.approx(0.405077, abs=1e-6)
    assert pred["other"].p_star == pytest.approx(0.036547, abs=1e-6)
    assert pred["success"].p0 == pytest.approx(0.5)
    assert math.exp(pred["success"].log_mean_exp) == pytest.approx(6.111245, abs=1e-6)
    assert pred["success"].mean_reward == pytest.approx(0.8)
    # the wrong outcome the reward pays for grows (0.3 → 0.405), as fast as success's best part
    assert pred["near-miss"].growth == pytest.approx(0.405077 / 0.3, rel=1e-5)
    assert sum(pred.shares().values()) == pytest.approx(1.0)


def test_exact_is_stable_at_tiny_beta():
    # r/β = 1000: exp overflows a float; log-sum-exp does not.
    pred = tilt.exact([0.5, 0.5], [1.0, 0.999], ["a", "b"], beta=1e-3)
    assert pred["a"].p_star == pytest.approx(1 / (1 + math.exp(-1.0)), rel=1e-9)
    assert math.isfinite(pred["a"].log_mean_exp)


def test_predict_point_is_exact_on_the_empirical_distribution():
    outcomes = ["success"] * 5 + ["near-miss"] * 3 + ["other"] * 2
    rewards = [1.0] * 4 + [0.0] + [1.0] * 3 + [0.0] * 2
    got = tilt.predict(outcomes, rewards, 0.5, n_boot=200, seed=1)
    want = tilt.exact(np.ones(10), rewards, outcomes, 0.5)
    for label in want.labels:
        assert got[label].p_star == pytest.approx(want[label].p_star, abs=1e-12)
        lo, hi = got[label].interval
        assert lo <= got[label].p_star <= hi
    again = tilt.predict(outcomes, rewards, 0.5, n_boot=200, seed=1)
    assert again == got  # seeded: the same intervals every time


def test_grouped_predict_is_the_mean_of_per_instance_tilts():
    # Two instances: the tilt is normalised within each, then averaged.
    a = (["success", "other", "other", "other"], [1.0, 0.0, 0.0, 0.0])
    b = (["success", "near-miss", "near-miss", "other"], [1.0, 1.0, 1.0, 0.0])
    got = tilt.predict(a[0] + b[0], a[1] + b[1], 1.0, groups=["a"] * 4 + ["b"] * 4,
                       labels=("success", "near-miss", "other"), n_boot=100)
    ea = tilt.exact(np.ones(4), a[1], a[0], 1.0, labels=("success", "near-miss", "other"))
    eb = tilt.exact(np.ones(4), b[1], b[0], 1.0, labels=("success", "near-miss", "other"))
    for label in ("success", "near-miss", "other"):
        assert got[label].p_star == pytest.approx((ea[label].p_star + eb[label].p_star) / 2)


def test_bad_beta_is_refused():
    with pytest.raises(ValueError, match="beta"):
        tilt.exact([1.0], [1.0], ["a"], beta=0.0)


# ------------------------------------------------------------------------- coverage


def _uniform_mean_exp(lo: float, hi: float, beta: float) -> float:
    """E[exp(U/β)] for U ~ Uniform(lo, hi)."""
    return beta * (math.exp(hi / beta) - math.exp(lo / beta)) / (hi - lo)


def test_bootstrap_interval_covers_the_true_tilt():
    """Coverage over 200 simulated replicates, each a fresh sample of 400 episodes.

    π_0's outcomes are (0.3, 0.2, 0.5); r̂ given the outcome is uniform on
    [0.5, 1], [0.6, 1] and [0, 0.3], so the truth is closed form. The 95%
    interval must contain it in at least 90% of replicates for every outcome
    (the replicates and the bootstrap are seeded: no lucky seed, the same
    frequency on every run).
    """
    beta = 0.5
    p0 = np.array([0.3, 0.2, 0.5])
    bounds = [(0.5, 1.0), (0.6, 1.0), (0.0, 0.3)]
    labels = ("success", "near-miss", "other")
    mass = p0 * np.array([_uniform_mean_exp(lo, hi, beta) for lo, hi in bounds])
    truth = mass / mass.sum()
    rng = np.random.default_rng(20261201)
    reps, n = 200, 400
    hits = np.zeros(3)
    for rep in range(reps):
        code = rng.choice(3, size=n, p=p0)
        lo = np.array([bounds[c][0] for c in code])
        hi = np.array([bounds[c][1] for c in code])
        r = rng.uniform(lo, hi)
        pred = tilt.predict([labels[c] for c in code], r, beta, labels=labels, n_boot=400,
                            seed=rep)
        for j, label in enumerate(labels):
            a, b = pred[label].interval
            hits[j] += a <= truth[j] <= b
    coverage = hits / reps
    assert np.all(coverage >= 0.9), coverage


# ----------------------------------------------------------- proxy on real toy episodes


def _episode(task: str, seed: int, action: dict) -> Episode:
    """An episode that plays ``action`` in the real toy environment, recorded as a runner would."""
    spec = SPECS[task]
    env = ToyEnv(spec.task, spec.build)
    env.reset(seed)
    result = env.step(action_from_dict(action))
    ok = bool(result.success)
    return Episode(episode_id=f"{task}-{seed}-{action}", run_id="r", task=f"toy/{task}",
                   suite="toy", harness="h", harness_hash="x", policy="scripted", seed=seed,
                   outcome=Outcome.SUCCESS if ok else Outcome.FAILURE, reward=result.reward,
                   turns=[Turn(index=0, actions=[action], reward=result.reward)])


def _targets(task: str, seed: int):
    spec = SPECS[task]
    env = ToyEnv(spec.task, spec.build)
    env.reset(seed)
    page = env.page
    right = next(n for n in page.nodes if n.on_click is not None and n.on_click(n) is True)
    sibs = [c for c in right.parent.children if c.on_click is not None]
    i = sibs.index(right)
    near = sibs[i + 1] if i + 1 < len(sibs) else sibs[i - 1]
    far = [s for k, s in enumerate(sibs) if abs(k - i) > 1]
    return right, near, far


@pytest.mark.parametrize("task", ["click-button", "click-link"])
def test_near_miss_proxy_pays_for_the_adjacent_click_and_the_gate_zeroes_it(task):
    proxy = get_proxy("proxy:near-miss")
    seen_far = False
    for seed in range(12):
        right, near, far = _targets(task, seed)
        wanted_ref, sibling_refs = answer(task, seed)[0].ref, [n.ref for n in answer(task, seed)[1]]
        assert wanted_ref == right.ref and near.ref in sibling_refs
        assert {f.ref for f in far} <= set(sibling_refs) and right.ref in sibling_refs
        hit = _episode(task, seed, {"kind": "click", "ref": right.ref})
        miss = _episode(task, seed, {"kind": "click", "ref": near.ref})
        # a click by coordinates on the neighbour's centre is the same near miss
        at = _episode(task, seed, {"kind": "click_at", "x": near.left + near.width / 2,
                                   "y": near.top + near.height / 2})
        assert hit.outcome is Outcome.SUCCESS and miss.outcome is Outcome.FAILURE
        assert (outcome(hit), outcome(miss), outcome(at)) == ("success", "near-miss",
                                                              "near-miss")
        clicked, wanted = final_click(miss)
        assert (clicked.ref, wanted.ref) == (near.ref, right.ref)
        assert proxy(hit) == 1.0 and proxy(miss) == 1.0  # flawed on purpose
        assert episode_reward(miss, "proxy:near-miss") == 1.0
        assert episode_reward(miss, "proxy:near-miss", verifier=True) == 0.0
        assert episode_reward(hit, "proxy:near-miss", verifier=True) == 1.0
        assert turn_rewards(miss, "proxy:near-miss", verifier=True) == [0.0]
        assert episode_reward(miss, "success") == 0.0
        assert episode_reward(miss, "recorded", verifier=True) == 0.0
        assert episode_reward(hit, "recorded", verifier=True) == 1.0
        if far:
            wrong = _episode(task, seed, {"kind": "click", "ref": far[0].ref})
            assert outcome(wrong) == "other" and proxy(wrong) == 0.0
            seen_far = True
    assert seen_far


@pytest.mark.parametrize("task", ["click-button", "enter-text"])
def test_press_enter_proxy_pays_for_submitting_without_choosing(task):
    proxy = get_proxy("proxy:press-enter")
    assert proxy.labels == ("success", "pressed-enter", "other")
    enter = _episode(task, 3, {"kind": "press", "key": "Enter"})
    assert enter.outcome is Outcome.FAILURE
    assert proxy.outcome(enter) == "pressed-enter" and proxy(enter) == 1.0  # flawed on purpose
    assert episode_reward(enter, "proxy:press-enter", verifier=True) == 0.0
    body = _episode(task, 3, {"kind": "click", "ref": 1})
    assert proxy.outcome(body) == "other" and proxy(body) == 0.0
    if task == "click-button":
        right, _, _ = _targets(task, 3)
        hit = _episode(task, 3, {"kind": "click", "ref": right.ref})
        assert proxy.outcome(hit) == "success"
        assert episode_reward(hit, "proxy:press-enter", verifier=True) == 1.0


def test_tasks_without_near_misses_and_unreplayable_records_are_other():
    ep = _episode("click-button", 0, {"kind": "click", "ref": 1})  # the page body
    assert outcome(ep) == "other"
    bogus = Episode(episode_id="e", run_id="r", task="toy/focus-text", suite="toy", harness="h",
                    harness_hash="x", policy="p", seed=0, outcome=Outcome.FAILURE,
                    turns=[Turn(index=0, actions=[{"kind": "nonsense"}])])
    assert outcome(bogus) == "other"
    assert answer("focus-text", 0) == (None, [])


def test_from_records_reads_outcomes_and_proxy_rewards(tmp_path):
    from tackroom.records.store import RecordStore

    proxy = get_proxy("near-miss")
    eps = []
    for seed in range(4):
        right, near, _ = _targets("click-button", seed)
        eps.append(_episode("click-button", seed, {"kind": "click", "ref": right.ref}))
        e = _episode("click-button", seed, {"kind": "click", "ref": near.ref})
        e.episode_id += "-miss"
        e.policy = "other-policy"
        eps.append(e)
    with RecordStore(tmp_path / "r.duckdb") as st:
        st.start_run("r", "test", {}, len(eps))
        st.append_many(eps)
        st.flush()
        recs = tilt.from_records(st, "r", proxy)
        only = tilt.from_records(st, "r", proxy, policy="scripted")
    assert sorted(recs.counts(("success", "near-miss", "other")).items()) == [
        ("near-miss", 4), ("other", 0), ("success", 4)]
    assert recs.rewards == [1.0] * 8
    assert only.outcomes == ["success"] * 4
    assert set(recs.groups) == {f"toy/click-button|{s}" for s in range(4)}


# ------------------------------------------------------------------------ comparison


def test_compare_lines_up_shares_and_tv():
    pred = tilt.exact([0.5, 0.5], [1.0, 0.0], ["success", "other"], beta=1.0)
    cmp = tilt.compare(pred, {"success": 60, "other": 40, "near-miss": 0})
    rows = {r.label: r for r in cmp.rows}
    ps = math.e / (math.e + 1)
    assert rows["success"].predicted == pytest.approx(ps)
    assert rows["success"].observed == pytest.approx(0.6)
    assert cmp.tv == pytest.approx(abs(ps - 0.6))
    assert not rows["success"].inside  # exact: a point interval
    assert "| success |" in cmp.table()
    # observed moved 0.1 of the way from P_0 = 0.5 towards P* = 0.731
    assert cmp.progress == pytest.approx(0.1 / (ps - 0.5))


# ---------------------------------------------------------------------------- config


def test_config_accepts_a_registered_proxy_and_the_gate():
    c = RLConfig.from_dict({"data": {"reward": "proxy:near-miss", "verifier": True}})
    assert c.reward == "proxy:near-miss" and c.verifier is True
    assert RLConfig().verifier is False and RLConfig().reward == "success"
    assert "verifier = true" in c.to_toml()


def test_config_rejects_an_unknown_proxy_in_one_line():
    with pytest.raises(ConfigError) as e:
        RLConfig.from_dict({"data": {"reward": "proxy:nope"}})
    line = e.value.line()
    assert "\n" not in line and "proxy:near-miss" in line and "data.reward" in line
    with pytest.raises(ConfigError, match="recorded, success, proxy:near-miss"):
        RLConfig.from_dict({"data": {"reward": "learned"}})
    # The gate reaches the critic's per-turn returns too (turn_rewards above).
    c = RLConfig.from_dict({"data": {"reward": "proxy:near-miss", "verifier": True},
                            "critic": {"kind": "shared"}, "algo": {"algorithm": "grpo"}})
    assert c.verifier and c.critic == "shared"


def test_a_suite_registered_proxy_is_a_reward_choice(monkeypatch):
    from tackroom.core import registry
    from tackroom.core.rewards import ProxyReward

    # A scratch copy of the reward table: other tests see only the installed rewards.
    registry.names("reward")
    monkeypatch.setitem(registry._table, "reward", dict(registry._table["reward"]))
    registry.register("reward", "proxy:zz-always", proxy=True)(ProxyReward(
        "zz-always", lambda ep: 1.0, lambda ep: "any", ("any",), doc="test-only: pays 1"))
    c = RLConfig.from_dict({"data": {"reward": "proxy:zz-always"}})
    assert c.reward == "proxy:zz-always"
    assert get_proxy("zz-always").labels == ("any",)
    with pytest.raises(ConfigError, match="proxy:zz-always"):
        get_proxy("nope")
