"""Real Harbor and Terminal-Bench tasks: environments built from their Dockerfiles, no Docker.

The task directories under ``tests/fixtures/real-tasks`` are written as such tasks are
(a base-image ``FROM``, ``apt-get install`` and ``pip install`` steps, ``COPY`` of task
files inside and outside the working directory, ``ARG``/``ENV``/heredoc ``RUN``/``USER``,
tests that install pytest, Terminal-Bench's ``task.yaml``/``run-tests.sh`` layout and its
older one). They are built for real — ``mmdebstrap`` from Debian's archive, steps in
bubblewrap with network only to the package registries — and cached by content in
``$TACKROOM_CACHE/images`` (a second run, or a second checkout, reuses them).
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest
from conftest import import_rows, run_cli

from tackroom.core.errors import InfraError
from tackroom.images.build import build_count
from tackroom.images.overlay import EpisodeRoot
from tackroom.images.userns import IMAGE_UID
from tackroom.records import RecordStore
from tackroom.sandbox import BubblewrapSandbox, Limits, sandbox_available
from tackroom.suites.terminal.environment import prepare
from tackroom.suites.terminal.importer import import_tasks
from tackroom.suites.terminal.taskdir import load_task

FIXTURES = Path(__file__).parent / "fixtures" / "real-tasks"
HARBOR = sorted(p.name for p in (FIXTURES / "harbor").iterdir())
TERMINAL_BENCH = sorted(p.name for p in (FIXTURES / "terminal-bench").iterdir())

pytestmark = pytest.mark.skipif(
    not sandbox_available() or os.geteuid() != 0 or shutil.which("mmdebstrap") is None,
    reason="building task environments needs root, bubblewrap and mmdebstrap (make setup "
           "installs them as root)")




@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    """Every fixture task imported through the CLI (built, checked); the workspace."""
    work = tmp_path_factory.mktemp("real-tasks")
    src = work / "src"
    for layout in ("harbor", "terminal-bench"):
        shutil.copytree(FIXTURES / layout, src, dirs_exist_ok=True)
    p = run_cli("tasks", "import", str(src), cwd=work,
                env_extra={"TACKROOM_TASKS": str(work / "tasks"), "COLUMNS": "220"})
    assert p.returncode == 0, p.stderr + p.stdout
    (work / "import.out").write_text(p.stdout)
    return work


def test_every_task_of_both_layouts_is_built_and_its_oracle_passes(imported):
    stdout = (imported / "import.out").read_text()
    rows = import_rows(stdout)
    assert set(rows) == set(HARBOR) | set(TERMINAL_BENCH), stdout
    for task_id, (_, kept, environment, untouched, oracle, *_) in rows.items():
        # The untouched task fails its tests and the reference solution passes them.
        assert (kept, untouched, oracle) == ("yes", "fails", "passes"), (task_id, stdout)
        assert environment in ("built", "cached"), (task_id, stdout)
    assert f"{len(rows)} of {len(rows)} folder(s) imported" in stdout
    store = imported / "tasks" / "terminal"
    tb = load_task(store / "tb-csv-total")  # converted to the Harbor layout, and built
    assert tb.builds and tb.workdir == "/app" and (tb.path / "environment" / "Dockerfile").is_file()


def test_the_tests_installs_are_built_in_and_never_run_without_network(imported):
    td = load_task(imported / "tasks" / "terminal" / "fix-slugify")
    ready = prepare(td)
    assert ready.installs == ("pip install pytest==8.3.3",)
    hoisted = [line for line in ready.scripts["test.sh"].splitlines() if "pip install" in line]
    assert hoisted and all(line.startswith(": tackroom: installed at build") for line in hoisted)
    # The tests' layer is only under the verifier: the agent's image has no pytest.
    assert len(ready.verify.layers) == len(ready.image.layers) + 1
    old = load_task(imported / "tasks" / "terminal" / "tb-old-layout")
    assert (old.tests / "run-tests.sh").is_file()  # Terminal-Bench's default test script
    assert prepare(old).installs[-2:] == ("uv init", "uv add pytest==8.4.1")


def test_a_second_build_is_a_cache_hit_and_a_changed_file_a_new_layer(tmp_path):
    src = tmp_path / "jq-count-items"
    shutil.copytree(FIXTURES / "harbor" / "jq-count-items", src)
    store = tmp_path / "store"
    first = import_tasks(src, store)[0]
    assert first.imported, first.reason
    before = build_count(this_process=True)
    again = import_tasks(src, store)[0]
    assert again.imported and again.environment == "cached"
    assert build_count(this_process=True) == before  # nothing was built the second time
    # Content no cache has seen (the cache outlives test runs).
    (src / "environment" / "inventory.json").write_text(
        f'{{"items": [{{"id": 1}}], "run": "{uuid.uuid4().hex}"}}\n')
    changed = import_tasks(src, store)[0]
    assert changed.imported and changed.environment == "built"
    assert build_count(this_process=True) == before + 1  # the task's layer only: the base came from the cache


def test_a_copy_into_the_root_shifts_only_what_it_copied(tmp_path):
    """``COPY data.csv ./`` with no WORKDIR copies into ``/``: only the new file is given to
    the image's root, not the whole image (nor the build's read-only mounts, which failed)."""
    from tackroom.images.build import build_image

    (tmp_path / "data.csv").write_text(f"a,b\n1,{uuid.uuid4().hex}\n")  # a layer never cached
    (tmp_path / "Dockerfile").write_text("FROM debian:bookworm-slim\nCOPY data.csv ./\n"
                                        "RUN test -f /data.csv && stat -c %u:%g /data.csv\n")
    image = build_image(tmp_path / "Dockerfile", tmp_path)
    assert image.workdir == "/"
    copied = image.layers[0] / "data.csv"
    assert (copied.stat().st_uid, copied.stat().st_gid) == (IMAGE_UID, IMAGE_UID)
    assert "0:0" in image.log.read_text()  # root's file inside the image


def test_episodes_run_the_cli_eval_on_built_tasks_through_both_shell_harnesses(imported):
    db = str(imported / "r.duckdb")
    env = {"TACKROOM_TASKS": str(imported / "tasks")}
    p = run_cli("eval", "--suite", "terminal", "--tasks",
                "jq-count-items,env-report,tb-git-tag,tb-nginx-conf,tb-service-token",
                "--policy", "expert",
                "--seeds", "0", "--db", db, cwd=imported, env_extra=env)
    assert p.returncode == 0, p.stderr
    with RecordStore(db) as store:
        episodes = store.episodes()
    assert len(episodes) == 10 and all(e["outcome"] == "success" for e in episodes), [
        (e["task"], e["harness"], e["outcome"], e["error"]) for e in episodes]


def test_a_service_of_the_tasks_image_runs_beside_the_agent_and_nothing_else_is_reached(
        imported):
    """tb-service-token's compose file starts `api` (a program of the task's image): the
    episode reaches it by name, on a network namespace it shares with it and nothing else."""
    from tackroom.core.task import Task
    from tackroom.suites.terminal.env import TerminalEnv

    td = load_task(imported / "tasks" / "terminal" / "tb-service-token")
    assert [s.name for s in td.compose().services] == ["api"]
    env = TerminalEnv(Task(td.id, "terminal", frozenset({"shell", "submit"})), td)
    try:
        env.reset(0)
        assert env.sandbox is not None
        res = env.sandbox.run("python3 -c \"import urllib.request; print(urllib.request.urlopen("
                              "'http://api:8000/token', timeout=5).status)\"; "
                              "python3 -c 'import socket; socket.create_connection("
                              "(\"1.1.1.1\", 443), 3)' 2>/dev/null && echo net-reached")
        assert res.stdout.split() == ["200"], res.stdout + res.stderr
    finally:
        env.close()
    assert env.netns is None and not env._services


def test_an_episode_is_root_of_its_own_tree_with_no_network_and_cannot_touch_the_image(imported):
    td = load_task(imported / "tasks" / "terminal" / "service-port")
    image = prepare(td).image
    probe = ("id -u; cat /proc/self/uid_map; "
             "echo x > /proc/sys/kernel/core_pattern 2>/dev/null && echo sysctl-written; "
             "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 443), 3)' "
             "2>/dev/null && echo net-reached; "
             "echo 'port = 1' >> /etc/tally/tally.ini; echo episode > /usr/local/mark; "
             "grep -c port /etc/tally/tally.ini")
    for _ in range(2):  # the second episode must see the image as it was built
        with EpisodeRoot(image.layers, 16) as root, \
                BubblewrapSandbox(root.path / "srv", Limits(), root=root.path, cwd="/srv/tally") as box:
            res = box.run(probe)
            lines = res.stdout.split()
            assert lines[0] == "0" and lines[1:4] == ["0", str(IMAGE_UID), "65536"], res.stdout
            assert "sysctl-written" not in res.stdout and "net-reached" not in res.stdout
            assert lines[-1] == "2", res.stdout + res.stderr  # the image's one line, plus ours
    for layer in image.layers:
        assert not (layer / "usr" / "local" / "mark").exists()


def test_the_process_and_disk_limits_hold_on_a_built_tree(imported):
    td = load_task(imported / "tasks" / "terminal" / "jq-count-items")
    image = prepare(td).image
    with EpisodeRoot(image.layers, 8) as root, \
            BubblewrapSandbox(root.path / "app", Limits(processes=16, disk_mb=8), root=root.path,
                    cwd="/app") as box:
        forks = box.run("for i in $(seq 40); do sleep 2 & done 2>&1; wait; echo done")
        assert "retry" in forks.stdout + forks.stderr or "unavailable" in (
            forks.stdout + forks.stderr).lower(), forks
        big = box.run("head -c 20000000 /dev/zero > /app/big; echo rc=$?")
        assert "rc=0" not in big.stdout and "File size limit" in big.stderr, big
        # Many files under the per-file limit: the episode's own layer is full.
        many = box.run("for i in $(seq 20); do head -c 1000000 /dev/zero > /app/f$i || "
                       "exit 1; done")
        assert many.exit_code != 0 and "No space left on device" in many.stderr, many
        assert many.killed == "disk"


def test_what_cannot_be_built_is_skipped_with_the_reason(tmp_path):
    src = tmp_path / "src"
    cases = {
        "alpine-base": "FROM alpine:3.19\nRUN apk add jq\n",
        "multi-stage": "FROM python:3.11-slim AS build\nRUN true\nFROM debian:bookworm\n"
                       "COPY --from=build /x /x\n",
        "copies-from-outside": "FROM debian:bookworm-slim\nCOPY ../../secret.txt /x\n",
        "downloads-elsewhere": "FROM debian:bookworm-slim\nRUN apt-get update && apt-get "
                               "install -y --no-install-recommends curl && curl -fsS "
                               "https://example.com -o /x\n",
    }
    for name, dockerfile in cases.items():
        d = src / name
        (d / "environment").mkdir(parents=True)
        (d / "tests").mkdir()
        (d / "instruction.md").write_text("Do nothing.\n")
        (d / "environment" / "Dockerfile").write_text(dockerfile)
        (d / "tests" / "test.sh").write_text("echo 0 > /logs/verifier/reward.txt\n")
    (tmp_path / "secret.txt").write_text("not in any build context\n")
    results = {r.id: r for r in import_tasks(src, tmp_path / "store")}
    assert not any(r.imported for r in results.values())
    assert "alpine:3.19 is not mapped" in results["alpine-base"].reason
    assert "docker" in results["alpine-base"].reason
    assert "multi-stage" in results["multi-stage"].reason or "--from" in \
        results["multi-stage"].reason
    assert "outside the build context" in results["copies-from-outside"].reason
    # The build reaches the package registries, and nothing else.
    refused = results["downloads-elsewhere"].reason
    assert "build failed" in refused and "refused example.com:443" in refused, refused


def test_without_root_a_built_task_says_so(monkeypatch, imported):
    td = load_task(imported / "tasks" / "terminal" / "tb-csv-total")
    image = prepare(td).image
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(InfraError, match="needs root") as e:
        EpisodeRoot(image.layers, 8)
    assert "--sandbox docker" in e.value.line()


def test_the_docker_provider_gives_bubblewraps_outcomes_cell_by_cell(docker_daemon, imported,
                                                                    tmp_path):
    """With a Docker daemon: every task built by `docker build` and checked by `docker exec`
    has the import table's cells bubblewrap's import has (the module's fixture), and an
    eval through --sandbox docker records the same outcomes as through bubblewrap."""
    from tackroom.images.daemon import build_task_image, docker_build_count

    docker_tasks = tmp_path / "tasks"
    p = run_cli("tasks", "import", str(imported / "src"), "--sandbox", "docker", cwd=tmp_path,
                env_extra={"TACKROOM_TASKS": str(docker_tasks), "COLUMNS": "220"}, timeout=3600)
    assert p.returncode == 0, p.stderr + p.stdout
    table = {"bubblewrap": import_rows((imported / "import.out").read_text()),
             "docker": import_rows(p.stdout)}
    tasks = set(HARBOR) | set(TERMINAL_BENCH)
    assert set(table["docker"]) == set(table["bubblewrap"]) == tasks
    for task in sorted(tasks):
        bwrap, dock = table["bubblewrap"][task], table["docker"][task]
        # imported, untouched, oracle: the same cells, and every task checked for real
        assert (dock[1], dock[3], dock[4]) == (bwrap[1], bwrap[3], bwrap[4]), (task, bwrap, dock)
        assert (dock[1], dock[2], dock[3], dock[4]) == ("yes", "docker", "fails", "passes"), dock
    # Everything is tagged by content: building again is a lookup, in any checkout.
    before = docker_build_count(this_process=True)
    for task in sorted(tasks):
        dockerfile = load_task(docker_tasks / "terminal" / task).dockerfile
        assert dockerfile is not None and not build_task_image(dockerfile, dockerfile.parent).built
    assert docker_build_count(this_process=True) == before
    # Episodes: the same outcomes through an eval on either provider.
    outcomes = {}
    for sandbox, store in (("bubblewrap", imported / "tasks"), ("docker", docker_tasks)):
        db = str(tmp_path / f"{sandbox}.duckdb")
        p = run_cli("eval", "--suite", "terminal", "--tasks",
                    "jq-count-items,service-port,tb-csv-total", "--policy", "expert",
                    "--seeds", "0", "--sandbox", sandbox, "--db", db, cwd=tmp_path,
                    env_extra={"TACKROOM_TASKS": str(store)})
        assert p.returncode == 0, p.stderr
        with RecordStore(db) as records:
            outcomes[sandbox] = sorted((e["task"], e["harness"], e["outcome"])
                                       for e in records.episodes())
    assert outcomes["docker"] == outcomes["bubblewrap"]
    assert len(outcomes["docker"]) == 6 and all(o == "success" for *_, o in outcomes["docker"])


def test_mounts_of_a_killed_run_are_reaped(imported, tmp_path):
    """A process killed (SIGKILL) with an episode's tree mounted leaves its mounts behind;
    the next process to make a tree unmounts and deletes them. A live owner's are kept."""
    import subprocess
    import sys

    from tackroom.images.overlay import EpisodeRoot, reap_stale_mounts

    td = load_task(imported / "tasks" / "terminal" / "jq-count-items")
    layers = [str(p) for p in prepare(td).image.layers]
    script = ("import os, sys, signal; from pathlib import Path; "
              "from tackroom.images.overlay import EpisodeRoot; "
              f"r = EpisodeRoot([Path(p) for p in {layers!r}], 8); "
              "print(r.path, flush=True); os.kill(os.getpid(), signal.SIGKILL)")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    merged = proc.stdout.strip()
    assert proc.returncode == -9 and merged, proc.stderr

    def mounted(path: str) -> bool:
        return any(line.split()[4].startswith(path)
                   for line in Path("/proc/self/mountinfo").read_text().splitlines())

    assert mounted(merged)  # what SIGKILL left
    with EpisodeRoot(prepare(td).image.layers, 8) as live:
        # The next process's first tree reaps it.
        nxt = subprocess.run([sys.executable, "-c", script.replace(
            "os.kill(os.getpid(), signal.SIGKILL)", "r.close()")], capture_output=True,
            text=True, timeout=120)
        assert nxt.returncode == 0, nxt.stderr
        # The tree's directory: the merged tree is mounted on its tmpfs, one level down.
        assert not mounted(merged) and not Path(merged).parents[1].exists()
        # A live owner's tree is left alone.
        assert str(live.path.parents[1]) not in reap_stale_mounts()
        assert mounted(str(live.path))
