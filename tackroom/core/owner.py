"""Which live process owns a temporary directory: what reapers of killed runs ask.

A directory that must not outlive its tackroom process (a browser's profile, an
episode's mounted tree) records its owner in ``owner.json``: the pid, the
process's start time (which survives pid reuse) and where the pid means
something (this boot and pid namespace). After a SIGKILL nothing cleans up
in-process, so the next process to need such directories asks
:func:`owner_alive` and reaps those of dead owners.
"""

from __future__ import annotations

import json
import os
from typing import Any

#: The file in an owned directory naming its owner: ``{"pid", "start", "where", ...}``.
OWNER_FILE = "owner.json"


def _proc_state(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks since boot) of ``pid`` from /proc; ``None`` if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()  # the name may hold spaces and ')'
    except (OSError, IndexError):
        return None
    return fields[0].decode(), fields[19].decode()  # fields 3 and 22 of proc(5)


def pid_alive(pid: Any, start: Any) -> bool:
    """Whether ``pid`` still runs and is the process that started at ``start``."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    if start is None:  # no /proc where it was written: all we have is the pid
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True
    state = _proc_state(pid)
    return state is not None and state[0] != "Z" and state[1] == start


def where() -> str | None:
    """This boot and pid namespace: pids recorded elsewhere (another container sharing
    /tmp, another machine, a boot ago) mean nothing here, so such directories are left alone."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f"{f.read().strip()} {os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return None


def record_owner(base: str, **extra: Any) -> None:
    """Write (atomically) that this process owns the directory ``base``."""
    me = os.getpid()
    state = _proc_state(me)
    data = {"pid": me, "start": state[1] if state else None, "where": where(), **extra}
    path = os.path.join(base, OWNER_FILE)
    with open(path + ".new", "w") as f:
        json.dump(data, f)
    os.replace(path + ".new", path)


def read_owner(base: str) -> dict[str, Any] | None:
    """The owner ``base`` records, or ``None`` (no owner file, or one that cannot be read)."""
    try:
        with open(os.path.join(base, OWNER_FILE)) as f:
            owner = json.load(f)
    except (OSError, ValueError):
        return None
    return owner if isinstance(owner, dict) else None


def orphaned(base: str) -> dict[str, Any] | None:
    """The owner record of ``base`` if its owner is dead *here*, else ``None`` (alive, no
    record, or recorded in another boot or pid namespace, where its pid means nothing)."""
    owner = read_owner(base)
    if owner is None or owner.get("where") != where():
        return None
    return None if pid_alive(owner.get("pid"), owner.get("start")) else owner
