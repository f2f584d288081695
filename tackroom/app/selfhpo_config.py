"""``selfhpo.toml``: what ``tackroom self-hpo`` alternates, on which splits, with which budget.

::

    [selfhpo]
    suite = "toy"
    harness = "list-cmd"           # H_0: a harness name or .toml path
    model = "models/tiny-sft"      # π_0: a local checkpoint directory (hf)
    # adapter = "runs/lora/final"  # π_0's LoRA adapter on that model, if any
    tasks = ["focus-text", "click-dialog"]
    held_out = ["html-cmd"]        # harnesses no arm ever sees until the sealed evaluation
    arms = ["alternate", "harness", "policy"]   # Self-HPO and the two halves alone
    rounds = 2                     # R rounds of each arm
    candidates = 3                 # K harness edits proposed per round (harness phases)
    steps_per_round = 4            # optimiser steps per round (policy phases)
    proposer = "self"              # self: π_r proposes | scripted | seeds | a policy spec
    acceptance = "greedy"          # greedy | threshold (as tackroom optimize)
    threshold = 0.0
    seed = 0

    [splits]
    train = "0-9"                  # failures mined here
    dev = "100-119"                # edits accepted here, and the lineage's success per round
    test = "1000000-1000049"       # sealed: only the final evaluation runs it

    [train]                        # each round's RL: train.toml's sections, less what the
    [train.algo]                   # loop sets (model, harnesses, suite, tasks, steps, out_dir,
    algorithm = "dr_grpo"          # seed): see docs/training.md
    [train.grouping]
    group_size = 8

    [sampling]                     # the evaluations (train/dev/test) and the proposer
    temperature = 0.0
    max_tokens = 16

Budgets are equal by construction: every arm runs ``rounds`` rounds; an arm that
optimises the harness gets ``candidates`` proposals and dev evaluations per round,
an arm that trains gets ``steps_per_round`` updates per round (:func:`arm_budget`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Self

from tackroom.app.optimize_config import LoopSettings, OptimizeConfig, read_sections
from tackroom.core.errors import ConfigError
from tackroom.core.registry import names
from tackroom.core.settings import setting

__all__ = ["ARMS", "ArmBudget", "LOOP_SET_KEYS", "SelfHPOConfig", "arm_budget"]

#: The arms: the alternation, harness optimisation alone, policy training alone.
ARMS = ("alternate", "harness", "policy")
#: What the arm does in each round: (optimises the harness, trains the policy).
ARM_PHASES = {"alternate": (True, True), "harness": (True, False), "policy": (False, True)}
#: RLConfig keys each round sets itself; ``[train]`` may not name them.
LOOP_SET_KEYS = ("model.path", "model.adapter", "data.suite", "data.tasks", "data.harnesses",
                 "data.source", "optim.steps", "run.out_dir", "run.seed")


@dataclass(frozen=True)
class ArmBudget:
    """What one arm may spend over the whole run (planned before anything runs)."""

    arm: str
    rounds: int
    harness_phases: int
    proposals: int          # candidate harnesses proposed, at most
    dev_evaluations: int    # candidates evaluated on dev, at most
    policy_phases: int
    updates: int            # optimiser steps of the policy
    rollouts_per_update: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SelfHPOConfig(LoopSettings):
    """One Self-HPO run's settings (see the module docstring for the file).

    ``rl`` is the file's ``[train]`` table: RLConfig's own sections, read by
    :meth:`rl_config` (and checked there), so it is no key of this class.
    """

    SECTIONS = ("selfhpo", "splits", "sampling")
    LABEL = "SelfHPOConfig"
    DOCS = "docs/optimize.md"
    SEED_KEYS = ("train", "dev", "test")

    suite: str = setting("toy", "selfhpo", "the suite")
    harness: str = setting("som-tools", "selfhpo", "H_0: a harness name or .toml path")
    model: str = setting("", "selfhpo", "π_0: a local checkpoint directory (hf)")
    adapter: str = setting("", "selfhpo", "π_0's LoRA adapter on that model, if any")
    tasks: list[str] = setting(None, "selfhpo", "task patterns", factory=list)
    held_out: list[str] = setting(None, "selfhpo", "harnesses no arm sees until the sealed "
                                  "evaluation", factory=list)
    arms: list[str] = setting(None, "selfhpo", "Self-HPO and the two halves alone",
                              factory=lambda: list(ARMS))
    rounds: int = setting(2, "selfhpo", "R rounds of each arm", bounds="[1, 100]", example="4")
    candidates: int = setting(3, "selfhpo", "K harness edits proposed per round (harness "
                              "phases)")
    steps_per_round: int = setting(4, "selfhpo", "optimiser steps per round (policy phases)",
                                   bounds="[1, 100000]", example="2")
    proposer: str = setting("self", "selfhpo", "self (π_r proposes), scripted, seeds, or a "
                            "policy spec")
    acceptance: str = setting("greedy", "selfhpo", "the acceptance rule (as tackroom "
                              "optimize; pareto keeps a front, a round trains on one)",
                              choices=lambda: [n for n in names("acceptance") if n != "pareto"])
    threshold: float = setting(0.0, "selfhpo", "(threshold) the dev gain an edit must show")
    seed: int = setting(0, "selfhpo", "the run's seed (proposals, training)")
    concurrency: int = setting(0, "selfhpo", "episodes at once (0: the suite's default)")
    base_url: str | None = setting(None, "selfhpo", "the server of an openai: proposer")
    train: str = setting("0-9", "splits", "seeds where failures are mined")
    dev: str = setting("100-119", "splits", "seeds where edits are accepted, and the "
                       "lineage's success per round")
    test: str = setting("1000000-1000049", "splits", "sealed: only the final evaluation")
    temperature: float = setting(0.0, "sampling", "the evaluations' and the proposer's "
                                 "temperature", bounds=">= 0")
    max_tokens: int = setting(256, "sampling", "completion tokens per turn",
                              bounds="[1, 1000000]", example="16")
    rl: dict[str, Any] = field(default_factory=dict)
    source: str = "defaults"

    def check_together(self) -> None:
        if not self.model:
            raise ConfigError("no starting model", f"{self.where('model')} [selfhpo] model",
                              "name a local checkpoint directory, e.g. model = \"models/tiny\" "
                              "(tackroom model init, tackroom sft)")
        if not self.arms or any(a not in ARMS for a in self.arms):
            raise self.fail("arms", f"must be a non-empty list of {', '.join(ARMS)}",
                            'e.g. arms = ["alternate", "harness", "policy"]')
        if len(set(self.arms)) != len(self.arms):
            raise self.fail("arms", "names an arm twice", "name each arm once")
        if not isinstance(self.rl, dict):
            raise ConfigError("[train] must be a table of RLConfig sections",
                              f"{self.source} [train]", "e.g. [train.algo]")
        for key in LOOP_SET_KEYS:
            section, name = key.split(".")
            if name in (self.rl.get(section) or {}):
                raise ConfigError(f"[train.{section}] {name} is set by each round",
                                  f"{self.source} [train.{section}]",
                                  f"remove it ({_LOOP_KEY_HELP.get(key, 'the loop sets it')})")
        # The harness half's settings, checked now (splits disjoint, acceptance known, …).
        self.optimize_config(self.harness, self.start_policy, 0)
        self.rl_config(model=self.model, adapter="", harness=self.harness, out_dir="/nonexistent",
                       seed=0)

    # --------------------------------------------------------------------- I/O
    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "config") -> Self:
        """From a file's sections or a run's recorded settings: ``[train]`` (or, as runs
        recorded before, ``rl``) is the RL table; a ``train`` that is text is the split."""
        data = dict(data)
        rl = data.pop("rl", None)
        if isinstance(data.get("train"), Mapping):
            rl = data.pop("train")
        values, sources = cls._collect(cls._seeds_as_text(data), where)
        values.update(rl=dict(rl or {}), source=where)
        return cls._build(values, sources)

    @classmethod
    def from_toml(cls, path: str | Path | None = None, overrides: Sequence[str] = ()) -> Self:
        """Read ``selfhpo.toml`` (``[selfhpo]``, ``[splits]``, ``[train]``, ``[sampling]``)."""
        if path is None or overrides:
            raise ConfigError("a Self-HPO run needs its selfhpo.toml (and takes no overrides)",
                              "self-hpo", "e.g. tackroom self-hpo -c selfhpo.toml")
        p = Path(path)
        tables = read_sections(p, ("selfhpo", "splits", "train", "sampling"), "a selfhpo.toml")
        unknown = sorted(set(tables["splits"]) - set(cls.SEED_KEYS))
        if unknown:
            raise ConfigError(f"unknown split {unknown[0]!r}", f"{p} [splits]",
                              "use train, dev and test")
        return cls.from_dict(tables, str(p))

    def to_dict(self) -> dict[str, Any]:
        """Sectioned, with the RL table as ``train`` (what :meth:`from_dict` reads back)."""
        return {**super().to_dict(), "train": self.rl}

    @property
    def start_policy(self) -> str:
        """π_0 as a policy spec (``hf:MODEL`` or ``hf:MODEL:ADAPTER``)."""
        return f"hf:{self.model}" + (f":{self.adapter}" if self.adapter else "")

    # ------------------------------------------------------------------ budgets
    def budget(self, arm: str) -> ArmBudget:
        """``arm``'s budget (see :func:`arm_budget`)."""
        return arm_budget(self, arm)

    # ---------------------------------------------------------- the two halves
    def proposer_spec(self, policy_spec: str) -> str:
        """Who proposes the edits of a round whose policy is ``policy_spec``."""
        return policy_spec if self.proposer == "self" else self.proposer

    def optimize_config(self, harness_ref: str, policy_spec: str, rnd: int) -> OptimizeConfig:
        """The settings of one harness phase: one optimiser round on ``harness_ref`` for
        ``policy_spec``, proposing ``candidates`` edits, the budget those K dev evaluations."""
        return OptimizeConfig(
            suite=self.suite, harness=harness_ref, policy=policy_spec, tasks=list(self.tasks),
            proposer=self.proposer_spec(policy_spec), acceptance=self.acceptance,
            threshold=self.threshold, rounds=1, candidates=self.candidates,
            budget=self.candidates, seed=self.seed * 100 + rnd, concurrency=self.concurrency,
            base_url=self.base_url, train=self.train, dev=self.dev, test=self.test,
            temperature=self.temperature, max_tokens=self.max_tokens,
            source=f"{self.source} (round {rnd})")

    def rl_config(self, *, model: str, adapter: str, harness: str, out_dir: str,
                  seed: int) -> Any:
        """The RLConfig of one policy phase: ``[train]`` plus what the round sets."""
        from tackroom.train.config import RLConfig

        data: dict[str, Any] = {k: dict(v) if isinstance(v, dict) else v
                                for k, v in self.rl.items()}
        data.setdefault("model", {}).update({"path": model, "adapter": adapter})
        data.setdefault("data", {}).update({"suite": self.suite, "tasks": list(self.tasks),
                                            "harnesses": [harness], "source": "online"})
        data.setdefault("optim", {})["steps"] = self.steps_per_round
        data.setdefault("run", {}).update({"out_dir": out_dir, "seed": seed})
        return RLConfig.from_dict(data, f"{self.source} [train]")


def arm_budget(cfg: SelfHPOConfig, arm: str) -> ArmBudget:
    """``arm``'s budget over ``cfg.rounds`` rounds.

    The alternation spends exactly what the two halves spend alone: the
    harness-only arm gets its harness phases (same rounds, same K, same
    proposer seeds) and the policy-only arm its policy phases (same steps per
    round, the same rollouts per step).
    """
    harness, policy = ARM_PHASES[arm]
    rl = cfg.rl_config(model=cfg.model, adapter="", harness=cfg.harness, out_dir="/nonexistent",
                       seed=0)
    per_update = rl.tasks_per_step * rl.group_size * rl.grad_accum
    r = cfg.rounds
    return ArmBudget(arm=arm, rounds=r, harness_phases=r if harness else 0,
                     proposals=r * cfg.candidates if harness else 0,
                     dev_evaluations=r * cfg.candidates if harness else 0,
                     policy_phases=r if policy else 0,
                     updates=r * cfg.steps_per_round if policy else 0,
                     rollouts_per_update=per_update if policy else 0)


_LOOP_KEY_HELP = {
    "model.path": "[selfhpo] model is π_0; later rounds continue from the last round's weights",
    "model.adapter": "[selfhpo] adapter is π_0's; later rounds continue the last round's",
    "optim.steps": "[selfhpo] steps_per_round sets it",
    "data.harnesses": "each round trains under that round's harness",
    "run.out_dir": "each round writes under the run's out directory",
    "run.seed": "[selfhpo] seed sets it, per round",
}

