"""The report's view-model: everything a report shows, computed once from the records.

:func:`report_view` reads the runs from a record store and computes every
number the report shows — counts, success by harness × policy and by task,
the ceiling estimates (once per report), mismatch, transfer, conflation, gain
and the sealed-run sections — into one :class:`ReportView`. The terminal
tables (:mod:`tackroom.report.terminal`) and the HTML page
(:mod:`tackroom.report.html`) both read it, so they cannot disagree and
nothing is computed twice. :func:`rows_view` builds the same view from plain
episode rows (no run records, so no sealed sections).

Only the final attempt of each cell counts (a cell recorded in several of
the runs counts once); infra errors are counted apart and never scored. A
section whose analysis is missing or fails is ``None`` (or empty) with a
note in ``view["notes"]`` saying why: a broken estimator never sinks the
report.
"""

from __future__ import annotations

import datetime as _dt
import importlib
import math
import warnings
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, cast

from tackroom.analysis.stats import TaskTable, wilson
from tackroom.analysis.summary import CellSummary, by_harness_policy, by_task, final_attempts
from tackroom.core.episode import Outcome
from tackroom.core.errors import RecordStoreError
from tackroom.core.run import RunConfig
from tackroom.runner.sealed import sealed_report

__all__ = ["ReportView", "report_view", "rows_view", "report_data", "summary_entry", "OUTCOMES"]

#: Outcome names in display order (the values of :class:`~tackroom.core.episode.Outcome`).
OUTCOMES: tuple[str, ...] = tuple(o.value for o in Outcome)
_SUCCESS, _INFRA = Outcome.SUCCESS.value, Outcome.INFRA_ERROR.value

Pairs = Sequence[tuple[tuple[str, str], tuple[str, str]]]


@dataclass(eq=False)
class ReportView(Mapping[str, Any]):
    """Everything a report shows, computed once (:func:`report_view`).

    It reads as a mapping of plain, JSON-able data (``view["summary"]``;
    ``view.data`` is the dict itself, what :func:`report_data` returns and the
    page embeds). Keys:

    ``generated_at``, ``run_ids``; ``runs`` (per run: dates, status, command,
    suite, harnesses, policies, outcome counts over its final attempts, success
    rate, its config as :meth:`RunConfig.to_dict`); ``counts`` (recorded /
    cells / scored / successes / ``success`` with its Wilson interval / infra
    errors / superseded ...); ``tasks``, ``harnesses`` (in the runs' order),
    ``policies`` (the expert first); ``train_harness``, ``gain_pairs``;
    ``summary`` (per harness × policy: rate, Wilson ``lo``/``hi``, outcomes,
    turns, tokens, see :func:`summary_entry`); ``matrix`` (per task × harness ×
    policy); ``ceilings`` (harness → estimates, each with its ``estimator``);
    ``best_ceiling`` (harness → the estimate the mismatch uses); ``mismatch``
    (per policy × harness: J, C with its estimator, M = C − J with a bootstrap
    interval); ``pass_at_k``; ``transfer`` (with ``by_policy``; ``None`` when
    absent); ``conflation`` (``{"pairs", "how"}``: each gap split into ceiling
    and mismatch parts; ``None`` when absent); ``conflation_skipped`` (pairs
    asked for that could not be split: ``a``, ``b``, ``reason`` and ``at``,
    their place among the pairs asked for); ``gain`` (``{"points", "fit"}`` or
    ``None``); ``sealed`` (one entry per sealed run, from
    :func:`tackroom.runner.sealed.sealed_report`; empty when none is sealed);
    ``notes`` (section → why it is absent or partial).

    Attributes besides the data:
        rows: every recorded row (superseded attempts included; the episode
            browser lists them).
        final: the final attempt of each cell (what every number counts).
        final_ids: ``id()`` of the rows in ``final``.
        configs: run id → its parsed :class:`~tackroom.core.run.RunConfig`.
        ceiling_estimates: harness → the
            :class:`~tackroom.analysis.ceiling.CeilingEstimate` objects behind
            ``data["ceilings"]`` (``None`` when there are none).
        mismatch_estimates: the
            :class:`~tackroom.analysis.mismatch.MismatchEstimate` objects
            behind ``data["mismatch"]``.
    """

    data: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)
    final: list[dict[str, Any]] = field(default_factory=list)
    final_ids: set[int] = field(default_factory=set)
    configs: dict[str, RunConfig] = field(default_factory=dict)
    ceiling_estimates: dict[str, list[Any]] | None = None
    mismatch_estimates: list[Any] = field(default_factory=list)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


# ---------------------------------------------------------------------------
# Building the view
# ---------------------------------------------------------------------------

def report_view(store: Any, run_ids: Sequence[str], *,
                train_harness: Mapping[str, str] | None = None,
                gain_pairs: Sequence[Sequence[str]] | None = None,
                compare: Pairs | None = None) -> ReportView:
    """Read ``run_ids`` from ``store`` and compute everything the report shows.

    Args:
        store: a :class:`~tackroom.records.RecordStore`.
        run_ids: the runs to report on, together (a cell recorded in several
            of them counts once; duplicates are dropped).
        train_harness: policy id → the harness it was trained under; enables
            the "retrained" ceiling estimator and the transfer matrix.
        gain_pairs: ``(policy before, policy after, new harness h')`` triples;
            enables the gain scatter (ΔJ against C(h') and M(π, h'), measured
            before: the further-trained policies' episodes are left out of
            those ceilings).
        compare: ``((policy_a, h_a), (policy_b, h_b))`` pairs for the
            conflation view; by default each policy under its own harness
            against the others (see
            :func:`tackroom.analysis.transfer.conflation_pairs`).

    Raises:
        ValueError: no run ids.
        RecordStoreError: a run id is unknown to the store.
    """
    run_ids = list(dict.fromkeys(run_ids))
    if not run_ids:
        raise ValueError("build a report from at least one run id")
    per_run = []
    for rid in run_ids:
        info = store.run(rid)
        rrows = store.episodes(run_id=rid)
        if info is None and not rrows:
            raise RecordStoreError(f"no run {rid!r}", str(getattr(store, "path", "")),
                                   "list runs with `tackroom runs`")
        per_run.append((rid, info, rrows))
    return _build(per_run, train_harness, gain_pairs, compare)


def rows_view(rows: Iterable[Mapping[str, Any]], *,
              train_harness: Mapping[str, str] | None = None,
              gain_pairs: Sequence[Sequence[str]] | None = None,
              compare: Pairs | None = None) -> ReportView:
    """:func:`report_view` of plain episode rows (copied): no run records, no sealed sections."""
    by_run: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_run[str(r.get("run_id") or "")].append(dict(r))
    return _build([(rid, None, rr) for rid, rr in by_run.items()], train_harness, gain_pairs,
                  compare)


def report_data(store: Any, run_ids: Sequence[str],
                train_harness: Mapping[str, str] | None = None, *,
                gain_pairs: Sequence[Sequence[str]] | None = None,
                compare: Pairs | None = None) -> dict[str, Any]:
    """The report's numbers as plain data: ``report_view(...).data`` (keys: :class:`ReportView`)."""
    return report_view(store, run_ids, train_harness=train_harness, gain_pairs=gain_pairs,
                       compare=compare).data


def _build(per_run: Sequence[tuple[str, Mapping[str, Any] | None, list[dict[str, Any]]]],
           train_harness: Mapping[str, str] | None, gain_pairs: Sequence[Sequence[str]] | None,
           compare: Pairs | None) -> ReportView:
    rows: list[dict[str, Any]] = []
    for _, _, rrows in per_run:
        for r in rrows:  # the columns may be NULL; the tables need names
            r["harness"] = r.get("harness") or "(no harness)"
            r["policy"] = r.get("policy") or "(no policy)"
            r["seed"] = r["seed"] if r.get("seed") is not None else -1
            r["attempt"] = r.get("attempt") or 0
        rows.extend(rrows)
    configs = {rid: RunConfig.from_dict((info or {}).get("config")) for rid, info, _ in per_run}
    final = final_attempts(rows)
    final_ids = {id(r) for r in final}
    runs = [_run_info(rid, info, configs[rid], rrows, final_ids) for rid, info, rrows in per_run]
    train_harness = dict(train_harness or {})

    harnesses = _order_harnesses(rows, configs.values())
    policies = _order_policies(rows)
    tasks = sorted({r["task"] for r in rows})
    outcomes = _outcome_counts(final)
    runs_of_cell: dict[tuple, set[str]] = defaultdict(set)
    for r in rows:
        runs_of_cell[(r["task"], r["harness_hash"], r["policy"], r["seed"],
                      str(r.get("sampling")))].add(r["run_id"])
    n_infra_final = outcomes.get(_INFRA, 0)
    scored = len(final) - n_infra_final
    counts = {
        "recorded": len(rows),
        "cells": len(final),
        "scored": scored,
        "successes": outcomes[_SUCCESS],
        "success": _rate(outcomes[_SUCCESS], scored),
        "infra_errors": n_infra_final,
        "infra_attempts": sum(1 for r in rows if r["outcome"] == _INFRA),
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
    summary = [summary_entry(s) for s in sorted(
        by_harness_policy(final), key=lambda s: (h_pos[s.harness], p_pos[s.policy]))]
    matrix = []
    for (task, h, p), s in sorted(by_task(final).items(),
                                  key=lambda kv: (p_pos[kv[0][2]], kv[0][0], h_pos[kv[0][1]])):
        matrix.append({"task": task, "harness": h, "policy": p, **_rate(s.successes, s.n),
                       "infra_errors": s.infra_errors, "mean_turns": s.mean_turns})

    data: dict[str, Any] = {
        "generated_at": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "run_ids": [rid for rid, _, _ in per_run], "runs": runs, "counts": counts,
        "tasks": tasks, "harnesses": harnesses, "policies": policies,
        "train_harness": train_harness,
        "gain_pairs": [list(p) for p in gain_pairs or []],
        "summary": summary, "matrix": matrix,
        "ceilings": {}, "best_ceiling": {}, "mismatch": [], "pass_at_k": [],
        "transfer": None, "conflation": None, "conflation_skipped": [], "gain": None,
        "notes": {},
        # One entry per sealed run: every cell of its manifest (see runner/sealed.py).
        "sealed": [sec for rid, info, rrows in per_run
                   if (sec := sealed_report(rid, (info or {}).get("manifest_hash"),
                                            configs[rid], rrows)) is not None],
    }
    view = ReportView(data=data, rows=rows, final=final, final_ids=final_ids, configs=configs)
    notes: dict[str, str] = data["notes"]
    _ceilings_and_mismatch(view, train_harness, notes)
    _transfer(data, final, train_harness, notes)
    _conflation(view, train_harness, compare, notes)
    _gain(view, train_harness, gain_pairs, notes)
    return view


# ---------------------------------------------------------------------------
# Pieces
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


def _outcome_counts(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Episodes per outcome: every :class:`Outcome` listed, in order, then any others."""
    out = dict.fromkeys(OUTCOMES, 0)
    for r in rows:
        out[r["outcome"]] = out.get(r["outcome"], 0) + 1
    return out


def summary_entry(s: CellSummary) -> dict[str, Any]:
    """One harness × policy summary as ``view["summary"]`` holds it (``rate`` ``None`` if n = 0)."""
    return {"harness": s.harness, "policy": s.policy, **_rate(s.successes, s.n),
            "infra_errors": s.infra_errors, "mean_turns": s.mean_turns,
            "mean_tokens": s.mean_tokens, "parse_errors": s.parse_errors,
            "outcomes": {o: s.outcomes.get(o, 0) for o in OUTCOMES}}


def _order_harnesses(rows: Sequence[Mapping[str, Any]], configs: Iterable[RunConfig]
                     ) -> list[str]:
    """Harnesses in the order the runs listed them, then any others alphabetically."""
    seen = {r["harness"] for r in rows}
    out: list[str] = []
    for cfg in configs:
        for h in cfg.harnesses:
            if isinstance(h, str) and h in seen and h not in out:
                out.append(h)
    return out + sorted(seen - set(out))


def _order_policies(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The expert first (it is the reference), then alphabetically."""
    seen = {r["policy"] for r in rows}
    return sorted(seen, key=lambda p: (p != "expert", p))


def _run_info(run_id: str, info: Mapping[str, Any] | None, cfg: RunConfig,
              rows: Sequence[Mapping[str, Any]], final_ids: set[int]) -> dict[str, Any]:
    """One run's record, with outcome counts over its final attempts."""
    info = info or {}
    outcomes = _outcome_counts(r for r in rows if id(r) in final_ids)
    scored = sum(outcomes.values()) - outcomes.get(_INFRA, 0)
    return {
        "run_id": run_id,
        "created_at": _num(info.get("created_at")),
        "finished_at": _num(info.get("finished_at")),
        "status": info.get("status") or "(no run record)",
        "command": info.get("command") or "",
        "manifest_hash": info.get("manifest_hash"),
        "n_planned": info.get("n_planned"),
        "n_episodes": len(rows),
        "suite": cfg.suite or ", ".join(sorted({str(r.get("suite") or "") for r in rows})),
        "harnesses": _order_harnesses(rows, [cfg]),
        "policies": sorted({r["policy"] for r in rows}),
        "outcomes": outcomes,
        "success_rate": outcomes[_SUCCESS] / scored if scored else None,
        "config": cfg.to_dict(),
    }


def _failed(section: str, err: Exception) -> str:
    warnings.warn(f"report section {section!r} could not be computed: {err!r}", stacklevel=3)
    return f"could not be computed: {type(err).__name__}: {err}"


def _ceilings_and_mismatch(view: ReportView, train_harness: dict[str, str],
                           notes: dict[str, str]) -> None:
    """The ceiling and mismatch sections: the ceilings of the report, computed once.

    Sets ``view.ceiling_estimates`` (``None`` if none) and ``view.mismatch_estimates``,
    which the conflation and gain sections reuse.
    """
    data, final = view.data, view.final
    ceiling_mod, why = _analysis("ceiling")
    if ceiling_mod is None:
        notes["ceiling"] = f"No ceilings: {why}."
        return
    if not any(r["outcome"] != _INFRA for r in final):
        notes["ceiling"] = "No ceilings: the runs have no scored episodes (all infra errors)."
        return
    table = TaskTable(final)  # one index for the ceilings and the mismatch
    try:
        ceils = ceiling_mod.ceilings_from_table(table, train_harness=train_harness or None)
    except Exception as e:  # noqa: BLE001 - a broken estimator must not sink the report
        notes["ceiling"] = "Ceilings " + _failed("ceiling", e) + "."
        return
    view.ceiling_estimates = ceils
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
        for est in ests:
            for pk in getattr(est, "pass_at_k", None) or []:
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
        return
    try:
        ms = mismatch_mod.mismatch_from_table(table, ceils)
    except Exception as e:  # noqa: BLE001
        notes["mismatch"] = "Mismatch " + _failed("mismatch", e) + "."
        return
    view.mismatch_estimates = list(ms)
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


def _conflation(view: ReportView, train_harness: dict[str, str], compare: Pairs | None,
                notes: dict[str, str]) -> None:
    """What each cross-harness gap is made of: ``gap = ΔC − ΔM`` per pair of cells."""
    data, final, ceils = view.data, view.final, view.ceiling_estimates
    if not ceils:
        notes["conflation"] = "No conflation view: it needs the ceilings, and there are none."
        return
    mod, why = _analysis("transfer")
    if mod is None:
        notes["conflation"] = f"No conflation view: {why}."
        return
    # A pair reads only its two cells' rows (the ceilings are the report's, passed in).
    cell_rows: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in final:
        cell_rows[(r["policy"], r["harness"])].append(r)
    try:
        if compare:
            pairs, how = list(compare), "the pairs asked for"
        else:
            pairs = mod.conflation_pairs(final, train_harness or None)
            how = ("each policy under its own harness (the one it was trained under, else its "
                   "best), compared with every other policy under its own — or, with one "
                   "policy, its own harness against each other harness")
        out: list[dict[str, Any]] = []
        skipped: list[dict[str, Any]] = []
        for i, (a, b) in enumerate(pairs):
            # Pairs read from JSON arrive as lists; the cells are keyed by tuples.
            a, b = cast(tuple[str, str], tuple(a)), cast(tuple[str, str], tuple(b))
            try:
                c = mod.conflation(cell_rows.get(a, []) + cell_rows.get(b, []), a, b, ceils)
            except ValueError as e:
                skipped.append({"a": list(a), "b": list(b), "reason": str(e), "at": i})
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
    data["conflation_skipped"] = skipped
    if skipped:
        notes["conflation_skipped"] = "Left out: " + "; ".join(
            f"{s['a'][0]} under {s['a'][1]} vs {s['b'][0]} under {s['b'][1]}: {s['reason']}"
            for s in skipped) + "."
    if not out:
        notes["conflation"] = ("No conflation view: no two (policy, harness) cells to compare "
                               "(it needs a policy under two harnesses, or two policies under "
                               "different harnesses)." if not skipped else
                               notes.pop("conflation_skipped"))
        return
    data["conflation"] = {"pairs": out, "how": how}


def _gain(view: ReportView, train_harness: dict[str, str],
          gain_pairs: Sequence[Sequence[str]] | None, notes: dict[str, str]) -> None:
    data, final = view.data, view.final
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
    # Nothing left out: the "before" ceilings are the report's own, not computed again.
    before_ceils = view.ceiling_estimates if not trained_further else None
    try:
        points = list(mod.gain_points(before_rows, final, before_ceils,
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
    fit_d: dict[str, Any] | None = None
    if fit is not None:
        fit_d = {k: _num(getattr(fit, k, None)) for k in
                 ("coef_ceiling", "coef_mismatch", "intercept", "r2")}
        fit_d["n"] = getattr(fit, "n", len(pts))
        fit_d["model"] = getattr(fit, "model", "ceiling+mismatch")
        fit_d["note"] = getattr(fit, "note", "")
    data["gain"] = {"points": pts, "fit": fit_d}

