"""Shared-prefix prefill in the ``hf`` backend vs plain left-padded batches (a benchmark).

Concurrent episodes of one harness send prompts that start with the same
system prompt and tool schemas (and the G samples of a training group send
the same prompt). ``HFPolicy`` runs such a shared prefix once per batch and
repeats its keys/values to every row. This runs the same episodes — the toy
suite under ``som-tools``, the bundled policy (or ``--model-dir``), greedy —
with the sharing off and on, alternating, in one process, and prints
episodes/s of each and the ratio (target > 1.0), plus that both recorded the
same actions.

Usage: .venv/bin/python bench/generate.py [--seeds 12] [--concurrency 4] [--rounds 2]
       [--group 1] [--model-dir DIR] [--max-tokens 48]
"""

from __future__ import annotations

import argparse
import asyncio
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=12, help="seeds per task")
    ap.add_argument("--concurrency", type=int, default=4, help="episodes at a time")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--group", type=int, default=1,
                    help="samples per (task, seed) at temperature 1 (a training group); "
                         "1: greedy evaluation")
    ap.add_argument("--model-dir", default=None, help="default: the bundled policy")
    ap.add_argument("--max-tokens", type=int, default=48)
    args = ap.parse_args()

    from tackroom.core import Sampling
    from tackroom.harness.spec import load_harness
    from tackroom.policies import hf_policy
    from tackroom.policies.bundled import bundled_dir
    from tackroom.runner.grid import EpisodeSpec, run_cells
    from tackroom.suites import get_suite

    policy = hf_policy.HFPolicy(args.model_dir or bundled_dir(), threads=1,
                                max_batch=args.concurrency)
    suite = get_suite("toy")
    tasks = [suite.task(t) for t in ("click-button", "click-dialog", "focus-text",
                                     "enter-text")]
    harness = load_harness("som-tools")
    cells = []
    for t in tasks:
        for seed in range(args.seeds):
            for k in range(args.group):
                s = (Sampling(max_tokens=args.max_tokens) if args.group == 1 else
                     Sampling(temperature=1.0, max_tokens=args.max_tokens, seed=k))
                cells.append(EpisodeSpec(t, harness, policy, seed, s))
    default = hf_policy.MIN_SHARED_PREFIX

    def run(shared: bool) -> tuple[float, list]:
        hf_policy.MIN_SHARED_PREFIX = default if shared else 10 ** 9
        t0 = time.perf_counter()
        eps = asyncio.run(run_cells(cells, suite, "bench", concurrency=args.concurrency))
        dt = time.perf_counter() - t0
        return dt, [(e.task, e.seed, e.outcome.value, [t.actions for t in e.turns])
                    for e in eps]

    run(True)  # warm-up: load the model, first-call overheads
    times = {"plain": [], "shared": []}
    actions = {}
    for r in range(args.rounds):
        for mode in (("plain", "shared") if r % 2 == 0 else ("shared", "plain")):
            dt, acts = run(mode == "shared")
            times[mode].append(dt)
            actions[mode] = sorted(acts, key=repr)
    hf_policy.MIN_SHARED_PREFIX = default
    n = len(cells)
    plain, shared = min(times["plain"]), min(times["shared"])
    print(f"{n} episodes (toy × som-tools, {args.concurrency} at a time, "
          f"{'greedy' if args.group == 1 else f'groups of {args.group}'}), best of "
          f"{args.rounds} rounds each, alternating:")
    print(f"  plain left-padded batches: {n / plain:6.2f} episodes/s ({plain:.1f} s)")
    print(f"  shared-prefix prefill:     {n / shared:6.2f} episodes/s ({shared:.1f} s)")
    print(f"  ratio shared / plain: {plain / shared:.2f}x  (target > 1.0)")
    same = actions["plain"] == actions["shared"]
    print(f"  same actions and outcomes in both: {same}")


if __name__ == "__main__":
    main()
