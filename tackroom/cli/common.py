"""What every command shares: the consoles, the record-store option, list options, progress."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Annotated, Any

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from tackroom.core.text import printable
from tackroom.records import default_db
from tackroom.report.terminal import terminal_console

# Piped output (CI logs, files) gets wide tables instead of rich's 80-column default.
_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160
# Every line the CLI prints goes through these two: control characters in what they print
# (a model's output, a file name) are escaped, never obeyed. Values printed with markup
# are also markup-escaped.
console = terminal_console(width=_WIDTH)
err_console = terminal_console(stderr=True, width=_WIDTH)

DbOpt = Annotated[str, typer.Option(
    "--db", help="Record store (DuckDB file; default $TACKROOM_DB or "
    "./tackroom-runs/tackroom.duckdb).")]
RayOpt = Annotated[bool, typer.Option(
    "--ray", help="Run episodes on Ray actors (a local cluster sized to this machine).")]
RayAddressOpt = Annotated[str | None, typer.Option(
    help="Join this Ray cluster instead (auto, HOST:6379, ray://HOST:10001); implies --ray.")]

#: ``--db`` when not given: ``$TACKROOM_DB``, else the project's default path.
DEFAULT_DB = default_db()


def split(values: list[str] | None) -> list[str]:
    """``--opt a,b --opt c`` → ``[a, b, c]``."""
    out: list[str] = []
    for v in values or []:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


class Bar:
    """One progress bar with a stats column and an ETA; a plain line every 5% in logs."""

    def __init__(self, progress: Progress, label: str, total: int | None, stats: str) -> None:
        self.progress = progress
        # The bar's columns render their text directly, not through the console: escaped here.
        self.task = progress.add_task(printable(label), total=total, stats=printable(stats))
        self._last_logged = -1

    def update(self, completed: int, total: int | None = None, stats: str | None = None) -> None:
        fields: dict[str, Any] = {"stats": printable(stats)} if stats is not None else {}
        if total is not None:
            fields["total"] = total
        self.progress.update(self.task, completed=completed, **fields)
        total = total or self.progress.tasks[self.task].total  # type: ignore[assignment]
        if not console.is_terminal and total:
            # Logs and CI have no live bar: a line every 5% instead.
            bucket = completed * 20 // int(total)
            if bucket > self._last_logged or completed == total:
                self._last_logged = bucket
                console.print(f"{self.progress.tasks[self.task].description} "
                              f"{completed}/{int(total)} · {stats or ''}", highlight=False)

    def note(self, line: str) -> None:
        """A line above the bar."""
        self.progress.console.print(line, markup=False, highlight=False)


@contextlib.contextmanager
def progress_bar(label: str, total: int | None = None, stats: str = "",
                 enabled: bool = True) -> Iterator[Bar]:
    """``with progress_bar("episodes", n) as bar: bar.update(k, stats=…)`` — the one bar."""
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), TextColumn("eta"),
                  TimeRemainingColumn(), console=console, disable=not enabled) as progress:
        yield Bar(progress, label, total, stats)
