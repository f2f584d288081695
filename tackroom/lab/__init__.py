"""The lab: small, exact models of the research's claims, to check them and to use on records.

- :mod:`tackroom.lab.mdp` — tabular MDPs and bandits, solved exactly (numpy).
- :mod:`tackroom.lab.pmd` — policy mirror descent as a repeated protocol: the exact
  oracle, the one-step critics, policy loss and the residual decomposition (numpy).
- :mod:`tackroom.lab.actor` — the causal-attention actor and its frozen audit model
  (torch, the ``train`` extra); loaded only when one of its names is asked for, so
  ``import tackroom.lab`` works on a base install.

docs/lab.md says what each tool predicts and how to use it.
"""

from __future__ import annotations

import importlib
from typing import Any

from tackroom.lab.mdp import (
    FAMILIES,
    TabularMDP,
    bandit,
    chain_mdp,
    grid_mdp,
    make_instances,
    random_mdp,
    uniform_policy,
)
from tackroom.lab.pmd import (
    RESIDUALS,
    MonteCarloCritic,
    Residuals,
    StepFit,
    Trace,
    accumulate,
    average,
    decompose,
    exact_critic,
    final_losses,
    fit_step,
    pmd_oracle,
    pmd_update,
    policy_loss,
    run_protocol,
)

#: Names served lazily from :mod:`tackroom.lab.actor` (it imports torch).
_ACTOR = ("AttentionActor", "TrainConfig", "fit_count_gain", "gain_rule", "learned_rule",
          "routing_rule", "train_actor", "training_contexts")

__all__ = [
    "FAMILIES", "RESIDUALS", "MonteCarloCritic", "Residuals", "StepFit", "TabularMDP",
    "Trace",
    "accumulate", "average", "bandit", "chain_mdp", "decompose", "exact_critic",
    "final_losses", "fit_step", "grid_mdp", "make_instances", "pmd_oracle", "pmd_update", "policy_loss",
    "random_mdp", "run_protocol", "uniform_policy", *_ACTOR,
]


def __getattr__(name: str) -> Any:
    if name in _ACTOR:
        return getattr(importlib.import_module("tackroom.lab.actor"), name)
    raise AttributeError(f"module 'tackroom.lab' has no attribute {name!r}")
