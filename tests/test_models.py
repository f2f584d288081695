"""Local models: init_model builds loadable, deterministic checkpoints with our chat format."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from conftest import CLICK_TOOLS  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from tackroom.core.errors import ConfigError  # noqa: E402
from tackroom.models import (  # noqa: E402
    MODEL_CARD,
    default_corpus,
    format_tool_call,
    init_model,
    parse_tool_calls,
    read_model_card,
    weights_sha256,
)
from tackroom.models.corpus import harness_corpus  # noqa: E402


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    texts, info = default_corpus()
    assert info["source"] == "harness+pydoc" and info["harness_texts"] > 100
    return texts


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, corpus):
    return init_model(tmp_path_factory.mktemp("tiny"), size="tiny", corpus=corpus, seed=0)


def load(path):
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    return tok, model


def test_harness_corpus_has_our_texts():
    texts = harness_corpus(seeds=(0,))
    assert texts == sorted(set(texts))  # de-duplicated and ordered: deterministic
    joined = "\n".join(texts)
    assert "You are a web agent" in joined  # som-tools system prompt
    assert '<tool_call>\n{"name": "click", "arguments": {"ref": ' in joined  # expert replies
    assert '"type": "function"' in joined  # tool schemas
    assert "```" in joined  # html-commands replies


def test_tiny_loads_from_local_files(tiny):
    tok, model = load(tiny)
    card = read_model_card(tiny)
    assert card["arch"] == "qwen2" and card["size"] == "tiny" and card["seed"] == 0
    assert 0.7e6 <= card["params"] <= 1.5e6, card["params"]
    assert card["params"] == model.num_parameters()
    assert card["vocab_size"] == len(tok) == model.config.vocab_size == 4096
    assert model.config.tie_word_embeddings
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert tok.eos_token_id in model.generation_config.eos_token_id
    assert card["weights_sha256"] == weights_sha256(model)
    assert card["corpus"]["texts"] > 1000 and len(card["corpus"]["sha256"]) == 64


def test_small_llama_size(tmp_path, corpus):
    path = init_model(tmp_path / "small", arch="llama", size="small", corpus=corpus)
    card = json.loads((path / MODEL_CARD).read_text())
    assert card["arch"] == "llama"
    assert 3.5e6 <= card["params"] <= 6.5e6, card["params"]
    _, model = load(path)
    assert type(model).__name__ == "LlamaForCausalLM"


def test_overrides(tmp_path):
    path = init_model(tmp_path / "m", size="tiny", hidden_size=64, layers=1, heads=2,
                      corpus=harness_corpus(seeds=(0,)), vocab_size=600)
    card = read_model_card(path)
    assert card["dims"]["hidden_size"] == 64 and card["dims"]["num_hidden_layers"] == 1
    assert card["dims"]["num_key_value_heads"] == 2
    assert card["vocab_size"] <= 600


def test_deterministic_given_seed(tmp_path, tiny, corpus):
    again = init_model(tmp_path / "again", size="tiny", corpus=corpus, seed=0)
    other = init_model(tmp_path / "other", size="tiny", corpus=corpus, seed=1)
    a, b, c = (read_model_card(p) for p in (tiny, again, other))
    assert a["weights_sha256"] == b["weights_sha256"] != c["weights_sha256"]
    assert a["tokenizer_sha256"] == b["tokenizer_sha256"] == c["tokenizer_sha256"]
    assert (tiny / "tokenizer.json").read_bytes() == (again / "tokenizer.json").read_bytes()
    assert (tiny / "model.safetensors").read_bytes() == (again / "model.safetensors").read_bytes()


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_reloaded_tokenizer_encodes_as_trained(tmp_path, tiny, arch):
    # transformers 5 loads a qwen2 tokenizer as Qwen2Tokenizer, rebuilding the
    # pre-tokenizer: what it encodes must still be what the BPE was trained on.
    path = tiny if arch == "qwen2" else init_model(
        tmp_path / "l", arch="llama", corpus=harness_corpus(seeds=(0,)))
    raw = Tokenizer.from_file(str(path / "tokenizer.json"))
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    samples = harness_corpus(seeds=(5,))[:200] + [
        "Héllo  wörld\t\t日本 <tool_call>\n{\"name\": \"x\"}\n</tool_call><|im_end|> 12345"]
    for text in samples:
        ids = tok(text)["input_ids"]
        assert ids == raw.encode(text).ids
        assert tok.decode(ids) == text


def test_init_errors(tmp_path, tiny):
    with pytest.raises(ConfigError, match="already holds a model"):
        init_model(tiny, corpus=["x y z"] * 10)
    with pytest.raises(ConfigError, match="unknown architecture"):
        init_model(tmp_path / "a", arch="gpt9")
    with pytest.raises(ConfigError, match="unknown size"):
        init_model(tmp_path / "b", size="huge")
    with pytest.raises(ConfigError, match="not a multiple"):
        init_model(tmp_path / "c", hidden_size=100, heads=3, corpus=["a b"])


CONVERSATION = [
    {"role": "system", "content": "You are a web agent."},
    {"role": "user", "content": "Task: click the OK button\n\nPage:\n[3] button \"OK\""},
    {"role": "assistant", "content": "",
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "click", "arguments": "{\"ref\": 3}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    {"role": "user", "content": "Page:\n[4] link \"next\""},
    {"role": "assistant", "content": "Clicking the link.",
     "tool_calls": [{"id": "c2", "type": "function",
                     "function": {"name": "click", "arguments": {"ref": 4}}},
                    {"id": "c3", "type": "function",
                     "function": {"name": "type", "arguments": "{\"ref\": 4, \"text\": \"hi\"}"}}]},
    {"role": "tool", "tool_call_id": "c2", "content": "ok"},
    {"role": "tool", "tool_call_id": "c3", "content": "error: no such element"},
]


def test_chat_template_renders_tools_and_calls(tiny):
    tok = AutoTokenizer.from_pretrained(tiny, local_files_only=True)
    text = tok.apply_chat_template(CONVERSATION, tools=CLICK_TOOLS, tokenize=False,
                                   add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nYou are a web agent.\n\n# Tools\n")
    assert "<tools>\n" + json.dumps(CLICK_TOOLS[0], ensure_ascii=False) + "\n</tools>" in text
    assert ("<|im_start|>assistant\n<tool_call>\n{\"name\": \"click\", \"arguments\": "
            "{\"ref\": 3}}\n</tool_call><|im_end|>\n") in text
    assert ("<|im_start|>tool\n<tool_response>\nerror: no such element\n"
            "</tool_response><|im_end|>\n") in text
    assert text.endswith("<|im_start|>assistant\n")
    assert text.count("<|im_start|>tool\n") == 3
    # Without tools there is no tools section; without a system message, no system turn.
    plain = tok.apply_chat_template(CONVERSATION[1:2], tokenize=False)
    assert plain == "<|im_start|>user\n" + CONVERSATION[1]["content"] + "<|im_end|>\n"
    # Byte-level BPE: the rendered prompt survives encode/decode.
    ids = tok.apply_chat_template(CONVERSATION, tools=CLICK_TOOLS, add_generation_prompt=True,
                                  return_dict=False)
    assert tok.decode(ids) == text


def test_chat_template_round_trips_replies(tiny):
    """What the template writes for an assistant turn, parse_tool_calls reads back."""
    tok = AutoTokenizer.from_pretrained(tiny, local_files_only=True)
    for msg in (CONVERSATION[2], CONVERSATION[5]):
        rendered = tok.apply_chat_template([msg], tools=CLICK_TOOLS, tokenize=False)
        body = rendered.split("<|im_start|>assistant\n", 1)[1].split("<|im_end|>", 1)[0]
        text, calls = parse_tool_calls(body)
        assert text == msg["content"]
        want = [(c["function"]["name"], c["function"]["arguments"]) for c in msg["tool_calls"]]
        got = [(c.name, json.loads(c.arguments)) for c in calls]
        assert got == [(n, a if isinstance(a, dict) else json.loads(a)) for n, a in want]
        # ... and writing the parsed calls again gives the same turn.
        again = [{"role": "assistant", "content": text,
                  "tool_calls": [c.to_dict() for c in calls]}]
        assert tok.apply_chat_template(again, tools=CLICK_TOOLS, tokenize=False) == rendered
    assert body.endswith(format_tool_call("type", '{"ref": 4, "text": "hi"}'))


def test_assistant_mask_marks_model_tokens(tiny):
    tok = AutoTokenizer.from_pretrained(tiny, local_files_only=True)
    out = tok.apply_chat_template(CONVERSATION[:3], tools=CLICK_TOOLS, return_dict=True,
                                  return_assistant_tokens_mask=True)
    mine = [i for i, m in zip(out["input_ids"], out["assistant_masks"], strict=True) if m]
    assert tok.decode(mine) == (
        '<tool_call>\n{"name": "click", "arguments": {"ref": 3}}\n</tool_call><|im_end|>')


def test_parse_tool_calls_never_raises():
    text, calls = parse_tool_calls("thinking...\n" + format_tool_call("click", {"ref": 2}))
    assert text == "thinking..." and [(c.name, c.arguments) for c in calls] == [
        ("click", '{"ref": 2}')]
    bad = '<tool_call>\n{"name": "click", "arguments": {"ref": 2}\n</tool_call>'
    _, calls = parse_tool_calls(bad)
    assert calls[0].name == "click" and calls[0].arguments == '{"name": "click", "arguments": {"ref": 2}'
    _, calls = parse_tool_calls("<tool_call>garbage")  # cut off before </tool_call>
    assert calls[0].name == "" and calls[0].arguments == "garbage"
    _, calls = parse_tool_calls('<tool_call>{"name": "press", "arguments": "{\\"key\\": 1}"}'
                                "</tool_call>")
    assert calls[0].arguments == '{"key": 1}'  # a string of JSON is kept as written
    assert parse_tool_calls("no calls here") == ("no calls here", [])
    ids1 = [c.id for c in parse_tool_calls(format_tool_call("a", {}) * 2)[1]]
    ids2 = [c.id for c in parse_tool_calls(format_tool_call("a", {}) * 2)[1]]
    assert ids1 == ids2 and len(set(ids1)) == 2
