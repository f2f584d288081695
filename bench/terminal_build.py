"""Task environments built from Dockerfiles: build time per task, cold and cached, the
start of an episode on a built environment against a bare ``bwrap`` start, and agent layers.

* **Build, cold**: every task of ``--tasks`` (default: the fixture tasks of
  ``tests/fixtures/real-tasks``, both layouts) built into an empty cache of its
  own — the Debian base root file systems (``mmdebstrap``), the Dockerfile's
  steps, the tests' installs. The first task on each base pays for the base.
* **Build, cached**: the same call again on the filled cache (a content hash of
  the build context, then the layers found).
* **Episode start**: interleaved, so that machine load hits all alike —
  (a) a bare ``bwrap --ro-bind / / bash -c true``; (b) a plain sandbox on the host
  system, ``Sandbox(...).run("true")``; (c) an episode on a built environment:
  the overlay over the image's layers, its user namespace, ``run("true")``,
  teardown. Target: (c) within 2× of (a).
* **Agent layers**: for each CLI of ``--agents``, its agent layer
  (``tackroom/images/agent_layer.py``: a Debian runtime and the CLI installed over it)
  built cold in the same cache (the first CLI on a runtime pays for the runtime), then
  looked up again (cached).

Needs root, bubblewrap and mmdebstrap. Usage::

    .venv/bin/python bench/terminal_build.py [--n 30] [--tasks jq-count-items,tb-csv-total]
        [--cold-cache DIR]   # reuse DIR as the cold cache (default: a fresh temporary one)
        [--agents mini-swe-agent,qwen-code]   # '' for none
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "real-tasks"


def _tasks(names: list[str] | None) -> list[Path]:
    found = sorted(p for layout in ("harbor", "terminal-bench")
                   for p in (FIXTURES / layout).iterdir())
    return [p for p in found if not names or p.name in names]


def _staged(src: Path, into: Path) -> Path:
    """A Harbor directory for ``src`` (Terminal-Bench tasks are converted as on import)."""
    from tackroom.suites.terminal.importer import _convert_terminal_bench

    out = into / src.name
    if (src / "instruction.md").is_file():
        shutil.copytree(src, out)
    else:
        _convert_terminal_bench(src, out)
    return out


def _build(td_path: Path) -> tuple[float, bool]:
    from tackroom.suites.terminal import environment
    from tackroom.suites.terminal.taskdir import load_task

    environment._prepared.clear()  # measure the cache on disk, not this process's memo
    t0 = time.perf_counter()
    ready = environment.prepare(load_task(td_path))
    return time.perf_counter() - t0, ready.built


def _agent_layers(names: list[str]) -> None:
    """Each CLI's agent layer built cold, then found in the cache."""
    from tackroom.harness.spec import load_harness
    from tackroom.images.agent_layer import ensure_agent_layer

    print(f"\n{'agent layer':<18} {'cold s':>8} {'cached s':>9} {'ratio':>7}")
    for name in names:
        agent = load_harness(name).agent
        t0 = time.perf_counter()
        layer = ensure_agent_layer(agent)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        again = ensure_agent_layer(agent)
        warm = time.perf_counter() - t0
        assert not again.built, "the second lookup must be a cache hit"
        print(f"{name:<18} {cold:>8.2f} {warm:>9.4f} {cold / warm:>6.0f}×"
              + ("" if layer.built else "  (already in the cache)"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=30, help="episode starts of each kind")
    ap.add_argument("--tasks", default="", help="comma-separated fixture task names")
    ap.add_argument("--cold-cache", default="", help="directory for the cold cache")
    ap.add_argument("--agents", default="mini-swe-agent,qwen-code",
                    help="comma-separated agent harnesses whose layers to build ('' for none)")
    args = ap.parse_args()
    if os.geteuid() != 0 or shutil.which("mmdebstrap") is None or shutil.which("bwrap") is None:
        raise SystemExit("needs root, bubblewrap and mmdebstrap; nothing to measure")
    cache = Path(args.cold_cache) if args.cold_cache else Path(
        tempfile.mkdtemp(prefix="tackroom-cold-cache-"))
    os.environ["TACKROOM_CACHE"] = str(cache)  # before tackroom reads it
    from tackroom.images.overlay import EpisodeRoot
    from tackroom.sandbox import BubblewrapSandbox, Limits
    from tackroom.suites.terminal import environment
    from tackroom.suites.terminal.taskdir import load_task

    names = [t for t in args.tasks.split(",") if t] or None
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; cache {cache}")
    print(f"{'task':<18} {'cold s':>8} {'cached s':>9} {'ratio':>7}")
    staged_root = Path(tempfile.mkdtemp(prefix="tackroom-bench-tasks-"))
    staged = [_staged(src, staged_root) for src in _tasks(names)]
    for td_path in staged:
        cold, built = _build(td_path)
        warm, rebuilt = _build(td_path)
        assert not rebuilt, "the second build must be a cache hit"
        print(f"{td_path.name:<18} {cold:>8.2f} {warm:>9.3f} {cold / warm:>6.0f}×"
              + ("" if built else "  (already in the cache)"))

    td = load_task(staged[0])
    layers = environment.prepare(td).image.layers
    # The same command as the sandboxes run: ``bash -c true``.
    bare_argv = ["bwrap", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
                 "--unshare-net", "--unshare-pid", "--die-with-parent", "bash", "-c", "true"]
    with tempfile.TemporaryDirectory(prefix="tackroom-bench-") as tmp:
        a, b, c = [], [], []
        for _ in range(args.n):
            t0 = time.perf_counter()
            subprocess.run(bare_argv, check=True)
            a.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            with BubblewrapSandbox(Path(tmp), Limits()) as box:
                box.run("true")
            b.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            with EpisodeRoot(layers, td.disk_mb) as root, \
                    BubblewrapSandbox(root.path, Limits(), root=root.path, cwd="/") as box:
                res = box.run("true")
            c.append(time.perf_counter() - t0)
            assert res.exit_code == 0, res.stderr
    ma, mb, mc = (statistics.median(x) * 1000 for x in (a, b, c))
    print(f"\nepisode start, medians of {args.n} (ms):")
    print(f"  bare bwrap                       {ma:7.1f}")
    print(f"  sandbox on the host system       {mb:7.1f}   {mb / ma:4.2f}× bare")
    print(f"  episode on a built environment   {mc:7.1f}   {mc / ma:4.2f}× bare "
          f"(target ≤ 2×: {'met' if mc <= 2 * ma else 'NOT met'})")
    agents = [a for a in args.agents.split(",") if a]
    if agents:
        _agent_layers(agents)
    if not args.cold_cache:
        shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(staged_root, ignore_errors=True)


if __name__ == "__main__":
    main()
