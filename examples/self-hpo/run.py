"""Self-HPO on the toy suite: the alternation against each half alone, equal budgets, sealed.

The research (docs/research.md §9) alternates harness optimisation, with the current
policy proposing the edits, and RL under the harness it kept. This script runs that
loop end to end with tackroom's Python API (``tackroom.self_hpo``), in one process:

1. the starting policy π_0: a 1M-parameter model (``tackroom model init``) SFT'd here
   (``tackroom.sft``) on toy expert episodes under H_0 = ``list-cmd``;
2. ``tackroom.self_hpo`` with the three arms — ``alternate`` (Self-HPO), ``harness``
   (edits only, π_0 throughout) and ``policy`` (RL under H_0 only) — each with the same
   rounds, proposals and updates, then a sealed evaluation on held-out seeds of every
   final policy under every final harness and the held-out harness ``html-cmd``;
3. once with ``proposer = "self"`` (π_r proposes, as in the research) and once with
   ``proposer = "scripted"`` (the optimiser's seeded structured mutations: an external
   proposer for a model too small to write edits).

Writes ``results.md`` and ``results.json`` in the work directory and prints the tables.

Usage: .venv/bin/python examples/self-hpo/run.py [--workdir self-hpo-run] [--quick]
       [--proposers self,scripted] [--rounds 2] [--steps-per-round 4]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import tackroom  # cheap: the API loads DuckDB and torch on first use
from tackroom.core.errors import TackroomError
from tackroom.core.extras import script_requires

script_requires("train", who="examples/self-hpo")

TASKS = ["focus-text", "click-dialog"]
# H_0 and the held-out harness: compact text-command harnesses that differ in how the
# page is shown (numbered list vs raw HTML); two turns per episode.
HARNESSES = {
    "list-cmd": ("element_list", "Numbered element list; one text command per turn."),
    "html-cmd": ("html", "Raw HTML with data-wob_ref; one text command per turn."),
}
SYSTEM = "You are a web agent. Act on an element by its reference number."

SELFHPO = """# Self-HPO on the toy suite (examples/self-hpo).
[selfhpo]
suite = "toy"
harness = "list-cmd"
model = "{model}"
tasks = {tasks}
held_out = ["html-cmd"]
arms = ["alternate", "harness", "policy"]
rounds = {rounds}
candidates = {candidates}
steps_per_round = {steps}
proposer = "{proposer}"
acceptance = "greedy"
seed = {seed}
concurrency = 32

[splits]
train = "0-11"
dev = "100-{dev_end}"
test = "1000000-{test_end}"

[train.algo]
algorithm = "dr_grpo"
max_completion_length = 16
beta = 0.1
[train.grouping]
group = "task + '|' + str(seed)"
group_size = 8
[train.lora]
enabled = false
[train.optim]
lr = 2e-3
micro_batch_size = 8
[train.data]
tasks_per_step = 6
[train.rollout]
max_tokens = 16
concurrency = 32
[train.run]
checkpoint_every = 1

[sampling]
temperature = 0.0
max_tokens = 16
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default="self-hpo-run")
    ap.add_argument("--proposers", default="self,scripted")
    ap.add_argument("--seeds", default="0,1,2", help="Self-HPO seeds (proposer and RL seeds) "
                    "per proposer; the effects pool their sealed pairs")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--candidates", type=int, default=3)
    ap.add_argument("--steps-per-round", type=int, default=4)
    ap.add_argument("--dev-seeds", type=int, default=20)
    ap.add_argument("--test-seeds", type=int, default=50)
    ap.add_argument("--quick", action="store_true",
                    help="1 seed, 1 round, 2 candidates, 2 steps, 6 dev / 8 test seeds (a minute)")
    a = ap.parse_args()
    if a.quick:
        a.seeds, a.rounds, a.candidates, a.steps_per_round = "0", 1, 2, 2
        a.dev_seeds, a.test_seeds = 6, 8
    try:
        run(a)
    except TackroomError as e:
        sys.exit(f"failed: {e.line()}")


def run(a: argparse.Namespace) -> None:
    from rich.console import Console

    from tackroom.models import init_model
    from tackroom.models.corpus import harness_corpus
    from tackroom.report.terminal import self_hpo_tables
    from tackroom.testing.harnesses import command_harness
    from tackroom.train.engine import OptimSettings
    from tackroom.train.sft import Selection, SFTConfig

    # As the CLI prints: the terminal's width, or 160 columns into a pipe or file.
    console = Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160)
    work = Path(a.workdir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    (work / "harnesses").mkdir(parents=True)
    # Harness names resolve on $TACKROOM_HARNESS_PATH, read at every load.
    os.environ["TACKROOM_HARNESS_PATH"] = str(work / "harnesses")
    for name, (renderer, description) in HARNESSES.items():
        (work / "harnesses" / f"{name}.toml").write_text(command_harness(
            name, description=description, renderer=renderer, turns=2, max_chars=4000,
            system=SYSTEM))
    db = str(work / "runs.duckdb")
    t0 = time.perf_counter()

    print("π_0: a tiny model SFT'd on toy expert episodes under list-cmd", flush=True)
    init_model(work / "tiny", size="tiny", corpus=harness_corpus(seeds=(0,)), seed=0)
    expert = tackroom.evaluate(suite="toy", tasks=TASKS, harnesses=["list-cmd"],
                               policies=["expert"], seeds=range(8), store=db)
    sft = tackroom.sft(SFTConfig(model=str(work / "tiny"), out=str(work / "sft"),
                                 selection=Selection(runs=(expert.id,)),
                                 optim=OptimSettings(lr=1e-2, warmup_steps=2), epochs=30,
                                 batch_size=8, checkpoint_every=1000, threads=1), store=db)
    print(f"  SFT run {sft.run_id}: {sft.steps} steps, final loss "
          f"{sft.last.get('loss', float('nan')):.4f} [{time.perf_counter() - t0:.0f} s]",
          flush=True)

    results: dict[str, Any] = {"settings": dict(vars(a)), "runs": {}, "pooled": {}}
    for proposer in a.proposers.split(","):
        sealed = []
        for seed in (int(x) for x in a.seeds.split(",")):
            t1 = time.perf_counter()
            toml = work / f"selfhpo-{proposer}-{seed}.toml"
            toml.write_text(SELFHPO.format(
                model=sft.final, tasks=json.dumps(TASKS), rounds=a.rounds, seed=seed,
                candidates=a.candidates, steps=a.steps_per_round, proposer=proposer,
                dev_end=100 + a.dev_seeds - 1, test_end=1_000_000 + a.test_seeds - 1))
            print(f"\nSelf-HPO, proposer = {proposer}, seed {seed} ({toml.name})", flush=True)
            res = tackroom.self_hpo(toml, store=db, out_dir=work / f"shpo-{proposer}-{seed}",
                                    on_note=lambda line: print(f"  {line}", flush=True))
            for table in self_hpo_tables(res.report):
                console.print(table)
            results["runs"][f"{proposer}-{seed}"] = {
                "proposer": proposer, "seed": seed, "run_id": res.run_id,
                "start_dev": res.start_dev, "sealed_run": res.sealed_run, "table": res.table,
                "effects": res.effects, "budgets": res.budgets, "spent": res.spent,
                "lineage": res.lineage, "finals": res.finals,
                "replies": top_replies(db, res),
                "minutes": (time.perf_counter() - t1) / 60}
            sealed.append(res)
        results["pooled"][proposer] = pooled_effects(sealed, db)
    results["minutes"] = (time.perf_counter() - t0) / 60
    (work / "results.json").write_text(json.dumps(results, indent=1, default=str))
    (work / "results.md").write_text(render(results))
    print("\n" + render(results))


def pooled_effects(runs: list[Any], db: str) -> dict[str, dict[str, float]]:
    """The main effects with the sealed (task, seed) pairs of every Self-HPO seed pooled."""
    from tackroom.analysis.stats import paired_bootstrap, paired_cells
    from tackroom.records import RecordStore

    held = "html-cmd"
    names = {"alternate - start": ("alternate", None, "start", None),
             "harness - start": ("harness", None, "start", None),
             "policy - start": ("policy", None, "start", None),
             "alternate - harness": ("alternate", None, "harness", None),
             "alternate - policy": ("alternate", None, "policy", None),
             f"alternate - start under {held}": ("alternate", held, "start", held),
             f"policy - start under {held}": ("policy", held, "start", held),
             f"alternate - policy under {held}": ("alternate", held, "policy", held)}
    xs: dict[str, tuple[list[float], list[float]]] = {n: ([], []) for n in names}
    with RecordStore(db, read_only=True) as store:
        for res in runs:
            rows = store.episodes(res.sealed_run)
            for n, (a, ha, b, hb) in names.items():
                (pa, own_a), (pb, own_b) = res.cells[a], res.cells[b]
                xa, xb = paired_cells(rows, (pa, ha or own_a), (pb, hb or own_b))
                xs[n][0].extend(xa)
                xs[n][1].extend(xb)
    out = {}
    for n, (xa, xb) in xs.items():
        r = paired_bootstrap(xa, xb)
        out[n] = {"diff": r.diff, "lo": r.lo, "hi": r.hi, "p": r.p_value, "n": r.n}
    return out


def top_replies(db: str, res: Any, k: int = 3) -> dict[str, list[list[Any]]]:
    """What each final policy wrote in the sealed run: its ``k`` commonest replies, with their
    share of its turns (a policy that writes one command whatever it sees shows here)."""
    from collections import Counter

    from tackroom.records import RecordStore

    counts: dict[str, Counter[str]] = {}
    label_of: dict[str, str] = {}  # the start and the harness arm share π_0
    for label, (policy, _h) in res.cells.items():
        label_of[policy] = f"{label_of[policy]} / {label}" if policy in label_of else label
    with RecordStore(db, read_only=True) as store:
        for ep in store.iter_episodes(res.sealed_run):
            label = label_of.get(ep.policy)
            if label is not None:
                counts.setdefault(label, Counter()).update(
                    # the fences the tiny model writes around a command, dropped for reading
                    " ".join((t.raw_text or "").replace("```", " ").split()) or "(empty)"
                    for t in ep.turns)
    return {label: [[text, n / sum(c.values())] for text, n in c.most_common(k)]
            for label, c in counts.items()}


def render(results: dict[str, Any]) -> str:
    """results.md: per proposer, the lineage, the sealed table, the effects, quoted proposals."""

    def eff(e: dict[str, float]) -> str:
        return (f"{100 * e['diff']:+.1f} pp [{100 * e['lo']:+.1f}, {100 * e['hi']:+.1f}] "
                f"(p = {e['p']:.3f}, {e['n']} pairs)")

    out = [f"Total wall time: {results['minutes']:.1f} min", ""]
    for proposer, pooled in results["pooled"].items():
        n_runs = sum(r["proposer"] == proposer for r in results["runs"].values())
        out += [f"## proposer = {proposer}: effects pooled over {n_runs} Self-HPO seed(s)", "",
                "Paired bootstrap over (Self-HPO seed, task, test seed):", ""]
        out += [f"- {name}: {eff(e)}" for name, e in pooled.items()]
        out.append("")
    for key, r in results["runs"].items():
        out += [f"## {key}: proposer = {r['proposer']}, seed {r['seed']} (run {r['run_id']}, "
                f"{r['minutes']:.1f} min)", "",
                "| arm | round | harness accepted | updates | dev after |", "|---|---|---|---|---|",
                f"| start | - | - | 0 | {100 * r['start_dev']:.0f}% |"]
        for arm, rounds in r["lineage"].items():
            for row in rounds:
                h, p = row.get("harness_phase"), row.get("policy_phase")
                out.append(f"| {arm} | {row['round']} | "
                           f"{(h['accepted'] or 'nothing') if h else '-'} | "
                           f"{p['updates'] if p else 0} | {100 * row['dev']:.0f}% |")
        names = list(next(iter(r["table"].values())))
        out += ["", f"Sealed run {r['sealed_run']} (test seeds, Wilson 95%):", "",
                "| policy \\ harness | " + " | ".join(names) + " |",
                "|---|" + "---|" * len(names)]
        for label, cells in r["table"].items():
            out.append(f"| {label} | " + " | ".join(
                f"{100 * c['rate']:.1f}% [{100 * c['lo']:.1f}, {100 * c['hi']:.1f}]"
                for c in cells.values()) + " |")
        out += ["", "Effects (paired bootstrap over task × seed):", ""]
        out += [f"- {name}: {eff(e)}" for name, e in r["effects"].items()]
        out += ["", "Commonest replies in the sealed run (share of the policy's turns):", ""]
        out += [f"- {label}: " + "; ".join(f"`{text}` {100 * share:.0f}%" for text, share in reps)
                for label, reps in r["replies"].items()]
        out += ["", "| arm | planned updates | spent | planned dev evaluations | spent |",
                "|---|---|---|---|---|"]
        out += [f"| {arm} | {b['updates']} | {r['spent'][arm]['updates']} | "
                f"{b['dev_evaluations']} | {r['spent'][arm]['dev_evaluations']} |"
                for arm, b in r["budgets"].items()]
        out += ["", "Proposals (as recorded):", ""]
        for arm, rounds in r["lineage"].items():
            for row in rounds:
                h = row.get("harness_phase")
                if not h:
                    continue
                for cand in h["proposed"]:
                    out.append(f"- {arm} r{row['round']} {cand['name']}: "
                               f"`{json.dumps(cand['edits'])[:300]}`")
                for log in h["unusable"][:2]:
                    for ans in log.get("answers", [])[:1]:
                        out.append(f"- {arm} r{row['round']} unusable answer: "
                                   f"`{ans[:200]!r}` ({'; '.join(log.get('problems', []))[:200]})")
        out.append("")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
