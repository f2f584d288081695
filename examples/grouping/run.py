"""Within vs cross grouping, then a sealed evaluation on seen and unseen harnesses (docs/research.md §2).

The research trained one policy on frozen records of several harnesses with
two grouping rules — *within* (a baseline per (task, harness)) and *cross*
(harnesses pooled per task) — and found that the rule barely matters while
the evaluation harness moves the solve rate a lot. This script repeats that
design end to end with tackroom's Python API (docs/api.md), in this process:

1. the starting policy: the bundled policy (``--setting bundled``; MiniWoB++,
   SFT'd under ``som-tools``), or a tiny model SFT'd here (``tackroom.sft``) on
   toy expert episodes (``tackroom.evaluate``) under the two source harnesses
   (``--setting toy``);
2. ``tackroom.train`` twice per training seed, online rollouts under both
   source harnesses, ``grouping.group = "within"`` and ``"cross"``;
3. ``tackroom.seal`` a manifest: every checkpoint (the start, each trained
   one) × both source harnesses + one held-out harness × tasks × held-out
   seeds; ``tackroom.evaluate_sealed`` runs every cell;
4. the table (success with Wilson 95% intervals) and the two effects, each
   a paired bootstrap over (task, seed): grouping (within − cross, same
   harness) and evaluation harness (best − worst harness, same checkpoint).

Writes ``results.md`` and ``results.json`` in the work directory.

Usage: .venv/bin/python examples/grouping/run.py [--setting auto|toy|bundled]
       [--workdir grouping-run] [--train-seeds 0,1] [--eval-seeds 50] [--steps N]
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

import tackroom  # cheap: the API loads DuckDB and torch on first use
from tackroom.core.errors import TackroomError
from tackroom.core.extras import script_requires

script_requires("train", who="examples/grouping")

ROOT = Path(__file__).resolve().parents[2]
EVAL_SEED_BASE = 1_000_000  # tackroom.train.rollouts.EVAL_SEED_BASE: never a training seed

# Toy setting: three harnesses that differ in how the page is shown; one is held out.
TOY_HARNESSES = {
    "list-cmd": ("element_list", "Numbered element list; one text command per turn."),
    "outline-cmd": ("outline", "Indented outline with [refs]; one text command per turn."),
    "html-cmd": ("html", "Raw HTML with data-wob_ref; one text command per turn."),
}
TOY_HARNESS = """name = "{name}"
description = "{description}"
[prompt]
system = "You are a web agent. Act on an element by its reference number."
[observation]
renderer = "{renderer}"
max_chars = 4000
[actions]
interface = "element_refs"
parser = "commands"
[loop]
actions_per_turn = 1
history = 1
on_malformed = "feedback"
on_action_error = "feedback"
[budget]
turns = 2
wall_seconds = 60
state_to_model = false
"""

SETTINGS: dict[str, dict[str, Any]] = {
    "toy": {
        "suite": "toy", "tasks": ["focus-text", "click-dialog"],
        "source": ["list-cmd", "outline-cmd"], "unseen": "html-cmd",
        "max_tokens": 16, "steps": 12, "group_size": 8, "lora": False, "lr": 2e-3,
        "tasks_per_step": 6, "concurrency": 32, "train_seeds": "0,1,2", "eval_seeds": 50,
    },
    # MiniWoB++ in Chromium costs ~3.5 s of wall time per episode on 2 busy cores:
    # sized to ~20 minutes, so one training seed, few steps, few evaluation seeds.
    "bundled": {
        "suite": "miniwob", "tasks": ["click-link", "click-dialog"],
        "source": ["som-tools", "html-commands"], "unseen": "outline-coords",
        "max_tokens": 64, "steps": 3, "group_size": 4, "lora": True, "lr": 1e-3,
        "tasks_per_step": 2, "concurrency": 4, "train_seeds": "0", "eval_seeds": 8,
    },
}

# The two grouping rules, per task *instance* (task, seed) as in the research, where a
# task is one instance: `within` compares the G samples of one instance under one
# harness, `cross` the samples of one instance under every source harness. (The
# built-in keys "within" = (task, harness) and "cross" = task would pool the
# instances of a task drawn in the same step.)
GROUP_KEYS = {"within": "task + '|' + str(seed) + '|' + harness",
              "cross": "task + '|' + str(seed)"}


@contextmanager
def step(what: str) -> Iterator[None]:
    """Time one call of the API and print a line when it is done."""
    t0 = time.perf_counter()
    print(f"  {what} …", flush=True)
    yield
    print(f"  {what}: done [{time.perf_counter() - t0:.0f} s]", flush=True)


def print_run(run: tackroom.Run) -> None:
    """A recorded run in a few lines: its id, overall success, one line per cell."""
    print(f"    run {run.id} ({run.status}): success {100 * run.success_rate:.1f}%", flush=True)
    for c in run.summary():
        lo, hi = c.interval
        print(f"      {c.harness:<16} {c.policy:<48} {100 * c.rate:5.1f}% "
              f"[{100 * lo:.1f}, {100 * hi:.1f}] of {c.n}"
              + (f", {c.infra_errors} infra" if c.infra_errors else ""), flush=True)


def bundled_ready() -> bool:
    from tackroom.policies.bundled import BUNDLED_DIR

    return (BUNDLED_DIR / "config.json").is_file() and shutil.which("chromium") is not None


def train_toml(s: dict[str, Any], model: str) -> str:
    lora = "enabled = true\nrank = 32\nalpha = 64" if s["lora"] else "enabled = false"
    return f"""# Online GRPO-family training under both source harnesses (docs/research.md §2).
[algo]
algorithm = "dr_grpo"          # no length bias: stable on small models
max_completion_length = {s['max_tokens']}
beta = 0.1                     # KL to the starting policy
[grouping]
group = "within"               # overridden per run: GROUP_KEYS["within"] | GROUP_KEYS["cross"]
group_size = {s['group_size']}
[lora]
{lora}
[optim]
lr = {s['lr']}
steps = {s['steps']}
micro_batch_size = 8
[model]
path = "{model}"
device = "auto"
[data]
suite = "{s['suite']}"
tasks = {json.dumps(s['tasks'])}
harnesses = {json.dumps(s['source'])}
tasks_per_step = {s['tasks_per_step']}   # task instances (task, seed) drawn per step
[rollout]
max_tokens = {s['max_tokens']}
concurrency = {s['concurrency']}   # episodes at a time (MiniWoB++: one browser each)
[run]
checkpoint_every = 0
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setting", default="auto", choices=["auto", "toy", "bundled"])
    ap.add_argument("--workdir", default="grouping-run")
    ap.add_argument("--train-seeds", default=None, help="default: 0,1 (toy), 0 (bundled)")
    ap.add_argument("--eval-seeds", type=int, default=None,
                    help="evaluation seeds per cell; default: 50 (toy), 8 (bundled)")
    ap.add_argument("--steps", type=int, default=None,
                    help="training steps per run; default: 12 (toy), 3 (bundled)")
    ap.add_argument("--threads", default="1")
    a = ap.parse_args()
    try:
        run_experiment(a)
    except TackroomError as e:
        sys.exit(f"failed: {e.line()}")


def run_experiment(a: argparse.Namespace) -> None:
    from tackroom.core.policy import Sampling
    from tackroom.train.engine import OptimSettings
    from tackroom.train.sft import Selection, SFTConfig

    setting = a.setting if a.setting != "auto" else ("bundled" if bundled_ready() else "toy")
    s = dict(SETTINGS[setting])
    if a.steps is not None:
        s["steps"] = a.steps
    work = Path(a.workdir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    (work / "harnesses").mkdir(parents=True)
    # Harness names resolve on $TACKROOM_HARNESS_PATH, read at each load (the trainer's
    # and the sealed evaluation's too): the toy harnesses are found by name.
    os.environ["TACKROOM_HARNESS_PATH"] = str(work / "harnesses")
    db = str(work / "runs.duckdb")
    threads = int(a.threads)
    seeds = [int(x) for x in (a.train_seeds or s["train_seeds"]).split(",")]
    n_eval = a.eval_seeds or s["eval_seeds"]
    t_start = time.perf_counter()
    print(f"setting: {setting}  (work directory {work})", flush=True)

    # 1. The starting policy.
    if setting == "toy":
        for name, (renderer, description) in TOY_HARNESSES.items():
            (work / "harnesses" / f"{name}.toml").write_text(
                TOY_HARNESS.format(name=name, renderer=renderer, description=description))
        from tackroom.models import init_model
        from tackroom.models.corpus import harness_corpus

        with step("tiny model"):
            init_model(work / "tiny", size="tiny", corpus=harness_corpus(seeds=(0,)), seed=0)
        with step("expert episodes (tackroom.evaluate)"):
            run = tackroom.evaluate(suite="toy", tasks=s["tasks"], harnesses=s["source"],
                                    policies=["expert"], seeds=range(8), store=db)
        print_run(run)
        with step("SFT of the tiny model (tackroom.sft)"):
            sft = tackroom.sft(SFTConfig(
                model=str(work / "tiny"), out=str(work / "sft"),
                selection=Selection(harnesses=tuple(s["source"])),
                optim=OptimSettings(lr=1e-2, warmup_steps=2), epochs=30, batch_size=8,
                checkpoint_every=1000, threads=threads), store=db)
        print(f"    run {sft.run_id}: {sft.examples} examples, {sft.steps} steps, final loss "
              f"{sft.last.get('loss', float('nan')):.4f}", flush=True)
        start_dir = str(sft.final)
        start_spec = f"hf:{start_dir}"
    else:
        from tackroom.policies.bundled import bundled_dir

        start_dir, start_spec = str(bundled_dir()), "hf:bundled"

    # 2. Training: within and cross, per training seed.
    (work / "train.toml").write_text(train_toml(s, start_dir))
    checkpoints: dict[str, str] = {"start": start_spec}
    for seed in seeds:
        for group in ("within", "cross"):
            out = work / f"{group}-{seed}"
            with step(f"train {group}-{seed} (tackroom.train, {s['steps']} steps)"):
                rl = tackroom.train(work / "train.toml",
                                    [f"grouping.group={GROUP_KEYS[group]}", f"run.seed={seed}",
                                     f"run.out_dir={out}"],
                                    store=db, threads=threads, on_step=train_progress)
            print(f"    run {rl.run_id}: {rl.steps} steps, model {rl.final}", flush=True)
            checkpoints[f"{group}-{seed}"] = (f"hf:{rl.base_model}:{rl.final}" if s["lora"]
                                              else f"hf:{rl.final}")

    # 3. Sealed evaluation: every checkpoint × source + held-out harness × tasks × seeds.
    seed_range = f"{EVAL_SEED_BASE}-{EVAL_SEED_BASE + n_eval - 1}"
    manifest = tackroom.seal(work / "manifest.json", suite=s["suite"], tasks=s["tasks"],
                             harnesses=s["source"], held_out=[s["unseen"]],
                             train_harnesses=s["source"], policies=list(checkpoints.values()),
                             seeds=seed_range, sampling=Sampling(max_tokens=s["max_tokens"]))
    print(f"  sealed {work / 'manifest.json'}: sha256:{manifest.hash}, {manifest.n_cells} cells",
          flush=True)
    with step("sealed evaluation (tackroom.evaluate_sealed)"):
        sealed = tackroom.evaluate_sealed(work / "manifest.json", store=db,
                                          concurrency=min(16, s["concurrency"]))
    print_run(sealed)

    # 4. The table and the effects.
    results = analyse(sealed, checkpoints, s, seeds)
    results.update({"setting": setting, "minutes": (time.perf_counter() - t_start) / 60,
                    "eval_seeds": n_eval, "train_seeds": seeds})
    (work / "results.json").write_text(json.dumps(results, indent=1))
    (work / "results.md").write_text(render(results, s))
    print(render(results, s))


def train_progress(step_: int, total: int, m: dict[str, float]) -> None:
    print(f"    step {step_}/{total}: reward {m.get('reward_mean', float('nan')):.2f}, "
          f"success {100 * m.get('success', 0.0):.0f}%, loss {m.get('loss', float('nan')):.3f}",
          flush=True)


def analyse(run: tackroom.Run, checkpoints: dict[str, str], s: dict[str, Any],
            seeds: list[int]) -> dict[str, Any]:
    from tackroom.analysis.stats import paired_bootstrap, paired_cells, wilson

    rows = run.episodes()
    ids = dict(run.config.policy_ids)
    pid = {name: ids.get(spec, spec) for name, spec in checkpoints.items()}
    harnesses = [*s["source"], s["unseen"]]
    table: dict[str, dict[str, Any]] = {}
    for name in checkpoints:
        table[name] = {}
        for h in harnesses:
            mine = [r for r in rows if r["policy"] == pid[name] and r["harness"] == h
                    and r["outcome"] != "infra_error"]
            k = sum(r["outcome"] == "success" for r in mine)
            lo, hi = wilson(k, len(mine))
            table[name][h] = {"rate": k / len(mine) if mine else float("nan"), "lo": lo,
                              "hi": hi, "n": len(mine)}

    def paired(pairs: list[tuple[tuple[str, str], tuple[str, str]]]) -> dict[str, float]:
        xa, xb = [], []
        for a, b in pairs:
            pa, pb = paired_cells(rows, a, b)
            xa.extend(pa)
            xb.extend(pb)
        r = paired_bootstrap(xa, xb)
        return {"diff": r.diff, "lo": r.lo, "hi": r.hi, "p": r.p_value, "n": r.n}

    grouping = {h: paired([((pid[f"within-{k}"], h), (pid[f"cross-{k}"], h)) for k in seeds])
                for h in harnesses}
    grouping["all"] = paired([((pid[f"within-{k}"], h), (pid[f"cross-{k}"], h))
                              for k in seeds for h in harnesses])
    gains = {g: paired([((pid[f"{g}-{k}"], h), (pid["start"], h)) for k in seeds
                        for h in harnesses]) for g in ("within", "cross")}
    # Evaluation-harness effect: per trained checkpoint, its best harness vs its worst.
    spread = []
    for name in checkpoints:
        if name == "start":
            continue
        best = max(harnesses, key=lambda h: table[name][h]["rate"])
        worst = min(harnesses, key=lambda h: table[name][h]["rate"])
        spread.append(((pid[name], best), (pid[name], worst)))
    harness_effect = paired(spread)
    return {"table": table, "harnesses": harnesses, "grouping": grouping, "gains": gains,
            "harness_effect": harness_effect, "run_id": run.id,
            "manifest_hash": run.manifest_hash}


def render(r: dict[str, Any], s: dict[str, Any]) -> str:
    hs = r["harnesses"]

    def cell(c: dict[str, float]) -> str:
        return f"{100 * c['rate']:.1f}% [{100 * c['lo']:.1f}, {100 * c['hi']:.1f}]"

    def eff(e: dict[str, float]) -> str:
        return (f"{100 * e['diff']:+.1f} pp [{100 * e['lo']:+.1f}, {100 * e['hi']:+.1f}] "
                f"(p = {e['p']:.3f}, {e['n']} pairs)")

    lines = [f"Sealed run {r['run_id']}, manifest sha256:{r['manifest_hash']}", "",
             "| checkpoint | " + " | ".join(h + (" (held out)" if h == s["unseen"] else "")
                                           for h in hs) + " |",
             "|---|" + "---|" * len(hs)]
    for name, row in r["table"].items():
        lines.append(f"| {name} | " + " | ".join(cell(row[h]) for h in hs) + " |")
    lines += ["", "Paired bootstrap over (task, seed), 95% intervals:", "",
              f"- grouping effect (within − cross), all harnesses: {eff(r['grouping']['all'])}"]
    lines += [f"  - on {h}: {eff(r['grouping'][h])}" for h in hs]
    lines += [f"- gain over the start, within: {eff(r['gains']['within'])}",
              f"- gain over the start, cross: {eff(r['gains']['cross'])}",
              f"- evaluation-harness effect (best − worst harness, same checkpoint): "
              f"{eff(r['harness_effect'])}"]
    g, h = abs(r["grouping"]["all"]["diff"]), abs(r["harness_effect"]["diff"])
    lines += ["", f"|grouping effect| = {100 * g:.1f} pp "
              f"{'<' if g < h else '>='} evaluation-harness effect = {100 * h:.1f} pp"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
