"""The record store: every run, episode and turn, in one embedded DuckDB file.

The store is the spine that every later stage reads (training, analysis,
reports, exports). Three tables::

    runs(run_id PK, created_at, updated_at, finished_at, command, config JSON,
         status, manifest_hash, n_planned)
    episodes(episode_id, run_id, task, suite, harness, harness_hash, policy,
             seed, attempt, sampling JSON, outcome, reward, instruction, error,
             n_turns, prompt_tokens, completion_tokens, parse_errors,
             started_at, ended_at, t_policy, t_env, t_harness, meta JSON,
             recorded_at, PK (run_id, episode_id))
    turns(run_id, episode_id, idx, messages JSON, raw_text, tool_calls JSON,
          parse_error, feedback, actions JSON, action_error, observation,
          reward, prompt_tokens, completion_tokens, token_ids INTEGER[],
          logprobs DOUBLE[], adapter, t_policy, t_env, t_harness,
          PK (run_id, episode_id, idx))

plus ``meta(schema_version, created_at, tackroom_version)``. Times are Unix
seconds (``DOUBLE``), like the times on :class:`~tackroom.core.episode.Episode`.

An episode record is keyed by ``(run_id, episode_id)``. The episode id is
deterministic from the grid cell (task, harness hash, policy, sampling, seed,
attempt) and leaves the run out on purpose, so that the same cell in two runs
has the same id and runs can be compared cell by cell; the runs' records stay
independent. Join ``turns`` to ``episodes`` on both columns. Lookups by id
(:meth:`RecordStore.load_episode`, :meth:`RecordStore.turns`) take an optional
``run_id``; without it an id found in several runs means the most recent run's
record.

Writes are *group-committed*: :meth:`RecordStore.append` queues the episode
and a background flusher commits everything queued at most
``commit_interval`` seconds later, in one transaction. An episode and its
turns always land in the same transaction, so a crash (even ``SIGKILL``)
leaves each episode either whole or absent, never half-written; DuckDB
replays its write-ahead log on the next open. What a crash can lose is the
last ``commit_interval`` seconds of episodes, which ``--resume`` re-runs. The
reason: one commit costs a disk sync (~10-20 ms), so committing each episode
alone caps a fast suite at ~50 episodes/s, while batching writes thousands.
``commit_interval=0`` commits every episode before ``append`` returns.
Every read flushes the queue first, so a store always reads its own writes.

Secrets never reach the file: every text and JSON value passes through
:func:`scrub` on the way in.
"""

from __future__ import annotations

import atexit
import dataclasses
import enum
import functools
import json
import math
import re
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from tackroom.core.episode import Episode, Outcome, Turn
from tackroom.core.errors import RecordStoreError

__all__ = ["RecordStore", "scrub", "SCHEMA_VERSION", "DEFAULT_PATH", "RUN_STATUSES", "REDACTED"]

#: Version of the table layout this code writes. Bump it and add a migration
#: to ``_MIGRATIONS`` whenever a table changes.
SCHEMA_VERSION = 3

#: Where ``tackroom`` keeps its records unless told otherwise.
DEFAULT_PATH = "./tackroom-runs/tackroom.duckdb"

RUN_STATUSES = ("running", "finished", "interrupted")

#: What a secret is replaced with.
REDACTED = "[redacted]"

# ---------------------------------------------------------------------------
# Secrets
# ---------------------------------------------------------------------------

# A key whose value is a secret: api_key, apiKey, X-Api-Key, authorization,
# password, client_secret, access_token, hf_token, token ... but not
# token_ids, prompt_tokens, completion_tokens or max_tokens (``token`` must
# be the key's last word).
_SECRET_KEY = re.compile(
    r"(?:^|_)(?:api_?key|apikey|secrets?|password|passwd|passphrase|authorization|auth"
    r"|credentials?|private_key|access_key|cookie)(?:_|$)"
    r"|(?:^|_)token$"
)
# Tokenizer settings that end in ``token`` but hold no secret.
_NOT_SECRET_KEYS = frozenset(
    {"bos_token", "eos_token", "pad_token", "unk_token", "sep_token", "cls_token",
     "mask_token", "max_token", "next_token", "stop_token"}
)
# Secret-looking substrings of free text.
_SECRET_TEXT = re.compile(
    # OpenAI / Anthropic / OpenRouter style keys: sk-..., sk-proj-..., sk-ant-...
    r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_-]{8,}"
    # Hugging Face and GitHub tokens.
    r"|(?<![A-Za-z0-9])(?:hf|gh[pousr]|github_pat)_[A-Za-z0-9_]{20,}"
)
_BEARER = re.compile(r"\b([Bb]earer|BEARER|[Bb]asic)\s+[A-Za-z0-9._~+/=-]{8,}")
# ``api_key=...``, ``"password": "..."``, ``Authorization: xyz`` inside text
# (command lines, JSON strings such as tool-call arguments, URLs).
_SECRET_ASSIGNMENT = re.compile(
    r"(?i)\b((?:[a-z0-9]+[_-])*(?:api[_-]?key|apikey|access[_-]?token|auth[_-]?token"
    r"|secret[_-]?key|client[_-]?secret|password|passwd|authorization)"
    r"[\"']?\s*[:=]\s*[\"']?)"
    r"(?!\[redacted\])(?!(?:bearer|basic)\s)([^\s\"',;&}]+)"
)


def _snake(key: str) -> str:
    """``X-Api-Key`` → ``x_api_key``, ``accessToken`` → ``access_token``."""
    key = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key)
    return key.lower().replace("-", "_").replace(" ", "_")


@functools.lru_cache(maxsize=4096)
def _secret_name(key: str) -> str | None:
    """The snake-case form of ``key`` if it names a secret, else ``None``."""
    name = _snake(key)
    if name in _NOT_SECRET_KEYS or not _SECRET_KEY.search(name):
        return None
    return name


def _is_secret_key(key: str, siblings: Mapping[Any, Any]) -> bool:
    name = _secret_name(key)
    # OpenAI log-prob entries are {"token": "hello", "logprob": -0.1, ...}.
    return name is not None and not (name == "token" and "logprob" in siblings)


# A cheap test that a string (or a whole JSON document) may hold a secret.
# Every secret key name and every secret text pattern above contains one of
# these (lower-cased, with ``_``, ``-`` and spaces removed for the words), so
# text without any of them needs no scrubbing. Substring tests are ~20x faster
# than one case-insensitive regex over the same text.
_SECRET_MARKS = ("sk-", "hf_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")
_SECRET_WORDS = ("token", "auth", "apikey", "secret", "passw", "passphrase", "bearer", "basic",
                 "credential", "privatekey", "accesskey", "cookie")


def _may_hold_secret(text: str) -> bool:
    low = text.lower()
    if any(mark in low for mark in _SECRET_MARKS):
        return True
    compact = low.replace("_", "").replace("-", "").replace(" ", "")
    return any(word in compact for word in _SECRET_WORDS)


def _scrub_text(text: str) -> str:
    if not _may_hold_secret(text):
        return text
    text = _SECRET_TEXT.sub(REDACTED, text)
    text = _BEARER.sub(rf"\1 {REDACTED}", text)
    return _SECRET_ASSIGNMENT.sub(rf"\1{REDACTED}", text)


def scrub(obj: Any) -> Any:
    """A copy of ``obj`` with secrets replaced by ``"[redacted]"``.

    Walks dicts, lists and tuples. A value is a secret when its key names one
    (``api_key``, ``authorization``, ``password``, ``secret``, ``token``,
    ``access_token`` ...; not ``token_ids``, ``prompt_tokens`` or
    ``max_tokens``), whatever its type (``None``, ``""`` and booleans are
    kept). Inside every string, ``sk-...`` keys, ``hf_`` / ``ghp_`` tokens,
    ``Bearer <token>`` and ``api_key=<value>``-style assignments are redacted.
    Other values are returned unchanged.
    """
    if isinstance(obj, str):
        return _scrub_text(obj)
    if isinstance(obj, Mapping):
        out = {}
        for key, value in obj.items():
            if (isinstance(key, str) and value not in (None, "") and not isinstance(value, bool)
                    and _is_secret_key(key, obj)):
                out[key] = REDACTED
            else:
                out[key] = scrub(value)
        return out
    if isinstance(obj, list | tuple):
        return [scrub(v) for v in obj]
    return obj


# ---------------------------------------------------------------------------
# Schema
# ---------------------------------------------------------------------------

_RUN_COLUMNS: list[tuple[str, str]] = [
    ("run_id", "TEXT PRIMARY KEY"),
    ("created_at", "DOUBLE NOT NULL"),
    ("updated_at", "DOUBLE NOT NULL"),
    ("finished_at", "DOUBLE"),
    ("command", "TEXT"),
    ("config", "JSON"),
    ("status", "TEXT NOT NULL"),
    ("manifest_hash", "TEXT"),
    ("n_planned", "INTEGER"),
]

# (column, SQL type, arrow type) for the two tables written by ``append``.
_EPISODE_COLUMNS: list[tuple[str, str, pa.DataType]] = [
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

_TURN_COLUMNS: list[tuple[str, str, pa.DataType]] = [
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
]

_EPISODE_SCHEMA = pa.schema([(name, typ) for name, _, typ in _EPISODE_COLUMNS])
_TURN_SCHEMA = pa.schema([(name, typ) for name, _, typ in _TURN_COLUMNS])

EPISODE_FIELDS = tuple(name for name, _, _ in _EPISODE_COLUMNS)
TURN_FIELDS = tuple(name for name, _, _ in _TURN_COLUMNS)
_JSON_EPISODE_FIELDS = ("sampling", "meta")
_JSON_TURN_FIELDS = ("messages", "tool_calls", "actions")
# Episode columns that are derived from the turns or are bookkeeping, not
# constructor arguments of ``Episode``.
_DERIVED_EPISODE_FIELDS = ("n_turns", "prompt_tokens", "completion_tokens", "parse_errors",
                           "recorded_at")


#: Metrics of training runs (SFT, RL), one row per optimiser step.
_TRAIN_STEPS_SQL = """CREATE TABLE train_steps (
  run_id TEXT NOT NULL, step INTEGER NOT NULL, metrics JSON, recorded_at DOUBLE,
  PRIMARY KEY (run_id, step)
)"""


def _create_sql() -> list[str]:
    def cols(spec: Iterable[tuple[str, str]]) -> str:
        return ",\n  ".join(f"{name} {sql}" for name, sql in spec)

    return [
        "CREATE TABLE meta (schema_version INTEGER NOT NULL, created_at DOUBLE, "
        "tackroom_version TEXT)",
        f"CREATE TABLE runs (\n  {cols(_RUN_COLUMNS)}\n)",
        f"CREATE TABLE episodes (\n  {cols((n, s) for n, s, _ in _EPISODE_COLUMNS)},\n"
        "  PRIMARY KEY (run_id, episode_id)\n)",
        f"CREATE TABLE turns (\n  {cols((n, s) for n, s, _ in _TURN_COLUMNS)},\n"
        "  PRIMARY KEY (run_id, episode_id, idx)\n)",
        _TRAIN_STEPS_SQL,
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

#: ``_MIGRATIONS[v]`` turns a version-``v`` store into a version-``v+1`` one.
#: The steps run in one transaction with the ``meta`` update.
# Version 3 adds the failure mode of an episode (why a coding episode failed:
# dropped requirement, broke existing behaviour, ...) and the per-step metrics
# of training runs.
_V2_TO_V3 = [
    "ALTER TABLE episodes ADD COLUMN failure_mode TEXT",
    _TRAIN_STEPS_SQL,
]

_MIGRATIONS: dict[int, list[str]] = {1: _V1_TO_V2, 2: _V2_TO_V3}


# ---------------------------------------------------------------------------
# Row conversion
# ---------------------------------------------------------------------------

def _json_default(obj: Any) -> Any:
    if isinstance(obj, enum.Enum):
        return obj.value
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, set | frozenset):
        return sorted(obj, key=repr)
    if isinstance(obj, bytes):
        return obj.decode("utf-8", errors="replace")
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    return str(obj)


def _finite(obj: Any) -> Any:
    """JSON has no NaN / Infinity: write them as strings."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def _to_json(obj: Any) -> str:
    try:
        return json.dumps(obj, ensure_ascii=False, allow_nan=False, default=_json_default)
    except ValueError:
        return json.dumps(_finite(json.loads(json.dumps(obj, default=_json_default))),
                          ensure_ascii=False, allow_nan=False)


def _scrubbed_json(obj: Any) -> str:
    """``obj`` as JSON with secrets scrubbed.

    Serialises first and scrubs only when the prefilter hits the document,
    which is much faster than walking every string of every message. The
    slow path scrubs the parsed JSON, so objects that only become dicts on
    serialisation (dataclasses, ``to_dict()``) are scrubbed too.
    """
    text = _to_json(obj)
    if not _may_hold_secret(text):
        return text
    return _to_json(scrub(json.loads(text)))


def _text(value: str | None) -> str | None:
    return None if value is None else _scrub_text(str(value))


def _outcome(value: Outcome | str) -> Outcome:
    try:
        return Outcome(value)
    except ValueError:
        raise ValueError(
            f"unknown outcome {value!r}; expected one of {[o.value for o in Outcome]}"
        ) from None


def _validate(ep: Episode) -> None:
    """Reject what the tables would refuse, before it joins a batch of good episodes."""
    for name in ("episode_id", "run_id", "task"):
        value = getattr(ep, name)
        if not isinstance(value, str) or not value:
            raise ValueError(f"episode {ep.episode_id!r}: {name} must be a non-empty string, "
                             f"got {value!r}")
    indexes = [t.index for t in ep.turns]
    if len(set(indexes)) != len(indexes):
        raise ValueError(f"episode {ep.episode_id!r}: duplicate turn indexes {indexes}")


def _episode_row(ep: Episode, now: float) -> dict[str, Any]:
    _validate(ep)
    return {
        "episode_id": ep.episode_id,
        "run_id": ep.run_id,
        "task": ep.task,
        "suite": ep.suite,
        "harness": ep.harness,
        "harness_hash": ep.harness_hash,
        "policy": _text(ep.policy),
        "seed": int(ep.seed),
        "attempt": int(ep.attempt),
        "sampling": _scrubbed_json(ep.sampling),
        "outcome": _outcome(ep.outcome).value,
        "reward": float(ep.reward),
        "instruction": _text(ep.instruction),
        "error": _text(ep.error),
        "n_turns": ep.n_turns,
        "prompt_tokens": ep.prompt_tokens,
        "completion_tokens": ep.completion_tokens,
        "parse_errors": ep.parse_errors,
        "started_at": float(ep.started_at),
        "ended_at": float(ep.ended_at),
        "t_policy": float(ep.t_policy),
        "t_env": float(ep.t_env),
        "t_harness": float(ep.t_harness),
        "meta": _scrubbed_json(ep.meta),
        "recorded_at": now,
        "failure_mode": _text(ep.failure_mode),
    }


def _turn_row(run_id: str, episode_id: str, turn: Turn) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "episode_id": episode_id,
        "idx": int(turn.index),
        "messages": _scrubbed_json(turn.messages),
        "raw_text": _text(turn.raw_text),
        "tool_calls": _scrubbed_json(turn.tool_calls),
        "parse_error": _text(turn.parse_error),
        "feedback": _text(turn.feedback),
        "actions": _scrubbed_json(turn.actions),
        "action_error": _text(turn.action_error),
        "observation": _text(turn.observation),
        "reward": float(turn.reward),
        "prompt_tokens": int(turn.prompt_tokens),
        "completion_tokens": int(turn.completion_tokens),
        "token_ids": _token_ids(turn.token_ids),
        "logprobs": None if turn.logprobs is None else [float(x) for x in turn.logprobs],
        "adapter": turn.adapter,
        "t_policy": float(turn.t_policy),
        "t_env": float(turn.t_env),
        "t_harness": float(turn.t_harness),
    }


def _token_ids(ids: list[int] | None) -> list[int] | None:
    if ids is None:
        return None
    out = [int(t) for t in ids]
    if out and (min(out) < 0 or max(out) > 2**31 - 1):
        raise ValueError(f"token ids must be in [0, 2**31); got {min(out)}..{max(out)}")
    return out


def _arrow(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pydict({name: [r[name] for r in rows] for name in schema.names},
                                schema=schema)


def _loads(value: Any, default: Any) -> Any:
    if value is None:
        return default
    return json.loads(value) if isinstance(value, str) else value


def _turn_from_row(row: Mapping[str, Any]) -> Turn:
    return Turn(
        index=row["idx"],
        messages=_loads(row["messages"], []),
        raw_text=row["raw_text"],
        tool_calls=_loads(row["tool_calls"], []),
        parse_error=row["parse_error"],
        feedback=row["feedback"],
        actions=_loads(row["actions"], []),
        action_error=row["action_error"],
        observation=row["observation"],
        reward=row["reward"],
        prompt_tokens=row["prompt_tokens"],
        completion_tokens=row["completion_tokens"],
        token_ids=None if row["token_ids"] is None else list(row["token_ids"]),
        logprobs=None if row["logprobs"] is None else list(row["logprobs"]),
        adapter=row["adapter"],
        t_policy=row["t_policy"],
        t_env=row["t_env"],
        t_harness=row["t_harness"],
    )


def _episode_from_row(row: Mapping[str, Any], turns: list[Turn]) -> Episode:
    kwargs = {k: v for k, v in row.items()
              if k in EPISODE_FIELDS and k not in _DERIVED_EPISODE_FIELDS}
    kwargs["sampling"] = _loads(kwargs["sampling"], {})
    kwargs["meta"] = _loads(kwargs["meta"], {})
    kwargs["outcome"] = Outcome(kwargs["outcome"])
    return Episode(**kwargs, turns=turns)


def _parse_episode_json(row: dict[str, Any]) -> dict[str, Any]:
    for key in _JSON_EPISODE_FIELDS:
        if key in row:
            row[key] = _loads(row[key], {})
    return row


# ---------------------------------------------------------------------------
# The store
# ---------------------------------------------------------------------------

_OPEN_STORES: weakref.WeakSet[RecordStore] = weakref.WeakSet()


@atexit.register
def _close_open_stores() -> None:
    # A script that forgets ``close()`` still gets its queued episodes written.
    for store in list(_OPEN_STORES):
        try:
            store.close()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass


def _lock_holder(message: str) -> str:
    match = re.search(r"\(PID (\d+)\)", message)
    return f" (PID {match.group(1)})" if match else ""


class RecordStore:
    """Runs, episodes and turns in an embedded DuckDB file.

    Args:
        path: the DuckDB file; its parent directory is created.
        commit_interval: seconds an appended episode may wait before it is
            committed together with the ones appended after it (see the module
            docstring). ``0`` commits each episode before ``append`` returns.
        read_only: open without writing; several read-only stores may share a
            file, but none can while a writer has it open.

    Raises:
        RecordStoreError: the file is locked by another process, is not a
            tackroom store, or was written by a newer tackroom.

    Use it as a context manager, or call :meth:`close` when done::

        with RecordStore("runs/tackroom.duckdb") as store:
            store.start_run(run_id, command, config, n_planned=len(grid))
            store.append(episode)
    """

    def __init__(self, path: str | Path = DEFAULT_PATH, *, commit_interval: float = 0.25,
                 read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self.commit_interval = max(0.0, float(commit_interval))
        #: Most episodes queued before a commit is forced.
        self.max_pending = 512
        self._flusher_idle_s = 10.0
        # Two locks, always taken in this order: ``_db_lock`` serialises use of
        # the DuckDB connection; ``_cond`` guards the queue, so that ``append``
        # never waits for a commit in progress.
        self._db_lock = threading.RLock()
        self._cond = threading.Condition(threading.Lock())
        # Queued episodes by ``(run_id, episode_id)``, the tables' key.
        self._pending: dict[tuple[str, str], tuple[dict[str, Any], list[dict[str, Any]]]] = {}
        self._pending_since = 0.0
        self._flush_error: BaseException | None = None
        self._flusher: threading.Thread | None = None
        self._closing = False
        self._con: duckdb.DuckDBPyConnection | None = None
        self._con = self._connect()
        try:
            self._ensure_schema()
        except BaseException:
            self._con.close()
            self._con = None
            raise
        _OPEN_STORES.add(self)

    # -- opening -----------------------------------------------------------

    def _connect(self) -> duckdb.DuckDBPyConnection:
        where = str(self.path)
        if self.read_only and not self.path.exists():
            raise RecordStoreError("no record store here", where,
                                   "run `tackroom run` first, or pass the right --store path")
        if not self.read_only:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise RecordStoreError(f"cannot create the store's directory ({exc.strerror})",
                                       where, "pass a writable --store path") from exc
        try:
            return duckdb.connect(where, read_only=self.read_only)
        except duckdb.Error as exc:
            message = str(exc)
            if "lock" in message.lower():
                raise RecordStoreError(
                    "another tackroom process is using this record store"
                    + _lock_holder(message),
                    where,
                    "wait for it to finish (or stop it), or pass a different --store path",
                ) from exc
            if "not a valid duckdb database" in message.lower():
                raise RecordStoreError("not a DuckDB database file", where,
                                       "pass the path of a tackroom .duckdb store") from exc
            raise RecordStoreError(f"cannot open the record store: {message}", where,
                                   "check the path and its permissions") from exc

    def _ensure_schema(self) -> None:
        con = self._db()
        where = str(self.path)
        tables = {r[0] for r in con.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = 'main' AND table_catalog = current_database()").fetchall()}
        if "meta" not in tables:
            if tables:
                raise RecordStoreError(
                    f"not a tackroom record store (has tables {sorted(tables)} but no `meta`)",
                    where, "pass the path of a tackroom store, or a new file")
            if self.read_only:
                raise RecordStoreError("empty record store", where,
                                       "run `tackroom run` first, or pass the right --store path")
            from tackroom.core.version import __version__

            con.begin()
            try:
                for sql in _create_sql():
                    con.execute(sql)
                con.execute("INSERT INTO meta VALUES (?, ?, ?)",
                            [SCHEMA_VERSION, time.time(), __version__])
                con.commit()
            except BaseException:
                con.rollback()
                raise
            return
        row = _one(con.execute("SELECT max(schema_version) FROM meta"))
        version = row[0] if row else None
        if version is None:
            raise RecordStoreError("record store has an empty `meta` table", where,
                                   "restore the file from a backup or start a new store")
        if version > SCHEMA_VERSION:
            raise RecordStoreError(
                f"record store has schema version {version}, newer than this tackroom "
                f"understands ({SCHEMA_VERSION})",
                where, "upgrade tackroom (pip install -U tackroom) to read it")
        if version < SCHEMA_VERSION:
            if self.read_only:
                raise RecordStoreError(
                    f"record store has old schema version {version} (current "
                    f"{SCHEMA_VERSION})", where, "open it once without read_only to migrate it")
            self._migrate(version)

    def _migrate(self, version: int) -> None:
        con = self._db()
        con.begin()
        try:
            while version < SCHEMA_VERSION:
                steps = _MIGRATIONS.get(version)
                if steps is None:
                    raise RecordStoreError(
                        f"no migration from schema version {version}", str(self.path),
                        "open it with the tackroom version that wrote it and export it")
                for sql in steps:
                    con.execute(sql)
                version += 1
            con.execute("UPDATE meta SET schema_version = ?", [version])
            con.commit()
        except BaseException:
            con.rollback()
            raise

    def _db(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            raise RecordStoreError("record store is closed", str(self.path),
                                   "open a new RecordStore")
        return self._con

    # -- lifecycle ---------------------------------------------------------

    def __enter__(self) -> RecordStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RecordStore({str(self.path)!r})"

    def close(self) -> None:
        """Commit what is queued and close the file. Safe to call twice."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            self._cond.notify_all()
            flusher = self._flusher
        if flusher is not None and flusher is not threading.current_thread():
            flusher.join()
        with self._db_lock:
            if self._con is None:
                return
            try:
                self._flush_locked()
            finally:
                self._con.close()
                self._con = None
                _OPEN_STORES.discard(self)

    def flush(self) -> None:
        """Commit every queued episode now."""
        with self._db_lock:
            self._flush_locked()

    # -- runs --------------------------------------------------------------

    def start_run(self, run_id: str, command: str, config: Mapping[str, Any], n_planned: int,
                  manifest_hash: str | None = None) -> None:
        """Record the start of a run, or the resumption of an existing one.

        A new run is inserted with status ``running``. For an existing run the
        original command, config and creation time are kept; its status goes
        back to ``running`` (and ``manifest_hash`` is filled in if it was unset).
        """
        self._writable()
        now = time.time()
        with self._db_lock:
            con = self._db()
            exists = _one(con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]))
            if exists:
                con.execute(
                    "UPDATE runs SET status = 'running', updated_at = ?, finished_at = NULL, "
                    "manifest_hash = coalesce(manifest_hash, ?) WHERE run_id = ?",
                    [now, manifest_hash, run_id])
            else:
                con.execute(
                    "INSERT INTO runs (run_id, created_at, updated_at, finished_at, command, "
                    "config, status, manifest_hash, n_planned) "
                    "VALUES (?, ?, ?, NULL, ?, ?, 'running', ?, ?)",
                    [run_id, now, now, _text(command), _scrubbed_json(dict(config)),
                     manifest_hash, int(n_planned)])

    def finish_run(self, run_id: str, status: str = "finished") -> None:
        """Mark a run ``finished`` or ``interrupted`` (commits queued episodes first)."""
        self._writable()
        if status not in RUN_STATUSES:
            raise ValueError(f"unknown run status {status!r}; expected one of {RUN_STATUSES}")
        now = time.time()
        with self._db_lock:
            self._flush_locked()
            self._db().execute(
                "UPDATE runs SET status = ?, updated_at = ?, finished_at = ? WHERE run_id = ?",
                [status, now, now if status != "running" else None, run_id])

    # -- training metrics ---------------------------------------------------

    def log_train_step(self, run_id: str, step: int, metrics: Mapping[str, Any]) -> None:
        """Record the metrics of one optimiser step of a training run.

        A resumed run that repeats a step replaces that step's row.
        """
        self._writable()
        with self._db_lock:
            self._db().execute(
                "INSERT OR REPLACE INTO train_steps VALUES (?, ?, ?, ?)",
                [run_id, int(step), _scrubbed_json(dict(metrics)), time.time()])

    def train_steps(self, run_id: str) -> list[dict[str, Any]]:
        """The recorded steps of a training run, in order: ``{"step": n, **metrics}``."""
        with self._db_lock:
            rows = self._db().execute(
                "SELECT step, metrics FROM train_steps WHERE run_id = ? ORDER BY step",
                [run_id]).fetchall()
        return [{"step": step, **_loads(metrics, {})} for step, metrics in rows]

    def runs(self) -> list[dict[str, Any]]:
        """Every run, newest first, with episode counts.

        Each dict has the ``runs`` columns (``config`` parsed) plus
        ``n_episodes``, ``outcomes`` (count per :class:`Outcome` value, all
        present), ``n_scored`` (episodes minus infra errors) and
        ``success_rate`` (successes / scored episodes, ``None`` if none).
        """
        return self._runs(None)

    def run(self, run_id: str) -> dict[str, Any] | None:
        """One run as in :meth:`runs`, or ``None``."""
        found = self._runs(run_id)
        return found[0] if found else None

    def latest_run_id(self) -> str | None:
        """The id of the most recently created run, or ``None``."""
        with self._db_lock:
            row = _one(self._db().execute(
                "SELECT run_id FROM runs ORDER BY created_at DESC, run_id DESC LIMIT 1"
            ))
        return row[0] if row else None

    def _runs(self, run_id: str | None) -> list[dict[str, Any]]:
        where, params = ("WHERE run_id = ?", [run_id]) if run_id is not None else ("", [])
        with self._db_lock:
            self._flush_locked()
            con = self._db()
            runs = _fetch_dicts(con.execute(
                f"SELECT * FROM runs {where} ORDER BY created_at DESC, run_id DESC", params))
            counts = con.execute(
                f"SELECT run_id, outcome, count(*) FROM episodes {where} GROUP BY ALL",
                params).fetchall()
        by_run: dict[str, dict[str, int]] = {}
        for rid, outcome, n in counts:
            by_run.setdefault(rid, {})[outcome] = n
        for r in runs:
            r["config"] = _loads(r["config"], {})
            outcomes = {o.value: 0 for o in Outcome}
            outcomes.update(by_run.get(r["run_id"], {}))
            n = sum(outcomes.values())
            scored = n - outcomes[Outcome.INFRA_ERROR.value]
            r["n_episodes"] = n
            r["outcomes"] = outcomes
            r["n_scored"] = scored
            r["success_rate"] = outcomes[Outcome.SUCCESS.value] / scored if scored else None
        return runs

    # -- writing episodes ---------------------------------------------------

    def append(self, episode: Episode) -> None:
        """Record an episode with all its turns, atomically.

        Call :meth:`start_run` first so that :meth:`runs` lists its run.

        An episode with the same ``(run_id, episode_id)`` as one already in
        the store replaces the old one (its turns too), in the same
        transaction, so a retried episode never duplicates; the same episode
        id in another run is another record and is left alone. Secrets are scrubbed first. The episode is committed
        within ``commit_interval`` seconds (before returning when it is 0).
        """
        self.append_many([episode])

    def append_many(self, episodes: Iterable[Episode]) -> None:
        """Record several episodes; like :meth:`append` for each, committed together."""
        self._writable()
        now = time.time()
        # Convert (and so validate) here, in the caller's thread, so that bad
        # data fails this call rather than a later background commit.
        rows = [(_episode_row(ep, now),
                 [_turn_row(ep.run_id, ep.episode_id, t) for t in ep.turns])
                for ep in episodes]
        with self._cond:
            if self._closing:
                self._db()  # raises: closed
            if not self._pending:
                self._pending_since = time.monotonic()
            for ep_row, turn_rows in rows:
                key = (ep_row["run_id"], ep_row["episode_id"])
                self._pending.pop(key, None)  # the newest write wins
                self._pending[key] = (ep_row, turn_rows)
            now_please = self.commit_interval <= 0 or len(self._pending) >= self.max_pending
            if not now_please:
                self._start_flusher()
                self._cond.notify_all()
                # A failed background commit is reported here (these episodes
                # stay queued); appending them again is harmless.
                self._raise_flush_error()
        if now_please:
            self.flush()

    def delete_episodes(self, episode_ids: Iterable[str], run_id: str | None = None) -> int:
        """Delete episodes (and their turns) by full id; returns how many records existed.

        With ``run_id`` only that run's records go; without it, the ids'
        records in every run (so the count may exceed ``len(episode_ids)``).
        """
        self._writable()
        ids = list(episode_ids)
        if not ids:
            return 0
        where = "list_contains(?, episode_id)"
        params: list[Any] = [ids]
        if run_id is not None:
            where += " AND run_id = ?"
            params.append(run_id)
        with self._db_lock:
            self._flush_locked()
            con = self._db()
            con.begin()
            try:
                n = _one(con.execute(f"SELECT count(*) FROM episodes WHERE {where}", params))[0]
                con.execute(f"DELETE FROM turns WHERE {where}", params)
                con.execute(f"DELETE FROM episodes WHERE {where}", params)
                con.commit()
            except BaseException:
                con.rollback()
                raise
        return int(n)

    def _writable(self) -> None:
        if self.read_only:
            raise RecordStoreError("record store was opened read-only", str(self.path),
                                   "open it without read_only to write")

    def _start_flusher(self) -> None:
        # Caller holds ``_cond``.
        if self._flusher is None or not self._flusher.is_alive():
            self._flusher = threading.Thread(target=self._flush_loop, daemon=True,
                                             name=f"tackroom-records-{self.path.name}")
            self._flusher.start()

    def _flush_loop(self) -> None:
        while True:
            with self._cond:
                while not self._closing:
                    if not self._pending:
                        # Idle: exit after a while, so that a store nobody closed can
                        # still be garbage-collected; the next append starts a new one.
                        if not self._cond.wait(self._flusher_idle_s) and not self._pending:
                            self._flusher = None
                            return
                        continue
                    wait = self._pending_since + self.commit_interval - time.monotonic()
                    if wait <= 0:
                        break
                    self._cond.wait(wait)
                if self._closing:
                    return  # close() commits the rest
            try:
                self.flush()
            except BaseException as exc:  # noqa: BLE001 - surfaced by the next call
                with self._cond:
                    self._flush_error = exc

    def _raise_flush_error(self) -> None:
        # Caller holds ``_cond``.
        if self._flush_error is not None:
            exc, self._flush_error = self._flush_error, None
            if isinstance(exc, RecordStoreError):
                raise exc
            raise RecordStoreError(f"writing episodes failed: {exc}", str(self.path),
                                   "the episodes queued then were not recorded; re-run "
                                   "with --resume") from exc

    def _flush_locked(self) -> None:
        """Commit the queue in one transaction. Caller holds ``_db_lock``."""
        with self._cond:
            earlier, self._flush_error = self._flush_error, None
            batch = list(self._pending.values())
            self._pending = {}
        try:
            self._write(batch)
        finally:
            if earlier is not None:  # a background commit failed: report it now
                with self._cond:
                    self._flush_error = earlier
                    self._raise_flush_error()

    def _write(self, batch: list[tuple[dict[str, Any], list[dict[str, Any]]]]) -> None:
        if not batch:
            return
        con = self._db()
        episodes = _arrow([e for e, _ in batch], _EPISODE_SCHEMA)
        turns = _arrow([t for _, ts in batch for t in ts], _TURN_SCHEMA)
        con.register("_tackroom_new_episodes", episodes)
        con.register("_tackroom_new_turns", turns)
        try:
            try:
                self._insert(con, replace=False)
            except duckdb.ConstraintException:
                # Some ids exist already: replace them (delete + insert, one transaction).
                self._insert(con, replace=True)
        except duckdb.Error as exc:
            raise RecordStoreError(f"writing {len(batch)} episode(s) failed: {exc}",
                                   str(self.path),
                                   "those episodes were not recorded; re-run with --resume"
                                   ) from exc
        finally:
            con.unregister("_tackroom_new_episodes")
            con.unregister("_tackroom_new_turns")

    @staticmethod
    def _insert(con: duckdb.DuckDBPyConnection, replace: bool) -> None:
        con.begin()
        try:
            if replace:
                for table in ("turns", "episodes"):
                    con.execute(f"DELETE FROM {table} o USING _tackroom_new_episodes n "
                                "WHERE o.run_id = n.run_id AND o.episode_id = n.episode_id")
            con.execute("INSERT INTO episodes BY NAME SELECT * FROM _tackroom_new_episodes")
            con.execute("INSERT INTO turns BY NAME SELECT * FROM _tackroom_new_turns")
            con.commit()
        except BaseException:
            con.rollback()
            raise

    # -- reading -----------------------------------------------------------

    def episode_ids(self, run_id: str) -> dict[str, str]:
        """``episode_id → outcome`` for every episode recorded in ``run_id``.

        ``--resume`` uses it to skip episodes already done (and to retry
        ``infra_error`` ones).
        """
        with self._db_lock:
            self._flush_locked()
            rows = self._db().execute(
                "SELECT episode_id, outcome FROM episodes WHERE run_id = ?", [run_id]).fetchall()
        return dict(rows)

    def episodes(self, run_id: str | None = None, *, limit: int | None = None,
                 **filters: Any) -> list[dict[str, Any]]:
        """Episode rows (no turns) as dicts, oldest first.

        Args:
            run_id: only this run (all runs when ``None``).
            limit: at most this many rows.
            **filters: column = value, e.g. ``task="toy/echo"``,
                ``outcome="success"``; a list, tuple or set matches any of its
                values. Any ``episodes`` column may be used (``task``,
                ``suite``, ``harness``, ``harness_hash``, ``policy``,
                ``outcome``, ``seed``, ...).

        ``sampling`` and ``meta`` come back parsed; the other columns are as
        in the table (see the module docstring).
        """
        where, params = _where(run_id, filters)
        sql = f"SELECT * FROM episodes {where} ORDER BY started_at, episode_id, run_id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._db_lock:
            self._flush_locked()
            rows = _fetch_dicts(self._db().execute(sql, params))
        return [_parse_episode_json(r) for r in rows]

    def count(self, run_id: str | None = None, **filters: Any) -> int:
        """How many episodes match (same arguments as :meth:`episodes`)."""
        where, params = _where(run_id, filters)
        with self._db_lock:
            self._flush_locked()
            row = _one(self._db().execute(f"SELECT count(*) FROM episodes {where}", params))
        return int(row[0]) if row else 0

    def resolve_episode_id(self, episode_id_or_prefix: str, run_id: str | None = None) -> str:
        """The full id of the one episode whose id starts with the argument.

        With ``run_id`` only that run's episodes are searched. Without it, the
        same id recorded in several runs counts once (see :meth:`load_episode`
        for which record it means).

        Raises:
            RecordStoreError: no episode matches, or several different ids do.
        """
        return self._resolve(episode_id_or_prefix, run_id)[0]

    def _resolve(self, episode_id_or_prefix: str, run_id: str | None) -> tuple[str, str]:
        """``(episode_id, run_id)`` of the record an id or prefix means."""
        key = episode_id_or_prefix.strip()
        with self._db_lock:
            self._flush_locked()
            # One row per matching id: its record in the most recent run (runs
            # without a ``runs`` row last, then the latest recorded).
            rows = self._db().execute(
                "SELECT e.episode_id, e.run_id FROM episodes e LEFT JOIN runs r USING (run_id) "
                "WHERE starts_with(e.episode_id, ?) AND (?::VARCHAR IS NULL OR e.run_id = ?) "
                "QUALIFY row_number() OVER (PARTITION BY e.episode_id ORDER BY "
                "r.created_at DESC NULLS LAST, e.recorded_at DESC, e.run_id DESC) = 1 "
                "ORDER BY e.episode_id LIMIT 3", [key, run_id, run_id]).fetchall()
        if not key or not rows:
            where = f" in run {run_id!r}" if run_id is not None else ""
            raise RecordStoreError(f"no episode with id {key!r}{where}", str(self.path),
                                   "list episode ids with `tackroom show` or store.episodes()")
        exact = [r for r in rows if r[0] == key]
        if exact:
            return exact[0]
        if len(rows) > 1:
            shown = ", ".join(r[0] for r in rows[:2])
            raise RecordStoreError(f"episode id prefix {key!r} is ambiguous ({shown}, ...)",
                                   str(self.path), "give more characters of the id")
        return rows[0]

    def load_episode(self, episode_id: str, run_id: str | None = None) -> Episode:
        """The full :class:`Episode` with its turns; ``episode_id`` may be a unique prefix.

        With ``run_id``, the episode recorded in that run. Without it, an id
        recorded in several runs means the record of the most recent run (by
        ``runs.created_at``); the returned episode's ``run_id`` says which.

        Raises:
            RecordStoreError: no episode matches, or several different ids do.
        """
        with self._db_lock:
            full, rid = self._resolve(episode_id, run_id)
            row = _fetch_dicts(self._db().execute(
                "SELECT * FROM episodes WHERE run_id = ? AND episode_id = ?", [rid, full]))[0]
            turns = self._turn_rows([(rid, full)])
        return _episode_from_row(row, [_turn_from_row(t) for t in turns])

    def turns(self, episode_id: str, run_id: str | None = None) -> list[Turn]:
        """The turns of one episode (id or unique prefix), in order.

        ``run_id`` picks the run as in :meth:`load_episode`.
        """
        with self._db_lock:
            full, rid = self._resolve(episode_id, run_id)
            return [_turn_from_row(t) for t in self._turn_rows([(rid, full)])]

    def iter_episodes(self, run_id: str | None = None, *, batch_size: int = 256,
                      **filters: Any) -> Iterator[Episode]:
        """Full episodes (with turns), oldest first, read ``batch_size`` at a time.

        Same filters as :meth:`episodes`. Memory stays bounded by one batch,
        so this is the way to walk a large run (exports, training data). With
        ``run_id=None`` an id recorded in several runs comes once per run.
        """
        yield from self._with_turns(self.episodes(run_id, **filters), batch_size)

    def load_episodes(self, keys: Iterable[tuple[str, str]], *, batch_size: int = 256,
                      ) -> Iterator[Episode]:
        """Full episodes for ``(run_id, episode_id)`` keys, in the order given.

        Reads ``batch_size`` episodes per query: the fast way to load a
        selection made with :meth:`query` (unknown keys are skipped).
        """
        keys = list(keys)
        for start in range(0, len(keys), batch_size):
            chunk = keys[start:start + batch_size]
            placeholders = ", ".join("(?, ?)" for _ in chunk)
            with self._db_lock:
                rows = _fetch_dicts(self._db().execute(
                    f"SELECT * FROM episodes WHERE (run_id, episode_id) IN ({placeholders})",
                    [v for key in chunk for v in key]))
            by_key = {(r["run_id"], r["episode_id"]): r for r in rows}
            yield from self._with_turns([by_key[k] for k in chunk if k in by_key], batch_size)

    def _with_turns(self, rows: list[dict[str, Any]], batch_size: int) -> Iterator[Episode]:
        for start in range(0, len(rows), batch_size):
            chunk = rows[start:start + batch_size]
            with self._db_lock:
                turn_rows = self._turn_rows([(r["run_id"], r["episode_id"]) for r in chunk])
            by_episode: dict[tuple[str, str], list[Turn]] = {}
            for t in turn_rows:
                by_episode.setdefault((t["run_id"], t["episode_id"]), []).append(
                    _turn_from_row(t))
            for r in chunk:
                yield _episode_from_row(r, by_episode.get((r["run_id"], r["episode_id"]), []))

    def _turn_rows(self, keys: list[tuple[str, str]]) -> list[dict[str, Any]]:
        """Turn rows of the ``(run_id, episode_id)`` records, by record then index."""
        con = self._db()
        if len(keys) == 1:
            cur = con.execute("SELECT * FROM turns WHERE run_id = ? AND episode_id = ? "
                              "ORDER BY idx", list(keys[0]))
        else:
            cur = con.execute(
                "WITH k AS (SELECT unnest(?::VARCHAR[]) AS run_id, "
                "unnest(?::VARCHAR[]) AS episode_id) "
                "SELECT t.* FROM turns t JOIN k USING (run_id, episode_id) "
                "ORDER BY t.run_id, t.episode_id, t.idx",
                [[k[0] for k in keys], [k[1] for k in keys]])
        return _fetch_dicts(cur)

    def query(self, sql: str, params: list[Any] | Mapping[str, Any] | None = None
              ) -> list[dict[str, Any]]:
        """Run any SQL against the store and return the rows as dicts.

        For analysis code: ``store.query("SELECT harness, avg(reward) AS r FROM
        episodes WHERE run_id = ? GROUP BY harness", [run_id])``. JSON
        columns come back as strings.
        """
        with self._db_lock:
            self._flush_locked()
            cur = self._db().execute(sql, params) if params is not None else \
                self._db().execute(sql)
            if cur.description is None:
                return []
            return _fetch_dicts(cur)

    def arrow(self, sql: str, params: list[Any] | Mapping[str, Any] | None = None) -> pa.Table:
        """Like :meth:`query` but returns a :class:`pyarrow.Table` (fast for big results)."""
        with self._db_lock:
            self._flush_locked()
            rel = self._db().sql(sql, params=params)
            if rel is None:  # a statement without a result
                return pa.table({})
            # ``to_arrow_table`` since DuckDB 1.4; ``arrow`` before.
            fetch = getattr(rel, "to_arrow_table", None) or rel.arrow
            return fetch()


def _one(cur: duckdb.DuckDBPyConnection) -> tuple[Any, ...] | None:
    """The first row, reading the result to the end (DuckDB 2 refuses new work on
    a connection while a result is unfinished)."""
    rows = cur.fetchall()
    return rows[0] if rows else None


def _fetch_dicts(cur: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def _where(run_id: str | None, filters: Mapping[str, Any]) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if run_id is not None:
        clauses.append("run_id = ?")
        params.append(run_id)
    for key, value in filters.items():
        if key not in EPISODE_FIELDS:
            raise ValueError(f"unknown episode filter {key!r}; expected one of {EPISODE_FIELDS}")
        if value is None:
            clauses.append(f"{key} IS NULL")
            continue
        if isinstance(value, list | tuple | set | frozenset):
            values = [v.value if isinstance(v, enum.Enum) else v for v in value]
            clauses.append(f"list_contains(?, {key})")
            params.append(values)
        else:
            clauses.append(f"{key} = ?")
            params.append(value.value if isinstance(value, enum.Enum) else value)
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", params
