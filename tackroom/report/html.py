"""The self-contained HTML report: one file, no network, every number with its interval.

:func:`build_report` reads the records of some runs and writes one HTML file
with inline CSS, inline SVG plots and a small inline script. It shows:

* an overview: the runs, their dates, episode counts, infra errors apart;
* for sealed runs only, every cell of the manifest with the manifest hash
  (held-out harnesses marked, inexpressible pairs and infra errors apart);
* success by harness × policy and by task × harness (per policy), as
  heatmaps with Wilson 95% intervals in each cell's tooltip;
* *ceiling vs achieved*: every lower-bound estimate of the ceiling C(h),
  labelled with its estimator, each policy's success J and the mismatch
  M = C − J (docs/research.md §1);
* the transfer matrix (success of policies trained under one harness,
  evaluated under each) with drops from the diagonal, when told which
  harness each policy was trained under;
* the gain scatter (ΔJ against C and M) when gain data exists;
* an episode browser: a filterable list and a turn-by-turn viewer
  (messages, raw output, parse errors, actions, feedback, observations).

Sections whose data is absent are replaced by a one-line note saying why.
Every number comes from one :class:`~tackroom.report.view.ReportView`
(:func:`~tackroom.report.view.report_view`), the same the terminal tables read,
so they agree with the page; :func:`render_html` writes the page of a view,
:func:`build_report` builds the view and writes its page. The episode
browser's payload is :mod:`tackroom.report.browser`'s.

Model output is untrusted: everything written into the HTML goes through
:func:`~tackroom.report.plots.esc`, the embedded JSON has ``<``, ``>`` and
``&`` escaped as ``\\u003c`` etc. (a ``</script>`` in a model's output cannot
end the data block), the script builds the browser with ``textContent``
only, and a Content-Security-Policy allows no network at all and no script
but the report's own (pinned by its SHA-256).
"""

from __future__ import annotations

import base64
import contextlib
import datetime as _dt
import errno
import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tackroom.core.episode import Outcome
from tackroom.core.errors import ConfigError
from tackroom.report import plots
from tackroom.report.assets import CSS, JS
from tackroom.report.browser import MAX_IMAGE_BYTES, browser_data
from tackroom.report.plots import esc, pct
from tackroom.report.plots import pp as _pp
from tackroom.report.view import OUTCOMES, ReportView, report_data, report_view

__all__ = ["build_report", "render_html", "report_data", "ESTIMATOR_NOTES", "OUTCOMES"]

#: What each ceiling estimator means, shown next to every ceiling number.
ESTIMATOR_NOTES = {
    "expert": "a scripted expert acting only through the harness's own interface "
              "(its mean per-task success)",
    "pass@k union": "the fraction of tasks solved at least once by any policy under the "
                    "harness, over all seeds and samples",
    "retrained": "the best success among policies trained under the harness",
}


def _script_json(obj: Any) -> str:
    """JSON safe inside ``<script type="application/json">``: no ``<``, ``>`` or ``&``."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str)
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))



# ---------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------

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


def _section_overview(d: Mapping[str, Any]) -> str:
    c = d["counts"]
    s = c["success"]
    cards = [
        (f"{c['recorded']:,}", "episodes recorded", ""),
        (f"{c['scored']:,}", "scored (final attempts)", ""),
        (pct(s["rate"], 1), f"success, 95% CI {_ci(s['lo'], s['hi'])}", ""),
        (f"{c['infra_errors']:,}", "infra errors (not scored)", " infra"),
        (f"{c['tasks']} × {c['harnesses']} × {c['policies']}", "tasks × harnesses × policies", ""),
    ]
    out = ['<section id="overview"><h2>Overview</h2>',
           '<p class="lede">Only the final attempt of each (task, harness, policy, seed) cell is '
           'scored; episodes that ended in an infrastructure error are counted apart and never '
           'as task failures.</p><div class="cards">']
    for v, k, cls in cards:
        out.append(f'<div class="card{cls}"><div class="v">{esc(v)}</div>'
                   f'<div class="k">{esc(k)}</div></div>')
    out.append("</div>")
    notes = []
    if c["superseded"]:
        notes.append(f"{c['superseded']} recorded episode(s) were superseded by a later attempt "
                     f"of the same cell (an infra error retried"
                     + (", or a cell recorded in several of these runs" if
                        c["cells_in_several_runs"] else "") + "); the episode browser lists them.")
    if c["cells_in_several_runs"]:
        notes.append(f"{c['cells_in_several_runs']} cell(s) were recorded in more than one of "
                     "these runs; each counts once.")
    for n in notes:
        out.append(_note(n, omitted=False))
    body = []
    for r in d["runs"]:
        oc = r["outcomes"]
        planned = r["n_planned"]
        body.append([
            f'<span class="mono">{esc(r["run_id"])}</span>', esc(_when(r["created_at"])),
            esc(r["status"]), esc(r["command"]), esc(r["suite"]),
            esc(", ".join(r["harnesses"])), esc(", ".join(r["policies"])),
            esc(f"{r['n_episodes']}" + (f" / {planned}" if planned is not None else "")),
            esc(pct(r["success_rate"])), esc(str(oc.get(Outcome.INFRA_ERROR, 0) or "·"))])
    out.append(_table([("run", False), ("created", False), ("status", False),
                       ("command", False), ("suite", False), ("harnesses", False),
                       ("policies", False), ("episodes / planned", True), ("success", True),
                       ("infra err", True)], body))
    if d["train_harness"]:
        pairs = ", ".join(f"{p} → {h}" for p, h in d["train_harness"].items())
        out.append(_note(f"Trained policies (policy → harness trained under): {pairs}.",
                         omitted=False))
    out.append("</section>")
    return "".join(out)


def _section_sealed(d: Mapping[str, Any]) -> str:
    """Every cell of each sealed run's manifest; shown only when a run is sealed."""
    out = ['<section id="sealed"><h2>Sealed evaluation</h2>',
           '<p class="lede">These runs were sealed in advance by a manifest (policies × '
           'evaluation harnesses × tasks × seeds) and run whole. Every cell of the manifest '
           'has a row: seeds that succeeded, failed (including budget and timeout), ended in an '
           'infrastructure error (not scored), or were not run; pairs the harness cannot '
           'express are marked n/a. Harnesses held out of training are marked.</p>']
    for sec in d.get("sealed") or []:
        t = sec["totals"]
        check = "" if sec["verified"] else (
            ' <span class="badge failure">the recorded manifest does not match this hash'
            "</span>")
        held = ", ".join(sec["held_out"]) or "none"
        trained = ", ".join(sec["train_harnesses"]) or "not given"
        out.append(
            f'<h3>Run <span class="mono">{esc(sec["run_id"])}</span></h3>'
            f'<p>manifest <span class="mono">sha256:{esc(sec["manifest_hash"])}</span>{check}'
            f'<br><span class="muted">suite {esc(sec["suite"])} · {len(sec["policies"])} '
            f'policies × {len(sec["harnesses"])} harnesses × {sec["n_tasks"]} tasks × '
            f'{len(sec["seeds"])} seeds = {t["episodes"]} episodes · held out: {esc(held)} · '
            f'trained under: {esc(trained)} · sealed {esc(sec["created_at"])} by tackroom '
            f'{esc(sec["tackroom_version"])}</span></p>')
        cards = [(t["success"], "success"), (t["failure"], "failure"),
                 (t["infra"], "infra errors (not scored)"), (t["missing"], "not run"),
                 (t["inexpressible_episodes"], "cannot be expressed")]
        out.append('<div class="cards">' + "".join(
            f'<div class="card{" infra" if "infra" in k else ""}"><div class="v">{v:,}</div>'
            f'<div class="k">{esc(k)}</div></div>' for v, k in cards) + "</div>")
        body = []
        for c in sec["cells"]:
            harness = esc(c["harness"]) + (' <span class="est">held out</span>'
                                           if c["held_out"] else "")
            head = [esc(c["policy"]), harness, esc(c["task"]), str(c["seeds"])]
            if not c["expressible"]:
                body.append(head + ['<span class="muted">n/a</span>'] * 3
                            + ['<span class="muted">cannot express</span>'])
                continue
            body.append(head + [str(c["success"]), str(c["failure"]),
                                f"<b>{c['infra']}</b>" if c["infra"] else "·",
                                f"<b>{c['missing']}</b>" if c["missing"] else "·"])
        out.append(_table([("policy", False), ("harness", False), ("task", False),
                           ("seeds", True), ("success", True), ("failure", True),
                           ("infra err", True), ("not run", True)], body))
    return "".join(out) + "</section>"


def _ivl(x: Mapping[str, Any] | None) -> str:
    """An audit interval ``{"value", "lo", "hi"}`` (fractions) in percentage points."""
    if not x or x.get("value") is None:
        return '<span class="muted">–</span>'
    lo, hi = x.get("lo"), x.get("hi")
    ci = "" if lo is None or hi is None else \
        f' <span class="ci">[{100 * lo:+.1f}, {100 * hi:+.1f}]</span>'
    return f"{100 * x['value']:+.1f} pp{ci}"


def _section_optimizer(d: Mapping[str, Any]) -> str:
    """An optimiser run: its table on dev and test and, when audited, the BiPA audit."""
    out = ['<section id="optimizer"><h2>Optimiser and audit</h2>',
           '<p class="lede">A harness optimiser proposed edits, accepted candidates on dev and '
           "was scored on a test split it never read. The rest of this report shows its test "
           "evaluations: the parent harness, the hand-written seed skills and the optimiser's "
           "output. The audit re-runs the acceptance rule on fresh seeds (the selection effect: "
           "gain at selection minus gain on fresh seeds), compares dev with test, lists the skill "
           "rules the agent never acted on, and what each accepted edit cost "
           "(docs/optimize.md).</p>"]
    for opt in d.get("optimizer") or []:
        out.append(f'<h3>Run <span class="mono">{esc(opt["run_id"])}</span></h3>'
                   f'<p>accepted: {esc(", ".join(opt["accepted"]) or "nothing")}</p>')
        out.append(_table([("harness", False), ("dev", True), ("test", True), ("n dev", True),
                           ("n test", True)],
                          [[esc(k), pct(v["dev"]), pct(v["test"]), str(v["n_dev"]),
                            str(v["n_test"])] for k, v in opt["table"].items()]))
        audit = opt.get("audit")
        if not audit:
            out.append(_note(f"Not audited yet: tackroom audit {opt['run_id']}"))
            continue
        out.append("<h4>Acceptance replay</h4>" + _table(
            [("round", True), ("selected", False), ("gain at selection", True),
             ("gain on fresh seeds", True), ("selection effect", True), ("same pick", False)],
            [[str(i), esc(", ".join(e["selected"]) or "(none)"), _ivl(e["gain_selection"]),
              _ivl(e["gain_fresh"]), _ivl(e["effect"]),
              "yes" if e["agreement"]["same"] else "no"]
             for i, e in enumerate(audit["replay"])]))
        if audit["dev_test"]:
            out.append("<h4>Dev → test (gain over the parent)</h4>" + _table(
                [("candidate", False), ("dev", True), ("test", True), ("drop", True)],
                [[esc(r["candidate"]), _ivl(r["dev"]), _ivl(r["test"]), _ivl(r["drop"])]
                 for r in audit["dev_test"]]))
        rules = [u for u in audit["usage"] if "/" in u["id"]]
        if rules:
            out.append("<h4>Skill rules: in context and acted on (final harness, test)</h4>"
                       + _table([("rule", False), ("text", False), ("episodes in context", True),
                                 ("episodes acted on", True)],
                                [[esc(u["id"]), esc(u["text"][:120]),
                                  str(u["episodes_in_context"]),
                                  (f"{u['episodes_acted']} <b>never used</b>"
                                   if u["never_used"] else str(u["episodes_acted"]))]
                                 for u in rules]))
        if audit["costs"]:
            out.append("<h4>Cost per accepted edit (per episode)</h4>" + _table(
                [("edit", False), ("input tokens", True), ("turns", True)],
                [[esc(c["label"]), f"{c['input_tokens']['diff']:+.0f}",
                  f"{c['turns']['diff']:+.2f}"] for c in audit["costs"]]))
    return "".join(out) + "</section>"


def _section_selfhpo(d: Mapping[str, Any]) -> str:
    """Self-HPO runs: each arm's lineage (harness accepted and policy success per round), the
    sealed evaluation of the final pairs and crossed pairs, and the effects."""
    out = ['<section id="selfhpo"><h2>Self-HPO lineage</h2>',
           '<p class="lede">Self-HPO alternates a harness phase (the current policy proposes '
           "edits from its failures; the best on dev is kept) and a policy phase (RL under the "
           "kept harness). The harness arm only edits, the policy arm only trains, with the same "
           "budgets. The sealed evaluation runs every final policy under every final harness "
           "and the held-out ones on test seeds no phase saw; carry-over is how much more a "
           "policy's own harness helps it than it helps the start policy "
           "(docs/optimize.md).</p>"]
    for run in d.get("selfhpo") or []:
        out.append(f'<h3>Run <span class="mono">{esc(run["run_id"])}</span></h3>')
        arms = list(run["lineage"])
        points, paths, legend = [], [], []
        for i, arm in enumerate(arms):
            col = plots.policy_colour(i)
            xy = [(0.0, run["start_dev"])] + [(r["round"] + 1.0, r["dev"])
                                              for r in run["lineage"][arm]]
            paths.append((col, xy))
            legend.append((arm, col))
            points += [plots.Point(x, y, colour=col, tooltip=f"{arm} after round {x - 1:.0f}: "
                                   f"{pct(y)}" if x else f"start: {pct(y)}") for x, y in xy]
        out.append('<div class="plots">' + plots.scatter(
            points, title="dev success after each round", x_label="rounds done",
            y_label="dev success", legend=legend, paths=paths, x_pct=False,
            label_points=False, cls="lineage") + "</div>")
        rows = [["start", "–", "–", "–", "0", pct(run["start_dev"])]]
        for arm in arms:
            for r in run["lineage"][arm]:
                edits = ", ".join(e.get("op", "?") for e in r["edits"]) or "–"
                rows.append([esc(arm), str(r["round"]),
                             esc(r["accepted"] or "nothing") if r["harness_phase"] else "–",
                             esc(edits), str(r["updates"]), pct(r["dev"])])
        out.append(_table([("arm", False), ("round", True), ("harness accepted", False),
                           ("edits", False), ("updates", True), ("dev after", True)], rows))
        names = list(next(iter(run["table"].values()), {}))
        out.append("<h4>Sealed evaluation on test</h4>" + _table(
            [("policy", False)] + [(n, True) for n in names],
            [[esc(label)] + [f"{pct(c['rate'])} {_ci(c['lo'], c['hi'])}" for c in cells.values()]
             for label, cells in run["table"].items()]))
        out.append("<h4>Effects (paired bootstrap over task × seed)</h4>" + _table(
            [("effect", False), ("Δ", True), ("95% interval", True), ("pairs", True)],
            [[esc(name), _pp(e["diff"]), f"[{_pp(e['lo'])}, {_pp(e['hi'])}]", str(e["n"])]
             for name, e in run["effects"].items()]))
    return "".join(out) + "</section>"


def _section_success(d: Mapping[str, Any]) -> str:
    out = ['<section id="success"><h2>Success by harness × policy</h2>',
           '<p class="lede">Success rate over scored episodes with its Wilson 95% interval '
           '(hover a cell). A score belongs to a (policy, harness) pair. Click a cell to list '
           'its episodes.</p>']
    if not d["summary"]:
        out.append(_note("No episodes in these runs."))
        return "".join(out) + "</section>"
    cells = {}
    for s in d["summary"]:
        infra = f"; {s['infra_errors']} infra error(s) not scored" if s["infra_errors"] else ""
        cells[(s["policy"], s["harness"])] = plots.HeatCell(
            value=s["rate"], label=pct(s["rate"]) if s["n"] else "n/a",
            sub=f"{s['successes']}/{s['n']}" + (f" +{s['infra_errors']}i" if s["infra_errors"]
                                                 else ""),
            tooltip=(f"{s['policy']} under {s['harness']}: {s['successes']}/{s['n']} = "
                     f"{pct(s['rate'], 1)}, 95% Wilson CI {_ci(s['lo'], s['hi'])}{infra}"),
            attrs={"data-filter": "1", "data-policy": s["policy"], "data-harness": s["harness"]})
    svg = plots.heatmap(d["policies"], d["harnesses"], cells, x_label="harness",
                        y_label="policy", cell_w=96, cell_h=42, cls="heatmap summary")
    out.append(f'<div class="plots">{svg}</div>')
    body = []
    for s in d["summary"]:
        oc = s["outcomes"]
        body.append([esc(s["harness"]), esc(s["policy"]), f"<b>{esc(pct(s['rate'], 1))}</b>",
                     esc(_ci(s["lo"], s["hi"])), str(s["n"]), str(oc.get(Outcome.SUCCESS, 0)),
                     str(oc.get(Outcome.FAILURE, 0)), str(oc.get(Outcome.BUDGET_EXHAUSTED, 0)),
                     str(oc.get(Outcome.TIMEOUT, 0)), str(s["infra_errors"] or "·"),
                     f"{s['mean_turns']:.1f}", f"{s['mean_tokens']:.0f}", str(s["parse_errors"])])
    out.append("<h3>Outcomes</h3>")
    out.append(_table([("harness", False), ("policy", False), ("success", True),
                       ("95% CI", True), ("n", True), ("successes", True), ("failure", True),
                       ("budget", True), ("timeout", True), ("infra err", True),
                       ("turns", True), ("tokens", True), ("parse err", True)], body))
    return "".join(out) + "</section>"


def _section_tasks(d: Mapping[str, Any]) -> str:
    out = ['<section id="tasks"><h2>Success per task</h2>',
           '<p class="lede">One matrix per policy: tasks × harnesses. Each cell: success rate '
           'and successes / scored episodes (+N i = infra errors, not scored; in large '
           'matrices the counts are in the tooltip); hover for the Wilson 95% interval, click '
           'to list the episodes. A dot: not run (for instance a task the harness cannot '
           'express).</p>']
    if not d["matrix"]:
        out.append(_note("No episodes in these runs."))
        return "".join(out) + "</section>"
    names = _short_tasks(d["tasks"])
    by_policy: dict[str, dict[tuple[str, str], plots.HeatCell]] = defaultdict(dict)
    for m in d["matrix"]:
        infra = f"; {m['infra_errors']} infra error(s) not scored" if m["infra_errors"] else ""
        by_policy[m["policy"]][(m["task"], m["harness"])] = plots.HeatCell(
            value=m["rate"], label=pct(m["rate"]) if m["n"] else "n/a",
            sub=f"{m['successes']}/{m['n']}" + (f" +{m['infra_errors']}i" if m["infra_errors"]
                                                 else ""),
            tooltip=(f"{m['task']} under {m['harness']}, {m['policy']}: {m['successes']}/"
                     f"{m['n']} = {pct(m['rate'], 1)}, 95% Wilson CI {_ci(m['lo'], m['hi'])}; "
                     f"mean turns {m['mean_turns']:.1f}{infra}"),
            attrs={"data-filter": "1", "data-policy": m["policy"], "data-harness": m["harness"],
                   "data-task": m["task"]})
    # Many tasks: compact cells (rate only, counts in the tooltip) so matrices sit side by side.
    compact = len(d["tasks"]) > 15
    size = {"cell_w": 50, "cell_h": 22, "fit_labels": False} if compact else {}
    out.append('<div class="plots">')
    for p in d["policies"]:
        if p in by_policy:
            out.append(plots.heatmap(d["tasks"], d["harnesses"], by_policy[p], title=p,
                                     x_label="harness", y_label="task", row_names=names,
                                     cls="heatmap tasks", **size))
    out.append("</div></section>")
    return "".join(out)


def _section_ceiling(d: Mapping[str, Any]) -> str:
    notes = d["notes"]
    out = ['<section id="ceiling"><h2>Ceiling vs achieved</h2>',
           '<p class="lede">The ceiling C(h) is the best success any policy can reach under '
           'harness h; it is never observed, and every estimator below gives a <i>lower bound</i> '
           'of it, from a different kind of evidence. Each ceiling is labelled with its '
           'estimator; the largest (the tightest bound, red dashed line) is used for the '
           'mismatch M(π, h) = C(h) − J<sub>h</sub>(π), with J measured on the same tasks '
           '(mean per-task success). The hatched red gap on a policy\'s bar is M.</p>']
    if "ceiling" in notes:
        out.append(_note(notes["ceiling"]))
        return "".join(out) + "</section>"
    for key in ("ceiling_expert", "ceiling_retrained", "mismatch"):
        if key in notes:
            out.append(_note(notes[key], omitted=key == "mismatch"))
    ceils, best = d["ceilings"], d["best_ceiling"]
    mism = {(m["policy"], m["harness"]): m for m in d["mismatch"]}
    summary = {(s["policy"], s["harness"]): s for s in d["summary"]}
    colours = {p: plots.policy_colour(i) for i, p in enumerate(d["policies"])}
    groups = []
    for h in d["harnesses"]:
        ests = ceils.get(h) or []
        if not ests:
            continue
        bars = []
        for e in ests:
            if e["value"] is None:
                continue
            is_best = best.get(h, {}).get("estimator") == e["estimator"]
            bars.append(plots.Bar(
                label=f"C · {e['estimator']}", value=e["value"], lo=e["lo"], hi=e["hi"],
                kind="ceiling",
                tooltip=f"ceiling under {h}, estimator {e['estimator']!r}: {pct(e['value'], 1)} "
                        f"(95% {_ci(e['lo'], e['hi'])}); {e['detail']}",
                note=f"{e['estimator']}: {pct(e['value'])}" + (" ★" if is_best else "")))
        for p in d["policies"]:
            m = mism.get((p, h))
            if m is not None and m["success"] is not None:
                bars.append(plots.Bar(
                    label=p, value=m["success"], lo=m["success_lo"], hi=m["success_hi"],
                    colour=colours[p], gap_to=m["ceiling"],
                    tooltip=(f"{p} under {h}: J = {pct(m['success'], 1)} (95% "
                             f"{_ci(m['success_lo'], m['success_hi'])}) on {m['n_tasks']} tasks; "
                             f"C = {pct(m['ceiling'], 1)} ({m['ceiling_estimator']}); "
                             f"M = C − J = {_pp(m['mismatch'])} "
                             f"[{_pp(m['lo'])}, {_pp(m['hi'])}]"),
                    note=_minus(f"M = {_pp(m['mismatch'])}  [{_pp(m['lo'], unit=False)}, "
                                f"{_pp(m['hi'], unit=False)}]")))
            elif (p, h) in summary and summary[(p, h)]["rate"] is not None:
                s = summary[(p, h)]
                bars.append(plots.Bar(label=p, value=s["rate"], lo=s["lo"], hi=s["hi"],
                                      colour=colours[p], note="M: –",
                                      tooltip=f"{p} under {h}: {pct(s['rate'], 1)}"))
        b = best.get(h)
        groups.append(plots.BarGroup(
            title=h, bars=bars, ref=b["value"] if b else None,
            ref_label=f"best ceiling under {h}: {b['estimator']} {pct(b['value'], 1)}"
            if b else ""))
    legend = [("ceiling estimate (lower bound)", plots.CEILING_COLOUR, "ceiling"),
              ("best ceiling C", "#b91c1c", "line"), ("mismatch C − J", "#dc2626", "gap")]
    legend += [(p, colours[p], "bar") for p in d["policies"]]
    if groups:
        out.append('<div class="plots">' + plots.bar_groups(
            groups, x_label="success (bars: J with Wilson 95%; outlined: ceiling estimates)",
            legend=legend) + "</div>")
    out.append("<h3>Ceiling estimates</h3>")
    body = []
    for h in d["harnesses"]:
        for e in ceils.get(h) or []:
            is_best = best.get(h, {}).get("estimator") == e["estimator"]
            body.append([esc(h), _est_label(e["estimator"]) + (" ★" if is_best else ""),
                         f"<b>{esc(pct(e['value'], 1))}</b>", esc(_ci(e["lo"], e["hi"])),
                         str(e["n_tasks"]), f'<span class="muted">{esc(e["detail"])}</span>'])
    out.append(_table([("harness", False), ("estimator", False), ("C", True),
                       ("95% CI", True), ("tasks", True), ("how", False)], body))
    out.append('<p class="note">' + " ".join(
        f"<b>{esc(k)}</b>: {esc(v)}." for k, v in ESTIMATOR_NOTES.items())
        + " ★ marks the estimate used for the mismatch.</p>")
    if d["mismatch"]:
        out.append("<h3>Mismatch M = C − J</h3>")
        body = []
        for m in sorted(d["mismatch"], key=lambda m: (d["harnesses"].index(m["harness"])
                                                       if m["harness"] in d["harnesses"] else 0,
                                                       d["policies"].index(m["policy"])
                                                       if m["policy"] in d["policies"] else 0)):
            body.append([esc(m["harness"]), esc(m["policy"]), esc(pct(m["success"], 1)),
                         esc(_ci(m["success_lo"], m["success_hi"])),
                         esc(pct(m["ceiling"], 1)) + " " + _est_label(m["ceiling_estimator"]),
                         f"<b>{esc(_minus(_pp(m['mismatch'])))}</b>",
                         esc(_minus(f"{_pp(m['lo'])} … {_pp(m['hi'])}")),
                         str(m["n_tasks"]) + (f" ({m['n_missing']} not run)" if m["n_missing"]
                                              else "")])
        out.append(_table([("harness", False), ("policy", False), ("J", True),
                           ("J 95% CI", True), ("C (estimator)", True), ("M = C − J", True),
                           ("M 95% bootstrap", True), ("tasks", True)], body))
    if d["pass_at_k"]:
        h_pos = {h: i for i, h in enumerate(d["harnesses"])}
        p_pos = {p: i for i, p in enumerate(d["policies"])}
        rows = sorted(d["pass_at_k"], key=lambda p: (h_pos.get(p["harness"], 1 << 30),
                                                     p_pos.get(p["policy"], 1 << 30), p["k"]))
        body = [[esc(p["harness"]), esc(p["policy"]), str(p["k"]), esc(pct(p["value"], 1)),
                 esc(_ci(p["lo"], p["hi"])),
                 str(p["n_tasks"]) + (f" ({p['n_skipped']} skipped)" if p["n_skipped"] else "")]
                for p in rows]
        out.append(f'<details class="pak"><summary><h3>pass@k per policy, behind the pass@k '
                   f'union ({len(rows)} rows)</h3></summary>')
        out.append(_table([("harness", False), ("policy", False), ("k", True),
                           ("pass@k", True), ("95% CI", True), ("tasks", True)], body))
        out.append("</details>")
    return "".join(out) + "</section>"


def _section_transfer(d: Mapping[str, Any]) -> str:
    out = ['<section id="transfer"><h2>Transfer across harnesses</h2>',
           '<p class="lede">Success of the policies trained under one harness (rows, pooled) '
           'when evaluated under each harness (columns), Wilson 95% over episodes. The diagonal '
           'is the training harness; every other cell shows its change from the diagonal of its '
           'row (negative: success dropped when the harness was changed), with a paired '
           'bootstrap interval in the tooltip.</p>']
    tm = d["transfer"]
    if tm is None:
        out.append(_note(d["notes"].get("transfer", "No transfer data.")))
        return "".join(out) + "</section>"
    pols = tm.get("policies") or {}
    cells = {}
    for c in tm["cells"]:
        diag = c["train"] == c["eval"]
        drop = c.get("drop")
        sub = "trained here" if diag else (_minus(_pp(-drop)) if drop is not None else "")
        n_txt = f"{c['successes']}/{c['n']} = " if c.get("n") is not None else ""
        test = ""
        if not diag and c.get("drop_lo") is not None:
            test = _minus(f" (paired bootstrap 95% {_pp(-c['drop_hi'])} … {_pp(-c['drop_lo'])}"
                          f", p = {c['drop_p']:.3f}, {c['drop_pairs']} pairs)"
                          if c.get("drop_p") is not None else "")
        cells[(c["train"], c["eval"])] = plots.HeatCell(
            value=c["rate"], label=pct(c["rate"]), sub=sub,
            tooltip=(f"trained under {c['train']} ({', '.join(pols.get(c['train'], []))}), "
                     f"evaluated under {c['eval']}: {n_txt}{pct(c['rate'], 1)} "
                     f"(95% {_ci(c.get('lo'), c.get('hi'))})"
                     + ("" if diag or drop is None else
                        _minus(f"; change from the diagonal {_pp(-drop)}") + test)))
    out.append('<div class="plots">' + plots.heatmap(
        tm["train_harnesses"], tm["eval_harnesses"], cells, x_label="evaluated under",
        y_label="trained under", cell_w=104, cell_h=44, cls="heatmap transfer") + "</div>")
    body = []
    for c in tm["cells"]:
        diag = c["train"] == c["eval"]
        body.append([esc(c["train"]), esc(", ".join(pols.get(c["train"], []))), esc(c["eval"]),
                     f"<b>{esc(pct(c['rate'], 1))}</b>", esc(_ci(c.get("lo"), c.get("hi"))),
                     esc(str(c.get("n", ""))),
                     "diagonal" if diag else esc(_minus(_pp(-c["drop"])) if c.get("drop")
                                                 is not None else "–"),
                     esc(_minus(f"{_pp(-c['drop_hi'])} … {_pp(-c['drop_lo'])}"))
                     if c.get("drop_lo") is not None else ""])
    out.append(_table([("trained under", False), ("policies", False), ("evaluated under", False),
                       ("success", True), ("95% CI", True), ("n", True),
                       ("change vs diagonal", True), ("paired 95%", True)], body))
    if any(len(v) > 1 for v in pols.values()) and tm.get("by_policy"):
        out.append("<h3>Per policy</h3>")
        out.append(_note("A training harness pools several policies above; here each "
                         "policy has its own row (its change is from its own training "
                         "harness).", omitted=False))
        body = [[esc(c["policy"]), esc(c["train"] or ""), esc(c["eval"]),
                 f"<b>{esc(pct(c['rate'], 1))}</b>", esc(_ci(c.get("lo"), c.get("hi"))),
                 esc(str(c.get("n", ""))),
                 "diagonal" if c["eval"] == c["train"] else
                 esc(_minus(_pp(-c["drop"]))) if c.get("drop") is not None else "–"]
                for c in tm["by_policy"]]
        out.append(_table([("policy", False), ("trained under", False),
                           ("evaluated under", False), ("success", True), ("95% CI", True),
                           ("n", True), ("change vs its diagonal", True)], body))
    return "".join(out) + "</section>"


def _section_conflation(d: Mapping[str, Any]) -> str:
    out = ['<section id="conflation"><h2>Conflation: what a cross-harness gap is made of</h2>',
           '<p class="lede">Comparing agent a under harness h<sub>a</sub> with agent b under '
           'h<sub>b</sub> compares two things at once: since J<sub>h</sub>(π) = C(h) − M(π, h), '
           'the gap J<sub>a</sub> − J<sub>b</sub> = (C(h<sub>a</sub>) − C(h<sub>b</sub>)) − '
           '(M<sub>a</sub> − M<sub>b</sub>) exactly. The <b>ceiling part</b> is what the '
           'harnesses allow; the <b>mismatch part</b> is how badly each agent fits its '
           'harness. Only the second says anything about the agents. J and C are on each '
           'ceiling\'s tasks (mean per-task success).</p>']
    cf = d.get("conflation")
    if cf is None:
        out.append(_note(d["notes"].get("conflation", "No conflation data.")))
        return "".join(out) + "</section>"
    out.append(_note(f"Pairs: {cf['how']}.", omitted=False))
    if "conflation_skipped" in d["notes"]:
        out.append(_note(d["notes"]["conflation_skipped"]))
    gap_c, ceil_c, mis_c = "#374151", plots.CEILING_COLOUR + "99", "#dc2626"
    rows = []
    for p in cf["pairs"]:
        (pa, ha), (pb, hb) = p["a"], p["b"]
        title = f"{pa} under {ha}  vs  {pb} under {hb}"
        rows.append(plots.PartsRow(title=title, tooltip=_minus(
            f"{pa} under {ha}: J {pct(p['success_a'], 1)}, C {pct(p['ceiling_a'], 1)} "
            f"({p['estimator_a']}), M {_pp(p['mismatch_a'])}; {pb} under {hb}: J "
            f"{pct(p['success_b'], 1)}, C {pct(p['ceiling_b'], 1)} ({p['estimator_b']}), "
            f"M {_pp(p['mismatch_b'])}"), parts=[
            plots.Part("gap J_a − J_b", p["gap"], gap_c,
                       tooltip=_minus(f"gap {_pp(p['gap'])}")),
            plots.Part("ceiling part ΔC", p["ceiling_part"], ceil_c,
                       tooltip=_minus(f"C({ha}) − C({hb}) = {_pp(p['ceiling_part'])}")),
            plots.Part("mismatch part −ΔM", -p["mismatch_part"], mis_c,
                       tooltip=_minus(f"−(M_a − M_b) = {_pp(-p['mismatch_part'])}"))]))
    out.append('<div class="plots">' + plots.signed_parts(
        rows, x_label="percentage points (gap = ceiling part + mismatch part)",
        cls="parts conflation") + "</div>")
    body = []
    for p in cf["pairs"]:
        share = (abs(p["ceiling_part"]) / (abs(p["ceiling_part"]) + abs(p["mismatch_part"]))
                 if abs(p["ceiling_part"]) + abs(p["mismatch_part"]) > 1e-12 else None)
        body.append([
            esc(f"{p['a'][0]} · {p['a'][1]}"), esc(pct(p["success_a"], 1)),
            esc(f"{p['b'][0]} · {p['b'][1]}"), esc(pct(p["success_b"], 1)),
            f"<b>{esc(_minus(_pp(p['gap'])))}</b>",
            esc(_minus(_pp(p["ceiling_part"]))) + " " + _est_label(p["estimator_a"])
            + (" " + _est_label(p["estimator_b"])
               if p["estimator_b"] != p["estimator_a"] else ""),
            esc(_minus(_pp(-p["mismatch_part"]))),
            esc(pct(share)) if share is not None else "–",
            "" if p["same_tasks"] else '<span class="muted">different task sets</span>'])
    out.append(_table([("a (policy · harness)", False), ("J_a", True),
                       ("b (policy · harness)", False), ("J_b", True), ("gap", True),
                       ("ceiling part ΔC", True), ("mismatch part −ΔM", True),
                       ("ceiling share", True), ("", False)], body))
    return "".join(out) + "</section>"


def _section_gain(d: Mapping[str, Any]) -> str:
    out = ['<section id="gain"><h2>Gain after further training</h2>',
           '<p class="lede">Each point: a policy moved to a new harness h\' and trained further '
           'there. ΔJ is its success gained under h\'; C(h\') and M(π, h\') are measured before '
           'the training, on the same tasks. The dashed line is the least-squares fit '
           'ΔJ ≈ c + a·C + b·M, drawn with the other regressor at its mean.</p>']
    g = d["gain"]
    if g is None:
        out.append(_note(d["notes"].get("gain", "No gain data.")))
        return "".join(out) + "</section>"
    pts = [p for p in g["points"] if None not in (p["ceiling"], p["mismatch"], p["gain"])]
    if not pts:
        out.append(_note("No gain scatter: no point has a finite ceiling, mismatch and gain."))
        return "".join(out) + "</section>"
    policies = list(dict.fromkeys(p["policy"] for p in pts))
    colours = {p: plots.policy_colour(i) for i, p in enumerate(policies)}
    fit = g.get("fit") or {}
    mean_c = sum(p["ceiling"] for p in pts) / len(pts)
    mean_m = sum(p["mismatch"] for p in pts) / len(pts)
    a, b, c0 = fit.get("coef_ceiling"), fit.get("coef_mismatch"), fit.get("intercept")
    terms = ([f"{c0:.2f}"] if c0 is not None else []) + \
        ([f"{a:+.2f}·C"] if a is not None else []) + ([f"{b:+.2f}·M"] if b is not None else [])
    r2 = fit.get("r2")
    fit_txt = _minus(f"ΔJ ≈ {' '.join(terms)}; R² = {r2:.2f}" if r2 is not None else
                     f"ΔJ ≈ {' '.join(terms)}; R² undefined") + f", n = {fit.get('n')}" \
        if terms else ""

    def point(p: Mapping[str, Any], x: float) -> plots.Point:
        ci = (f" [{_pp(p['gain_lo'], unit=False)}, {_pp(p['gain_hi'], unit=False)}]"
              if p.get("gain_lo") is not None else "")
        return plots.Point(x=x, y=p["gain"], colour=colours[p["policy"]],
                           label=f"→ {p['harness']}", tooltip=_minus(
            f"{p['policy']} → {p['policy_after']} under {p['harness']}: ΔJ {_pp(p['gain'])}"
            f"{ci}; C {pct(p['ceiling'])}, M {_pp(p['mismatch'])}; {p.get('n_tasks')} tasks"))

    def line(coef: float | None, other: float | None, other_mean: float
             ) -> tuple[float, float] | None:
        if coef is None or c0 is None:
            return None
        return (coef, c0 + (other or 0.0) * other_mean)

    legend = [(p, colours[p]) for p in policies]
    left = plots.scatter([point(p, p["ceiling"]) for p in pts], title="ΔJ vs ceiling C(h')",
                         x_label="ceiling C(h') before", y_label="gain ΔJ", legend=legend,
                         x_domain=(0.0, 1.0),
                         line=line(a, b, mean_m), line_label=fit_txt)
    right = plots.scatter([point(p, p["mismatch"]) for p in pts],
                          title="ΔJ vs mismatch M(π, h')", x_label="mismatch M(π, h') before",
                          y_label="gain ΔJ", legend=legend, line=line(b, a, mean_c),
                          line_label=fit_txt)
    out.append(f'<div class="plots">{left}{right}</div>')
    if fit_txt:
        extra = f" ({fit['model']} model: {fit['note']})" if fit.get("note") else ""
        out.append(_note(f"Fit: {fit_txt}{extra}.", omitted=False))
    body = [[esc(p["policy"]), esc(p["policy_after"]), esc(p["harness"]),
             esc(pct(p["ceiling"], 1)), esc(_minus(_pp(p["mismatch"]))),
             esc(pct(p["success_before"], 1)), esc(pct(p["success_after"], 1)),
             f"<b>{esc(_minus(_pp(p['gain'])))}</b>",
             esc(_minus(f"{_pp(p['gain_lo'])} … {_pp(p['gain_hi'])}"))
             if p.get("gain_lo") is not None else "", esc(str(p.get("n_tasks") or ""))]
            for p in pts]
    out.append(_table([("policy before", False), ("after", False), ("h'", False), ("C", True),
                       ("M", True), ("J before", True), ("J after", True), ("ΔJ", True),
                       ("ΔJ paired 95%", True), ("tasks", True)], body))
    return "".join(out) + "</section>"


def _section_browser(d: Mapping[str, Any], index: Mapping[str, Any]) -> str:
    n, k = len(index["rows"]), index["embedded"]
    lede = ("Every recorded episode of these runs (superseded attempts included). Pick one to "
            "step through its turns: the messages the model saw, its raw output, parse errors, "
            "the actions sent, feedback and the observation that followed (← / → keys step).")
    out = [f'<section id="episodes"><h2>Episodes</h2><p class="lede">{esc(lede)}</p>']
    if k < n:
        out.append(_note(
            f"Turns are embedded for {k:,} of {n:,} episodes (limit max_episodes_in_browser="
            f"{index['limit']:,}), spread over every (policy, harness, task, outcome) group; "
            "the others are listed, greyed, with their summary only (see them with "
            "`tackroom show RUN EPISODE`). All numbers above use every episode."))
    shown, cut = index.get("images", [0, 0])
    if cut:
        out.append(_note(
            f"{shown:,} images are embedded; {cut:,} more are not (the report embeds at most "
            f"{MAX_IMAGE_BYTES // 2**20} MB of images). See them with `tackroom show` or in "
            "the store's blobs/ folder."))
    out.append('<div id="browser"></div><noscript><p class="note">The episode browser needs '
               "JavaScript.</p></noscript></section>")
    return "".join(out)


def _page(d: Mapping[str, Any], index: Mapping[str, Any], turns: Mapping[str, Any]) -> str:
    from tackroom.core.version import __version__

    script = JS
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()
    csp = (f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; "
           "img-src data:; base-uri 'none'; form-action 'none'")
    runs = ", ".join(d["run_ids"])
    title = f"tackroom report — {runs}"
    c = d["counts"]
    created = [r["created_at"] for r in d["runs"] if r["created_at"] is not None]
    when = (_when(min(created)) + ("" if len(created) < 2 else f" to {_when(max(created))}")
            if created else "–")
    sub = (f"runs <code>{'</code>, <code>'.join(esc(r) for r in d['run_ids'])}</code> · "
           f"recorded {esc(when)} · {c['recorded']:,} episodes · "
           f"{c['infra_errors']:,} infra errors (apart) · generated {esc(d['generated_at'])}")
    toc = [("overview", "Overview"), ("success", "Harness × policy"), ("tasks", "Per task"),
           ("ceiling", "Ceiling vs achieved"), ("transfer", "Transfer"),
           ("conflation", "Conflation"), ("gain", "Gain"),
           ("episodes", "Episodes")]
    if d.get("sealed"):
        toc.insert(1, ("sealed", "Sealed evaluation"))
    if d.get("optimizer"):
        toc.insert(1, ("optimizer", "Optimiser"))
    if d.get("selfhpo"):
        toc.insert(1, ("selfhpo", "Self-HPO"))
    parts = [
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">',  # no " & < in it
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f'<meta name="generator" content="tackroom {esc(__version__)}">',
        '<link rel="icon" href="data:,">',
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
        '<header class="top"><div class="wrap">',
        '<h1><span class="brand">tackroom</span> report</h1>',
        f'<div class="sub">{sub}</div><nav class="toc">',
        "".join(f'<a href="#{a}">{esc(t)}</a>' for a, t in toc),
        "</nav></div></header><main>",
        _section_overview(d), _section_optimizer(d) if d.get("optimizer") else "",
        _section_selfhpo(d) if d.get("selfhpo") else "",
        _section_sealed(d) if d.get("sealed") else "", _section_success(d), _section_tasks(d),
        _section_ceiling(d),
        _section_transfer(d), _section_conflation(d), _section_gain(d),
        _section_browser(d, index),
        f"<footer>tackroom {esc(__version__)} · one self-contained file: no network, "
        "all data inline</footer></main>",
        f'<script type="application/json" id="tr-index">{_script_json(index)}</script>',
        f'<script type="application/json" id="tr-turns">{_script_json(turns)}</script>',
        f'<script type="application/json" id="tr-data">{_script_json(d)}</script>',
        f"<script>{script}</script></body></html>\n",
    ]
    return "".join(parts)


def render_html(view: ReportView, store: Any, out_path: str | Path, *,
                max_episodes_in_browser: int = 2000) -> Path:
    """Write the HTML page of ``view`` to ``out_path`` (parent folders created); its path.

    ``store`` is the record store the view was built from: the episode browser
    reads the turns of at most ``max_episodes_in_browser`` episodes from it (a
    spread over every policy, harness, task and outcome; all episodes are
    listed and every number uses all of them). The file is written whole and
    then moved into place; on any failure the temporary file is removed, and a
    full disk is a :class:`~tackroom.core.errors.ConfigError` that says so.
    """
    index, turns = browser_data(store, view, max(0, max_episodes_in_browser))
    page = _page(view.data, index, turns)
    out = Path(out_path)
    tmp = out.with_name(out.name + ".tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(page, encoding="utf-8")
        tmp.replace(out)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)  # never a half-written page left behind
        raise _write_error(exc, out) from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    return out


def _write_error(exc: OSError, out: Path) -> ConfigError:
    """One line for a report that could not be written: a full disk named as such."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return ConfigError("no space left on device: the report was not written", str(out),
                           f"free space on the file system of {out.parent}, or pass --out "
                           "on another one")
    return ConfigError(f"cannot write the report ({exc.strerror or exc})", str(out),
                       "pass a writable path with --out")


def build_report(store: Any, run_ids: Sequence[str], out_path: str | Path, *,
                 train_harness: Mapping[str, str] | None = None,
                 max_episodes_in_browser: int = 2000,
                 gain_pairs: Sequence[Sequence[str]] | None = None,
                 compare: Sequence[tuple[tuple[str, str], tuple[str, str]]] | None = None
                 ) -> Path:
    """Write the HTML report of ``run_ids`` to ``out_path`` and return its path.

    :func:`~tackroom.report.view.report_view` (``train_harness``,
    ``gain_pairs`` and ``compare`` are its) and then :func:`render_html`.

    Raises:
        RecordStoreError: a run id is unknown to the store.
    """
    view = report_view(store, run_ids, train_harness=train_harness, gain_pairs=gain_pairs,
                       compare=compare)
    return render_html(view, store, out_path, max_episodes_in_browser=max_episodes_in_browser)
