"""``tackroom report``: the terminal tables and the self-contained HTML page of some runs."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from tackroom.cli.common import DEFAULT_DB, DbOpt, console, split
from tackroom.core.errors import ConfigError


def report_cmd(
    runs: Annotated[list[str], typer.Argument(help="Run ids ('latest' for the newest).")],
    out: Annotated[str | None, typer.Option("--out", "-o", help="HTML file to write.")] = None,
    trained: Annotated[list[str] | None, typer.Option(
        "--trained", help="POLICY=HARNESS: the harness a policy was trained under "
        "(enables the transfer matrix and the 'retrained' ceiling). Repeat or comma-separate."
    )] = None,
    gain: Annotated[list[str] | None, typer.Option(
        "--gain", help="BEFORE=AFTER@HARNESS: policy AFTER is BEFORE trained further under "
        "HARNESS (enables the gain scatter: ΔJ against C and M measured before). Repeat."
    )] = None,
    compare: Annotated[list[str] | None, typer.Option(
        "--compare", help="POLICY@HARNESS cells for the conflation view (every two are "
        "compared); default: each policy under its own harness. Repeat or comma-separate."
    )] = None,
    db: DbOpt = DEFAULT_DB,
) -> None:
    """Summarise runs in the terminal and write a self-contained HTML report.

    The report shows success with intervals, each harness's ceiling (and which estimator
    stands behind it), each policy's mismatch M = C − J, what cross-harness gaps are made
    of (ceiling part vs mismatch part), the transfer matrix when training harnesses are
    given, the gain scatter when further-trained policies are named, and an episode
    browser. It needs no network to view. POLICY may be a policy id (as the tables show
    it) or the spec it was run with (e.g. [cyan]bundled[/cyan], [cyan]hf:out/final[/cyan]).

    [bold]Examples[/bold]

      tackroom report latest

      tackroom report RUN_A RUN_B --trained hf:ckpt-a=som-tools --out report.html

      tackroom report BEFORE AFTER --trained bundled=som-tools \\
          --gain bundled=hf:sft-html/final@html-commands

      tackroom report latest --compare bundled@som-tools,expert@html-commands
    """
    train_harness: dict[str, str] = {}
    for item in split(trained):
        name, sep, harness_name = item.rpartition("=")
        if not sep or not name or not harness_name:
            raise ConfigError(f"cannot read {item!r}", "--trained", "write POLICY=HARNESS")
        train_harness[name] = harness_name
    gain_pairs = []
    for item in gain or []:
        pair, at, harness_name = item.rpartition("@")
        before, eq, after = pair.partition("=")
        if not (at and eq and before and after and harness_name):
            raise ConfigError(f"cannot read {item!r}", "--gain",
                              "write BEFORE=AFTER@HARNESS, e.g. "
                              "bundled=hf:sft-html/final@html-commands")
        gain_pairs.append((before, after, harness_name))
    cells = []
    for item in split(compare):
        name, at, harness_name = item.rpartition("@")
        if not at or not name or not harness_name:
            raise ConfigError(f"cannot read {item!r}", "--compare",
                              "write POLICY@HARNESS, e.g. bundled@som-tools")
        cells.append((name, harness_name))
    from tackroom.app.reporting import report

    rep = report(runs, out=out, store=db, trained=train_harness, gain=gain_pairs, compare=cells)
    for table in rep.tables():
        console.print(table)
    console.print(f"[bold]report:[/bold] {escape(str(rep.path))}")
