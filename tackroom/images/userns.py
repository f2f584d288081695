"""The uid range task environments live in, and the user namespaces that map it.

A task built from a Dockerfile expects to run as root in its container: it
writes under ``/usr/local``, installs into ``/etc``, ``chown``s files. Running
it as the host's root would hand the sandbox the host's root (``/proc/sys`` is
writable by uid 0 whatever its capabilities), so a built environment lives in
a *shifted* uid range instead, as unprivileged LXC containers do: a file that
belongs to uid ``u`` in the image belongs to host uid ``IMAGE_UID + u`` on disk,
and every sandbox on it runs in a user namespace of its own that maps
``0..SPAN-1`` back onto ``IMAGE_UID..IMAGE_UID+SPAN-1``. Inside, the task is
root and owns its files; outside, it is an ordinary uid with no power over the
host. A fresh namespace per sandbox also keeps ``RLIMIT_NPROC`` counting only
that sandbox's processes.

Creating the namespace with a 65536-uid map needs the host's root (only root
may write such a map); the child that creates it first becomes ``IMAGE_UID``,
so the namespace is *owned* by that uid and ``bwrap`` running as it may join.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from tackroom.core.errors import InfraError

#: Host uid of the image's root; the image's uid ``u`` is ``IMAGE_UID + u``. Above the
#: range of the plain sandboxes' throw-away uids (tackroom.sandbox), below 2**31.
IMAGE_UID = 1_500_000
#: How many uids (and gids) of the image are mapped.
SPAN = 65536
_CLONE_NEWUSER = 0x10000000


def require_root(what: str) -> None:
    """Raise a clear :class:`InfraError` unless this process is the host's root."""
    if os.geteuid() != 0:
        raise InfraError(f"{what} needs root here (a mapped uid range and overlay mounts)",
                         "task environment",
                         "run tackroom as root (as in a container or CI), or pass "
                         "--sandbox docker to build and run tasks with Docker")


def shift_tree(root: Path, *, skip: tuple[Path, ...] = (), recurse: bool = True) -> None:
    """Give every entry under ``root`` (``root`` too; only ``root`` without ``recurse``) to
    the shifted range, in place.

    Owners already in the range are left as they are, so shifting twice is
    harmless; ``chown`` clears set-uid bits, which a sandbox could not use anyway.
    """
    def shift(path: str) -> None:
        st = os.lstat(path)
        uid = st.st_uid if st.st_uid >= IMAGE_UID else IMAGE_UID + min(st.st_uid, SPAN - 1)
        gid = st.st_gid if st.st_gid >= IMAGE_UID else IMAGE_UID + min(st.st_gid, SPAN - 1)
        if (uid, gid) != (st.st_uid, st.st_gid):
            os.lchown(path, uid, gid)

    skipped = {str(p) for p in skip}
    shift(str(root))
    if root.is_symlink() or not recurse:
        return
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if os.path.join(top, d) not in skipped]
        for name in dirs + files:
            shift(os.path.join(top, name))


def host_id(inside: int) -> int:
    """The host uid (or gid) of the image's ``inside`` uid."""
    return IMAGE_UID + inside


@contextlib.contextmanager
def mapped_userns() -> Iterator[int]:
    """A fresh user namespace mapping the image's uids; yields an fd for ``bwrap --userns``.

    The fd keeps the namespace alive; it is closed on exit (the namespace ends
    with the last process in it).
    """
    require_root("a task environment")
    with _forking:
        fd = _idle.pop() if _idle else _make_userns()
    try:
        yield fd
    finally:
        # Back to the pool: every process of a closed sandbox is gone (its pid namespace
        # ended with it), so the next sandbox's RLIMIT_NPROC count starts from zero again.
        with _forking:
            if len(_idle) < _POOL:
                _idle.append(fd)
                fd = -1
        if fd >= 0:
            os.close(fd)


#: One namespace is made at a time: a child forked meanwhile by another thread would hold
#: this one's pipe open, and each would wait for the other.
_forking = threading.Lock()
#: Namespaces no sandbox uses, kept for the next: making one forks this (large) process.
_idle: list[int] = []
_POOL = 64


def _make_userns() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become the image's root, make the namespace, wait
        try:
            os.close(ready_r)
            os.close(go_w)
            # Nothing else of the parent's stays open here (another thread's pipes).
            low, high = sorted((ready_w, go_r))
            os.closerange(3, low)
            os.closerange(low + 1, high)
            os.closerange(high + 1, 65536)
            os.setgroups([])
            os.setgid(IMAGE_UID)
            os.setuid(IMAGE_UID)
            ok = libc.unshare(_CLONE_NEWUSER) == 0
            os.write(ready_w, b"y" if ok else b"n")
            os.read(go_r, 1)
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(go_r)
    fd = -1
    try:
        if os.read(ready_r, 1) != b"y":
            raise InfraError("cannot create a user namespace for the task environment",
                             "sandbox", "check /proc/sys/user/max_user_namespaces")
        for name in ("uid_map", "gid_map"):
            Path(f"/proc/{pid}/{name}").write_text(f"0 {IMAGE_UID} {SPAN}\n")
        fd = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(ready_r)
        os.close(go_w)
        os.waitpid(pid, 0)
    return fd


#: ``setgroups``, ``setresgid`` and ``setresuid`` as raw system calls, by architecture:
#: glibc's wrappers change every thread's credentials, the system calls only the caller's.
_THREAD_CREDS = {"x86_64": (116, 119, 117), "aarch64": (159, 149, 147)}


def thread_creds_supported() -> bool:
    """Whether :func:`thread_as_image_root` can run here (root, a known architecture)."""
    return os.geteuid() == 0 and os.uname().machine in _THREAD_CREDS


@contextlib.contextmanager
def thread_as_image_root() -> Iterator[None]:
    """This thread alone as the image's root uid (:data:`IMAGE_UID`, no groups) for the
    ``with`` block: a program it starts meanwhile starts as that uid, as under
    :func:`as_image_root`'s ``setpriv`` but with no program in between (~1.3 ms of a
    sandboxed command's ~6). Credentials are a thread's own in Linux; the rest of the
    process stays root throughout.

    The saved uid stays 0 meanwhile, so that the thread can come back; ``exec`` sets it to
    the new uid, and a program started here runs as ``IMAGE_UID`` alone, with no
    capabilities, exactly as after ``setpriv``.
    """
    setgroups, setresgid, setresuid = _THREAD_CREDS[os.uname().machine]
    libc = _thread_libc()
    uid, gid, groups = os.getuid(), os.getgid(), os.getgroups()

    def call(number: int, *args: object) -> None:
        longs = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
        if libc.syscall(ctypes.c_long(number), *longs) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"switching this thread's credentials: {os.strerror(err)}")

    call(setgroups, 0, None)
    try:
        call(setresgid, IMAGE_UID, IMAGE_UID, gid)
        try:
            call(setresuid, IMAGE_UID, IMAGE_UID, uid)
            try:
                yield
            finally:
                call(setresuid, uid, uid, uid)
        finally:
            call(setresgid, gid, gid, gid)
    finally:
        call(setgroups, len(groups), (ctypes.c_uint * max(1, len(groups)))(*groups))


@functools.cache
def _thread_libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def as_image_root() -> list[str]:
    """The ``setpriv`` prefix that runs ``bwrap --userns`` as the namespace's owner."""
    return ["setpriv", f"--reuid={IMAGE_UID}", f"--regid={IMAGE_UID}", "--clear-groups", "--"]
