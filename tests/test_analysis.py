"""Harness-dependence estimators on hand-built records whose answers are known exactly."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from tackroom.analysis.ceiling import (
    best_ceiling,
    best_ceilings,
    ceilings,
    pass_at_k_table,
)
from tackroom.analysis.gain import GainPoint, fit_gain, gain_points
from tackroom.analysis.mismatch import (
    action_kl,
    log_odds,
    log_odds_regression,
    mismatch_action,
    mismatch_return,
)
from tackroom.analysis.stats import (
    TaskTable,
    bootstrap_means,
    paired_bootstrap,
    paired_cells,
    pass_at_k,
    scored_rows,
    success_rate,
    wilson,
    wilson_mean,
)
from tackroom.analysis.transfer import (
    conflation,
    conflation_pairs,
    reported_cells,
    transfer_matrix,
)

# ---------------------------------------------------------------------------
# Hand-built rows
# ---------------------------------------------------------------------------


def row(task: str, harness: str, policy: str, seed: int, ok: bool | str, *,
        attempt: int = 0, sampling: dict[str, Any] | None = None) -> dict[str, Any]:
    """One episode row shaped like ``RecordStore.episodes()`` returns it."""
    outcome = ok if isinstance(ok, str) else ("success" if ok else "failure")
    return {
        "episode_id": f"{task}|{harness}|{policy}|{seed}|{attempt}", "run_id": "run-1",
        "task": task, "suite": "toy", "harness": harness, "harness_hash": f"{harness}#1",
        "policy": policy, "seed": seed, "attempt": attempt, "sampling": sampling or {},
        "outcome": outcome, "reward": 1.0 if outcome == "success" else 0.0, "n_turns": 2,
        "prompt_tokens": 100, "completion_tokens": 10, "parse_errors": 0,
    }


def cells(harness: str, policy: str, table: dict[str, list[bool]]) -> list[dict[str, Any]]:
    """Rows from ``{task: [success of seed 0, seed 1, ...]}``."""
    return [row(t, harness, policy, s, ok) for t, oks in table.items() for s, ok in enumerate(oks)]


TASKS = ["t0", "t1", "t2", "t3"]
TRAIN = {"p1": "A", "p2": "A", "p3": "B", "expert": "A"}  # the expert entry must be ignored


def world() -> list[dict[str, Any]]:
    """Harness A: expert 3/4 tasks; p1 0.375; p2 0.5; union covers all 4. Harness B: p3, p1."""
    rows: list[dict[str, Any]] = []
    rows += cells("A", "expert", {"t0": [1, 1], "t1": [1, 1], "t2": [1, 1], "t3": [0, 0]})
    rows += cells("A", "p1", {"t0": [1, 0], "t1": [1, 1], "t2": [0, 0], "t3": [0, 0]})
    rows += cells("A", "p2", {"t0": [0, 0], "t1": [1, 0], "t2": [0, 1], "t3": [1, 1]})
    rows += cells("B", "p3", {"t0": [1, 1], "t1": [0, 0], "t2": [0, 0], "t3": [0, 0]})
    rows += cells("B", "p1", {"t0": [0, 0], "t1": [1, 0], "t2": [0, 0], "t3": [0, 0]})
    # noise that must never count: an infra error and a superseded attempt
    rows.append(row("t3", "A", "p1", 0, "infra_error", attempt=0) | {"seed": 7})
    rows.append(row("t2", "A", "p1", 1, True, attempt=0) | {"attempt": -1})
    return rows


# ---------------------------------------------------------------------------
# stats: pass@k, Wilson, scored rows, bootstrap
# ---------------------------------------------------------------------------


def brute_pass_at_k(n: int, c: int, k: int) -> float:
    samples = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_matches_subset_enumeration() -> None:
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(n, c, k), abs=1e-12)


def test_pass_at_k_edges_and_large_n() -> None:
    assert pass_at_k(10, 0, 3) == 0.0
    assert pass_at_k(10, 10, 3) == 1.0
    assert pass_at_k(10, 8, 3) == 1.0  # k > n - c: every 3-subset holds a success
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    # Stable where the binomials are astronomically large.
    n, c, k = 100_000, 50, 100
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-9)
    for bad in [(5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6)]:
        with pytest.raises(ValueError):
            pass_at_k(*bad)


def test_wilson_known_values() -> None:
    assert wilson(0, 0) == (0.0, 1.0)
    lo, hi = wilson(5, 10)
    assert (lo, hi) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    assert wilson(10, 10)[1] == pytest.approx(1.0)
    assert wilson_mean(0.5, 10) == pytest.approx(wilson(5, 10))


def test_infra_errors_and_earlier_attempts_excluded() -> None:
    rows = [
        row("t0", "A", "p", 0, False, attempt=0),
        row("t0", "A", "p", 0, True, attempt=1),  # the retry counts, not the failure
        row("t1", "A", "p", 0, False, attempt=0),
        row("t1", "A", "p", 0, "infra_error", attempt=1),  # latest attempt is infra: unscored
        row("t2", "A", "p", 0, "infra_error"),
        row("t3", "A", "p", 0, "budget_exhausted"),
    ]
    rate = success_rate(rows)
    assert (rate.successes, rate.n, rate.rate) == (1, 2, 0.5)
    assert (rate.lo, rate.hi) == pytest.approx(wilson(1, 2))
    assert len(scored_rows(scored_rows(rows))) == 2  # idempotent
    assert success_rate([]).n == 0


def test_paired_bootstrap_sign_interval_and_seed() -> None:
    a = np.array([1] * 30 + [0] * 10, dtype=float)
    b = np.array([0] * 30 + [0] * 10, dtype=float)
    res = paired_bootstrap(a, b, n_boot=2000, seed=3)
    assert res.n == 40 and res.diff == pytest.approx(0.75)
    assert 0 < res.lo < 0.75 < res.hi <= 1.0
    assert res.p_value < 0.01
    assert paired_bootstrap(a, b, n_boot=2000, seed=3) == res  # deterministic
    d = a - b
    assert np.array_equal(bootstrap_means(d, seed=3), bootstrap_means(d, seed=3))
    assert not np.array_equal(bootstrap_means(d, seed=3), bootstrap_means(d, seed=4))
    neg = paired_bootstrap(b, a, n_boot=2000, seed=3)
    assert neg.diff == pytest.approx(-0.75) and neg.hi < 0
    same = paired_bootstrap(a, a)
    assert (same.diff, same.lo, same.hi, same.p_value) == (0.0, 0.0, 0.0, 1.0)
    # a small difference on few pairs is not significant
    weak = paired_bootstrap([1, 0, 1, 0, 1], [0, 1, 1, 0, 0])
    assert weak.lo < 0 < weak.hi and weak.p_value > 0.3
    assert math.isnan(paired_bootstrap([], []).diff)
    with pytest.raises(ValueError):
        paired_bootstrap([1, 0], [1])


def test_bootstrap_means_both_paths_have_the_right_spread() -> None:
    rng = np.random.default_rng(0)
    few = rng.integers(0, 2, size=400).astype(float)  # 2 distinct values: multinomial path
    many = rng.normal(size=400)  # 400 distinct... plus a few: index path
    many = np.concatenate([many, rng.normal(size=200)])
    for x in (few, many):
        means = bootstrap_means(x, n_boot=4000, seed=1)
        assert means.mean() == pytest.approx(x.mean(), abs=0.01)
        assert means.std() == pytest.approx(x.std() / math.sqrt(x.size), rel=0.1)


def test_paired_cells_align_by_task_and_seed() -> None:
    rows = (cells("A", "p", {"t0": [1, 0], "t1": [1]})
            + cells("B", "q", {"t0": [0, 0], "t1": [1, 1]})  # t1 seed 1 has no partner
            + [row("t2", "A", "p", 0, True)])
    a, b = paired_cells(rows, ("p", "A"), ("q", "B"))
    assert a.tolist() == [1.0, 0.0, 1.0] and b.tolist() == [0.0, 0.0, 1.0]


# ---------------------------------------------------------------------------
# ceilings
# ---------------------------------------------------------------------------


def test_ceiling_estimators_exact() -> None:
    est = ceilings(world(), train_harness=TRAIN)
    by_name = {e.estimator: e for e in est["A"]}
    assert [e.estimator for e in est["A"]] == ["expert", "pass@k union", "retrained"]
    assert by_name["expert"].value == 0.75
    assert (by_name["expert"].lo, by_name["expert"].hi) == pytest.approx(wilson(3, 4))
    assert by_name["expert"].tasks == tuple(TASKS) and by_name["expert"].n_tasks == 4
    assert by_name["pass@k union"].value == 1.0
    assert by_name["retrained"].value == 0.5 and by_name["retrained"].source == ("p2",)
    assert "p1=0.375" in by_name["retrained"].detail
    assert best_ceiling(est["A"]) is by_name["pass@k union"]
    # B: no expert, and p3 is the only policy trained under B
    by_b = {e.estimator: e for e in est["B"]}
    assert set(by_b) == {"pass@k union", "retrained"}
    assert by_b["pass@k union"].value == 0.5  # t0 (p3) and t1 (p1)
    assert by_b["retrained"].value == 0.25
    # without train_harness there is no retrained estimate
    assert [e.estimator for e in ceilings(world())["A"]] == ["expert", "pass@k union"]


def test_union_over_disjoint_policies_and_pass_at_k() -> None:
    rows = (cells("H", "a", {"t0": [1, 0, 0], "t1": [1, 1, 0], "t2": [0, 0, 0], "t3": [0, 0, 0]})
            + cells("H", "b", {"t0": [0, 0, 0], "t1": [0, 0, 0], "t2": [0, 1, 1], "t3": [0, 0, 1]}))
    (union,) = ceilings(rows)["H"]
    assert union.value == 1.0 and union.source == ("a", "b")
    pak = {(p.policy, p.k): p.value for p in union.pass_at_k}
    assert pak[("a", 1)] == pytest.approx((1 / 3 + 2 / 3) / 4)
    assert pak[("a", 3)] == pytest.approx(0.5)
    assert pak[("b", 3)] == pytest.approx(0.5)
    expected_a2 = (pass_at_k(3, 1, 2) + pass_at_k(3, 2, 2)) / 4
    table = {(p.policy, p.k): p for p in pass_at_k_table(rows, ks=(2, 4))}
    assert table[("a", 2)].value == pytest.approx(expected_a2)
    assert table[("a", 4)].n_tasks == 0 and table[("a", 4)].n_skipped == 4
    assert math.isnan(table[("a", 4)].value)


def test_ceiling_task_set_counts_unrun_tasks_as_zero() -> None:
    rows = cells("A", "expert", {"t0": [1], "t1": [1], "t2": [0]})
    (exp, union) = ceilings(rows, tasks=["t0", "t1", "t2", "t9"])["A"]
    assert exp.value == 0.5 and union.value == 0.5
    assert "ran 3 of 4 tasks" in exp.detail
    only = ceilings(rows, tasks={"A": ["t0", "t2"]})["A"]
    assert only[0].value == 0.5 and only[0].tasks == ("t0", "t2")
    assert ceilings(rows, tasks=[])["A"] == []
    with pytest.raises(ValueError):
        best_ceiling([])


# ---------------------------------------------------------------------------
# mismatch, conflation, transfer
# ---------------------------------------------------------------------------


def test_mismatch_return_exact_with_interval() -> None:
    rows = world()
    est = ceilings(rows, train_harness=TRAIN)
    ms = {(m.policy, m.harness): m for m in mismatch_return(rows, est)}
    m = ms[("p1", "A")]
    assert m.ceiling.estimator == "pass@k union"
    assert m.success == 0.375 and m.mismatch == 0.625 and m.n_tasks == 4 and m.n_missing == 0
    assert m.lo <= m.mismatch <= m.hi and m.lo > 0
    assert (m.success_lo, m.success_hi) == pytest.approx(wilson_mean(0.375, 4))
    assert ms[("p2", "A")].mismatch == 0.5
    assert ms[("expert", "A")].mismatch == 0.25
    assert ms[("p3", "B")].mismatch == 0.25  # 0.5 - 0.25
    assert mismatch_return(rows, est) == mismatch_return(rows, est)  # seeded
    # against the expert's ceiling alone
    only_expert = {"A": [e for e in est["A"] if e.estimator == "expert"]}
    (m1,) = mismatch_return(rows, only_expert, policies=["p1"])
    assert m1.mismatch == 0.75 - 0.375
    assert m1.lo <= m1.mismatch <= m1.hi


def test_mismatch_on_tasks_the_policy_ran() -> None:
    rows = (cells("A", "expert", {"t0": [1], "t1": [1], "t2": [1], "t3": [0]})
            + cells("A", "p", {"t0": [0], "t1": [1], "t2": [0]}))  # p never ran t3
    est = {"A": ceilings(rows)["A"][0]}  # the expert estimate, 0.75 over 4 tasks
    (m,) = mismatch_return(rows, est, policies=["p"])
    assert m.n_missing == 1 and m.tasks == ("t0", "t1", "t2")
    assert m.ceiling_value == 1.0 and m.success == pytest.approx(1 / 3)
    assert m.mismatch == pytest.approx(2 / 3)


def test_conflation_identity_exact() -> None:
    rows = world()
    est = ceilings(rows, train_harness=TRAIN)
    c = conflation(rows, ("p2", "A"), ("p3", "B"), est)
    assert c.success_a == 0.5 and c.success_b == 0.25 and c.gap == 0.25
    assert c.ceiling_a == 1.0 and c.ceiling_b == 0.5 and c.ceiling_part == 0.5
    assert c.mismatch_part == 0.5 - 0.25
    assert c.gap == c.ceiling_part - c.mismatch_part
    assert c.same_tasks
    # the identity holds on awkward numbers too
    for a, b in [(("p1", "A"), ("p1", "B")), (("expert", "A"), ("p3", "B"))]:
        c = conflation(rows, a, b, est)
        assert c.gap == pytest.approx(c.ceiling_part - c.mismatch_part, abs=1e-15)
        assert c.success_a - c.success_b == c.gap
    with pytest.raises(ValueError):
        conflation(rows, ("p2", "A"), ("p3", "Z"), est)


def test_transfer_drop_exact() -> None:
    rows = (cells("A", "pa", {"t0": [1], "t1": [1], "t2": [1], "t3": [0]})
            + cells("B", "pa", {"t0": [1], "t1": [0], "t2": [0], "t3": [0]})
            + cells("B", "pb", {"t0": [1], "t1": [1], "t2": [0], "t3": [0]})
            + cells("A", "pb", {"t0": [1], "t1": [0], "t2": [0], "t3": [0]})
            + cells("A", "expert", {"t0": [1], "t1": [1], "t2": [1], "t3": [1]})
            + cells("A", "base", {"t0": [0], "t1": [0], "t2": [0], "t3": [0]}))
    m = transfer_matrix(rows, {"pa": "A", "pb": "B", "expert": "A"})
    assert m.train_harnesses == ["A", "B"] and m.eval_harnesses == ["A", "B"]
    assert m.policies == {"A": ["pa"], "B": ["pb"]}  # expert and base are not trained
    assert m.cells[("A", "A")].rate == 0.75 and m.cells[("A", "B")].rate == 0.25
    assert m.cells[("B", "B")].successes == 2 and m.cells[("B", "B")].n == 4
    assert m.drop == {("A", "A"): 0.0, ("A", "B"): 0.5, ("B", "A"): 0.25, ("B", "B"): 0.0}
    assert m.drop_test[("A", "B")].diff == 0.5 and m.drop_test[("A", "B")].n == 4
    # two policies trained under one harness pool into one row
    rows += (cells("A", "pa2", {"t0": [0], "t1": [0], "t2": [0], "t3": [0]})
             + cells("B", "pa2", {"t0": [0], "t1": [0], "t2": [0], "t3": [0]}))
    m = transfer_matrix(rows, {"pa": "A", "pa2": "A", "pb": "B"})
    assert m.cells[("A", "A")].rate == 3 / 8 and m.drop[("A", "B")] == 3 / 8 - 1 / 8
    # ... and each policy keeps its own row beside the pooled one.
    assert m.by_policy[("pa", "A")].rate == 0.75 and m.by_policy[("pa2", "A")].rate == 0.0
    assert m.policy_drop[("pa", "B")] == 0.5 and m.policy_drop[("pa2", "B")] == 0.0
    assert m.policy_drop[("pb", "A")] == 0.25 and ("expert", "A") not in m.by_policy


def test_reported_cells_and_conflation_pairs() -> None:
    rows = (cells("A", "pa", {"t0": [1], "t1": [1], "t2": [0], "t3": [0]})
            + cells("B", "pa", {"t0": [1], "t1": [1], "t2": [1], "t3": [0]})
            + cells("B", "pb", {"t0": [1], "t1": [0], "t2": [0], "t3": [0]})
            + cells("A", "expert", {"t0": [1], "t1": [1], "t2": [1], "t3": [1]}))
    # Its training harness when known, else its best; never the expert.
    assert reported_cells(rows) == {"pa": "B", "pb": "B"}
    assert reported_cells(rows, {"pa": "A"}) == {"pa": "A", "pb": "B"}
    assert reported_cells(rows, {"pa": "Z"}) == {"pa": "B", "pb": "B"}  # never ran under Z
    # Two policies under the same harness: no cross-harness pair.
    assert conflation_pairs(rows) == []
    # Under different harnesses: one pair, the higher-scoring side first (pa 0.5 > pb 0.25).
    assert conflation_pairs(rows, {"pa": "A"}) == [(("pa", "A"), ("pb", "B"))]
    # One policy: its own harness against each other harness it ran under.
    only_pa = [r for r in rows if r["policy"] != "pb"]
    assert conflation_pairs(only_pa) == [(("pa", "B"), ("pa", "A"))]
    assert conflation_pairs(only_pa, limit=0) == []


# ---------------------------------------------------------------------------
# gain
# ---------------------------------------------------------------------------


def test_fit_gain_recovers_known_coefficients() -> None:
    rng = np.random.default_rng(0)
    pts = []
    for i in range(12):
        c, m = float(rng.uniform(0.4, 1.0)), float(rng.uniform(0.0, 0.4))
        pts.append(GainPoint(policy=f"p{i}", harness="H", ceiling=c, mismatch=m,
                             gain=0.05 + 0.2 * c + 0.6 * m))
    fit = fit_gain(pts)
    assert fit.model == "ceiling+mismatch" and fit.n == 12 and fit.note == ""
    assert (fit.intercept, fit.coef_ceiling, fit.coef_mismatch) == pytest.approx((0.05, 0.2, 0.6))
    assert fit.r2 == pytest.approx(1.0) and max(map(abs, fit.residuals)) < 1e-12
    assert fit.predict(0.5, 0.1) == pytest.approx(0.05 + 0.1 + 0.06)


def test_fit_gain_degrades_without_crashing() -> None:
    def gp(c: float, m: float, g: float) -> GainPoint:
        return GainPoint(policy="p", harness="H", ceiling=c, mismatch=m, gain=g)

    none = fit_gain([])
    assert none.model == "none" and none.n == 0 and math.isnan(none.intercept)
    one = fit_gain([gp(0.9, 0.2, 0.1)])
    assert one.model == "intercept" and one.intercept == pytest.approx(0.1)
    assert math.isnan(one.coef_mismatch) and "could not fit" in one.note
    two = fit_gain([gp(0.9, 0.2, 0.1), gp(0.8, 0.4, 0.3)])
    assert two.model == "mismatch" and two.coef_mismatch == pytest.approx(1.0)
    assert "exact" in two.note
    same_c = fit_gain([gp(0.9, m, 0.1 + 0.5 * m) for m in (0.0, 0.1, 0.3, 0.6)])
    assert same_c.model == "mismatch" and math.isnan(same_c.coef_ceiling)
    assert same_c.coef_mismatch == pytest.approx(0.5) and same_c.intercept == pytest.approx(0.1)
    nan_pt = fit_gain([gp(0.9, 0.2, float("nan")), gp(0.8, 0.4, 0.3)])
    assert nan_pt.n == 1 and "left out" in nan_pt.note


def test_gain_points_exact() -> None:
    before = world()
    after = (cells("A", "p1+A", {"t0": [1, 1], "t1": [1, 1], "t2": [1, 0], "t3": [0, 0]})
             + cells("B", "p1+B", {"t0": [1, 1], "t1": [1, 1], "t2": [0, 0], "t3": [0, 0]}))
    pts = gain_points(before, after, None, [("p1", "p1+A", "A"), ("p1", "p1+B", "B"),
                                            ("p1", "missing", "A")], train_harness=TRAIN)
    assert len(pts) == 2
    a, b = pts
    assert (a.harness, a.ceiling, a.mismatch, a.success_before) == ("A", 1.0, 0.625, 0.375)
    assert a.success_after == 0.625 and a.gain == 0.25
    assert a.gain_lo is not None and a.gain_hi is not None and a.gain_lo <= 0.25 <= a.gain_hi
    assert (b.ceiling, b.mismatch, b.gain) == (0.5, 0.375, 0.375)
    # one store holding both, and a 2-tuple pair
    both = gain_points(before + after, None, ceilings(before, train_harness=TRAIN),
                       [("p1", "p1+A", "A")])
    assert both[0].gain == 0.25
    same_id = gain_points(before, cells("A", "p1", {t: [1, 1] for t in TASKS}), None,
                          [("p1", "A")])
    assert same_id[0].gain == 1.0 - 0.375
    fit = fit_gain(pts)
    assert fit.n == 2 and fit.model == "mismatch"


# ---------------------------------------------------------------------------
# action form
# ---------------------------------------------------------------------------


def test_action_kl() -> None:
    ref = {"click": math.log(0.5), "type": math.log(0.5)}
    assert action_kl(ref, ref) == 0.0
    pol = {"click": math.log(0.9), "type": math.log(0.1)}
    hand = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    assert action_kl(pol, ref) == pytest.approx(hand, abs=1e-12)
    # unnormalised scores (sequence log-likelihoods) give the same answer
    shifted = {a: v - 7.3 for a, v in pol.items()}
    assert action_kl(shifted, {a: v + 2.0 for a, v in ref.items()}) == pytest.approx(hand)
    # KL(ref || pol): the reference's zero-probability actions do not count ...
    ref0 = {"click": 0.0, "type": -math.inf}
    assert action_kl(pol, ref0) == pytest.approx(-math.log(0.9))
    # ... but an action the policy rules out and the reference allows is infinite
    assert action_kl(ref0, pol) == math.inf
    with pytest.raises(ValueError):
        action_kl({"click": 0.0}, ref)

    states = [(ref, ref), (pol, ref), (pol, ref), (ref, ref)]
    am = mismatch_action(states)
    assert am.n_states == 4 and am.mean_kl == pytest.approx(hand / 2)
    assert am.lo <= am.mean_kl <= am.hi and am.lo >= 0.0
    assert math.isnan(mismatch_action([]).mean_kl)


def test_log_odds_regression_recovers_slope() -> None:
    rng = np.random.default_rng(0)
    harness_lo = rng.normal(size=50)
    q_over_beta = 1.5  # (Q(s,a) - Q(s,a')) / β, the same for every pair
    pairs = [(float(x), float(0.8 * x + q_over_beta)) for x in harness_lo]
    fit = log_odds_regression(pairs)
    assert fit.n == 50 and fit.slope == pytest.approx(0.8) and fit.intercept == pytest.approx(1.5)
    assert fit.r2 == pytest.approx(1.0) and fit.slope_se == pytest.approx(0.0, abs=1e-9)
    # the log-odds identity: a policy trained under h carries h's log-odds whole
    ref = {"a": math.log(0.7), "b": math.log(0.3)}
    q = {"a": 1.0, "b": 0.2}
    beta = 0.5
    trained = {k: ref[k] + q[k] / beta for k in ref}  # unnormalised π* ∝ π_h·exp(Q/β)
    assert log_odds(trained, "a", "b") == pytest.approx(log_odds(ref, "a", "b") + 0.8 / beta)
    assert math.isnan(log_odds_regression([]).slope)
    assert math.isnan(log_odds_regression([(1.0, 2.0)]).slope)
    assert math.isnan(log_odds_regression([(1.0, 2.0), (1.0, 3.0)]).slope)


# ---------------------------------------------------------------------------
# scale
# ---------------------------------------------------------------------------


def big_grid(n_tasks: int = 100, n_seeds: int = 10) -> tuple[list[dict[str, Any]], dict]:
    """24,000 rows: 4 harnesses × 6 policies × 100 tasks × 10 seeds."""
    rng = np.random.default_rng(0)
    harnesses = ["aider", "openhands", "qwen", "swe"]
    policies = ["expert"] + [f"ckpt-{h}" for h in harnesses] + ["base"]
    train = {f"ckpt-{h}": h for h in harnesses}
    ok = rng.random((len(harnesses), len(policies), n_tasks, n_seeds)) < 0.3
    rows = [
        row(f"t{t}", h, p, s, bool(ok[i, j, t, s]))
        for i, h in enumerate(harnesses) for j, p in enumerate(policies)
        for t in range(n_tasks) for s in range(n_seeds)
    ]
    return rows, train


def test_24000_rows_analysed() -> None:
    rows, train = big_grid()
    assert len(rows) == 24_000
    est = ceilings(rows, train_harness=train)
    ms = mismatch_return(rows, est)
    tm = transfer_matrix(rows, train)
    c = conflation(rows, ("ckpt-aider", "aider"), ("ckpt-swe", "swe"), est)
    a, b = paired_cells(rows, ("ckpt-aider", "aider"), ("ckpt-aider", "swe"))
    pb = paired_bootstrap(a, b)
    assert len(ms) == 24 and len(tm.cells) == 16 and pb.n == 1000
    assert c.gap == pytest.approx(c.ceiling_part - c.mismatch_part, abs=1e-12)
    assert len(best_ceilings(est)) == 4 and TaskTable(rows).n_episodes == 24_000
    # speed is bench/report.py's job, not a test's
