"""The model cache (keys/values) across transformers versions: one place for its names.

transformers 5 renamed ``past_key_values`` to ``cache`` in ``forward`` and
``generate`` (the old name warns, and goes away in a later release). Both the
``hf`` backend (shared-prefix prefill) and the trainer (shared-prefix
forward) pass caches around; they ask here which name the model takes.
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["cache_kwarg", "cache_of"]

_NAMES: dict[type, str] = {}


def cache_kwarg(model: Any) -> str:
    """``cache`` in recent transformers, ``past_key_values`` before (peft unwrapped)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    cls = type(base)
    if cls not in _NAMES:
        params = inspect.signature(cls.forward).parameters
        _NAMES[cls] = "cache" if "cache" in params else "past_key_values"
    return _NAMES[cls]


def cache_of(output: Any) -> Any:
    """The cache a forward pass returned, under either name."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values
