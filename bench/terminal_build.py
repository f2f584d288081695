"""Task environments built from Dockerfiles: build time per task, cold and cached, episode
starts under bubblewrap and Docker against their bare counterparts, agent layers, and many
agent episodes at once.

* **Build, cold**: every task of ``--tasks`` (default: the fixture tasks of
  ``tests/fixtures/real-tasks``, both layouts) built into an empty cache of its
  own — the Debian base root file systems (``mmdebstrap``), the Dockerfile's
  steps, the tests' installs. The first task on each base pays for the base.
* **Build, cached**: the same call again on the filled cache (a content hash of
  the build context, then the layers found).
* **Agent layers**: for each CLI of ``--agents``, its agent layer
  (``tackroom/images/agent_layer.py``: a Debian runtime and the CLI installed over it)
  built cold in the same cache (the first CLI on a runtime pays for the runtime), then
  looked up again (cached).
* **Episode start**, interleaved so that machine load hits all alike, on
  ``--episode-task`` (default ``jq-count-items``: ``debian:bookworm-slim``, no Python):

  - bubblewrap: (a) a bare ``bwrap --ro-bind / / bash -c true``; (b) a plain sandbox on
    the host system, ``Sandbox(...).run("true")``; (c) a plain episode on the built
    environment: the overlay over the image's layers, its user namespace, ``run("true")``,
    teardown; (d) a cached **agent** episode start: the same tree, the agent layer's two
    read-only mounts bound into it as ``TerminalEnv._run_agent`` does, the CLI's sandbox
    (``run_agent``: a fresh home, the CLI's limits) running ``true``, teardown.
  - Docker: (e) a bare ``docker run --rm --network none <the task's imported base> true``;
    (f) a plain episode: the episode's container as ``tackroom/sandbox/docker.py`` makes
    it (created and started through the daemon's socket), ``true`` run in it (``docker
    exec``), removed; (g) a cached **agent** episode
    start: the same container, ``Container.run_agent`` running ``true`` (the agent layer
    attached to the running container, the CLI's limits set and restored, the mounts
    detached), removed.

  Targets: (d) within 2× of (a), (g) within 2× of (e).
* **Concurrent agent episodes**: the same task imported into a store of its own, then
  ``--episodes`` episodes of ``--concurrent-harness`` with the expert policy, all at once
  (``concurrency`` = ``--episodes``), under each of ``--concurrent-sandboxes`` in turn
  (bubblewrap, then Docker): episodes, successes, ``infra_error`` s, wall time.
  Target: ≥ 20 at once on 2 cores without an ``infra_error``.

Needs root, bubblewrap and mmdebstrap; the Docker rows need a Docker daemon: one that
answers, or one started here as root the way the test run starts it
(``tests/docker_daemon.py``: ``dockerd --iptables=false --ip6tables=false
--bridge=none``) and stopped at the end. Without one they are skipped with the reason.
Usage::

    .venv/bin/python bench/terminal_build.py [--n 30] [--tasks jq-count-items,tb-csv-total]
        [--cold-cache DIR]   # reuse DIR as the cold cache (default: a fresh temporary one)
        [--agents mini-swe-agent,qwen-code]   # '' for none
        [--episodes 20] [--concurrent-harness mini-swe-agent]   # --episodes 0: none
        [--concurrent-sandboxes bubblewrap,docker]
        [--episode-task jq-count-items] [--profile]   # where an agent episode's start goes, stage by stage
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "real-tasks"
#: The same command as the sandboxes run: ``bash -c true``.
BARE_BWRAP = ["bwrap", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
              "--unshare-net", "--unshare-pid", "--die-with-parent", "bash", "-c", "true"]


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
              + ("" if layer.built else "  (already in the cache)"), flush=True)


# -- the Docker daemon --------------------------------------------------------------------

def _docker_daemon(shared: Path) -> tuple[str | None, Callable[[], None]]:
    """A daemon for the Docker rows, as the test run gets one (``tests/docker_daemon.py``):
    why there is none (or ``None``), and what to call when done."""
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        import docker_daemon
    finally:
        sys.path.remove(str(ROOT / "tests"))
    why = docker_daemon.acquire(shared)
    if why is not None:
        return why, lambda: None
    return None, lambda: docker_daemon.release(shared)


# -- episode starts -------------------------------------------------------------------------

def _timed(fn: Callable[[], object], into: list[float]) -> None:
    t0 = time.perf_counter()
    fn()
    into.append(time.perf_counter() - t0)


def _episode_starts(td, layers, action, n: int, docker_why: str | None) -> None:
    """Interleaved episode starts under bubblewrap and Docker, as medians and ratios."""
    from tackroom.images.build import resolve_inside
    from tackroom.images.overlay import EpisodeRoot, bind, unmount
    from tackroom.sandbox import BubblewrapSandbox, Limits, run_agent
    from tackroom.suites.terminal.env import _missing_tops

    limits = Limits(wall_s=td.command_timeout_s, memory_mb=td.memory_mb, disk_mb=td.disk_mb,
                    episode_wall_s=td.agent_timeout_s)  # TerminalEnv.limits

    def host_sandbox(tmp: Path) -> None:
        with BubblewrapSandbox(tmp, Limits()) as box:
            box.run("true")

    def built_plain() -> None:
        with EpisodeRoot(layers, td.disk_mb) as root, \
                BubblewrapSandbox(root.path, Limits(), root=root.path, cwd="/") as box:
            res = box.run("true")
        assert res.exit_code == 0, res.stderr

    def built_agent() -> None:
        # TerminalEnv.reset's tree, then TerminalEnv._run_agent's mounts and sandbox.
        with EpisodeRoot(layers, td.disk_mb) as root:
            workdir = resolve_inside(root.path, td.workdir)
            workdir.mkdir(parents=True, exist_ok=True)
            made = _missing_tops(root.path, [*action.ro_binds, action.home])
            mounted: list[Path] = []
            try:
                for inside, host in action.ro_binds.items():
                    target = resolve_inside(root.path, inside)
                    bind(Path(host), target, read_only=True)
                    mounted.append(target)
                res = run_agent(replace(action, ro_binds={}), workdir, limits, cwd=td.workdir,
                                env=dict(td.env), root=root.path)
            finally:
                for target in reversed(mounted):
                    unmount(target)
                for path in made:
                    shutil.rmtree(path, ignore_errors=True)
        assert res.exit_code == 0, res.output(500)

    rows: dict[str, list[float]] = {k: [] for k in "abcdefg"}
    bare_docker = docker_plain = docker_agent = None
    if docker_why is None:
        from tackroom.images.daemon import build_task_image, rewrite_froms
        from tackroom.sandbox.docker import Container

        assert td.dockerfile is not None
        image = build_task_image(td.dockerfile, td.dockerfile.parent)  # built here, or found
        base = rewrite_froms(td.dockerfile.read_text(), str(td.dockerfile))[1][0]
        bare_argv = ["docker", "run", "--rm", "--network", "none", base, "true"]

        def bare_docker() -> None:
            subprocess.run(bare_argv, check=True, stdout=subprocess.DEVNULL)

        def docker_plain() -> None:
            box = Container(image, limits=limits, workdir=td.workdir, env=td.env)
            try:
                res = box.sandbox(limits, cwd=td.workdir).run("true")
            finally:
                box.close()
            assert res.exit_code == 0, res.output(500)

        def docker_agent() -> None:
            box = Container(image, limits=limits, workdir=td.workdir, env=td.env)
            try:
                res = box.run_agent(action, limits, cwd=td.workdir, env=td.env)
            finally:
                box.close()
            assert res.exit_code == 0, res.output(500)

    with tempfile.TemporaryDirectory(prefix="tackroom-bench-") as tmp:
        for _ in range(n):
            _timed(lambda: subprocess.run(BARE_BWRAP, check=True), rows["a"])
            _timed(lambda: host_sandbox(Path(tmp)), rows["b"])
            _timed(built_plain, rows["c"])
            _timed(built_agent, rows["d"])
            if bare_docker is not None:
                _timed(bare_docker, rows["e"])
                _timed(docker_plain, rows["f"])
                _timed(docker_agent, rows["g"])
    med = {k: statistics.median(v) * 1000 for k, v in rows.items() if v}

    def line(label: str, key: str, bare: str, target: bool = False) -> str:
        ratio = med[key] / med[bare]
        met = f" (target ≤ 2×: {'met' if ratio <= 2 else 'NOT met'})" if target else ""
        return f"  {label:<44} {med[key]:7.1f}   {ratio:4.2f}× bare{met}"

    print(f"\nepisode start on {td.id}, medians of {n}, interleaved (ms), "
          f"load average {os.getloadavg()[0]:.1f}:")
    print(f"  {'bubblewrap: bare bwrap … bash -c true':<44} {med['a']:7.1f}")
    print(line("bubblewrap: sandbox on the host system", "b", "a"))
    print(line("bubblewrap: episode on the built environment", "c", "a"))
    print(line("bubblewrap: agent episode (cached layer)", "d", "a", target=True))
    if docker_why is not None:
        print(f"  Docker: skipped ({docker_why})")
        return
    print(f"  {'docker: bare docker run --rm … true':<44} {med['e']:7.1f}")
    print(line("docker: episode container", "f", "e"))
    print(line("docker: agent episode (cached layer)", "g", "e", target=True))


def _profile(td, layers, action, n: int, docker_why: str | None) -> None:
    """Where an agent episode's start goes, stage by stage (medians, ms), beside a bare
    ``bwrap`` and what the sandbox's command line adds to it (interleaved as above)."""
    from tackroom.images.build import resolve_inside
    from tackroom.images.overlay import EpisodeRoot, bind, unmount
    from tackroom.images.userns import as_image_root, mapped_userns
    from tackroom.sandbox import BubblewrapSandbox, Limits
    from tackroom.suites.terminal.env import _missing_tops

    rows: dict[str, list[float]] = {}

    def since(key: str, t0: float) -> float:
        now = time.perf_counter()
        rows.setdefault(key, []).append(now - t0)
        return now

    limits = Limits(wall_s=td.command_timeout_s, memory_mb=td.memory_mb, disk_mb=td.disk_mb,
                    episode_wall_s=td.agent_timeout_s)
    with tempfile.TemporaryDirectory(prefix="tackroom-bench-home-") as home, \
            mapped_userns() as fd:
        wrapped = [*as_image_root(), "bwrap", "--userns", str(fd), *BARE_BWRAP[1:]]
        limited = [*BARE_BWRAP[:-1],
                   "ulimit -S -H -v 524288 -u 64 -f 65536 -c 0 || exit 126; true"]
        for _ in range(n):
            t0 = time.perf_counter()
            subprocess.run(BARE_BWRAP, check=True)
            t0 = since("bare bwrap", t0)
            subprocess.run(wrapped, check=True, pass_fds=(fd,))
            t0 = since("bare bwrap behind setpriv (the old way)", t0)
            subprocess.run(limited, check=True)
            t0 = since("bare bwrap with ulimit (the sandbox's limits)", t0)
            root = EpisodeRoot(layers, td.disk_mb)
            t0 = since("agent episode: tree (tmpfs + overlay)", t0)
            made = _missing_tops(root.path, [*action.ro_binds, action.home])
            mounted = []
            for inside, host in action.ro_binds.items():
                mounted.append(resolve_inside(root.path, inside))
                bind(Path(host), mounted[-1], read_only=True)
            t0 = since("  the agent layer's two read-only mounts", t0)
            box = BubblewrapSandbox(root.path, limits, binds={action.home: Path(home)},
                                    root=root.path, cwd="/")
            t0 = since("  the sandbox (its user namespace, from the pool)", t0)
            box.run("true")
            t0 = since("  `true` run in it (first command on the tree)", t0)
            box.run("true")
            t1 = time.perf_counter()  # not counted: the same again, on a warm tree
            rows.setdefault("  (the same again, on a warm tree)", []).append(t1 - t0)
            t0 = t1
            box.close()
            t0 = since("  the sandbox closed", t0)
            for target in reversed(mounted):
                unmount(target)
            for path in made:
                shutil.rmtree(path, ignore_errors=True)
            t0 = since("  the agent mounts unmounted, their points removed", t0)
            root.close()
            since("  the tree unmounted and removed", t0)
    med = {k: statistics.median(v) * 1000 for k, v in rows.items()}
    print(f"\nwhere a bubblewrap agent episode start goes, medians of {n} (ms), "
          f"load average {os.getloadavg()[0]:.1f}:")
    for key, ms in med.items():
        print(f"  {key:<52} {ms:7.1f}")
    if docker_why is not None:
        return
    from tackroom.images.daemon import build_task_image
    from tackroom.sandbox.docker import Container

    assert td.dockerfile is not None
    image = build_task_image(td.dockerfile, td.dockerfile.parent)
    rows.clear()
    for _ in range(n):
        t0 = time.perf_counter()
        box = Container(image, limits=limits, workdir=td.workdir, env=td.env)
        t0 = since("the container created and started (Engine API)", t0)
        box.sandbox(limits, cwd=td.workdir).run("true")
        t0 = since("`true` run in it (docker exec)", t0)
        box.run_agent(action, limits, cwd=td.workdir, env=td.env)
        t0 = since("Container.run_agent of `true` (attach, limits, exec, detach)", t0)
        box.close()
        since("the container removed (Engine API)", t0)
    print(f"\nwhere a Docker agent episode start goes, medians of {n} (ms), "
          f"load average {os.getloadavg()[0]:.1f}:")
    for key, values in rows.items():
        print(f"  {key:<62} {statistics.median(values) * 1000:7.1f}")


# -- concurrent agent episodes -------------------------------------------------------------

def _concurrent(src: Path, harness: str, episodes: int, sandbox: str) -> None:
    """``episodes`` expert episodes of ``harness`` on ``src`` at once (imported first)."""
    import tackroom
    from tackroom.suites.terminal import TerminalSuite
    from tackroom.suites.terminal.importer import import_tasks

    with tempfile.TemporaryDirectory(prefix="tackroom-bench-concurrent-") as tmp:
        work = Path(tmp)
        shutil.copytree(src, work / "src" / src.name)
        results = import_tasks(work / "src", work / "tasks", sandbox=sandbox)
        assert [(r.imported, r.checked) for r in results] == [(True, True)], results
        before = os.getloadavg()[0]
        t0 = time.perf_counter()
        run = tackroom.evaluate(TerminalSuite(store=work / "tasks", sandbox=sandbox),
                                tasks=[src.name], harnesses=[harness], policies=["expert"],
                                seeds=range(episodes), concurrency=episodes,
                                store=work / "r.duckdb")
        wall = time.perf_counter() - t0
        eps = run.load_episodes()
        outcomes = Counter(ep.outcome.value for ep in eps)
        print(f"\n{episodes} concurrent {harness} episodes on {src.name} ({sandbox}), "
              f"{os.cpu_count()} CPUs, load average {before:.1f} before, "
              f"{os.getloadavg()[0]:.1f} after:")
        print(f"  episodes {len(eps)}, successes {outcomes['success']}, "
              f"infra_errors {outcomes['infra_error']}, wall {wall:.1f} s "
              f"(target: 0 infra_error: {'met' if not outcomes['infra_error'] else 'NOT met'})")
        for ep in eps:
            if ep.outcome.value != "success":  # what happened, and how it ended
                error = " ".join((ep.error or "").split())
                print(f"    {ep.outcome.value}: {error[:90]} … {error[-110:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=30, help="episode starts of each kind")
    ap.add_argument("--tasks", default="", help="comma-separated fixture task names")
    ap.add_argument("--cold-cache", default="", help="directory for the cold cache")
    ap.add_argument("--agents", default="mini-swe-agent,qwen-code",
                    help="comma-separated agent harnesses whose layers to build ('' for none)")
    ap.add_argument("--episode-task", default="jq-count-items",
                    help="the task of the episode starts and concurrent episodes (one of "
                    "--tasks; its first when not among them)")
    ap.add_argument("--start-agent", default="mini-swe-agent",
                    help="the agent harness whose layer the agent episode starts mount")
    ap.add_argument("--episodes", type=int, default=20,
                    help="concurrent agent episodes on the first task (0: none)")
    ap.add_argument("--concurrent-harness", default="mini-swe-agent",
                    help="the agent harness of the concurrent episodes")
    ap.add_argument("--concurrent-sandboxes", default="bubblewrap,docker",
                    help="the sandbox providers the concurrent episodes run under, in turn")
    ap.add_argument("--no-docker", action="store_true", help="skip the Docker rows")
    ap.add_argument("--profile", action="store_true",
                    help="also print where an agent episode's start goes, stage by stage")
    args = ap.parse_args()
    if os.geteuid() != 0 or shutil.which("mmdebstrap") is None or shutil.which("bwrap") is None:
        raise SystemExit("needs root, bubblewrap and mmdebstrap; nothing to measure")
    cache = Path(args.cold_cache) if args.cold_cache else Path(
        tempfile.mkdtemp(prefix="tackroom-cold-cache-"))
    os.environ["TACKROOM_CACHE"] = str(cache)  # before tackroom reads it
    from tackroom.core.actions import RunAgent
    from tackroom.harness.spec import load_harness
    from tackroom.images.agent_layer import ensure_agent_layer
    from tackroom.suites.terminal import environment
    from tackroom.suites.terminal.taskdir import load_task

    names = [t for t in args.tasks.split(",") if t] or None
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; cache {cache}")
    print(f"{'task':<18} {'cold s':>8} {'cached s':>9} {'ratio':>7}")
    staged_root = Path(tempfile.mkdtemp(prefix="tackroom-bench-tasks-"))
    daemon_dir = Path(tempfile.mkdtemp(prefix="tackroom-bench-dockerd-"))
    docker_why, release = (("--no-docker", lambda: None) if args.no_docker
                           else _docker_daemon(daemon_dir))
    try:
        sources = _tasks(names)
        staged = [_staged(src, staged_root) for src in sources]
        for td_path in staged:
            cold, built = _build(td_path)
            warm, rebuilt = _build(td_path)
            assert not rebuilt, "the second build must be a cache hit"
            print(f"{td_path.name:<18} {cold:>8.2f} {warm:>9.3f} {cold / warm:>6.0f}×"
                  + ("" if built else "  (already in the cache)"), flush=True)
        agents = [a for a in args.agents.split(",") if a]
        if agents:
            _agent_layers(agents)

        at = next((i for i, src in enumerate(sources) if src.name == args.episode_task), 0)
        td = load_task(staged[at])
        layers = environment.prepare(td).image.layers
        agent = load_harness(args.start_agent).agent
        layer = ensure_agent_layer(agent)
        # The agent step as tackroom/runner/agent.py makes it, with ``true`` for the CLI and
        # the agent layer's two read-only mounts (the runtime and the CLI's install).
        action = RunAgent(argv=("true",), ro_binds=layer.mounts(), timeout_s=60.0,
                          memory_mb=agent["memory_mb"], processes=agent["processes"])
        _episode_starts(td, layers, action, args.n, docker_why)
        if args.profile:
            _profile(td, layers, action, args.n, docker_why)
        for sandbox in filter(None, args.concurrent_sandboxes.split(",")):
            if not args.episodes:
                break
            if sandbox == "docker" and docker_why is not None:
                print(f"\nconcurrent episodes under docker: skipped ({docker_why})")
                continue
            _concurrent(sources[at], args.concurrent_harness, args.episodes, sandbox)
    finally:
        release()
        if not args.cold_cache:
            shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(staged_root, ignore_errors=True)
        shutil.rmtree(daemon_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
