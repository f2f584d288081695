"""`tackroom export-groups`: groups with advantages in the Parquet shapes verl and TRL read.

The CLI runs in this process (what it writes, prints and returns; a subprocess per call
would only add the package's import time).
"""

from __future__ import annotations

import json

import pytest

datasets = pytest.importorskip("datasets")

from inprocess_cli import run_here as run_cli  # noqa: E402

from tackroom.records import RecordStore  # noqa: E402
from tackroom.train.advantages import compute_advantages  # noqa: E402


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Expert episodes of two toy tasks under a tool-call harness, a text-command harness
    and a one-turn tool-call harness in which the two-step task cannot be finished."""
    root = tmp_path_factory.mktemp("export")
    (root / "harnesses").mkdir()
    (root / "harnesses" / "som-1turn.toml").write_text(
        'extends = "som-tools"\nname = "som-1turn"\nbudget.turns = 1\n')
    db = str(root / "r.duckdb")
    p = run_cli("eval", "--suite", "toy", "--tasks", "click-button,enter-text",
                "--harness", "som-tools,html-commands,som-1turn", "--policy", "expert",
                "--seeds", "0-2", "--db", db, cwd=root)
    assert p.returncode == 0, p.stderr
    with RecordStore(db, read_only=True) as store:
        run_id = store.latest_run_id()
    return root, db, run_id


def test_both_shapes_read_with_datasets_and_carry_groups_and_advantages(recorded):
    root, db, run_id = recorded
    p = run_cli("export-groups", run_id, "-o", str(root / "groups"), "--db", db,
                "--set", "grouping.group=cross", "--set", "data.reward=recorded", cwd=root)
    assert p.returncode == 0, p.stderr
    assert "in 2 groups (grouping.group = 'cross')" in p.stdout
    verl = datasets.load_dataset("parquet", data_files=str(root / "groups" / "verl.parquet"),
                                 split="train")
    trl = datasets.load_dataset("parquet", data_files=str(root / "groups" / "trl.parquet"),
                                split="train")
    with RecordStore(db, read_only=True) as store:
        episodes = [store.load_episode(e["episode_id"], run_id=run_id)
                    for e in store.episodes(run_id)]
    n_turns = sum(len(e.turns) for e in episodes)
    assert len(verl) == len(trl) == n_turns

    # verl's RL dataset: data_source, chat-message prompt, ability, reward_model, extra_info.
    assert verl.column_names == ["data_source", "prompt", "ability", "reward_model",
                                 "extra_info"]
    row = verl[0]
    assert row["data_source"] == "tackroom/toy" and row["ability"] == "agent"
    assert [m["role"] for m in row["prompt"]][:2] == ["system", "user"]
    assert row["reward_model"]["style"] == "rule"
    truth = json.loads(row["reward_model"]["ground_truth"])
    assert truth["suite"] == "toy" and truth["task"] == row["extra_info"]["task"]
    assert row["extra_info"]["split"] == "train" and row["extra_info"]["index"] == 0

    # TRL's conversational prompt-completion format, plus our columns.
    assert {"prompt", "completion", "tools", "advantage", "reward", "group", "task",
            "harness", "seed", "episode_id", "run_id", "turn"} <= set(trl.column_names)
    tool_rows = [r for r in trl if r["harness"] == "som-tools"]
    text_rows = [r for r in trl if r["harness"] == "html-commands"]
    # A tool call is the Hermes block the chat template renders; tools are the schemas.
    assert tool_rows[0]["completion"][0]["role"] == "assistant"
    assert tool_rows[0]["completion"][0]["content"].startswith("<tool_call>")
    assert json.loads(tool_rows[0]["tools"])[0]["type"] == "function"
    assert text_rows[0]["completion"][0]["content"].startswith("```")
    assert json.loads(text_rows[0]["tools"]) == []

    # Cross grouping pools the harnesses of a task: the advantages are the library's own.
    assert {r["group"] for r in trl} == {"toy/click-button", "toy/enter-text"}
    expect = compute_advantages(episodes, group="cross")
    by_episode = dict(zip([e.episode_id for e in episodes], expect.values, strict=True))
    assert any(abs(v) > 0.1 for v in expect.values)  # enter-text fails under som-1turn
    for r in trl:
        assert r["advantage"] == pytest.approx(by_episode[r["episode_id"]])
        assert r["reward"] == pytest.approx(
            next(e.reward for e in episodes if e.episode_id == r["episode_id"]))
    # The two files describe the same rows.
    assert [r["extra_info"]["advantage"] for r in verl] == [r["advantage"] for r in trl]


def test_bad_format_and_empty_selection_are_one_line(recorded):
    root, db, run_id = recorded
    p = run_cli("export-groups", run_id, "-o", str(root / "x"), "--format", "rlhf", "--db", db,
                cwd=root)
    assert p.returncode == 2 and "unknown export format 'rlhf'" in p.stderr
    assert "Traceback" not in p.stderr
    p = run_cli("export-groups", "no-such-run", "-o", str(root / "x"), "--db", db, cwd=root)
    assert p.returncode == 2 and "no run 'no-such-run'" in p.stderr
    p = run_cli("export-groups", run_id, "-o", str(root / "x"), "--db", db, "--harness",
                "nowhere", cwd=root)
    assert p.returncode == 2 and "no scored episodes match" in p.stderr
