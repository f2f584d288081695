"""Reports from Python: the view of some runs, its terminal tables and the HTML page."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tackroom.app.runs import open_store, resolve_run
from tackroom.core.errors import ConfigError
from tackroom.core.run import RunConfig
from tackroom.records import RecordStore


@dataclass
class Report:
    """A written report: the HTML file, the runs it covers, and the view both read.

    ``tables()`` gives the rich tables ``tackroom report`` prints, computed from
    the same view as the page (ceilings are estimated once per report).
    """

    path: Path
    run_ids: list[str]
    view: Any

    def tables(self) -> list[Any]:
        """The terminal tables, in the order the CLI prints them."""
        from tackroom.report.terminal import report_tables

        return report_tables(self.view)


def report(runs: Sequence[str] = ("latest",), *, out: str | Path | None = None,
           store: RecordStore | str | Path | None = None,
           trained: Mapping[str, str] | None = None,
           gain: Sequence[tuple[str, str, str]] = (),
           compare: Sequence[tuple[str, str]] = ()) -> Report:
    """Write a self-contained HTML report of ``runs`` and return it.

    Args:
        runs: run ids (``latest`` for the newest).
        out: the HTML file (default ``report-RUN+RUN.html`` beside the store).
        store: the record store or its path.
        trained: policy → the harness it was trained under (enables the transfer
            matrix and the "retrained" ceiling).
        gain: ``(before, after, harness)``: policy ``after`` is ``before`` trained
            further under ``harness`` (the gain scatter: ΔJ against C and M).
        compare: ``(policy, harness)`` cells for the conflation view (every two
            compared); default each policy under its own harness.

    Policies may be named by id or by the spec they were run with (``bundled``).

    ::

        rep = tackroom.report(["latest"], trained={"bundled": "som-tools"})
        print(rep.path)
    """
    from tackroom.records.export import check_output_file
    from tackroom.report.html import render_html
    from tackroom.report.view import report_view

    cells = list(compare)
    if len(cells) == 1:
        raise ConfigError("compare names one cell", "--compare",
                          "name at least two POLICY@HARNESS cells")
    with open_store(store, read_only=True) as st:
        run_ids, optimizer = _expand_optimizer_runs(st, [resolve_run(st, r) for r in runs])
        rows = [row for rid in run_ids for row in st.episodes(run_id=rid)]
        if not rows:
            raise ConfigError("the run(s) have no episodes yet", str(st.path),
                              "finish them with `tackroom eval --resume RUN`")
        name = policy_resolver(rows, [RunConfig.from_dict((st.run(r) or {}).get("config"))
                                      for r in run_ids])
        train_harness = {name(p, "--trained"): h for p, h in (trained or {}).items()}
        gain_pairs = [(name(b, "--gain"), name(a, "--gain"), h) for b, a, h in gain]
        picked = [(name(p, "--compare"), h) for p, h in cells]
        pairs = [(a, b) for i, a in enumerate(picked) for b in picked[i + 1:]]
        view = report_view(st, run_ids, train_harness=train_harness or None,
                           gain_pairs=gain_pairs or None, compare=pairs or None)
        if optimizer:
            view.data["optimizer"] = [o for o in optimizer if o["kind"] == "optimize"]
            view.data["selfhpo"] = [o for o in optimizer if o["kind"] == "self-hpo"]
        target = Path(out or Path(st.path).parent / f"report-{'+'.join(run_ids)}.html")
        check_output_file(target)
        try:
            render_html(view, st, target)
        except OSError as exc:
            raise ConfigError(f"cannot write the report ({exc.strerror or exc})", str(target),
                              "pass a writable file path with --out") from None
    return Report(target.resolve(), run_ids, view)


def _expand_optimizer_runs(store: RecordStore, run_ids: list[str]
                           ) -> tuple[list[str], list[dict[str, Any]]]:
    """Optimiser runs (``tackroom optimize``) stand for their test evaluations, Self-HPO runs
    for their sealed evaluation; their tables, audit and lineage go to the report's
    optimiser and Self-HPO sections (each dict's ``kind`` says which)."""
    from tackroom.app.optimization import journal
    from tackroom.app.selfhpo import read_self_hpo

    out: list[str] = []
    optimizer: list[dict[str, Any]] = []
    for rid in run_ids:
        info = store.run(rid) or {}
        if info.get("command") == "self-hpo":
            shpo = read_self_hpo(store, rid)
            out.append(shpo["sealed_run"])
            optimizer.append({"kind": "self-hpo", **shpo})
            continue
        if info.get("command") != "optimize":
            out.append(rid)
            continue
        entries = journal(store, rid)
        final = entries.get("final")
        if final is None:
            raise ConfigError(f"optimiser run {rid!r} has not finished", "report",
                              f"finish it first: tackroom optimize --resume {rid}")
        names = {"none": "none", "seed-skills": "seed-skills", "optimized": final["best"]}
        out.extend(entries[f"eval:{names[label]}:test"]["run"] for label in final["table"])
        audit = entries.get("audit")
        optimizer.append({"kind": "optimize", "run_id": rid, "table": final["table"], "accepted": final["accepted"],
                          "audit": {k: audit[k] for k in ("replay", "dev_test", "usage", "costs")}
                          if audit else None})
    return list(dict.fromkeys(out)), optimizer


def policy_resolver(rows: Sequence[Mapping[str, Any]], configs: Sequence[RunConfig]
                    ) -> Callable[[str, str], str]:
    """Map a policy name (an id, or the spec it was run with) to the id its episodes carry."""
    ids = sorted({str(r["policy"]) for r in rows if r.get("policy")})
    specs: dict[str, str] = {}
    for cfg in configs:
        specs.update(cfg.policy_ids)

    def resolve(name: str, option: str) -> str:
        if name in ids:
            return name
        if name in specs and specs[name] in ids:
            return specs[name]
        raise ConfigError(f"no policy {name!r} in these runs", option,
                          f"name one of: {', '.join(ids)}")
    return resolve
