"""The record store's writer: episodes queued, group-committed by a background thread.

Every writer calls :meth:`~tackroom.records.store.RecordStore.append`, which hands the
episode's rows to :meth:`EpisodeWriter.queue` and returns; a background thread commits
the queue at most ``commit_interval`` seconds later (sooner when ``max_pending`` wait,
or on :meth:`EpisodeWriter.flush`), in one transaction, since one commit costs a disk
sync (~10-20 ms). An episode and its turns always land in the same transaction, so a
crash (even ``SIGKILL``) leaves each episode whole or absent. A failed background
commit is kept and reported by the next call that queues or flushes.

A full disk is named as such (:func:`write_error`): one line that says the file system
is full, where, and what to do — never DuckDB's own words about a transaction it
could not roll back.
"""

from __future__ import annotations

import contextlib
import errno
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from tackroom.core.errors import RecordStoreError
from tackroom.records.rows import arrow_table
from tackroom.records.schema import EPISODE_SCHEMA, TURN_SCHEMA

__all__ = ["HEARTBEAT_S", "EpisodeWriter", "Rows", "is_disk_full", "write_error", "writing"]

#: Seconds between heartbeats written with a run's episodes.
HEARTBEAT_S = 5.0
#: One episode's rows: its ``episodes`` row and its ``turns`` rows.
Rows = tuple[dict[str, Any], list[dict[str, Any]]]
_RESUME = "re-run with --resume"


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the file system (or the user's quota) is full."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(exc).lower()
    return "no space left on device" in text or "disk quota exceeded" in text


def write_error(exc: BaseException, path: Path, what: str, lost: str = "") -> RecordStoreError:
    """The one-line :class:`RecordStoreError` for a write to the store at ``path`` that failed.

    ``what`` is what was being written (``"2 episode(s)"``, ``"the run"``); ``lost``
    says what was not recorded and how to get it back.
    """
    if isinstance(exc, RecordStoreError):
        return exc
    if is_disk_full(exc):
        return RecordStoreError(
            f"no space left on device: writing {what} failed", str(path),
            f"free space on the file system of {path.parent} (or pass --db on another "
            f"one){', then ' + lost if lost else ''}")
    return RecordStoreError(f"writing {what} failed: {exc}", str(path),
                            lost or "check the store's file system and permissions")


@contextlib.contextmanager
def writing(path: Path, what: str, lost: str = "") -> Iterator[None]:
    """Turn a DuckDB or OS failure inside the block into :func:`write_error`'s line."""
    try:
        yield
    except (duckdb.Error, OSError) as exc:
        raise write_error(exc, path, what, lost) from exc


def insert(con: duckdb.DuckDBPyConnection, replace: bool) -> None:
    """Insert the registered ``_tackroom_new_*`` tables in one transaction.

    With ``replace``, the episodes' old records (and their turns) go first, in the
    same transaction. A rollback that fails too (DuckDB has often ended the
    transaction itself when a commit failed) never hides the failure that caused it.
    """
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
        with contextlib.suppress(duckdb.Error):
            con.rollback()
        raise


class EpisodeWriter:
    """The queue of appended episodes and the thread that commits it.

    Args:
        path: the store's file (for messages and the thread's name).
        connection: returns the store's open connection (raises when it is closed).
        db_lock: the lock that serialises use of the connection; taken before the
            queue's own lock, never after.
        commit_interval: seconds an episode may wait to be committed with later ones;
            ``0`` commits before :meth:`queue` returns.
    """

    def __init__(self, path: Path, connection: Callable[[], duckdb.DuckDBPyConnection],
                 db_lock: threading.RLock, commit_interval: float) -> None:
        self.path = path
        self._connection = connection
        self._db_lock = db_lock
        self.commit_interval = max(0.0, float(commit_interval))
        #: Most episodes queued before a commit is forced.
        self.max_pending = 512
        #: Seconds an idle thread waits before it exits (the next append starts another).
        self.idle_s = 10.0
        # Guards the queue, so that ``queue`` never waits for a commit in progress.
        self._cond = threading.Condition(threading.Lock())
        # Queued episodes by ``(run_id, episode_id)``, the tables' key.
        self._pending: dict[tuple[str, str], Rows] = {}
        self._pending_since = 0.0
        #: A failed background commit, until the next call reports it.
        self.error: BaseException | None = None
        self._last_beat = 0.0
        self._thread: threading.Thread | None = None
        self.closing = False

    # -- queueing ------------------------------------------------------------

    def queue(self, rows: list[Rows]) -> None:
        """Queue episodes' rows (the newest write of a key wins); commit now if due."""
        with self._cond:
            if self.closing:
                self._connection()  # raises: closed
            if not self._pending:
                self._pending_since = time.monotonic()
            for ep_row, turns in rows:
                key = (ep_row["run_id"], ep_row["episode_id"])
                self._pending.pop(key, None)
                self._pending[key] = (ep_row, turns)
            now_please = self.commit_interval <= 0 or len(self._pending) >= self.max_pending
            if not now_please:
                self._start()
                self._cond.notify_all()
                # A failed background commit is reported here (these episodes
                # stay queued); appending them again is harmless.
                self._raise_error()
        if now_please:
            self.flush()

    def flush(self) -> None:
        """Commit every queued episode now."""
        with self._db_lock:
            self.flush_locked()

    def flush_locked(self) -> None:
        """Commit the queue in one transaction. Caller holds ``db_lock``."""
        with self._cond:
            earlier, self.error = self.error, None
            batch = list(self._pending.values())
            self._pending = {}
        try:
            if batch:
                self.write_tables(arrow_table([e for e, _ in batch], EPISODE_SCHEMA),
                                  arrow_table([t for _, ts in batch for t in ts], TURN_SCHEMA))
        finally:
            if earlier is not None:  # a background commit failed: report it now
                with self._cond:
                    self.error = earlier
                    self._raise_error()

    def stop(self) -> bool:
        """Stop the thread (the caller commits what is left); ``False`` if already stopped."""
        with self._cond:
            if self.closing:
                return False
            self.closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        return True

    # -- writing -------------------------------------------------------------

    def write_tables(self, episodes: pa.Table, turns: pa.Table) -> None:
        """Insert prepared tables in one transaction (caller holds ``db_lock``)."""
        batch = episodes.num_rows
        if not batch:
            return
        con = self._connection()
        con.register("_tackroom_new_episodes", episodes)
        con.register("_tackroom_new_turns", turns)
        try:
            with writing(self.path, f"{batch} episode(s)",
                         f"those episodes were not recorded; {_RESUME}"):
                try:
                    insert(con, replace=False)
                except duckdb.ConstraintException:
                    # Some ids exist already: replace them (delete + insert, one transaction).
                    insert(con, replace=True)
                self._beat(con, episodes)
        finally:
            with contextlib.suppress(duckdb.Error):
                con.unregister("_tackroom_new_episodes")
                con.unregister("_tackroom_new_turns")

    def _beat(self, con: duckdb.DuckDBPyConnection, episodes: pa.Table) -> None:
        """Note that this process is alive and writing the runs of ``episodes`` (at most
        every few seconds)."""
        now = time.time()
        if now - self._last_beat < HEARTBEAT_S:
            return
        self._last_beat = now
        run_ids = set(episodes.column("run_id").to_pylist())
        con.execute("UPDATE runs SET heartbeat_at = ? WHERE status = 'running' AND "
                    f"run_id IN ({', '.join('?' * len(run_ids))})", [now, *sorted(run_ids)])

    # -- the thread ----------------------------------------------------------

    def _start(self) -> None:
        # Caller holds ``_cond``.
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, daemon=True,
                                            name=f"tackroom-records-{self.path.name}")
            self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self.closing:
                    if not self._pending:
                        # Idle: exit after a while, so that a store nobody closed can
                        # still be garbage-collected; the next append starts a new one.
                        if not self._cond.wait(self.idle_s) and not self._pending:
                            self._thread = None
                            return
                        continue
                    wait = self._pending_since + self.commit_interval - time.monotonic()
                    if wait <= 0:
                        break
                    self._cond.wait(wait)
                if self.closing:
                    return  # the store's close() commits the rest
            try:
                self.flush()
            except BaseException as exc:  # noqa: BLE001 - surfaced by the next call
                with self._cond:
                    self.error = exc

    def _raise_error(self) -> None:
        # Caller holds ``_cond``.
        if self.error is not None:
            exc, self.error = self.error, None
            raise write_error(exc, self.path, "episodes",
                              f"the episodes queued then were not recorded; {_RESUME}") from exc
