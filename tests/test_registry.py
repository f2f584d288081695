"""The one registry: built-ins and an installed plug-in alike, through the CLI.

A plug-in here is a real distribution on ``PYTHONPATH``: a package that registers a
suite, a policy backend and an algorithm, and a ``plug-0.1.dist-info`` whose
``entry_points.txt`` names it in the ``tackroom`` group, as ``pip install`` would leave it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import one_line_error, run_cli

from tackroom.core.errors import ConfigError, PolicyError
from tackroom.core.registry import KINDS, entries, get, names, register
from tackroom.policies import make_policy
from tackroom.records import RecordStore
from tackroom.suites import get_suite
from tackroom.suites.toy import ToySuite
from tackroom.testing.harnesses import command_harness

PLUG = '''
"""A plug-in: one toy task as its own suite, and the expert as its own policy backend."""

import dataclasses

from tackroom.core.registry import register
from tackroom.core.task import SimplePool, Task
from tackroom.suites.toy import ToySuite
from tackroom.suites.toy.env import ToyEnv
from tackroom.suites.toy.tasks import SPECS


class PlugSuite(ToySuite):
    """The toy suite's click-button task, renamed."""

    name = "plugsuite"
    default_harnesses = ("som-tools",)

    def __init__(self) -> None:
        super().__init__()
        self.spec = SPECS["click-button"]
        self.one = dataclasses.replace(self.spec.task, suite=self.name)

    def tasks(self) -> list[Task]:
        return [self.one]

    def task(self, task_id: str) -> Task:
        return self.one

    def make_env(self, task: Task) -> ToyEnv:
        return ToyEnv(self.one, self.spec.build, self.max_steps)

    def pool(self, size=None) -> SimplePool:
        return SimplePool(self.make_env, size or 1)


@register("suite", "plugsuite")
def make_suite() -> PlugSuite:
    """One toy task from a plug-in package."""
    return PlugSuite()


@register("policy", "plugpolicy", form="plugpolicy", takes_argument=False)
def build_plug(spec, argument, options, db):
    """The scripted expert, built by a plug-in backend."""
    from tackroom.policies.expert import ExpertPolicy

    policy = ExpertPolicy()
    policy.id = "plugpolicy"
    return policy
'''

PLUG_LOSSES = '''
"""A plug-in algorithm: GRPO's loss, under another name (torch only when it runs)."""

from tackroom.core.registry import register


@register("algorithm", "plugalgo", summary="a plug-in loss (GRPO's, renamed)",
          defaults={"epsilon_low": 0.2, "epsilon_high": 0.2, "loss_agg": "token_mean",
                    "scale_std": True},
          per_token_advantages=True)
def plug_loss(logp, old_logp, advantages, mask, **settings):
    from tackroom.train.losses import PolicyLoss, grpo_loss

    out = grpo_loss(logp, old_logp, advantages, mask, **settings)
    # A metric of its own: the recorded train steps show that this function computed them.
    return PolicyLoss(out.loss, {**out.metrics, "plugalgo_calls": 1.0})
'''

ENTRY_POINTS = """\
[tackroom]
algorithm.plug = plug.losses
policy.plug = plug
suite.plug = plug
"""


@pytest.fixture
def plugin(tmp_path: Path) -> dict[str, str]:
    """An installed plug-in distribution in ``tmp_path``; the environment that sees it."""
    pkg = tmp_path / "site" / "plug"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(PLUG))
    (pkg / "losses.py").write_text(textwrap.dedent(PLUG_LOSSES))
    info = tmp_path / "site" / "plug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    path = os.pathsep.join(p for p in (str(tmp_path / "site"), os.environ.get("PYTHONPATH"))
                           if p)
    return {"PYTHONPATH": path}


def test_list_shows_every_kind_with_its_built_ins_and_an_installed_plugins_entries(tmp_path,
                                                                                   plugin):
    # One `tackroom list` (it imports every kind, torch included) for both: the built-ins and,
    # beside them, the plug-in's suite, policy and algorithm.
    p = run_cli("list", cwd=tmp_path, env_extra=plugin)
    assert p.returncode == 0, p.stderr
    kinds = {line.split("│")[1].strip() for line in p.stdout.splitlines()
             if line.startswith("│")}
    assert kinds == set(KINDS)
    for name in ("toy", "element_list", "tool_calls", "expert", "grpo", "click",
                 "shell-tool"):
        assert f" {name} " in p.stdout
    listed = {(r.split("│")[1].strip(), r.split("│")[2].strip())
              for r in p.stdout.splitlines() if r.startswith("│")}
    assert {("suite", "plugsuite"), ("policy", "plugpolicy"),
            ("algorithm", "plugalgo")} <= listed
    assert "a plug-in loss (GRPO's, renamed)" in p.stdout
    p = run_cli("list", "suite", cwd=tmp_path)
    rows = [line for line in p.stdout.splitlines() if line.startswith("│")]
    assert {r.split("│")[2].strip() for r in rows} == set(names("suite"))


def test_list_unknown_kind_is_one_line_with_close_matches(tmp_path):
    line = one_line_error(run_cli("list", "sutie", cwd=tmp_path))
    assert "unknown extension kind 'sutie'" in line and "did you mean suite" in line


def test_plugin_suite_and_policy_from_an_installed_entry_point_run_an_eval(tmp_path, plugin):
    """(That `tackroom list` shows the plug-in's entries is checked with the built-ins above.)"""
    db = str(tmp_path / "r.duckdb")
    p = run_cli("eval", "--suite", "plugsuite", "--policy", "plugpolicy", "--seeds", "0-2",
                "--db", db, cwd=tmp_path, env_extra=plugin)
    assert p.returncode == 0, p.stdout + p.stderr
    with RecordStore(db, read_only=True) as store:
        episodes = store.episodes()
    assert len(episodes) == 3
    assert {(e["suite"], e["task"], e["policy"], e["harness"]) for e in episodes} == {
        ("plugsuite", "plugsuite/click-button", "plugpolicy", "som-tools")}
    assert all(e["outcome"] == "success" for e in episodes)

    # Without the plug-in on the path, the names are unknown: one line, not a traceback.
    line = one_line_error(run_cli("eval", "--suite", "plugsuite", "--policy", "expert",
                                  "--db", db, cwd=tmp_path))
    assert "unknown suite 'plugsuite'" in line and "toy" in line


def test_plugin_algorithm_is_one_that_training_settings_accept(tmp_path, plugin):
    """The training config validates ``algo.algorithm`` against the registry, so the
    plug-in's algorithm is a valid choice there and its defaults resolve."""
    code = ("from tackroom.train.config import RLConfig\n"
            "c = RLConfig.from_toml(None, ['algo.algorithm=plugalgo', 'model.path=x'])\n"
            "print(c.algorithm, c.resolved().loss_agg)\n")
    pytest.importorskip("torch")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300, env={**os.environ, **plugin})
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["plugalgo", "token_mean"]


def test_plugin_algorithm_trains_the_plugin_suite_through_the_cli(tmp_path, plugin,
                                                                   tiny_chat_dir):
    """`tackroom train` with ``algo.algorithm=plugalgo``: one optimiser step on the plug-in's
    suite, and the step's recorded metrics carry the plug-in loss's own metric — the
    registry's function computed the loss, not a built-in under the plug-in's name."""
    pytest.importorskip("torch")
    (tmp_path / "cmd.toml").write_text(command_harness("cmd"))
    out, db = tmp_path / "out", str(tmp_path / "r.duckdb")
    # The least that trains: the tiny model, one task, G = 2 short replies, one step.
    (tmp_path / "train.toml").write_text(textwrap.dedent(f"""\
        [grouping]
        group_size = 2
        [lora]
        rank = 2
        alpha = 4
        [optim]
        steps = 1
        micro_batch_size = 2
        [model]
        path = "{tiny_chat_dir}"
        device = "cpu"
        [data]
        suite = "plugsuite"
        harnesses = ["{tmp_path / 'cmd.toml'}"]
        tasks_per_step = 1
        [rollout]
        max_tokens = 4
        concurrency = 2
        [run]
        out_dir = "{out}"
        """))
    p = run_cli("train", "-c", "train.toml", "algo.algorithm=plugalgo", "--db", db,
                "--threads", "1", cwd=tmp_path, env_extra={**plugin, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert "trained: 1 steps (plugalgo, LoRA)" in p.stdout
    run_id = p.stdout.split("trained: 1 steps (plugalgo, LoRA); run ", 1)[1].split()[0]
    with RecordStore(db, read_only=True) as store:
        steps = store.train_steps(run_id)
        config = store.run(run_id)["config"]
        episodes = store.episodes(run_id)
    assert config["rl"]["algo"]["algorithm"] == "plugalgo"
    assert [(s["step"], s["plugalgo_calls"]) for s in steps] == [(1, 1.0)]
    assert {(e["suite"], e["task"]) for e in episodes} == {
        ("plugsuite", "plugsuite/click-button")}
    assert (out / "final" / "adapter_model.safetensors").is_file()


def test_unknown_names_say_the_close_ones():
    with pytest.raises(ConfigError, match=r"unknown suite 'toyy'.*did you mean toy\?"):
        get_suite("toyy")
    with pytest.raises(ConfigError, match=r"unknown renderer 'outlin'.*did you mean outline"):
        get("renderer", "outlin", where="[observation].renderer")
    with pytest.raises(PolicyError, match=r"unknown policy 'exprt'.*did you mean expert\?"):
        make_policy("exprt")


def test_a_name_registered_twice_is_an_error():
    def make_suite() -> ToySuite:
        return ToySuite()

    with pytest.raises(ConfigError, match=r"suite 'toy' is registered twice.*tackroom.suites.toy"):
        register("suite", "toy")(make_suite)
    assert get("suite", "toy") is not make_suite


def test_a_suite_may_be_any_importable_module_factory(tmp_path, monkeypatch):
    (tmp_path / "my_suites.py").write_text(textwrap.dedent('''
        from tackroom.suites.toy import ToySuite

        def small(max_steps: int = 3) -> ToySuite:
            return ToySuite(max_steps=max_steps)
        '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    suite = get_suite("my_suites:small", {"max_steps": 7})
    assert isinstance(suite, ToySuite) and suite.max_steps == 7
    with pytest.raises(ConfigError, match="takes no option 'steps'"):
        get_suite("my_suites:small", {"steps": 7})
    with pytest.raises(ConfigError, match="cannot import suite 'my_suites:large'"):
        get_suite("my_suites:large")

    db = str(tmp_path / "r.duckdb")
    p = run_cli("eval", "--suite", "my_suites:small", "--policy", "expert", "--tasks",
                "click-button", "--harness", "som-tools", "--seeds", "0", "--db", db,
                cwd=tmp_path,
                env_extra={"PYTHONPATH": os.pathsep.join(
                    p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)})
    assert p.returncode == 0, p.stdout + p.stderr
    with RecordStore(db, read_only=True) as store:
        assert [e["outcome"] for e in store.episodes()] == ["success"]


def test_action_types_are_registered_under_their_kind():
    actions = entries("action")
    assert {"click", "type", "submit", "robot_command", "run_controller"} <= {
        e.name for e in actions}
    assert all(e.obj.kind == e.name for e in actions)
    assert {"shell-tool", "bash-block", "search-replace"} <= set(names("agent_expert"))
