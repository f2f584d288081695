"""A byte-level BPE tokenizer trained offline on our own texts, with the chat format.

Byte-level, with exactly Qwen2's pipeline (NFC, Qwen's split regex, byte-level
BPE): every string encodes, nothing is ``<unk>``, and decode(encode(text)) is
the NFC form of text. The pipeline is Qwen2's on purpose: transformers 5 loads
any ``model_type = "qwen2"`` tokenizer as ``Qwen2Tokenizer``, which rebuilds
that pipeline around the saved vocabulary whatever ``tokenizer.json`` says, so
a tokenizer trained any other way would encode differently once reloaded. The chat control tokens are special
(never split out of plain text, dropped on decode); the tool-call markup
(``<tool_call>`` ...) are single tokens that stay visible when decoding, as in
Qwen2.5, so a reply decodes to the text the tool-call parser reads.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)

from tackroom.policies.chat_format import (
    CHAT_TEMPLATE,
    IM_END,
    IM_START,
    MARKUP_TOKENS,
    PAD,
    SPECIAL_TOKENS,
)

#: Qwen2's pre-tokenizer regex (transformers' ``tokenization_qwen2.PRETOKENIZE_REGEX``).
SPLIT_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
               r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")


def train_bpe(corpus: Sequence[str], vocab_size: int = 4096, min_frequency: int = 2) -> Tokenizer:
    """Train a byte-level BPE on ``corpus``; ids 0.. are the special then markup tokens.

    Deterministic: the same corpus (as a sequence) gives the same vocabulary and
    merges. The result may hold fewer than ``vocab_size`` tokens when the corpus
    has fewer pairs worth merging.
    """
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    reserved = [AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS]
    reserved += [AddedToken(t, special=False, normalized=False) for t in MARKUP_TOKENS]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=reserved,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus), trainer=trainer)
    # The trainer registers its reserved tokens as special; the markup must stay
    # visible on decode, so re-register it as plain added tokens (same ids).
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKUP_TOKENS])
    return tok


def wrap_tokenizer(tok: Tokenizer, max_length: int):
    """The transformers tokenizer around ``tok``: chat template, eos/pad, left padding."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD,
        model_max_length=max_length,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    fast.add_special_tokens({"additional_special_tokens": [IM_START]})
    fast.chat_template = CHAT_TEMPLATE
    return fast
