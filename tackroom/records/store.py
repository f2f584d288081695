"""The record store: every run, episode and turn, in one embedded DuckDB file.

The store is the spine that every later stage reads (training, analysis,
reports, exports). The file is at :data:`DEFAULT_PATH`
(``./tackroom-runs/tackroom.duckdb``) unless a path is given; the command
line and other callers take theirs from :func:`default_db`, which honours
``$TACKROOM_DB``. Schema version 7 has five tables — ``meta``, ``runs``,
``episodes``, ``turns`` and ``train_steps`` — whose columns are described
in :mod:`tackroom.records.schema`; a store with an older schema version is
migrated when opened for writing, a newer one is refused. Times are Unix
seconds, like the times on :class:`~tackroom.core.episode.Episode`.

An episode record is keyed by ``(run_id, episode_id)``. The episode id is
deterministic from the grid cell (task, harness hash, policy, sampling, seed,
attempt) and leaves the run out on purpose, so that the same cell in two runs
has the same id and runs can be compared cell by cell; the runs' records stay
independent. Join ``turns`` to ``episodes`` on both columns. Lookups by id
(:meth:`RecordStore.load_episode`, :meth:`RecordStore.turns`) take an optional
``run_id``; without it an id found in several runs means the most recent run's
record.

Writes are *group-committed*, the only batching in front of DuckDB: every
writer calls :meth:`RecordStore.append`, which queues the episode and
returns; the store's writer (:mod:`tackroom.records.writer`) commits the queue at
most ``commit_interval`` seconds later (sooner when ``max_pending`` wait, or on
:meth:`~RecordStore.flush`), in one transaction, since one commit costs a disk sync
(~10-20 ms). An
episode and its turns always land in the same transaction, so a crash (even
``SIGKILL``) leaves each episode whole or absent, and loses at most the last
``commit_interval`` seconds of episodes, which ``--resume`` re-runs.
``commit_interval=0`` commits before ``append`` returns. Reads flush the
queue first (:meth:`~RecordStore.load_episodes` reads committed records).
A write that fails because the disk is full says so, in one line.

Secrets never reach the file: every text and JSON value is scrubbed on the
way in (:mod:`tackroom.core.secrets`).

Images in messages (screenshots) are not stored inline: each is a file
``<store dir>/blobs/<sha256>.<ext>`` that the stored message references, and
reading resolves the references again (:mod:`tackroom.records.blobs`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import socket
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
from tackroom.core.secrets import REDACTED, scrub
from tackroom.records.blobs import BlobStore, blob_dir
from tackroom.records.paths import DEFAULT_PATH, default_db
from tackroom.records.rows import (
    episode_from_row,
    episode_row,
    fetch_dicts,
    loads,
    one,
    parse_episode_json,
    scrubbed_json,
    scrubbed_text,
    turn_rows,
    turns_from_rows,
    where_clause,
)
from tackroom.records.schema import (
    EPISODE_FIELDS,
    RUN_STATUSES,
    SCHEMA_VERSION,
    TURN_FIELDS,
    ensure_schema,
)
from tackroom.records.writer import EpisodeWriter, write_error, writing

# The names after ``RecordStore`` live in their own modules; they are
# re-exported here for callers that import them from the store.
__all__ = ["RecordStore", "scrub", "SCHEMA_VERSION", "DEFAULT_PATH", "RUN_STATUSES", "REDACTED",
           "EPISODE_FIELDS", "TURN_FIELDS", "default_db"]


_OPEN_STORES: weakref.WeakSet[RecordStore] = weakref.WeakSet()


@atexit.register
def _close_open_stores() -> None:
    # A script that forgets ``close()`` still gets its queued episodes written.
    for store in list(_OPEN_STORES):
        try:
            store.close()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass


_HOST = socket.gethostname()
#: A run on another host whose heartbeat is older than this is taken as interrupted.
STALE_AFTER_S = 24 * 3600.0


def _owner_alive(run: Mapping[str, Any]) -> bool:
    """Whether the process that owns a ``running`` run may still be running it.

    On this host the process is asked directly (a pid that is gone means the run
    was interrupted). Another host's process cannot be asked: its run counts as
    alive until its heartbeat is a day old. Runs recorded before owners were
    (schema < 4) have none and stay as they are.
    """
    host, pid = run.get("owner_host"), run.get("owner_pid")
    if not host or not pid:
        return True
    if host == _HOST:
        if int(pid) == os.getpid():
            return True
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # someone else's live process
            return True
        return True
    beat = run.get("heartbeat_at") or run.get("updated_at") or 0.0
    return time.time() - float(beat) < STALE_AFTER_S


def _lock_holder(message: str) -> str:
    match = re.search(r"\(PID (\d+)\)", message)
    return f" (PID {match.group(1)})" if match else ""


class RecordStore:
    """Runs, episodes and turns in an embedded DuckDB file.

    Args:
        path: the DuckDB file (default :func:`~tackroom.records.default_db`: `$TACKROOM_DB`, else
            `./tackroom-runs/tackroom.duckdb`); its parent directory is created.
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

    def __init__(self, path: str | Path | None = None, *, commit_interval: float = 0.25,
                 read_only: bool = False) -> None:
        self.path = Path(path or default_db())
        self.read_only = read_only
        #: Images of the stored messages, one file each beside the store
        #: (:mod:`tackroom.records.blobs`).
        self.blobs = BlobStore(blob_dir(self.path))
        # Serialises use of the DuckDB connection; the writer's queue has its own lock,
        # always taken after this one, so that ``append`` never waits for a commit.
        self._db_lock = threading.RLock()
        #: The queue of appended episodes and the thread that commits it.
        self.writer = EpisodeWriter(self.path, self._db, self._db_lock, commit_interval)
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
                                   "run `tackroom eval` first, or pass the right --db path")
        if not self.read_only:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise RecordStoreError(f"cannot create the store's directory ({exc.strerror})",
                                       where, "pass a writable --db path") from exc
        try:
            return duckdb.connect(where, read_only=self.read_only)
        except duckdb.Error as exc:
            message = str(exc)
            if "lock" in message.lower():
                raise RecordStoreError(
                    "another tackroom process is using this record store"
                    + _lock_holder(message),
                    where,
                    "wait for it to finish (or stop it), or pass a different --db path",
                ) from exc
            if "not a valid duckdb database" in message.lower():
                raise RecordStoreError("not a DuckDB database file", where,
                                       "pass the path of a tackroom .duckdb store") from exc
            raise RecordStoreError(f"cannot open the record store: {message}", where,
                                   "check the path and its permissions") from exc

    def _ensure_schema(self) -> None:
        ensure_schema(self._db(), str(self.path), self.read_only)

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

    @property
    def commit_interval(self) -> float:
        """Seconds an appended episode may wait to be committed with later ones."""
        return self.writer.commit_interval

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called (or is under way)."""
        return self.writer.closing or self._con is None

    def close(self) -> None:
        """Commit what is queued and close the file. Safe to call twice."""
        if not self.writer.stop():
            return
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
        self.writer.flush()

    def _flush_locked(self) -> None:
        """Commit the queue. Caller holds ``_db_lock``."""
        self.writer.flush_locked()

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
        with self._db_lock, writing(self.path, f"run {run_id}"):
            con = self._db()
            exists = one(con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]))
            host, pid = _HOST, os.getpid()
            if exists:
                con.execute(
                    "UPDATE runs SET status = 'running', updated_at = ?, finished_at = NULL, "
                    "manifest_hash = coalesce(manifest_hash, ?), owner_host = ?, owner_pid = ?, "
                    "heartbeat_at = ? WHERE run_id = ?",
                    [now, manifest_hash, host, pid, now, run_id])
            else:
                con.execute(
                    "INSERT INTO runs (run_id, created_at, updated_at, finished_at, command, "
                    "config, status, manifest_hash, n_planned, owner_host, owner_pid, "
                    "heartbeat_at) VALUES (?, ?, ?, NULL, ?, ?, 'running', ?, ?, ?, ?, ?)",
                    [run_id, now, now, scrubbed_text(command), scrubbed_json(dict(config)),
                     manifest_hash, int(n_planned), host, pid, now])

    def finish_run(self, run_id: str, status: str = "finished") -> None:
        """Mark a run ``finished`` or ``interrupted`` (commits queued episodes first)."""
        self._writable()
        if status not in RUN_STATUSES:
            raise ValueError(f"unknown run status {status!r}; expected one of {RUN_STATUSES}")
        now = time.time()
        with self._db_lock:
            self._flush_locked()
            with writing(self.path, f"the end of run {run_id}"):
                self._db().execute(
                    "UPDATE runs SET status = ?, updated_at = ?, finished_at = ? WHERE run_id = ?",
                    [status, now, now if status != "running" else None, run_id])

    # -- training metrics ---------------------------------------------------

    def log_train_step(self, run_id: str, step: int, metrics: Mapping[str, Any]) -> None:
        """Record the metrics of one optimiser step of a training run.

        A resumed run that repeats a step replaces that step's row.
        """
        self._writable()
        with self._db_lock, writing(self.path, f"step {step} of run {run_id}"):
            self._db().execute(
                "INSERT OR REPLACE INTO train_steps VALUES (?, ?, ?, ?)",
                [run_id, int(step), scrubbed_json(dict(metrics)), time.time()])

    def train_steps(self, run_id: str) -> list[dict[str, Any]]:
        """The recorded steps of a training run, in order: ``{"step": n, **metrics}``."""
        with self._db_lock:
            rows = self._db().execute(
                "SELECT step, metrics FROM train_steps WHERE run_id = ? ORDER BY step",
                [run_id]).fetchall()
        return [{"step": step, **loads(metrics, {})} for step, metrics in rows]

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
            row = one(self._db().execute(
                "SELECT run_id FROM runs ORDER BY created_at DESC, run_id DESC LIMIT 1"
            ))
        return row[0] if row else None

    def _runs(self, run_id: str | None) -> list[dict[str, Any]]:
        where, params = ("WHERE run_id = ?", [run_id]) if run_id is not None else ("", [])
        with self._db_lock:
            self._flush_locked()
            con = self._db()
            runs = fetch_dicts(con.execute(
                f"SELECT * FROM runs {where} ORDER BY created_at DESC, run_id DESC", params))
            counts = con.execute(
                f"SELECT run_id, outcome, count(*) FROM episodes {where} GROUP BY ALL",
                params).fetchall()
        by_run: dict[str, dict[str, int]] = {}
        for rid, outcome, n in counts:
            by_run.setdefault(rid, {})[outcome] = n
        for r in runs:
            r["config"] = loads(r["config"], {})
            # A run left `running` by a process that is gone was interrupted (SIGKILL, a
            # crash, a lost machine): say so, without writing (the store may be read-only).
            r["orphaned"] = r["status"] == "running" and not _owner_alive(r)
            if r["orphaned"]:
                r["status"] = "interrupted"
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
        rows = [(episode_row(ep, now), turn_rows(ep, self.blobs)) for ep in episodes]
        self.writer.queue(rows)

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
                row = one(con.execute(f"SELECT count(*) FROM episodes WHERE {where}", params))
                assert row is not None  # count(*) always gives one row
                n = row[0]
                con.execute(f"DELETE FROM turns WHERE {where}", params)
                con.execute(f"DELETE FROM episodes WHERE {where}", params)
                con.commit()
            except BaseException as exc:
                with contextlib.suppress(duckdb.Error):
                    con.rollback()  # never hides the failure that caused it
                if isinstance(exc, duckdb.Error):
                    raise write_error(exc, self.path, f"the deletion of {len(ids)} "
                                      "episode(s)") from exc
                raise
        return int(n)

    def _writable(self) -> None:
        if self.read_only:
            raise RecordStoreError("record store was opened read-only", str(self.path),
                                   "open it without read_only to write")

    def append_tables(self, episodes: pa.Table, turns: pa.Table) -> None:
        """Record the episodes of prepared tables now, in one transaction.

        The tables are what :func:`tackroom.records.converter.convert_batch` makes
        (rows already validated and scrubbed, each episode id once): the runner's
        writer converts in a process of its own and hands the result here. Episodes
        queued by :meth:`append` are committed first, so the newest write still wins.
        """
        self._writable()
        with self._db_lock:
            self._flush_locked()
            self.writer.write_tables(episodes, turns)

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
        in the table (see :mod:`tackroom.records.schema`).
        """
        where, params = where_clause(run_id, filters)
        sql = f"SELECT * FROM episodes {where} ORDER BY started_at, episode_id, run_id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._db_lock:
            self._flush_locked()
            rows = fetch_dicts(self._db().execute(sql, params))
        return [parse_episode_json(r) for r in rows]

    def count(self, run_id: str | None = None, **filters: Any) -> int:
        """How many episodes match (same arguments as :meth:`episodes`)."""
        where, params = where_clause(run_id, filters)
        with self._db_lock:
            self._flush_locked()
            row = one(self._db().execute(f"SELECT count(*) FROM episodes {where}", params))
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
            row = fetch_dicts(self._db().execute(
                "SELECT * FROM episodes WHERE run_id = ? AND episode_id = ?", [rid, full]))[0]
            turns = self._turn_rows([(rid, full)])
        return episode_from_row(row, turns_from_rows(turns, self.blobs))

    def turns(self, episode_id: str, run_id: str | None = None) -> list[Turn]:
        """The turns of one episode (id or unique prefix), in order.

        ``run_id`` picks the run as in :meth:`load_episode`.
        """
        with self._db_lock:
            full, rid = self._resolve(episode_id, run_id)
            return turns_from_rows(self._turn_rows([(rid, full)]), self.blobs)

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
                rows = fetch_dicts(self._db().execute(
                    f"SELECT * FROM episodes WHERE (run_id, episode_id) IN ({placeholders})",
                    [v for key in chunk for v in key]))
            by_key = {(r["run_id"], r["episode_id"]): r for r in rows}
            yield from self._with_turns([by_key[k] for k in chunk if k in by_key], batch_size)

    def _with_turns(self, rows: list[dict[str, Any]], batch_size: int) -> Iterator[Episode]:
        for start in range(0, len(rows), batch_size):
            chunk = rows[start:start + batch_size]
            with self._db_lock:
                rows_of_turns = self._turn_rows([(r["run_id"], r["episode_id"]) for r in chunk])
            by_episode: dict[tuple[str, str], list[dict[str, Any]]] = {}
            for t in rows_of_turns:
                by_episode.setdefault((t["run_id"], t["episode_id"]), []).append(t)
            for r in chunk:
                yield episode_from_row(r, turns_from_rows(
                    by_episode.get((r["run_id"], r["episode_id"]), []), self.blobs))

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
        return fetch_dicts(cur)

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
            return fetch_dicts(cur)

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
