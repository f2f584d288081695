"""Training decision models: :func:`train_model` for every kind.

Kept apart from :mod:`tackroom.delegation.models` (what the run-time loads): the ``lm``
kind starts from a fresh ``model init``, whose tokenizer is trained on episodes the runner
plays, so training sits above the runner while loading sits below it.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tackroom.core.errors import ConfigError
from tackroom.delegation.models import (
    KINDS,
    DecisionModel,
    Example,
    LMModel,
    _check_examples,
    _options,
    _torch_threads,
    _train_gbm,
    _train_logistic,
)


def _train_lm(examples: list[Example], seed: int, **options: Any) -> LMModel:
    opts = _options("lm", options, {"base": None, "size": "tiny", "epochs": 3, "lr": 1e-3,
                                    "max_len": 192, "batch": 8, "score": "mean",
                                    "threads": 2, "weight_decay": 0.0})
    where = "train decision model (lm)"
    if opts["score"] not in ("sum", "mean"):
        raise ConfigError(f"score={opts['score']!r}", where, "use sum or mean")
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise ConfigError("the lm decision model needs torch and transformers", where,
                          "pip install 'tackroom[train]'") from e
    from tackroom.models import init_model
    from tackroom.policies.chat_format import no_progress_bars

    with tempfile.TemporaryDirectory(prefix="tackroom-dm-") as tmp, no_progress_bars(), \
            _torch_threads(opts["threads"]):
        if opts["base"] is None:
            base = init_model(Path(tmp) / "base", size=str(opts["size"]), seed=seed)
        else:
            base = Path(opts["base"])
            if not (base / "config.json").is_file():
                raise ConfigError(f"{base} holds no model (no config.json)", where,
                                  "give a directory written by `tackroom model init` or "
                                  "`tackroom sft`")
        tok = AutoTokenizer.from_pretrained(base, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(base, local_files_only=True,
                                                     dtype=torch.float32)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    dm = LMModel(model, tok, opts, {})
    encoded = [dm._encode(ex.point) for ex in examples]  # context/labels are fixed: once
    labels = [int(ex.label) for ex in examples]
    weights = np.asarray([ex.weight for ex in examples], dtype=np.float64)
    rng = random.Random(seed)
    batch = max(1, int(opts["batch"]))
    losses: list[float] = []
    with _torch_threads(opts["threads"]), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        optim = torch.optim.AdamW(model.parameters(), lr=float(opts["lr"]),
                                  weight_decay=float(opts["weight_decay"]))
        model.train()
        for _ in range(int(opts["epochs"])):
            order = list(range(len(examples)))
            rng.shuffle(order)
            for b in range(0, len(order), batch):
                idx = order[b:b + batch]
                flat = [seq for i in idx for seq in encoded[i]]
                s = dm.scores(flat)
                loss, start = s.new_zeros(()), 0
                w_sum = float(weights[idx].sum())
                for i in idx:
                    n = len(encoded[i])
                    logp = torch.log_softmax(s[start:start + n], dim=0)
                    loss = loss - float(weights[i]) / w_sum * logp[labels[i]]
                    start += n
                optim.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optim.step()
                losses.append(float(loss.detach()))
    model.eval()
    dm.info = {"examples": len(examples), "seed": seed, "epochs": int(opts["epochs"]),
               "lr": float(opts["lr"]), "batch": batch,
               "base": "init:" + str(opts["size"]) if opts["base"] is None else str(opts["base"]),
               "final_loss": round(float(np.mean(losses[-max(1, len(losses) // 10):])), 6)
               if losses else None}
    return dm


# -- public entry points ------------------------------------------------------------------
_TRAIN = {"logistic": _train_logistic, "gbm": _train_gbm, "lm": _train_lm}


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
    if kind not in _TRAIN:
        raise ConfigError(f"unknown decision model kind {kind!r}", "train decision model",
                          f"choose one of: {', '.join(KINDS)}")
    return _TRAIN[kind](_check_examples(examples, kind), seed, **options)
