"""A compose service of another image (``image: postgres``) running beside one episode.

The image is stood in for by a Debian root file system with the server's packages
(:mod:`tackroom.images.services`), built once and cached by content like the task
bases, its progress on stderr. Each episode's service gets a tree of its own over it (a
writable layer on a tmpfs, dropped with the episode: every episode starts from an empty
database) and runs there:

* **bubblewrap**: in a sandbox of its own, as the root of its own user namespace, that
  joins the episode's network namespace (only a loopback, shared with the agent's
  sandboxes and the verifier);
* **Docker**: as a container of that root file system imported into the daemon,
  ``--network container:EPISODE`` (the episode container's namespace: no route out).

It is ready when its image's check (``pg_isready``, ``redis-cli ping``, …) answers, run
beside it; one that exits first, or is not ready in :data:`READY_S`, is an
:class:`~tackroom.core.errors.InfraError` naming the service and the check.
"""

from __future__ import annotations

import functools
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

from tackroom.core.errors import InfraError
from tackroom.images.build import Progress, ensure_base
from tackroom.images.egress import enter as enter_netns
from tackroom.images.overlay import EpisodeRoot
from tackroom.sandbox import BubblewrapSandbox, Container, Limits, kill
from tackroom.suites.terminal.compose import Service

#: Seconds a service has to pass its readiness check (a database initialises its files).
READY_S = 90.0
#: A service's own limits: its tree's writable layer, its address space, its processes.
SERVICE_LIMITS = Limits(wall_s=24 * 3600, memory_mb=4096, processes=512, disk_mb=1024)


def _progress(name: str) -> Progress:
    """Build progress on stderr, as the agent layers show theirs."""
    def say(message: str) -> None:
        print(f"service image {name}: {message}", file=sys.stderr, flush=True)
    return say


def open_low_ports(netns: int) -> None:
    """Let any user of the network namespace ``netns`` listen on ports below 1024.

    The namespace belongs to this machine's root, so a sandbox's root (of a user namespace
    of its own) may not bind nginx's port 80 in it; Docker's containers may (Docker sets the
    same sysctl in theirs). The setting is the namespace's own: it touches nothing else.
    """
    proc = subprocess.run(  # noqa: S603 - fixed argv
        ["sh", "-c", "echo 0 > /proc/sys/net/ipv4/ip_unprivileged_port_start"],
        preexec_fn=functools.partial(enter_netns, netns), pass_fds=(netns,),
        capture_output=True, text=True, timeout=30, check=False)
    if proc.returncode != 0:
        raise InfraError("cannot open the ports below 1024 in the episode's network namespace: "
                         + " ".join(proc.stderr.split())[:200], "services")


class ImageService:
    """One compose service of a mapped image, started when made; :meth:`close` ends it.

    ``hosts`` is the ``/etc/hosts`` line that makes the services' names resolve to the
    loopback; ``log`` receives the server's output. Give ``netns`` (the episode's network
    namespace) under bubblewrap, ``container`` (the episode's) under Docker.
    """

    def __init__(self, svc: Service, *, hosts: str, log: Path, netns: int | None = None,
                 container: Container | None = None) -> None:
        runs = svc.runs
        assert runs is not None, "a service of a mapped image"
        self.svc, self.runs, self.log_path = svc, runs, log
        self.where = f"service {svc.name!r} ({svc.image})"
        self._dir: Path | None = None
        self._root: EpisodeRoot | None = None
        self._box: BubblewrapSandbox | None = None
        self._proc: subprocess.Popen | None = None
        self._log: IO[bytes] | None = None
        self._container: str | None = None
        # A Debian root file system has no /etc/hosts (an image's is Docker's): the server's
        # own tools look up localhost, and the services find each other by name.
        lines = f"127.0.0.1 localhost\n::1 localhost\n{hosts}"
        script = f"echo {shlex.quote(lines)} >> /etc/hosts 2>/dev/null || true\n{runs.start}"
        argv = ["bash", "-c", script, runs.name, *svc.argv]
        try:
            if container is not None:
                self._start_docker(container, argv)
            else:
                self._start_bwrap(netns, argv)
        except BaseException:
            self.close()
            raise

    def _start_bwrap(self, netns: int | None, argv: list[str]) -> None:
        image = ensure_base(self.runs.base(), _progress(self.runs.name))
        if netns is not None:
            open_low_ports(netns)
        self._root = EpisodeRoot(image.layers, SERVICE_LIMITS.disk_mb)
        self._dir = Path(tempfile.mkdtemp(prefix=f"tackroom-service-{self.runs.name}-"))
        self._box = BubblewrapSandbox(self._dir, SERVICE_LIMITS, root=self._root.path, cwd="/",
                                      netns=netns)
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in close()
        self._proc = self._box.popen(argv, {**image.env, **self.svc.env},
                                     stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT)

    def _start_docker(self, container: Container, argv: list[str]) -> None:
        # Imported here: the daemon's modules are needed only with Docker.
        from tackroom.images.daemon import base_image, docker
        from tackroom.sandbox.docker import Container as DockerContainer

        if not isinstance(container, DockerContainer):  # joined by its name, below
            raise InfraError(f"{self.where} runs only with bubblewrap or Docker",
                             "docker-compose.yaml", "run the task with --sandbox docker")
        tag = base_image(self.runs.base(), _progress(self.runs.name))
        name = f"{container.name}-{self.svc.name}"
        mb = SERVICE_LIMITS.memory_mb
        args = ["run", "-d", "--name", name, "--network", f"container:{container.name}",
                "--memory", f"{mb}m", "--memory-swap", f"{mb}m",
                "--pids-limit", str(SERVICE_LIMITS.processes), "--entrypoint", argv[0]]
        for key, value in self.svc.env.items():
            args += ["-e", f"{key}={value}"]
        docker(*args, tag, *argv[1:], where=self.where)
        self._container = name

    # -- readiness ------------------------------------------------------------------------

    def wait_ready(self, timeout_s: float = READY_S) -> None:
        """Return once the readiness check passes; :class:`InfraError` (one line) if the
        server exits first or does not pass it within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            code = self._exited()
            # The log goes with the episode's directory: its tail is in the message.
            if code is not None:
                raise InfraError(f"{self.where} exited ({code}) before `{self.runs.check}` "
                                 f"answered: {self._tail()!r}", "docker-compose.yaml",
                                 "check the service's environment and command")
            if self._ready():
                return
            if time.monotonic() >= deadline:
                raise InfraError(f"{self.where} was not ready within {timeout_s:.0f} s: "
                                 f"`{self.runs.check}` did not answer; its output: "
                                 f"{self._tail()!r}", "docker-compose.yaml",
                                 "check the service's environment and command")
            time.sleep(0.25)

    def _ready(self) -> bool:
        if self._box is not None:
            return self._box.run(self.runs.ready, timeout_s=10).exit_code == 0
        from tackroom.images.daemon import docker

        assert self._container is not None
        return docker("exec", self._container, "bash", "-c", self.runs.ready, timeout=30,
                      check=False).returncode == 0

    def _exited(self) -> int | None:
        if self._proc is not None:
            return self._proc.poll()
        from tackroom.images.daemon import docker

        assert self._container is not None
        state = docker("inspect", "-f", "{{.State.Running}} {{.State.ExitCode}}",
                       self._container, check=False).stdout.decode().split()
        return None if not state or state[0] == "true" else int(state[-1])

    def _tail(self, size: int = 300) -> str:
        if self._container is not None:
            from tackroom.images.daemon import docker

            proc = docker("logs", "--tail", "20", self._container, check=False)
            text = (proc.stdout + proc.stderr).decode(errors="replace")
        else:
            if self._log is not None:
                self._log.flush()
            text = self.log_path.read_text(errors="replace") if self.log_path.is_file() else ""
        return " ".join(text.split())[-size:]

    def close(self) -> None:
        """Stop the server and drop its tree."""
        if self._proc is not None:
            kill(self._proc)  # its sandbox has a pid namespace of its own: all of it ends
            self._proc.wait()
            self._proc = None
        if self._box is not None:
            self._box.close()
            self._box = None
        if self._root is not None:
            self._root.close()
            self._root = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        if self._container is not None:
            from tackroom.images.daemon import docker

            docker("rm", "-f", self._container, check=False)
            self._container = None

