"""``tackroom list [KIND]``: what the registry holds, one line per entry."""

from __future__ import annotations

import re
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from tackroom.cli.common import console
from tackroom.core.registry import KINDS, entries, missing

# reST roles and literals in docstrings (``x``, :class:`X`) read as plain words in a terminal.
_ROLE = re.compile(r":\w+:`~?([^`]+)`")
_LITERAL = re.compile(r"(?<!`)(``|````)(?!`)\s*(.+?)\s*(?<!`)\1(?!`)")


def _plain(text: str) -> str:
    return _LITERAL.sub(r"\2", _ROLE.sub(r"\1", text))


def list_cmd(kind: Annotated[str | None, typer.Argument(
        help="One kind (" + ", ".join(KINDS) + "); default: every kind.")] = None) -> None:
    """List every registered suite, policy backend, harness part, algorithm … with one line each.

    Built-ins and plug-ins alike: a package adds entries through the ``tackroom`` entry-point
    group (see docs/extending.md). Modules whose optional extra is not installed are listed
    as such.

    [bold]Example[/bold]:  tackroom list suite
    """
    found = entries(kind, where="KIND")
    rows: list[tuple[str, str, str]] = []
    for k in [kind] if kind else list(KINDS):
        mine = [e for e in found if e.kind == k]
        rows += [(k, escape(e.name), escape(_plain(e.summary))) for e in mine]
        absent = missing(k)
        rows += [(k, f"[dim]{escape(module)}[/dim]", f"[yellow]not installed:[/yellow] "
                  f"{escape(why)}") for module, why in absent.items()]
        if not mine and not absent:
            rows.append((k, "[dim](none)[/dim]", escape(KINDS[k])))
    # One line per entry: the summary is cut to the terminal, never the kind or the name.
    kind_w = max(len(r[0]) for r in rows)
    name_w = max([len(e.name) for e in found] + [len("(none)")])
    table = Table(title="Registered extensions", title_justify="left")
    table.add_column("kind", no_wrap=True, min_width=kind_w)
    table.add_column("name", no_wrap=True, min_width=name_w)
    # rich narrows only wrapping columns: the summary gets what the terminal has left
    # (4 rules and 2 spaces of padding per column).
    table.add_column("summary", no_wrap=True, overflow="ellipsis",
                     max_width=max(20, console.width - kind_w - name_w - 10))
    for row in rows:
        table.add_row(*row)
    console.print(table)
