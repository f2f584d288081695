"""Training decision models: :func:`train_model` for every registered kind.

Each kind (:mod:`tackroom.policies.delegation.models`, registered as ``decision_model``)
trains itself; what this layer adds is the fresh base model of a kind registered with
``fresh_base`` (``lm``): a ``tackroom model init``, whose tokenizer is trained on episodes
the runner plays, so it is made here, above the runner, and passed down.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tackroom.core.registry import entry
from tackroom.policies.delegation.models import DecisionModel, Example, _check_examples

__all__ = ["train_model"]


def train_model(kind: str, examples: Sequence[Example], *, seed: int = 0,
                **options: Any) -> DecisionModel:
    """Train a decision model of ``kind`` on ``examples``.

    Options by kind (unknown ones are refused):

    - ``logistic``: ``l2`` (0.01), ``interactions`` (True), ``max_iter`` (500);
    - ``gbm``: ``max_iter`` (200), ``learning_rate`` (0.1), ``max_leaf_nodes`` (15),
      ``min_samples_leaf`` (5), ``l2_regularization`` (1.0), ``threads`` (1: the trees
      depend on the thread count, so a fixed one keeps a fit repeatable);
    - ``lm``: ``base`` (a local model directory; default: a fresh ``model init`` of
      ``size`` "tiny" in a temporary directory), ``epochs`` (3), ``lr`` (1e-3),
      ``max_len`` (192 tokens), ``batch`` (8 points per step), ``score`` ("mean" or
      "sum" label log-prob), ``threads`` (2), ``weight_decay`` (0).

    The same examples, options and seed give the same model.
    """
    found = entry("decision_model", kind, where="train decision model")
    checked = _check_examples(examples, kind)
    if not found.meta.get("fresh_base") or options.get("base") is not None:
        return found.obj.train(checked, seed, **options)
    from tackroom.models import init_model
    from tackroom.policies.chat_format import no_progress_bars

    size = str(options.get("size", "tiny"))
    with tempfile.TemporaryDirectory(prefix="tackroom-dm-") as tmp:
        with no_progress_bars():
            base = init_model(Path(tmp) / "base", size=size, seed=seed)
        return found.obj.train(checked, seed, **{**options, "base": str(base),
                                                 "base_label": f"init:{size}"})
