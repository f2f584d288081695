"""The sandbox contract: what every provider gives the suites that run task commands.

A *provider* (:class:`Provider`: bubblewrap, Docker, one a plug-in registers) says whether
it can run here and, for one that runs a task's own image itself, starts the task's
container. A *sandbox* (:class:`Sandbox`) is one open place where commands run: it is
started when made, runs commands to completion (:meth:`Sandbox.run`) or long-lived ones
(:meth:`Sandbox.popen`), copies directories in and out, holds its :class:`Limits`, and is
closed once. Suites use only this contract; which provider is used is chosen in one place,
:func:`tackroom.sandbox.provider` (``--sandbox NAME``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Self, runtime_checkable

from tackroom.core.actions import RunAgent
from tackroom.core.errors import TackroomError


@dataclass(frozen=True)
class Limits:
    """Resource limits of a sandbox.

    ``wall_s`` is per command; ``episode_wall_s`` is for a whole episode and
    is enforced by the environment that owns the sandbox, not here.
    """

    wall_s: float = 10.0
    memory_mb: int = 512
    processes: int = 64
    disk_mb: int = 64
    episode_wall_s: float = 300.0


@dataclass
class CommandResult:
    """What one command did.

    ``killed`` names the limit that stopped the command, best-effort:
    ``"timeout"``, ``"memory"``, ``"processes"``, ``"disk"`` or ``None``.
    """

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float
    killed: str | None = None

    def record(self, limit: int = 4000) -> dict[str, object]:
        """What the command did, as an episode records it (exit, limits hit, time, output)."""
        return {"exit": self.exit_code, "timed_out": self.timed_out, "killed": self.killed,
                "seconds": round(self.duration_s, 3), "output": self.output(limit)}

    def output(self, limit: int = 4000) -> str:
        """stdout then stderr, cut to ``limit`` characters with a marker, for the model.

        The head and the tail are kept (errors are usually at the end).
        """
        text = self.stdout
        if self.stderr:
            text = f"{text}\n{self.stderr}" if text and not text.endswith("\n") else text + self.stderr
        if limit > 0 and len(text) > limit:
            head = limit // 2
            tail = limit - head
            cut = len(text) - limit
            text = f"{text[:head]}\n[... {cut} characters cut ...]\n{text[-tail:]}"
        if self.killed == "timeout":
            text += f"\n[command timed out after {self.duration_s:.1f} s and was killed]"
        elif self.killed:
            text += f"\n[command hit the sandbox's {self.killed} limit]"
        return text


class SandboxUnavailable(TackroomError):
    """The chosen sandbox provider cannot run here (bubblewrap missing, no Docker daemon)."""


@runtime_checkable
class Sandbox(Protocol):
    """One open sandbox over a task directory (made = started; :meth:`close` once).

    Attributes:
        limits: wall time per command, memory, processes, disk.
    """

    limits: Limits

    @property
    def task_path(self) -> str:
        """Where commands see the task directory (their working directory)."""
        ...

    def path(self, sandbox_path: str) -> str:
        """The path at which commands see ``sandbox_path`` (identity when isolated)."""
        ...

    def run(self, command: str, *, timeout_s: float | None = None, stdin: str | None = None,
            env: Mapping[str, str] | None = None) -> CommandResult:
        """Run ``bash -c command`` to completion within the limits; never raises for the
        command's own faults (only when the sandbox itself fails)."""
        ...

    def popen(self, argv: list[str], env: Mapping[str, str] | None = None,
              **kwargs: Any) -> subprocess.Popen:
        """Start a long-lived ``argv`` in the sandbox, in its own process group (a shell
        session, a service); end it with :func:`tackroom.sandbox.kill`."""
        ...

    def copy_in(self, host: Path, inside: str) -> None:
        """Copy the host directory ``host`` to ``inside`` in the sandbox."""
        ...

    def copy_out(self, inside: str, host: Path) -> None:
        """Copy the sandbox's directory ``inside`` to ``host`` (regular files, directories
        and symlinks: special files made in a sandbox are never copied out)."""
        ...

    def close(self) -> None:
        """Release the sandbox, keeping what its commands wrote to the task directory."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...


class Container(Protocol):
    """A task's own image, running, for a provider that runs images itself (Docker)."""

    def sandbox(self, limits: Limits, *, cwd: str,
                binds: Mapping[str, Path] = ...) -> Sandbox:
        """A sandbox whose commands run in this container, ``binds`` copied in and out."""
        ...

    def exec_detached(self, argv: list[str], env: Mapping[str, str], cwd: str) -> None:
        """Start ``argv`` in the background (a task's service)."""
        ...

    def copy_out(self, inside: str, host: Path) -> None:
        """Copy the container's directory ``inside`` to ``host``."""
        ...

    def install_tests(self, tests: Path, script: str, env: Mapping[str, str]) -> None:
        """Give the container what ``script`` (the tests' installs, hoisted out of the test
        scripts) installs, before the tests run; the episode itself has no network."""
        ...

    def run_agent(self, action: RunAgent, limits: Limits, *, cwd: str,
                  env: Mapping[str, str]) -> CommandResult:
        """Run an agent program in this container, its mounts and a fresh home attached only
        while it runs (none of it left for the verifier)."""
        ...

    def close(self) -> None:
        """Remove the container."""
        ...


class Provider(Protocol):
    """A sandbox provider, registered under kind ``"sandbox"`` (``--sandbox NAME``).

    Attributes:
        name: what users write after ``--sandbox``.
        runs_images: whether it runs a task's Dockerfile image itself
            (:meth:`container`); otherwise tackroom builds the image
            (:mod:`tackroom.images`) and runs it in bubblewrap.
    """

    name: str
    runs_images: bool

    def unavailable(self) -> str | None:
        """Why this provider cannot run here (``None`` if it can); probed once."""
        ...

    def require(self) -> None:
        """Raise a one-line :class:`~tackroom.core.errors.TackroomError` saying why, unless
        this provider can run here."""
        ...

    def container(self, dockerfile: Path, *, limits: Limits, workdir: str,
                  env: Mapping[str, str]) -> Container:
        """Build the task's image from ``dockerfile`` and start one episode's container
        (only when :attr:`runs_images`)."""
        ...
