"""Rich tables for the terminal, read from the report's view-model.

:func:`report_tables` is what ``tackroom report`` prints: the harness × policy
summary, ceiling and mismatch, conflation and one table per sealed run, all
read from one :class:`~tackroom.report.view.ReportView` (the numbers the HTML
page shows). :func:`summary_table` and :func:`task_matrix` also take plain
episode rows, for ``tackroom eval`` to print right after a run.

:func:`terminal_console` is the console everything printed to a terminal goes through
(the CLI's, the examples'): text printed with it has its control characters escaped
(:func:`tackroom.core.text.printable`), so a model's ``ESC [31m`` in a replayed episode,
a table cell or a progress line is shown as ``\\x1b[31m``, never obeyed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rich.console import RenderableType
from rich.markup import escape
from rich.table import Table

from tackroom.analysis.summary import by_harness_policy, by_task
from tackroom.report.console import TerminalConsole, terminal_console
from tackroom.report.plots import pp
from tackroom.report.view import ReportView, rows_view, summary_entry

__all__ = ["report_tables", "summary_table", "task_matrix", "ceiling_mismatch_table",
           "conflation_table", "sealed_table", "terminal_console", "TerminalConsole"]

Rows = Iterable[dict[str, Any]]

def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def report_tables(view: ReportView) -> list[RenderableType]:
    """What ``tackroom report`` prints, in order: summary, ceiling and mismatch, conflation,
    then one table per sealed run (every cell of its manifest)."""
    return [summary_table(view), ceiling_mismatch_table(view), conflation_table(view),
            *(sealed_table(sec) for sec in view["sealed"]),
            *(t for sec in view.data.get("selfhpo") or [] for t in self_hpo_tables(sec))]


def self_hpo_tables(sec: Mapping[str, Any]) -> list[Table]:
    """A Self-HPO run (:func:`tackroom.app.selfhpo.read_self_hpo`): its lineage (dev success
    after each round of each arm), the sealed table of final and crossed pairs, the effects."""
    lineage = Table(title=f"Self-HPO run {sec['run_id']}: lineage (dev success after each "
                    "round)", title_justify="left")
    for col in ("arm", "round", "harness accepted", "edits", "proposer", "updates", "dev"):
        lineage.add_column(col, justify="right" if col in ("round", "updates", "dev") else "left")
    lineage.add_row("start", "-", "-", "-", "-", "0", _pct(sec["start_dev"]))
    for arm, rounds in sec["lineage"].items():
        for r in rounds:
            edits = ", ".join(e.get("op", "?") for e in r["edits"]) or "-"
            proposer = r["proposer"] if len(r["proposer"]) <= 40 else "…" + r["proposer"][-39:]
            lineage.add_row(escape(arm), str(r["round"]),
                            escape(r["accepted"] or "nothing") if r["harness_phase"] else "-",
                            escape(edits), escape(proposer) if r["harness_phase"] else "-",
                            str(r["updates"]), _pct(r["dev"]))
    sealed = Table(title=f"sealed evaluation on test ({sec['sealed_run']}; success, Wilson 95%)",
                   title_justify="left")
    names = list(next(iter(sec["table"].values()), {}))
    sealed.add_column("policy")
    for name in names:
        sealed.add_column(escape(name), justify="right")
    for label, cells in sec["table"].items():
        sealed.add_row(escape(label), *(f"{_pct(c['rate'])} [{_pct(c['lo'])}, {_pct(c['hi'])}] "
                                        f"n={c['n']}" for c in cells.values()))
    effects = Table(title="effects (paired bootstrap over task × seed)", title_justify="left")
    for col in ("effect", "Δ pp", "95% interval", "p", "pairs"):
        effects.add_column(col, justify="left" if col == "effect" else "right")
    for name, e in sec["effects"].items():
        effects.add_row(escape(name), f"{100 * e['diff']:+.1f}", f"[{100 * e['lo']:+.1f}, "
                        f"{100 * e['hi']:+.1f}]", f"{e['p']:.3f}", str(e["n"]))
    return [lineage, sealed, effects]


def summary_table(rows: ReportView | Rows, title: str = "Success by harness × policy",
                  inexpressible: dict[str, int] | None = None) -> Table:
    """Success rate with Wilson 95% interval, mean turns and tokens; infra errors apart.

    ``rows``: a :class:`ReportView` (its ``summary``, in the page's order) or
    episode rows (final attempts counted here, in first-seen order).
    """
    cells = rows["summary"] if isinstance(rows, ReportView) else \
        [summary_entry(s) for s in by_harness_policy(rows)]
    table = Table(title=title, title_justify="left")
    for col, just in [("harness", "left"), ("policy", "left"), ("success", "right"),
                      ("95% CI", "right"), ("n", "right"), ("turns", "right"),
                      ("tokens", "right"), ("parse err", "right"), ("infra err", "right")]:
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    if inexpressible:
        table.add_column("cannot express", justify="right")
    for s in cells:
        line = [escape(s["harness"]), escape(s["policy"]), _pct(s["rate"]), f"{_pct(s['lo'])}–{_pct(s['hi'])}",
                str(s["n"]), f"{s['mean_turns']:.1f}", f"{s['mean_tokens']:.0f}",
                str(s["parse_errors"]), str(s["infra_errors"]) if s["infra_errors"] else "·"]
        if inexpressible:
            line.append(str(inexpressible.get(s["harness"], 0)) + " tasks")
        table.add_row(*line)
    return table


def task_matrix(rows: Iterable[dict[str, Any]], harnesses: list[str], policy: str,
                inexpressible: set[tuple[str, str]] | None = None) -> Table:
    """Tasks × harnesses success for one policy; ``n/a`` where a harness cannot express a task."""
    rows = list(rows)
    cells = by_task(rows)
    tasks = sorted({r["task"] for r in rows} | {t for t, _ in (inexpressible or set())})
    table = Table(title=f"Success per task — {escape(policy)}", title_justify="left")
    table.add_column("task")
    for h in harnesses:
        table.add_column(escape(h), justify="right")
    for task in tasks:
        line = [escape(task.split("/", 1)[-1])]
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


def ceiling_mismatch_table(view: ReportView | Rows,
                           train_harness: dict[str, str] | None = None) -> Table:
    """Per harness: its best ceiling estimate (and which estimator), then J and M = C − J per policy.

    ``view``: a :class:`ReportView`. Episode rows (with ``train_harness``) are
    still read, through :func:`~tackroom.report.view.rows_view`: a
    compatibility path that computes a whole view for this one table.
    """
    if not isinstance(view, ReportView):
        view = rows_view(view, train_harness=train_harness)
    table = Table(title="Ceiling and mismatch: J_h(π) = C(h) − M(π, h)", title_justify="left")
    for col, just in [("harness", "left"), ("ceiling C(h)", "right"), ("estimator", "left"),
                      ("policy", "left"), ("success J", "right"), ("mismatch M", "right"),
                      ("M 95% CI", "right")]:
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for h, c in view["best_ceiling"].items():
        ms = [m for m in view["mismatch"] if m["harness"] == h]
        first = True
        for m in ms or [None]:
            cells = [escape(h), f"{_pct(c['value'])} ({_pct(c['lo'])}–{_pct(c['hi'])})",
                     c["estimator"]] if first else ["", "", ""]
            first = False
            if m is None:
                table.add_row(*cells, "", "", "", "")
            else:
                table.add_row(*cells, escape(m["policy"]), _pct(m["success"]),
                              pp(m["mismatch"]),
                              f"{pp(m['lo'], unit=False)}…{pp(m['hi'], unit=False)}")
    if not table.rows:
        table.caption = view["notes"].get("ceiling") or view["notes"].get("mismatch")
        table.caption_justify = "left"
    return table


def sealed_table(section: dict[str, Any]) -> Table:
    """Every cell of a sealed run's manifest (policy × harness × task) with its seeds' outcomes.

    ``section`` is :func:`tackroom.runner.sealed.sealed_report`'s data. Infra errors
    and seeds not recorded are counted apart; pairs the harness cannot express are
    listed as such, so every cell of the manifest has a row.
    """
    t = section["totals"]
    check = "" if section["verified"] else \
        " [bold red](the recorded manifest does not match this hash)[/bold red]"
    table = Table(title=f"Sealed evaluation — manifest sha256:{section['manifest_hash']}{check}",
                  title_justify="left")
    for col, just in [("policy", "left"), ("harness", "left"), ("task", "left"),
                      ("seeds", "right"), ("success", "right"), ("failure", "right"),
                      ("infra err", "right"), ("not run", "right")]:
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for c in section["cells"]:
        harness = escape(c["harness"]) + (" [cyan](held out)[/cyan]" if c["held_out"] else "")
        head = [escape(c["policy"]), harness, escape(c["task"].split("/", 1)[-1]),
                str(c["seeds"])]
        if not c["expressible"]:
            table.add_row(*head, "[dim]n/a[/dim]", "[dim]n/a[/dim]", "[dim]n/a[/dim]",
                          "[dim]cannot express[/dim]")
            continue
        table.add_row(*head, str(c["success"]), str(c["failure"]),
                      f"[magenta]{c['infra']}[/magenta]" if c["infra"] else "·",
                      f"[yellow]{c['missing']}[/yellow]" if c["missing"] else "·")
    table.caption = (
        f"{t['cells']} cells, {t['episodes']} episodes: {t['success']} success, "
        f"{t['failure']} failure, {t['infra']} infra error (not scored), {t['missing']} not "
        f"run; {t['inexpressible_cells']} cells ({t['inexpressible_episodes']} episodes) "
        "cannot be expressed by their harness")
    table.caption_justify = "left"
    return table


def conflation_table(view: ReportView | Rows,
                     train_harness: dict[str, str] | None = None,
                     pairs: list[tuple[tuple[str, str], tuple[str, str]]] | None = None
                     ) -> Table:
    """What each cross-harness gap is made of: ``J_a − J_b = ΔC − ΔM``, one row per pair.

    The pairs are the view's (``compare``, by default
    :func:`tackroom.analysis.transfer.conflation_pairs`: each policy under its
    own harness against the others). A pair that cannot be split (no ceiling
    for a harness) is listed with the reason. Episode rows (with
    ``train_harness`` and ``pairs``) are still read, through
    :func:`~tackroom.report.view.rows_view` (a compatibility path).
    """
    if not isinstance(view, ReportView):
        view = rows_view(view, train_harness=train_harness, compare=pairs)
    table = Table(title="Conflation: a cross-harness gap = ceiling part − mismatch part",
                  title_justify="left")
    for col, just in [("a (policy · harness)", "left"), ("J_a", "right"),
                      ("b (policy · harness)", "left"), ("J_b", "right"), ("gap", "right"),
                      ("ceiling part ΔC", "right"), ("mismatch part −ΔM", "right")]:
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    done = list((view["conflation"] or {}).get("pairs") or [])
    skipped = {s["at"]: s for s in view["conflation_skipped"]}
    for i in range(len(done) + len(skipped)):
        p = skipped.get(i) or done.pop(0)
        left = escape(f"{p['a'][0]} · {p['a'][1]}")
        right = escape(f"{p['b'][0]} · {p['b'][1]}")
        if i in skipped:
            table.add_row(left, "", right, "", f"[dim]{escape(p['reason'])}[/dim]", "", "")
            continue
        table.add_row(left, _pct(p["success_a"]), right, _pct(p["success_b"]),
                      f"[bold]{pp(p['gap'])}[/bold]", pp(p["ceiling_part"]),
                      pp(-p["mismatch_part"] if p["mismatch_part"] is not None else None))
    if not table.rows:
        table.caption = view["notes"].get("conflation")
        table.caption_justify = "left"
    return table
