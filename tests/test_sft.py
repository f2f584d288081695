"""`tackroom sft`: what it trains on, what it writes, and that a crashed run resumes exactly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("torch")

import torch  # noqa: E402
from conftest import CLI_ENV, tackroom_killed_after  # noqa: E402
from inprocess_cli import run_here  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from tackroom.models import init_model  # noqa: E402
from tackroom.models.corpus import harness_corpus  # noqa: E402
from tackroom.records import RecordStore  # noqa: E402
from tackroom.train.sft import IGNORE, Selection, build_dataset  # noqa: E402

#: One torch thread, here and in the killed CLI process: a 1M-parameter model is fastest
#: that way.
ONE_THREAD = {"OMP_NUM_THREADS": "1"}
ENV = {**os.environ, **CLI_ENV, **ONE_THREAD}
torch.set_num_threads(1)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``tackroom ARGS`` in this process: these tests are about what the commands do and
    say, not about their process (the crash is a real subprocess), and a subprocess would
    spend seconds importing torch and transformers for each call."""
    return run_here(*args, cwd=cwd, env_extra=ONE_THREAD)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A tiny model and a store of toy expert episodes under two harnesses."""
    root = tmp_path_factory.mktemp("sft")
    init_model(root / "tiny", size="tiny", corpus=harness_corpus(seeds=(0,)), seed=0)
    p = cli("eval", "--suite", "toy", "--tasks", "click-button,focus-text,enter-text",
            "--harness", "som-tools,html-commands", "--policy", "expert", "--seeds", "0-3",
            "--db", str(root / "r.duckdb"), cwd=root)
    assert p.returncode == 0, p.stderr
    return root


def test_examples_supervise_exactly_the_reply(workdir: Path) -> None:
    tok = AutoTokenizer.from_pretrained(workdir / "tiny")
    with RecordStore(workdir / "r.duckdb", read_only=True) as store:
        data = build_dataset(store, Selection(harnesses=("som-tools",)), tok)
        episodes = {e["episode_id"]: e for e in store.episodes()}
        first = store.load_episode(data.examples[0].episode_id)
    # One example per recorded turn of the 3 tasks x 4 seeds selected.
    assert data.episodes == 12
    assert len(data.examples) == sum(episodes[e]["n_turns"] for e in
                                     {ex.episode_id for ex in data.examples})
    ex = data.examples[0]
    supervised = [t for t in ex.labels if t != IGNORE]
    text = tok.decode(supervised, skip_special_tokens=False)
    call = first.turns[ex.turn].tool_calls[0]["function"]
    # The reply (a Hermes tool call) and its end-of-turn token, nothing else:
    assert text.startswith("<tool_call>") and text.endswith("</tool_call><|im_end|>")
    assert json.loads(text.removeprefix("<tool_call>").removesuffix("</tool_call><|im_end|>"))[
        "name"] == call["name"]
    # Everything before the reply is masked (system prompt, page, budget line).
    first_label = next(i for i, t in enumerate(ex.labels) if t != IGNORE)
    assert all(t == IGNORE for t in ex.labels[:first_label])
    assert "Page:" in tok.decode(ex.input_ids[:first_label])


def test_text_harness_replies_are_supervised_too(workdir: Path) -> None:
    tok = AutoTokenizer.from_pretrained(workdir / "tiny")
    with RecordStore(workdir / "r.duckdb", read_only=True) as store:
        data = build_dataset(store, Selection(harnesses=("html-commands",), tasks=("focus-*",)),
                             tok)
        ep = store.load_episode(data.examples[0].episode_id)
    ex = data.examples[0]
    text = tok.decode([t for t in ex.labels if t != IGNORE], skip_special_tokens=False)
    assert text == ep.turns[ex.turn].raw_text + "<|im_end|>"


def test_sft_trains_checkpoints_records_metrics_and_the_model_evaluates(workdir: Path,
                                                                         tmp_path: Path) -> None:
    db = str(workdir / "r.duckdb")
    out = tmp_path / "sft"
    p = cli("sft", str(workdir / "tiny"), "--out", str(out), "--db", db,
            "--harness", "som-tools", "--tasks", "focus-text", "--epochs", "12",
            "--batch-size", "4", "--lr", "3e-3", "--warmup", "2", "--checkpoint-every", "5",
            "--threads", "1", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "trained: 4 examples, 12 steps" in p.stdout
    final = out / "final"
    assert (final / "model.safetensors").is_file() and (final / "tokenizer.json").is_file()
    card = json.loads((final / "tackroom_model.json").read_text())
    assert card["sft"]["examples"] == 4 and card["sft"]["steps"] == 12
    with RecordStore(db, read_only=True) as store:
        run = next(r for r in store.runs() if r["command"] == "sft")
        steps = store.train_steps(run["run_id"])
    assert [s["step"] for s in steps] == list(range(1, 13))
    # Over-fitting four examples: the loss falls far (the model learns the replies).
    assert steps[-1]["loss"] < 0.5 * steps[0]["loss"]
    # The result is a policy: it runs under the harness and its episodes are recorded.
    p = cli("eval", "--suite", "toy", "--tasks", "focus-text", "--harness", "som-tools",
            "--policy", f"hf:{final}", "--seeds", "0", "--db", db, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    # An existing output is not overwritten by accident.
    p = cli("sft", str(workdir / "tiny"), "--out", str(out), "--db", db, cwd=tmp_path)
    assert p.returncode == 2 and "--resume" in p.stderr and "Traceback" not in p.stderr


def test_a_killed_run_resumes_to_the_same_weights(workdir: Path, tmp_path: Path) -> None:
    db = str(workdir / "r.duckdb")
    args = ["sft", str(workdir / "tiny"), "--db", db, "--harness", "som-tools",
            "--epochs", "4", "--batch-size", "4", "--checkpoint-every", "2",
            "--threads", "1"]
    p = cli(*args, "--out", str(tmp_path / "whole"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    # The crash: `tackroom sft` SIGKILLs itself the moment checkpoint-4 is written.
    crashed = subprocess.run([*tackroom_killed_after("checkpoint-4"), *args, "--out",
                              str(tmp_path / "killed")], cwd=tmp_path, env=ENV,
                             capture_output=True, text=True, timeout=600)
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr
    assert (tmp_path / "killed" / "checkpoint-4").is_dir()
    assert not (tmp_path / "killed" / "final").exists()
    p = cli(*args, "--out", str(tmp_path / "killed"), "--resume", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "resumed from step" in p.stdout
    whole = load_file(tmp_path / "whole" / "final" / "model.safetensors")
    resumed = load_file(tmp_path / "killed" / "final" / "model.safetensors")
    assert whole.keys() == resumed.keys()
    for k in whole:
        torch.testing.assert_close(resumed[k], whole[k], rtol=0, atol=1e-6)


def test_lora_sft_writes_an_adapter_the_hf_policy_serves(workdir: Path, tmp_path: Path) -> None:
    db = str(workdir / "r.duckdb")
    out = tmp_path / "lora"
    p = cli("sft", str(workdir / "tiny"), "--out", str(out), "--db", db, "--lora",
            "--lora-rank", "4", "--lora-alpha", "8", "--tasks", "focus-text",
            "--harness", "som-tools", "--epochs", "2", "--threads", "1", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert (out / "final" / "adapter_model.safetensors").is_file()
    assert not (out / "final" / "model.safetensors").exists()
    spec = f"hf:{workdir / 'tiny'}:{out / 'final'}"
    assert spec in p.stdout
    p = cli("eval", "--suite", "toy", "--tasks", "focus-text", "--harness", "som-tools",
            "--policy", spec, "--seeds", "0", "--db", db, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    with RecordStore(db, read_only=True) as store:
        ep = store.episodes(store.latest_run_id())[0]
        turns = store.turns(ep["episode_id"], run_id=ep["run_id"])
    assert turns[0].adapter == "final"


def test_bad_input_is_one_line(workdir: Path, tmp_path: Path) -> None:
    db = str(workdir / "r.duckdb")
    p = cli("sft", str(tmp_path / "nope"), "--out", str(tmp_path / "o"), "--db", db,
            cwd=tmp_path)
    assert p.returncode == 2 and "no model directory at" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    p = cli("sft", str(workdir / "tiny"), "--out", str(tmp_path / "o"), "--db", db,
            "--tasks", "no-such-task", cwd=tmp_path)
    assert p.returncode == 2 and "no recorded episodes match" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("option", "named"), [
    (["--lr", "-1"], "--lr: lr = -1.0 is out of range"),
    (["--lr", "nan"], "--lr: lr = nan"),
    (["--epochs", "0"], "--epochs: sft.epochs = 0.0"),
    (["--batch-size", "99999999"], "--batch-size: sft.batch_size = 99999999"),
    (["--grad-accum", "0"], "--grad-accum"),
    (["--max-length", "0"], "--max-length"),
    (["--warmup", "-5"], "--warmup"),
    (["--lora", "--lora-rank", "0"], "--lora-rank"),
    (["--threads", "0"], "--threads"),
    (["--seed", "-1"], "--seed"),
])
def test_every_numeric_option_is_bounded_before_anything_loads(
        workdir: Path, tmp_path: Path, option: list[str], named: str) -> None:
    p = cli("sft", str(workdir / "tiny"), "--out", str(tmp_path / "o"), "--db",
            str(tmp_path / "r.duckdb"), *option, cwd=tmp_path)
    assert p.returncode == 2 and named in p.stderr and "out of range" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "sft steps" not in p.stdout
    assert not (tmp_path / "o").exists()
