"""Every shipped agent CLI inside real tasks' own environments, under bubblewrap and Docker.

The tasks are public, written by their authors, not by us (``tests/public_tasks.py``):
eight of Terminal-Bench's own task directories (its ``task.yaml`` layout, from its PyPI
source distribution) and two in the Harbor layout (``task.toml``) as Harbor's own mapper
writes them, on Terminal-Bench's Ubuntu 24.04 and Python 3.13 bases, with apt and pip
installs in their Dockerfiles; and ``jq-count-items`` (``debian:bookworm-slim`` and jq: an
image with no Python and no Node, which no public task offline here has). All are imported
through the CLI and checked: each one's untouched tests fail and its oracle passes.

Each shipped agent CLI then runs tasks' oracles through its expert on its agent layer
(``tackroom/images/agent_layer.py``: built once into ``$TACKROOM_CACHE/images``, reused by
every later run). ``make test`` runs a cover of the matrix that fits its budget: every CLI
on two tasks and every task under at least one CLI under bubblewrap, and one task per CLI
under ``--sandbox docker`` with outcomes equal to bubblewrap's cell by cell. The whole
matrix — every CLI on every task under both — is ``make matrix`` (marked ``matrix``;
several minutes: docs/terminal.md has its last table).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import free_port, import_rows
from inprocess_cli import run_here
from public_tasks import harbor_mapped_tasks, terminal_bench_tasks

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
from tackroom.suites.terminal.taskdir import load_task
from tackroom.testing import ScriptedOpenAIServer

pytestmark = [
    pytest.mark.skipif(not sandbox_available() or os.geteuid() != 0
                       or shutil.which("mmdebstrap") is None,
                       reason="built task environments need root, bubblewrap and mmdebstrap "
                              "(make setup installs them as root)"),
    pytest.mark.slow]

FIXTURES = Path(__file__).parent / "fixtures" / "real-tasks"
#: Terminal-Bench's own directories (task.yaml): Ubuntu 24.04 and Python 3.13 bases, apt
#: (dos2unix, git, gcc) and pip (pandas, jsonschema) installs, a keystroke solution.yaml.
TERMINAL_BENCH = ["hello-world", "fix-permissions", "processing-pipeline",
                  "heterogeneous-dates", "organization-json-generator", "polyglot-c-py",
                  "git-workflow-hack", "sqlite-db-truncate"]
#: Harbor's layout (task.toml, schema 1.4) of two more, by Harbor's mapper.
HARBOR = ["grid-pattern-transform", "modernize-fortran-build"]
#: Ours: the image without Python.
NO_PYTHON = "jq-count-items"
TASKS = [*TERMINAL_BENCH, *HARBOR, NO_PYTHON]
#: Every shipped agent harness of the terminal suite (the robot's is the robot suite's).
SHIPPED = sorted(p.stem for p in AGENTS_DIR.glob("*.toml") if not p.stem.startswith("robot-"))
#: Aider only edits files: a task that needs a shell cannot be expressed through it.
EDITS_ONLY = {"aider"}
ON_BUILT = [h for h in SHIPPED if h not in EDITS_ONLY]
#: OpenHands starts in ~15 s (its Python 3.12 is this machine's, copied into its layer):
#: one task per provider in the cover.
SLOW = {"openhands"}


def cover() -> dict[str, list[str]]:
    """Each CLI's tasks in ``make test``: two each (one for the slow CLI), round the task
    list, so every task is run and each CLI's first task differs from the others'."""
    tasks: dict[str, list[str]] = {}
    at = 0
    for cli in [h for h in ON_BUILT if h not in SLOW] + [h for h in ON_BUILT if h in SLOW]:
        n = 1 if cli in SLOW else 2
        tasks[cli] = [TASKS[(at + i) % len(TASKS)] for i in range(n)]
        at += n
    return tasks


COVER = cover()
assert {t for ts in COVER.values() for t in ts} == set(TASKS)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """The tasks imported through ``tackroom tasks import``: built, checked (untouched tests
    failing, oracle passing)."""
    work = tmp_path_factory.mktemp("agent-layers")
    src = work / "src"
    terminal_bench_tasks(TERMINAL_BENCH, src)
    for task in harbor_mapped_tasks(HARBOR, work / "harbor").iterdir():
        shutil.copytree(task, src / task.name)
    shutil.copytree(FIXTURES / "harbor" / NO_PYTHON, src / NO_PYTHON)
    p = run_here("tasks", "import", str(src), cwd=work,
                 env_extra={"TACKROOM_TASKS": str(work / "tasks")})
    assert p.returncode == 0, p.stdout + p.stderr
    rows = import_rows(p.stdout)
    assert {t: (r[1], r[3], r[4]) for t, r in rows.items()} == \
        {t: ("yes", "fails", "passes") for t in TASKS}, p.stdout
    assert (src / "grid-pattern-transform" / "task.toml").is_file()  # both layouts
    assert (src / "hello-world" / "task.yaml").is_file()
    return work / "tasks" / "terminal"


@pytest.fixture(scope="module")
def layers() -> dict[str, object]:
    """Each CLI's agent layer, built the first time on a machine (minutes each), one at a
    time (builds are CPU-bound), then found in the cache."""
    return {h: ensure_agent_layer(load_harness(h).agent) for h in ON_BUILT}


def _cells(episodes: list) -> dict[tuple[str, str], tuple]:
    """Each episode's cell, (task, harness) -> what must be equal across providers."""
    return {(ep.task.split("/")[-1], ep.harness): (
        ep.outcome.value, ep.reward, len(ep.turns), (ep.meta.get("verifier") or {}).get("exit"))
        for ep in episodes}


def _matrix(store: Path, cells: dict[str, list[str]], sandbox: str, db: Path) -> list:
    """The expert episodes of ``cells`` (CLI -> tasks) as one run: the grid of every task and
    CLI named, planned, then cut down to the cells (so they run side by side)."""
    from tackroom.app.evaluation import execute

    tasks = sorted({t for ts in cells.values() for t in ts})
    p = tackroom.plan(TerminalSuite(store=store, sandbox=sandbox), tasks=tasks,
                      harnesses=list(cells), policies=["expert"], seeds=[0], store=db)
    wanted = {(t, c) for c, ts in cells.items() for t in ts}
    p.grid.cells = [cell for cell in p.grid.cells
                    if (cell.task.id, cell.harness.name) in wanted]
    assert len(p.grid.cells) == len(wanted)
    return execute(p, store=db).load_episodes()


def _why(episodes: list) -> list:
    return [(ep.task, ep.harness, ep.outcome.value, ep.error,
             (ep.meta.get("agent") or {}).get("output", "")[-1500:])
            for ep in episodes if ep.outcome.value != "success"]


@pytest.fixture(scope="module")
def bubblewrap_cells() -> dict[tuple[str, str], tuple]:
    """The cells the bubblewrap runs of this module produced (the Docker test compares)."""
    return {}


def test_every_cli_runs_oracles_on_built_environments(tmp_path, store, layers,
                                                      bubblewrap_cells):
    """The cover: each CLI on its tasks, every task under one CLI at least; every episode a
    success, the CLI's own calls recorded, the verifier run after the agent layer left."""
    episodes = _matrix(store, COVER, "bubblewrap", tmp_path / "r.duckdb")
    bubblewrap_cells.update(_cells(episodes))
    assert set(bubblewrap_cells) == {(t, c) for c, ts in COVER.items() for t in ts}
    assert not _why(episodes), _why(episodes)
    for ep in episodes:
        agent = ep.meta.get("agent") or {}
        assert agent["cli"] == ep.harness and agent["calls"] == len(ep.turns) >= 1
        # What the layer mounted is gone before the verifier ran: nothing of it is task output.
        assert ep.meta["verifier"]["exit"] == 0


def test_under_docker_every_cli_has_bubblewraps_outcomes(docker_daemon, tmp_path, store, layers,
                                                         bubblewrap_cells):
    """In the episode's container (the agent layer attached while the CLI runs), each CLI on
    its first task of the cover (seven tasks, all CLIs): each cell equals bubblewrap's —
    outcome, reward, model calls, the verifier's exit."""
    cells = {cli: tasks[:1] for cli, tasks in COVER.items()}
    wanted = {(t, c) for c, ts in cells.items() for t in ts}
    if missing := {c: [t] for t, c in wanted - set(bubblewrap_cells)}:  # run alone (-k)
        bubblewrap_cells.update(_cells(_matrix(store, missing, "bubblewrap",
                                               tmp_path / "bubblewrap.duckdb")))
    episodes = _matrix(store, cells, "docker", tmp_path / "docker.duckdb")
    docker = _cells(episodes)
    assert docker == {c: bubblewrap_cells[c] for c in wanted}, _why(episodes)
    assert {o for o, *_ in docker.values()} == {"success"}


@pytest.mark.matrix
def test_the_whole_matrix_under_both_providers(tmp_path, store, layers, docker_daemon):
    """``make matrix``: every CLI on every task, under bubblewrap and under Docker — at least
    90% success, no infra_error, the two providers equal cell by cell. Prints the table."""
    everything = {cli: TASKS for cli in ON_BUILT}
    results = {sandbox: _matrix(store, everything, sandbox, tmp_path / f"{sandbox}.duckdb")
               for sandbox in ("bubblewrap", "docker")}
    cells = {sandbox: _cells(eps) for sandbox, eps in results.items()}
    width = max(map(len, TASKS))
    print(f"\n{'task':<{width}}  " + "  ".join(f"{c:>14}" for c in ON_BUILT))
    for task in TASKS:
        marks = ["/".join("ok" if cells[s][(task, c)][0] == "success" else
                          cells[s][(task, c)][0] for s in cells) for c in ON_BUILT]
        print(f"{task:<{width}}  " + "  ".join(f"{m:>14}" for m in marks))
    for sandbox, eps in results.items():
        outcomes = [ep.outcome.value for ep in eps]
        print(f"{sandbox}: {outcomes.count('success')}/{len(eps)} success, "
              f"{outcomes.count('infra_error')} infra_error")
        assert len(eps) == len(TASKS) * len(ON_BUILT)
        assert outcomes.count("infra_error") == 0, _why(eps)
        assert outcomes.count("success") >= 0.9 * len(eps), _why(eps)
    assert cells["docker"] == cells["bubblewrap"]


def test_under_docker_an_agent_needs_root_beside_a_local_daemon(docker_daemon, store,
                                                               monkeypatch):
    """The CLI's files are attached to the running container from this machine: without
    root (or with a daemon elsewhere) the agent step is one line saying so, and the
    container is left as it was."""
    td = load_task(store / NO_PYTHON)
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
    run = tackroom.evaluate(TerminalSuite(store=store), tasks=[NO_PYTHON],
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
    # Qwen Code's previous release: its install (one bundle from npm) takes seconds where a
    # Python CLI's takes a minute; any CLI's layer is keyed the same way.
    agent = load_harness("qwen-code").agent
    assert agent["install"] == {"npm": ["@qwen-code/qwen-code@0.24.4"]}, agent["install"]
    pinned = {**agent, "version": "0.24.3", "install": {"npm": ["@qwen-code/qwen-code@0.24.3"]}}
    entry = None
    try:
        new = ensure_agent_layer(pinned)
        entry = new.install.parent
        assert new.built and new.key not in {a.key for a in layers.values()}
        assert build_count(this_process=True) == before + 1
        assert new.runtime == layers["qwen-code"].runtime  # the runtime is shared
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
