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

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tackroom.app.limits import seed_list
from tackroom.app.optimize_config import FlatSettings, OptimizeConfig, read_sections
from tackroom.core.errors import ConfigError

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
class SelfHPOConfig(FlatSettings):
    """One Self-HPO run's settings (see the module docstring for the file)."""

    suite: str = "toy"
    harness: str = "som-tools"
    model: str = ""
    adapter: str = ""
    tasks: list[str] = field(default_factory=list)
    held_out: list[str] = field(default_factory=list)
    arms: list[str] = field(default_factory=lambda: list(ARMS))
    rounds: int = 2
    candidates: int = 3
    steps_per_round: int = 4
    proposer: str = "self"
    acceptance: str = "greedy"
    threshold: float = 0.0
    seed: int = 0
    concurrency: int = 0
    base_url: str | None = None
    train: str = "0-9"
    dev: str = "100-119"
    test: str = "1000000-1000049"
    temperature: float = 0.0
    max_tokens: int = 256
    rl: dict[str, Any] = field(default_factory=dict)
    source: str = "defaults"

    def __post_init__(self) -> None:
        w = self.source
        if not self.model:
            raise ConfigError("no starting model", f"{w} [selfhpo] model",
                              "name a local checkpoint directory, e.g. model = \"models/tiny\" "
                              "(tackroom model init, tackroom sft)")
        if not isinstance(self.arms, list) or not self.arms or any(a not in ARMS
                                                                   for a in self.arms):
            raise ConfigError(f"arms must be a non-empty list of {', '.join(ARMS)}; got "
                              f"{self.arms!r}", f"{w} [selfhpo] arms",
                              'e.g. arms = ["alternate", "harness", "policy"]')
        if len(set(self.arms)) != len(self.arms):
            raise ConfigError(f"an arm is named twice in {self.arms}", f"{w} [selfhpo] arms",
                              "name each arm once")
        if self.acceptance == "pareto":
            raise ConfigError("the pareto rule keeps a front, and a round of Self-HPO trains "
                              "under one harness", f"{w} [selfhpo] acceptance",
                              "use greedy or threshold")
        for name, lo, hi in (("rounds", 1, 100), ("steps_per_round", 1, 100_000)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
                raise ConfigError(f"{name} must be an integer from {lo} to {hi}, got {value!r}",
                                  f"{w} [selfhpo] {name}", f"e.g. {name} = {lo * 2}")
        if not isinstance(self.held_out, list):
            raise ConfigError("held_out must be a list of harnesses", f"{w} [selfhpo] held_out",
                              'e.g. held_out = ["html-cmd"]')
        for key in LOOP_SET_KEYS:
            section, name = key.split(".")
            if name in (self.rl.get(section) or {}):
                raise ConfigError(f"[train.{section}] {name} is set by each round",
                                  f"{w} [train.{section}]",
                                  f"remove it ({_LOOP_KEY_HELP.get(key, 'the loop sets it')})")
        # The harness half's settings, checked now (splits disjoint, acceptance known, …).
        self.optimize_config(self.harness, self.start_policy, 0)
        self.rl_config(model=self.model, adapter="", harness=self.harness, out_dir="/nonexistent",
                       seed=0)

    @property
    def start_policy(self) -> str:
        """π_0 as a policy spec (``hf:MODEL`` or ``hf:MODEL:ADAPTER``)."""
        return f"hf:{self.model}" + (f":{self.adapter}" if self.adapter else "")

    def seeds(self, split: str) -> list[int]:
        """The seeds of ``split`` (``train``, ``dev`` or ``test``)."""
        return seed_list(getattr(self, split))

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

    # --------------------------------------------------------------------- I/O
    @classmethod
    def from_toml(cls, path: str | Path) -> SelfHPOConfig:
        """Read ``selfhpo.toml`` (``[selfhpo]``, ``[splits]``, ``[train]``, ``[sampling]``)."""
        p = Path(path)
        tables = read_sections(p, ("selfhpo", "splits", "train", "sampling"), "a selfhpo.toml")
        flat: dict[str, Any] = {"rl": tables.pop("train")}
        for section, table in tables.items():
            for key, value in table.items():
                if section == "splits" and key not in ("train", "dev", "test"):
                    raise ConfigError(f"unknown split {key!r}", f"{p} [splits]",
                                      "use train, dev and test")
                if section == "splits" and isinstance(value, list):
                    value = ",".join(str(v) for v in value)
                flat[key] = value
        return cls.from_dict(flat, str(p))


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

