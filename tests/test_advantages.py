"""Grouping and normalisation by hand (two tasks × two harnesses), custom keys, and vs TRL."""

from __future__ import annotations

import math

import pytest

from tackroom.core.episode import Episode, Outcome, Turn
from tackroom.core.errors import ConfigError
from tackroom.train.advantages import (
    Sample,
    advantages_from_config,
    compile_group_key,
    compute_advantages,
    normalise_rewards,
)
from tackroom.train.config import RLConfig

EPS = 1e-4
S2 = math.sqrt(0.5)  # unbiased std of [1, 0]

# Two tasks, two harnesses, two rollouts per (task, harness):
#   task a: h1 → 1, 0    h2 → 1, 1   (h2's group has no variance)
#   task b: h1 → 0, 0    h2 → 1, 0   (h1's group has no variance)
ROWS = [("a", "h1", 1.0), ("a", "h1", 0.0), ("a", "h2", 1.0), ("a", "h2", 1.0),
        ("b", "h1", 0.0), ("b", "h1", 0.0), ("b", "h2", 1.0), ("b", "h2", 0.0)]
SAMPLES = [Sample(task, h, r, {"seed": i % 4}) for i, (task, h, r) in enumerate(ROWS)]


def approx(xs):
    return pytest.approx(xs, abs=1e-12)


def test_within_grouping_std_on() -> None:
    out = compute_advantages(SAMPLES, group="within")
    d = 0.5 / (S2 + EPS)
    assert out.values == approx([d, -d, 0, 0, 0, 0, d, -d])
    assert out.groups == [("a", "h1"), ("a", "h2"), ("b", "h1"), ("b", "h2")]
    assert out.group_index == [0, 0, 1, 1, 2, 2, 3, 3]
    assert out.zero_std == [False, True, True, False]
    assert out.metrics["frac_zero_std_groups"] == 0.5
    assert out.metrics["frac_zero_std_samples"] == 0.5
    assert out.reward_mean_by_harness == {"h1": 0.25, "h2": 0.75}
    assert out.metrics["reward_mean/h1"] == 0.25 and out.metrics["reward_mean/h2"] == 0.75
    assert out.metrics["n_groups"] == 4 and out.metrics["group_size_max"] == 2


def test_cross_grouping_pools_harnesses() -> None:
    # task a: [1, 0, 1, 1], mean 0.75, unbiased std 0.5; task b: [0, 0, 1, 0], mean 0.25, std 0.5
    out = compute_advantages(SAMPLES, group="cross")
    s = 0.5 + EPS
    assert out.values == approx([0.25 / s, -0.75 / s, 0.25 / s, 0.25 / s,
                                 -0.25 / s, -0.25 / s, 0.75 / s, -0.25 / s])
    assert out.groups == ["a", "b"]
    assert out.metrics["frac_zero_std_groups"] == 0.0  # pooling gave every group variance


def test_std_scaling_off() -> None:
    within = compute_advantages(SAMPLES, group="within", scale_std=False)
    assert within.values == approx([0.5, -0.5, 0, 0, 0, 0, 0.5, -0.5])
    cross = compute_advantages(SAMPLES, group="cross", scale_std=False)
    assert cross.values == approx([0.25, -0.75, 0.25, 0.25, -0.25, -0.25, 0.75, -0.25])
    assert within.metrics["frac_zero_std_groups"] == 0.5  # counted whether or not we scale


def test_per_harness_normalisation() -> None:
    # h1 rewards [1, 0, 0, 0]: mean 0.25, std 0.5; h2 rewards [1, 1, 1, 0]: mean 0.75, std 0.5
    s = 0.5 + EPS
    x = normalise_rewards([r for _, _, r in ROWS], [h for _, h, _ in ROWS], "per_harness", EPS)
    hi1, lo1, hi2, lo2 = 0.75 / s, -0.25 / s, 0.25 / s, -0.75 / s
    assert x.tolist() == approx([hi1, lo1, hi2, hi2, lo1, lo1, hi2, lo2])

    # Cross grouping compares the normalised values: task a = [hi1, lo1, hi2, hi2].
    out = compute_advantages(SAMPLES, group="cross", normalise="per_harness", scale_std=False)
    ma = (hi1 + lo1 + 2 * hi2) / 4
    mb = (2 * lo1 + hi2 + lo2) / 4
    assert out.values == approx([hi1 - ma, lo1 - ma, hi2 - ma, hi2 - ma,
                                 lo1 - mb, lo1 - mb, hi2 - mb, lo2 - mb])
    assert out.normalised == approx(x.tolist())
    assert out.reward_mean_by_harness == {"h1": 0.25, "h2": 0.75}  # raw rewards

    # Within a (task, harness) group the harness shift cancels; only its scale remains.
    within = compute_advantages(SAMPLES, group="within", normalise="per_harness",
                                scale_std=False)
    assert within.values == approx([0.5 / s, -0.5 / s, 0, 0, 0, 0, 0.5 / s, -0.5 / s])


def test_pooled_and_no_normalisation() -> None:
    r = [x for _, _, x in ROWS]
    s = math.sqrt(8 * 0.25 / 7)  # unbiased std of four 1s and four 0s
    pooled = normalise_rewards(r, [h for _, h, _ in ROWS], "pooled", EPS)
    assert pooled.tolist() == approx([(v - 0.5) / (s + EPS) for v in r])
    assert normalise_rewards(r, [h for _, h, _ in ROWS], "none").tolist() == r
    # Pooled then group-centred, std off: (r − mean_g) / (std_all + ε) (TRL scale_rewards="batch").
    out = compute_advantages(SAMPLES, group="within", normalise="pooled", scale_std=False)
    assert out.values == approx([v / (s + EPS) for v in [0.5, -0.5, 0, 0, 0, 0, 0.5, -0.5]])
    with pytest.raises(ConfigError, match="unknown reward normalisation"):
        normalise_rewards(r, r, "zscore")  # type: ignore[arg-type]


def test_singleton_groups_and_empty_input() -> None:
    out = compute_advantages([Sample("a", "h", 1.0), Sample("b", "h", 0.0)])
    assert out.values == [0.0, 0.0] and out.zero_std == [True, True]
    empty = compute_advantages([])
    assert empty.values == [] and empty.metrics["n_groups"] == 0


def test_custom_key_expression_and_callable() -> None:
    # seeds 0..3 per task: seed // 2 splits each task's four rollouts into two pairs
    out = compute_advantages(SAMPLES, group="task + '|' + str(seed // 2)", scale_std=False)
    assert out.groups == ["a|0", "a|1", "b|0", "b|1"]
    assert out.values == approx([0.5, -0.5, 0, 0, 0, 0, 0.5, -0.5])
    fam = compute_advantages([Sample("web/click-1", "h", 1.0), Sample("web/click-2", "h", 0.0),
                              Sample("code/fix-1", "h", 1.0)],
                             group="task.split('/')[0]", scale_std=False)
    assert fam.groups == ["web", "code"] and fam.values == approx([0.5, -0.5, 0.0])
    by_harness = compute_advantages(SAMPLES, group=lambda s: s["harness"], scale_std=False)
    assert by_harness.groups == ["h1", "h2"]
    cond = compile_group_key("(task, 'even') if seed % 2 == 0 else (task, 'odd')")
    assert cond({"task": "t", "seed": 3}) == ("t", "odd")
    assert compile_group_key("max(seed, 2) > 2 and not harness.startswith('x')")(
        {"seed": 3, "harness": "h"}) is True


@pytest.mark.parametrize("expr, why", [
    ("__import__('os').system('true')", "not allowed"),
    ("task.__class__", "not allowed"),
    ("harness.upper", "without calling it"),
    ("open('/etc/passwd')", "not allowed"),
    ("(lambda: 1)()", "not allowed"),
    ("[task for task in harness]", "not allowed"),
    ("task +", "not an expression"),
    ("x" * 600, "characters long"),
])
def test_unsafe_or_bad_expressions_are_refused(expr: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why) as e:
        compile_group_key(expr)
    assert "grouping.group" in e.value.line()


def test_expression_errors_name_the_problem() -> None:
    with pytest.raises(ConfigError, match="'suite', which the sample lacks") as e:
        compute_advantages(SAMPLES, group="suite")
    assert "harness, reward, seed, task" in e.value.fix
    with pytest.raises(ConfigError, match="longer than"):
        compile_group_key("task * 100000")({"task": "ab"})
    with pytest.raises(ConfigError, match="ZeroDivisionError"):
        compile_group_key("seed // 0")({"seed": 1})
    with pytest.raises(ConfigError, match="on a int"):
        compile_group_key("seed.lower()")({"seed": 1})


def test_samples_from_mappings_and_episodes() -> None:
    ep = Episode(episode_id="e1", run_id="r", task="toy/add", suite="toy", harness="h1",
                 harness_hash="abc", policy="p", seed=3, outcome=Outcome.SUCCESS, reward=1.0,
                 turns=[Turn(index=0)], meta={"family": "arith"})
    s = Sample.coerce(ep)
    assert (s.task, s.harness, s.reward, s.fields["seed"], s.fields["outcome"]) == \
        ("toy/add", "h1", 1.0, 3, "success")
    out = compute_advantages([ep, {"task": "toy/add", "harness": "h1", "reward": 0.0,
                                   "meta": {"family": "arith"}}],
                             group="meta['family']", scale_std=False)
    assert out.groups == ["arith"] and out.values == approx([0.5, -0.5])
    with pytest.raises(ValueError, match="missing"):
        Sample.coerce({"task": "t"})
    with pytest.raises(ValueError, match="infra_error"):
        compute_advantages([Sample("t", "h", float("nan"))])


def test_advantages_from_config_applies_algorithm_defaults() -> None:
    grpo = advantages_from_config(SAMPLES, RLConfig(algorithm="grpo"))
    dr = advantages_from_config(SAMPLES, RLConfig(algorithm="dr_grpo"))  # no std scaling
    assert grpo.values == approx(compute_advantages(SAMPLES).values)
    assert dr.values == approx(compute_advantages(SAMPLES, scale_std=False).values)
    cross = advantages_from_config(SAMPLES, RLConfig(group="cross", normalise="per_harness",
                                                     scale_std=False))
    assert cross.values == approx(compute_advantages(
        SAMPLES, group="cross", normalise="per_harness", scale_std=False).values)


# --------------------------------------------------------------------------- against TRL
#
# TRL's GRPOTrainer._generate_and_score_completions (trl 1.16.0) computes group
# advantages inline: rewards.view(-1, G), mean and unbiased std per group (or
# the batch std for scale_rewards="batch"), (r − mean) / (std + 1e-4). It runs
# here on a real trainer (tests/trl_reference.py) with fixed rewards. TRL's
# groups are its G consecutive rows of one prompt; laid out as (task, harness)
# they are tackroom's "within" groups, laid out as a task whose G rollouts span
# harnesses they are its "cross" groups.

G = 4
TASKS = ["t1 t2", "t3 t4 t5", "t6"]
TRL_REWARDS = [1.0, 0.0, 0.5, 1.0,   0.3, 0.3, 0.3, 0.3,   0.0, 2.0, 0.0, 1.0]


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("trl")
    pytest.importorskip("datasets")
    from trl_reference import make_trainer

    return make_trainer(str(tmp_path_factory.mktemp("trl")), num_generations=G,
                        max_completion_length=4)


@pytest.mark.parametrize("scale_rewards, normalise, scale_std", [
    ("group", "none", True),      # GRPO
    ("none", "none", False),      # Dr.GRPO
    ("batch", "pooled", False),   # TRL's batch-std variant
])
@pytest.mark.parametrize("layout", ["within", "cross"])
def test_advantages_match_trl(trainer, scale_rewards: str, normalise: str, scale_std: bool,
                              layout: str) -> None:
    from trl_reference import last_metric, trl_batch

    trainer.scale_rewards = scale_rewards
    prompts = [p for p in TASKS for _ in range(G)]
    out = trl_batch(trainer, prompts, TRL_REWARDS, [[7, 8]] * len(prompts))
    trl_adv = out["advantages"].tolist()

    if layout == "within":   # each task under one harness: TRL's group = (task, harness)
        samples = [Sample(p, f"h{i // G % 2}", r) for i, (p, r) in
                   enumerate(zip(prompts, TRL_REWARDS, strict=True))]
    else:                    # each task's G rollouts alternate two harnesses, pooled by task
        samples = [Sample(p, f"h{i % 2}", r) for i, (p, r) in
                   enumerate(zip(prompts, TRL_REWARDS, strict=True))]
    ours = compute_advantages(samples, group=layout, normalise=normalise, scale_std=scale_std)

    assert ours.values == pytest.approx(trl_adv, abs=1e-5)
    assert any(abs(a) > 0.1 for a in trl_adv)
    if scale_rewards != "batch":  # TRL counts zero-std rows against the group std only then
        assert ours.metrics["frac_zero_std_samples"] == pytest.approx(
            last_metric(trainer, "frac_reward_zero_std"))
        assert ours.metrics["frac_zero_std_groups"] == pytest.approx(1 / 3)
