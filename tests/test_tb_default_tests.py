"""Terminal-Bench's first layout without a run-tests.sh: its canonical ``hello-world``.

``task.yaml``, ``solution.sh``, ``tests/test_outputs.py`` and a Dockerfile ``FROM
ghcr.io/laude-institute/t-bench/ubuntu-24-04`` with ``WORKDIR /app`` (a base without pip):
Terminal-Bench runs its task template's test script for it (curl, uv, ``uv add
pytest==8.4.1``, ``uv run pytest``); tackroom does the same, its installs hoisted to build
time, so the task imports with its oracle passing and its untouched tests failing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import run_cli

from tackroom.images.testdeps import MARK
from tackroom.sandbox import sandbox_available
from tackroom.suites.terminal.environment import prepare
from tackroom.suites.terminal.taskdir import load_task

HELLO = Path(__file__).parent / "fixtures" / "real-tasks" / "terminal-bench" / "hello-world"

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not sandbox_available() or os.geteuid() != 0 or shutil.which("mmdebstrap") is None,
    reason="building task environments needs root, bubblewrap and mmdebstrap (make setup "
           "installs them as root)")]


def test_hello_world_imports_with_its_oracle_passing_and_its_untouched_tests_failing(tmp_path):
    assert not (HELLO / "run-tests.sh").exists()  # the layout this is about
    shutil.copytree(HELLO, tmp_path / "src" / "hello-world")
    p = run_cli("tasks", "import", str(tmp_path / "src"), cwd=tmp_path, timeout=3600,
                env_extra={"TACKROOM_TASKS": str(tmp_path / "tasks"), "COLUMNS": "220"})
    assert p.returncode == 0, p.stderr + p.stdout
    row = next(line for line in p.stdout.splitlines() if "hello-world" in line and "│" in line)
    cells = [c.strip() for c in row.strip().strip("│").split("│")]
    assert cells[1:5] in (["yes", "built", "fails", "passes"], ["yes", "cached", "fails", "passes"]), \
        p.stdout
    td = load_task(tmp_path / "tasks" / "terminal" / "hello-world")
    assert td.workdir == "/app"
    ready = prepare(td)
    # Terminal-Bench's own installs, built in; the verifier runs pytest through uv, offline.
    assert ready.installs[-2:] == ("uv init", "uv add pytest==8.4.1")
    verify = ready.scripts["run-tests.sh"]
    assert f"{MARK}'uv add pytest==8.4.1'" in verify
    assert "uv run pytest $TEST_DIR/test_outputs.py -rA" in verify
    assert "pip install" not in verify.replace(MARK, "")
