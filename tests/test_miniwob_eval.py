"""MiniWoB++ end to end: the CLI and the runner on real Chromium, a browser killed mid-run."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from conftest import run_cli

from tackroom.core import Outcome, Sampling
from tackroom.harness.spec import load_harness
from tackroom.policies import make_policy
from tackroom.records import RecordStore
from tackroom.runner.grid import plan_grid, run_cells

pytest.importorskip("miniwob")
pytestmark = [pytest.mark.browser, pytest.mark.skipif(
    not os.path.isfile(os.environ.get("MINIWOB_CHROME_BINARY", "/usr/bin/chromium")),
    reason="needs chromium + chromedriver")]

HARNESSES = "som-tools,html-commands,outline-coords"


def test_cli_eval_experts_across_the_three_harnesses(tmp_path):
    db = str(tmp_path / "r.duckdb")
    p = run_cli("eval", "--suite", "miniwob", "--tasks",
                "click-test-2,enter-text,click-checkboxes,login-user", "--harness", HARNESSES,
                "--policy", "expert", "--seeds", "0-1", "--db", db, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Success per task" in p.stdout and "Success by harness × policy" in p.stdout
    with RecordStore(db) as store:
        rows = store.episodes(run_id=store.latest_run_id())
    assert len(rows) == 4 * 3 * 2
    assert {r["outcome"] for r in rows} == {"success"}
    assert {r["harness"] for r in rows} == set(HARNESSES.split(","))


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _kill_browsers() -> int:
    killed = 0
    for pid in _descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"chrom" in cmd:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


class KillsBrowserOnce:
    """The expert, except that before its second call it kills every browser of this process."""

    def __init__(self) -> None:
        self.expert = make_policy("expert")
        self.id = "expert"
        self.calls = 0
        self.killed = 0

    async def act(self, request):
        self.calls += 1
        if self.calls == 2:
            self.killed = _kill_browsers()
        return await self.expert.act(request)

    async def aclose(self) -> None:
        return None


def test_killed_browser_is_infra_error_retried_and_nothing_is_lost(tmp_path):
    from tackroom.suites import get_suite

    suite = get_suite("miniwob")
    tasks = [t for t in suite.tasks() if t.id in ("login-user",)]
    policy = KillsBrowserOnce()
    plan = plan_grid(tasks, [load_harness("som-tools")], [policy], range(3), Sampling())
    store = RecordStore(tmp_path / "r.duckdb")
    store.start_run("r", "test", {}, len(plan.cells))
    finals = asyncio.run(run_cells(plan.cells, suite, "r", store=store, concurrency=1))
    assert policy.killed >= 1
    rows = store.episodes(run_id="r")
    store.close()
    infra = [r for r in rows if r["outcome"] == "infra_error"]
    assert len(infra) == 1 and infra[0]["attempt"] == 0
    assert "browser" in infra[0]["error"].lower() or "chrom" in infra[0]["error"].lower()
    assert [e.outcome for e in finals] == [Outcome.SUCCESS] * 3
    assert len(rows) == 4  # three cells, one of them recorded twice (attempt 0 and 1)
