"""A recorded run, read back from the record store; naming runs (``latest``, new ids)."""

from __future__ import annotations

import contextlib
import datetime as _dt
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tackroom.analysis.summary import CellSummary, by_harness_policy, final_attempts
from tackroom.core.episode import Episode, Outcome
from tackroom.core.errors import ConfigError
from tackroom.core.run import RunConfig
from tackroom.records import RecordStore, default_db


def new_run_id() -> str:
    """A fresh run id: the local time and four hex digits, e.g. ``20261201-101500-ab12``."""
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def resolve_run(store: RecordStore, ref: str) -> str:
    """The id of run ``ref`` in ``store``: an id, or ``latest`` for the newest run.

    Raises:
        ConfigError: no such run (names the store and how to list its runs).
    """
    run_id = store.latest_run_id() if ref == "latest" else ref
    if run_id is None or store.run(run_id) is None:
        raise ConfigError(f"no run {ref!r}", str(store.path), "list runs with `tackroom runs`")
    return run_id


@contextlib.contextmanager
def open_store(store: RecordStore | str | Path | None, *,
               read_only: bool = False) -> Iterator[RecordStore]:
    """``store`` itself if it is an open store (left open), else a store opened on that path
    (default :func:`tackroom.records.default_db`) and closed on exit.

    ``read_only=True`` opens the path without writing, for reading commands: it works on a
    read-only file or file system, beside other readers, and never creates a store.
    """
    if isinstance(store, RecordStore):
        yield store
        return
    with RecordStore(store or default_db(), read_only=read_only) as opened:
        yield opened


@dataclass
class Run:
    """One recorded run: its id, where it is stored, its configuration and status.

    Reading methods go to the record store each time, so a run read while it
    is still going shows what has been recorded so far::

        run = tackroom.evaluate(suite="toy", policies=["expert"], seeds=range(3))
        run.success_rate            # successes / scored episodes (infra errors apart)
        run.summary()               # one CellSummary per (harness, policy)
        run.episodes()              # episode rows (dicts), every attempt
        for ep in run.load_episodes(): ...   # full Episode objects with turns
    """

    id: str
    db: Path
    config: RunConfig
    command: str = "eval"
    status: str = "finished"
    manifest_hash: str | None = None
    n_planned: int = 0
    _store: RecordStore | None = field(default=None, repr=False, compare=False)

    @classmethod
    def open(cls, run_id: str = "latest", store: RecordStore | str | Path | None = None) -> Run:
        """The run called ``run_id`` (or ``latest``) in ``store`` (a store or its path)."""
        with open_store(store) as st:
            rid = resolve_run(st, run_id)
            return cls.from_record(st.run(rid) or {}, st)

    @classmethod
    def from_record(cls, info: dict[str, Any], store: RecordStore) -> Run:
        """A run from a ``RecordStore.run()`` row; keeps ``store`` for reading while it is open."""
        return cls(id=str(info["run_id"]), db=Path(store.path),
                   config=RunConfig.from_dict(info.get("config")),
                   command=str(info.get("command") or ""), status=str(info.get("status") or ""),
                   manifest_hash=info.get("manifest_hash"),
                   n_planned=int(info.get("n_planned") or 0), _store=store)

    @contextlib.contextmanager
    def store(self) -> Iterator[RecordStore]:
        """The record store this run lives in (the caller's, while it is open)."""
        if self._store is not None and not self._store.closed:
            yield self._store
            return
        with RecordStore(self.db) as store:
            yield store

    def refresh(self) -> Run:
        """The same run with its status and configuration read again from the store."""
        with self.store() as store:
            info = store.run(self.id) or {}
        return replace(self, config=RunConfig.from_dict(info.get("config")),
                       status=str(info.get("status") or ""),
                       manifest_hash=info.get("manifest_hash"),
                       n_planned=int(info.get("n_planned") or 0))

    def episodes(self, **filters: Any) -> list[dict[str, Any]]:
        """The run's episode rows (every attempt), optionally filtered by column values."""
        with self.store() as store:
            return store.episodes(run_id=self.id, **filters)

    def final_episodes(self) -> list[dict[str, Any]]:
        """The last attempt of each cell: what success rates count."""
        return final_attempts(self.episodes())

    def load_episodes(self) -> list[Episode]:
        """Every episode of the run as an :class:`Episode`, turns included."""
        with self.store() as store:
            return list(store.iter_episodes(self.id))

    def summary(self) -> list[CellSummary]:
        """Success per (harness, policy), with Wilson intervals (``CellSummary.interval``)."""
        return by_harness_policy(self.episodes())

    @property
    def success_rate(self) -> float:
        """Successes over scored episodes (last attempts; infra errors are not scored)."""
        scored = [r for r in self.final_episodes() if r["outcome"] != Outcome.INFRA_ERROR]
        if not scored:
            return 0.0
        return sum(r["outcome"] == Outcome.SUCCESS for r in scored) / len(scored)

    @property
    def infra_errors(self) -> int:
        """Cells whose last attempt is still an infrastructure error."""
        return sum(r["outcome"] == Outcome.INFRA_ERROR for r in self.final_episodes())

    def __str__(self) -> str:
        return f"run {self.id} ({self.status}) in {self.db}"
