"""The terminal environment: one task directory, one sandbox, one episode.

Actions:

* ``Shell(cmd)`` runs ``bash -c cmd`` to completion in a fresh process (state
  that lives in files persists; ``cd`` and variables do not) and shows its
  output and exit code;
* ``TypeText(keys)`` / ``Press(key)`` type into a persistent interactive
  shell (started on first use) and show its screen;
* ``Submit()`` ends the episode: the task's ``tests/test.sh`` runs in a fresh
  sandbox against the task directory and its reward (1.0 = solved) decides.

When the episode's own wall time (``task.toml``'s ``[agent] timeout_sec``)
runs out, the tests run the same way and the episode ends, truncated.

A task with a built environment (:attr:`TaskDir.builds`) runs on its image:
each episode gets an :class:`~tackroom.images.overlay.EpisodeRoot` over the
image's layers, every sandbox of the episode (commands, the shell session, the
verifier) runs on it as its ``/``, and the verifier's layer (the tests' own
installs) is slid under it only while the tests run.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from tackroom.core.actions import Action, Press, RunAgent, Shell, Submit, TypeText
from tackroom.core.errors import ActionError, InfraError
from tackroom.core.observation import Observation
from tackroom.core.task import StepResult, Task
from tackroom.images.build import resolve_inside
from tackroom.images.egress import loopback_namespace
from tackroom.images.overlay import EpisodeRoot, bind, unmount
from tackroom.sandbox import (
    DEFAULT,
    BubblewrapSandbox,
    CommandResult,
    Container,
    Limits,
    Sandbox,
    kill,
    provider,
    run_agent,
)
from tackroom.suites.terminal.compose import Service
from tackroom.suites.terminal.environment import Prepared, prepare, split_tests
from tackroom.suites.terminal.image_services import ImageService
from tackroom.suites.terminal.shell_session import KEYS, ShellSession
from tackroom.suites.terminal.taskdir import TaskDir
from tackroom.suites.terminal.verdict import (
    MISSING_LOG,
    VERIFIER_OUTPUT_LIMIT,
    Verdict,
    not_found,
    not_found_env,
    read_ctrf,
    read_reward,
)

#: Characters of command output shown per command.
OUTPUT_LIMIT = 6000
#: Seconds a task's service has to start listening.
SERVICE_START_S = 30.0


class TerminalEnv:
    """A live terminal task; ``reset`` lays the task out, ``step`` runs actions."""

    blocking = True
    #: The tests run whenever the agent stops, its budget used up included (Terminal-Bench's
    #: rule; the runner calls ``step(Submit())`` then).
    verifies_on_stop = True

    def __init__(self, task: Task, td: TaskDir, *, unsafe_local: bool = False,
                 sandbox: str = DEFAULT) -> None:
        self.task = task
        self.td = td
        self.unsafe_local = unsafe_local
        #: The sandbox provider (``--sandbox``); one that runs images itself (Docker) runs a
        #: task with a Dockerfile in a container of its own.
        self.provider = provider(sandbox)
        self.container: Container | None = None
        self.sandbox: Sandbox | None = None
        self.session: ShellSession | None = None
        self._tmp: Path | None = None
        self._started = 0.0
        self.done = False
        self.root: EpisodeRoot | None = None  # the episode's tree, on a built environment
        self.prepared: Prepared | None = None
        self.netns: int | None = None  # shared with the task's services, when it has some
        self._services: list[tuple[Service, Sandbox | ImageService | None,
                                   subprocess.Popen | None, Any]] = []

    # -- set-up -----------------------------------------------------------------------
    @property
    def limits(self) -> Limits:
        td = self.td
        return Limits(wall_s=td.command_timeout_s, memory_mb=td.memory_mb, disk_mb=td.disk_mb,
                      episode_wall_s=td.agent_timeout_s)

    @property
    def builds_image(self) -> bool:
        """Whether episodes run on an environment built from the task's Dockerfile, here or
        by the Docker daemon (an agent CLI then runs on an agent layer mounted into it, not
        on this machine's system)."""
        if self.provider.runs_images:
            return self.td.dockerfile is not None  # a container of it (see reset)
        return bool(self.td.builds)

    @property
    def workdir(self) -> Path:
        """The task's working directory on the host (in the episode's tree when built)."""
        assert self._tmp is not None, "reset() first"
        if self.container is not None:
            return self._tmp / "task"  # a copy, for listing (see reset)
        if self.root is not None:
            return resolve_inside(self.root.path, self.td.workdir)
        return self._tmp / "task"

    def _sandbox(self, limits: Limits, binds: dict[str, Path] | None = None) -> Sandbox:
        """A sandbox on the task directory, also mounted at the task's own working dir."""
        if self.container is not None:
            return self.container.sandbox(limits, cwd=self.td.workdir, binds=binds or {})
        if self.root is not None:
            return BubblewrapSandbox(self.workdir, limits, binds=binds or {},
                                     root=self.root.path, cwd=self.td.workdir, netns=self.netns)
        mounts = dict(binds or {})
        if self.td.workdir != "/task":
            mounts[self.td.workdir] = self.workdir
        return BubblewrapSandbox(self.workdir, limits, unsafe_local=self.unsafe_local,
                                 binds=mounts)

    def reset(self, seed: int) -> Observation:
        """Lay the task out in a fresh directory and open its sandbox (``seed`` is unused)."""
        self.close()
        self._tmp = Path(tempfile.mkdtemp(prefix=f"tackroom-{self.td.id}-"))
        os.chmod(self._tmp, 0o711)  # a built environment's uid reaches the binds below it
        (self._tmp / "tmp").mkdir()
        services = self.td.compose().services if self.td.dockerfile is not None else ()
        if self.provider.runs_images and self.td.dockerfile is not None:
            self.container = self.provider.container(self.td.dockerfile, limits=self.limits,
                                                     workdir=self.td.workdir, env=self.td.env)
            if self.td.workdir != "/":  # a copy of the task's files, for the listing below
                self.container.copy_out(self.td.workdir, self.workdir)
            self.workdir.mkdir(exist_ok=True)
        elif self.td.builds:
            self.prepared = prepare(self.td)
            # Services run through the tests too: their tree gets the tests' layer from the
            # start (sliding it in later would cut them off from what they serve).
            layers = (self.prepared.verify if services else self.prepared.image).layers
            self.root = EpisodeRoot(layers, self.td.disk_mb)
            self.workdir.mkdir(parents=True, exist_ok=True)
            if services:
                self.netns = loopback_namespace()
        else:
            self.workdir.mkdir()
            self.td.lay_out(self.workdir)
        self.sandbox = self._sandbox(self.limits)
        if services:
            self._start_services(services)
        for cmd in self.td.setup:
            res = self.sandbox.run(self._local(f"cd {self.td.workdir} && {cmd}"),
                                   timeout_s=max(self.td.verifier_timeout_s, 30.0),
                                   env=self._env())
            if res.exit_code != 0:
                raise InfraError(f"the task's environment set-up failed (exit {res.exit_code}): "
                                 f"{res.output(300)!r}", str(self.td.path / "environment"),
                                 "fix the Dockerfile's RUN command")
        self.done = False
        self._started = time.monotonic()
        names = sorted(p.name + ("/" if p.is_dir() else "") for p in self.workdir.iterdir())
        listing = "  ".join(names) if names else "(empty)"
        obs = self._obs(f"Working directory: {self.td.workdir}\nFiles: {listing}\n")
        # The task's files, for an agent CLI that is told which files to work on.
        obs.extra["files"] = _some_files(self.workdir, 200)
        return obs

    def _obs(self, text: str) -> Observation:
        lim = self.limits
        left = max(0.0, lim.episode_wall_s - (time.monotonic() - self._started))
        return Observation(instruction=self.td.instruction.strip(), text=text, extra={
            "command_timeout_s": lim.wall_s, "episode_timeout_s": lim.episode_wall_s,
            "episode_left_s": round(left, 1), "memory_mb": lim.memory_mb,
            "disk_mb": lim.disk_mb, "workdir": self.td.workdir})

    def _env(self) -> dict[str, str]:
        """The task's ``ENV`` settings (and, without a sandbox, a private TMPDIR)."""
        if self.prepared is not None and self.root is not None:
            return {**self.prepared.image.env, **self.td.env}
        if self.unsafe_local and self._tmp is not None:
            return {**self.td.env, "TMPDIR": str(self._tmp / "tmp")}
        return dict(self.td.env)

    def _local(self, script: str, binds: dict[str, Path] | None = None) -> str:
        """Map sandbox paths to host paths when there is no sandbox (``--unsafe-local``)."""
        if not self.unsafe_local:
            return script
        hosts = {"/task": str(self.workdir), self.td.workdir: str(self.workdir),
                 "/tmp": str(self.workdir.parent / "tmp"),  # the sandbox's /tmp is its own
                 **{k: str(v) for k, v in (binds or {}).items()}}
        alts = "|".join(re.escape(p) for p in sorted(hosts, key=len, reverse=True))
        # One pass, so that a host path put in is never rewritten again.
        return re.sub(rf"(?<![\w.-])({alts})(?=[/\s'\";)]|$)",
                      lambda m: hosts[m.group(1)], script, flags=re.M)

    def _localize_dir(self, folder: Path, binds: dict[str, Path]) -> None:
        """Rewrite sandbox paths in the text files of a copied tests/ or solution/ folder."""
        if not self.unsafe_local:
            return
        for f in folder.rglob("*"):
            try:
                if f.is_file() and not f.is_symlink():
                    f.write_text(self._local(f.read_text(), binds))
            except (UnicodeDecodeError, OSError):
                continue

    # -- acting -----------------------------------------------------------------------
    def _left(self) -> float:
        return self.limits.episode_wall_s - (time.monotonic() - self._started)

    def step(self, action: Action) -> StepResult:
        if self.sandbox is None or self.done:
            raise ActionError("the episode is over; call reset(seed) to start a new one")
        if self._left() <= 0:
            return self._finish(truncated=True)
        if isinstance(action, Submit):
            return self._finish(truncated=False)
        if isinstance(action, Shell):
            timeout = max(0.1, min(self.limits.wall_s, self._left()))
            res = self.sandbox.run(self._local(action.cmd), timeout_s=timeout, env=self._env())
            text = _show(action.cmd, res)
        elif isinstance(action, (TypeText, Press)):
            text = self._type(action)
        elif isinstance(action, RunAgent):
            return self._run_agent(action)
        else:
            raise ActionError(f"the terminal suite does not support {action.kind!r} actions; "
                              "run shell commands, type keys, or submit")
        if self._left() <= 0:
            return self._finish(truncated=True)
        return StepResult(self._obs(text), 0.0, False)

    def _run_agent(self, action: RunAgent) -> StepResult:
        """An agent CLI in a sandbox of its own over the task directory, then this one again."""
        assert self.sandbox is not None
        self.sandbox.close()
        timeout = max(1.0, min(action.timeout_s, self._left()))
        if self.container is not None:
            # In the episode's container, where the verifier runs next: the agent layer and a
            # fresh home are attached to it only while the CLI runs (tackroom/sandbox/docker.py).
            res = self.container.run_agent(replace(action, timeout_s=timeout), self.limits,
                                           cwd=self.td.workdir, env=self._env())
        elif self.root is not None:
            # On the image's tree, the CLI's own runtime mounted over it (an agent layer,
            # tackroom/images/agent_layer.py). Mounted here, by this process: the sandbox's
            # uid cannot reach the cache. The mount points are made in the episode's tree and
            # removed afterwards: the verifier never sees them.
            made = _missing_tops(self.root.path, [*action.ro_binds, action.home])
            mounted: list[Path] = []
            try:
                for inside, host in action.ro_binds.items():
                    target = resolve_inside(self.root.path, inside)
                    bind(Path(host), target, read_only=True)
                    mounted.append(target)
                res = run_agent(replace(action, ro_binds={}, timeout_s=timeout), self.workdir,
                                self.limits, cwd=self.td.workdir, env=self._env(),
                                root=self.root.path, netns=self.netns)
            finally:
                for target in reversed(mounted):
                    unmount(target)
                for path in made:
                    shutil.rmtree(path, ignore_errors=True)
        else:
            mounts = {self.td.workdir: self.workdir} if self.td.workdir != "/task" else {}
            res = run_agent(replace(action, timeout_s=timeout), self.workdir, self.limits,
                            cwd=self.td.workdir, binds=mounts, unsafe_local=self.unsafe_local,
                            env=self._env())
        self.sandbox = self._sandbox(self.limits)
        return StepResult(self._obs(res.output(OUTPUT_LIMIT)), 0.0, False,
                          info={"agent": res.record(VERIFIER_OUTPUT_LIMIT)})

    def _type(self, action: TypeText | Press) -> str:
        if isinstance(action, Press):
            data = KEYS.get(action.key)
            if data is None:
                raise ActionError(f"unknown key {action.key!r}; keys: {', '.join(KEYS)}")
            wait = 1.0
        else:
            data = self._local(action.text).encode(errors="replace")
            # The keystroke harness says how long to wait (TypeKeys.wait_s); capped at wall_s.
            wait = float(getattr(action, "wait_s", self.limits.wall_s))
        assert self.sandbox is not None
        if self.session is None:
            self.session = ShellSession(self.sandbox, env=self._env())
        self.session.send(data, min(wait, max(0.1, self._left())))
        return self.session.screen

    # -- verifying --------------------------------------------------------------------
    def _finish(self, truncated: bool) -> StepResult:
        """Stop the agent's processes, run the tests, end the episode with their reward."""
        self.done = True
        if self.session is not None:
            self.session.wait_idle(max(0.0, min(self.limits.wall_s, self._left())))
            self.session.close()
            self.session = None
        assert self.sandbox is not None
        self.sandbox.close()
        verdict = self.verify()
        reward, res = verdict.reward, verdict.result
        output = res.output(VERIFIER_OUTPUT_LIMIT)
        if verdict.missing:
            # The verifier's own tool is absent: nothing was judged, so it is not a failure.
            raise InfraError(f"the task's verifier could not run (exit {res.exit_code}: "
                             f"{verdict.missing}); its output: {output[-500:].strip()}",
                             str(self.td.path / "tests" / "test.sh"),
                             "give the task's environment what tests/test.sh runs (its "
                             "Dockerfile's packages), or check it with `tackroom tasks import`")
        info: dict[str, Any] = {"verifier": {"exit": res.exit_code, "output": output,
                                             "timed_out": res.timed_out}}
        if verdict.ctrf is not None:  # the test-by-test report Harbor's verifiers write
            info["verifier"]["ctrf"] = verdict.ctrf
        if self.td.verifier_env:  # names only: the values are task.toml's
            info["verifier"]["env"] = sorted(self.td.verifier_env)
        if self.td.notes:  # what task.toml asked that the episode ran otherwise
            info["verifier"]["notes"] = list(self.td.notes)
        text = f"Tests finished: reward {reward:g}.\n"
        return StepResult(self._obs(text), reward, not truncated, truncated, reward >= 1.0, info)

    def verify(self) -> Verdict:
        """Run ``tests/test.sh`` in a fresh sandbox on the task directory: its reward, how it
        ran, and what it could not run (:mod:`tackroom.suites.terminal.verdict`)."""
        assert self._tmp is not None
        tests, logs = self._tmp / "tests", self._tmp / "logs"
        shutil.rmtree(tests, ignore_errors=True)
        shutil.rmtree(logs, ignore_errors=True)
        shutil.copytree(self.td.tests, tests)
        (logs / "verifier").mkdir(parents=True)
        limits = Limits(wall_s=self.td.verifier_timeout_s, memory_mb=max(self.td.memory_mb, 512),
                        disk_mb=self.td.disk_mb)
        binds = {"/tests": tests, "/logs": logs}
        self._localize_dir(tests, binds)
        # On a built tree without services, the tests' layer is slid in for the tests only.
        slide = (self.root, self.prepared) if not self._services else (None, None)
        if self.root is not None and self.prepared is not None:
            for name, text in self.prepared.scripts.items():  # installs done at build time
                (tests / name).write_text(text)
        root, prepared = slide
        if root is not None and prepared is not None:
            root.remount(prepared.verify.layers)
        if self.container is not None:
            self._install_test_tools(tests)
        try:
            with self._sandbox(limits, binds) as box:
                self.sandbox = box
                res = box.run(self._local(f"cd {self.td.workdir} && bash /tests/test.sh", binds),
                              env={**self._env(), **self.td.verifier_env,
                                   **not_found_env(self._local(f"/logs/{MISSING_LOG}", binds))})
        finally:
            if root is not None and prepared is not None:
                root.remount(prepared.image.layers)
        # What the script could not run decides before its reward: a verifier that judged
        # nothing may have written any number.
        missing = not_found(logs, res)
        reward = 0.0 if missing else read_reward(logs / "verifier",
                                                 str(self.td.path / "tests" / "test.sh"))
        return Verdict(reward, res, missing, read_ctrf(logs / "verifier"))

    def _start_services(self, services: tuple[Service, ...]) -> None:
        """Start the task's services (programs of its image) and wait for their ports.

        Their names resolve to ``127.0.0.1`` (a line of the tree's ``/etc/hosts``);
        each runs in a sandbox of its own on the episode's tree and network
        namespace, its output kept in a log of its own, until the episode ends.
        """
        assert self.sandbox is not None and self._tmp is not None
        hosts = f"127.0.0.1 {' '.join(s.name for s in services)}"
        self.sandbox.run(f"echo {shlex.quote(hosts)} >> /etc/hosts")
        life = Limits(wall_s=self.td.agent_timeout_s + self.td.verifier_timeout_s + 600,
                      memory_mb=self.td.memory_mb, disk_mb=self.td.disk_mb)
        for svc in services:
            if svc.image:  # another image's server, on a tree of its own (image_services.py)
                self._services.append((svc, ImageService(
                    svc, hosts=hosts, log=self._tmp / f"service-{svc.name}.log",
                    netns=self.netns, container=self.container), None, None))
                continue
            cwd = svc.workdir or self.td.workdir
            if self.container is not None:
                self.container.exec_detached(list(svc.argv), svc.env, cwd)
                self._services.append((svc, None, None, None))
                continue
            assert self.root is not None
            log = open(self._tmp / f"service-{svc.name}.log", "wb")  # noqa: SIM115 - closed in close()
            box = BubblewrapSandbox(self.workdir, life, root=self.root.path, cwd=cwd,
                                    netns=self.netns)
            proc = box.popen(list(svc.argv), {**self._env(), **svc.env},
                             stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
            self._services.append((svc, box, proc, log))
        for svc, server, started, _log in self._services:
            if isinstance(server, ImageService):
                server.wait_ready()
            for port in svc.ports:
                self._wait_for(svc, started, port)

    def _wait_for(self, svc: Service, proc: subprocess.Popen | None, port: int) -> None:
        assert self.sandbox is not None and self._tmp is not None
        deadline = time.monotonic() + SERVICE_START_S
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                log = (self._tmp / f"service-{svc.name}.log").read_text(errors="replace")
                raise InfraError(f"the task's service {svc.name!r} exited ({proc.returncode}) "
                                 f"before listening on {port}: {log[-300:]!r}",
                                 str(self.td.path), "fix the service's command")
            probe = self.sandbox.run(f"(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null",
                                     timeout_s=5)
            if probe.exit_code == 0:
                return
            time.sleep(0.2)
        raise InfraError(f"the task's service {svc.name!r} did not listen on {port} within "
                         f"{SERVICE_START_S:.0f} s", str(self.td.path), "check its command")

    def _stop_services(self) -> None:
        for _svc, box, proc, log in self._services:
            if proc is not None:
                kill(proc)  # its sandbox has a pid namespace of its own: all of it ends
                proc.wait()
            if box is not None:
                box.close()
            if log is not None:
                log.close()
        self._services.clear()
        if self.netns is not None:
            os.close(self.netns)
            self.netns = None

    def _install_test_tools(self, tests: Path) -> None:
        """With Docker: the tests' own installs, built once (as for bubblewrap) and put into
        the container before the tests, which run without them."""
        assert self.container is not None
        scripts, install, _ = split_tests(tests)
        if not install:
            return
        self.container.install_tests(self.td.tests, install, {**self._env(), "TEST_DIR": "/tests"})
        for name, text in scripts.items():
            (tests / name).write_text(text)

    def run_solution(self) -> CommandResult:
        """Run ``solution/solve.sh`` in the sandbox (for checking a task, not for agents)."""
        if self.td.solution is None or self.sandbox is None:
            raise InfraError("the task has no solution/solve.sh", str(self.td.path))
        assert self._tmp is not None
        solution = self._tmp / "solution"
        shutil.copytree(self.td.solution.parent, solution, dirs_exist_ok=True)
        self.sandbox.close()
        binds = {"/solution": solution}
        self._localize_dir(solution, binds)
        with self._sandbox(self.limits, binds) as box:
            self.sandbox = box
            res = box.run(self._local(f"cd {self.td.workdir} && bash /solution/solve.sh", binds),
                          timeout_s=max(self.td.verifier_timeout_s, self.limits.wall_s),
                          env={**self._env(), **self.td.solution_env})
        self.sandbox = self._sandbox(self.limits)
        return res

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None
        self._stop_services()
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None
        if self.root is not None:
            self.root.close()
            self.root = None
        if self.container is not None:
            self.container.close()
            self.container = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


def _missing_tops(root: Path, paths: list[str]) -> list[Path]:
    """For each sandbox path, the topmost directory of it that ``root`` lacks (host paths)."""
    tops: list[Path] = []
    for inside in paths:
        parts = [p for p in inside.split("/") if p]
        for i in range(1, len(parts) + 1):
            host = resolve_inside(root, "/" + "/".join(parts[:i]))
            if not host.exists() and not host.is_symlink():
                tops.append(host)
                break
    return sorted(set(tops))


def _some_files(root: Path, limit: int) -> list[str]:
    """Up to ``limit`` file paths under ``root``, relative, sorted (a walk that stops early:
    a built environment's working directory may be ``/``)."""
    found: list[str] = []
    for top, dirs, files in os.walk(root):
        dirs.sort()
        found += (str(Path(top, f).relative_to(root)) for f in sorted(files))
        if len(found) >= limit * 5:
            break
    return sorted(found)[:limit]


def _show(cmd: str, res: CommandResult) -> str:
    """A command and its result as the model sees them."""
    shown = cmd if len(cmd) <= 400 else cmd[:400] + f" … ({len(cmd) - 400} more characters)"
    body = res.output(OUTPUT_LIMIT)
    status = f"[exit code {res.exit_code}]" if not res.timed_out else ""
    return f"$ {shown}\n{body}{'' if body.endswith(chr(10)) or not body else chr(10)}{status}"
