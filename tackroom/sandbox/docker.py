"""The ``docker`` sandbox provider: a task's image built and run by a local Docker daemon.

For ``--sandbox docker``. The task's image is built by :mod:`tackroom.images.daemon`: bases
the daemon lacks come from the same ``mmdebstrap`` root file systems as the bubblewrap
environments (``docker import``), ``docker build`` reaches only the package registries, and
images are tagged by content, so a second build is a lookup. An episode is one container of
the image:

* **network**: ``--network none`` — a loopback and nothing else, no route out; a task's
  services reach each other on it. A host directory bound read-only (``ro_binds``: the
  recording gateway's Unix socket) is the only way to the host;
* **the image**: ``task.toml``'s ``docker_image`` when the daemon has it, else the task's
  Dockerfile built (within ``build_timeout_sec``);
* **limits** from ``task.toml``'s ``[environment]``: ``memory_mb`` (the container's cgroup,
  no swap; the sandbox's own cap as everywhere), ``cpus`` (``--cpus``), ``storage_mb``
  (``--storage-opt size=`` where the storage driver allows it — overlay2 on xfs with
  ``pquota``; elsewhere not enforced, and :attr:`Container.notes` says so); processes
  (``--pids-limit``); each command's wall time inside the container (``timeout -s KILL``),
  since killing the ``docker exec`` client would not stop it;
* **layout** as Harbor's: ``/tests``, ``/logs/verifier`` and ``/solution`` copied in with
  ``docker cp`` when a sandbox that binds them opens, ``/logs`` copied back when it closes;
  the verifier runs in the same container after the agent;
* **the tests' installs** are a layer built once per image and script
  (:func:`tackroom.images.daemon.tests_layer`) and copied in just before the verifier;
* **an agent CLI** (:meth:`Container.run_agent`) runs in the episode's container, as the
  task's commands and its verifier do: its read-only mounts (the agent layer's runtime and
  install, the gateway relay's script, the gateway socket's directory) and a fresh home are
  attached to the running container while it runs (``mount_into.py``: the daemon can add
  mounts only when a container starts) and detached afterwards, with the mount points it
  made removed: the verifier sees none of it. The CLI's memory and process limits are the
  container's while it runs, its leftover processes are ended when it exits.

Commands run as the image's root (``docker exec``), with an init process (``--init``) that
reaps what they leave behind. The container's life — create, start, inspect, limits,
removal — goes to the daemon's socket (:mod:`tackroom.images.engine`), not through the
CLI, whose start-up alone costs more than the daemon's answer; the CLI stays for
``exec``, ``cp`` and builds, and for everything when ``DOCKER_HOST`` points elsewhere.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import tomllib
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tackroom.core.actions import RunAgent
from tackroom.core.errors import InfraError
from tackroom.core.registry import register
from tackroom.images.daemon import (
    BUILD_TIMEOUT_S,
    DockerImage,
    build_task_image,
    daemon_unavailable,
    docker,
    has_image,
    tests_layer,
)
from tackroom.images.engine import container_path, request, socket_path
from tackroom.sandbox.contract import CommandResult, Limits, Sandbox
from tackroom.sandbox.process import ProcessSandbox, copy_tree, limit_in_output

#: Processes a container may hold at least (its init, the shell, the tools it runs).
MIN_PIDS = 64
#: The script that attaches host paths to a running container (run as a process of its own).
MOUNT_INTO = str(Path(__file__).with_name("mount_into.py"))
#: Seconds that script has to attach (or detach) an agent's files.
HOLD_START_S = 60
#: The environment variable that marks an agent CLI's processes (its leftovers are ended).
AGENT_MARK = "TACKROOM_AGENT_RUN"


def docker_unavailable() -> str | None:
    """Why the Docker provider cannot run here (``None`` if a daemon answers)."""
    return daemon_unavailable()


def require_docker() -> None:
    """Raise a clear :class:`InfraError` unless the Docker daemon answers."""
    reason = docker_unavailable()
    if reason is not None:
        raise InfraError(f"--sandbox docker cannot run: {reason}", "docker",
                         "start the Docker daemon (dockerd --iptables=false --bridge=none as "
                         "root does), or use the default bubblewrap sandbox")


@functools.cache
def storage_quota() -> str | None:
    """Why ``--storage-opt size=`` cannot be used with this daemon (``None`` if it can)."""
    info = docker("info", "--format", "{{.Driver}} {{json .DriverStatus}}", check=False)
    text = info.stdout.decode(errors="replace")
    driver = text.split(" ", 1)[0]
    if driver == "overlay2" and '"xfs"' in text:
        return None  # xfs: the size option needs pquota, which the run then reports if absent
    return (f"the storage driver ({driver or 'unknown'}) cannot cap a container's disk "
            "(only overlay2 on xfs with pquota can)")


@functools.cache
def _has_init() -> bool:
    """Whether the daemon's init (``docker-init``, which ``--init`` runs) is installed: a
    local daemon's binaries are this machine's."""
    name = docker("info", "--format", "{{.InitBinary}}", check=False).stdout.decode().strip()
    return bool(name) and shutil.which(name) is not None


def task_environment(dockerfile: Path) -> dict[str, Any]:
    """The ``[environment]`` table of the ``task.toml`` beside the task's ``environment/``
    folder (``{}`` when there is none)."""
    for toml in (dockerfile.parent.parent / "task.toml", dockerfile.parent / "task.toml"):
        if toml.is_file():
            try:
                env = tomllib.loads(toml.read_text()).get("environment", {})
            except tomllib.TOMLDecodeError:
                return {}
            return env if isinstance(env, dict) else {}
    return {}


class Container:
    """One episode's container of ``image``: started when made, removed on :meth:`close`.

    Attributes:
        name: the container's name (``tackroom-…``).
        notes: what of the task's limits this daemon cannot enforce.
    """

    def __init__(self, image: DockerImage | str, *, limits: Limits, workdir: str,
                 env: Mapping[str, str], cpus: float | None = None,
                 storage_mb: int | None = None,
                 ro_binds: Mapping[str, Path] = {}) -> None:  # noqa: B006
        require_docker()
        self.image = image if isinstance(image, DockerImage) else DockerImage(image)
        self.name = f"tackroom-{uuid.uuid4().hex[:12]}"
        self.workdir = workdir
        self.notes: list[str] = list(self.image.notes)
        self._quota = (limits.memory_mb, max(limits.processes, MIN_PIDS))
        storage = None
        if storage_mb:
            if (why := storage_quota()) is None:
                storage = f"{int(storage_mb)}m"
            else:
                self.notes.append(f"storage_mb = {storage_mb} not enforced: {why}")
        mounts = [(inside, str(Path(host).resolve())) for inside, host in ro_binds.items()]
        #: Whether the daemon's socket is at hand (the Engine API), else the CLI is used.
        self._api = socket_path() is not None
        if self._api:
            self._create(workdir, env, cpus, storage, mounts)
        else:
            memory = f"{limits.memory_mb}m"
            args = ["run", "-d", "--name", self.name, "--network", "none",
                    "--hostname", "sandbox", "--memory", memory, "--memory-swap", memory,
                    "--pids-limit", str(self._quota[1]), "--workdir", workdir,
                    "--entrypoint", "sleep"]
            if _has_init():
                args.append("--init")
            if cpus:
                args += ["--cpus", f"{float(cpus):g}"]
            if storage:
                args += ["--storage-opt", f"size={storage}"]
            for inside, host in mounts:
                args += ["--mount", f"type=bind,source={host},target={inside},readonly"]
            for key, value in env.items():
                args += ["-e", f"{key}={value}"]
            docker(*args, self.image.tag, "infinity", where=self.image.tag)
        self._tests_done = False
        self._pid: int | None = None  # its first process, once an agent needed it

    def _create(self, workdir: str, env: Mapping[str, str], cpus: float | None,
                storage: str | None, mounts: list[tuple[str, str]]) -> None:
        """``docker run -d`` of the container, as two Engine API calls (create, start)."""
        host: dict[str, Any] = {
            "NetworkMode": "none", "Init": _has_init(),
            "Memory": self._quota[0] << 20, "MemorySwap": self._quota[0] << 20,
            "PidsLimit": self._quota[1],
            "Mounts": [{"Type": "bind", "Source": src, "Target": inside, "ReadOnly": True}
                       for inside, src in mounts]}
        if cpus:
            host["NanoCpus"] = int(float(cpus) * 1e9)
        if storage:
            host["StorageOpt"] = {"size": storage}
        config = {"Image": self.image.tag, "Entrypoint": ["sleep"], "Cmd": ["infinity"],
                  "WorkingDir": workdir, "Hostname": "sandbox",
                  "Env": [f"{key}={value}" for key, value in env.items()],
                  "HostConfig": host}
        made = request("POST", "/containers/create", config, query={"name": self.name},
                       where=self.image.tag)
        try:
            request("POST", container_path(made["Id"], "start"), where=self.image.tag)
        except InfraError:
            self.close()
            raise

    def exec_argv(self, argv: list[str], env: Mapping[str, str], cwd: str,
                  mode: str = "-i") -> list[str]:
        """The ``docker exec`` command line running ``argv`` in the container."""
        out = ["docker", "exec", mode, "-w", cwd]
        for key, value in env.items():
            out += ["-e", f"{key}={value}"]
        return [*out, self.name, *argv]

    def exec_detached(self, argv: list[str], env: Mapping[str, str], cwd: str) -> None:
        """Start ``argv`` in the container in the background (a task's service)."""
        docker(*self.exec_argv(argv, env, cwd, mode="-d")[1:], where=self.name)

    def sandbox(self, limits: Limits, *, cwd: str,
                binds: Mapping[str, Path] = {}) -> Sandbox:  # noqa: B006
        """A sandbox whose commands ``docker exec`` in this container."""
        return DockerSandbox(self, limits, cwd=cwd, binds=binds)

    def copy_in(self, host: Path, inside: str) -> None:
        """Copy the host directory ``host`` into the container at ``inside``."""
        docker("exec", self.name, "mkdir", "-p", inside, where=self.name)
        docker("cp", f"{host}/.", f"{self.name}:{inside}", where=self.name)

    def copy_out(self, inside: str, host: Path) -> None:
        """Copy the container's ``inside`` to ``host`` (special files left behind)."""
        with tempfile.TemporaryDirectory() as tmp:
            if docker("cp", f"{self.name}:{inside}/.", tmp, check=False).returncode == 0:
                copy_tree(tmp, host)

    def install_tests(self, tests: Path, script: str, env: Mapping[str, str]) -> None:
        """Give the container what ``script`` (the tests' hoisted installs) installs: a layer
        built once per image, script and ``tests`` folder, copied in (the container has no
        network). Once per container."""
        if self._tests_done:
            return
        layer = tests_layer(self.image, script, tests, workdir=self.workdir, env=env)
        if layer is not None:
            with open(layer, "rb") as f:
                docker("cp", "-a", "-", f"{self.name}:/", input=f.read(), timeout=600,
                       where=str(layer))
        self._tests_done = True

    def run_agent(self, action: RunAgent, limits: Limits, *, cwd: str,
                  env: Mapping[str, str]) -> CommandResult:
        """Run an agent program (:class:`~tackroom.core.actions.RunAgent`) in this container.

        As :func:`tackroom.sandbox.run_agent` does in a sandbox of its own: ``action``'s
        read-only mounts and a fresh home (its files written first) attached while it runs,
        the program's time, and its memory and process limits (the larger of the task's and
        the program's) as the container's; afterwards its leftover processes are ended, the
        mounts detached, the mount points removed and the task's limits restored, so that the
        verifier that runs next in this container sees the task's files alone.
        """
        home = Path(tempfile.mkdtemp(prefix="tackroom-agent-home-"))
        mark = uuid.uuid4().hex
        try:
            for rel, text in action.files.items():
                target = home / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
            lim = Limits(wall_s=action.timeout_s, memory_mb=max(limits.memory_mb,
                                                                 action.memory_mb),
                         processes=max(limits.processes, action.processes),
                         disk_mb=limits.disk_mb, episode_wall_s=action.timeout_s)
            mounts = [Attached(inside, Path(host), True)
                      for inside, host in action.ro_binds.items()]
            mounts.append(Attached(action.home, home, False))
            self._set_quota(lim.memory_mb, max(lim.processes, MIN_PIDS))
            try:
                with self.attached(mounts):
                    box = DockerSandbox(self, lim, cwd=cwd)
                    try:
                        command = f"cd {shlex.quote(cwd)} && exec {shlex.join(action.argv)}"
                        return box.run(command, timeout_s=action.timeout_s,
                                       env={**env, "HOME": action.home, **action.env,
                                            AGENT_MARK: mark})
                    finally:
                        self._end_marked(mark)
            finally:
                self._set_quota(*self._quota)
        finally:
            shutil.rmtree(home, ignore_errors=True)

    @contextlib.contextmanager
    def attached(self, mounts: list[Attached]) -> Iterator[None]:
        """Attach ``mounts`` to the running container for the ``with`` block (see
        ``mount_into.py``: one process holds them); the mount points it made are removed
        afterwards."""
        pid = self._init_pid()
        spec = [[m.inside, str(m.host.resolve()), m.read_only] for m in mounts]
        holder = subprocess.Popen(  # noqa: S603 - our own script, by our own interpreter
            [sys.executable, "-I", "-S", MOUNT_INTO, str(pid)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert holder.stdin is not None and holder.stdout is not None
        try:
            holder.stdin.write(json.dumps(spec).encode() + b"\n")
            holder.stdin.flush()
            ready = select.select([holder.stdout], [], [], HOLD_START_S)[0]
            if not (ready and holder.stdout.readline().startswith(b"[")):
                holder.kill()
                why = holder.communicate(timeout=HOLD_START_S)[1]
                raise InfraError("cannot attach an agent's files to the container: "
                                 + (" ".join(why.decode(errors="replace").split())[-300:]
                                    or f"no answer within {HOLD_START_S} s"), self.name,
                                 "agent CLIs under --sandbox docker need a local daemon and "
                                 "root (Linux 5.12 or later)")
            yield
        finally:
            with contextlib.suppress(OSError):
                holder.stdin.close()  # the holder detaches its mounts and exits
            try:
                holder.wait(timeout=HOLD_START_S)
            except subprocess.TimeoutExpired:
                holder.kill()
                holder.wait()
            for stream in (holder.stdout, holder.stderr):
                if stream is not None:
                    stream.close()

    def _init_pid(self) -> int:
        """The container's first process, as this machine sees it: the daemon must be local
        (its containers' processes are this machine's) and this process root."""
        if self._pid is not None:
            return self._pid
        if self._api:
            state = request("GET", container_path(self.name, "json"), where=self.name)
            pid, full_id = int(state["State"]["Pid"]), str(state["Id"])
        else:
            out = docker("inspect", "--format", "{{.State.Pid}} {{.Id}}", self.name,
                         where=self.name).stdout.decode().split()
            pid, full_id = int(out[0]), out[1]
        if pid == 0:
            raise InfraError("the episode's container is no longer running", self.name,
                             "see the daemon's log (docker logs) for why it stopped")
        try:
            ours = full_id in Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            ours = False
        if os.geteuid() != 0 or not ours:
            raise InfraError("agent CLIs under --sandbox docker need the Docker daemon on this "
                             "machine and tackroom running as root (the CLI's files are "
                             "attached to the running container)", self.name,
                             "run as root beside a local dockerd, or use --sandbox bubblewrap")
        self._pid = pid
        return pid

    def _set_quota(self, memory_mb: int, pids: int) -> None:
        """The container's memory and process limits (as ``docker run`` set them)."""
        if self._api:
            with contextlib.suppress(InfraError):  # as the CLI's, unchecked: best effort
                request("POST", container_path(self.name, "update"),
                        {"Memory": memory_mb << 20, "MemorySwap": memory_mb << 20,
                         "PidsLimit": pids}, where=self.name)
            return
        memory = f"{memory_mb}m"
        docker("update", "--memory", memory, "--memory-swap", memory, "--pids-limit", str(pids),
               self.name, check=False, where=self.name)

    def _end_marked(self, mark: str) -> None:
        """Kill the container's processes that carry ``mark`` (an agent's, left running):
        a sandbox of its own would have ended them with it."""
        try:
            pid = self._init_pid()
            ns = os.readlink(f"/proc/{pid}/ns/pid")
        except (InfraError, OSError):
            return
        needle = f"{AGENT_MARK}={mark}".encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if (os.readlink(entry / "ns" / "pid") == ns
                        and needle in (entry / "environ").read_bytes().split(b"\0")):
                    os.kill(int(entry.name), signal.SIGKILL)
            except (OSError, ValueError):
                continue

    def close(self) -> None:
        """Remove the container."""
        if self._api:
            with contextlib.suppress(InfraError):  # gone already, or the daemon with it
                request("DELETE", container_path(self.name), query={"force": "1"},
                        ok=(200, 204, 404), where=self.name)
            return
        docker("rm", "-f", self.name, check=False)


@dataclass(frozen=True)
class Attached:
    """A host path attached to a running container at ``inside``."""

    inside: str
    host: Path
    read_only: bool = True


class DockerSandbox(ProcessSandbox):
    """A :class:`~tackroom.sandbox.Sandbox` whose commands ``docker exec`` in a container.

    ``binds`` are copied in when it opens and back out when it closes (``/tests`` and
    ``/solution`` stay: they are read, not written); a command's wall time is enforced
    inside the container too (``timeout -s KILL``).
    """

    def __init__(self, container: Container, limits: Limits, *, cwd: str,
                 binds: Mapping[str, Path] = {}) -> None:  # noqa: B006
        self.container = container
        self.limits = limits
        self.binds = {k: Path(v) for k, v in binds.items()}
        self.cwd = cwd
        self.workdir = Path(tempfile.gettempdir())  # the docker client's own cwd
        self._closed = False
        self._timeout: float | None = None  # a command's wall time, while run() runs it
        for inside, host in self.binds.items():
            container.copy_in(host, inside)

    @property
    def task_path(self) -> str:
        return self.cwd

    def path(self, sandbox_path: str) -> str:
        return sandbox_path

    def copy_in(self, host: Path, inside: str) -> None:
        self.container.copy_in(host, inside)

    def copy_out(self, inside: str, host: Path) -> None:
        self.container.copy_out(inside, host)

    def argv(self, argv: list[str], env: Mapping[str, str] | None = None,
             tty: bool = False) -> list[str]:
        """``argv`` ``docker exec``'d in the container (under the command's wall time when
        :meth:`run` runs it; with a pseudo-terminal of the container's when ``tty``)."""
        if self._timeout is not None:
            argv = ["timeout", "-s", "KILL", f"{max(1.0, self._timeout):.0f}", *argv]
        return self.container.exec_argv(argv, dict(env or {}), self.cwd,
                                        mode="-it" if tty else "-i")

    def popen(self, argv: list[str], env: Mapping[str, str] | None = None,
              **kwargs: Any) -> subprocess.Popen:
        """Start ``argv`` in the container. Given a terminal as its standard input (a shell
        session), it gets one of the container's (``docker exec -t``, which the client
        relays), whose session it leads: a ``setsid -c`` before it is dropped, since a
        terminal already controlling a session cannot be taken by another."""
        if self._closed:
            raise InfraError("sandbox is closed", self.container.name)
        stdin = kwargs.get("stdin")
        tty = isinstance(stdin, int) and os.isatty(stdin)
        if tty and argv[:1] == ["setsid"]:
            argv = argv[1 + next(i for i, a in enumerate(argv[1:]) if not a.startswith("-")):]
        return subprocess.Popen(self.argv(argv, env, tty), cwd=self.workdir,  # noqa: S603
                                env={**os.environ, "DOCKER_CLI_HINTS": "false"},
                                start_new_session=True, **kwargs)

    def run(self, command: str, *, timeout_s: float | None = None, stdin: str | None = None,
            env: Mapping[str, str] | None = None) -> CommandResult:
        self._timeout = self.limits.wall_s if timeout_s is None else timeout_s
        try:
            return super().run(command, timeout_s=timeout_s, stdin=stdin, env=env)
        finally:
            self._timeout = None

    def _started(self, code: int, stdout: str, stderr: str) -> None:
        if code in (125, 126) and stderr.startswith(("Error response from daemon",
                                                     "Error: No such container")):
            raise InfraError(f"docker exec failed: {stderr.strip()[:300]}", self.container.name)

    def _which_limit(self, code: int, stderr: str) -> str | None:
        if code == 137:
            return "memory"  # the cgroup's OOM killer (our own timeout shows as timed out)
        return limit_in_output(code, stderr)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for inside, host in self.binds.items():
            if inside not in ("/tests", "/solution"):
                self.container.copy_out(inside, host)


class Docker:
    """``--sandbox docker``: a task with a Dockerfile is built by the Docker daemon and each
    episode is a container of it (:class:`Container`); tasks without one use bubblewrap."""

    name = "docker"
    runs_images = True

    def unavailable(self) -> str | None:
        return docker_unavailable()

    def require(self) -> None:
        require_docker()

    def container(self, dockerfile: Path, *, limits: Limits, workdir: str,
                  env: Mapping[str, str]) -> Container:
        require_docker()
        table = task_environment(dockerfile)
        prebuilt = str(table.get("docker_image") or "")
        if prebuilt and has_image(prebuilt):
            image = DockerImage(prebuilt, (f"the prebuilt {prebuilt} of the daemon",))
        else:  # Harbor's rule: the Dockerfile, when the prebuilt image is not at hand
            timeout = table.get("build_timeout_sec")
            image = build_task_image(dockerfile, dockerfile.parent, timeout_s=float(timeout)
                                     if isinstance(timeout, (int, float)) and timeout > 0
                                     else BUILD_TIMEOUT_S)
        cpus = table.get("cpus")
        storage = table.get("storage_mb")
        return Container(image, limits=limits, workdir=workdir, env=env,
                         cpus=float(cpus) if isinstance(cpus, (int, float)) else None,
                         storage_mb=int(storage) if isinstance(storage, int) else None)


#: The Docker provider, registered as ``docker``.
DOCKER = register("sandbox", summary="a local Docker daemon: docker build through the "
                  "registries-only network, one container per episode with no network "
                  "(tasks without a Dockerfile still use bubblewrap)")(Docker())
