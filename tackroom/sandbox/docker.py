"""The ``docker`` sandbox provider: the same tasks built and run with the Docker CLI.

For users who have a Docker daemon (``--sandbox docker``). A task's image is
built by ``docker build`` from its own Dockerfile (any base image, multi-stage
builds too), tagged by the same content hash as the bubblewrap provider's
layers; an episode is one container of it, started with no network (an
``--internal`` network of tackroom's), the task's memory and process limits,
and kept running (``sleep infinity``) while commands are ``docker exec``'d in
it. Directories a sandbox binds (``/tests``, ``/logs``, ``/solution``) are
copied in with ``docker cp`` and the writable ones copied back when it closes.
The tests' own installs run in the container, connected to the default bridge
for just that long, before the tests (Terminal-Bench runs them so too).
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tackroom.core.errors import InfraError
from tackroom.core.registry import register
from tackroom.images.build import context_digest
from tackroom.sandbox.contract import CommandResult, Limits, Sandbox
from tackroom.sandbox.process import ProcessSandbox, copy_tree, limit_in_output

#: The network episodes' containers are on: internal, so it reaches nothing outside.
NETWORK = "tackroom-no-egress"
#: Seconds a docker build may take.
BUILD_TIMEOUT_S = 3600


@functools.cache
def docker_unavailable() -> str | None:
    """Why the Docker provider cannot run here (``None`` if ``docker info`` answers)."""
    if shutil.which("docker") is None:
        return "the docker CLI is not installed"
    try:
        proc = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                              capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "docker info did not answer within 20 s"
    if proc.returncode != 0:
        return "no Docker daemon answers: " + " ".join(proc.stderr.split())[:200]
    return None


def require_docker() -> None:
    """Raise a clear :class:`InfraError` unless the Docker daemon answers."""
    reason = docker_unavailable()
    if reason is not None:
        raise InfraError(f"--sandbox docker cannot run: {reason}", "docker",
                         "start the Docker daemon, or use the default bubblewrap sandbox")


def _docker(*args: str, timeout: float = 120, input: str | None = None,  # noqa: A002
            check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(["docker", *args], capture_output=True, text=True,
                              timeout=timeout, input=input)
    except subprocess.TimeoutExpired:
        raise InfraError(f"docker {args[0]} took over {timeout:.0f} s", "docker") from None
    if check and proc.returncode != 0:
        raise InfraError(f"docker {args[0]} failed (exit {proc.returncode}): "
                         + " ".join(proc.stderr.split())[-300:], "docker")
    return proc


def build(dockerfile: Path, context: Path, *, log: Path | None = None) -> str:
    """``docker build`` the task's image (Docker's own cache makes a rebuild cheap); its tag."""
    require_docker()
    key = context_digest(context)[:16]
    tag = f"tackroom/{context.parent.name.lower()}:{key}"
    if _docker("image", "inspect", tag, check=False).returncode == 0:
        return tag
    proc = _docker("build", "-t", tag, "-f", str(dockerfile), str(context),
                   timeout=BUILD_TIMEOUT_S, check=False)
    if log is not None:
        log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise InfraError("docker build failed: " + " ".join(proc.stderr.split())[-300:],
                         str(dockerfile), "see the build's output above")
    return tag


class Container:
    """One episode's container: started on :meth:`start`, removed on :meth:`close`."""

    def __init__(self, image: str, *, memory_mb: int, processes: int, workdir: str,
                 env: Mapping[str, str]) -> None:
        require_docker()
        if _docker("network", "inspect", NETWORK, check=False).returncode != 0:
            _docker("network", "create", "--internal", NETWORK, check=False)
        self.name = f"tackroom-{uuid.uuid4().hex[:12]}"
        self.workdir = workdir
        args = ["run", "-d", "--name", self.name, "--network", NETWORK,
                "--memory", f"{memory_mb}m", "--pids-limit", str(max(processes, 64)),
                "--entrypoint", "sleep"]
        for key, value in env.items():
            args += ["-e", f"{key}={value}"]
        _docker(*args, image, "infinity")

    def _exec(self, mode: str, argv: list[str], env: Mapping[str, str], cwd: str) -> list[str]:
        out = ["exec", mode, "-w", cwd]
        for key, value in env.items():
            out += ["-e", f"{key}={value}"]
        return [*out, self.name, *argv]

    def exec_argv(self, argv: list[str], env: Mapping[str, str], cwd: str) -> list[str]:
        """The ``docker exec`` command line running ``argv`` in the container."""
        return ["docker", *self._exec("-i", argv, env, cwd)]

    def exec_detached(self, argv: list[str], env: Mapping[str, str], cwd: str) -> None:
        """Start ``argv`` in the container in the background (a task's service)."""
        _docker(*self._exec("-d", argv, env, cwd))

    def sandbox(self, limits: Limits, *, cwd: str,
                binds: Mapping[str, Path] = {}) -> Sandbox:  # noqa: B006
        """A sandbox whose commands ``docker exec`` in this container."""
        return DockerSandbox(self, limits, cwd=cwd, binds=binds)

    def copy_in(self, host: Path, inside: str) -> None:
        """Copy the host directory ``host`` into the container at ``inside``."""
        _docker("exec", self.name, "mkdir", "-p", inside)
        _docker("cp", f"{host}/.", f"{self.name}:{inside}")

    def copy_out(self, inside: str, host: Path) -> None:
        """Copy the container's ``inside`` to ``host`` (special files left behind)."""
        with tempfile.TemporaryDirectory() as tmp:
            if _docker("cp", f"{self.name}:{inside}/.", tmp, check=False).returncode == 0:
                copy_tree(tmp, host)

    @contextlib.contextmanager
    def online(self) -> Iterator[None]:
        """Reach the network (the default bridge) for as long as the block runs."""
        _docker("network", "connect", "bridge", self.name)
        try:
            yield
        finally:
            _docker("network", "disconnect", "bridge", self.name, check=False)

    def close(self) -> None:
        """Remove the container."""
        _docker("rm", "-f", self.name, check=False)


class DockerSandbox(ProcessSandbox):
    """A :class:`~tackroom.sandbox.Sandbox` whose commands ``docker exec`` in a container.

    ``binds`` are copied in when it opens and back out when it closes; a
    command's wall time is enforced inside the container too (``timeout -s
    KILL``), since killing the ``docker exec`` client would not stop it.
    """

    def __init__(self, container: Container, limits: Limits, *, cwd: str,
                 binds: Mapping[str, Path] = {}) -> None:  # noqa: B006
        self.container = container
        self.limits = limits
        self.binds = {k: Path(v) for k, v in binds.items()}
        self.cwd = cwd
        self.workdir = Path(tempfile.gettempdir())  # the docker client's own cwd
        self._closed = False
        self._timeout = limits.wall_s
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

    def _env(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        return dict(extra or {})  # the image's ENV is the container's already

    def argv(self, argv: list[str], env: Mapping[str, str] | None = None) -> list[str]:
        timed = ["timeout", "-s", "KILL", f"{max(1.0, self._timeout):.0f}", *argv]
        return self.container.exec_argv(timed, self._env(env), self.cwd)

    def popen(self, argv: list[str], env: Mapping[str, str] | None = None,
              **kwargs: Any) -> subprocess.Popen:
        if self._closed:
            raise InfraError("sandbox is closed", self.container.name)
        return subprocess.Popen(self.argv(argv, env), cwd=self.workdir,  # noqa: S603
                                start_new_session=True, **kwargs)

    def run(self, command: str, *, timeout_s: float | None = None, stdin: str | None = None,
            env: Mapping[str, str] | None = None) -> CommandResult:
        self._timeout = self.limits.wall_s if timeout_s is None else timeout_s
        return super().run(command, timeout_s=timeout_s, stdin=stdin, env=env)

    def _which_limit(self, code: int, stderr: str) -> str | None:
        if code == 137:
            return "memory"  # the kernel's OOM killer (our own timeout shows as timed out)
        return limit_in_output(code, stderr)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for inside, host in self.binds.items():
            if inside != "/tests" and inside != "/solution":
                self.container.copy_out(inside, host)


class Docker:
    """``--sandbox docker``: a task with a Dockerfile is built by ``docker build`` and each
    episode is a container of it (:class:`Container`); tasks without one use bubblewrap."""

    name = "docker"
    runs_images = True

    def unavailable(self) -> str | None:
        return docker_unavailable()

    def require(self) -> None:
        require_docker()

    def container(self, dockerfile: Path, *, limits: Limits, workdir: str,
                  env: Mapping[str, str]) -> Container:
        tag = build(dockerfile, dockerfile.parent)
        return Container(tag, memory_mb=limits.memory_mb, processes=limits.processes,
                         workdir=workdir, env=env)


#: The Docker provider, registered as ``docker``.
DOCKER = register("sandbox", summary="docker build and docker exec, for users with a Docker "
                  "daemon (tasks without a Dockerfile still use bubblewrap)")(Docker())
