"""Local models: build small causal LMs and their tokenizers offline.

    from tackroom.models import init_model
    path = init_model("models/tiny", size="tiny", seed=0)

then ``hf:models/tiny`` is a policy (:mod:`tackroom.policies.hf_policy`).
Imports of torch / transformers happen inside the functions, so importing
this package is cheap and works without the ``train`` extra.
"""

from tackroom.models.init import ARCHS, SIZES, default_corpus, init_model, weights_sha256
from tackroom.policies.chat_format import (
    CHAT_TEMPLATE,
    IM_END,
    IM_START,
    MODEL_CARD,
    PAD,
    format_tool_call,
    parse_tool_calls,
    read_model_card,
)

__all__ = [
    "ARCHS", "CHAT_TEMPLATE", "IM_END", "IM_START", "MODEL_CARD", "PAD", "SIZES",
    "default_corpus", "format_tool_call", "init_model", "parse_tool_calls",
    "read_model_card", "weights_sha256",
]
