"""Forward passes for training that compute a batch's shared prompt once.

Every example of an SFT batch under one harness starts with the same system
prompt and tool schemas (hundreds of tokens), and the G samples of an RL
group share their whole prompt. Running that common prefix once, at batch
size 1, and letting every row attend to its keys and values (expanded, not
copied) gives the same logits as the plain forward pass — and the same
gradients, since the expansion's backward sums over rows — at a fraction of
the cost.
"""

from __future__ import annotations

from typing import Any

#: Below this many shared tokens the plain forward pass is as fast.
MIN_SHARED = 32


def common_prefix(input_ids: Any, attention_mask: Any) -> int:
    """Length of the prefix that every row has, token for token, unpadded."""
    same = (input_ids == input_ids[:1]).all(dim=0) & (attention_mask == 1).all(dim=0)
    differs = (~same).nonzero()
    return int(differs[0, 0]) if len(differs) else int(input_ids.shape[1])


def logits_from(model: Any, input_ids: Any, attention_mask: Any, start: int) -> Any:
    """Logits at positions ``start..T-1`` of each row (``[B, T - start, V]``).

    Rows must be right-padded. The rows' common prefix (up to position
    ``start + 1``, past which logits are wanted) is computed once.
    """
    from transformers import DynamicCache

    rows = input_ids.shape[0]
    shared = min(common_prefix(input_ids, attention_mask), start + 1)
    if rows == 1 or shared < MIN_SHARED:
        out = model(input_ids=input_ids, attention_mask=attention_mask)
        return out.logits[:, start:]
    import torch

    head = model(input_ids=input_ids[:1, :shared], use_cache=True)
    cache = DynamicCache()
    for i, layer in enumerate(_cache_of(head).layers):
        cache.update(layer.keys.expand(rows, *layer.keys.shape[1:]),
                     layer.values.expand(rows, *layer.values.shape[1:]), i)
    tail = model(input_ids=input_ids[:, shared:], attention_mask=attention_mask,
                 **{_cache_kwarg(model): cache})
    first = head.logits[:, start:shared].expand(rows, -1, -1)
    return torch.cat([first, tail.logits[:, max(0, start - shared):]], dim=1)


def _cache_of(output: Any) -> Any:
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def _cache_kwarg(model: Any) -> str:
    """``cache`` in recent transformers, ``past_key_values`` before (peft unwrapped)."""
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    params = inspect.signature(type(base).forward).parameters
    return "cache" if "cache" in params else "past_key_values"
