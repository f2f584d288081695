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
  M = C − J (RESEARCH.md §1);
* the transfer matrix (success of policies trained under one harness,
  evaluated under each) with drops from the diagonal, when told which
  harness each policy was trained under;
* the gain scatter (ΔJ against C and M) when gain data exists;
* an episode browser: a filterable list and a turn-by-turn viewer
  (messages, raw output, parse errors, actions, feedback, observations).

Sections whose data is absent are replaced by a one-line note saying why.
:func:`report_data` returns the same numbers as plain data, so the terminal
can print tables that agree with the page.

Model output is untrusted: everything written into the HTML goes through
:func:`~tackroom.report.plots.esc`, the embedded JSON has ``<``, ``>`` and
``&`` escaped as ``\\u003c`` etc. (a ``</script>`` in a model's output cannot
end the data block), the script builds the browser with ``textContent``
only, and a Content-Security-Policy allows no network at all and no script
but the report's own (pinned by its SHA-256).
"""

from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import importlib
import json
import math
import warnings
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from tackroom.analysis.stats import wilson
from tackroom.analysis.summary import INFRA, by_harness_policy, by_task, final_attempts
from tackroom.core.episode import Episode, Turn
from tackroom.core.errors import RecordStoreError
from tackroom.report import plots
from tackroom.report.assets import CSS, JS
from tackroom.report.plots import esc, pct
from tackroom.report.plots import pp as _pp
from tackroom.runner.sealed import sealed_report

__all__ = ["build_report", "report_data", "ESTIMATOR_NOTES", "OUTCOMES"]

OUTCOMES = ("success", "failure", "budget_exhausted", "timeout", "infra_error")

#: What each ceiling estimator means, shown next to every ceiling number.
ESTIMATOR_NOTES = {
    "expert": "a scripted expert acting only through the harness's own interface "
              "(its mean per-task success)",
    "pass@k union": "the fraction of tasks solved at least once by any policy under the "
                    "harness, over all seeds and samples",
    "retrained": "the best success among policies trained under the harness",
}

#: Longest text (characters) kept per field of an embedded turn.
MAX_TEXT = 20_000
#: Longest error text kept per row of the episode list.
MAX_LIST_ERROR = 300


# ---------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------

def _analysis(name: str) -> tuple[ModuleType | None, str]:
    """An optional analysis module, or ``None`` and why it is missing."""
    try:
        return importlib.import_module(f"tackroom.analysis.{name}"), ""
    except ImportError as e:
        return None, f"the analysis module tackroom.analysis.{name} is not available ({e})"


def _num(x: Any) -> float | None:
    """A finite float or ``None`` (JSON has no NaN)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _rate(successes: int, n: int) -> dict[str, Any]:
    lo, hi = wilson(successes, n)
    return {"successes": successes, "n": n, "rate": successes / n if n else None,
            "lo": lo, "hi": hi}


def _order_harnesses(rows: Sequence[Mapping[str, Any]], runs: Sequence[Mapping[str, Any]]
                     ) -> list[str]:
    """Harnesses in the order the runs listed them, then any others alphabetically."""
    seen = {r["harness"] for r in rows}
    out: list[str] = []
    for run in runs:
        for h in (run.get("config") or {}).get("harnesses") or []:
            if isinstance(h, str) and h in seen and h not in out:
                out.append(h)
    return out + sorted(seen - set(out))


def _order_policies(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The expert first (it is the reference), then alphabetically."""
    seen = {r["policy"] for r in rows}
    return sorted(seen, key=lambda p: (p != "expert", p))


def _run_info(run_id: str, info: Mapping[str, Any] | None, rows: Sequence[Mapping[str, Any]],
              final_ids: set[int]) -> dict[str, Any]:
    """One run's record, with outcome counts over its final attempts."""
    info = info or {}
    cfg = info.get("config") or {}
    outcomes = {o: 0 for o in OUTCOMES}
    for r in rows:
        if id(r) in final_ids:
            outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    scored = sum(outcomes.values()) - outcomes.get(INFRA, 0)
    return {
        "run_id": run_id,
        "created_at": _num(info.get("created_at")),
        "finished_at": _num(info.get("finished_at")),
        "status": info.get("status") or "(no run record)",
        "command": info.get("command") or "",
        "manifest_hash": info.get("manifest_hash"),
        "n_planned": info.get("n_planned"),
        "n_episodes": len(rows),
        "suite": cfg.get("suite") or ", ".join(sorted({str(r["suite"]) for r in rows})),
        "harnesses": _order_harnesses(rows, [info]),
        "policies": sorted({r["policy"] for r in rows}),
        "outcomes": outcomes,
        "success_rate": outcomes["success"] / scored if scored else None,
        "config": cfg,
    }


def _collect(store: Any, run_ids: Sequence[str], train_harness: Mapping[str, str] | None,
             gain_pairs: Sequence[Sequence[str]] | None = None,
             compare: Sequence[tuple[tuple[str, str], tuple[str, str]]] | None = None
             ) -> tuple[dict[str, Any], list[dict[str, Any]], set[int]]:
    """The report's numbers, every recorded row, and ``id()`` of the final-attempt rows."""
    run_ids = list(dict.fromkeys(run_ids))
    if not run_ids:
        raise ValueError("build a report from at least one run id")
    rows: list[dict[str, Any]] = []
    per_run: list[tuple[str, dict[str, Any] | None, list[dict[str, Any]]]] = []
    for rid in run_ids:
        info = store.run(rid)
        rrows = store.episodes(run_id=rid)
        if info is None and not rrows:
            raise RecordStoreError(f"no run {rid!r}", str(getattr(store, "path", "")),
                                   "list runs with `tackroom runs`")
        for r in rrows:  # the columns may be NULL; the tables need names
            r["harness"] = r.get("harness") or "(no harness)"
            r["policy"] = r.get("policy") or "(no policy)"
            r["seed"] = r["seed"] if r.get("seed") is not None else -1
            r["attempt"] = r.get("attempt") or 0
        rows.extend(rrows)
        per_run.append((rid, info, rrows))
    final = final_attempts(rows)
    final_ids = {id(r) for r in final}
    runs = [_run_info(rid, info, rrows, final_ids) for rid, info, rrows in per_run]
    train_harness = dict(train_harness or {})

    harnesses = _order_harnesses(rows, runs)
    policies = _order_policies(rows)
    tasks = sorted({r["task"] for r in rows})
    outcomes = {o: 0 for o in OUTCOMES}
    for r in final:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    runs_of_cell: dict[tuple, set[str]] = defaultdict(set)
    for r in rows:
        runs_of_cell[(r["task"], r["harness_hash"], r["policy"], r["seed"],
                      str(r.get("sampling")))].add(r["run_id"])
    n_infra_final = outcomes.get(INFRA, 0)
    scored = len(final) - n_infra_final
    counts = {
        "recorded": len(rows),
        "cells": len(final),
        "scored": scored,
        "successes": outcomes["success"],
        "success": _rate(outcomes["success"], scored),
        "infra_errors": n_infra_final,
        "infra_attempts": sum(1 for r in rows if r["outcome"] == INFRA),
        "superseded": len(rows) - len(final),
        "cells_in_several_runs": sum(1 for v in runs_of_cell.values() if len(v) > 1),
        "outcomes": outcomes,
        "tasks": len(tasks), "harnesses": len(harnesses), "policies": len(policies),
        "parse_errors": sum(int(r.get("parse_errors") or 0) for r in final),
        "tokens": sum(int(r.get("prompt_tokens") or 0) + int(r.get("completion_tokens") or 0)
                      for r in final),
    }
    h_pos = {h: i for i, h in enumerate(harnesses)}
    p_pos = {p: i for i, p in enumerate(policies)}
    summary = []
    for s in sorted(by_harness_policy(final), key=lambda s: (h_pos[s.harness], p_pos[s.policy])):
        summary.append({
            "harness": s.harness, "policy": s.policy, **_rate(s.successes, s.n),
            "infra_errors": s.infra_errors, "mean_turns": s.mean_turns,
            "mean_tokens": s.mean_tokens, "parse_errors": s.parse_errors,
            "outcomes": {o: s.outcomes.get(o, 0) for o in OUTCOMES},
        })
    matrix = []
    for (task, h, p), s in sorted(by_task(final).items(),
                                  key=lambda kv: (p_pos[kv[0][2]], kv[0][0], h_pos[kv[0][1]])):
        matrix.append({"task": task, "harness": h, "policy": p, **_rate(s.successes, s.n),
                       "infra_errors": s.infra_errors, "mean_turns": s.mean_turns})

    data: dict[str, Any] = {
        "generated_at": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "run_ids": run_ids, "runs": runs, "counts": counts,
        "tasks": tasks, "harnesses": harnesses, "policies": policies,
        "train_harness": train_harness,
        "gain_pairs": [list(p) for p in gain_pairs or []],
        "summary": summary, "matrix": matrix,
        "ceilings": {}, "best_ceiling": {}, "mismatch": [], "pass_at_k": [],
        "transfer": None, "conflation": None, "gain": None, "notes": {},
        # One entry per sealed run: every cell of its manifest (see runner/sealed.py).
        "sealed": [sec for rid, info, rrows in per_run
                   if (sec := sealed_report(rid, (info or {}).get("manifest_hash"),
                                            _config_of(info), rrows)) is not None],
    }
    notes: dict[str, str] = data["notes"]
    ceils = _ceilings_and_mismatch(data, final, train_harness, notes)
    _transfer(data, final, train_harness, notes)
    _conflation(data, final, train_harness, ceils, compare, notes)
    _gain(data, final, train_harness, gain_pairs, notes)
    return data, rows, final_ids


def _config_of(info: Mapping[str, Any] | None) -> dict[str, Any]:
    """A run's config snapshot as a dict (the store may hand it back as JSON text)."""
    cfg = (info or {}).get("config") or {}
    return json.loads(cfg) if isinstance(cfg, str) else dict(cfg)


def _failed(section: str, err: Exception) -> str:
    warnings.warn(f"report section {section!r} could not be computed: {err!r}", stacklevel=3)
    return f"could not be computed: {type(err).__name__}: {err}"


def _ceilings_and_mismatch(data: dict[str, Any], final: list[dict[str, Any]],
                           train_harness: dict[str, str], notes: dict[str, str]
                           ) -> dict[str, Any] | None:
    """Fill the ceiling and mismatch sections; the ceiling estimates (``None`` if none)."""
    ceiling_mod, why = _analysis("ceiling")
    if ceiling_mod is None:
        notes["ceiling"] = f"No ceilings: {why}."
        return None
    if not any(r["outcome"] != INFRA for r in final):
        notes["ceiling"] = "No ceilings: the runs have no scored episodes (all infra errors)."
        return None
    try:
        ceils = ceiling_mod.ceilings(final, train_harness=train_harness or None)
    except Exception as e:  # noqa: BLE001 - a broken estimator must not sink the report
        notes["ceiling"] = "Ceilings " + _failed("ceiling", e) + "."
        return None
    for h, ests in ceils.items():
        data["ceilings"][h] = [{
            "harness": e.harness, "estimator": e.estimator, "value": _num(e.value),
            "lo": _num(e.lo), "hi": _num(e.hi), "n_tasks": e.n_tasks, "detail": e.detail,
            "source": list(getattr(e, "source", ()) or ()),
        } for e in ests]
        if ests:
            best = ceiling_mod.best_ceiling(ests)
            data["best_ceiling"][h] = {"estimator": best.estimator, "value": _num(best.value),
                                       "lo": _num(best.lo), "hi": _num(best.hi)}
        for e in ests:
            for pk in getattr(e, "pass_at_k", None) or []:
                data["pass_at_k"].append({
                    "harness": pk.harness, "policy": pk.policy, "k": pk.k,
                    "value": _num(pk.value), "lo": _num(pk.lo), "hi": _num(pk.hi),
                    "n_tasks": pk.n_tasks, "n_skipped": pk.n_skipped})
    no_expert = [h for h, ests in ceils.items()
                 if ests and not any(e.estimator == "expert" for e in ests)]
    if no_expert:
        notes["ceiling_expert"] = (
            f"No expert episodes under {', '.join(no_expert)}: the ceiling there comes from "
            "the pass@k union (and retrained policies, if any) only.")
    if not train_harness:
        notes["ceiling_retrained"] = ("No trained policies named (train_harness): the "
                                      "\"retrained\" ceiling estimator is not used.")
    mismatch_mod, why = _analysis("mismatch")
    if mismatch_mod is None:
        notes["mismatch"] = f"No mismatch: {why}."
        return ceils
    try:
        ms = mismatch_mod.mismatch_return(final, ceils)
    except Exception as e:  # noqa: BLE001
        notes["mismatch"] = "Mismatch " + _failed("mismatch", e) + "."
        return ceils
    for m in ms:
        c = m.ceiling
        data["mismatch"].append({
            "policy": m.policy, "harness": m.harness,
            "ceiling_estimator": getattr(c, "estimator", str(c)),
            "ceiling": _num(getattr(m, "ceiling_value", None)
                            if _num(getattr(m, "ceiling_value", None)) is not None
                            else getattr(c, "value", c)),
            "success": _num(m.success), "success_lo": _num(m.success_lo),
            "success_hi": _num(m.success_hi), "mismatch": _num(m.mismatch),
            "lo": _num(m.lo), "hi": _num(m.hi), "n_tasks": getattr(m, "n_tasks", None),
            "n_missing": getattr(m, "n_missing", 0)})
    return ceils


def _rate_dict(rate: Any) -> dict[str, Any]:
    """A ``Rate``-like object (or a plain number) as a dict."""
    if rate is None:
        return {"rate": None}
    if isinstance(rate, int | float):
        return {"rate": _num(rate)}
    get = (lambda k: rate.get(k)) if isinstance(rate, Mapping) else \
        (lambda k: getattr(rate, k, None))
    return {"rate": _num(get("rate") if get("rate") is not None else get("value")),
            "lo": _num(get("lo")), "hi": _num(get("hi")),
            "successes": get("successes"), "n": get("n")}


def _scalar(x: Any) -> float | None:
    """A number, or the ``value``/``drop``/``rate`` of an object holding one."""
    if x is None or isinstance(x, int | float):
        return _num(x)
    for k in ("drop", "value", "diff", "rate"):
        v = x.get(k) if isinstance(x, Mapping) else getattr(x, k, None)
        if v is not None:
            return _num(v)
    return None


def _transfer(data: dict[str, Any], final: list[dict[str, Any]],
              train_harness: dict[str, str], notes: dict[str, str]) -> None:
    if not train_harness:
        notes["transfer"] = ("No transfer matrix: no trained policies were named "
                             "(pass train_harness: policy → the harness it was trained under).")
        return
    present = {r["policy"] for r in final}
    if not set(train_harness) & present:
        notes["transfer"] = ("No transfer matrix: none of the trained policies "
                             f"({', '.join(sorted(train_harness))}) has episodes in these runs.")
        return
    mod, why = _analysis("transfer")
    if mod is None:
        notes["transfer"] = f"No transfer matrix: {why}."
        return
    try:
        tm = mod.transfer_matrix(final, train_harness)
    except Exception as e:  # noqa: BLE001
        notes["transfer"] = "The transfer matrix " + _failed("transfer", e) + "."
        return
    drops = getattr(tm, "drop", None) or {}
    tests = getattr(tm, "drop_test", None) or {}
    cells = []
    for (th, eh), rate in tm.cells.items():
        d = {"train": th, "eval": eh, **_rate_dict(rate), "drop": _scalar(drops.get((th, eh)))}
        test = tests.get((th, eh))
        if test is not None:
            d["drop_lo"], d["drop_hi"] = _num(getattr(test, "lo", None)), _num(
                getattr(test, "hi", None))
            d["drop_p"] = _num(getattr(test, "p_value", None))
            d["drop_pairs"] = getattr(test, "n", None)
        cells.append(d)
    if not cells:
        notes["transfer"] = "No transfer matrix: no trained policy has scored episodes."
        return
    order = {h: i for i, h in enumerate(data["harnesses"])}

    def ordered(hs: Iterable[str]) -> list[str]:
        return sorted(hs, key=lambda h: (order.get(h, len(order)), h))

    cells.sort(key=lambda c: (order.get(c["train"], len(order)), c["train"],
                              order.get(c["eval"], len(order)), c["eval"]))
    policy_drop = getattr(tm, "policy_drop", None) or {}
    by_policy = [{"policy": pol, "train": train_harness.get(pol), "eval": eh,
                  **_rate_dict(rate), "drop": _scalar(policy_drop.get((pol, eh)))}
                 for (pol, eh), rate in (getattr(tm, "by_policy", None) or {}).items()]
    by_policy.sort(key=lambda c: (order.get(c["train"], len(order)), c["policy"],
                                  order.get(c["eval"], len(order)), c["eval"]))
    data["transfer"] = {"train_harnesses": ordered(tm.train_harnesses),
                        "eval_harnesses": ordered(tm.eval_harnesses), "cells": cells,
                        "policies": {k: list(v) for k, v in
                                     (getattr(tm, "policies", None) or {}).items()},
                        "by_policy": by_policy}


def _conflation(data: dict[str, Any], final: list[dict[str, Any]],
                train_harness: dict[str, str], ceils: dict[str, Any] | None,
                compare: Sequence[tuple[tuple[str, str], tuple[str, str]]] | None,
                notes: dict[str, str]) -> None:
    """What each cross-harness gap is made of: ``gap = ΔC − ΔM`` per pair of cells."""
    if not ceils:
        notes["conflation"] = "No conflation view: it needs the ceilings, and there are none."
        return
    mod, why = _analysis("transfer")
    if mod is None:
        notes["conflation"] = f"No conflation view: {why}."
        return
    try:
        if compare:
            pairs, how = list(compare), "the pairs asked for"
        else:
            pairs = mod.conflation_pairs(final, train_harness or None)
            how = ("each policy under its own harness (the one it was trained under, else its "
                   "best), compared with every other policy under its own — or, with one "
                   "policy, its own harness against each other harness")
        out, skipped = [], []
        for a, b in pairs:
            try:
                c = mod.conflation(final, tuple(a), tuple(b), ceils)
            except ValueError as e:
                skipped.append(f"{a[0]} under {a[1]} vs {b[0]} under {b[1]}: {e}")
                continue
            out.append({
                "a": list(c.a), "b": list(c.b), "success_a": _num(c.success_a),
                "success_b": _num(c.success_b), "ceiling_a": _num(c.ceiling_a),
                "ceiling_b": _num(c.ceiling_b),
                "estimator_a": c.mismatch_a.ceiling.estimator,
                "estimator_b": c.mismatch_b.ceiling.estimator,
                "mismatch_a": _num(c.mismatch_a.mismatch),
                "mismatch_b": _num(c.mismatch_b.mismatch),
                "gap": _num(c.gap), "ceiling_part": _num(c.ceiling_part),
                "mismatch_part": _num(c.mismatch_part), "same_tasks": c.same_tasks,
                "n_tasks_a": len(c.mismatch_a.tasks), "n_tasks_b": len(c.mismatch_b.tasks)})
    except Exception as e:  # noqa: BLE001
        notes["conflation"] = "The conflation view " + _failed("transfer", e) + "."
        return
    if skipped:
        notes["conflation_skipped"] = "Left out: " + "; ".join(skipped) + "."
    if not out:
        notes["conflation"] = ("No conflation view: no two (policy, harness) cells to compare "
                               "(it needs a policy under two harnesses, or two policies under "
                               "different harnesses)." if not skipped else
                               notes.pop("conflation_skipped"))
        return
    data["conflation"] = {"pairs": out, "how": how}


def _gain(data: dict[str, Any], final: list[dict[str, Any]], train_harness: dict[str, str],
          gain_pairs: Sequence[Sequence[str]] | None, notes: dict[str, str]) -> None:
    if not gain_pairs:
        notes["gain"] = ("No gain scatter: it needs policies trained further under a new "
                         "harness, named as gain_pairs (policy before, policy after, new harness).")
        return
    mod, why = _analysis("gain")
    if mod is None:
        notes["gain"] = f"No gain scatter: {why}."
        return
    # C(h') and M(π, h') are *pre-training* numbers: the further-trained policies'
    # own episodes must not raise the ceiling they are measured against (a policy
    # that is the "after" of one pair and the "before" of another stays).
    befores = {p[0] for p in gain_pairs}
    trained_further = {p[1] for p in gain_pairs if len(p) == 3} - befores
    before_rows = [r for r in final if r["policy"] not in trained_further]
    try:
        points = list(mod.gain_points(before_rows, final, None,
                                      [tuple(p) for p in gain_pairs],
                                      train_harness=train_harness or None))
        fit = mod.fit_gain(points) if points else None
    except Exception as e:  # noqa: BLE001
        notes["gain"] = "The gain scatter " + _failed("gain", e) + "."
        return
    if not points:
        notes["gain"] = ("No gain scatter: none of the gain_pairs has episodes of both "
                         "policies under the new harness (on its ceiling's tasks).")
        return
    pts = []
    for p in points:
        pts.append({
            "policy": p.policy, "policy_after": getattr(p, "policy_after", "") or p.policy,
            "harness": p.harness, "ceiling": _num(p.ceiling), "mismatch": _num(p.mismatch),
            "gain": _num(p.gain), "gain_lo": _num(getattr(p, "gain_lo", None)),
            "gain_hi": _num(getattr(p, "gain_hi", None)),
            "success_before": _num(getattr(p, "success_before", None)),
            "success_after": _num(getattr(p, "success_after", None)),
            "n_tasks": getattr(p, "n_tasks", None)})
    fit_d = None
    if fit is not None:
        fit_d = {k: _num(getattr(fit, k, None)) for k in
                 ("coef_ceiling", "coef_mismatch", "intercept", "r2")}
        fit_d["n"] = getattr(fit, "n", len(pts))
        fit_d["model"] = getattr(fit, "model", "ceiling+mismatch")
        fit_d["note"] = getattr(fit, "note", "")
    data["gain"] = {"points": pts, "fit": fit_d}


def report_data(store: Any, run_ids: Sequence[str],
                train_harness: Mapping[str, str] | None = None, *,
                gain_pairs: Sequence[Sequence[str]] | None = None,
                compare: Sequence[tuple[tuple[str, str], tuple[str, str]]] | None = None
                ) -> dict[str, Any]:
    """The report's numbers as plain data (JSON-serialisable), for terminal tables.

    Keys: ``generated_at``, ``run_ids``, ``runs`` (per-run info), ``counts``
    (recorded / cells / scored / successes / infra errors ...), ``tasks``,
    ``harnesses``, ``policies``, ``summary`` (per harness × policy: rate,
    Wilson ``lo``/``hi``, outcomes, turns, tokens), ``matrix`` (per task ×
    harness × policy), ``ceilings`` (harness → estimates, each with its
    ``estimator``), ``best_ceiling``, ``mismatch`` (per policy × harness:
    J, C with its estimator, M = C − J with a bootstrap interval),
    ``pass_at_k``, ``transfer`` (with ``by_policy``), ``conflation`` (pairs
    of cells, each gap split into ceiling and mismatch parts) and ``gain``
    (``None`` when absent),
    ``sealed`` (one entry per sealed run: manifest hash, held-out harnesses,
    totals and every cell of the manifest, from
    :func:`tackroom.runner.sealed.sealed_report`; empty when none is sealed) and
    ``notes`` (section → why it is absent or partial). ``train_harness``,
    ``gain_pairs`` and ``compare`` are as for :func:`build_report`.

    Only the final attempt of each cell counts (a cell recorded in several of
    the runs counts once); infra errors are counted apart and never scored.
    """
    return _collect(store, run_ids, train_harness, gain_pairs, compare)[0]


# ---------------------------------------------------------------------------
# Episode browser data
# ---------------------------------------------------------------------------

def _cut(text: Any, limit: int = MAX_TEXT) -> Any:
    if not isinstance(text, str) or len(text) <= limit:
        return text
    return text[:limit] + f"\n… [{len(text) - limit} more characters not embedded]"


def _slim(obj: Any) -> Any:
    """Message content without images and with long strings cut."""
    if isinstance(obj, str):
        return _cut(obj)
    if isinstance(obj, list):
        return [_slim(v) for v in obj]
    if isinstance(obj, dict):
        kind = obj.get("type")
        if kind in ("image_url", "input_image", "image"):
            url = obj.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            size = len(url) if isinstance(url, str) else 0
            return {"type": kind, "omitted": f"image, {size // 1024} kB, not embedded"}
        return {k: _slim(v) for k, v in obj.items()}
    return obj


def _turn_json(t: Turn, prev: list[dict[str, Any]]) -> dict[str, Any]:
    msgs = t.messages or []
    keep = 0
    for a, b in zip(prev, msgs, strict=False):
        if a != b:
            break
        keep += 1
    d: dict[str, Any] = {"k": keep, "m": [_slim(m) for m in msgs[keep:]],
                         "raw": _cut(t.raw_text), "r": _num(t.reward)}
    if t.tool_calls:
        d["tc"] = _slim(t.tool_calls)
    if t.parse_error:
        d["pe"] = _cut(t.parse_error)
    if t.feedback:
        d["fb"] = _cut(t.feedback)
    if t.actions:
        d["a"] = _slim(t.actions)
    if t.action_error:
        d["ae"] = _cut(t.action_error)
    if t.observation is not None:
        d["o"] = _cut(t.observation)
    if t.prompt_tokens or t.completion_tokens:
        d["pt"], d["ct"] = t.prompt_tokens, t.completion_tokens
    d["tp"], d["te"], d["th"] = _num(t.t_policy), _num(t.t_env), _num(t.t_harness)
    if t.logprobs:
        finite = [x for x in t.logprobs if math.isfinite(x)]
        d["lp"] = [len(t.logprobs), _num(sum(finite) / len(finite)) if finite else None]
    if t.adapter:
        d["ad"] = t.adapter
    return d


def _episode_json(ep: Episode) -> dict[str, Any]:
    turns, prev = [], []
    for t in ep.turns:
        turns.append(_turn_json(t, prev))
        prev = t.messages or []
    return {"instruction": _cut(ep.instruction), "error": _cut(ep.error), "turns": turns}


def _pick_embedded(rows: Sequence[Mapping[str, Any]], limit: int) -> list[int]:
    """Indexes of the rows whose turns are embedded: all if they fit, else a spread.

    Round-robin over (policy, harness, task, outcome) groups, so every group
    (the failures of a cell as well as its successes) has examples.
    """
    if limit <= 0:
        return []
    if len(rows) <= limit:
        return list(range(len(rows)))
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        groups[(r["policy"], r["harness"], r["task"], r["outcome"])].append(i)
    queues = [groups[k] for k in sorted(groups)]
    chosen: list[int] = []
    depth = 0
    while len(chosen) < limit:
        added = False
        for q in queues:
            if depth < len(q):
                chosen.append(q[depth])
                added = True
                if len(chosen) >= limit:
                    break
        if not added:
            break
        depth += 1
    return sorted(chosen)


def _browser_data(store: Any, data: Mapping[str, Any], rows: list[dict[str, Any]],
                  final_ids: set[int], limit: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The episode list (every recorded episode) and the turns of at most ``limit``."""
    h_pos = {h: i for i, h in enumerate(data["harnesses"])}
    p_pos = {p: i for i, p in enumerate(data["policies"])}
    rows = sorted(rows, key=lambda r: (r["task"], h_pos[r["harness"]], p_pos[r["policy"]],
                                       r["seed"], r["attempt"], r["run_id"]))
    lookups: dict[str, list[str]] = {
        "run": list(data["run_ids"]), "task": list(data["tasks"]),
        "harness": list(data["harnesses"]), "policy": list(data["policies"]),
        "outcome": list(OUTCOMES)}
    for r in rows:
        if r["outcome"] not in lookups["outcome"]:
            lookups["outcome"].append(r["outcome"])
    pos = {k: {v: i for i, v in enumerate(vs)} for k, vs in lookups.items()}
    embedded = set(_pick_embedded(rows, limit))
    cols = ["run", "id", "task", "harness", "policy", "seed", "attempt", "outcome", "reward",
            "n_turns", "tokens", "parse_errors", "error", "turns_embedded", "final"]
    out_rows = []
    for i, r in enumerate(rows):
        err = r.get("error")
        out_rows.append([
            pos["run"][r["run_id"]], r["episode_id"], pos["task"][r["task"]],
            pos["harness"][r["harness"]], pos["policy"][r["policy"]], r["seed"], r["attempt"],
            pos["outcome"][r["outcome"]], _num(r.get("reward")), r.get("n_turns") or 0,
            int(r.get("prompt_tokens") or 0) + int(r.get("completion_tokens") or 0),
            r.get("parse_errors") or 0, _cut(err, MAX_LIST_ERROR) if err else None,
            1 if i in embedded else 0, 1 if id(r) in final_ids else 0])
    suites = {t.split("/", 1)[0] + "/" for t in data["tasks"] if "/" in t}
    index = {"cols": cols, "rows": out_rows, "lookups": lookups, "embedded": len(embedded),
             "limit": limit, "strip": suites.pop() if len(suites) == 1 else ""}

    turns: dict[str, Any] = {}
    by_run: dict[str, list[str]] = defaultdict(list)
    for i in sorted(embedded):
        by_run[rows[i]["run_id"]].append(rows[i]["episode_id"])
    for rid, ids in by_run.items():
        for ep in store.iter_episodes(rid, episode_id=ids):
            turns[f"{rid}/{ep.episode_id}"] = _episode_json(ep)
    return index, turns


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
            esc(pct(r["success_rate"])), esc(str(oc.get(INFRA, 0) or "·"))])
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
                     esc(_ci(s["lo"], s["hi"])), str(s["n"]), str(oc.get("success", 0)),
                     str(oc.get("failure", 0)), str(oc.get("budget_exhausted", 0)),
                     str(oc.get("timeout", 0)), str(s["infra_errors"] or "·"),
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
        _section_overview(d), _section_sealed(d) if d.get("sealed") else "", _section_success(d), _section_tasks(d), _section_ceiling(d),
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


def build_report(store: Any, run_ids: Sequence[str], out_path: str | Path, *,
                 train_harness: Mapping[str, str] | None = None,
                 max_episodes_in_browser: int = 2000,
                 gain_pairs: Sequence[Sequence[str]] | None = None,
                 compare: Sequence[tuple[tuple[str, str], tuple[str, str]]] | None = None
                 ) -> Path:
    """Write the HTML report of ``run_ids`` to ``out_path`` and return its path.

    Args:
        store: a :class:`~tackroom.records.RecordStore`.
        run_ids: the runs to report on, together (a cell recorded in several
            of them counts once).
        out_path: the HTML file to write (parent folders are created).
        train_harness: policy id → the harness it was trained under; enables
            the "retrained" ceiling estimator and the transfer matrix.
        max_episodes_in_browser: embed the turns of at most this many
            episodes (a spread over every policy, harness, task and outcome);
            all episodes are listed and every number uses all of them.
        gain_pairs: ``(policy before, policy after, new harness h')`` triples
            (the policy after = the one trained further under h'); enables
            the gain scatter (ΔJ against C(h') and M(π, h'), measured before
            — the further-trained policies' episodes are left out of those
            ceilings).
        compare: ``((policy_a, h_a), (policy_b, h_b))`` pairs for the
            conflation view; by default each policy under its own harness
            against the others (see
            :func:`tackroom.analysis.transfer.conflation_pairs`).

    Raises:
        RecordStoreError: a run id is unknown to the store.
    """
    data, rows, final_ids = _collect(store, run_ids, train_harness, gain_pairs, compare)
    index, turns = _browser_data(store, data, rows, final_ids, max(0, max_episodes_in_browser))
    page = _page(data, index, turns)
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(out)
    return out

