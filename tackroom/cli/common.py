"""What every command shares: the consoles, the record-store option, list options, progress,
help texts that name a registry kind's entries.

Only what parsing the command line needs is imported here and in the command modules at
import time: each command imports the API it calls inside its function, so that
``tackroom --help`` (and every command) does not pay for DuckDB, Arrow, browsers or the trainer.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from tackroom.core.registry import choices
from tackroom.core.text import printable
from tackroom.records.paths import default_db
from tackroom.report.console import terminal_console

if TYPE_CHECKING:
    from rich.progress import Progress

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


#: A placeholder help text → what makes the real one (see :func:`lazy_help`).
_DEFERRED: dict[str, Callable[[], str]] = {}


def lazy_help(placeholder: str, make: Callable[[], str]) -> str:
    """A help text that :class:`HelpCommand` replaces by ``make()`` when a help page shows it.

    The registry's names of a kind are known only once its modules are imported (a suite's
    module imports its environments). Typer builds every command's options each time the
    CLI runs, so listing them in a help text up front would make every command, not only
    ``--help``, pay for importing every implementation. ``placeholder`` is the text until
    then (and the key: it must be unique).
    """
    _DEFERRED[placeholder] = make
    return placeholder


def kind_help(kind: str, template: str = "{}") -> str:
    """``template`` with the registered names of ``kind`` (``a, b, c``) in its ``{}``, read
    when a help page shows it (see :func:`lazy_help`)."""
    return lazy_help(template.format(f"see `tackroom list {kind}`"),
                     lambda: template.format(choices(kind)))


def _resolve_help(params: list[Any]) -> None:
    for param in params:
        make = _DEFERRED.get(getattr(param, "help", None) or "")
        if make is not None:
            param.help = make()


class HelpCommand(TyperCommand):
    """A command whose deferred help texts (:func:`lazy_help`) are made when its help is shown."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        _resolve_help(self.params)
        super().format_help(ctx, formatter)


class HelpGroup(TyperGroup):
    """A group (a callback with options) with deferred help texts, as :class:`HelpCommand`."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        _resolve_help(self.params)
        super().format_help(ctx, formatter)


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
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), TextColumn("eta"),
                  TimeRemainingColumn(), console=console, disable=not enabled) as progress:
        yield Bar(progress, label, total, stats)
