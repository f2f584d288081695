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


def check_tiny_model_episodes(tmp_path: Path, model_dir: Path, clis: dict[str, str], *,
                              turns: int, extra: dict[str, str] | None = None) -> None:
    """Each CLI of ``clis`` (name → its shell tool) on one code task behind ``tackroom
    serve`` with ``model_dir``, ``turns`` model calls at most, in one run: every agent turn
    has the served token ids and log-probs, the CLI's own system prompt and tools, and each
    episode ends as the model's own (no infra_error). ``extra``: more harness-file lines per
    CLI. The harness files are written to ``tmp_path`` (put it on the harness path)."""
    import tackroom
    from tackroom.core.policy import Sampling
    from tackroom.serve import ServerThread

    harnesses = []
    for cli in clis:
        short = tmp_path / f"{cli}-short.toml"
        short.write_text(f'extends = "{cli}"\n[budget]\nturns = {turns}\nwall_seconds = 300\n'
                         + (extra or {}).get(cli, ""))
        harnesses.append(str(short))
    with ServerThread(model_dir) as srv:
        run = tackroom.evaluate("code", tasks=["add-business-days"], harnesses=harnesses,
                                policies=[f"openai:{srv.model_name}"], base_url=srv.base_url,
                                seeds=[0], sampling=Sampling(max_tokens=8, logprobs=True),
                                store=tmp_path / "r.duckdb")
    episodes = {ep.harness: ep for ep in run.load_episodes()}
    assert sorted(episodes) == sorted(f"{cli}-short" for cli in clis)
    for cli, tool in clis.items():
        ep = episodes[f"{cli}-short"]
        agent = ep.meta["agent"]
        assert ep.outcome.value in ("failure", "timeout", "budget_exhausted"), (
            cli, ep.error, agent.get("output"))
        assert ep.turns and agent["calls"] == len(ep.turns), agent
        for turn in ep.turns:
            assert turn.token_ids and len(turn.token_ids) == len(turn.logprobs) <= 8
            assert turn.completion_tokens == len(turn.token_ids)
            assert turn.messages[0]["role"] == "system"  # the CLI's own, translated
        # The CLI's own tools, recorded for training: its shell tool among them.
        assert tool in [t["function"]["name"] for t in agent["tools"]]
