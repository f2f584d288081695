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

from tackroom.policies.kv import cache_kwarg, cache_of

#: Below this many shared tokens the plain forward pass is as fast.
MIN_SHARED = 32


def common_prefix(input_ids: Any, attention_mask: Any) -> int:
    """Length of the prefix that every row has, token for token, unpadded."""
    same = (input_ids == input_ids[:1]).all(dim=0) & (attention_mask == 1).all(dim=0)
    differs = (~same).nonzero()
    return int(differs[0, 0]) if len(differs) else int(input_ids.shape[1])


def logits_from(model: Any, input_ids: Any, attention_mask: Any, start: int, *,
                hidden: bool = False) -> Any:
    """Logits at positions ``start..T-1`` of each row (``[B, T - start, V]``).

    Rows must be right-padded. The rows' common prefix (up to position
    ``start + 1``, past which logits are wanted) is computed once.

    ``hidden=True`` returns ``(logits, hidden)``, ``hidden`` being the last
    layer's hidden states at the same positions (``[B, T - start, H]``) — what
    a value head reads (:mod:`tackroom.train.critic`).

    Where the model takes ``logits_to_keep`` (transformers' causal LMs), the LM
    head runs only on the positions wanted: a long prompt costs no [T, V]
    logits, the largest tensor of the pass. The values are the same.
    """
    from transformers import DynamicCache

    extra = {"output_hidden_states": True} if hidden else {}
    rows, width = input_ids.shape[0], input_ids.shape[1]
    shared = min(common_prefix(input_ids, attention_mask), start + 1)
    if rows == 1 or shared < MIN_SHARED:
        out = model(input_ids=input_ids, attention_mask=attention_mask,
                    **_keep(model, width - start), **extra)
        logits = _last(out.logits, width - start)
        if hidden:
            return logits, out.hidden_states[-1][:, start:]
        return logits
    import torch

    head = model(input_ids=input_ids[:1, :shared], use_cache=True,
                 **_keep(model, shared - start), **extra)
    cache = DynamicCache()
    for i, layer in enumerate(cache_of(head).layers):
        cache.update(layer.keys.expand(rows, *layer.keys.shape[1:]),
                     layer.values.expand(rows, *layer.values.shape[1:]), i)
    tail = model(input_ids=input_ids[:, shared:], attention_mask=attention_mask,
                 **{cache_kwarg(model): cache}, **_keep(model, width - max(start, shared)),
                 **extra)
    first = _last(head.logits, max(0, shared - start)).expand(rows, -1, -1)
    logits = torch.cat([first, _last(tail.logits, width - max(start, shared))], dim=1)
    if not hidden:
        return logits
    h_first = head.hidden_states[-1][:, start:shared].expand(rows, -1, -1)
    states = torch.cat([h_first, tail.hidden_states[-1][:, max(0, start - shared):]], dim=1)
    return logits, states


def _last(logits: Any, n: int) -> Any:
    """The last ``n`` positions (``n = 0``: none), whether or not the model trimmed already."""
    return logits[:, logits.shape[1] - n:]


_KEEPS: dict[type, bool] = {}


def _keep(model: Any, n: int) -> dict[str, int]:
    """``logits_to_keep=n`` for models that take it (``0`` would mean all: ask for one)."""
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    cls = type(base)
    if cls not in _KEEPS:
        _KEEPS[cls] = "logits_to_keep" in inspect.signature(cls.forward).parameters
    return {"logits_to_keep": max(1, n)} if _KEEPS[cls] else {}


