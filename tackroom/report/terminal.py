"""Rich tables for the terminal: the harness × policy summary and the per-task matrix."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.table import Table

from tackroom.analysis.summary import by_harness_policy, by_task


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def summary_table(rows: Iterable[dict[str, Any]], title: str = "Success by harness × policy",
                  inexpressible: dict[str, int] | None = None) -> Table:
    """Success rate with Wilson 95% interval, mean turns and tokens; infra errors apart."""
    table = Table(title=title, title_justify="left")
    for col, just in [("harness", "left"), ("policy", "left"), ("success", "right"),
                      ("95% CI", "right"), ("n", "right"), ("turns", "right"),
                      ("tokens", "right"), ("parse err", "right"), ("infra err", "right")]:
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    if inexpressible:
        table.add_column("cannot express", justify="right")
    for s in by_harness_policy(rows):
        lo, hi = s.interval
        cells = [s.harness, s.policy, _pct(s.rate), f"{_pct(lo)}–{_pct(hi)}", str(s.n),
                 f"{s.mean_turns:.1f}", f"{s.mean_tokens:.0f}", str(s.parse_errors),
                 str(s.infra_errors) if s.infra_errors else "·"]
        if inexpressible:
            cells.append(str(inexpressible.get(s.harness, 0)) + " tasks")
        table.add_row(*cells)
    return table


def task_matrix(rows: Iterable[dict[str, Any]], harnesses: list[str], policy: str,
                inexpressible: set[tuple[str, str]] | None = None) -> Table:
    """Tasks × harnesses success for one policy; ``n/a`` where a harness cannot express a task."""
    rows = list(rows)
    cells = by_task(rows)
    tasks = sorted({r["task"] for r in rows} | {t for t, _ in (inexpressible or set())})
    table = Table(title=f"Success per task — {policy}", title_justify="left")
    table.add_column("task")
    for h in harnesses:
        table.add_column(h, justify="right")
    for task in tasks:
        line = [task.split("/", 1)[-1]]
        for h in harnesses:
            s = cells.get((task, h, policy))
            if inexpressible and (task, h) in inexpressible:
                line.append("[dim]n/a[/dim]")
            elif s is None:
                line.append("")
            else:
                colour = "green" if s.rate >= 0.9 else "yellow" if s.rate >= 0.5 else "red"
                infra = f" [magenta]+{s.infra_errors}i[/magenta]" if s.infra_errors else ""
                line.append(f"[{colour}]{_pct(s.rate)}[/{colour}] ({s.successes}/{s.n}){infra}")
        table.add_row(*line)
    return table
