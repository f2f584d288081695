"""The record store's tables: their columns, the DDL, and the migrations.

Schema version 8 (:data:`SCHEMA_VERSION`) has five tables. Times are Unix
seconds (``DOUBLE``), like the times on :class:`~tackroom.core.episode.Episode`;
``JSON`` columns hold scrubbed JSON text (see :mod:`tackroom.core.secrets`)::

    meta(schema_version, created_at, tackroom_version)
        one row: the layout version of the file and the tackroom that made it.
    runs(run_id PK, created_at, updated_at, finished_at, command, config JSON,
         status, manifest_hash, n_planned, owner_host, owner_pid, heartbeat_at)
        one row per run: the command line, the config snapshot ``--resume``
        re-reads, ``status`` (one of :data:`RUN_STATUSES`), the hash of the
        harness manifest, how many cells the run planned, and the process that
        runs it (host, pid, when it last committed episodes) — a ``running`` run
        whose process is gone is reported as ``interrupted``.
    episodes(episode_id, run_id, task, suite, harness, harness_hash, policy,
             seed, attempt, sampling JSON, outcome, reward, instruction, error,
             n_turns, prompt_tokens, completion_tokens, parse_errors,
             started_at, ended_at, t_policy, t_env, t_harness, meta JSON,
             recorded_at, failure_mode, PK (run_id, episode_id))
        one row per episode: its grid cell (task, harness and its hash,
        policy, seed, attempt, sampling), its ``outcome``
        (:class:`~tackroom.core.episode.Outcome`), reward, the instruction
        shown, the infra error if any, totals over its turns, seconds per
        phase, free-form ``meta``, when it was written, and ``failure_mode``
        (why a failed episode failed, in the suite's words, or ``NULL``).
    turns(run_id, episode_id, idx, messages JSON, raw_text, tool_calls JSON,
          parse_error, feedback, actions JSON, action_error, observation,
          reward, prompt_tokens, completion_tokens, token_ids INTEGER[],
          logprobs DOUBLE[], adapter, t_policy, t_env, t_harness,
          messages_from, delegation JSON, notes JSON, side, thread,
          prompt_token_ids INTEGER[], PK (run_id, episode_id, idx))
        one row per model call: the exact messages the model saw — each
        message stored once: ``messages`` is a delta of turn
        ``messages_from``'s messages (:mod:`tackroom.records.deltas`; the whole
        list when ``messages_from`` is NULL, as for a first turn), so read
        turns through the store or the exports, which rebuild them — what it
        wrote (text, tool calls), why that could not be parsed, the feedback
        shown, the actions sent and the environment's rejection, the next
        observation, reward, token counts, the completion's token ids and
        log-probs, the LoRA adapter that produced it, seconds per phase, and
        ``delegation``: the turn's decision points and who acted
        (:mod:`tackroom.harness.delegation`; ``NULL`` without a ``[delegation]`` slot),
        ``notes``: what the policy could not take from the model server as sent
        (a usage count or log-probs that were not finite numbers, recorded as
        missing), a JSON list of lines (``NULL``: none), ``side``: an agent
        CLI's side call's label (title, summary, subagent, count_tokens, side;
        ``NULL``: an agent turn), ``thread``: the call sequence the turn continues
        (0 the first), ``prompt_token_ids``: the prompt as the backend tokenised
        it (``NULL`` when it returned none).
    train_steps(run_id, step, metrics JSON, recorded_at, PK (run_id, step))
        one row per optimiser step of a training run (SFT, RL).

Join ``turns`` to ``episodes`` on ``(run_id, episode_id)``.

A file with an older ``schema_version`` is migrated in place when opened for
writing (:func:`migrate`, one transaction: 1→2 re-keyed episodes and turns by
run, 2→3 added ``episodes.failure_mode`` and ``train_steps``, 3→4 the run's owner
and heartbeat, 4→5 stored each turn's messages as a delta, 5→6 added
``turns.delegation``, 6→7 added ``turns.notes``, 7→8 ``turns.side``, ``turns.thread``
and ``turns.prompt_token_ids``); a newer one is
refused. To change a table: bump :data:`SCHEMA_VERSION`, change the column
lists here and add the step to :data:`MIGRATIONS`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence

import duckdb
import pyarrow as pa

from tackroom.core.errors import RecordStoreError

__all__ = [
    "SCHEMA_VERSION", "RUN_STATUSES", "RUN_COLUMNS", "EPISODE_COLUMNS", "TURN_COLUMNS",
    "EPISODE_SCHEMA", "TURN_SCHEMA", "EPISODE_FIELDS", "TURN_FIELDS", "JSON_EPISODE_FIELDS",
    "JSON_TURN_FIELDS", "DERIVED_EPISODE_FIELDS", "TRAIN_STEPS_SQL", "MIGRATIONS", "create_sql",
    "ensure_schema", "migrate",
]

#: Version of the table layout this code writes. Bump it and add a migration
#: to ``MIGRATIONS`` whenever a table changes.
SCHEMA_VERSION = 8

#: The values of ``runs.status``.
RUN_STATUSES = ("running", "finished", "interrupted")

RUN_COLUMNS: list[tuple[str, str]] = [
    ("run_id", "TEXT PRIMARY KEY"),
    ("created_at", "DOUBLE NOT NULL"),
    ("updated_at", "DOUBLE NOT NULL"),
    ("finished_at", "DOUBLE"),
    ("command", "TEXT"),
    ("config", "JSON"),
    ("status", "TEXT NOT NULL"),
    ("manifest_hash", "TEXT"),
    ("n_planned", "INTEGER"),
    # The process that is running it: a run whose owner died shows as interrupted.
    ("owner_host", "TEXT"),
    ("owner_pid", "INTEGER"),
    ("heartbeat_at", "DOUBLE"),
]

# (column, SQL type, arrow type) for the two tables written by ``append``.
EPISODE_COLUMNS: list[tuple[str, str, pa.DataType]] = [
    ("episode_id", "TEXT NOT NULL", pa.string()),
    ("run_id", "TEXT NOT NULL", pa.string()),
    ("task", "TEXT NOT NULL", pa.string()),
    ("suite", "TEXT", pa.string()),
    ("harness", "TEXT", pa.string()),
    ("harness_hash", "TEXT", pa.string()),
    ("policy", "TEXT", pa.string()),
    ("seed", "BIGINT", pa.int64()),
    ("attempt", "INTEGER", pa.int32()),
    ("sampling", "JSON", pa.string()),
    ("outcome", "TEXT NOT NULL", pa.string()),
    ("reward", "DOUBLE", pa.float64()),
    ("instruction", "TEXT", pa.string()),
    ("error", "TEXT", pa.string()),
    ("n_turns", "INTEGER", pa.int32()),
    ("prompt_tokens", "BIGINT", pa.int64()),
    ("completion_tokens", "BIGINT", pa.int64()),
    ("parse_errors", "INTEGER", pa.int32()),
    ("started_at", "DOUBLE", pa.float64()),
    ("ended_at", "DOUBLE", pa.float64()),
    ("t_policy", "DOUBLE", pa.float64()),
    ("t_env", "DOUBLE", pa.float64()),
    ("t_harness", "DOUBLE", pa.float64()),
    ("meta", "JSON", pa.string()),
    ("recorded_at", "DOUBLE", pa.float64()),
    ("failure_mode", "TEXT", pa.string()),
]

TURN_COLUMNS: list[tuple[str, str, pa.DataType]] = [
    ("run_id", "TEXT NOT NULL", pa.string()),
    ("episode_id", "TEXT NOT NULL", pa.string()),
    ("idx", "INTEGER NOT NULL", pa.int32()),
    ("messages", "JSON", pa.string()),
    ("raw_text", "TEXT", pa.string()),
    ("tool_calls", "JSON", pa.string()),
    ("parse_error", "TEXT", pa.string()),
    ("feedback", "TEXT", pa.string()),
    ("actions", "JSON", pa.string()),
    ("action_error", "TEXT", pa.string()),
    ("observation", "TEXT", pa.string()),
    ("reward", "DOUBLE", pa.float64()),
    ("prompt_tokens", "INTEGER", pa.int32()),
    ("completion_tokens", "INTEGER", pa.int32()),
    ("token_ids", "INTEGER[]", pa.list_(pa.int32())),
    ("logprobs", "DOUBLE[]", pa.list_(pa.float64())),
    ("adapter", "TEXT", pa.string()),
    ("t_policy", "DOUBLE", pa.float64()),
    ("t_env", "DOUBLE", pa.float64()),
    ("t_harness", "DOUBLE", pa.float64()),
    # ``messages`` is a delta of this turn's messages (NULL: the whole list).
    ("messages_from", "INTEGER", pa.int32()),
    # The decision points of the turn and who acted at them (NULL: no [delegation] slot).
    ("delegation", "JSON", pa.string()),
    # What the policy could not take from the server as sent (NULL: nothing).
    ("notes", "JSON", pa.string()),
    # A side call's label (NULL: an agent turn), the call sequence, the served prompt ids.
    ("side", "TEXT", pa.string()),
    ("thread", "INTEGER", pa.int32()),
    ("prompt_token_ids", "INTEGER[]", pa.list_(pa.int32())),
]

EPISODE_SCHEMA = pa.schema([(name, typ) for name, _, typ in EPISODE_COLUMNS])
TURN_SCHEMA = pa.schema([(name, typ) for name, _, typ in TURN_COLUMNS])

EPISODE_FIELDS = tuple(name for name, _, _ in EPISODE_COLUMNS)
TURN_FIELDS = tuple(name for name, _, _ in TURN_COLUMNS)
JSON_EPISODE_FIELDS = ("sampling", "meta")
JSON_TURN_FIELDS = ("messages", "tool_calls", "actions", "delegation", "notes")
# Episode columns that are derived from the turns or are bookkeeping, not
# constructor arguments of ``Episode``.
DERIVED_EPISODE_FIELDS = ("n_turns", "prompt_tokens", "completion_tokens", "parse_errors",
                           "recorded_at")


#: Metrics of training runs (SFT, RL), one row per optimiser step.
TRAIN_STEPS_SQL = """CREATE TABLE train_steps (
  run_id TEXT NOT NULL, step INTEGER NOT NULL, metrics JSON, recorded_at DOUBLE,
  PRIMARY KEY (run_id, step)
)"""


def create_sql() -> list[str]:
    def cols(spec: Iterable[tuple[str, str]]) -> str:
        return ",\n  ".join(f"{name} {sql}" for name, sql in spec)

    return [
        "CREATE TABLE meta (schema_version INTEGER NOT NULL, created_at DOUBLE, "
        "tackroom_version TEXT)",
        f"CREATE TABLE runs (\n  {cols(RUN_COLUMNS)}\n)",
        f"CREATE TABLE episodes (\n  {cols((n, s) for n, s, _ in EPISODE_COLUMNS)},\n"
        "  PRIMARY KEY (run_id, episode_id)\n)",
        f"CREATE TABLE turns (\n  {cols((n, s) for n, s, _ in TURN_COLUMNS)},\n"
        "  PRIMARY KEY (run_id, episode_id, idx)\n)",
        TRAIN_STEPS_SQL,
    ]


# Version 1 keyed episodes by ``episode_id`` alone (turns by ``(episode_id,
# idx)``), so a second run over the same grid replaced the first run's
# episodes. Version 2 keys them by ``(run_id, episode_id)`` and gives turns a
# ``run_id``. DuckDB cannot change a primary key in place, so the two tables
# are rebuilt and copied. The DDL is frozen here as version 2 had it: a later
# version's migration starts from exactly this. (Turns without an episode,
# which version 1 never wrote, have no run to take and are dropped.)
_V1_TO_V2 = [
    """CREATE TABLE episodes_v2 (
  episode_id TEXT NOT NULL, run_id TEXT NOT NULL, task TEXT NOT NULL, suite TEXT,
  harness TEXT, harness_hash TEXT, policy TEXT, seed BIGINT, attempt INTEGER,
  sampling JSON, outcome TEXT NOT NULL, reward DOUBLE, instruction TEXT, error TEXT,
  n_turns INTEGER, prompt_tokens BIGINT, completion_tokens BIGINT, parse_errors INTEGER,
  started_at DOUBLE, ended_at DOUBLE, t_policy DOUBLE, t_env DOUBLE, t_harness DOUBLE,
  meta JSON, recorded_at DOUBLE,
  PRIMARY KEY (run_id, episode_id)
)""",
    "INSERT INTO episodes_v2 BY NAME SELECT * FROM episodes",
    """CREATE TABLE turns_v2 (
  run_id TEXT NOT NULL, episode_id TEXT NOT NULL, idx INTEGER NOT NULL, messages JSON,
  raw_text TEXT, tool_calls JSON, parse_error TEXT, feedback TEXT, actions JSON,
  action_error TEXT, observation TEXT, reward DOUBLE, prompt_tokens INTEGER,
  completion_tokens INTEGER, token_ids INTEGER[], logprobs DOUBLE[], adapter TEXT,
  t_policy DOUBLE, t_env DOUBLE, t_harness DOUBLE,
  PRIMARY KEY (run_id, episode_id, idx)
)""",
    "INSERT INTO turns_v2 BY NAME "
    "SELECT e.run_id, t.* FROM turns t JOIN episodes e USING (episode_id)",
    "DROP TABLE turns",
    "DROP TABLE episodes",
    "ALTER TABLE episodes_v2 RENAME TO episodes",
    "ALTER TABLE turns_v2 RENAME TO turns",
]

# Version 3 adds the failure mode of an episode (why a coding episode failed:
# dropped requirement, broke existing behaviour, ...) and the per-step metrics
# of training runs.
_V2_TO_V3 = [
    "ALTER TABLE episodes ADD COLUMN failure_mode TEXT",
    TRAIN_STEPS_SQL,
]

_V3_TO_V4 = [
    "ALTER TABLE runs ADD COLUMN owner_host TEXT",
    "ALTER TABLE runs ADD COLUMN owner_pid INTEGER",
    "ALTER TABLE runs ADD COLUMN heartbeat_at DOUBLE",
]



def _turns_as_deltas(con: duckdb.DuckDBPyConnection) -> None:
    """Version 5 stores each turn's messages as a delta of the turn before.

    Reads the whole lists one batch of episodes at a time (so memory stays
    bounded on big stores), encodes them as :func:`~tackroom.records.rows.turn_rows`
    does, and writes the deltas back. The stored lists are already scrubbed.
    """
    import json

    from tackroom.records.deltas import encode

    con.execute("ALTER TABLE turns ADD COLUMN messages_from INTEGER")
    keys = con.execute("SELECT DISTINCT run_id, episode_id FROM turns "
                       "WHERE messages IS NOT NULL ORDER BY ALL").fetchall()
    con.execute("CREATE TEMP TABLE _deltas (run_id TEXT, episode_id TEXT, idx INTEGER, "
                "messages JSON, messages_from INTEGER)")
    for start in range(0, len(keys), _MIGRATE_BATCH):
        chunk = keys[start:start + _MIGRATE_BATCH]
        rows = con.execute(
            "WITH k AS (SELECT unnest(?::VARCHAR[]) AS run_id, unnest(?::VARCHAR[]) AS episode_id) "
            "SELECT t.run_id, t.episode_id, t.idx, CAST(t.messages AS VARCHAR) FROM turns t "
            "JOIN k USING (run_id, episode_id) ORDER BY t.run_id, t.episode_id, t.idx",
            [[k[0] for k in chunk], [k[1] for k in chunk]]).fetchall()
        out: list[tuple[str, str, int, str, int]] = []
        base: tuple[str, str, int, list] | None = None
        for run_id, episode_id, idx, text in rows:
            messages = json.loads(text) if text is not None else []
            if base is not None and base[:2] == (run_id, episode_id):
                delta = encode(base[3], messages)
                if delta is not None:
                    out.append((run_id, episode_id, idx,
                                json.dumps(delta, ensure_ascii=False), base[2]))
            base = (run_id, episode_id, idx, messages)
        if out:
            batch = pa.table([pa.array(col) for col in zip(*out, strict=True)],
                             names=["run_id", "episode_id", "idx", "messages", "messages_from"])
            con.register("_delta_batch", batch)
            con.execute("INSERT INTO _deltas SELECT * FROM _delta_batch")
            con.unregister("_delta_batch")
    con.execute("UPDATE turns SET messages = d.messages, messages_from = d.messages_from "
                "FROM _deltas d WHERE turns.run_id = d.run_id "
                "AND turns.episode_id = d.episode_id AND turns.idx = d.idx")
    con.execute("DROP TABLE _deltas")


_MIGRATE_BATCH = 256

#: ``MIGRATIONS[v]`` turns a version-``v`` store into a version-``v+1`` one:
#: SQL statements, or functions of the connection for what SQL cannot say.
#: The steps run in one transaction with the ``meta`` update.
MIGRATIONS: dict[int, Sequence[str | Callable[[duckdb.DuckDBPyConnection], None]]] = {
    1: _V1_TO_V2, 2: _V2_TO_V3, 3: _V3_TO_V4, 4: [_turns_as_deltas],
    5: ["ALTER TABLE turns ADD COLUMN delegation JSON"],
    6: ["ALTER TABLE turns ADD COLUMN notes JSON"],
    7: ["ALTER TABLE turns ADD COLUMN side TEXT", "ALTER TABLE turns ADD COLUMN thread INTEGER",
        "UPDATE turns SET thread = 0",  # one sequence: what every turn before was
        "ALTER TABLE turns ADD COLUMN prompt_token_ids INTEGER[]"]}


def ensure_schema(con: duckdb.DuckDBPyConnection, where: str, read_only: bool) -> None:
    """Create the tables in an empty file, or check (and migrate) an existing store.

    Raises:
        RecordStoreError: the file has other tables, an empty or newer
            ``meta``, or needs creating or migrating while ``read_only``.
    """
    tables = {r[0] for r in con.execute(
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema = 'main' AND table_catalog = current_database()").fetchall()}
    if "meta" not in tables:
        if tables:
            raise RecordStoreError(
                f"not a tackroom record store (has tables {sorted(tables)} but no `meta`)",
                where, "pass the path of a tackroom store, or a new file")
        if read_only:
            raise RecordStoreError("empty record store", where,
                                   "run `tackroom eval` first, or pass the right --db path")
        _create(con)
        return
    rows = con.execute("SELECT max(schema_version) FROM meta").fetchall()
    version = rows[0][0] if rows else None
    if version is None:
        raise RecordStoreError("record store has an empty `meta` table", where,
                               "restore the file from a backup or start a new store")
    if version > SCHEMA_VERSION:
        raise RecordStoreError(
            f"record store has schema version {version}, newer than this tackroom "
            f"understands ({SCHEMA_VERSION})",
            where, "upgrade tackroom (pip install -U tackroom) to read it")
    if version < SCHEMA_VERSION:
        if read_only:
            raise RecordStoreError(
                f"record store has old schema version {version} (current "
                f"{SCHEMA_VERSION})", where, "open it once without read_only to migrate it")
        migrate(con, version, where)


def _create(con: duckdb.DuckDBPyConnection) -> None:
    from tackroom.core.version import __version__

    con.begin()
    try:
        for sql in create_sql():
            con.execute(sql)
        con.execute("INSERT INTO meta VALUES (?, ?, ?)",
                    [SCHEMA_VERSION, time.time(), __version__])
        con.commit()
    except BaseException:
        con.rollback()
        raise


def migrate(con: duckdb.DuckDBPyConnection, version: int, where: str) -> None:
    """Bring a version-``version`` store to :data:`SCHEMA_VERSION`, in one transaction."""
    con.begin()
    try:
        while version < SCHEMA_VERSION:
            steps = MIGRATIONS.get(version)
            if steps is None:
                raise RecordStoreError(
                    f"no migration from schema version {version}", where,
                    "open it with the tackroom version that wrote it and export it")
            for step in steps:
                if callable(step):
                    step(con)
                else:
                    con.execute(step)
            version += 1
        con.execute("UPDATE meta SET schema_version = ?", [version])
        con.commit()
    except BaseException:
        con.rollback()
        raise
