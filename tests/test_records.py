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


@pytest.mark.parametrize("commit_interval", [0, 60])
def test_two_runs_of_the_same_grid_stay_independent(db: Path, commit_interval: float) -> None:
    """The episode id leaves the run out, so run-b's cells have run-a's ids; a
    second run must not replace (or move) the first run's records."""
    grid = range(4)
    run_a = [make_episode(i, run_id="run-a", n_turns=3, outcome=Outcome.SUCCESS) for i in grid]
    run_b = [make_episode(i, run_id="run-b", n_turns=1 + i % 2, outcome=Outcome.FAILURE)
             for i in grid]
    assert [e.episode_id for e in run_a] == [e.episode_id for e in run_b]
    with RecordStore(db, commit_interval=commit_interval) as store:
        store.start_run("run-a", "tackroom run", {}, n_planned=4)
        store.append_many(run_a)
        store.start_run("run-b", "tackroom run", {}, n_planned=4)
        for ep in run_b:  # with commit_interval=60 both runs share one queued batch
            store.append(ep)
        assert store.count() == 8 and store.count("run-a") == store.count("run-b") == 4
        assert store.episode_ids("run-a") == {e.episode_id: "success" for e in run_a}
        assert store.episode_ids("run-b") == {e.episode_id: "failure" for e in run_b}
        assert store.run("run-a")["n_episodes"] == store.run("run-b")["n_episodes"] == 4
        for a, b in zip(run_a, run_b, strict=True):
            assert store.load_episode(a.episode_id, run_id="run-a") == a
            assert store.load_episode(b.episode_id, run_id="run-b") == b
            assert store.turns(a.episode_id, run_id="run-a") == a.turns
            assert store.turns(b.episode_id, run_id="run-b") == b.turns
        assert list(store.iter_episodes("run-a", batch_size=3)) == run_a
        assert list(store.iter_episodes("run-b", batch_size=3)) == run_b
        assert sorted((e.run_id, e.seed, e.n_turns) for e in store.iter_episodes()) == sorted(
            (e.run_id, e.seed, e.n_turns) for e in run_a + run_b)
        n_turns = sum(e.n_turns for e in run_a + run_b)
        assert store.query("SELECT count(*) AS n FROM turns")[0]["n"] == n_turns
        assert store.query("SELECT count(*) AS n FROM turns t JOIN episodes e "
                           "USING (run_id, episode_id)")[0]["n"] == n_turns

        # A retry replaces the record of its own run only.
        retry = make_episode(0, run_id="run-b", n_turns=5, outcome=Outcome.TIMEOUT)
        store.append(retry)
        assert store.load_episode(retry.episode_id, run_id="run-b") == retry
        assert store.load_episode(retry.episode_id, run_id="run-a") == run_a[0]
        assert store.count() == 8

        # Deleting in one run leaves the other; without run_id, every run's record goes.
        assert store.delete_episodes([run_a[1].episode_id], run_id="run-a") == 1
        assert store.load_episode(run_b[1].episode_id, run_id="run-b") == run_b[1]
        with pytest.raises(RecordStoreError, match="in run 'run-a'"):
            store.load_episode(run_a[1].episode_id, run_id="run-a")
        assert store.delete_episodes([run_a[2].episode_id]) == 2
        assert store.count() == 5
        left = [run_a[0], run_a[3], retry, run_b[1], run_b[3]]
        assert store.query("SELECT count(*) AS n FROM turns")[0]["n"] == \
            sum(e.n_turns for e in left)
        assert sorted((e.run_id, e.episode_id) for e in store.iter_episodes()) == sorted(
            (e.run_id, e.episode_id) for e in left)


class StoreClock:
    """The store's ``time.time()``, moved by the test (``tick``): runs get distinct times."""

    def __init__(self) -> None:
        self.now = time.time()

    def time(self) -> float:
        return self.now

    def tick(self) -> None:
        self.now += 1.0


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> StoreClock:
    from tackroom.records import store

    fake = StoreClock()
    monkeypatch.setattr(store, "time", fake)
    return fake


def test_prefix_resolution_across_runs(db: Path, clock: StoreClock) -> None:
    with RecordStore(db) as store:
        # Names sort against creation order, and the older run writes last
        # (a resume): the most recent run is the one created last.
        store.start_run("run-z", "tackroom run", {}, n_planned=2)
        clock.tick()
        store.start_run("run-b", "tackroom run", {}, n_planned=2)
        newer = make_episode(1, run_id="run-b", eid="abc111", n_turns=1)
        older = make_episode(1, run_id="run-z", eid="abc111", n_turns=2)
        store.append(newer)
        store.append(older)
        store.append(make_episode(2, run_id="run-z", eid="abc222"))
        store.append(make_episode(3, run_id="run-z", eid="def333"))

        # One id in two runs is not ambiguous: the most recent run's record.
        assert store.resolve_episode_id("abc1") == "abc111"
        loaded = store.load_episode("abc1")
        assert loaded.run_id == "run-b" and loaded == newer
        assert store.turns("abc1") == newer.turns
        # run_id picks the run.
        assert store.load_episode("abc1", run_id="run-z") == older
        assert store.turns("abc111", run_id="run-z") == older.turns
        assert store.resolve_episode_id("abc", run_id="run-b") == "abc111"
        # Different ids are ambiguous, with or without a run.
        for run_id in (None, "run-z"):
            with pytest.raises(RecordStoreError, match="ambiguous") as info:
                store.resolve_episode_id("abc", run_id=run_id)
            assert "abc111" in info.value.what and "abc222" in info.value.what
        # An id recorded only in another run is not found in this one.
        with pytest.raises(RecordStoreError, match="no episode"):
            store.load_episode("def", run_id="run-b")
        assert store.load_episode("def").run_id == "run-z"
        # Runs without a ``runs`` row come after those with one.
        store.append(make_episode(1, run_id="unlisted", eid="abc111"))
        assert store.load_episode("abc111").run_id == "run-b"
        assert store.load_episode("abc111", run_id="unlisted").run_id == "unlisted"


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


def test_runs_counts_status_and_resume(db: Path, clock: StoreClock) -> None:
    outcomes = [Outcome.SUCCESS] * 3 + [Outcome.FAILURE, Outcome.TIMEOUT, Outcome.INFRA_ERROR]
    with RecordStore(db) as store:
        assert store.runs() == [] and store.latest_run_id() is None
        store.start_run("run-a", "tackroom run --api-key " + OPENAI_KEY,
                        {"policy": {"api_key": OPENAI_KEY, "model": "m"}}, n_planned=6)
        for i, o in enumerate(outcomes):
            store.append(make_episode(i, outcome=o))
        store.finish_run("run-a", "interrupted")
        clock.tick()
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
        # A second connection to the same database sees only committed rows. The bound is
        # generous: it only turns a commit that never comes into a failure, not a slow one.
        deadline = time.monotonic() + 60
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
    from tackroom.records import writer

    real_insert = writer.insert

    def broken(con: duckdb.DuckDBPyConnection, replace: bool) -> None:
        raise duckdb.IOException("disk full")

    with RecordStore(db, commit_interval=0.01) as store:
        monkeypatch.setattr(writer, "insert", broken)
        store.append(make_episode(1))
        deadline = time.monotonic() + 60  # a generous bound: never, not slowly, fails
        while store.writer.error is None:  # the background commit fails
            assert time.monotonic() < deadline
            time.sleep(0.01)
        monkeypatch.setattr(writer, "insert", real_insert)
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
    # Speed is reported, not asserted (a shared CI machine is noisy); bench/ measures it.
    print(f"append 1000 episodes: {write:.2f} s, read back: {read:.2f} s")


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


def test_registered_live_secret_is_scrubbed_whatever_it_looks_like(db: Path) -> None:
    from tackroom.core.secrets import register_secret, scrub_text

    live = "plain-live-value-7Qz9"  # no prefix or key name any pattern knows
    quoted = 'pass"with\\quote-9876'  # JSON-escaped inside a serialised document
    assert scrub_text(f"echo {live}") == f"echo {live}"  # unknown until registered
    assert register_secret(live) and register_secret(quoted)
    assert not register_secret("short") and not register_secret(None)
    assert scrub_text(f"echo {live}!") == "echo [redacted]!"
    assert scrub({"messages": [{"content": f"{live} and {quoted}"}]}) == {
        "messages": [{"content": "[redacted] and [redacted]"}]}
    assert scrub_text("short stays") == "short stays"
    ep = make_episode(7)
    ep.turns[0].raw_text = f"the server said {live} / {quoted}"
    with RecordStore(db) as store:
        store.start_run("run-a", "test", {}, 1)
        store.append(ep)
        dump = json.dumps(store.query("SELECT * FROM turns"), default=str)
    assert "the server said" in dump and live not in dump and "with\\\\quote" not in dump


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


# The tables as schema version 1 created them, frozen: episodes keyed by id alone.
V1_DDL = [
    "CREATE TABLE meta (schema_version INTEGER NOT NULL, created_at DOUBLE, "
    "tackroom_version TEXT)",
    """CREATE TABLE runs (run_id TEXT PRIMARY KEY, created_at DOUBLE NOT NULL,
        updated_at DOUBLE NOT NULL, finished_at DOUBLE, command TEXT, config JSON,
        status TEXT NOT NULL, manifest_hash TEXT, n_planned INTEGER)""",
    """CREATE TABLE episodes (episode_id TEXT PRIMARY KEY, run_id TEXT NOT NULL,
        task TEXT NOT NULL, suite TEXT, harness TEXT, harness_hash TEXT, policy TEXT,
        seed BIGINT, attempt INTEGER, sampling JSON, outcome TEXT NOT NULL, reward DOUBLE,
        instruction TEXT, error TEXT, n_turns INTEGER, prompt_tokens BIGINT,
        completion_tokens BIGINT, parse_errors INTEGER, started_at DOUBLE, ended_at DOUBLE,
        t_policy DOUBLE, t_env DOUBLE, t_harness DOUBLE, meta JSON, recorded_at DOUBLE)""",
    """CREATE TABLE turns (episode_id TEXT NOT NULL, idx INTEGER NOT NULL, messages JSON,
        raw_text TEXT, tool_calls JSON, parse_error TEXT, feedback TEXT, actions JSON,
        action_error TEXT, observation TEXT, reward DOUBLE, prompt_tokens INTEGER,
        completion_tokens INTEGER, token_ids INTEGER[], logprobs DOUBLE[], adapter TEXT,
        t_policy DOUBLE, t_env DOUBLE, t_harness DOUBLE, PRIMARY KEY (episode_id, idx))""",
]


def store_whole_messages(con: duckdb.DuckDBPyConnection, episodes: list[Episode], *,
                         keyed_by_run: bool = True) -> None:
    """Give every turn row its whole message list, as stores before version 5 did."""
    key = "run_id = ? AND episode_id = ?" if keyed_by_run else "episode_id = ?"
    for ep in episodes:
        for t in ep.turns:
            ids = [ep.run_id, ep.episode_id] if keyed_by_run else [ep.episode_id]
            con.execute(f"UPDATE turns SET messages = ? WHERE {key} AND idx = ?",
                        [json.dumps(t.messages, ensure_ascii=False), *ids, t.index])


def table_layout(path: Path) -> tuple[list, list]:
    """The columns and constraints of ``episodes`` and ``turns``."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        cols = con.execute(
            "SELECT table_name, column_index, column_name, data_type, is_nullable "
            "FROM duckdb_columns() WHERE database_name = current_database() "
            "AND table_name IN ('episodes', 'turns') ORDER BY ALL").fetchall()
        keys = con.execute(
            "SELECT table_name, constraint_type, constraint_column_names "
            "FROM duckdb_constraints() WHERE database_name = current_database() "
            "AND table_name IN ('episodes', 'turns') ORDER BY ALL").fetchall()
    finally:
        con.close()
    return cols, keys


def test_migrates_a_version_1_store(tmp_path: Path) -> None:
    episodes = [make_episode(1, n_turns=3), make_episode(2, n_turns=0,
                                                         outcome=Outcome.INFRA_ERROR),
                make_episode(3, run_id="run-b", n_turns=2)]
    fresh = tmp_path / "fresh.duckdb"
    with RecordStore(fresh) as store:
        store.start_run("run-a", "tackroom run", {}, n_planned=2)
        store.start_run("run-b", "tackroom run", {}, n_planned=1)
        store.append_many(episodes)
    # A version-1 file with the same records, written with version 1's tables.
    old = tmp_path / "old.duckdb"
    con = duckdb.connect(str(old))
    for sql in V1_DDL:
        con.execute(sql)
    con.execute("INSERT INTO meta VALUES (1, 1700000000.0, '0.0.1')")
    con.execute(f"ATTACH '{fresh}' AS fresh (READ_ONLY)")
    con.execute("INSERT INTO runs BY NAME SELECT * EXCLUDE (owner_host, owner_pid, heartbeat_at) "
                "FROM fresh.runs")
    con.execute("INSERT INTO episodes BY NAME SELECT * EXCLUDE (failure_mode) FROM fresh.episodes")
    con.execute("INSERT INTO turns BY NAME SELECT * EXCLUDE (run_id, messages_from, delegation, "
                "notes, side, thread, prompt_token_ids) FROM fresh.turns")
    store_whole_messages(con, episodes, keyed_by_run=False)
    con.close()

    with pytest.raises(RecordStoreError, match="old schema version 1"):
        RecordStore(old, read_only=True)
    with RecordStore(old) as store:  # migrates
        assert store.query("SELECT schema_version FROM meta") == [
            {"schema_version": SCHEMA_VERSION}]
        for ep in episodes:
            assert store.load_episode(ep.episode_id, run_id=ep.run_id) == ep
        assert store.query("SELECT run_id, count(*) AS n FROM turns GROUP BY ALL "
                           "ORDER BY ALL") == [{"run_id": "run-a", "n": 3},
                                               {"run_id": "run-b", "n": 2}]
        # Keyed by run now: the same cell in another run is a second record.
        again = make_episode(1, run_id="run-c", n_turns=1)
        store.append(again)
        assert store.load_episode(again.episode_id, run_id="run-a") == episodes[0]
        assert store.load_episode(again.episode_id, run_id="run-c") == again
    # The migrated tables are exactly what a new store creates.
    assert table_layout(old) == table_layout(fresh)
    assert SCHEMA_VERSION == 8


def test_train_steps_are_recorded_and_a_resumed_step_replaces_its_row(tmp_path: Path) -> None:
    with RecordStore(tmp_path / "r.duckdb") as store:
        store.start_run("sft-1", "tackroom sft", {}, n_planned=0)
        store.log_train_step("sft-1", 1, {"loss": 2.5, "lr": 1e-3})
        store.log_train_step("sft-1", 2, {"loss": 2.0, "lr": 1e-3})
        store.log_train_step("sft-1", 2, {"loss": 1.9, "lr": 1e-3})  # resumed: replaces
        assert store.train_steps("sft-1") == [{"step": 1, "loss": 2.5, "lr": 1e-3},
                                              {"step": 2, "loss": 1.9, "lr": 1e-3}]
        assert store.train_steps("other") == []


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
    # The child appends, makes the first 40 durable with flush() and says so, then keeps
    # appending (background commits, when commit_interval > 0) until it is killed mid-stream.
    # Waiting for its "flushed" line, not for a time, keeps the test independent of load.
    child = run_python(f"""
        from tackroom.records import RecordStore
        from tests.test_records import make_episode
        store = RecordStore({str(db)!r}, commit_interval={commit_interval})
        i = 0
        while True:
            store.append(make_episode(i, n_turns=1 + i % 6))
            i += 1
            if i == 40:
                store.flush()
                print("flushed", flush=True)
            print(i, flush=True)
    """)
    assert child.stdout is not None
    appended, flushed = 0, False
    while not flushed or appended < 80:
        line = child.stdout.readline()
        assert line, child.stderr.read() if child.stderr else "child died"
        if line.strip() == "flushed":
            flushed = True
        else:
            appended = int(line)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    with RecordStore(db) as store:  # replays the WAL
        rows = store.query("""
            SELECT e.episode_id, e.n_turns, count(t.idx) AS n_rows
            FROM episodes e LEFT JOIN turns t USING (run_id, episode_id) GROUP BY ALL""")
        if commit_interval == 0:
            assert len(rows) >= appended  # durable as soon as append returned
        assert len(rows) >= 40, "the flushed episodes were lost"
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


def test_exports_of_two_runs_of_the_same_grid(filled: RecordStore, tmp_path: Path) -> None:
    again = [make_episode(1, run_id="run-b", n_turns=2, outcome=Outcome.FAILURE),
             make_episode(2, run_id="run-b", n_turns=4)]
    filled.append_many(again)  # run-a's seeds 1 and 2, run again in run-b
    assert export_jsonl(filled, "run-a", tmp_path / "a.jsonl") == 3
    assert export_jsonl(filled, None, tmp_path / "all.jsonl") == 6
    lines = [json.loads(x) for x in (tmp_path / "all.jsonl").read_text().splitlines()]
    assert sorted((d["run_id"], d["seed"], len(d["turns"])) for d in lines) == [
        ("run-a", 1, 3), ("run-a", 2, 1), ("run-a", 3, 0),
        ("run-b", 1, 2), ("run-b", 2, 4), ("run-b", 4, 3)]

    assert export_parquet(filled, None, tmp_path / "all.parquet", batch_size=4) == 6
    rows = pq.read_table(tmp_path / "all.parquet").to_pylist()
    assert sorted((r["run_id"], r["seed"], len(r["turns"]), r["n_turns"]) for r in rows) == [
        ("run-a", 1, 3, 3), ("run-a", 2, 1, 1), ("run-a", 3, 0, 0),
        ("run-b", 1, 2, 2), ("run-b", 2, 4, 4), ("run-b", 4, 3, 3)]
    assert export_parquet(filled, "run-b", tmp_path / "b.parquet") == 3

    # One run: <out>/<episode_id>/; every run: <out>/<run_id>/<episode_id>/.
    assert export_atif(filled, "run-b", tmp_path / "atif-b") == 3
    assert len(list((tmp_path / "atif-b").glob("*/trajectory.json"))) == 3
    out = tmp_path / "atif-all"
    assert export_atif(filled, None, out) == 6
    paths = sorted(p.relative_to(out).parts[:2] for p in out.glob("*/*/trajectory.json"))
    eid = again[0].episode_id
    assert ("run-a", eid) in paths and ("run-b", eid) in paths and len(paths) == 6
    doc_a = json.loads((out / "run-a" / eid / "trajectory.json").read_text())
    doc_b = json.loads((out / "run-b" / eid / "trajectory.json").read_text())
    assert doc_a["session_id"] == doc_b["session_id"] == eid
    assert (doc_a["extra"]["run_id"], doc_b["extra"]["run_id"]) == ("run-a", "run-b")
    assert doc_a["final_metrics"]["extra"]["n_turns"] == 3
    assert doc_b["final_metrics"]["extra"]["n_turns"] == 2


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


def test_a_run_whose_process_died_shows_as_interrupted(tmp_path: Path) -> None:
    """A process that starts a run and dies (SIGKILL, a crash) leaves it `running` in the file;
    the store reports it as interrupted, and a live owner's run as running."""
    db = tmp_path / "r.duckdb"
    code = (f"from tackroom.records import RecordStore\n"
            f"s = RecordStore({str(db)!r}); s.start_run('dead', 'eval', {{}}, n_planned=1)\n"
            "s.close()\nimport os; os._exit(0)  # no finish_run\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    with RecordStore(db) as store:
        store.start_run("alive", "eval", {}, n_planned=1)
        runs = {r["run_id"]: r for r in store.runs()}
        raw = {r["run_id"]: r["status"] for r in store.query("SELECT run_id, status FROM runs")}
    assert runs["dead"]["status"] == "interrupted" and runs["dead"]["orphaned"]
    assert runs["alive"]["status"] == "running" and not runs["alive"]["orphaned"]
    assert raw == {"alive": "running", "dead": "running"}  # reading writes nothing
