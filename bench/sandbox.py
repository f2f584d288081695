"""Per-command overhead of the bubblewrap sandbox, side by side with a bare subprocess.

Runs the same commands (a) as a bare ``subprocess.run(["bash", "-c", cmd])`` in
the task directory and (b) through :meth:`tackroom.sandbox.Sandbox.run` — bwrap,
namespaces, mounts, uid drop, rlimits, output capture — interleaved so that
machine load hits both alike. Overhead per command = median(b) − median(a).
Target: < 50 ms. Also the start-up of one persistent keystroke session.

Usage: .venv/bin/python bench/sandbox.py [--n 40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from tackroom.sandbox import SANDBOX_PATH, BubblewrapSandbox, Limits, Sandbox, sandbox_available

COMMANDS = ["true", "echo hello", "ls -la > listing.txt && wc -l listing.txt",
            "python3 -c 'print(1)'"]


def bare(cmd: str, cwd: Path) -> float:
    t0 = time.perf_counter()
    # The sandbox's PATH, so that both run the same binaries (not e.g. a pyenv shim).
    subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, check=False,
                   env={"PATH": SANDBOX_PATH, "HOME": str(cwd), "LANG": "C.UTF-8"})
    return time.perf_counter() - t0


def sandboxed(box: Sandbox, cmd: str) -> float:
    t0 = time.perf_counter()
    box.run(cmd)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=40, help="runs of each command in each mode")
    args = ap.parse_args()
    if not sandbox_available():
        raise SystemExit("bubblewrap cannot run here; nothing to measure")
    with tempfile.TemporaryDirectory(prefix="tackroom-bench-") as tmp:
        work = Path(tmp)
        (work / "data.txt").write_text("x\n" * 100)
        load = os.getloadavg()[0]
        print(f"load average {load:.1f} on {os.cpu_count()} CPUs; medians of {args.n} runs "
              "(best-of in brackets: the cost on an idle machine)")
        print(f"{'command':<44} {'bare ms':>8} {'sandbox ms':>11} {'diff ms':>8} "
              f"{'ratio':>6} {'[best diff]':>11}")
        diffs, bests = [], []
        with BubblewrapSandbox(work, Limits()) as box:
            for cmd in COMMANDS:
                a, b = [], []
                for _ in range(args.n):  # interleaved: the same load on both
                    a.append(bare(cmd, work))
                    b.append(sandboxed(box, cmd))
                ma, mb = statistics.median(a) * 1e3, statistics.median(b) * 1e3
                diffs.append(mb - ma)
                best = (min(b) - min(a)) * 1e3
                bests.append(best)
                print(f"{cmd:<44} {ma:8.1f} {mb:11.1f} {mb - ma:8.1f} {mb / ma:6.2f} "
                      f"{best:11.1f}")
            from tackroom.suites.terminal.shell_session import _QUIET_S, ShellSession

            QUIET_MS = _QUIET_S * 1e3

            t0 = time.perf_counter()
            session = ShellSession(box)
            started = (time.perf_counter() - t0) * 1e3
            t0 = time.perf_counter()
            session.send(b"echo hi\n", 5.0)
            typed = (time.perf_counter() - t0) * 1e3
            session.close()
        overhead = statistics.median(diffs)
        verdict = "meets" if overhead < 50 else "MISSES"
        print(f"\nsandbox overhead per command: {overhead:.1f} ms (median over the commands; "
              f"{min(diffs):.1f} to {max(diffs):.1f} ms) — {verdict} the < 50 ms target; "
              f"idle-machine estimate {statistics.median(bests):.1f} ms")
        print(f"keystroke session: start {started:.0f} ms; one command typed and read back "
              f"{typed:.0f} ms (includes the {QUIET_MS:.0f} ms quiet window that detects the prompt)")


if __name__ == "__main__":
    main()
