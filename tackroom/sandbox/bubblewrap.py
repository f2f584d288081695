"""The ``bubblewrap`` sandbox provider (the default): shell commands of a task in ``bwrap``.

Every command runs as ``bash -c COMMAND`` inside ``bwrap``: no network, a
read-only view of the system (``/usr``, ``/etc``, the ``/bin``-style links),
private ``/proc``, ``/dev`` and ``/tmp``, and one writable directory — the
task directory, mounted at ``/task`` — plus any extra ``binds``. Nothing of
``/root``, ``/home`` or ``/work`` is visible. Limits on wall time, address
space, processes and file size are set inside the sandbox (bash's ``ulimit``,
else ``prlimit``); a command that runs past its wall time is killed with its
whole process tree (the sandbox has its own pid namespace, so killing bwrap
ends everything).

Two ways to run, chosen once per machine:

* **as root** (the usual case in containers and CI): bwrap is privileged; it
  unshares the network, pid, ipc, uts and cgroup namespaces, and the command
  then drops to a fresh unprivileged uid (``setpriv``) with no capabilities.
  A fresh uid per sandbox is what makes ``RLIMIT_NPROC`` count only the
  sandbox's own processes (for root it counts nothing at all). The task
  directory is covered by a tmpfs of ``disk_mb`` while the sandbox is open,
  so filling it stops at the limit; ``close()`` copies its contents back.
* **as another user**: ``bwrap --unshare-all`` (a user namespace too), in
  which ``RLIMIT_NPROC`` counts per namespace; the disk limit is then
  ``RLIMIT_FSIZE`` per file plus a size check after each command.

A sandbox may also run on a **built environment** (``root=``: the merged
tree of an :class:`~tackroom.images.overlay.EpisodeRoot`, a task's image built
from its Dockerfile): the tree is its ``/`` instead of the host's ``/usr`` and
``/etc``, and its commands run as the root of a user namespace of their own
that maps the image's shifted uids (:mod:`tackroom.images.userns`) — root of
the task's files, an ordinary uid to the host — with no network, as always.

Without bwrap, :class:`BubblewrapSandbox` refuses to start unless ``unsafe_local=True``
(the CLI's ``--unsafe-local``), which runs commands directly on the host in
the task directory with the same rlimits and timeouts but *no isolation*.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tackroom.core.actions import RunAgent
from tackroom.core.errors import InfraError
from tackroom.core.registry import register
from tackroom.images.dockerfile import DOCKER_PATH
from tackroom.images.egress import enter as enter_netns
from tackroom.images.egress import thread_inside
from tackroom.images.overlay import MS_NODEV, MS_NOSUID, mount, unmount
from tackroom.images.userns import (
    IMAGE_UID,
    as_image_root,
    mapped_userns,
    thread_as_image_root,
    thread_creds_supported,
)
from tackroom.sandbox.contract import CommandResult, Container, Limits, SandboxUnavailable
from tackroom.sandbox.process import ProcessSandbox, child_setup, copy_tree, limit_in_output

#: Where the task directory appears inside the sandbox.
TASK_PATH = "/task"
#: The PATH commands see.
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Capabilities the root of a built environment keeps in its own namespace (Docker's
#: default set): enough to chown, install and kill its own processes, nothing of the host's.
IMAGE_CAPS = ("CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
              "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
              "CAP_SYS_CHROOT", "CAP_AUDIT_WRITE", "CAP_SETFCAP")
#: Sandbox uids are drawn from here; each sandbox gets its own (see module doc).
_UID_RANGE = (200_000, 1_200_000)


def _is_root() -> bool:
    return os.geteuid() == 0


@functools.cache
def _probe() -> str | None:
    """Why the sandbox cannot run here (``None`` if it can); run once per process."""
    for tool in ("bwrap", "prlimit", "bash") + (("setpriv",) if _is_root() else ()):
        if shutil.which(tool) is None:
            return f"'{tool}' is not installed"
    with tempfile.TemporaryDirectory(prefix="tackroom-probe-") as tmp:
        try:
            box = BubblewrapSandbox(Path(tmp), Limits(disk_mb=1), _probing=True)
            res = box.run("echo ok", timeout_s=20)
            box.close()
        except InfraError as exc:
            return exc.what
    if res.stdout.strip() != "ok":
        return f"a test command failed: {res.stderr.strip()[:200] or res.exit_code}"
    return None


def sandbox_available() -> bool:
    """Whether bubblewrap sandboxes work on this machine (probed once, cached)."""
    return _probe() is None


def require_sandbox() -> None:
    """Raise :class:`SandboxUnavailable` (saying why, and about ``--unsafe-local``) if needed."""
    reason = _probe()
    if reason is not None:
        raise _unavailable(reason)


def _unavailable(reason: str) -> SandboxUnavailable:
    return SandboxUnavailable(
        f"the bubblewrap sandbox is unavailable: {reason}", "sandbox",
        "install it (apt-get install bubblewrap) or pass --unsafe-local to run task "
        "commands directly on this machine without isolation")


def _system_binds() -> list[str]:
    """Read-only system mounts; ``/bin``-style paths kept as the links they are."""
    args = ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for name in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(name):
            args += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            args += ["--ro-bind", name, name]
    return args


def _parents(paths: list[str]) -> list[str]:
    """The directories above ``paths`` that the sandbox's root does not have yet, outermost
    first (``/opt/a/b`` -> ``/opt``, ``/opt/a``)."""
    # These exist in the sandbox with their own modes; /tmp is a fresh tmpfs, so what is
    # mounted below it (a cache under /tmp) needs its parents made like anywhere else.
    mounted = ("/usr", "/etc", "/proc", "/dev", TASK_PATH)
    out: list[str] = []
    for path in paths:
        parts = Path(path).parts[1:-1]
        for i in range(1, len(parts) + 1):
            d = "/" + "/".join(parts[:i])
            if d not in out and not any(d == m or d.startswith(m + "/") for m in mounted):
                out.append(d)
    return out


def _tree_size(path: Path) -> int:
    """Bytes used by regular files under ``path`` (symlinks not followed)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def _clear_dir(path: str) -> None:
    for entry in os.scandir(path):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)


def _chown_tree(path: Path, uid: int) -> None:
    os.lchown(path, uid, uid)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), uid, uid)


class BubblewrapSandbox(ProcessSandbox):
    """A task directory and the bubblewrap sandbox its commands run in.

    Args:
        workdir: the task directory on the host; mounted read-write at
            ``/task`` (see :attr:`task_path`), the working directory of
            every command.
        limits: wall time per command, memory, processes, disk.
        unsafe_local: run without bubblewrap, directly on the host (no
            isolation; rlimits and timeouts still apply). Only when asked.
        binds: extra writable mounts, sandbox path -> host directory (e.g.
            ``{"/logs": logs_dir}``). Under ``unsafe_local`` they cannot be
            mounted; :meth:`path` maps them to their host paths instead.
        ro_binds: read-only mounts, sandbox path -> host file or directory
            (an agent's installed tools, a Unix socket to the model gateway:
            connecting to a socket is allowed on a read-only mount). They are
            not handed to the sandbox's uid; mapped like ``binds`` when unsafe.
        root: the merged tree of a built environment to run on (see the
            module doc); ``workdir`` is then that tree's working directory
            (not mounted again) and ``cwd`` where commands start.
        netns: on a built environment, a network namespace to run in instead of
            a fresh one (:func:`tackroom.images.egress.loopback_namespace`: only
            a loopback, shared with the task's services).

    As root, the task directory and the binds are handed to the sandbox's own
    uid (``self.uid``) so that its commands can write them; host code running
    as root is not affected. Use as a context manager or call :meth:`close`.
    """

    def __init__(self, workdir: Path, limits: Limits = Limits(), *, unsafe_local: bool = False,  # noqa: B008 - frozen
                 binds: Mapping[str, Path] = {}, ro_binds: Mapping[str, Path] = {},  # noqa: B006
                 root: Path | None = None, cwd: str = TASK_PATH, netns: int | None = None,
                 _probing: bool = False) -> None:
        self.workdir = Path(workdir).resolve()
        self.limits = limits
        self.unsafe_local = unsafe_local
        self.binds = {k: Path(v).resolve() for k, v in binds.items()}
        self.ro_binds = {k: Path(v).resolve() for k, v in ro_binds.items()}
        self.root = root
        self.cwd = cwd if root is not None else TASK_PATH
        self.netns = netns if root is not None else None
        self._covered_fd: int | None = None  # the task dir under our tmpfs, to copy back
        self._userns: contextlib.ExitStack | None = None
        self._userns_fd = -1
        self._closed = False
        if not self.workdir.is_dir():
            raise InfraError("task directory does not exist", str(self.workdir))
        if not unsafe_local and not _probing:
            require_sandbox()
        if root is not None:
            if unsafe_local:
                raise InfraError("a built task environment cannot run without the sandbox",
                                 str(root), "drop --unsafe-local")
            # One namespace per sandbox: RLIMIT_NPROC counts per namespace and uid.
            self._userns = contextlib.ExitStack()
            self._userns_fd = self._userns.enter_context(mapped_userns())
            self._privileged = False
            self.uid = IMAGE_UID
            for host in self.binds.values():
                _chown_tree(host, IMAGE_UID)
            return
        # Root drops to a uid of its own (see the module doc); others keep theirs.
        self._privileged = _is_root() and not unsafe_local
        self.uid = random.randrange(*_UID_RANGE) if self._privileged else os.getuid()
        if self._privileged:
            self._mount_tmpfs()
            _chown_tree(self.workdir, self.uid)
            for host in self.binds.values():
                _chown_tree(host, self.uid)

    # -- paths ------------------------------------------------------------------------

    @property
    def task_path(self) -> str:
        """Where commands see the task directory (``/task``; the host path when unsafe)."""
        if self.root is not None:
            return self.cwd
        return str(self.workdir) if self.unsafe_local else TASK_PATH

    def path(self, sandbox_path: str) -> str:
        """The path at which commands see ``sandbox_path`` (identity in a real sandbox).

        Under ``unsafe_local`` nothing is mounted, so ``/task/...`` and bound
        paths map to their host directories.
        """
        if not self.unsafe_local:
            return sandbox_path
        for inside, host in [(TASK_PATH, self.workdir), *self.binds.items(),
                             *self.ro_binds.items()]:
            if sandbox_path == inside or sandbox_path.startswith(inside.rstrip("/") + "/"):
                return str(host) + sandbox_path[len(inside.rstrip("/")):]
        return sandbox_path

    # -- the disk limit ---------------------------------------------------------------

    def _mount_tmpfs(self) -> None:
        """Cover the task dir with a tmpfs of ``disk_mb`` holding a copy of its files.

        Host code keeps using ``workdir`` as before; ``close()`` copies back.
        Where mounting is not allowed, the size check after each command remains.
        """
        fd = os.open(self.workdir, os.O_RDONLY | os.O_DIRECTORY)
        opts = f"size={self.limits.disk_mb}m,mode=0755,uid={self.uid},gid={self.uid}"
        try:
            mount("tmpfs", self.workdir, opts, MS_NOSUID | MS_NODEV)
        except InfraError:
            os.close(fd)
            return
        self._covered_fd = fd
        try:
            copy_tree(f"/proc/self/fd/{fd}", self.workdir)
        except (OSError, shutil.Error) as exc:
            self._unmount(copy_back=False)
            raise InfraError(f"task directory does not fit the sandbox's {self.limits.disk_mb} MB "
                             f"disk limit ({exc.__class__.__name__})", str(self.workdir),
                             "raise Limits.disk_mb") from exc

    def _unmount(self, copy_back: bool) -> None:
        fd, self._covered_fd = self._covered_fd, None
        if fd is None:
            return
        try:
            if copy_back:
                under = f"/proc/self/fd/{fd}"
                _clear_dir(under)
                copy_tree(self.workdir, under)
        finally:
            unmount(self.workdir)
            os.close(fd)

    # -- running ----------------------------------------------------------------------

    def _limited(self, argv: list[str], env: Mapping[str, str] | None) -> list[str]:
        """``argv`` under the sandbox's memory, process, file-size and core limits.

        A ``bash -c COMMAND`` (every command an agent runs) sets them with bash's own
        ``ulimit`` before ``COMMAND``, on the same line (so that bash's "line N" in its
        messages stays the command's own): one program start fewer than ``prlimit``, ~1 ms
        of a command's ~6. Anything else — or bash in POSIX mode, whose ``ulimit -f``
        counts 512-byte blocks — goes through ``prlimit``.
        """
        lim = self.limits
        if (len(argv) == 3 and argv[:2] == ["bash", "-c"]
                and "POSIXLY_CORRECT" not in self._env(env)):
            kb = 1 << 10
            return ["bash", "-c", f"ulimit -S -H -v {lim.memory_mb * kb} -u {lim.processes} "
                    f"-f {lim.disk_mb * kb} -c 0 || exit 126; {argv[2]}"]
        mb = 1 << 20
        return ["prlimit", f"--as={lim.memory_mb * mb}", f"--nproc={lim.processes}",
                f"--fsize={lim.disk_mb * mb}", "--core=0", "--", *argv]

    def _env(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        if self.root is not None:
            return {"PATH": DOCKER_PATH, "HOME": "/root", "LANG": "C.UTF-8", "TERM": "dumb",
                    "TMPDIR": "/tmp", **(extra or {})}
        env = {"PATH": SANDBOX_PATH, "HOME": self.task_path, "LANG": "C.UTF-8",
               "TERM": "dumb", "TMPDIR": "/tmp",
               # No passwd entry for the sandbox uid: give git an identity.
               "GIT_AUTHOR_NAME": "agent", "GIT_AUTHOR_EMAIL": "agent@sandbox",
               "GIT_COMMITTER_NAME": "agent", "GIT_COMMITTER_EMAIL": "agent@sandbox"}
        if self.unsafe_local:
            env["TMPDIR"] = tempfile.gettempdir()
        env.update(extra or {})
        return env

    def argv(self, argv: list[str], env: Mapping[str, str] | None = None) -> list[str]:
        """The full command line that runs ``argv`` inside this sandbox with its limits.

        Used by :meth:`run` and by long-lived sessions (a persistent shell).
        """
        inner = self._limited(argv, env)
        if self.unsafe_local:
            return inner
        if self.root is not None:
            return self._image_argv(inner, env)
        lim = self.limits
        tmp_bytes = str(lim.disk_mb << 20)
        args = ["bwrap"]
        if self._privileged:
            args += ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                     "--unshare-cgroup-try"]
        else:
            args += ["--unshare-all"]
        args += ["--die-with-parent", "--new-session", "--hostname", "sandbox",
                 *_system_binds(), "--proc", "/proc", "--dev", "/dev",
                 "--perms", "1777", "--size", tmp_bytes, "--tmpfs", "/tmp",
                 "--bind", str(self.workdir), TASK_PATH]
        # Directories bwrap makes for mount points are 0700 (root's): the sandbox's
        # uid could not reach /opt/tool through them.
        for parent in _parents([*self.binds, *self.ro_binds]):
            args += ["--perms", "0755", "--dir", parent]
        for inside, host in self.binds.items():
            args += ["--bind", str(host), inside]
        for inside, host in self.ro_binds.items():
            args += ["--ro-bind", str(host), inside]
        args += ["--chdir", TASK_PATH, "--clearenv"]
        for key, value in self._env(env).items():
            args += ["--setenv", key, value]
        if self._privileged:
            args += ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
                     "--inh-caps=-all", "--bounding-set=-all"]
        return args + inner

    def _image_argv(self, inner: list[str], env: Mapping[str, str] | None) -> list[str]:
        """``inner`` in a sandbox on a built environment, as the root of its own namespace."""
        assert self.root is not None
        # With ``netns`` the process is already in that namespace (see popen).
        net = [] if self.netns is not None else ["--unshare-net"]
        args = [*as_image_root(), "bwrap", "--userns", str(self._userns_fd), *net,
                "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                "--die-with-parent", "--new-session", "--hostname", "sandbox",
                # /tmp is the image's own, as in a container: what the build left there
                # (a test venv) stays, and what the episode writes counts against its disk.
                "--bind", str(self.root), "/", "--proc", "/proc", "--dev", "/dev"]
        for inside, host in self.binds.items():
            args += ["--bind", str(host), inside]
        for inside, host in self.ro_binds.items():
            args += ["--ro-bind", str(host), inside]
        for cap in IMAGE_CAPS:
            args += ["--cap-add", cap]
        args += ["--chdir", self.cwd, "--clearenv"]
        for key, value in self._env(env).items():
            args += ["--setenv", key, value]
        return args + inner

    def popen(self, argv: list[str], env: Mapping[str, str] | None = None,
              **kwargs: Any) -> subprocess.Popen:
        """Start ``argv`` in the sandbox in its own process group (kill it with :func:`kill`)."""
        if self._closed:
            raise InfraError("sandbox is closed", str(self.workdir))
        if self._userns_fd >= 0:
            kwargs["pass_fds"] = (*kwargs.get("pass_fds", ()), self._userns_fd)
        full = self.argv(argv, env)
        child_env = self._env(env) if self.unsafe_local else {"PATH": SANDBOX_PATH}
        prefix = as_image_root()
        # On a built environment this thread becomes the image's root (and enters the
        # episode's network namespace) while it starts bwrap, instead of setpriv and a setns
        # in the child: one program start fewer, and no Python in the child.
        threaded = full[:len(prefix)] == prefix and thread_creds_supported()
        enter = (functools.partial(enter_netns, self.netns)
                 if self.netns is not None and not threaded else None)
        setup = child_setup(enter)
        if setup is not None:
            kwargs["preexec_fn"] = setup
        if threaded:
            with contextlib.ExitStack() as thread:
                if self.netns is not None:
                    thread.enter_context(thread_inside(self.netns))
                thread.enter_context(thread_as_image_root())
                return subprocess.Popen(  # noqa: S603 - argv is built here, not by a shell
                    full[len(prefix):], cwd="/", env=child_env,
                    start_new_session=True, **kwargs)
        return subprocess.Popen(  # noqa: S603 - argv is built here, never through a shell
            full, cwd=self.workdir, env=child_env, start_new_session=True, **kwargs)

    def _started(self, code: int, stdout: str, stderr: str) -> None:
        if not self.unsafe_local and code == 1 and stderr.startswith("bwrap:") and not stdout:
            raise InfraError(f"the sandbox failed to start: {stderr.strip()[:300]}",
                             str(self.workdir))

    def copy_in(self, host: Path, inside: str) -> None:
        """Copy ``host`` into the sandbox at ``inside`` (a directory under the task's or a
        bind's), owned by the sandbox's uid so that its commands can change it."""
        target = self._host_path(inside)
        copy_tree(host, target)
        if self.uid != os.getuid():
            _chown_tree(target, self.uid)

    def copy_out(self, inside: str, host: Path) -> None:
        """Copy the sandbox's ``inside`` (the task directory or a bind) to ``host``."""
        copy_tree(self._host_path(inside), host)

    def _host_path(self, inside: str) -> Path:
        """The host path of a sandbox path under the task directory or a writable bind."""
        for mount_point, host in [(self.task_path, self.workdir), *self.binds.items()]:
            base = mount_point.rstrip("/")
            if inside == mount_point or inside.startswith(base + "/"):
                return host / inside[len(base):].lstrip("/")
        raise InfraError(f"{inside} is not under the sandbox's task directory or binds",
                         str(self.workdir))

    def _which_limit(self, code: int, stderr: str) -> str | None:
        """Best-effort: which limit a finished command ran into, from its traces."""
        if (self._covered_fd is None and self.root is None
                and _tree_size(self.workdir) > self.limits.disk_mb << 20):
            return "disk"
        return limit_in_output(code, stderr)

    def close(self) -> None:
        """Copy the task directory's contents back from the tmpfs and release it."""
        if self._closed:
            return
        self._closed = True
        self._unmount(copy_back=True)
        if self._userns is not None:
            self._userns.close()
            self._userns_fd = -1

    def __del__(self) -> None:  # a forgotten sandbox must not leave its mount behind
        with contextlib.suppress(Exception):
            self.close()


def run_agent(action: RunAgent, workdir: Path, limits: Limits, *, cwd: str = TASK_PATH,
              binds: Mapping[str, Path] = {}, unsafe_local: bool = False,  # noqa: B006
              env: Mapping[str, str] | None = None, root: Path | None = None,
              netns: int | None = None) -> CommandResult:
    """Run an agent program (:class:`~tackroom.core.actions.RunAgent`) over ``workdir``.

    A sandbox of its own, with the task's disk limit and the program's time,
    memory and process limits (agent CLIs need more than one shell command),
    the program's read-only mounts, and a fresh home holding its config files
    (removed afterwards: nothing of it reaches the task's files). ``cwd`` is
    where the program starts (a terminal task's working directory). ``root`` and
    ``netns``: run on a built environment's tree (see :class:`BubblewrapSandbox`).
    """
    home = Path(tempfile.mkdtemp(prefix="tackroom-agent-home-"))
    try:
        for rel, text in action.files.items():
            target = home / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        lim = Limits(wall_s=action.timeout_s, memory_mb=max(limits.memory_mb, action.memory_mb),
                     processes=max(limits.processes, action.processes), disk_mb=limits.disk_mb,
                     episode_wall_s=action.timeout_s)
        with BubblewrapSandbox(workdir, lim, unsafe_local=unsafe_local,
                     binds={**binds, action.home: home},
                     ro_binds={k: Path(v) for k, v in action.ro_binds.items()},
                     root=root, cwd=cwd, netns=netns) as box:
            where = box.path(cwd)
            command = f"cd {shlex.quote(where)} && exec {shlex.join(action.argv)}"
            return box.run(command, timeout_s=action.timeout_s,
                           env={**(env or {}), "HOME": box.path(action.home), **action.env})
    finally:
        shutil.rmtree(home, ignore_errors=True)


class Bubblewrap:
    """The default provider: :class:`BubblewrapSandbox`; a task's Dockerfile is built by
    tackroom (:mod:`tackroom.images`) and run as the sandbox's ``/``."""

    name = "bubblewrap"
    runs_images = False

    def unavailable(self) -> str | None:
        return _probe()

    def require(self) -> None:
        require_sandbox()

    def container(self, dockerfile: Path, *, limits: Limits, workdir: str,
                  env: Mapping[str, Any]) -> Container:
        raise InfraError("the bubblewrap provider does not run images itself", str(dockerfile),
                         "build the image with tackroom.images and pass root= to the sandbox")


#: The default provider, registered as ``bubblewrap``.
BUBBLEWRAP = register("sandbox", summary="bwrap over this machine's system, or over a task's "
                      "image that tackroom built (the default)")(Bubblewrap())
