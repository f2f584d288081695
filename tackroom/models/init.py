"""``init_model``: a small, randomly initialised causal LM with a tokenizer of our own.

Nothing is downloaded. The model is a standard transformers architecture
(Qwen2 or Llama) built from a config, so everything that loads Hugging Face
checkpoints — transformers, peft, vLLM — loads it too; the tokenizer is a
byte-level BPE trained here on tackroom's own harness texts, with the ChatML
+ Hermes-tools chat template of :mod:`tackroom.policies.chat_format`.

Sizes (parameters with a 4096-token vocabulary, embeddings tied):

=======  ======  ======  =====  ========  ============  =======
size     hidden  layers  heads  kv heads  intermediate  params
=======  ======  ======  =====  ========  ============  =======
tiny     128     3       4      2         352           ≈1.1M
small    256     5       8      4         768           ≈5.0M
base     512     10      8      4         1280          ≈30M
=======  ======  ======  =====  ========  ============  =======

The model's vocabulary is exactly the trained tokenizer's (no padding rows a
random model could sample): a corpus too small to fill ``vocab_size`` gives a
smaller vocabulary, and fewer parameters.

Everything is a function of (arguments, corpus, library versions): the same
seed writes the same weights and the same tokenizer, and
``tackroom_model.json`` records their hashes so that can be checked.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tackroom.core.errors import ConfigError
from tackroom.policies.chat_format import MODEL_CARD, no_progress_bars

#: Architecture presets; see the module docstring for the parameter counts.
SIZES: dict[str, dict[str, int]] = {
    "tiny": {"hidden_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4,
             "num_key_value_heads": 2, "intermediate_size": 352},
    "small": {"hidden_size": 256, "num_hidden_layers": 5, "num_attention_heads": 8,
              "num_key_value_heads": 4, "intermediate_size": 768},
    "base": {"hidden_size": 512, "num_hidden_layers": 10, "num_attention_heads": 8,
             "num_key_value_heads": 4, "intermediate_size": 1280},
}
ARCHS = ("qwen2", "llama")
#: The file that describes how a model directory was built.
#: Seeds of the expert episodes whose texts make the default corpus.
CORPUS_SEEDS = tuple(range(8))


def default_corpus() -> tuple[list[str], dict[str, Any]]:
    """Our harness texts, plus the English prose bundled with Python, and a description.

    The harness texts (toy experts under every shipped harness) hold only a
    thousand-odd distinct words, too few to fill a 4096-token vocabulary; the
    ``pydoc`` topics that ship with CPython add general English and code, so
    words the toy pages never used (MiniWoB's, a user's) still split into
    sensible pieces. Both are on disk; nothing is fetched.
    """
    from tackroom.models.corpus import harness_corpus

    texts = harness_corpus(CORPUS_SEEDS)
    n_harness = len(texts)
    try:
        from pydoc_data.topics import topics
        prose = [topics[k] for k in sorted(topics)]
    except ImportError:  # a Python built without pydoc_data: harness texts alone
        prose = []
    info = {"source": "harness+pydoc", "harness_texts": n_harness,
            "harness_seeds": list(CORPUS_SEEDS), "pydoc_texts": len(prose),
            "python": ".".join(map(str, sys.version_info[:3]))}
    return texts + prose, info


def _sha256_text(texts: list[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        b = t.encode("utf-8", "surrogatepass")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def weights_sha256(model: Any) -> str:
    """Hash of a model's parameters and buffers (names, dtypes, shapes, values)."""
    import torch

    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def init_model(
    out_dir: str | Path,
    *,
    arch: str = "qwen2",
    size: str = "tiny",
    corpus: Iterable[str] | None = None,
    vocab_size: int = 4096,
    seed: int = 0,
    hidden_size: int | None = None,
    layers: int | None = None,
    heads: int | None = None,
    kv_heads: int | None = None,
    intermediate_size: int | None = None,
    max_positions: int = 32768,
    overwrite: bool = False,
) -> Path:
    """Build and save a random causal LM and its tokenizer into ``out_dir``.

    Args:
        out_dir: where ``save_pretrained`` writes model, tokenizer and
            ``tackroom_model.json``; created if missing.
        arch: ``qwen2`` or ``llama`` (transformers' Qwen2Config / LlamaConfig).
        size: ``tiny`` / ``small`` / ``base`` (≈1M / ≈5M / ≈30M parameters).
        corpus: texts to train the tokenizer on; default: tackroom's harness
            texts (see :func:`default_corpus`).
        vocab_size: target vocabulary of the BPE tokenizer (an upper bound).
        seed: seeds the weight initialisation; same seed, same weights.
        hidden_size, layers, heads, kv_heads, intermediate_size: override the
            size preset.
        max_positions: the model's context length (RoPE: no parameters).
        overwrite: replace a model already in ``out_dir``.

    Returns:
        ``out_dir`` as a :class:`Path`.
    """
    if arch not in ARCHS:
        raise ConfigError(f"unknown architecture {arch!r}", "model init",
                          f"choose one of: {', '.join(ARCHS)}")
    if size not in SIZES:
        raise ConfigError(f"unknown size {size!r}", "model init",
                          f"choose one of: {', '.join(SIZES)}")
    if vocab_size < 512:
        raise ConfigError(f"vocab_size {vocab_size} is too small", "model init",
                          "use at least 512 (256 bytes + merges + special tokens)")
    dims: dict[str, Any] = dict(SIZES[size])
    for key, value in (("hidden_size", hidden_size), ("num_hidden_layers", layers),
                       ("num_attention_heads", heads), ("num_key_value_heads", kv_heads),
                       ("intermediate_size", intermediate_size)):
        if value is not None:
            if int(value) < 1:
                raise ConfigError(f"{key}={value} must be positive", "model init",
                                  "give a positive integer")
            dims[key] = int(value)
    if heads is not None and kv_heads is None:
        dims["num_key_value_heads"] = dims["num_attention_heads"]
    if dims["hidden_size"] % dims["num_attention_heads"]:
        raise ConfigError(f"hidden_size {dims['hidden_size']} is not a multiple of "
                          f"{dims['num_attention_heads']} heads", "model init",
                          "choose a head count that divides hidden_size")
    if dims["num_attention_heads"] % dims["num_key_value_heads"]:
        raise ConfigError(f"{dims['num_attention_heads']} heads cannot share "
                          f"{dims['num_key_value_heads']} key/value heads", "model init",
                          "choose kv_heads that divides heads")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out} is a file", "model init", "give a directory path")
    if not overwrite and any((out / f).exists() for f in ("config.json", MODEL_CARD,
                                                            "tokenizer.json")):
        raise ConfigError(f"{out} already holds a model", "model init",
                          "choose another directory or pass overwrite=True (--force)")

    import tokenizers
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, GenerationConfig, LlamaConfig, Qwen2Config

    from tackroom.models.tokenizer import train_bpe, wrap_tokenizer
    from tackroom.policies.chat_format import IM_END, PAD

    if corpus is None:
        texts, corpus_info = default_corpus()
    else:
        texts = [t for t in corpus if isinstance(t, str) and t]
        corpus_info = {"source": "given"}
    if not texts:
        raise ConfigError("the tokenizer corpus is empty", "model init",
                          "give some texts, or leave corpus unset for the default")
    corpus_info.update(texts=len(texts), chars=sum(len(t) for t in texts),
                       sha256=_sha256_text(texts))

    bpe = train_bpe(texts, vocab_size=vocab_size)
    tokenizer = wrap_tokenizer(bpe, max_positions)
    eos_id = tokenizer.convert_tokens_to_ids(IM_END)
    pad_id = tokenizer.convert_tokens_to_ids(PAD)

    config_cls = Qwen2Config if arch == "qwen2" else LlamaConfig
    config = config_cls(
        vocab_size=len(tokenizer),
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        **dims,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config = GenerationConfig(
        eos_token_id=[eos_id, pad_id], pad_token_id=pad_id, bos_token_id=None,
        do_sample=False)
    params = model.num_parameters()

    out.mkdir(parents=True, exist_ok=True)
    with no_progress_bars():  # no "Writing model shards" bar for a 4 MB file
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
    card = {
        "format": 1,
        "arch": arch,
        "size": size,
        "seed": seed,
        "params": params,
        "dims": dims,
        "vocab_size": len(tokenizer),
        "vocab_size_requested": vocab_size,
        "max_positions": max_positions,
        "chat_format": "chatml+hermes-tools",
        "special_tokens": {"eos": IM_END, "pad": PAD},
        "corpus": corpus_info,
        "weights_sha256": weights_sha256(model),
        "tokenizer_sha256": hashlib.sha256(bpe.to_str().encode()).hexdigest(),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__},
    }
    (out / MODEL_CARD).write_text(json.dumps(card, indent=2, sort_keys=True) + "\n")
    return out
