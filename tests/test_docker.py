"""``--sandbox docker`` on a local Docker daemon (started for the run as root when none answers).

Tasks are built by ``docker build`` on bases imported from tackroom's own ``mmdebstrap``
root file systems (no registry is reachable) and run one container per episode. The real
Harbor and Terminal-Bench task directories' outcomes under Docker are compared with
bubblewrap's cell by cell in tests/test_real_tasks.py (it imports them under bubblewrap
once). Images are tagged by content in the daemon and the tests' install layers kept in
``$TACKROOM_CACHE/images``, so a second run builds nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from conftest import run_cli

from tackroom.core.actions import RunAgent, Shell, Submit
from tackroom.core.errors import InfraError
from tackroom.core.task import Task
from tackroom.images.build import BuildError
from tackroom.images.daemon import build_task_image
from tackroom.sandbox import Sandbox, provider, sandbox_available
from tackroom.suites.terminal.env import TerminalEnv
from tackroom.suites.terminal.taskdir import load_task

pytestmark = pytest.mark.skipif(
    not sandbox_available() or os.geteuid() != 0 or shutil.which("mmdebstrap") is None,
    reason="the Docker bases are tackroom's mmdebstrap root file systems: building them needs "
           "root, bubblewrap and mmdebstrap (make setup installs them as root)")


def _task(root: Path, dockerfile: str, test_sh: str, toml: str = "") -> Path:
    """A small Harbor task directory under ``root``."""
    task = root / "probe"
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "instruction.md").write_text("Make /app/done.\n")
    (task / "task.toml").write_text('version = "1.0"\n' + toml)
    (task / "environment" / "Dockerfile").write_text(dockerfile)
    (task / "tests" / "test.sh").write_text(test_sh)
    return task


@pytest.mark.parametrize("client", ["engine API", "docker CLI"])
def test_an_episode_is_a_container_with_no_network_the_tasks_limits_and_harbors_layout(
        docker_daemon, tmp_path, monkeypatch, client):
    if client == "docker CLI":  # as with a DOCKER_HOST that is not this machine's socket
        monkeypatch.setattr("tackroom.sandbox.docker.socket_path", lambda: None)
    task = _task(tmp_path, "FROM debian:bookworm-slim\nWORKDIR /app\n",
                 "#!/bin/bash\n[ -f /tests/test.sh ] && [ -f /app/done ] && r=1 || r=0\n"
                 "echo $r > /logs/verifier/reward.txt\n",
                 "[environment]\ncpus = 1\nmemory_mb = 768\nstorage_mb = 2048\n")
    td = load_task(task)
    env = TerminalEnv(Task(td.id, "terminal", frozenset({"shell", "submit"})), td,
                      sandbox="docker")
    try:
        obs = env.reset(0)
        assert "/app" in obs.text
        assert isinstance(env.sandbox, Sandbox)  # the contract's, as bubblewrap's are
        container = env.container
        assert container is not None
        host = json.loads(subprocess.run(["docker", "inspect", container.name],
                                         capture_output=True, text=True, check=True).stdout)[0]
        hc = host["HostConfig"]
        assert (hc["NetworkMode"], hc["Memory"], hc["NanoCpus"]) == ("none", 768 << 20, 10**9)
        # overlay2 on ext4 cannot cap a container's disk: said, not silently dropped
        assert any("storage_mb" in n for n in container.notes) or hc.get("StorageOpt")

        def run(cmd: str) -> str:
            return env.step(Shell(cmd)).observation.text

        assert "[exit code 0]" in run("ls /sys/class/net | tr '\\n' ' '; pwd")
        assert "lo " in run("ls /sys/class/net | tr '\\n' ' '")
        assert "eth0" not in run("ls /sys/class/net")
        assert "[exit code 1]" in run("(exec 3<>/dev/tcp/1.1.1.1/80) 2>/dev/null")
        assert "[exit code 0]" not in run("getent hosts pypi.org")  # no name resolves
        assert "[exit code 2]" in run("ls /tests /solution")  # not there until they run
        # An agent program's files are attached while it runs (a fresh home, a read-only
        # install), its memory limit is the container's meanwhile; afterwards nothing of
        # them is left and the task's limit is back.
        install = tmp_path / "install"
        install.mkdir()
        (install / "cli").write_text("echo agent ran\n")
        agent = RunAgent(argv=("bash", "-c", "bash /opt/probe/cli; touch $HOME/kept; "
                               "touch /opt/probe/x || echo read-only; cat /proc/self/cgroup "
                               ">/dev/null; echo $HOME"),
                         ro_binds={"/opt/probe": str(install)}, memory_mb=1024,
                         files={"config.json": "{}"}, timeout_s=60)
        during = container.run_agent(agent, env.limits, cwd="/app", env={})
        assert during.exit_code == 0, during.output(500)
        assert "agent ran" in during.stdout and "read-only" in during.stdout
        assert "/agent-home" in during.stdout
        assert "[exit code 2]" in run("ls -d /opt/probe /agent-home")  # detached, removed
        host = json.loads(subprocess.run(["docker", "inspect", container.name],
                                         capture_output=True, text=True, check=True).stdout)[0]
        assert host["HostConfig"]["Memory"] == 768 << 20  # the task's limit restored
        run("touch /app/done")
        result = env.step(Submit())
        assert result.reward == 1.0 and result.success
    finally:
        env.close()
    gone = subprocess.run(["docker", "inspect", container.name], capture_output=True)
    assert gone.returncode != 0  # the episode's container is removed with it


def test_a_build_reaches_the_package_registries_and_nothing_else(docker_daemon, tmp_path):
    connect = ("p=${http_proxy##*:}; ! (exec 3<>/dev/tcp/1.1.1.1/80) 2>/dev/null && "
               "exec 3<>/dev/tcp/127.0.0.1/$p && "
               "printf 'CONNECT HOST:443 HTTP/1.1\\r\\nHost: HOST:443\\r\\n\\r\\n' >&3 && "
               "read -r status <&3 && echo \"$status\" && [[ $status == *' 200 '* ]]")
    base = 'FROM debian:bookworm-slim\nSHELL ["/bin/bash", "-c"]\n'
    ok = tmp_path / "ok"
    ok.mkdir()
    (ok / "Dockerfile").write_text(base + f"RUN {connect.replace('HOST', 'pypi.org')}\n")
    image = build_task_image(ok / "Dockerfile", ok)
    assert image.tag.startswith("tackroom-task:")
    refused = tmp_path / "refused"
    refused.mkdir()
    (refused / "Dockerfile").write_text(base + f"RUN {connect.replace('HOST', 'example.com')}\n")
    with pytest.raises(BuildError) as e:
        build_task_image(refused / "Dockerfile", refused)
    assert "refused example.com:443" in e.value.line()


def test_the_provider_says_why_it_cannot_run_in_one_line(monkeypatch):
    from tackroom.images import daemon

    daemon.daemon_unavailable.cache_clear()
    monkeypatch.setenv("PATH", "/nonexistent")
    try:
        docker = provider("docker")
        assert "docker CLI is not installed" in (docker.unavailable() or "")
        with pytest.raises(InfraError) as e:
            docker.require()
        assert "--sandbox docker cannot run" in e.value.line()
    finally:
        monkeypatch.undo()
        daemon.daemon_unavailable.cache_clear()


def test_a_prebuilt_docker_image_is_run_when_the_daemon_has_it(docker_daemon, tmp_path):
    marked = tmp_path / "marked"
    marked.mkdir()
    (marked / "Dockerfile").write_text("FROM debian:bookworm-slim\nRUN echo prebuilt > /marker\n")
    built = build_task_image(marked / "Dockerfile", marked)
    name = f"example.org/tackroom-prebuilt-probe:{built.tag.rsplit(':', 1)[1]}"
    subprocess.run(["docker", "tag", built.tag, name], check=True)
    task = _task(tmp_path, "FROM debian:bookworm-slim\nWORKDIR /app\n",
                 "#!/bin/bash\n[ -f /marker ] && r=1 || r=0\necho $r > /logs/verifier/reward.txt\n",
                 f'[environment]\ndocker_image = "{name}"\n')
    td = load_task(task)
    env = TerminalEnv(Task(td.id, "terminal", frozenset({"shell", "submit"})), td,
                      sandbox="docker")
    try:
        env.reset(0)
        assert "prebuilt\n" in env.step(Shell("cat /marker")).observation.text
        assert env.step(Submit()).reward == 1.0
    finally:
        env.close()
        subprocess.run(["docker", "rmi", name], capture_output=True)
    # Without Docker the task says why it cannot run.
    p = run_cli("tasks", "import", str(task), cwd=tmp_path,
                env_extra={"TACKROOM_TASKS": str(tmp_path / "store"), "COLUMNS": "300"})
    assert "prebuilt image" in p.stdout and "--sandbox docker" in p.stdout, p.stdout


def test_the_engine_api_is_used_only_for_the_daemon_the_cli_would_reach(monkeypatch, tmp_path):
    from tackroom.images.engine import socket_path

    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(tmp_path / "d.sock"))
    try:
        monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "config"))
        monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
        monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'd.sock'}")
        assert socket_path() == str(tmp_path / "d.sock")
        monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'missing.sock'}")
        assert socket_path() is None  # no socket there: the CLI says why
        monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.1:2375")
        assert socket_path() is None  # another machine's daemon: the CLI's business
        monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'd.sock'}")
        monkeypatch.setenv("DOCKER_CONTEXT", "remote")
        assert socket_path() is None
        monkeypatch.delenv("DOCKER_CONTEXT")
        (tmp_path / "config").mkdir()
        (tmp_path / "config" / "config.json").write_text('{"currentContext": "remote"}')
        assert socket_path() is None  # as after `docker context use remote`
        (tmp_path / "config" / "config.json").write_text('{"currentContext": "default"}')
        assert socket_path() == str(tmp_path / "d.sock")
    finally:
        listening.close()
