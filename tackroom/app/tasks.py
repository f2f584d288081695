"""Tasks from Python: list a suite's tasks, import terminal task directories (``tackroom tasks``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tackroom.core.task import Task
from tackroom.suites import get_suite

if TYPE_CHECKING:  # the importer (and its sandbox) is loaded only to import
    from tackroom.suites.terminal.importer import ImportResult


def list_tasks(suite: str = "toy") -> list[Task]:
    """Every task of ``suite`` (a registered name or ``module:factory``), in the suite's order."""
    return list(get_suite(suite).tasks())


@dataclass(frozen=True)
class TaskImport:
    """What :func:`import_tasks` did: one result per folder looked at, and where tasks went."""

    source: Path
    results: list[ImportResult]
    store: Path

    @property
    def n_imported(self) -> int:
        """Folders imported (the others were skipped, each result says why)."""
        return sum(r.imported for r in self.results)


def import_tasks(directory: str | Path, *, check: bool = True, sandbox: str = "bubblewrap",
                 on_folders: Callable[[int], None] | None = None,
                 on_start: Callable[[str], None] | None = None,
                 progress: Callable[[str, str], None] | None = None,
                 on_task: Callable[[ImportResult], None] | None = None) -> TaskImport:
    """Import Harbor or Terminal-Bench task directories into ``$TACKROOM_TASKS``.

    ``directory`` is one task directory or a folder of them. With ``check`` each task's
    environment is built and the task run in the sandbox first: its tests must fail
    untouched and pass after its reference solution. ``sandbox`` is a registered sandbox
    provider (``bubblewrap``, ``docker``); one that runs images is checked to be usable
    before anything is imported.

    ``on_folders(n)`` is told how many folders will be looked at; ``on_start(id)`` and
    ``on_task(result)`` bracket each; ``progress(id, message)`` reports a build.
    """
    from tackroom.sandbox import provider
    from tackroom.suites.terminal import BUILTIN
    from tackroom.suites.terminal.importer import import_tasks as _import
    from tackroom.suites.terminal.importer import task_folders, task_store

    chosen = provider(sandbox)  # an unknown name: one line naming the registered ones
    if chosen.runs_images:
        chosen.require()
    builtin = frozenset(p.name for p in BUILTIN.iterdir() if p.is_dir())
    source = Path(directory)
    folders = task_folders(source)
    if on_folders is not None:
        on_folders(len(folders))
    results = _import(source, builtin=builtin, check=check, on_task=on_task,
                      on_start=on_start, progress=progress, sandbox=sandbox)
    return TaskImport(source, results, task_store())


__all__ = ["TaskImport", "import_tasks", "list_tasks"]
