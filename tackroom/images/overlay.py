"""Overlay mounts: read-only image layers under one writable directory.

A built environment is a stack of layer directories (the base root file
system, the Dockerfile's changes, the tests' dependencies). Every episode of a
task shares them read-only and writes into an upper directory of its own, on a
tmpfs of the task's disk size, so an episode can neither change the cached
image nor fill the host's disk. The upper directory outlives the sandboxes of
one episode (the agent's commands, an agent CLI, the verifier each start one),
and is dropped with the episode.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tackroom.core.errors import InfraError
from tackroom.core.owner import orphaned, record_owner
from tackroom.images.userns import IMAGE_UID, require_root

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND = 1, 2, 4, 32, 4096
_MNT_DETACH = 2


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def mount(fstype: str, target: Path, options: str, flags: int = 0, *,
          source: Path | None = None) -> None:
    """``mount -t fstype -o options SOURCE target``; :class:`InfraError` saying why if refused."""
    src = str(source).encode() if source is not None else fstype.encode()
    if _libc().mount(src, str(target).encode(), fstype.encode(), flags, options.encode()) != 0:
        err = ctypes.get_errno()
        raise InfraError(f"cannot mount the {fstype} of a task environment: "
                         f"{os.strerror(err)}", str(target),
                         "run as root on a kernel with overlayfs (or pass --sandbox docker)")


def unmount(target: Path) -> None:
    """Detach ``target`` (lazily: a process still inside does not keep it busy)."""
    _libc().umount2(str(target).encode(), _MNT_DETACH)


def bind(source: Path, target: Path, *, read_only: bool = False) -> None:
    """Bind-mount ``source`` at ``target`` (made first, as a file or a directory)."""
    if source.is_dir():
        target.mkdir(parents=True, exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch(exist_ok=True)
    mount("none", target, "", MS_BIND, source=source)
    if read_only:
        mount("none", target, "", MS_BIND | MS_REMOUNT | MS_RDONLY, source=source)


def overlay_options(lowers: Sequence[Path], upper: Path, work: Path) -> str:
    """The mount options of an overlay of ``lowers`` (topmost first) under ``upper``."""
    for p in lowers:
        if "," in str(p) or ":" in str(p):
            raise InfraError("a layer path contains ',' or ':'", str(p),
                             "set TACKROOM_CACHE to a path without them")
    return (f"lowerdir={':'.join(str(p) for p in lowers)},upperdir={upper},workdir={work},"
            "index=off,redirect_dir=off,metacopy=off")


#: Prefixes of the directories that hold tackroom's mounts (an episode's tree, a build's).
MOUNT_DIRS = ("tackroom-root-", "tackroom-build-")
_reaped = False


def owned_mount_dir(prefix: str) -> Path:
    """A fresh temporary directory for mounts, reachable (not listable) by the image's uid,
    its owner recorded so that :func:`reap_stale_mounts` can undo it if this process dies."""
    global _reaped
    if not _reaped:  # once a process: what killed runs left behind
        _reaped = True
        reap_stale_mounts()
    path = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(path, 0o711)
    record_owner(str(path))
    return path


def _mounts_under(path: str) -> list[str]:
    """Mount points at or below ``path``, deepest first (from /proc/self/mountinfo)."""
    found = []
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].encode().decode("unicode_escape")  # \040 for a space
            if point == path or point.startswith(path + "/"):
                found.append(point)
    return sorted(found, key=len, reverse=True)


def reap_stale_mounts(root: str | None = None) -> list[str]:
    """Unmount and delete the mount directories of dead tackroom processes; those removed.

    An episode killed with SIGKILL cannot unmount its tree; without this its
    tmpfs (memory) and overlay would stay until reboot. A live owner's
    directories, and those recorded in another boot or pid namespace, are left.
    """
    removed: list[str] = []
    if os.geteuid() != 0:
        return removed  # only root mounts these
    root = root or tempfile.gettempdir()
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            if entry.name.startswith(MOUNT_DIRS) and entry.is_dir(follow_symlinks=False) \
                    and orphaned(entry.path) is not None:
                for point in _mounts_under(entry.path):
                    unmount(Path(point))
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.path)
    return removed


class EpisodeRoot:
    """One episode's root file system: the image's layers plus a writable upper layer.

    ``path`` is the merged tree (mount it as ``/`` of a sandbox). ``remount``
    changes the layers below while keeping what the episode wrote (the tests'
    dependencies come in only for the verifier). ``close`` drops it all.
    """

    def __init__(self, lowers: Sequence[Path], disk_mb: int) -> None:
        require_root("a task environment")
        self._dir = owned_mount_dir("tackroom-root-")
        self._rw = self._dir / "rw"
        # The merged tree's mount point is on the tmpfs too: closing detaches the tmpfs
        # alone, and everything mounted under it with it, in one unmount (each unmount
        # waits for the kernel's RCU grace period: most of an episode's teardown).
        self.path = self._rw / "merged"
        self._rw.mkdir()
        self._mounted: list[Path] = []
        try:
            mount("tmpfs", self._rw, f"size={max(1, disk_mb)}m,mode=0755", MS_NOSUID | MS_NODEV)
            self._mounted.append(self._rw)
            (self._rw / "upper").mkdir()
            (self._rw / "work").mkdir()
            self.path.mkdir()
            # The merged root takes the upper directory's owner: the image's root.
            os.chown(self._rw / "upper", IMAGE_UID, IMAGE_UID)
            self.lowers: tuple[Path, ...] = ()
            self.remount(lowers)
        except BaseException:
            self.close()
            raise

    @property
    def upper(self) -> Path:
        """What this episode wrote (whiteouts mark what it deleted)."""
        return self._rw / "upper"

    def remount(self, lowers: Sequence[Path]) -> None:
        """Mount the merged tree again over ``lowers`` (topmost first), same upper layer."""
        if self.path in self._mounted:
            unmount(self.path)
            self._mounted.remove(self.path)
        mount("overlay", self.path, overlay_options(lowers, self.upper, self._rw / "work"))
        self._mounted.append(self.path)
        self.lowers = tuple(lowers)

    def close(self) -> None:
        # Detaching the tmpfs (the first mount) detaches the merged tree and any mount left
        # under it as well.
        if self._mounted:
            unmount(self._mounted[0])
        self._mounted.clear()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> EpisodeRoot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # a forgotten root must not leave its mounts behind
        with contextlib.suppress(Exception):
            self.close()
