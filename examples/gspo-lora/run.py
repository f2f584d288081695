"""One epoch of GSPO on a rank-32 LoRA adapter, evaluated on held-out and unseen tasks (docs/research.md §3).

The research ran one epoch of GSPO on a rank-32 LoRA adapter over 1,700 coding
tasks and reported higher pass@1 (also on tasks released after training), fewer
agent steps and fewer failures of some kinds. This script repeats that design at
toy scale with tackroom's Python API (docs/api.md), in this process:

1. the starting policy: a tiny model built here (``tackroom.models.init_model``)
   and SFT'd (``tackroom.sft``) on a few expert episodes of the *training* tasks;
2. ``tackroom.train``: GSPO (sequence-level ratios, the paper's clip range
   ε = 3e-4 / 4e-4, no KL) on a rank-32 LoRA adapter, **one epoch** over the
   training split — every training task instance (task, seed) is rolled out
   exactly once, G samples each;
3. ``tackroom.seal`` + ``tackroom.evaluate_sealed``: the start and the trained
   adapter on held-out seeds (``1000000+``, never a training seed) of the
   training tasks and on tasks the model never saw in SFT or RL (the research's
   "released after training"), greedy, every cell run;
4. pass@1, mean agent steps (turns) and failure-mode counts, before and after,
   each difference a paired bootstrap over (task, seed) with a 95% interval.

Toy failure modes (the code suite's "dropped a requirement" / "broke existing
behaviour" need a model that edits code): ``wrong_action`` (the page's check
failed: the agent acted on the wrong element or submitted a wrong answer),
``ran_out_of_turns`` (well-formed actions, no verdict within the turn budget),
``malformed`` (ran out of turns with at least half its replies unparseable).

Writes ``results.md`` and ``results.json`` in the work directory.

Usage: .venv/bin/python examples/gspo-lora/run.py [--workdir gspo-lora-run]
       [--epoch-seeds 16] [--eval-seeds 100] [--train-seeds 0,1,2] [--sft-epochs 20]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import tackroom
from tackroom.core.errors import TackroomError
from tackroom.core.extras import script_requires
from tackroom.testing.harnesses import command_harness

script_requires("train", who="examples/gspo-lora")

EVAL_SEED_BASE = 1_000_000  # tackroom.train.rollouts.EVAL_SEED_BASE: never a training seed

TRAIN_TASKS = ["click-button", "click-link", "focus-text", "click-dialog"]
UNSEEN_TASKS = ["click-widget", "click-option"]  # never in SFT or RL
HARNESS = "list-cmd"
HARNESS_TOML = command_harness(
    HARNESS, description="Numbered element list; one text command per turn.", turns=4,
    max_chars=4000, system="You are a web agent. Act on an element by its reference number.")
MAX_TOKENS = 16
GROUP_SIZE = 8
TASKS_PER_STEP = 8
MODES = ("wrong_action", "ran_out_of_turns", "malformed")


@contextmanager
def step(what: str) -> Iterator[None]:
    t0 = time.perf_counter()
    print(f"  {what} …", flush=True)
    yield
    print(f"  {what}: done [{time.perf_counter() - t0:.0f} s]", flush=True)


def train_toml(model: str, steps: int, lr: float) -> str:
    return f"""# One epoch of GSPO on a rank-32 LoRA adapter (docs/research.md §3).
[algo]
algorithm = "gspo"             # sequence-level ratio, clip 3e-4 / 4e-4, no KL
max_completion_length = {MAX_TOKENS}
[grouping]
group = "task + '|' + str(seed)"   # one group per task instance: G samples of it
group_size = {GROUP_SIZE}
[lora]
enabled = true
rank = 32
alpha = 64
[optim]
lr = {lr}
steps = {steps}
micro_batch_size = 16
[model]
path = "{model}"
device = "auto"
[data]
suite = "toy"
tasks = {json.dumps(TRAIN_TASKS)}
harnesses = ["{HARNESS}"]
tasks_per_step = {TASKS_PER_STEP}
[rollout]
max_tokens = {MAX_TOKENS}
concurrency = 32
[run]
checkpoint_every = 0
"""


def failure_mode(row: dict[str, Any]) -> str | None:
    """The toy analogue of a failure mode (see the module docstring), ``None`` for a success."""
    outcome = row["outcome"]
    if outcome == "success":
        return None
    if outcome == "failure":
        return "wrong_action"
    if row["parse_errors"] * 2 >= max(1, row["n_turns"]):
        return "malformed"
    return "ran_out_of_turns"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default="gspo-lora-run")
    ap.add_argument("--epoch-seeds", type=int, default=16,
                    help="training instances per training task: the epoch (default 16)")
    ap.add_argument("--eval-seeds", type=int, default=100,
                    help="evaluation seeds per (checkpoint, task) (default 100)")
    ap.add_argument("--train-seeds", default="0,1,2",
                    help="one GSPO run per training seed (default 0,1,2)")
    ap.add_argument("--sft-epochs", type=int, default=20,
                    help="SFT epochs of the starting policy (default 20)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--threads", default="1")
    a = ap.parse_args()
    try:
        run_experiment(a)
    except TackroomError as e:
        sys.exit(f"failed: {e.line()}")


def run_experiment(a: argparse.Namespace) -> None:
    from tackroom.core.policy import Sampling
    from tackroom.models import init_model
    from tackroom.models.corpus import harness_corpus
    from tackroom.train.engine import OptimSettings
    from tackroom.train.sft import Selection, SFTConfig

    work = Path(a.workdir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    (work / "harnesses").mkdir(parents=True)
    (work / "harnesses" / f"{HARNESS}.toml").write_text(HARNESS_TOML)
    os.environ["TACKROOM_HARNESS_PATH"] = str(work / "harnesses")
    db = str(work / "runs.duckdb")
    threads = int(a.threads)
    t_start = time.perf_counter()
    print(f"work directory {work}", flush=True)

    # 1. The starting policy: a tiny model SFT'd on expert episodes of the training tasks.
    with step("tiny model"):
        init_model(work / "tiny", size="tiny", corpus=harness_corpus(seeds=(0,)), seed=0)
    with step("expert episodes of the training tasks"):
        experts = tackroom.evaluate(suite="toy", tasks=TRAIN_TASKS, harnesses=[HARNESS],
                                    policies=["expert"], seeds=range(6), store=db)
    print(f"    run {experts.id}: {100 * experts.success_rate:.0f}% success", flush=True)
    with step(f"SFT ({a.sft_epochs} epochs)"):
        sft = tackroom.sft(SFTConfig(
            model=str(work / "tiny"), out=str(work / "sft"),
            selection=Selection(runs=(experts.id,)),
            optim=OptimSettings(lr=1e-2, warmup_steps=2), epochs=a.sft_epochs, batch_size=8,
            checkpoint_every=1000, threads=threads), store=db)
    print(f"    run {sft.run_id}: {sft.examples} examples, {sft.steps} steps, "
          f"final loss {sft.last.get('loss', float('nan')):.3f}", flush=True)

    # 2. One epoch of GSPO + LoRA: every training instance once (len(TRAIN_TASKS) ×
    # epoch_seeds instances, TASKS_PER_STEP per step).
    instances = len(TRAIN_TASKS) * a.epoch_seeds
    steps = max(1, instances // TASKS_PER_STEP)
    (work / "train.toml").write_text(train_toml(str(sft.final), steps, a.lr))
    checkpoints = {"before": f"hf:{sft.final}"}
    train_runs = []
    for seed in [int(x) for x in a.train_seeds.split(",")]:
        with step(f"GSPO + LoRA r=32, one epoch, training seed {seed}: {steps} steps × "
                  f"{TASKS_PER_STEP} instances × G={GROUP_SIZE}"):
            rl = tackroom.train(work / "train.toml",
                                [f"run.out_dir={work / f'gspo-{seed}'}", f"run.seed={seed}"],
                                store=db, threads=threads, on_step=progress)
        print(f"    run {rl.run_id}: {rl.steps} steps, adapter {rl.final}", flush=True)
        checkpoints[f"after-{seed}"] = f"hf:{rl.base_model}:{rl.final}"
        train_runs.append(rl.run_id)

    # 3. Sealed evaluation: both checkpoints × every task × held-out seeds, greedy.
    seeds = f"{EVAL_SEED_BASE}-{EVAL_SEED_BASE + a.eval_seeds - 1}"
    manifest = tackroom.seal(work / "manifest.json", suite="toy",
                             tasks=TRAIN_TASKS + UNSEEN_TASKS, harnesses=[HARNESS],
                             train_harnesses=[HARNESS], policies=list(checkpoints.values()),
                             seeds=seeds, sampling=Sampling(max_tokens=MAX_TOKENS))
    print(f"  sealed sha256:{manifest.hash}: {manifest.n_cells} cells", flush=True)
    with step("sealed evaluation"):
        sealed = tackroom.evaluate_sealed(work / "manifest.json", store=db, concurrency=32)

    results = analyse(sealed, checkpoints)
    results.update({"minutes": (time.perf_counter() - t_start) / 60, "sft_run": sft.run_id,
                    "train_runs": train_runs, "steps": steps, "instances": instances,
                    "eval_seeds": a.eval_seeds, "sft_epochs": a.sft_epochs, "lr": a.lr})
    (work / "results.json").write_text(json.dumps(results, indent=1))
    (work / "results.md").write_text(render(results))
    print(render(results))


def progress(step_: int, total: int, m: dict[str, float]) -> None:
    print(f"    step {step_}/{total}: reward {m.get('reward_mean', float('nan')):.2f}, "
          f"success {100 * m.get('success', 0.0):.0f}%, "
          f"clipped {m.get('clip_frac', float('nan')):.3f}", flush=True)


def analyse(run: tackroom.Run, checkpoints: dict[str, str]) -> dict[str, Any]:
    """Each measure before and after, per training seed, and pooled over the seeds.

    The pooled difference pairs every trained checkpoint's episode with the
    start's on the same (task, seed), so a training seed counts as one more
    replicate of each pair (as in examples/grouping).
    """
    from tackroom.analysis.stats import paired_bootstrap, scored_rows

    rows = scored_rows(run.episodes())
    ids = dict(run.config.policy_ids)
    pid = {name: ids.get(spec, spec) for name, spec in checkpoints.items()}
    by_cell = {(r["policy"], r["task"].split("/")[-1], r["seed"]): r for r in rows}
    afters = [name for name in checkpoints if name != "before"]
    splits = {"held-out seeds, training tasks": TRAIN_TASKS, "unseen tasks": UNSEEN_TASKS}
    measures = {
        "pass@1": lambda r: float(r["outcome"] == "success"),
        "agent steps": lambda r: float(r["n_turns"]),
        **{f"failures: {m}": (lambda r, m=m: float(failure_mode(r) == m)) for m in MODES},
    }
    out: dict[str, Any] = {"run_id": run.id, "manifest_hash": run.manifest_hash,
                           "afters": afters, "splits": {}}
    for split, tasks in splits.items():
        keys = sorted((t, s) for (p, t, s) in by_cell if p == pid["before"] and t in tasks
                      and all((pid[a], t, s) in by_cell for a in afters))
        table = {}
        for name, f in measures.items():
            agg = sum if name.startswith("failures") else (lambda xs: sum(xs) / max(1, len(xs)))
            before = [f(by_cell[(pid["before"], t, s)]) for t, s in keys]
            after = {a: [f(by_cell[(pid[a], t, s)]) for t, s in keys] for a in afters}
            d = paired_bootstrap([x for a in afters for x in after[a]], before * len(afters))
            table[name] = {"before": agg(before), "after": {a: agg(after[a]) for a in afters},
                           "diff": d.diff, "lo": d.lo, "hi": d.hi, "p": d.p_value,
                           "count": name.startswith("failures")}
        out["splits"][split] = {"n": len(keys), "table": table}
    return out


def render(r: dict[str, Any]) -> str:
    afters = r["afters"]
    lines = [f"Sealed run {r['run_id']}, manifest sha256:{r['manifest_hash']}", ""]
    for split, block in r["splits"].items():
        lines += [f"**{split}** ({block['n']} (task, seed) pairs per checkpoint)", "",
                  "| measure | before | " + " | ".join(afters)
                  + " | after − before, pooled [95% CI] | p |",
                  "|---|---|" + "---|" * len(afters) + "---|---|"]
        for name, m in block["table"].items():
            if name == "pass@1":
                fmt = lambda x: f"{100 * x:.1f}%"  # noqa: E731
                d = f"{100 * m['diff']:+.1f} pp [{100 * m['lo']:+.1f}, {100 * m['hi']:+.1f}]"
            elif m["count"]:
                fmt = lambda x: f"{x:.0f}"  # noqa: E731
                d = (f"{100 * m['diff']:+.1f} pp of episodes [{100 * m['lo']:+.1f}, "
                     f"{100 * m['hi']:+.1f}]")
            else:
                fmt = lambda x: f"{x:.2f}"  # noqa: E731
                d = f"{m['diff']:+.2f} [{m['lo']:+.2f}, {m['hi']:+.2f}]"
            cells = [fmt(m["before"]), *(fmt(m["after"][a]) for a in afters)]
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {d} | {m['p']:.3f} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
