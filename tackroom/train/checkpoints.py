"""Weight versions and checkpoints of an RL run: what is saved, under which name, and how it resumes.

Every set of weights has a *version*, ``<run_id>-step-<k>`` (after k optimiser
steps). Each rollout turn records the version that wrote it in ``Turn.adapter``;
each checkpoint (and ``final``) carries its version in ``tackroom_adapter.json``,
which the hf policy reads as the adapter's name, so turns served later from a
checkpoint record the same version. With a critic, the value head is saved beside
the weights (``value_head.pt`` and ``value_head.json``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tackroom.policies.hf_policy import ADAPTER_VERSION_FILE
from tackroom.train.config import RLConfig
from tackroom.train.engine import TrainEngine, latest_checkpoint

VALUE_HEAD_FILE = "value_head.pt"


def weight_version(run_id: str, step: int) -> str:
    """The name of the weights after ``step`` optimiser steps of run ``run_id``."""
    return f"{run_id}-step-{step}"


class Checkpoints:
    """Saves one run's checkpoints, rollout weights' version files and final model.

    Args:
        engine: the training engine (its step, weights and optimiser).
        cfg: the run's (resolved) configuration.
        run_id: the run's id (a resumed run's original id).
        model_dir: the base model directory, recorded in every version file.
        head: the critic's value head, or ``None``.
        vocab: the harness vocabulary of a harness-conditioned critic.
    """

    def __init__(self, engine: TrainEngine, cfg: RLConfig, run_id: str, model_dir: str, *,
                 head: Any = None, vocab: Mapping[str, int] | None = None) -> None:
        self.engine = engine
        self.cfg = cfg
        self.run_id = run_id
        self.model_dir = model_dir
        self.head = head
        self.vocab = dict(vocab or {})

    @property
    def version(self) -> str:
        """The current weights' version."""
        return weight_version(self.run_id, self.engine.step)

    def write_version(self, version: str) -> Callable[[Path], None]:
        """A writer of ``version``'s files (version card, value head) into a directory."""
        def write(directory: Path) -> None:
            import torch

            (directory / ADAPTER_VERSION_FILE).write_text(json.dumps({
                "version": version, "run_id": self.run_id, "step": self.engine.step,
                "base_model": self.model_dir,
                "mode": "lora" if self.engine.lora is not None else "full"}, indent=1))
            if self.head is not None:
                torch.save(self.head.state_dict(), directory / VALUE_HEAD_FILE)
                (directory / "value_head.json").write_text(json.dumps({
                    "critic": self.cfg.critic, "harness_vocab": self.vocab,
                    "harness_embed": self.cfg.harness_embed,
                    "value_hidden": self.cfg.value_hidden}, indent=1))
        return write

    def save(self, iteration: int, fingerprint: str) -> Path:
        """A checkpoint that ``--resume`` continues from exactly (at an iteration's end)."""
        version = self.version
        return self.engine.save_checkpoint(
            {"run_id": self.run_id, "iteration": iteration, "version": version,
             "data": fingerprint, "harness_vocab": self.vocab},
            extra=self.write_version(version))

    def save_final(self, last: Mapping[str, Any], harnesses: list[str]) -> Path:
        """The final model (``OUT/final``) with its model card and version file."""
        version = self.version
        final = self.engine.save_final(Path(self.engine.out_dir) / "final", card={"rl": {
            "run_id": self.run_id, "steps": self.engine.step, "version": version,
            "algorithm": self.cfg.algorithm, "source": self.cfg.source,
            "harnesses": harnesses,
            "last": {k: v for k, v in last.items() if isinstance(v, (int, float))}}})
        self.write_version(version)(final)
        return final

    def restore_head(self) -> None:
        """Load the value head saved with the newest checkpoint (after ``engine.resume()``)."""
        if self.head is None:
            return
        import torch

        ckpt = latest_checkpoint(self.engine.out_dir)
        assert ckpt is not None
        self.head.load_state_dict(torch.load(ckpt / VALUE_HEAD_FILE, weights_only=True))
