"""No Chromium or chromedriver outlives the tackroom run that started it.

A run killed with SIGKILL takes its browsers with it (the kernel kills
chromedriver, ``PR_SET_PDEATHSIG``; Chrome exits when chromedriver's pipe
closes) and the next run's reaper deletes the directories it left. A run
stopped with SIGTERM closes its browsers itself. Each CLI run gets a private
TMPDIR, so what the tests look for is that run's and nothing else's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from conftest import CLI_ENV, TACKROOM, run_cli

pytest.importorskip("miniwob")
pytest.importorskip("selenium")
from tackroom.core import owner  # noqa: E402
from tackroom.records import RecordStore  # noqa: E402
from tackroom.suites import reaper  # noqa: E402

HAVE_CHROME = os.path.isfile(os.environ.get("MINIWOB_CHROME_BINARY", "/usr/bin/chromium"))
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="reads /proc; pdeathsig is Linux-only")

#: Generous bounds on a loaded 2-core machine; the tests never assert how fast.
WAIT_S = 60.0


@pytest.fixture
def tmpdir_short():
    """A private TMPDIR with a short path (Chrome puts unix sockets in it: 108-byte limit)."""
    path = tempfile.mkdtemp(prefix="trk-")
    yield path
    for pgid in {info[0] for info in _browser_procs(path).values()}:  # after a failure
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)


def _sigkill_pending(pid: int) -> bool:
    """Whether SIGKILL was sent to process ``pid`` (pending until the process is reaped)."""
    status = Path(f"/proc/{pid}/status").read_text()
    shared = next(line for line in status.splitlines() if line.startswith("ShdPnd:"))
    return bool(int(shared.split()[1], 16) >> (signal.SIGKILL - 1) & 1)


def _until(predicate, timeout: float = WAIT_S, interval: float = 0.2):
    """Poll ``predicate`` until it returns something true; that value, or the last one."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def _browser_procs(tmpdir: str) -> dict[int, tuple[int, str, str]]:
    """Live processes of browsers made under ``tmpdir``: pid -> (pgid, comm, start time).

    Chrome carries its profile (``--user-data-dir=TMPDIR/tackroom-chrome-*/profile``)
    in its command line; chromedriver and Chrome carry ``TMPDIR=…/tackroom-chrome-*/tmp``
    in their environment. Zombies count as gone.
    """
    marker = os.fsencode(os.path.join(tmpdir, reaper.PREFIX))
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read()
            pgid = os.getpgid(pid)
        except OSError:
            continue
        comm = stat[stat.index(b"(") + 1:stat.rindex(b")")].decode(errors="replace")
        state, start = stat.rsplit(b")", 1)[1].split()[0:20:19]
        if state != b"Z" and (marker in cmdline or b"TMPDIR=" + marker in environ):
            found[pid] = (pgid, comm, start.decode())
    return found


def _browser_dirs(tmpdir: str) -> list[str]:
    return sorted(n for n in os.listdir(tmpdir) if n.startswith(reaper.PREFIX))


def _start_run(tmp_path: Path, tmpdir: str) -> tuple[subprocess.Popen, dict]:
    """A long MiniWoB++ run, two browsers at a time; returns once both browsers are up."""
    args = ["eval", "--suite", "miniwob", "--tasks", "click-test-2,click-button",
            "--policy", "expert", "--seeds", "0-9999", "-n", "2",
            "--db", str(tmp_path / "r.duckdb")]
    log = open(tmp_path / "run.log", "w")  # a file, not a pipe nobody drains
    proc = subprocess.Popen([*TACKROOM, *args], cwd=tmp_path, stdout=log, stderr=log,
                            env={**os.environ, **CLI_ENV, "TMPDIR": tmpdir})
    log.close()

    def both_up():
        procs = _browser_procs(tmpdir)
        groups: dict[int, list[str]] = {}
        for pgid, comm, _ in procs.values():
            groups.setdefault(pgid, []).append(comm)
        # chromedriver, Chrome and a few of its helpers (renderer, GPU, network…)
        full = [g for g in groups.values()
                if "chromedriver" in g and len(g) - g.count("chromedriver") >= 3]
        return procs if len(full) >= 2 else None

    procs = _until(both_up)
    if not procs:
        proc.kill()
        proc.wait()
        pytest.fail("the run's browsers never came up: " + (tmp_path / "run.log").read_text())
    assert proc.poll() is None, "the run ended before it could be stopped"
    return proc, procs


def _gone(tmpdir: str, before: dict) -> bool:
    """No browser process under ``tmpdir`` lives, and none of ``before`` (pid reuse aside)."""
    now = _browser_procs(tmpdir)
    return not now and not any(_start(pid) == info[2] for pid, info in before.items())


def _start(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == b"Z" else fields[19].decode()


def test_reaper_kills_only_dead_runs_groups_and_spares_live_runs(tmp_path):
    """Unit test of the reaper on stand-in groups (``sleep``), no browser needed."""
    root = tmp_path

    def browser_dir(name: str) -> str:
        path = root / f"{reaper.PREFIX}{name}"
        (path / "tmp").mkdir(parents=True)
        return str(path)

    def group(base: str | None) -> subprocess.Popen:
        env = {**os.environ, "TMPDIR": os.path.join(base, "tmp")} if base else None
        return subprocess.Popen(["sleep", "120"], start_new_session=True, env=env)

    # A tackroom that has died: a real process, gone, its start time recorded.
    dead = subprocess.Popen(["sleep", "120"])
    dead_start = _start(dead.pid)
    dead.kill()
    dead.wait()

    def owned_by_dead(base: str, pgid: int, where: str | None = None) -> None:
        Path(base, reaper.OWNER_FILE).write_text(json.dumps(
            {"pid": dead.pid, "start": dead_start, "where": where or owner.where(),
             "pgid": pgid}))

    orphan = browser_dir("orphan")       # dead owner, its browser still running
    reused = browser_dir("reused")       # dead owner, pgid now an unrelated group
    live = browser_dir("live")           # owner alive (this process): another run's
    legacy = browser_dir("legacy")       # no owner file: an older tackroom's
    elsewhere = browser_dir("elsewhere")  # dead pid, but of another container or boot
    owned_by_dead(elsewhere, 1, where="another-boot pid:[1]")
    procs = {"orphan": group(orphan), "reused": group(None), "live": group(live)}
    try:
        owned_by_dead(orphan, procs["orphan"].pid)
        owned_by_dead(reused, procs["reused"].pid)
        reaper.record_owner(live, procs["live"].pid)

        removed = reaper.reap_orphans(str(root))

        assert sorted(removed) == sorted([orphan, reused])
        assert procs["orphan"].wait(timeout=WAIT_S) == -signal.SIGKILL
        assert procs["reused"].poll() is None, "killed a group that was not a browser's"
        assert procs["live"].poll() is None, "killed a live run's browser"
        assert os.path.isdir(live) and os.path.isdir(legacy) and os.path.isdir(elsewhere)
        assert not os.path.exists(orphan) and not os.path.exists(reused)
        assert reaper.reap_orphans(str(root)) == []  # nothing more to do
    finally:
        for p in procs.values():
            p.kill()
            p.wait()


def test_pdeathsig_outlives_the_thread_that_asked_for_a_browser():
    """The kernel's parent is the forking *thread*: hence the launcher thread."""
    box = {}

    def fork(via_launcher: bool) -> None:
        def popen():
            return subprocess.Popen(["sleep", "120"], preexec_fn=reaper.die_with_parent())
        box[via_launcher] = reaper.launch(popen) if via_launcher else popen()

    tids = []
    for via_launcher in (False, True):
        t = threading.Thread(target=fork, args=(via_launcher,))
        t.start()
        t.join()  # the thread that wanted the child has exited
        tids.append(t.native_id)
    try:
        # forked by that thread itself: killed with it (what a pool worker would do)
        assert box[False].wait(timeout=WAIT_S) == -signal.SIGKILL
        # The kernel sends a parent-death signal before it releases the exiting thread,
        # and the signal stays pending (ShdPnd) until the child is reaped; so, once both
        # threads are released, a child still unreaped with no SIGKILL pending was spared.
        assert _until(lambda: not any(os.path.exists(f"/proc/self/task/{tid}") for tid in tids),
                      interval=0.01), "the asking threads were never released"
        assert box[True].poll() is None  # forked by the launcher: lives on
        assert not _sigkill_pending(box[True].pid)
    finally:
        for p in box.values():
            p.kill()
            p.wait()


@pytest.mark.browser
@pytest.mark.skipif(not HAVE_CHROME, reason="needs chromium + chromedriver")
def test_sigkill_takes_the_browsers_along_and_the_next_run_reaps_the_rest(tmp_path, tmpdir_short):
    proc, before = _start_run(tmp_path, tmpdir_short)
    assert len(_browser_dirs(tmpdir_short)) >= 2
    proc.kill()  # SIGKILL: no handler, no finalizer, nothing of tackroom runs
    proc.wait(timeout=WAIT_S)
    # Without any reaper: the kernel kills chromedriver (pdeathsig), and Chrome
    # exits as its --remote-debugging-pipe closes.
    assert _until(lambda: _gone(tmpdir_short, before)), (
        "browser processes outlived a SIGKILLed tackroom", _browser_procs(tmpdir_short))
    # The dead run's directories stay until a later run reaps them: this one.
    left = _browser_dirs(tmpdir_short)
    assert left
    p = run_cli("eval", "--suite", "miniwob", "--tasks", "click-test-2", "--policy", "expert",
                "--seeds", "0", "--db", str(tmp_path / "r2.duckdb"), cwd=tmp_path,
                env_extra={"TMPDIR": tmpdir_short}, timeout=300)
    assert p.returncode == 0, p.stderr
    assert _browser_dirs(tmpdir_short) == []  # the dead run's, and this run's own
    assert _browser_procs(tmpdir_short) == {}


@pytest.mark.browser
@pytest.mark.skipif(not HAVE_CHROME, reason="needs chromium + chromedriver")
def test_sigterm_closes_every_browser_and_records_the_run_interrupted(tmp_path, tmpdir_short):
    proc, before = _start_run(tmp_path, tmpdir_short)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 143, (tmp_path / "run.log").read_text()[-2000:]
    # Closed by tackroom itself on the way out: no reaper has run.
    assert _until(lambda: _gone(tmpdir_short, before)), _browser_procs(tmpdir_short)
    assert _browser_dirs(tmpdir_short) == []
    out = (tmp_path / "run.log").read_text()
    assert "Traceback" not in out
    with RecordStore(str(tmp_path / "r.duckdb")) as store:
        (run,) = store.runs()
        assert run["status"] == "interrupted"
