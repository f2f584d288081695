"""Turn storage is linear in turns: each message is stored once (schema version 5).

Episodes come from real runs: the toy suite, the ``openai`` policy against a
scripted server on 127.0.0.1, and harnesses whose turn budget sets the length.
The old layout (every turn holding its whole conversation) is rebuilt with
version 4's tables, migrated, and must read, show and export exactly as the
new one does.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from conftest import run_cli

import tackroom
from tackroom.core.episode import Episode
from tackroom.records import SCHEMA_VERSION, RecordStore, export_atif, export_jsonl, export_parquet
from tackroom.records.deltas import decode, encode
from tackroom.testing.openai_server import ScriptedOpenAIServer, tool_call

# A valid action that never finishes the task, so every episode runs to its turn budget.
SCROLL = tool_call("scroll", {"direction": "down"})


def harness(tmp_path: Path, turns: int, history: int) -> Path:
    path = tmp_path / f"long-{turns}-{history}.toml"
    path.write_text(f'name = "long-{turns}-h{history}"\nextends = "som-tools"\n'
                    f"[loop]\nhistory = {history}\nmax_consecutive_errors = 1000\n"
                    f"[budget]\nturns = {turns}\n")
    return path


def run_long(tmp_path: Path, db: Path, turns_list: list[int], history: int = 1000,
             run_id: str | None = None) -> tackroom.Run:
    with ScriptedOpenAIServer(default=SCROLL) as srv:
        return tackroom.evaluate(
            "toy", tasks=["click-button"],
            harnesses=[str(harness(tmp_path, t, history)) for t in turns_list],
            policies=["openai:scripted-model"], base_url=srv.base_url, seeds=[0],
            store=db, run_id=run_id)


def stored_bytes(store: RecordStore, run_id: str, harness_name: str) -> int:
    """Bytes of every stored value of the episode's turns (text, JSON and lists)."""
    row = store.query(
        "SELECT sum(strlen(CAST(t.messages AS VARCHAR)) + coalesce(strlen("
        "CAST(t.tool_calls AS VARCHAR)), 0) + coalesce(strlen(t.observation), 0) "
        "+ coalesce(strlen(t.feedback), 0) + coalesce(strlen(t.raw_text), 0)) AS n "
        "FROM turns t JOIN episodes e USING (run_id, episode_id) "
        "WHERE e.run_id = ? AND e.harness = ?", [run_id, harness_name])
    return int(row[0]["n"])


def test_stored_bytes_grow_linearly_with_turns(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    run = run_long(tmp_path, db, [6, 12, 24])
    with RecordStore(db) as store:
        eps = {ep.harness: ep for ep in store.iter_episodes(run.id)}
        assert {name: ep.n_turns for name, ep in eps.items()} == {
            "long-6-h1000": 6, "long-12-h1000": 12, "long-24-h1000": 24}
        new = {n: stored_bytes(store, run.id, f"long-{n}-h1000") for n in (6, 12, 24)}
        # The same turns with whole conversations (the layout before version 5).
        whole = {n: sum(len(json.dumps(t.messages, ensure_ascii=False))
                        for t in eps[f"long-{n}-h1000"].turns) for n in (6, 12, 24)}
        # Turn 24 saw 24 replies and observations: the old layout is quadratic.
        assert whole[24] / whole[12] > 3.2 and whole[12] / whole[6] > 3.0
        # Each message once: doubling the turns doubles the bytes (plus the first turn's).
        assert 1.8 < new[24] / new[12] < 2.2, new
        assert 1.6 < new[12] / new[6] < 2.2, new
        # Most turns are deltas of the turn before.
        rows = store.query("SELECT idx, messages_from FROM turns WHERE run_id = ? "
                           "ORDER BY episode_id, idx", [run.id])
        assert all(r["messages_from"] == r["idx"] - 1 for r in rows if r["idx"] > 0)
        assert all(r["messages_from"] is None for r in rows if r["idx"] == 0)


def test_turns_read_back_exactly_with_and_without_a_history_window(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    live: list[Episode] = []
    with ScriptedOpenAIServer(default=SCROLL) as srv:
        run = tackroom.evaluate(
            "toy", tasks=["click-button", "enter-text"],
            harnesses=[str(harness(tmp_path, 9, 1000)), str(harness(tmp_path, 9, 2))],
            policies=["openai:scripted-model"], base_url=srv.base_url, seeds=[0, 1], store=db,
            on_episode=live.append)
        sent = [r.body["messages"] for r in srv.chat_requests]
    assert len(live) == 8 and all(ep.n_turns == 9 for ep in live)
    with RecordStore(db) as store:
        for ep in live:
            assert store.load_episode(ep.episode_id, run_id=run.id) == ep
            assert store.turns(ep.episode_id, run_id=run.id) == ep.turns
        stored = {(ep.task.split("/")[-1], ep.harness, ep.seed): ep for ep in store.iter_episodes(run.id)}
        # The windowed harness rewrites its first user message: still deltas, still exact.
        windowed = stored[("click-button", "long-9-h2", 0)]
        rows = store.query("SELECT idx, messages_from, CAST(messages AS VARCHAR) AS m "
                           "FROM turns WHERE run_id = ? AND episode_id = ? ORDER BY idx",
                           [run.id, windowed.episode_id])
        assert [r["messages_from"] for r in rows] == [None, *range(8)]
        assert any(isinstance(item, list) and item[0] > 1
                   for r in rows for item in json.loads(r["m"]))
        # What the model was sent is what the store gives back.
        got = [t.messages for ep in stored.values() for t in ep.turns]
        assert sorted(map(json.dumps, got)) == sorted(map(json.dumps, sent))


def test_delta_round_trip_on_edited_conversations() -> None:
    sys_m = {"role": "system", "content": "s"}
    msgs = [{"role": "user", "content": f"u{i}"} for i in range(10)]
    cases = [
        ([], [sys_m]),                                         # first turn
        ([sys_m, *msgs[:3]], [sys_m, *msgs[:5]]),              # grew
        ([sys_m, *msgs[:6]], [sys_m, {"role": "user", "content": "x"}, *msgs[3:7]]),  # window
        ([sys_m, *msgs], [*msgs[5:], sys_m]),                  # reordered
        ([sys_m, *msgs], []),                                  # emptied
        ([sys_m], [{"role": "user", "content": float("nan")}]),
    ]
    for base, messages in cases:
        delta = encode(base, messages)
        assert delta is not None
        assert json.dumps(decode(delta, base)) == json.dumps(messages)
    assert encode([sys_m], [sys_m, "not a message"]) is None
    with pytest.raises(ValueError, match="bad message delta item"):
        decode([[0, 5]], [sys_m])


# Version 4's turns table, frozen: every turn held its whole message list.
V4_TURNS = """CREATE TABLE turns (
  run_id TEXT NOT NULL, episode_id TEXT NOT NULL, idx INTEGER NOT NULL, messages JSON,
  raw_text TEXT, tool_calls JSON, parse_error TEXT, feedback TEXT, actions JSON,
  action_error TEXT, observation TEXT, reward DOUBLE, prompt_tokens INTEGER,
  completion_tokens INTEGER, token_ids INTEGER[], logprobs DOUBLE[], adapter TEXT,
  t_policy DOUBLE, t_env DOUBLE, t_harness DOUBLE,
  PRIMARY KEY (run_id, episode_id, idx)
)"""


def old_layout_copy(src: Path, dst: Path, episodes: list[Episode]) -> None:
    """``dst``: the records of ``src`` as a version-4 store wrote them."""
    con = duckdb.connect(str(dst))
    con.execute(f"ATTACH '{src}' AS src (READ_ONLY)")
    for table in ("meta", "runs", "episodes", "train_steps"):
        con.execute(f"CREATE TABLE {table} AS SELECT * FROM src.{table}")
    con.execute("UPDATE meta SET schema_version = 4")
    con.execute(V4_TURNS)
    con.execute("INSERT INTO turns BY NAME SELECT * EXCLUDE (messages_from, delegation, notes, "
                "side, thread, prompt_token_ids) FROM src.turns")
    for ep in episodes:
        for t in ep.turns:
            con.execute("UPDATE turns SET messages = ? WHERE run_id = ? AND episode_id = ? "
                        "AND idx = ?", [json.dumps(t.messages, ensure_ascii=False),
                                        ep.run_id, ep.episode_id, t.index])
    con.close()


def exports(db: Path, run_id: str, out: Path) -> dict[str, object]:
    out.mkdir()
    with RecordStore(db) as store:
        export_jsonl(store, run_id, out / "e.jsonl")
        export_parquet(store, run_id, out / "e.parquet")
        export_atif(store, run_id, out / "atif")
        first = store.episodes(run_id)[0]["episode_id"]
    shown = run_cli("show", run_id, first, "--full", "--db", str(db), cwd=out)
    assert shown.returncode == 0, shown.stderr
    return {"jsonl": (out / "e.jsonl").read_text(),
            "parquet": pq.read_table(out / "e.parquet").to_pylist(),
            "atif": {p.relative_to(out / "atif").as_posix(): p.read_text()
                     for p in sorted((out / "atif").rglob("*.json"))},
            "show": shown.stdout.replace(str(db), "DB")}


def test_old_layout_migrates_and_shows_and_exports_unchanged(tmp_path: Path) -> None:
    new_db = tmp_path / "new.duckdb"
    run = run_long(tmp_path, new_db, [5], history=2, run_id="long-run")
    with RecordStore(new_db) as store:
        # The old layout has no prompt token ids (schema 8): the fresh store drops them
        # too, so that both hold the same records and their exports can be compared.
        store.query("UPDATE turns SET prompt_token_ids = NULL")
        episodes = list(store.iter_episodes(run.id))
    assert all(t.prompt_token_ids is None for e in episodes for t in e.turns)
    old_db = tmp_path / "old.duckdb"
    old_layout_copy(new_db, old_db, episodes)
    con = duckdb.connect(str(old_db), read_only=True)
    old_text = dict(((e, i), m) for e, i, m in con.execute(
        "SELECT episode_id, idx, CAST(messages AS VARCHAR) FROM turns").fetchall())
    con.close()
    with RecordStore(old_db) as store:  # opening for writing migrates
        assert store.query("SELECT schema_version FROM meta") == [
            {"schema_version": SCHEMA_VERSION}]
        assert list(store.iter_episodes(run.id)) == episodes
        froms = store.query("SELECT idx, messages_from FROM turns ORDER BY idx")
        assert [r["messages_from"] for r in froms] == [None, 0, 1, 2, 3]
    migrated = exports(old_db, run.id, tmp_path / "migrated")
    fresh = exports(new_db, run.id, tmp_path / "fresh")
    assert migrated == fresh
    # The exports hold each turn's whole list, byte for byte as the old layout stored it.
    (row,) = fresh["parquet"]
    assert {(row["episode_id"], t["index"]): t["messages"] for t in row["turns"]} == old_text
    (line,) = fresh["jsonl"].splitlines()
    ep = json.loads(line)
    assert [t["messages"] for t in ep["turns"]] == [
        json.loads(old_text[(ep["episode_id"], i)]) for i in range(5)]
    assert "Turn 5" in fresh["show"] or "turn 5" in fresh["show"].lower(), fresh["show"]
