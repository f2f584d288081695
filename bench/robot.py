"""The robot suite's costs, measured side by side in one run (a benchmark, not a test).

1. Simulation steps/s of the bare simulator (``RobotSim.step``) — the floor.
2. The same steps through the command API: ``sim.command({"op": "step", "n": k})``
   called directly, and POSTed to the local :class:`RobotServer` over HTTP (one
   keep-alive connection, as a controller script would), at ``n = 1`` (the cost of a
   command) and ``n = 50`` (a typical settle).
3. Screenshot round trip: a command, then a PNG of the state it left from headless
   Chromium (three.js on SwiftShader), against the bare command alone.

No timing is asserted; the ratios are printed.

Usage: .venv/bin/python bench/robot.py [--task robot/pick-place] [--steps 5000] [--shots 30]
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import time
import urllib.parse

from tackroom.suites.robot.server import RobotServer
from tackroom.suites.robot.sim import RobotSim


def rate(n: int, dt: float) -> str:
    return f"{n / dt:10.0f}/s"


def bare_steps(sim: RobotSim, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        sim.step(1)
    return time.perf_counter() - t0


def direct_commands(sim: RobotSim, n: int, k: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        sim.command({"op": "step", "n": k})
    return time.perf_counter() - t0


def http_commands(url: str, n: int, k: int) -> float:
    u = urllib.parse.urlparse(url)
    con = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    body = json.dumps({"op": "step", "n": k})
    headers = {"Content-Type": "application/json"}
    t0 = time.perf_counter()
    for _ in range(n):
        con.request("POST", "/api/command", body, headers)
        r = con.getresponse()
        r.read()
        assert r.status == 200, r.status
    dt = time.perf_counter() - t0
    con.close()
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="robot/pick-place")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=5000, help="physics steps per measurement")
    ap.add_argument("--shots", type=int, default=30, help="screenshot round trips")
    ap.add_argument("--skip-browser", action="store_true")
    args = ap.parse_args()

    sim = RobotSim()
    sim.reset(args.task, args.seed)
    n = args.steps
    print(f"\n== {args.task} seed {args.seed}: {n} physics steps of {sim.model.opt.timestep * 1e3:g} ms "
          "each way ==")
    t_bare = bare_steps(sim, n)
    print(f"bare simulator  sim.step(1)              {rate(n, t_bare)} steps "
          f"({t_bare / n * 1e6:7.1f} µs/step; {n * sim.model.opt.timestep / t_bare:6.0f}× real time)")
    rows = []
    with RobotServer(sim) as srv:
        for k in (1, 50):
            calls = max(1, n // k)
            t_dir = direct_commands(sim, calls, k)
            t_http = http_commands(srv.url, calls, k)
            rows.append((k, calls, t_dir, t_http))
            print(f"command API     step n={k:<3} direct      {rate(calls * k, t_dir)} steps "
                  f"({t_dir / calls * 1e6:7.1f} µs/command)   ratio to bare {t_bare / n * calls * k / t_dir:5.2f}")
            print(f"command API     step n={k:<3} over HTTP   {rate(calls * k, t_http)} steps "
                  f"({t_http / calls * 1e6:7.1f} µs/command)   ratio to bare {t_bare / n * calls * k / t_http:5.2f}"
                  f"   HTTP cost {1e6 * (t_http - t_dir) / calls:6.1f} µs/command")

    if args.skip_browser:
        return
    from tackroom.suites.robot.browser import Screenshotter

    print(f"\n== screenshot round trip: a command, then a {640}×{480} PNG of its state ==")
    shots = Screenshotter()
    try:
        t0 = time.perf_counter()
        shots.capture(sim)
        t_start = time.perf_counter() - t0
        cmd_t, shot_t, sizes = [], [], []
        for i in range(args.shots):
            x = -0.2 + 0.4 * (i % 10) / 9
            t0 = time.perf_counter()
            sim.command({"op": "move_ee", "pos": [x, 0.0, 0.2]})
            t1 = time.perf_counter()
            png = shots.capture(sim)
            t2 = time.perf_counter()
            cmd_t.append(t1 - t0)
            shot_t.append(t2 - t1)
            sizes.append(len(png))
    finally:
        shots.close()
    med_cmd, med_shot = statistics.median(cmd_t), statistics.median(shot_t)
    q = statistics.quantiles(shot_t, n=10) if len(shot_t) >= 10 else [max(shot_t)] * 9
    print(f"browser start + first frame              {t_start * 1e3:8.1f} ms (once per screenshotter)")
    print(f"move_ee command alone (bare sim)         {med_cmd * 1e3:8.2f} ms median")
    print(f"capture after it                         {med_shot * 1e3:8.2f} ms median, "
          f"p90 {q[8] * 1e3:.2f} ms; PNG {statistics.mean(sizes) / 1024:.0f} kB")
    print(f"command + screenshot vs command alone    {(med_cmd + med_shot) / med_cmd:8.1f}×")


if __name__ == "__main__":
    main()
