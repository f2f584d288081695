"""A one-layer chat model for the tests that put a real agent CLI in front of ``tackroom serve``.

The CLIs send their own prompts, 15-25k tokens each (Codex's, OpenCode's, Claude Code's
system prompt and tools), and a prefill that long costs seconds per layer on a CPU. The
tests are about the records (served token ids and log-probs on every turn, training on
them), not the model's depth: :func:`one_layer_chat_dir` is ``tiny_chat_dir``'s first
layer alone, with the same tokenizer and chat template. Import the fixture into a test
module to use it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import shared_dir


@pytest.fixture(scope="session")
def one_layer_chat_dir(tiny_chat_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny_chat_dir`` cut to its first decoder layer (built once per test run)."""

    def build(out: Path) -> None:
        from transformers import AutoModelForCausalLM

        shutil.copytree(tiny_chat_dir, out)  # tokenizer, chat template, model card
        model = AutoModelForCausalLM.from_pretrained(tiny_chat_dir, local_files_only=True)
        model.model.layers = model.model.layers[:1]
        model.config.num_hidden_layers = 1
        if getattr(model.config, "layer_types", None):
            model.config.layer_types = model.config.layer_types[:1]
        model.save_pretrained(out)

    return shared_dir(tmp_path_factory, "one-layer-chat", lambda root: build(
        root / "tiny-chat")) / "tiny-chat"
