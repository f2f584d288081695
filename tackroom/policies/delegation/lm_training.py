"""Fine-tuning the ``lm`` decision model: the torch loop behind ``LMModel.train``.

Apart from :mod:`.models` so that loading a model (what the run-time does) never reads
the training loop; torch and transformers are imported when a model is trained.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tackroom.core.errors import ConfigError

__all__ = ["torch_threads", "train_lm"]


def train_lm(cls: Any, examples: Sequence[Any], seed: int, opts: dict[str, Any]) -> Any:
    """A ``cls`` (:class:`~tackroom.policies.delegation.models.LMModel`) fine-tuned from
    ``opts["base"]`` (a local model directory) to score choices on checked ``examples``.

    ``opts`` are the model's options with their defaults filled in; ``base_label`` is
    what ``info["base"]`` records (``init:tiny`` for a fresh model the caller made).
    """
    where = "train decision model (lm)"
    if opts["score"] not in ("sum", "mean"):
        raise ConfigError(f"score={opts['score']!r}", where, "use sum or mean")
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise ConfigError("the lm decision model needs torch and transformers", where,
                          "pip install 'tackroom[train]'") from e
    from tackroom.policies.chat_format import no_progress_bars

    if opts["base"] is None:
        raise ConfigError("the lm decision model needs a base model directory", where,
                          "give base = DIR (tackroom model init, tackroom sft), or train "
                          "through tackroom.delegation.training.train_model, which makes one")
    base = Path(opts["base"])
    if not (base / "config.json").is_file():
        raise ConfigError(f"{base} holds no model (no config.json)", where,
                          "give a directory written by `tackroom model init` or "
                          "`tackroom sft`")
    with no_progress_bars(), torch_threads(opts["threads"]):
        tok = AutoTokenizer.from_pretrained(base, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(base, local_files_only=True,
                                                     dtype=torch.float32)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    dm = cls(model, tok, opts, {})
    encoded = [dm._encode(ex.point) for ex in examples]  # context/labels are fixed: once
    labels = [int(ex.label) for ex in examples]
    weights = np.asarray([ex.weight for ex in examples], dtype=np.float64)
    rng = random.Random(seed)
    batch = max(1, int(opts["batch"]))
    losses: list[float] = []
    with torch_threads(opts["threads"]), torch.random.fork_rng(devices=[]):
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
               "base": opts["base_label"] or str(opts["base"]),
               "final_loss": round(float(np.mean(losses[-max(1, len(losses) // 10):])), 6)
               if losses else None}
    return dm


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """torch's thread count set to ``threads`` inside the block (``None``/0: left alone)."""
    import torch

    if not threads:
        yield
        return
    before = torch.get_num_threads()
    if before == int(threads):  # setting it rebuilds torch's thread pool: only when needed
        yield
        return
    torch.set_num_threads(int(threads))
    try:
        yield
    finally:
        torch.set_num_threads(before)
