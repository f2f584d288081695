"""RLConfig: sectioned TOML, dotted overrides, algorithm defaults, and clear errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tackroom.core.errors import ConfigError
from tackroom.train.config import RLConfig, parse_override

TOML = """
[algorithm]                     # alias of [algo]
algorithm = "gspo_token"
beta = 0.01

[grouping]
group = "cross"
normalise = "per_harness"
group_size = 4

[critic]
kind = "harness"
lam = 0.9

[lora]
rank = 16
target_modules = ["q_proj", "v_proj"]

[data]
harnesses = ["aider", "swe-agent"]

[run]
seed = 7
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "train.toml"
    p.write_text(text)
    return p


def test_defaults_and_algorithm_defaults() -> None:
    cfg = RLConfig()
    r = cfg.resolved()
    assert (r.algorithm, r.epsilon_low, r.epsilon_high, r.loss_agg, r.scale_std) == \
        ("grpo", 0.2, 0.2, "seq_mean_token_mean", True)
    dr = RLConfig(algorithm="dr_grpo").resolved()
    assert (dr.loss_agg, dr.scale_std) == ("constant", False)
    gspo = RLConfig(algorithm="gspo").resolved()
    assert (gspo.epsilon_low, gspo.epsilon_high) == (3e-4, 4e-4)
    # epsilon sets both ends unless one is given; explicit choices beat algorithm defaults
    r = RLConfig(algorithm="gspo", epsilon=0.1, epsilon_high=0.3, loss_agg="token_mean",
                 scale_std=False).resolved()
    assert (r.epsilon_low, r.epsilon_high, r.loss_agg, r.scale_std) == \
        (0.1, 0.3, "token_mean", False)
    assert cfg.loss_agg is None  # resolved() copies; the original keeps "unset"


def test_from_toml_sections_and_overrides(tmp_path: Path) -> None:
    cfg = RLConfig.from_toml(write(tmp_path, TOML), [
        "algo.epsilon_high=5e-4",              # dotted, TOML value
        "grouping.group=task + '|' + str(seed // 2)",  # a bare expression
        "lora_rank=8",                          # a flat field name
        "eval.harnesses=openhands,qwen-code",   # comma list
        "algo.loss_agg=token_mean",
        "algo.loss_agg=none",                   # later overrides win; none unsets
    ])
    assert (cfg.algorithm, cfg.beta, cfg.epsilon_high, cfg.loss_agg) == ("gspo_token", 0.01, 5e-4, None)
    assert cfg.group == "task + '|' + str(seed // 2)"
    assert (cfg.normalise, cfg.group_size, cfg.critic, cfg.lam) == ("per_harness", 4, "harness", 0.9)
    assert (cfg.lora_rank, cfg.lora_target_modules) == (8, ["q_proj", "v_proj"])
    assert cfg.harnesses == ["aider", "swe-agent"]
    assert cfg.eval_harnesses == ["openhands", "qwen-code"] and cfg.seed == 7
    # Integers are accepted for floats; the type is normalised.
    assert RLConfig.from_toml(None, ["optim.lr=1"]).lr == 1.0


def test_round_trip_through_toml(tmp_path: Path) -> None:
    cfg = RLConfig.from_toml(write(tmp_path, TOML), ["grouping.group=task + '|' + harness"])
    again = RLConfig.from_toml(write(tmp_path, cfg.to_toml()))
    assert again == cfg
    resolved = RLConfig.from_toml(write(tmp_path, cfg.to_toml(resolved=True)))
    assert resolved == cfg.resolved()
    assert cfg.to_dict()["critic"]["kind"] == "harness"


def test_an_override_can_repair_the_file(tmp_path: Path) -> None:
    # gspo + a critic is refused, but only the final combination is validated.
    gspo_with_critic = write(tmp_path, TOML.replace('"gspo_token"', '"gspo"'))
    with pytest.raises(ConfigError, match="sequence-level GSPO") as e:
        RLConfig.from_toml(gspo_with_critic)
    assert "critic.kind" in e.value.fix
    cfg = RLConfig.from_toml(gspo_with_critic, ["algo.algorithm=gspo_token"])
    assert cfg.algorithm == "gspo_token"


@pytest.mark.parametrize("override, what, fix", [
    ("algo.algorithm=ppo", "algo.algorithm = 'ppo' is not allowed", "dr_grpo, grpo, gspo"),
    ("algo.algorithm=gspoo", "did you mean 'gspo'?", "use one of"),
    ("algo.epsilon=1.5", "algo.epsilon = 1.5 is out of range", "in [0, 1), e.g. 0.2"),
    ("algo.epsilon=abc", "algo.epsilon = 'abc' is not a number", "a number"),
    ("algo.epsilom=0.3", "unknown setting 'algo.epsilom' (did you mean 'algo.epsilon'?)",
     "keys in this section"),
    ("grouping.normalise=zscore", "grouping.normalise = 'zscore' is not allowed",
     "none, per_harness, pooled"),
    ("grouping.scale_std=yes", "is not a boolean", "true or false"),
    ("grouping.group=__import__('os')", "not allowed", "'within', 'cross'"),
    ("critic.kind=ppo", "critic.kind = 'ppo' is not allowed", "none, shared, harness"),
    ("critic.lam=2", "critic.lam = 2.0 is out of range", "from 0 to 1, e.g. 0.95"),
    ("lora.rank=0", "lora.rank = 0 is out of range", "from 1 to 4,096, e.g. 32"),
    ("grouping.group_size=100000", "is out of range", "from 1 to 4,096, e.g. 8"),
    ("optim.steps=1e30", "optim.steps = 1000000000000000019884624838656 is out of range",
     "from 1 to 10,000,000, e.g. 100"),
    ("rollout.concurrency=99999999", "is out of range", "from 1 to 4,096, e.g. 8"),
    ("rollout.temperature=50", "is out of range", "in (0, 2], e.g. 1.0"),
    ("run.seed=-1", "run.seed = -1 is out of range", "from 0 to 4,294,967,295, e.g. 0"),
    ("lora.rank=2.5", "is not an integer", "an integer"),
    ("optim.lr=0", "optim.lr = 0.0 is out of range", "in (0, 1], e.g. 1e-5"),
    ("optim.lr=inf", "optim.lr = inf is not a finite number", "a finite number"),
    ("optim.steps=none", "optim.steps = 'none' is not an integer", "optim.steps"),
    ("algorithm.nope=1", "unknown setting", "algo.algorithm"),
    ("nosection.x=1", "unknown section [nosection]", "sections are"),
    ("betta=0.1", "unknown setting 'betta' (did you mean 'beta'?)", "section.key"),
    ("beta", "an override is key=value", "algo.epsilon=0.3"),
])
def test_override_errors_name_key_source_and_fix(override: str, what: str, fix: str) -> None:
    with pytest.raises(ConfigError) as e:
        RLConfig.from_toml(None, [override])
    err = e.value
    assert what in err.what and fix in err.fix
    assert override in err.where  # the error says which override was bad


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        RLConfig.from_toml(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        RLConfig.from_toml(write(tmp_path, "[algo\n"))
    p = write(tmp_path, '[algo]\nbeta = -1\n')
    with pytest.raises(ConfigError) as e:
        RLConfig.from_toml(p)
    assert e.value.where == str(p) and "algo.beta = -1.0 is out of range" in e.value.what
    with pytest.raises(ConfigError, match=r"unknown section \[algoo\] \(did you mean \[algo\]"):
        RLConfig.from_toml(write(tmp_path, "[algoo]\nbeta = 1\n"))


def test_direct_construction_is_validated() -> None:
    with pytest.raises(ConfigError) as e:
        RLConfig(algorithm="ppo")
    assert e.value.where == "RLConfig"
    with pytest.raises(ConfigError, match="is not a number"):
        RLConfig(beta="0.1")  # type: ignore[arg-type]
    assert RLConfig(steps=10.0).steps == 10  # type: ignore[arg-type]


def test_parse_override_values() -> None:
    assert parse_override("algo.algorithm=gspo") == ("algorithm", "gspo")
    assert parse_override("algo.algorithm=\"gspo\"") == ("algorithm", "gspo")
    assert parse_override("critic.value_clip=none") == ("value_clip", None)
    assert parse_override("data.tasks=[\"a*\", \"b\"]") == ("tasks", ["a*", "b"])
    assert parse_override("critic.critic=shared") == ("critic", "shared")  # field under its section


def test_hand_offs_to_the_engine() -> None:
    pytest.importorskip("tackroom.train.engine")
    cfg = RLConfig(lora_rank=8, lora_target_modules=["q_proj"], lr=3e-5, grad_accum=4,
                   adam_beta2=0.95)
    lora, optim = cfg.lora_settings(), cfg.optim_settings()
    assert (lora.rank, lora.alpha, lora.target_modules) == (8, 64, ("q_proj",))
    assert (optim.lr, optim.grad_accum, optim.betas) == (3e-5, 4, (0.9, 0.95))
    assert RLConfig(lora=False).lora_settings() is None


def test_config_and_advantages_import_without_torch() -> None:
    code = ("import sys, tackroom.train, tackroom.train.config, tackroom.train.advantages; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "False"


def test_the_docs_key_table_is_the_settings() -> None:
    """docs/training.md lists exactly RLConfig's keys, with their defaults (generated)."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text()
    start, end = "<!-- settings:RLConfig -->\n", "<!-- /settings:RLConfig -->"
    assert start in doc and end in doc
    table = doc.split(start, 1)[1].split(end, 1)[0]
    assert table == RLConfig.key_table(), (
        "docs/training.md's key table is stale: paste RLConfig.key_table() between the markers")
    rows = [r for r in table.splitlines()[2:]]
    keys = [r.split("`")[1] for r in rows]
    assert keys == [RLConfig.key_of(n) for n in RLConfig.specs()]
    assert "| `algo.beta` | 0.0 |" in table and "| `lora.rank` (`lora_rank`) | 32 |" in table


def test_a_registered_algorithm_is_a_choice_with_its_own_defaults(monkeypatch) -> None:
    from tackroom.core import registry

    # A scratch copy of the algorithm table: other tests see only the installed algorithms.
    registry.names("algorithm")
    monkeypatch.setitem(registry._table, "algorithm", dict(registry._table["algorithm"]))

    @registry.register("algorithm", "zz_wide_clip", summary="a test-only loss",
              defaults={"epsilon_low": 0.3, "epsilon_high": 0.5, "loss_agg": "token_mean",
                        "scale_std": False}, per_token_advantages=False)
    def wide(logp, old_logp, advantages, mask, **settings):  # pragma: no cover - not run
        raise AssertionError("not called by config validation")

    r = RLConfig.from_toml(None, ["algo.algorithm=zz_wide_clip"]).resolved()
    assert (r.epsilon_low, r.epsilon_high, r.loss_agg, r.scale_std) == (0.3, 0.5, "token_mean",
                                                                        False)
    # Its meta says it takes one advantage per completion: a critic is refused, by name.
    with pytest.raises(ConfigError) as e:
        RLConfig.from_toml(None, ["algo.algorithm=zz_wide_clip", "critic.kind=shared"])
    assert "sequence-level ZZ_WIDE_CLIP" in e.value.what and "gspo_token" in e.value.fix
    with pytest.raises(ConfigError, match="zz_wide_clip"):
        RLConfig.from_toml(None, ["algo.algorithm=nope"])  # the choices list it too
    assert "zz_wide_clip" in registry.names("algorithm")
