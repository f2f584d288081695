"""Delegation on MiniWoB++ with the bundled policy as the LLM: record, fit, grade.

1. **record**: the bundled policy and the scripted expert under ``som-record``
   (som-tools + ``[delegation] points = ["submit", "type", "click"]``, no model) on the
   demo tasks, training seeds (never evaluated on); every decision point is recorded
   with the expert's choice as its label;
2. **fit** four decision models (``tackroom delegate fit``), all logistic:
   ``post-mistake``: trained with the states right after a mistake weighted ×4, one τ
   per choice type (the research's recipe); ``all-states``: every state weighted the
   same, τ per type; ``global-tau``: every state, one τ for all types (naive);
   ``gbm``: gradient-boosted, weighted, τ per type;
3. **bench** (``tackroom delegate bench``) on held-out seeds: the LLM alone, the
   isolated decisions (i), one decision delegated (ii), the confident take-overs (iii)
   and the decision model alone (iv) for the first model, and rung (iii) for the rest.

Writes ``results.md`` (the ladder as the run printed it) and ``ladder.json`` in the
work directory::

    .venv/bin/python examples/delegation/run.py --workdir delegation-run

Plumbing check (a minute): ``--train-seeds 100-101 --eval-seeds 0 --tasks click-test,click-button``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("MINIWOB_CHROME_BINARY", "/usr/bin/chromium")
os.environ.setdefault("MINIWOB_CHROMEDRIVER", "/usr/bin/chromedriver")

from tackroom import bench_delegation, evaluate, fit_delegation  # noqa: E402
from tackroom.core.extras import script_requires  # noqa: E402
from tackroom.core.policy import Sampling  # noqa: E402
from tackroom.report.delegation import ladder_table  # noqa: E402

script_requires("web", "train", "delegation", who="examples/delegation")

DEMO_TASKS = ("click-test,click-test-2,click-test-transfer,click-button,click-button-sequence,"
              "click-dialog,click-dialog-2,click-link,click-widget,focus-text,focus-text-2,"
              "identify-shape")

RECORD_HARNESS = """name = "som-record"
extends = "som-tools"
description = "som-tools, recording its decision points for delegation"

[delegation]
points = ["submit", "type", "click"]
"""

#: name -> (kind, train_on, per_type, target precision; None = --target-precision)
MODELS = {
    "post-mistake": ("logistic", "weighted", True, None),
    "all-states": ("logistic", "all", True, None),
    "global-tau": ("logistic", "all", False, None),
    "strict": ("logistic", "weighted", True, 0.99),
    "gbm": ("gbm", "weighted", True, None),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default="delegation-run")
    ap.add_argument("--tasks", default=DEMO_TASKS)
    ap.add_argument("--train-seeds", default="100-119")
    ap.add_argument("--eval-seeds", default="0-9")
    ap.add_argument("--target-precision", type=float, default=0.9)
    ap.add_argument("--max-tokens", type=int, default=48)
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    tasks = args.tasks.split(",")
    record = work / "som-record.toml"
    record.write_text(RECORD_HARNESS)
    train_db = work / "train.duckdb"
    t0 = time.time()
    lines: list[str] = []

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    if not train_db.exists():
        run = evaluate("miniwob", tasks=tasks, harnesses=[str(record)],
                       policies=["bundled", "expert"], seeds=args.train_seeds,
                       sampling=Sampling(max_tokens=args.max_tokens), store=train_db)
        say(f"recorded {len(run.episodes())} training episodes ({args.train_seeds}) "
            f"in {time.time() - t0:.0f} s")
    fitted = []
    for name, (kind, train_on, per_type, target) in MODELS.items():
        res = fit_delegation(train_db, str(record), work / f"{name}.toml", kind=kind,
                             train_on=train_on, per_type=per_type,
                             target_precision=target or args.target_precision, name=name)
        fitted.append(str(res.harness))
        types = ", ".join(
            f"{t.type}: acc {_pct(t.accuracy)} (n={t.n_val}), "
            f"τ {res.thresholds[t.type]:.3f}" if t.type in res.thresholds else
            f"{t.type}: acc {_pct(t.accuracy)} (n={t.n_val}), never"
            for t in res.types)
        say(f"fit {name}: {kind} on {train_on} states ({res.n_train} train / "
            f"{res.n_val} held-out points); {types}")
    from rich.console import Console
    ladders = {}
    # The bundled policy is the LLM of the issue; the scripted expert stands in for a
    # strong LLM, against which every wrong take-over costs success.
    for llm in ("bundled", "expert"):
        t1 = time.time()
        result = bench_delegation("miniwob", tasks=tasks, seeds=args.eval_seeds, policy=llm,
                                  delegating=fitted, workdir=work / f"bench-{llm}",
                                  sampling=Sampling(max_tokens=args.max_tokens))
        say(f"## LLM = {llm}\n\nbench: run {result.run_id}, {time.time() - t1:.0f} s")
        console = Console(width=200, record=True)
        console.print(ladder_table(result))
        lines.append("```\n" + console.export_text() + "```")
        for r in result.rows:
            if r.by_type:
                say(f"{r.rung:10s} {r.model or '(LLM)':13s} by type: "
                    + json.dumps({t: {k: round(v, 3) if isinstance(v, float) else v
                                      for k, v in d.items() if k != "ci"}
                                  for t, d in r.by_type.items()}))
        ladders[llm] = result.to_dict()
    (work / "results.md").write_text("\n\n".join(lines) + "\n")
    (work / "ladder.json").write_text(json.dumps(ladders, indent=1))
    print(f"wrote {work / 'results.md'} ({time.time() - t0:.0f} s in all)", file=sys.stderr)


def _pct(x: float | None) -> str:
    return "·" if x is None else f"{100 * x:.0f}%"


if __name__ == "__main__":
    main()
