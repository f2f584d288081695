"""Small HTML pieces every section of the report uses: tables, intervals, notes, labels.

Every value written goes through :func:`~tackroom.report.plots.esc` (model output is
untrusted); a cell given to :func:`_table` is HTML already escaped by its caller.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tackroom.report.plots import esc

__all__ = ["ESTIMATOR_NOTES"]

#: What each ceiling estimator means, shown next to every ceiling number.
ESTIMATOR_NOTES = {
    "expert": "a scripted expert acting only through the harness's own interface "
              "(its mean per-task success)",
    "pass@k union": "the fraction of tasks solved at least once by any policy under the "
                    "harness, over all seeds and samples",
    "retrained": "the best success among policies trained under the harness",
}


def _when(ts: float | None) -> str:
    if ts is None:
        return "–"
    return _dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")


def _ci(lo: float | None, hi: float | None) -> str:
    if lo is None or hi is None:
        return "–"
    return f"{100 * lo:.0f}–{100 * hi:.0f}%"


def _minus(text: str) -> str:
    return text.replace("-", "−")


def _est_label(estimator: str) -> str:
    return f'<span class="est" title="{esc(ESTIMATOR_NOTES.get(estimator, estimator))}">' \
           f'{esc(estimator)}</span>'


def _note(text: str, omitted: bool = True) -> str:
    return f'<p class="note{" omitted" if omitted else ""}">{esc(text)}</p>'


def _table(head: Sequence[tuple[str, bool]], body: Iterable[Sequence[str]], cls: str = "data"
           ) -> str:
    """``head`` is (label, numeric); body cells are already-escaped HTML."""
    out = [f'<table class="{cls}"><thead><tr>']
    out += [f'<th{" class=num" if num else ""}>{esc(h)}</th>' for h, num in head]
    out.append("</tr></thead><tbody>")
    for row in body:
        out.append("<tr>" + "".join(
            f'<td{" class=num" if head[i][1] else ""}>{c}</td>' for i, c in enumerate(row))
            + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _short_tasks(tasks: Sequence[str]) -> dict[str, str]:
    """Task ids without their suite prefix when all share one suite."""
    suites = {t.split("/", 1)[0] for t in tasks if "/" in t}
    if len(suites) == 1 and all("/" in t for t in tasks):
        return {t: t.split("/", 1)[1] for t in tasks}
    return {t: t for t in tasks}


def _ivl(x: Mapping[str, Any] | None) -> str:
    """An audit interval ``{"value", "lo", "hi"}`` (fractions) in percentage points."""
    if not x or x.get("value") is None:
        return '<span class="muted">–</span>'
    lo, hi = x.get("lo"), x.get("hi")
    ci = "" if lo is None or hi is None else \
        f' <span class="ci">[{100 * lo:+.1f}, {100 * hi:+.1f}]</span>'
    return f"{100 * x['value']:+.1f} pp{ci}"
