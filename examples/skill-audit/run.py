"""A skill optimiser run, then its BiPA audit (docs/research.md §4, docs/optimize.md).

BiPA found that learned skills barely beat hand-written seeds, that dev-set gains
often vanish on test (the acceptance rule picks lucky candidates) and that
optimisers add redundant rules that cost input tokens and turns. This script
runs tackroom's optimiser and audit on a built-in suite and checks each finding:

1. ``tackroom.app.optimization.optimize``: the ``som-tools`` harness (no skills)
   on the toy suite or MiniWoB++ (``--suite``), the ``skill-expert`` agent (the toy experts gated by the
   harness's skills: a *scripted* skill-following stand-in whose success depends
   on the skill text only — not a model), the scripted proposer (structured
   mutations of rules and loop limits, blind to failures), greedy acceptance on
   dev, ``--rounds`` × ``--candidates``;
2. ``audit``: the acceptance replay on fresh seeds (selection effect), dev →
   test, the read graph of the final harness's test episodes, tokens and turns
   per accepted edit;
3. the table — no skills, hand-written seed skills, the optimiser's output — on
   dev and on test, and the three findings, as the run measured them.

Writes ``results.md`` and ``results.json`` (the whole audit) in ``--workdir``.

Usage: .venv/bin/python examples/skill-audit/run.py [--suite toy|miniwob] [--workdir skill-audit-run]
       [--rounds 4] [--candidates 4] [--dev-seeds 30] [--test-seeds 60] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from tackroom.core.errors import TackroomError
from tackroom.core.extras import script_requires

#: The same eight task families in both suites (each has a scripted expert there).
TASKS = ["click-button", "click-link", "click-checkboxes", "click-option", "click-tab",
         "focus-text", "enter-text", "click-dialog"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default="skill-audit-run")
    ap.add_argument("--suite", default="toy", choices=["toy", "miniwob"],
                    help="toy (in-process, seconds) or miniwob (MiniWoB++ in Chromium)")
    ap.add_argument("--concurrency", type=int, default=0,
                    help="episodes at a time (0: the suite's default)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--candidates", type=int, default=4)
    ap.add_argument("--train-seeds", type=int, default=5)
    ap.add_argument("--dev-seeds", type=int, default=30)
    ap.add_argument("--test-seeds", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0, help="the proposer's seed")
    a = ap.parse_args()
    script_requires(*(("web",) if a.suite == "miniwob" else ()),
                    who="examples/skill-audit --suite miniwob")
    try:
        run(a)
    except TackroomError as e:
        sys.exit(f"failed: {e.line()}")


def run(a: argparse.Namespace) -> None:
    from tackroom.app.optimization import audit, optimize
    from tackroom.app.optimize_config import OptimizeConfig

    work = Path(a.workdir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    db = work / "runs.duckdb"
    cfg = OptimizeConfig(
        suite=a.suite, harness="som-tools", policy="skill-expert", tasks=TASKS,
        concurrency=a.concurrency,
        proposer="scripted", acceptance="greedy", rounds=a.rounds, candidates=a.candidates,
        budget=a.rounds * a.candidates, seed=a.seed, train=f"0-{a.train_seeds - 1}",
        dev=f"100-{100 + a.dev_seeds - 1}", test=f"1000000-{1000000 + a.test_seeds - 1}",
        max_tokens=64)
    t0 = time.perf_counter()
    result = optimize(cfg, store=db, out_dir=work / "optimize", on_note=lambda s: print(" ", s))
    print(f"optimiser run {result.run_id}: accepted {result.accepted or 'nothing'}", flush=True)
    report = audit(result.run_id, store=db, on_note=lambda s: print(" ", s))
    minutes = (time.perf_counter() - t0) / 60
    out = {"run_id": result.run_id, "config": cfg.to_dict(), "table": result.table,
           "accepted": result.accepted, "rejected": result.rejected,
           "dev_evaluations": result.dev_evaluations, "audit": report.to_dict(),
           "minutes": minutes}
    (work / "results.json").write_text(json.dumps(out, indent=1))
    text = render(out)
    (work / "results.md").write_text(text)
    print(text)


def _pp(x: Any) -> str:
    return "–" if x is None else f"{100 * x:+.1f}"


def _ivl(d: dict[str, Any]) -> str:
    return f"{_pp(d['value'])} pp [{_pp(d['lo'])}, {_pp(d['hi'])}]"


def render(r: dict[str, Any]) -> str:
    t, au = r["table"], r["audit"]
    lines = [f"Optimiser run {r['run_id']} ({r['minutes']:.1f} min): accepted "
             f"{', '.join(r['accepted']) or 'nothing'} after {r['dev_evaluations']} dev "
             f"evaluations; {r['rejected']} candidate(s) rejected by the leakage guard.", "",
             "| harness | dev | test |", "|---|---|---|"]
    for label, row in t.items():
        lines.append(f"| {label} | {100 * row['dev']:.1f}% (n={row['n_dev']}) | "
                     f"{100 * row['test']:.1f}% (n={row['n_test']}) |")
    lines += ["", "**Acceptance replay** (the same candidates on fresh seeds):", "",
              "| round | selected | gain at selection | gain on fresh | selection effect | "
              "same pick |", "|---|---|---|---|---|---|"]
    for i, e in enumerate(au["replay"]):
        if not e["selected"]:
            lines.append(f"| {i} | (none) | – | – | – | {'yes' if e['agreement']['same'] else 'no'} |")
            continue
        lines.append(f"| {i} | {', '.join(e['selected'])} | {_ivl(e['gain_selection'])} | "
                     f"{_ivl(e['gain_fresh'])} | {_ivl(e['effect'])} | "
                     f"{'yes' if e['agreement']['same'] else 'no'} |")
    if au["dev_test"]:
        lines += ["", "**Dev → test** (gain over no skills):", "",
                  "| candidate | dev | test | drop |", "|---|---|---|---|"]
        for d in au["dev_test"]:
            lines.append(f"| {d['candidate']} | {_ivl(d['dev'])} | {_ivl(d['test'])} | "
                         f"{_ivl(d['drop'])} |")
    if au["costs"]:
        lines += ["", "**Cost per accepted edit** (per episode; input tokens = words, "
                  "skill-expert has no tokenizer):", "",
                  "| edit | input tokens | turns |", "|---|---|---|"]
        for c in au["costs"]:
            it, tu = c["input_tokens"], c["turns"]
            lines.append(f"| {c['label']} | {it['diff']:+.0f} [{it['lo']:+.0f}, {it['hi']:+.0f}] "
                         f"| {tu['diff']:+.2f} [{tu['lo']:+.2f}, {tu['hi']:+.2f}] |")
    used = [u for u in au["usage"] if "/" in u["id"]]
    if used:
        never = [u for u in used if u["never_used"]]
        lines += ["", f"**Read graph** of the final harness's test episodes: {len(used)} skill "
                  f"rules, {len(never)} never acted on:", "",
                  "| rule | text | episodes in context | episodes acted on |", "|---|---|---|---|"]
        for u in used:
            lines.append(f"| {u['id']} | {u['text'][:70]} | {u['episodes_in_context']} | "
                         f"{u['episodes_acted']}{' (never used)' if u['never_used'] else ''} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
