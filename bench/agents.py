"""Start-up time of each shipped agent CLI in the sandbox (a benchmark, not a test).

For every shipped agent harness, the same episodes with its scripted expert
(``--policy expert``), run side by side in one process, round by round, so
machine load hits every CLI alike. Per CLI: the median time from the sandbox's
start to the CLI's first model call (``meta.agent.startup_s``: interpreter or
node start, imports, config), the median time the CLI ran, and the median
episode (reset, CLI, verifier). Installs are not timed (the cache is filled
first).

Usage: .venv/bin/python bench/agents.py [--rounds 3] [--suite code] [--task add-business-days]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import tackroom
from tackroom.agents.install import ensure_installed
from tackroom.harness.spec import AGENTS_DIR, load_harness


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--suite", default="code")
    ap.add_argument("--task", default="add-business-days")
    args = ap.parse_args()
    names = sorted(p.stem for p in AGENTS_DIR.glob("*.toml"))
    with ThreadPoolExecutor(len(names)) as pool:  # fill the cache first: not timed
        list(pool.map(lambda n: ensure_installed(load_harness(n).agent), names))
    startup: dict[str, list[float]] = {n: [] for n in names}
    ran: dict[str, list[float]] = {n: [] for n in names}
    episode: dict[str, list[float]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name in names:  # one CLI at a time: start-up is what is measured
                run = tackroom.evaluate(args.suite, tasks=[args.task], harnesses=[name],
                                        policies=["expert"], seeds=[r], concurrency=1,
                                        store=Path(tmp) / "bench.duckdb")
                for ep in run.load_episodes():
                    agent = ep.meta.get("agent", {})
                    if agent.get("startup_s") is not None:
                        startup[name].append(agent["startup_s"])
                    ran[name].append(agent.get("seconds", float("nan")))
                    episode[name].append(ep.ended_at - ep.started_at)
    print(f"== agent CLIs in the sandbox: {args.suite}/{args.task}, expert, "
          f"{args.rounds} rounds (medians) ==")
    print(f"{'harness':16} {'start-up s':>11} {'CLI ran s':>10} {'episode s':>10}")
    fastest = min(statistics.median(v) for v in startup.values() if v)
    for name in names:
        s = statistics.median(startup[name]) if startup[name] else float("nan")
        print(f"{name:16} {s:11.2f} {statistics.median(ran[name]):10.2f} "
              f"{statistics.median(episode[name]):10.2f}   x{s / fastest:.1f} the fastest start")


if __name__ == "__main__":
    main()
