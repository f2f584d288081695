"""The report's analysis sections: ceiling vs achieved, transfer, conflation, gain.

Each a function of the report's data (:class:`~tackroom.report.view.ReportView`'s
``data``) to HTML, or a one-line note saying why its data is absent
(docs/research.md explains the quantities).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tackroom.report import plots
from tackroom.report.html_parts import (
    ESTIMATOR_NOTES,
    _ci,
    _est_label,
    _minus,
    _note,
    _table,
)
from tackroom.report.plots import esc, pct
from tackroom.report.plots import pp as _pp


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
