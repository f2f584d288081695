"""Terminal tables of the optimiser (``tackroom optimize``) and of its BiPA audit
(:mod:`tackroom.optimize.audit`, ``tackroom audit``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tackroom.optimize.audit import Cost, DevTestRow, Interval, SelectionEffect, UnitUsage

__all__ = ["audit_tables", "optimize_table", "render_audit_tables"]


def optimize_table(result: Any) -> Any:
    """An optimiser run's final table (:class:`tackroom.app.optimization.OptimizeResult`):
    success of each harness on dev and test."""
    from rich.table import Table

    table = Table(title=f"optimiser run {result.run_id}")
    for col in ("harness", "dev", "test", "n dev", "n test"):
        table.add_column(col, justify="left" if col == "harness" else "right")
    for label, row in result.table.items():
        table.add_row(label, f"{row['dev']:.1%}", f"{row['test']:.1%}", str(row["n_dev"]),
                      str(row["n_test"]))
    return table


def audit_tables(result: Any) -> list[Any]:
    """Every table of an audit (:class:`tackroom.app.optimization.AuditResult`): one
    acceptance replay per round, then dev → test, skill sections and cost."""
    out: list[Any] = []
    for i, effect in enumerate(result.replay):
        for table in render_audit_tables(effect=effect):
            table.title = f"{table.title or 'acceptance replay'} (round {i})"
            out.append(table)
    return out + render_audit_tables(devtest=result.dev_test, usage=result.usage,
                                     costs=result.costs)


def _pp(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{100 * x:+.1f}"


def _ivl(i: Interval) -> str:
    if not math.isfinite(i.value):
        return "–"
    if not (math.isfinite(i.lo) and math.isfinite(i.hi)):
        return _pp(i.value)
    return f"{_pp(i.value)} [{_pp(i.lo)}, {_pp(i.hi)}]"


def render_audit_tables(effect: SelectionEffect | None = None,
                        devtest: Sequence[DevTestRow] = (),
                        usage: Sequence[UnitUsage] = (),
                        costs: Sequence[Cost] = ()) -> list[Any]:
    """Rich tables of the audit's parts that are given (gains in percentage points)."""
    from rich.markup import escape
    from rich.table import Table

    out: list[Any] = []
    if effect is not None:
        t = Table(title=f"Acceptance replay ({escape(effect.rule)}): selection effect, pp",
                  title_justify="left")
        for col in ("selected", "gain at selection", "gain on fresh", "selection effect",
                    "same pick on fresh"):
            t.add_column(col)
        t.add_row(escape(", ".join(effect.selected) or "(none)"), _ivl(effect.gain_selection),
                  _ivl(effect.gain_fresh), _ivl(effect.effect),
                  "yes" if effect.agreement.same else
                  f"no ({escape(', '.join(effect.agreement.replayed) or 'none')})")
        out.append(t)
    if devtest:
        t = Table(title="Dev → test: gain over the baseline, pp", title_justify="left")
        for col in ("candidate", "dev", "test", "drop", "n dev/test"):
            t.add_column(col)
        for r in devtest:
            t.add_row(escape(r.candidate), _ivl(r.dev), _ivl(r.test), _ivl(r.drop),
                      f"{r.n_dev}/{r.n_test}")
        out.append(t)
    if usage:
        t = Table(title="Skill sections: read (in context) and acted on", title_justify="left")
        for col in ("section", "text", "episodes in context", "episodes acted", "links"):
            t.add_column(col)
        for u in usage:
            text = u.text if len(u.text) <= 60 else u.text[:57] + "…"
            t.add_row(escape(u.id), escape(text), str(u.episodes_in_context),
                      str(u.episodes_acted) + (" (never used)" if u.never_used else ""),
                      str(u.turns_acted))
        out.append(t)
    if costs:
        t = Table(title="Cost per accepted edit (after − before, per episode)",
                  title_justify="left")
        for col in ("edit", "input tokens", "turns", "n"):
            t.add_column(col)
        for c in costs:
            it, tu = c.input_tokens, c.turns
            t.add_row(escape(c.label or "edit"),
                      f"{it.diff:+.0f} [{it.lo:+.0f}, {it.hi:+.0f}]" if c.n else "–",
                      f"{tu.diff:+.2f} [{tu.lo:+.2f}, {tu.hi:+.2f}]" if c.n else "–", str(c.n))
        out.append(t)
    return out
