"""Framework overhead, measured side by side in one run (a benchmark, not a test).

1. Toy suite, zero-latency policy: per-turn time of the same expert acting
   (a) directly on the environment and (b) through tackroom — harness render,
   encode, parse, episode loop and records. Overhead per turn = (b − a) / turns.
   Target: < 1 ms.
2. MiniWoB++: episodes/s of the expert through tackroom vs a bare ``miniwob`` +
   gymnasium loop doing the same actions on the same seeds. Target ratio ≥ 0.9.

Usage: .venv/bin/python bench/overhead.py [--toy-seeds 200] [--miniwob-seeds 20] [--skip-miniwob]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from tackroom.core.policy import Sampling
from tackroom.harness.spec import load_harness
from tackroom.policies import make_policy
from tackroom.records import RecordStore
from tackroom.runner.grid import plan_grid, run_cells
from tackroom.suites import get_suite


def bare_toy(suite, tasks, seeds) -> tuple[float, int]:
    turns = 0
    t0 = time.perf_counter()
    for task in tasks:
        expert = suite.expert(task)
        for seed in seeds:
            env = suite.pool(1)._factory(task)  # the same environment class the runner uses
            obs = env.reset(seed)
            state: dict = {}
            for _ in range(50):
                actions = expert(obs, state)
                step = env.step(actions[0])
                turns += 1
                obs = step.observation
                if step.terminated or step.truncated:
                    break
    return time.perf_counter() - t0, turns


def tackroom_toy(suite, tasks, seeds, harness: str, store_path: Path | None) -> tuple[float, int]:
    plan = plan_grid(tasks, [load_harness(harness)], [make_policy("expert")], seeds, Sampling())
    store = RecordStore(store_path) if store_path else None
    if store:
        store.start_run("bench", "bench", {}, len(plan.cells))
    t0 = time.perf_counter()
    eps = asyncio.run(run_cells(plan.cells, suite, "bench", store=store, concurrency=1))
    dt = time.perf_counter() - t0
    if store:
        store.close()
    assert all(e.success for e in eps), "expert failed: the comparison would be unfair"
    return dt, sum(e.n_turns for e in eps)


def toy_section(seeds: int, repeats: int) -> None:
    suite = get_suite("toy")
    tasks = suite.tasks()
    seed_list = list(range(seeds))
    print(f"\n== toy suite: {len(tasks)} tasks × {seeds} seeds, expert policy, 1 at a time ==")
    bare, ours, ours_db = [], {}, []
    for _ in range(repeats):
        dt, n = bare_toy(suite, tasks, seed_list)
        bare.append(dt / n)
        for h in ("som-tools", "html-commands", "outline-coords"):
            dt, n2 = tackroom_toy(suite, tasks, seed_list, h, None)
            ours.setdefault(h, []).append(dt / n2)
        with tempfile.TemporaryDirectory() as d:
            dt, n3 = tackroom_toy(suite, tasks, seed_list, "som-tools", Path(d) / "b.duckdb")
            ours_db.append(dt / n3)
    b = statistics.median(bare)
    print(f"bare env + expert:            {b * 1e3:7.3f} ms/turn")
    for h, v in ours.items():
        m = statistics.median(v)
        print(f"tackroom {h:<20} {m * 1e3:7.3f} ms/turn   overhead {1e3 * (m - b):6.3f} ms/turn")
    m = statistics.median(ours_db)
    print(f"tackroom som-tools + DuckDB    {m * 1e3:7.3f} ms/turn   overhead {1e3 * (m - b):6.3f} "
          "ms/turn  (target < 1 ms)")


def miniwob_section(seeds: int, task_ids: list[str]) -> None:
    import gymnasium
    import miniwob

    gymnasium.register_envs(miniwob)
    suite = get_suite("miniwob")
    tasks = [t for t in suite.tasks() if t.id in task_ids]
    seed_list = list(range(seeds))
    print(f"\n== MiniWoB++: {len(tasks)} tasks × {seeds} seeds, expert, one browser ==")
    # tackroom first: it also gives the exact actions the bare loop replays.
    plan = plan_grid(tasks, [load_harness("som-tools")], [make_policy("expert")], seed_list,
                     Sampling())
    asyncio.run(run_cells(plan.cells[:2], suite, "warm", concurrency=1, pool_size=1))
    t0 = time.perf_counter()
    eps = asyncio.run(run_cells(plan.cells, suite, "bench", concurrency=1, pool_size=1))
    ours = time.perf_counter() - t0
    script = {(e.task.split("/", 1)[1], e.seed): [a for t in e.turns for a in t.actions]
              for e in eps}
    ok = sum(e.success for e in eps)

    t_bare = 0.0
    bare_ok = 0
    for task in tasks:
        env = gymnasium.make(f"miniwob/{task.id}-v1")
        env.reset(seed=0, options={"record_screenshots": False})
        t0 = time.perf_counter()
        for seed in seed_list:
            env.reset(seed=seed, options={"record_screenshots": False})
            reward = 0.0
            for a in script[(task.id, seed)]:
                if a["kind"] == "click":
                    act = env.unwrapped.create_action("CLICK_ELEMENT", ref=a["ref"])
                elif a["kind"] == "type":
                    act = env.unwrapped.create_action("FOCUS_ELEMENT_AND_TYPE_TEXT",
                                                      ref=a["ref"], text=a["text"])
                else:
                    keys = env.unwrapped.action_space_config.allowed_keys
                    act = env.unwrapped.create_action("PRESS_KEY", key=keys.index(a["key"]))
                _, reward, done, _, _ = env.step(act)
                if done:
                    break
            bare_ok += reward > 0
        t_bare += time.perf_counter() - t0
        env.close()
    n = len(eps)
    print(f"bare miniwob + gymnasium: {n / t_bare:6.2f} episodes/s  ({bare_ok}/{n} success)")
    print(f"tackroom (som-tools):     {n / ours:6.2f} episodes/s  ({ok}/{n} success)")
    print(f"ratio tackroom / bare:    {t_bare / ours:6.2f}   (target ≥ 0.9; the bare loop "
          "excludes browser start-up; tackroom's time includes starting its pool)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--toy-seeds", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--miniwob-seeds", type=int, default=10)
    ap.add_argument("--miniwob-tasks", default="click-test-2,click-button,enter-text,"
                    "click-checkboxes,login-user")
    ap.add_argument("--skip-miniwob", action="store_true")
    args = ap.parse_args()
    toy_section(args.toy_seeds, args.repeats)
    if not args.skip_miniwob:
        miniwob_section(args.miniwob_seeds, args.miniwob_tasks.split(","))


if __name__ == "__main__":
    main()
