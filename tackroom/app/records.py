"""Reading the record store: list runs, read a run's episodes or one episode, export a run.

The functions behind ``tackroom runs``, ``tackroom show`` and ``tackroom export``. Each
opens a store given as a path read-only (it works on a read-only file system and beside
a run that is writing), and takes an open :class:`~tackroom.records.RecordStore` as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tackroom.app.runs import open_store, resolve_run
from tackroom.core.episode import Episode
from tackroom.core.errors import ConfigError
from tackroom.records import RecordStore

#: ``--format`` of :func:`export_run` → the file (or folder) name after the run id.
EXPORT_FORMATS = {"jsonl": ".jsonl", "parquet": ".parquet", "atif": "-atif"}

#: The most runs :func:`list_runs` lists at once.
MAX_LISTED = 1_000_000

StoreRef = RecordStore | str | Path | None


@dataclass(frozen=True)
class RunEpisodes:
    """A run's id (``latest`` resolved) and its episode rows, every attempt, oldest first."""

    run_id: str
    rows: list[dict[str, Any]]


@dataclass(frozen=True)
class Export:
    """What :func:`export_run` wrote: how many episodes, and where."""

    run_id: str
    n_episodes: int
    path: Path


def list_runs(*, store: StoreRef = None, limit: int = 20) -> list[dict[str, Any]]:
    """The ``limit`` newest runs, newest first, each with its episode counts and success rate
    (:meth:`RecordStore.runs`'s rows)."""
    if not 1 <= limit <= MAX_LISTED:
        raise ConfigError(f"--limit {limit} is out of range", "--limit",
                          f"give a number of runs from 1 to {MAX_LISTED}")
    with open_store(store, read_only=True) as st:
        return st.runs()[:limit]


def read_run(run: str = "latest", *, store: StoreRef = None) -> RunEpisodes:
    """Run ``run`` (an id or ``latest``): its id and its episode rows, without turns."""
    with open_store(store, read_only=True) as st:
        run_id = resolve_run(st, run)
        return RunEpisodes(run_id, st.episodes(run_id=run_id))


def read_episode(run: str, episode: str, *, store: StoreRef = None) -> Episode:
    """Episode ``episode`` (an id or a unique prefix) of run ``run``, with its turns."""
    with open_store(store, read_only=True) as st:
        return st.load_episode(episode, run_id=resolve_run(st, run))


def export_run(run: str = "latest", *, fmt: str = "jsonl", out: str | Path | None = None,
               store: StoreRef = None) -> Export:
    """Write run ``run``'s episodes as JSONL, Parquet (for ``datasets``) or ATIF files.

    ``out`` defaults to ``RUN.jsonl``, ``RUN.parquet`` or the folder ``RUN-atif``.
    """
    from tackroom.records import export_atif, export_jsonl, export_parquet

    writers = {"jsonl": export_jsonl, "parquet": export_parquet, "atif": export_atif}
    if fmt not in writers:
        raise ConfigError(f"unknown export format {fmt!r}", "--format",
                          "choose jsonl, parquet or atif")
    with open_store(store, read_only=True) as st:
        run_id = resolve_run(st, run)
        target = Path(out) if out is not None else Path(f"{run_id}{EXPORT_FORMATS[fmt]}")
        n = writers[fmt](st, run_id, target)
    return Export(run_id, n, target)


__all__ = ["EXPORT_FORMATS", "Export", "RunEpisodes", "export_run", "list_runs",
           "read_episode", "read_run"]
