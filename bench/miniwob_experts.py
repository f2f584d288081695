"""MiniWoB++ expert check: per-task success of every scripted expert over seeds.

    python bench/miniwob_experts.py                 # seeds 0-9, one action per call
    python bench/miniwob_experts.py --coords        # clicks at element centres
    python bench/miniwob_experts.py --all-actions   # run whole plans per call
    python bench/miniwob_experts.py --load-all      # every catalog task loads
    python bench/miniwob_experts.py --rate 200      # episodes/s: adapter vs bare miniwob

Runs in one browser that moves from task to task. Exits non-zero when an
expert is below ``--min`` (default 0.9) or a task fails to load.
"""

from __future__ import annotations

import argparse
import sys
import time

from tackroom.suites.miniwob import EXPERTS, TASKS
from tackroom.suites.miniwob.env import MiniWoBEnv
from tackroom.suites.miniwob.experts import run_expert


def check_experts(args: argparse.Namespace) -> bool:
    tasks = args.tasks or sorted(EXPERTS)
    env = MiniWoBEnv(tasks[0])
    ok = True
    total = 0.0
    try:
        for task_id in tasks:
            env.retarget(task_id)
            t0 = time.perf_counter()
            results = [run_expert(env, EXPERTS[task_id], seed, first_only=not args.all_actions,
                                  coords=args.coords) for seed in range(args.seeds)]
            rate = sum(r["success"] for r in results) / len(results)
            steps = sum(r["steps"] for r in results) / len(results)
            total += rate
            flag = "" if rate >= args.min else "  <-- below --min"
            ok &= rate >= args.min
            print(f"{task_id:28s} success {rate:4.2f}  steps {steps:4.1f}  "
                  f"{time.perf_counter() - t0:5.1f}s{flag}", flush=True)
            for seed, r in enumerate(results):
                if not r["success"] and args.verbose:
                    print(f"    seed {seed}: {r['error'] or r['reward']}")
        print(f"{len(tasks)} experts, mean success {total / len(tasks):.3f}, "
              f"Chrome starts {env.starts}")
    finally:
        env.close()
    return ok


def check_loading() -> bool:
    env = MiniWoBEnv("click-test")
    ok = True
    try:
        for task_id in TASKS:
            env.retarget(task_id)
            try:
                obs = env.reset(0)
                print(f"{task_id:28s} ok   {len(obs.elements):3d} elements  {obs.instruction[:60]}")
            except Exception as exc:  # report every task, then fail
                ok = False
                print(f"{task_id:28s} FAIL {exc}")
    finally:
        env.close()
    return ok


def measure_rate(n: int) -> None:
    """Episodes/s on click-test-2 (reset + one click) through MiniWoBEnv and bare miniwob."""
    import gymnasium
    import miniwob

    from tackroom.core import Click

    gymnasium.register_envs(miniwob)
    bare = gymnasium.make("miniwob/click-test-2-v1")
    ours = MiniWoBEnv("click-test-2")

    def run_bare(seeds: range) -> float:
        t0 = time.perf_counter()
        for seed in seeds:
            obs, _ = bare.reset(seed=seed, options={"record_screenshots": False})
            name = obs["utterance"].split()[-1].rstrip(".")
            ref = next(e["ref"] for e in obs["dom_elements"] if e["text"] == name)
            _, reward, *_ = bare.step(bare.unwrapped.create_action("CLICK_ELEMENT", ref=ref))
            assert reward > 0
        return len(seeds) / (time.perf_counter() - t0)

    def run_ours(seeds: range, with_html: bool) -> float:
        ours.with_html = with_html
        t0 = time.perf_counter()
        for seed in seeds:
            obs = ours.reset(seed)
            name = obs.instruction.split()[-1].rstrip(".")
            assert ours.step(Click(obs.find(text=name)[0].ref)).success
        return len(seeds) / (time.perf_counter() - t0)

    try:
        run_bare(range(10))
        run_ours(range(10), True)
        rates: dict[str, list[float]] = {"bare": [], "ours (html)": [], "ours (no html)": []}
        chunk = max(10, n // 4)
        for k in range(4):  # interleaved, so drift hits all three alike
            seeds = range(1000 + k * chunk, 1000 + (k + 1) * chunk)
            rates["bare"].append(run_bare(seeds))
            rates["ours (html)"].append(run_ours(seeds, True))
            rates["ours (no html)"].append(run_ours(seeds, False))
        base = sum(rates["bare"]) / 4
        for name, values in rates.items():
            mean = sum(values) / len(values)
            print(f"{name:16s} {mean:6.2f} episodes/s  ({mean / base:4.2f}x bare)")
    finally:
        bare.close()
        ours.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--min", type=float, default=0.9)
    ap.add_argument("--coords", action="store_true", help="click at element centres")
    ap.add_argument("--all-actions", action="store_true", help="run whole plans per call")
    ap.add_argument("--load-all", action="store_true", help="check that every task loads")
    ap.add_argument("--rate", type=int, default=0, metavar="N", help="measure episodes/s")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("tasks", nargs="*")
    args = ap.parse_args()
    if args.rate:
        measure_rate(args.rate)
        return 0
    if args.load_all:
        return 0 if check_loading() else 1
    return 0 if check_experts(args) else 1


if __name__ == "__main__":
    sys.exit(main())
