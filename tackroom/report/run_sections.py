"""The report's sections about the runs and their success tables.

The overview, the sealed cells, the optimiser's and Self-HPO's trails, success by
harness × policy and by task: each a function of the report's data
(:class:`~tackroom.report.view.ReportView`'s ``data``) to HTML, or a one-line note
when its data is absent.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from tackroom.core.episode import Outcome
from tackroom.report import plots
from tackroom.report.html_parts import (
    _ci,
    _ivl,
    _note,
    _short_tasks,
    _table,
    _when,
)
from tackroom.report.plots import esc, pct
from tackroom.report.plots import pp as _pp


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
    size: dict[str, Any] = {"cell_w": 50, "cell_h": 22, "fit_labels": False} if compact else {}
    out.append('<div class="plots">')
    for p in d["policies"]:
        if p in by_policy:
            out.append(plots.heatmap(d["tasks"], d["harnesses"], by_policy[p], title=p,
                                     x_label="harness", y_label="task", row_names=names,
                                     cls="heatmap tasks", **size))
    out.append("</div></section>")
    return "".join(out)
