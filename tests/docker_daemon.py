"""A Docker daemon for the test run: the one that answers, or one started here as root.

``--sandbox docker`` needs a daemon. When none answers and the tests run as root with
``dockerd`` installed (``make setup`` installs docker.io as root), one is started the way
these machines allow — ``dockerd --iptables=false --ip6tables=false --bridge=none``: an
episode's container has no network anyway (``--network none``) — and stopped when the last
test worker that used it is done. Parallel xdist workers share it: a lock file and a count of
users in the run's shared temporary directory make exactly one of them start it. Otherwise
:func:`acquire` says why the Docker tests are skipped.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

#: Seconds a started daemon has to answer ``docker info``.
START_S = 90
#: The daemon this process started (kept referenced: it outlives the fixture's frame).
_started: list[subprocess.Popen] = []


def _answers() -> str | None:
    """Why ``docker info`` does not answer (``None`` if it does)."""
    if shutil.which("docker") is None:
        return "the docker CLI is not installed (make setup installs docker.io as root)"
    try:
        proc = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                              capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "docker info did not answer within 20 s"
    if proc.returncode != 0:
        return "no Docker daemon answers (" + " ".join(proc.stderr.split())[:160] + ")"
    return None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[dict]:
    """The shared state file ``path`` (JSON), under an exclusive lock; written back after."""
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = json.loads(path.read_text()) if path.is_file() else {"users": 0, "pid": None}
        yield state
        path.write_text(json.dumps(state))


def acquire(shared: Path) -> str | None:
    """Make sure a daemon answers for this worker; why not (a skip reason) or ``None``.

    ``shared`` is a directory every worker of the run sees (its base temporary directory).
    """
    with _locked(shared / "dockerd.json") as state:
        if _answers() is None:
            state["users"] += 1
            return None
        if os.geteuid() != 0:
            return f"{_answers()}, and starting one needs root"
        if shutil.which("dockerd") is None:
            return f"{_answers()}, and dockerd is not installed (apt-get install docker.io)"
        log = open(shared / "dockerd.log", "ab")  # noqa: SIM115 - the daemon's for its life
        proc = subprocess.Popen(["dockerd", "--iptables=false", "--ip6tables=false",
                                 "--bridge=none"], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + START_S
        while _answers() is not None:
            if proc.poll() is not None or time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                tail = (shared / "dockerd.log").read_text(errors="replace")[-300:]
                return f"dockerd did not start: {' '.join(tail.split())}"
            time.sleep(0.5)
        _started.append(proc)
        state["pid"] = proc.pid
        state["users"] += 1
        return None


def release(shared: Path) -> None:
    """This worker is done with the daemon; the last one stops the daemon this run started."""
    with _locked(shared / "dockerd.json") as state:
        state["users"] = max(0, state["users"] - 1)
        pid = state["pid"]
        if state["users"] or pid is None:
            return
        state["pid"] = None
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.2)


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (reaping it when it is this process's child)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status
