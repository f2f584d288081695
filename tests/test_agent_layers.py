"""Agent CLIs on environments built from real tasks' Dockerfiles, through agent layers.

Two real-task fixtures are imported (built and checked: the untouched tests fail, the
oracle passes): ``jq-count-items`` (``debian:bookworm-slim`` and jq: no Python, no Node)
and ``hello-world`` (Terminal-Bench's Ubuntu 24.04 base, whose Python 3.13 no pip CLI
here supports). Each shipped agent CLI then runs each task's oracle through its expert,
on its agent layer (``tackroom/images/agent_layer.py``), built once into the shared
cache ``$TACKROOM_CACHE/images`` and reused by every later run. Under ``--sandbox docker``
a sample of them (a Python CLI and a Node CLI) runs in the episode's container with the same
outcomes, cell by cell, and the reachability check holds there too.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import free_port

import tackroom
from tackroom.core.actions import RunAgent
from tackroom.core.errors import InfraError
from tackroom.core.task import Task
from tackroom.harness.spec import AGENTS_DIR, load_harness
from tackroom.images.agent_layer import ensure_agent_layer
from tackroom.images.build import build_count
from tackroom.sandbox import sandbox_available
from tackroom.suites.terminal import TerminalSuite
from tackroom.suites.terminal.env import TerminalEnv
from tackroom.suites.terminal.importer import import_tasks
from tackroom.suites.terminal.taskdir import load_task
from tackroom.testing import ScriptedOpenAIServer

pytestmark = [
    pytest.mark.skipif(not sandbox_available() or os.geteuid() != 0
                       or shutil.which("mmdebstrap") is None,
                       reason="built task environments need root, bubblewrap and mmdebstrap "
                              "(make setup installs them as root)"),
    pytest.mark.slow]

FIXTURES = Path(__file__).parent / "fixtures" / "real-tasks"
TASKS = {"jq-count-items": "harbor", "hello-world": "terminal-bench"}
#: Every shipped agent harness of the terminal suite (the robot's is the robot suite's).
SHIPPED = sorted(p.stem for p in AGENTS_DIR.glob("*.toml") if not p.stem.startswith("robot-"))
#: Aider only edits files: a task that needs a shell cannot be expressed through it.
EDITS_ONLY = {"aider"}
#: OpenHands runs on built environments too (its layer copies this machine's Python 3.12,
#: which no Debian release has), but its start-up would add over 30 s here: run by hand
#: (docs/agents.md); here only where no Python 3.12 can be copied.
SLOW = {"openhands"}
ON_BUILT = [h for h in SHIPPED if h not in EDITS_ONLY and h not in SLOW]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """The two fixtures imported and checked: built, untouched tests failing, oracle passing."""
    work = tmp_path_factory.mktemp("agent-layers")
    for name, layout in TASKS.items():
        shutil.copytree(FIXTURES / layout / name, work / "src" / name)
    results = import_tasks(work / "src", work / "tasks")
    assert [(r.id, r.imported, r.checked) for r in results] == \
        [(name, True, True) for name in sorted(TASKS)], results
    return work / "tasks"


@pytest.fixture(scope="module")
def layers() -> dict[str, object]:
    """Each CLI's agent layer, built the first time on a machine (minutes each), one at a
    time (builds are CPU-bound), then found in the cache."""
    return {h: ensure_agent_layer(load_harness(h).agent) for h in ON_BUILT}


#: Under Docker: one Python CLI and one Node CLI (each episode costs seconds of the budget;
#: Gemini CLI starts in half Qwen Code's time).
DOCKER_SAMPLE = ["gemini-cli", "mini-swe-agent"]
DOCKER_TASK = "jq-count-items"


def _cells(episodes: list) -> dict[tuple[str, str], tuple]:
    """Each episode's cell, (task, harness) -> what must be equal across providers."""
    return {(ep.task.split("/")[-1], ep.harness): (
        ep.outcome.value, ep.reward, len(ep.turns), (ep.meta.get("verifier") or {}).get("exit"))
        for ep in episodes}


@pytest.fixture(scope="module")
def bubblewrap_cells() -> dict[tuple[str, str], tuple]:
    """The cells the bubblewrap runs of this module produced (the Docker test compares)."""
    return {}


@pytest.mark.parametrize("harness", ON_BUILT)
def test_each_cli_runs_the_oracle_on_built_environments(tmp_path, store, layers, harness,
                                                        bubblewrap_cells):
    run = tackroom.evaluate(TerminalSuite(store=store), tasks=sorted(TASKS),
                            harnesses=[harness], policies=["expert"], seeds=[0],
                            store=tmp_path / "r.duckdb")
    episodes = run.load_episodes()
    bubblewrap_cells.update(_cells(episodes))
    assert sorted(ep.task.split("/")[-1] for ep in episodes) == sorted(TASKS)
    for ep in episodes:
        agent = ep.meta.get("agent") or {}
        assert ep.outcome.value == "success", (ep.task, ep.error, agent.get("output", "")[-2000:])
        assert agent["cli"] == harness and agent["calls"] == len(ep.turns) >= 1
        # What the layer mounted is gone before the verifier ran: nothing of it is task output.
        assert ep.meta["verifier"]["exit"] == 0


def test_under_docker_a_python_and_a_node_cli_have_bubblewraps_outcomes(
        docker_daemon, tmp_path, store, layers, bubblewrap_cells):
    """In the episode's container (the agent layer attached while the CLI runs), each cell
    equals bubblewrap's: outcome, reward, model calls, the verifier's exit."""
    cells = {(DOCKER_TASK, h) for h in DOCKER_SAMPLE}
    if missing := sorted(h for t, h in cells - set(bubblewrap_cells)):  # run alone (-k)
        run = tackroom.evaluate(TerminalSuite(store=store), tasks=[DOCKER_TASK],
                                harnesses=missing, policies=["expert"], seeds=[0],
                                store=tmp_path / "bubblewrap.duckdb")
        bubblewrap_cells.update(_cells(run.load_episodes()))
    run = tackroom.evaluate(TerminalSuite(store=store, sandbox="docker"), tasks=[DOCKER_TASK],
                            harnesses=DOCKER_SAMPLE, policies=["expert"], seeds=[0],
                            store=tmp_path / "docker.duckdb")
    episodes = run.load_episodes()
    docker = _cells(episodes)
    assert docker == {c: bubblewrap_cells[c] for c in cells}, [
        (ep.harness, ep.error, (ep.meta.get("agent") or {}).get("output", "")[-1500:])
        for ep in episodes]
    assert {o for o, *_ in docker.values()} == {"success"}


def test_under_docker_an_agent_needs_root_beside_a_local_daemon(docker_daemon, store,
                                                               monkeypatch):
    """The CLI's files are attached to the running container from this machine: without
    root (or with a daemon elsewhere) the agent step is one line saying so, and the
    container is left as it was."""
    td = load_task(store / DOCKER_TASK)
    env = TerminalEnv(Task(td.id, "terminal", frozenset({"run_agent", "submit"})), td,
                      sandbox="docker")
    try:
        env.reset(0)
        monkeypatch.setattr(os, "geteuid", lambda: 1000)
        with pytest.raises(InfraError) as e:
            env.step(RunAgent(argv=("true",), ro_binds={"/opt/tackroom/x": str(store)}))
        monkeypatch.undo()
        assert "need the Docker daemon on this machine and tackroom running as root" in \
            e.value.line() and "\n" not in e.value.line()
        assert env.container is not None
        with env.container.sandbox(env.limits, cwd="/") as box:
            left = box.run("ls /opt/tackroom /agent-home 2>&1; true")
        assert left.stdout.count("No such file or directory") == 2, left.stdout
    finally:
        env.close()


def test_a_cli_no_runtime_fits_is_an_infra_error_saying_why(tmp_path, store, monkeypatch):
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "no-pyenv"))  # no Python 3.12 to copy
    run = tackroom.evaluate(TerminalSuite(store=store), tasks=["jq-count-items"],
                            harnesses=["openhands"], policies=["expert"], seeds=[0],
                            store=tmp_path / "r.duckdb")
    episodes = run.load_episodes()  # an infra_error is retried: each attempt says the same
    assert episodes and {ep.task for ep in episodes} == {"terminal/jq-count-items"}
    for ep in episodes:
        assert ep.outcome.value == "infra_error"
        assert "needs Python 3.12, which no Debian release has, and this machine has no " \
            "relocatable build of it" in ep.error and "\n" not in ep.error


def test_a_second_run_builds_nothing_and_a_changed_pin_builds_one_layer(layers):
    before = build_count(this_process=True)
    again = {h: ensure_agent_layer(load_harness(h).agent) for h in ON_BUILT}
    assert build_count(this_process=True) == before
    assert {h: (a.key, a.built) for h, a in again.items()} == \
        {h: (a.key, False) for h, a in layers.items()}
    agent = load_harness("mini-swe-agent").agent
    pinned = {**agent, "version": "2.4.5", "install": {"pip": ["mini-swe-agent==2.4.5"]}}
    entry = None
    try:
        new = ensure_agent_layer(pinned)
        entry = new.install.parent
        assert new.built and new.key not in {a.key for a in layers.values()}
        assert build_count(this_process=True) == before + 1
        assert new.runtime == layers["mini-swe-agent"].runtime  # the runtime is shared
    finally:
        if entry is not None:  # so that the next run builds it again
            shutil.rmtree(entry, ignore_errors=True)
            entry.with_name(entry.name + ".lock").unlink(missing_ok=True)


@pytest.mark.parametrize(("harness", "sandbox"), [("mini-swe-agent", "bubblewrap"),
                                                  ("qwen-code", "bubblewrap"),
                                                  ("mini-swe-agent", "docker")])
def test_a_cli_in_a_built_environment_reaches_only_the_gateway(request, tmp_path, layers,
                                                               harness, sandbox):
    """The reference solution is a probe run by the CLI on an image without Python; the
    tests pass only if it reached nothing (not the host's loopback, not the internet) and
    the layer's mounts are gone when they run (in the same container, under Docker)."""
    if sandbox == "docker":
        request.getfixturevalue("docker_daemon")
    d = tmp_path / "tasks" / "net-probe"
    for sub in ("environment", "tests", "solution"):
        (d / sub).mkdir(parents=True)
    (d / "instruction.md").write_text("Report which hosts you can reach.\n")
    (d / "task.toml").write_text('version = "1.0"\n')
    (d / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    with ScriptedOpenAIServer() as host_server:
        targets = [("127.0.0.1", host_server.port), ("127.0.0.1", free_port()),
                   ("1.1.1.1", 443), ("10.0.0.1", 80)]
        probes = "\n".join(
            f"if timeout 3 bash -c 'exec 3<>/dev/tcp/{h}/{p}' 2>/dev/null; then "
            f"echo REACHED {h}:{p}; else echo blocked {h}:{p}; fi >> probe.txt"
            for h, p in targets)
        (d / "solution" / "solve.sh").write_text(f"#!/bin/bash\ncd /app\n{probes}\n")
        (d / "tests" / "test.sh").write_text(
            "#!/bin/bash\ncd /app\nif [ -f probe.txt ] && ! grep -q REACHED probe.txt && "
            "[ $(grep -c blocked probe.txt) = 4 ] && ! command -v python3 && "
            # Nothing of the agent layer is left for the verifier to see.
            "[ ! -e /opt/tackroom ] && [ ! -e /agent-home ]; then "
            "echo 1 > /logs/verifier/reward.txt; else cat probe.txt; "
            "echo 0 > /logs/verifier/reward.txt; fi\n")
        run = tackroom.evaluate(TerminalSuite(store=tmp_path / "tasks", sandbox=sandbox),
                                tasks=["net-probe"],
                                harnesses=[harness], policies=["expert"], seeds=[0],
                                store=tmp_path / "r.duckdb")
        assert host_server.requests == []
    [ep] = run.load_episodes()
    assert ep.outcome.value == "success", (ep.error, ep.meta.get("verifier"))
    assert len(ep.turns) == 2  # and the gateway it did reach recorded both calls
