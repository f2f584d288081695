"""The record store and its exports, against a real DuckDB file in tmp_path."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from tackroom.core.episode import Episode, Outcome, Turn, episode_id
from tackroom.core.errors import RecordStoreError
from tackroom.records import (
    SCHEMA_VERSION,
    RecordStore,
    export_atif,
    export_jsonl,
    export_parquet,
    scrub,
)

REPO = Path(__file__).resolve().parents[1]

OPENAI_KEY = "sk-proj-AbC123xyz789SECRETkey"
BEARER = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXRva2Vu.sig123"


def make_episode(i: int = 0, *, run_id: str = "run-a", n_turns: int = 3,
                 outcome: Outcome = Outcome.SUCCESS, task: str = "toy/click-button",
                 harness: str = "numbered-tools", eid: str | None = None) -> Episode:
    """A realistic episode: tool calls, a parse error, token ids and log-probs."""
    sampling = {"temperature": 0.7, "top_p": 1.0, "max_tokens": 256, "seed": None,
                "logprobs": True}
    system = {"role": "system", "content": "You operate a web page. Use the tools."}
    user = {"role": "user", "content": f"Click the button labelled OK. (seed {i})"}
    history: list[dict] = [system, user]
    turns = []
    for k in range(n_turns):
        call = {"id": f"call_{i}_{k}", "type": "function",
                "function": {"name": "click", "arguments": json.dumps({"ref": k + 1})}}
        turns.append(Turn(
            index=k,
            messages=[dict(m) for m in history],
            raw_text=f"I will click element {k + 1}." if k % 2 == 0 else None,
            tool_calls=[call],
            parse_error="no action found" if k == 1 else None,
            feedback="Observation:\n[1] button OK" if k < n_turns - 1 else None,
            actions=[{"kind": "click", "ref": k + 1}],
            action_error="no element 9" if k == 2 else None,
            observation=f"[1] button 'OK'\n[2] text 'turn {k}'",
            reward=1.0 if k == n_turns - 1 and outcome is Outcome.SUCCESS else 0.0,
            prompt_tokens=120 + k,
            completion_tokens=7,
            token_ids=[101, 2023 + k, 102],
            logprobs=[-0.01, -1.25, -0.5],
            adapter="lora-7" if k == 0 else None,
            t_policy=0.25,
            t_env=0.125,
            t_harness=0.0625,
        ))
        history.append({"role": "assistant", "content": turns[-1].raw_text,
                        "tool_calls": [call]})
        history.append({"role": "tool", "tool_call_id": call["id"],
                        "content": f"clicked {k + 1}"})
    return Episode(
        episode_id=eid or episode_id(task, "hash-1", "openai:gpt-x", sampling, i),
        run_id=run_id, task=task, suite="toy", harness=harness, harness_hash="hash-1",
        policy="openai:gpt-x", seed=i, attempt=0, sampling=sampling, outcome=outcome,
        reward=1.0 if outcome is Outcome.SUCCESS else 0.0,
        instruction="Click the button labelled OK.",
        error="browser crashed" if outcome is Outcome.INFRA_ERROR else None,
        turns=turns, started_at=1_700_000_000.0 + i, ended_at=1_700_000_003.5 + i,
        t_policy=0.25 * n_turns, t_env=0.125 * n_turns, t_harness=0.0625 * n_turns,
        meta={"browser": {"pool_slot": 2}, "tags": ["a", "b"]},
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "runs" / "tackroom.duckdb"


def run_python(code: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


# ---------------------------------------------------------------------------
# Round trips and the basic API
# ---------------------------------------------------------------------------

def test_round_trip_every_field(db: Path) -> None:
    ep = make_episode(1, n_turns=4)
    with RecordStore(db) as store:
        store.start_run("run-a", "tackroom run toy", {"grid": {"seeds": 1}}, n_planned=1)
        store.append(ep)
    assert db.exists()
    with RecordStore(db) as store:
        loaded = store.load_episode(ep.episode_id)
        assert loaded == ep  # every field, every turn
        assert loaded.outcome is Outcome.SUCCESS
        assert store.load_episode(ep.episode_id[:8]) == ep  # unique prefix
        assert store.turns(ep.episode_id) == ep.turns
        [row] = store.episodes("run-a")
        assert row["n_turns"] == 4 and row["parse_errors"] == 1
        assert row["prompt_tokens"] == ep.prompt_tokens
        assert row["completion_tokens"] == ep.completion_tokens
        assert row["sampling"] == ep.sampling and row["meta"] == ep.meta
        with pytest.raises(RecordStoreError, match="no episode"):
            store.load_episode("does-not-exist")


def test_episode_without_turns_and_none_token_data(db: Path) -> None:
    ep = make_episode(2, n_turns=0, outcome=Outcome.INFRA_ERROR)
    ep2 = make_episode(3, n_turns=1)
    ep2.turns[0].token_ids = None
    ep2.turns[0].logprobs = None
    with RecordStore(db) as store:
        store.append_many([ep, ep2])
        assert store.load_episode(ep.episode_id) == ep
        assert store.load_episode(ep2.episode_id) == ep2


def test_invalid_episodes_fail_append_not_the_batch(db: Path) -> None:
    bad = make_episode(7, n_turns=2)
    bad.turns[1].index = 0
    with RecordStore(db, commit_interval=60) as store:
        good = make_episode(8)
        store.append(good)
        with pytest.raises(ValueError, match="duplicate turn indexes"):
            store.append(bad)
        with pytest.raises(ValueError, match="outcome"):
            store.append(make_episode(9, outcome="won"))  # type: ignore[arg-type]
        assert store.episode_ids("run-a") == {good.episode_id: "success"}
        assert store.delete_episodes([good.episode_id, "missing"]) == 1
        assert store.count() == 0 and store.query("SELECT * FROM turns") == []


def test_same_id_replaces_never_duplicates(db: Path) -> None:
    first = make_episode(5, n_turns=4, outcome=Outcome.INFRA_ERROR)
    retry = make_episode(5, n_turns=2, outcome=Outcome.SUCCESS)
    assert first.episode_id == retry.episode_id
    with RecordStore(db, commit_interval=0) as store:
        store.append(first)
        store.append(retry)  # committed separately: delete + insert
        assert store.count() == 1
        assert store.load_episode(first.episode_id) == retry
        assert store.query("SELECT count(*) AS n FROM turns")[0]["n"] == 2
    with RecordStore(db, commit_interval=60) as store:
        store.append(first)
        store.append(retry)  # both queued in one batch: the newest wins
        store.append(make_episode(6))
        assert store.count() == 2
        assert store.load_episode(first.episode_id).n_turns == 2


def test_episode_ids_for_resume(db: Path) -> None:
    with RecordStore(db) as store:
        done = make_episode(1, outcome=Outcome.SUCCESS)
        failed = make_episode(2, outcome=Outcome.INFRA_ERROR)
        other = make_episode(3, run_id="run-b")
        store.append_many([done, failed, other])
        assert store.episode_ids("run-a") == {done.episode_id: "success",
                                              failed.episode_id: "infra_error"}
        assert store.episode_ids("run-b") == {other.episode_id: "success"}
        assert store.episode_ids("nope") == {}


def test_runs_counts_status_and_resume(db: Path) -> None:
    outcomes = [Outcome.SUCCESS] * 3 + [Outcome.FAILURE, Outcome.TIMEOUT, Outcome.INFRA_ERROR]
    with RecordStore(db) as store:
        assert store.runs() == [] and store.latest_run_id() is None
        store.start_run("run-a", "tackroom run --api-key " + OPENAI_KEY,
                        {"policy": {"api_key": OPENAI_KEY, "model": "m"}}, n_planned=6)
        for i, o in enumerate(outcomes):
            store.append(make_episode(i, outcome=o))
        store.finish_run("run-a", "interrupted")
        time.sleep(0.01)
        store.start_run("run-b", "tackroom run", {}, n_planned=2)
        store.append(make_episode(99, run_id="run-b", outcome=Outcome.FAILURE))

        runs = store.runs()
        assert [r["run_id"] for r in runs] == ["run-b", "run-a"]  # newest first
        assert store.latest_run_id() == "run-b"
        a = store.run("run-a")
        assert a is not None
        assert a["status"] == "interrupted" and a["n_planned"] == 6
        assert a["n_episodes"] == 6
        assert a["outcomes"] == {"success": 3, "failure": 1, "budget_exhausted": 0,
                                 "timeout": 1, "infra_error": 1}
        assert a["n_scored"] == 5
        assert a["success_rate"] == pytest.approx(3 / 5)  # infra errors are not failures
        assert a["config"] == {"policy": {"api_key": "[redacted]", "model": "m"}}
        assert OPENAI_KEY not in a["command"]
        assert store.run("missing") is None

        created = a["created_at"]
        store.start_run("run-a", "tackroom run --resume", {"x": 1}, n_planned=6)  # resume
        a = store.run("run-a")
        assert a["status"] == "running" and a["created_at"] == created
        assert a["config"]["policy"]["model"] == "m"  # the original config is kept
        store.finish_run("run-a")
        assert store.run("run-a")["status"] == "finished"
        with pytest.raises(ValueError):
            store.finish_run("run-a", "done")


def test_episode_filters_and_query(db: Path) -> None:
    with RecordStore(db) as store:
        store.append_many([
            make_episode(1, task="toy/a", outcome=Outcome.SUCCESS),
            make_episode(2, task="toy/a", outcome=Outcome.FAILURE),
            make_episode(3, task="toy/b", outcome=Outcome.TIMEOUT, harness="html"),
            make_episode(4, task="toy/b", run_id="run-b"),
        ])
        assert len(store.episodes()) == 4
        assert len(store.episodes("run-a")) == 3
        assert [r["seed"] for r in store.episodes("run-a", task="toy/a")] == [1, 2]
        assert len(store.episodes(outcome=Outcome.SUCCESS)) == 2
        assert len(store.episodes("run-a", outcome=["failure", "timeout"])) == 2
        assert [r["seed"] for r in store.episodes(harness="html")] == [3]
        assert len(store.episodes(policy="openai:gpt-x", limit=2)) == 2
        with pytest.raises(ValueError, match="unknown episode filter"):
            store.episodes(colour="red")
        rows = store.query("SELECT task, count(*) AS n FROM episodes WHERE run_id = ? "
                           "GROUP BY task ORDER BY task", ["run-a"])
        assert rows == [{"task": "toy/a", "n": 2}, {"task": "toy/b", "n": 1}]
        assert store.arrow("SELECT * FROM turns").num_rows == 12


def test_background_commit_without_flush(db: Path) -> None:
    store = RecordStore(db, commit_interval=0.05)
    try:
        ep = make_episode(1)
        store.append(ep)
        # A second connection to the same database sees only committed rows.
        deadline = time.monotonic() + 5
        other = duckdb.connect(str(db))
        try:
            while other.execute("SELECT count(*) FROM episodes").fetchone()[0] == 0:
                assert time.monotonic() < deadline, "the background commit never happened"
                time.sleep(0.02)
            assert other.execute("SELECT count(*) FROM turns").fetchone()[0] == 3
        finally:
            other.close()
    finally:
        store.close()
    with pytest.raises(RecordStoreError, match="closed"):
        store.append(make_episode(2))
    store.close()  # twice is fine


def test_failed_background_commit_is_reported(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_insert = RecordStore._insert

    def broken(con: duckdb.DuckDBPyConnection, replace: bool) -> None:
        raise duckdb.IOException("disk full")

    with RecordStore(db, commit_interval=0.01) as store:
        monkeypatch.setattr(RecordStore, "_insert", staticmethod(broken))
        store.append(make_episode(1))
        deadline = time.monotonic() + 5
        while store._flush_error is None:  # the background commit fails
            assert time.monotonic() < deadline
            time.sleep(0.01)
        monkeypatch.setattr(RecordStore, "_insert", staticmethod(real_insert))
        later = make_episode(2)
        with pytest.raises(RecordStoreError, match="disk full"):
            store.append(later)  # reported once, on the next call ...
        assert store.episode_ids("run-a") == {later.episode_id: "success"}  # ... which is kept


def test_read_only(db: Path) -> None:
    with pytest.raises(RecordStoreError, match="no record store"):
        RecordStore(db, read_only=True)
    with RecordStore(db) as store:
        store.append(make_episode(1))
    with RecordStore(db, read_only=True) as ro:
        assert ro.count() == 1
        with pytest.raises(RecordStoreError, match="read-only"):
            ro.append(make_episode(2))


def test_thousand_episodes_is_fast(db: Path) -> None:
    episodes = [make_episode(i, n_turns=5) for i in range(1000)]
    with RecordStore(db) as store:
        store.append(make_episode(-1))  # warm up (imports, first commit)
        store.flush()
        t0 = time.perf_counter()
        for ep in episodes:
            store.append(ep)
        store.flush()
        write = time.perf_counter() - t0
        t0 = time.perf_counter()
        assert sum(1 for _ in store.iter_episodes("run-a")) == 1001
        read = time.perf_counter() - t0
    assert write < 5.0, f"appending 1000 episodes took {write:.2f}s"
    assert read < 5.0, f"reading 1000 episodes took {read:.2f}s"


# ---------------------------------------------------------------------------
# Secrets
# ---------------------------------------------------------------------------

def test_scrub_rules() -> None:
    data = {
        "api_key": "abc", "apiKey": "abc", "X-Api-Key": "abc", "password": "hunter2",
        "client_secret": "s", "access_token": "t", "token": "t", "hf_token": "t",
        "headers": {"Authorization": "Bearer abc.def.ghi"},
        "token_ids": [1, 2], "prompt_tokens": 3, "completion_tokens": 4, "max_tokens": 5,
        "eos_token": "</s>", "api_key_unset": None,
        "logprobs": [{"token": "Hi", "logprob": -0.1}],
        "text": f"use {OPENAI_KEY} with Authorization: Bearer {BEARER} ok",
        "cmd": "OPENAI_API_KEY=abc123 tackroom run --password=pw1",
        "args": '{"password": "hunter2", "ref": 3}',
        "list": [("sk-abcdefgh12345",)],
        "n": 7,
    }
    out = scrub(data)
    for key in ("api_key", "apiKey", "X-Api-Key", "password", "client_secret", "access_token",
                "token", "hf_token"):
        assert out[key] == "[redacted]", key
    assert out["headers"] == {"Authorization": "[redacted]"}
    assert out["token_ids"] == [1, 2] and out["prompt_tokens"] == 3
    assert out["completion_tokens"] == 4 and out["max_tokens"] == 5
    assert out["eos_token"] == "</s>" and out["api_key_unset"] is None
    assert out["logprobs"] == [{"token": "Hi", "logprob": -0.1}]
    assert out["text"] == "use [redacted] with Authorization: Bearer [redacted] ok"
    assert "abc123" not in out["cmd"] and "pw1" not in out["cmd"]
    assert json.loads(out["args"]) == {"password": "[redacted]", "ref": 3}
    assert out["list"] == [["[redacted]"]] and out["n"] == 7
    assert data["api_key"] == "abc"  # the input is not modified
    # Ordinary text survives.
    for text in ("Press the key Enter", "task-12345678 done", "tokens used: 5",
                 "Bearer of bad news", "the author wrote"):
        assert scrub(text) == text


def test_secrets_never_reach_the_store_or_exports(db: Path, tmp_path: Path) -> None:
    ep = make_episode(1)
    ep.turns[0].messages[1]["content"] += f" My key is {OPENAI_KEY}."
    ep.turns[1].raw_text = f'curl -H "Authorization: Bearer {BEARER}" https://x'
    ep.turns[1].tool_calls[0]["function"]["arguments"] = json.dumps(
        {"ref": 2, "api_key": OPENAI_KEY})
    ep.turns[2].observation = f"env: OPENAI_API_KEY={OPENAI_KEY}"
    ep.meta["request"] = {"headers": {"Authorization": f"Bearer {BEARER}"}}
    ep.error = f"401 for key {OPENAI_KEY}"
    with RecordStore(db) as store:
        store.start_run("run-a", f"tackroom run --api-key {OPENAI_KEY}",
                        {"api_key": OPENAI_KEY, "headers": {"authorization": BEARER}}, 1)
        store.append(ep)
        dumped = json.dumps([store.query(f"SELECT * FROM {t}")
                             for t in ("runs", "episodes", "turns", "meta")], default=str)
        assert "[redacted]" in dumped
        n_jsonl = export_jsonl(store, "run-a", tmp_path / "out.jsonl")
        n_parquet = export_parquet(store, "run-a", tmp_path / "out.parquet")
        n_atif = export_atif(store, "run-a", tmp_path / "atif")
    assert n_jsonl == n_parquet == n_atif == 1
    texts = [dumped, (tmp_path / "out.jsonl").read_text(),
             json.dumps(pq.read_table(tmp_path / "out.parquet").to_pylist(), default=str),
             next((tmp_path / "atif").rglob("trajectory.json")).read_text()]
    raw = b"".join(p.read_bytes() for p in db.parent.iterdir() if p.is_file())
    for secret in (OPENAI_KEY, BEARER, OPENAI_KEY[8:], BEARER[:20]):
        for text in texts:
            assert secret not in text
        assert secret.encode() not in raw


# ---------------------------------------------------------------------------
# Opening: versions, foreign files, locks, crashes
# ---------------------------------------------------------------------------

def test_newer_schema_version_is_refused(db: Path) -> None:
    with RecordStore(db) as store:
        store.append(make_episode(1))
    con = duckdb.connect(str(db))
    con.execute("UPDATE meta SET schema_version = ?", [SCHEMA_VERSION + 1])
    con.close()
    with pytest.raises(RecordStoreError) as info:
        RecordStore(db)
    err = info.value
    assert "schema version" in err.what and str(db) in err.where and "upgrade" in err.fix


def test_foreign_files_are_refused(tmp_path: Path) -> None:
    not_duckdb = tmp_path / "notes.duckdb"
    not_duckdb.write_text("hello\n" * 1000)
    with pytest.raises(RecordStoreError, match="not a DuckDB"):
        RecordStore(not_duckdb)
    other = tmp_path / "other.duckdb"
    con = duckdb.connect(str(other))
    con.execute("CREATE TABLE stuff (x INTEGER)")
    con.close()
    with pytest.raises(RecordStoreError, match="not a tackroom record store"):
        RecordStore(other)


def test_locked_by_another_process(db: Path) -> None:
    with RecordStore(db) as store:
        store.append(make_episode(1))
    child = run_python(f"""
        import sys, time
        from tackroom.records import RecordStore
        store = RecordStore({str(db)!r})
        print("ready", flush=True)
        time.sleep(60)
    """)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.strip() == "ready", child.stderr.read() if child.stderr else line
        with pytest.raises(RecordStoreError) as info:
            RecordStore(db)
        err = info.value
        assert "another tackroom process" in err.what
        assert err.where == str(db) and err.fix
    finally:
        child.kill()
        child.wait()
    with RecordStore(db) as store:  # the lock dies with the process
        assert store.count() == 1


@pytest.mark.parametrize("commit_interval", [0, 0.02])
def test_sigkill_leaves_whole_episodes(db: Path, commit_interval: float) -> None:
    child = run_python(f"""
        import time
        from tackroom.records import RecordStore
        from tests.test_records import make_episode
        store = RecordStore({str(db)!r}, commit_interval={commit_interval})
        i = 0
        while True:
            store.append(make_episode(i, n_turns=1 + i % 6))
            i += 1
            print(i, flush=True)
            time.sleep(0.001)
    """)
    assert child.stdout is not None
    appended = 0
    started = deadline = None
    # Let it run for a while (several background commits), then kill it mid-stream.
    while started is None or appended < 40 or time.monotonic() < started + 1.0:
        line = child.stdout.readline()
        assert line, child.stderr.read() if child.stderr else "child died"
        appended = int(line)
        if started is None:
            started, deadline = time.monotonic(), time.monotonic() + 20
        assert time.monotonic() < deadline
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    with RecordStore(db) as store:  # replays the WAL
        rows = store.query("""
            SELECT e.episode_id, e.n_turns, count(t.idx) AS n_rows
            FROM episodes e LEFT JOIN turns t USING (episode_id) GROUP BY ALL""")
        if commit_interval == 0:
            assert len(rows) >= appended  # durable as soon as append returned
        assert rows, "nothing was committed"
        assert all(r["n_turns"] == r["n_rows"] for r in rows)
        assert store.query("SELECT count(*) AS n FROM turns WHERE episode_id NOT IN "
                           "(SELECT episode_id FROM episodes)")[0]["n"] == 0
        for r in rows[:5]:
            assert store.load_episode(r["episode_id"]).n_turns == r["n_turns"]


# ---------------------------------------------------------------------------
# Exports
# ---------------------------------------------------------------------------

@pytest.fixture
def filled(db: Path) -> RecordStore:
    store = RecordStore(db)
    store.start_run("run-a", "tackroom run", {}, n_planned=3)
    store.append_many([make_episode(1, n_turns=3), make_episode(2, n_turns=1,
                                                                 outcome=Outcome.FAILURE),
                       make_episode(3, n_turns=0, outcome=Outcome.INFRA_ERROR),
                       make_episode(4, run_id="run-b")])
    yield store
    store.close()


def test_export_jsonl(filled: RecordStore, tmp_path: Path) -> None:
    path = tmp_path / "exports" / "run-a.jsonl"
    assert export_jsonl(filled, "run-a", path) == 3
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [d["seed"] for d in lines] == [1, 2, 3]
    first = lines[0]
    assert first["outcome"] == "success" and first["n_turns"] == 3
    assert len(first["turns"]) == 3
    assert first["turns"][0]["token_ids"] == [101, 2023, 102]
    assert first["turns"][1]["parse_error"] == "no action found"
    assert first["turns"][0]["messages"][0]["role"] == "system"
    assert export_jsonl(filled, None, tmp_path / "all.jsonl") == 4
    assert export_jsonl(filled, "nope", tmp_path / "none.jsonl") == 0


def test_export_parquet_reads_with_datasets(filled: RecordStore, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    datasets = pytest.importorskip("datasets")
    path = tmp_path / "run-a.parquet"
    assert export_parquet(filled, "run-a", path, batch_size=2) == 3  # two batches
    ds = datasets.load_dataset("parquet", data_files=str(path), split="train",
                               cache_dir=str(tmp_path / "hf-cache"))
    assert ds.num_rows == 3
    rows = sorted(ds, key=lambda r: r["seed"])
    assert [r["outcome"] for r in rows] == ["success", "failure", "infra_error"]
    assert rows[0]["success"] is True and rows[1]["success"] is False
    assert [len(r["turns"]) for r in rows] == [3, 1, 0]
    turn = rows[0]["turns"][1]
    assert turn["index"] == 1 and turn["parse_error"] == "no action found"
    assert turn["token_ids"] == [101, 2024, 102]
    assert turn["logprobs"] == pytest.approx([-0.01, -1.25, -0.5])
    assert json.loads(turn["messages"])[1]["role"] == "user"
    assert json.loads(rows[0]["sampling"])["temperature"] == 0.7
    # An empty selection still writes a readable, typed file.
    empty = tmp_path / "empty.parquet"
    assert export_parquet(filled, "nope", empty) == 0
    assert pq.read_table(empty).num_rows == 0
    assert "turns" in pq.read_schema(empty).names


def check_atif(doc: dict) -> None:
    """The rules of Harbor's ATIF-v1.4 models (required fields, agent-only
    fields, sequential step ids, tool-call references)."""
    assert doc["schema_version"] == "ATIF-v1.4"
    assert isinstance(doc["session_id"], str) and doc["session_id"]
    assert set(doc) <= {"schema_version", "session_id", "agent", "steps", "notes",
                        "final_metrics", "extra"}
    agent = doc["agent"]
    assert isinstance(agent["name"], str) and isinstance(agent["version"], str)
    assert set(agent) <= {"name", "version", "model_name", "extra"}
    assert doc["steps"], "at least one step"
    step_fields = {"step_id", "timestamp", "source", "model_name", "reasoning_effort",
                   "message", "reasoning_content", "tool_calls", "observation", "metrics",
                   "extra"}
    for n, step in enumerate(doc["steps"], start=1):
        assert set(step) <= step_fields
        assert step["step_id"] == n
        assert step["source"] in ("system", "user", "agent")
        assert isinstance(step["message"], str)
        if step["source"] != "agent":
            for field in ("model_name", "reasoning_effort", "reasoning_content", "tool_calls",
                          "metrics"):
                assert field not in step
        ids = set()
        for call in step.get("tool_calls", []):
            assert set(call) == {"tool_call_id", "function_name", "arguments"}
            assert isinstance(call["arguments"], dict)
            ids.add(call["tool_call_id"])
        if "observation" in step:
            for result in step["observation"]["results"]:
                assert set(result) <= {"source_call_id", "content", "subagent_trajectory_ref"}
                if result.get("source_call_id") is not None:
                    assert result["source_call_id"] in ids
        if "metrics" in step:
            assert set(step["metrics"]) <= {"prompt_tokens", "completion_tokens",
                                            "cached_tokens", "cost_usd", "prompt_token_ids",
                                            "completion_token_ids", "logprobs", "extra"}
        if "timestamp" in step:
            assert step["timestamp"].endswith("Z")
    assert set(doc.get("final_metrics", {})) <= {
        "total_prompt_tokens", "total_completion_tokens", "total_cached_tokens",
        "total_cost_usd", "total_steps", "extra"}


def test_export_atif(filled: RecordStore, tmp_path: Path) -> None:
    out = tmp_path / "atif"
    assert export_atif(filled, "run-a", out) == 3
    docs = {p.parent.name: json.loads(p.read_text()) for p in out.glob("*/trajectory.json")}
    assert len(docs) == 3
    for doc in docs.values():
        check_atif(doc)
    ep = make_episode(1, n_turns=3)
    doc = docs[ep.episode_id]
    assert doc["session_id"] == ep.episode_id
    assert doc["agent"] == {"name": "tackroom/numbered-tools", "version": "hash-1",
                            "model_name": "openai:gpt-x", "extra": doc["agent"]["extra"]}
    extra = doc["extra"]
    assert (extra["harness"], extra["harness_hash"], extra["outcome"], extra["reward"],
            extra["seed"]) == ("numbered-tools", "hash-1", "success", 1.0, 1)
    sources = [s["source"] for s in doc["steps"]]
    assert sources == ["system", "user", "agent", "agent", "agent"]
    assert doc["steps"][1]["message"].startswith("Click the button")
    first = doc["steps"][2]
    assert first["message"] == "I will click element 1."
    assert first["tool_calls"] == [{"tool_call_id": "call_1_0", "function_name": "click",
                                    "arguments": {"ref": 1}}]
    # What the model saw next: the tool message in the next turn's prompt.
    assert first["observation"] == {"results": [{"content": "clicked 1",
                                                 "source_call_id": "call_1_0"}]}
    assert first["metrics"] == {"prompt_tokens": 120, "completion_tokens": 7,
                                "completion_token_ids": [101, 2023, 102],
                                "logprobs": [-0.01, -1.25, -0.5]}
    assert first["extra"]["actions"] == [{"kind": "click", "ref": 1}]
    assert doc["steps"][3]["extra"]["parse_error"] == "no action found"
    last = doc["steps"][4]  # last turn: the recorded action error and observation
    contents = [r["content"] for r in last["observation"]["results"]]
    assert contents[0] == "no element 9" and contents[-1].startswith("[1] button")
    assert doc["final_metrics"]["total_prompt_tokens"] == ep.prompt_tokens
    assert doc["final_metrics"]["total_steps"] == 5
    # An episode that died before the first model call still has a valid trajectory.
    crashed = docs[make_episode(3, n_turns=0, outcome=Outcome.INFRA_ERROR).episode_id]
    assert [s["source"] for s in crashed["steps"]] == ["user"]
    assert crashed["extra"]["outcome"] == "infra_error"
    assert crashed["extra"]["error"] == "browser crashed"
