"""Bind host paths into a running container's mount namespace while an agent runs there.

Run by root on the Docker daemon's machine as a process of its own (standard library only;
``setns`` into a mount namespace needs a single-threaded caller)::

    python3 -I -S mount_into.py PID      # stdin: one JSON line [[inside, host, read_only], ...]

It clones each host path's mount tree (``open_tree``), makes it read-only when asked
(``mount_setattr``), enters the mount namespace of the process ``PID`` (a container's
init), makes the mount point there and attaches the clone (``move_mount``); then prints
one line — the JSON list of the topmost paths it made — and waits. When its standard
input ends (the agent is done, or the tackroom process that started it died) it detaches
each mount in reverse order and removes the directories and files it made, so that
nothing of them is left in the container's own file system, and exits. A failure before
the line is printed undoes what was done and exits 1 with the reason on standard error.

This is what ``docker run --mount`` does at a container's start, done while it runs: the
daemon offers no way to add or remove a mount later. One process holds the mounts for the
agent's whole run — a Python start-up is ~20 ms, and a crash of its parent still detaches
them. Needs Linux 5.12 (``mount_setattr``).
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

# The new mount API's system calls: one number on every architecture since Linux 5.x.
_OPEN_TREE, _MOVE_MOUNT, _MOUNT_SETATTR = 428, 429, 442
_OPEN_TREE_CLONE = 1
_OPEN_TREE_CLOEXEC = os.O_CLOEXEC
_AT_RECURSIVE = 0x8000
_AT_EMPTY_PATH = 0x1000
_AT_FDCWD = -100
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_MOUNT_ATTR_RDONLY = 0x1
_CLONE_NEWNS = 0x20000
_MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def _clone(host: str, read_only: bool) -> int:
    """A detached copy of the mount tree at ``host`` (a file descriptor)."""
    fd = _check(_libc.syscall(_OPEN_TREE, _AT_FDCWD, host.encode(),
                              _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC | _AT_RECURSIVE),
                f"open_tree {host}")
    if read_only:
        attr = _MountAttr(_MOUNT_ATTR_RDONLY, 0, 0, 0)
        _check(_libc.syscall(_MOUNT_SETATTR, fd, b"", _AT_EMPTY_PATH | _AT_RECURSIVE,
                             ctypes.byref(attr), ctypes.sizeof(attr)), f"mount_setattr {host}")
    return fd


def _enter(pid: int) -> None:
    """Enter the mount namespace of ``pid`` (its root becomes this process's ``/``)."""
    fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY)
    try:
        _check(_libc.setns(fd, _CLONE_NEWNS), f"setns into the mount namespace of {pid}")
    finally:
        os.close(fd)


def _make(inside: str, is_dir: bool) -> str | None:
    """Make the mount point ``inside``; the topmost path that did not exist (or None)."""
    parts = [p for p in inside.split("/") if p]
    top = None
    for i in range(1, len(parts) + 1):
        path = "/" + "/".join(parts[:i])
        if os.path.lexists(path):
            continue
        top = top or path
        if i < len(parts) or is_dir:
            os.mkdir(path, 0o755)
        else:
            with open(path, "x"):
                pass
    return top


def mount(pid: int, spec: list[list]) -> list[str]:
    """Attach each ``[inside, host, read_only]`` in the namespace of ``pid`` (entered for
    good); returns the paths made for them (topmost first), for :func:`_detach` to remove."""
    clones = [(inside, os.path.isdir(host), _clone(host, bool(ro))) for inside, host, ro in spec]
    _enter(pid)
    made: list[str] = []
    done: list[str] = []
    try:
        for inside, is_dir, fd in clones:
            if (top := _make(inside, is_dir)) is not None:
                made.append(top)
            _check(_libc.syscall(_MOVE_MOUNT, fd, b"", _AT_FDCWD, inside.encode(),
                                 _MOVE_MOUNT_F_EMPTY_PATH), f"move_mount onto {inside}")
            done.append(inside)
    except OSError:
        _detach(done, made)  # all or nothing: no half-attached layer is left behind
        raise
    finally:
        for _inside, _is_dir, fd in clones:
            os.close(fd)
    return made


def _detach(points: list[str], made: list[str]) -> None:
    for inside in reversed(points):
        _libc.umount2(inside.encode(), _MNT_DETACH)  # already gone (the container ended): fine
    for top in reversed(made):
        _remove(top)


def _remove(path: str) -> None:
    """Remove what :func:`_make` made: empty directories and empty files only (a mount
    point that is still in use, or one the CLI filled, is left rather than lost)."""
    try:
        if os.path.ismount(path):
            return  # still attached (its unmount failed): leave it
        if os.path.isdir(path) and not os.path.islink(path):
            for name in os.listdir(path):
                _remove(os.path.join(path, name))
            os.rmdir(path)
        elif os.path.isfile(path) and os.path.getsize(path) == 0:
            os.unlink(path)
    except OSError:
        pass


def main(argv: list[str]) -> int:
    try:
        (pid,) = argv
        spec = json.loads(sys.stdin.readline())
        made = mount(int(pid), spec)
    except (OSError, ValueError) as e:
        print(f"mount_into.py: {e}", file=sys.stderr)
        return 1
    print(json.dumps(made), flush=True)
    sys.stdin.read()  # held until the agent is done (or its parent gone)
    # Still in the container's mount namespace: detach there.
    _detach([inside for inside, _host, _ro in spec], made)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
