"""The same experiment in tackroom's own setting: multi-harness RL, shared vs harness critic.

Two toy-suite harnesses that render the page identically and differ only in
their turn budget — ``list-3turns`` (3 turns: a wrong first action can be
retried) and ``list-1turn`` (1 turn) — so the first prompt of an episode is
the same state under both, but worth more under the longer budget. A tiny
model is SFT'd on expert episodes, then ``tackroom.train`` runs PPO-style
(GRPO loss on per-turn GAE advantages) with ``critic.kind = "shared"`` and
``"harness"``; each step's value metrics come from the trainer, and each final
policy is evaluated on held-out seeds under both harnesses.

Usage: .venv/bin/python examples/critic/harness_rl.py [--steps 8] [--seed 0]
       [--workdir $TMPDIR/critic-harness-run]   (models and a DuckDB store: ~40 MB)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import tackroom
from tackroom.core.extras import script_requires
from tackroom.testing.harnesses import command_harness

script_requires("train", who="examples/critic/harness_rl.py")

SYSTEM = "You are a web agent. Act on an element by its reference number."
HARNESSES = {"list-3turns": 3, "list-1turn": 1}
TASKS = ["focus-text", "click-dialog"]

TRAIN = """[algo]
algorithm = "grpo"
max_completion_length = 16
[grouping]
group_size = 4
[critic]
kind = "shared"                # overridden per run: shared | harness
gamma = 1.0
lam = 0.95
[lora]
enabled = false
[optim]
lr = 2e-3
steps = {steps}
micro_batch_size = 8
[model]
path = "{model}"
device = "cpu"
[data]
suite = "toy"
tasks = {tasks}
harnesses = {harnesses}
tasks_per_step = 4
[rollout]
max_tokens = 16
concurrency = 16
[run]
checkpoint_every = 0
"""


def main() -> None:
    from tackroom.models import init_model
    from tackroom.models.corpus import harness_corpus
    from tackroom.train.engine import OptimSettings
    from tackroom.train.sft import Selection, SFTConfig

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-seeds", type=int, default=10)
    ap.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "critic-harness-run"))
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    work = Path(a.workdir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    (work / "harnesses").mkdir(parents=True)
    os.environ["TACKROOM_HARNESS_PATH"] = str(work / "harnesses")
    for name, turns in HARNESSES.items():
        (work / "harnesses" / f"{name}.toml").write_text(command_harness(
            name, description="Numbered element list; one text command per turn.",
            turns=turns, max_chars=4000, system=SYSTEM))
    db = str(work / "runs.duckdb")
    hs = list(HARNESSES)
    t0 = time.perf_counter()
    init_model(work / "tiny", size="tiny", corpus=harness_corpus(seeds=(0,)), seed=0)
    tackroom.evaluate(suite="toy", tasks=TASKS, harnesses=hs, policies=["expert"],
                      seeds=range(8), store=db)
    sft = tackroom.sft(SFTConfig(model=str(work / "tiny"), out=str(work / "sft"),
                                 selection=Selection(harnesses=tuple(hs)),
                                 optim=OptimSettings(lr=1e-2, warmup_steps=2), epochs=30,
                                 batch_size=8, checkpoint_every=1000, threads=a.threads),
                       store=db)
    print(f"SFT: {sft.examples} examples, loss {sft.last.get('loss', float('nan')):.4f} "
          f"[{time.perf_counter() - t0:.0f} s]", flush=True)
    (work / "train.toml").write_text(TRAIN.format(steps=a.steps, model=str(sft.final),
                                                  tasks=json.dumps(TASKS),
                                                  harnesses=json.dumps(hs)))
    results = {}
    for kind in ("shared", "harness"):
        log = []

        def on_step(i: int, total: int, m: dict, log=log, kind=kind) -> None:
            keep = {k: m.get(k) for k in ("reward_mean", "success", "value_loss",
                                          "explained_variance", "value_mean", "return_mean")}
            log.append({"step": i, **keep})
            print(f"  {kind} step {i}/{total}: " + ", ".join(
                f"{k} {v:.3f}" for k, v in keep.items() if isinstance(v, float)), flush=True)

        t1 = time.perf_counter()
        rl = tackroom.train(work / "train.toml", [f"critic.kind={kind}", f"run.seed={a.seed}",
                                                  f"run.out_dir={work / kind}"],
                            store=db, threads=a.threads, on_step=on_step)
        ev = tackroom.evaluate(suite="toy", tasks=TASKS, harnesses=hs,
                               policies=[f"hf:{rl.final}"],
                               seeds=range(1_000_000, 1_000_000 + a.eval_seeds), store=db)
        per_h = {c.harness: {"rate": c.rate, "n": c.n, "interval": list(c.interval)}
                 for c in ev.summary()}
        results[kind] = {"train_log": log, "eval": per_h,
                         "wall_s": round(time.perf_counter() - t1, 1)}
        print(f"  {kind}: eval " + ", ".join(f"{h} {100 * v['rate']:.1f}% of {v['n']}"
                                             for h, v in per_h.items())
              + f" [{results[kind]['wall_s']} s]", flush=True)
    results["total_wall_s"] = round(time.perf_counter() - t0, 1)
    (work / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps({k: (v["eval"] if isinstance(v, dict) else v) for k, v in results.items()}))


if __name__ == "__main__":
    main()
