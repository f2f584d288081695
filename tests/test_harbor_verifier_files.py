"""What a Harbor verifier leaves in ``/logs/verifier``: the reward (``reward.txt`` or
``reward.json``) and a CTRF report, kept with the episode test by test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tackroom.core.actions import Shell, Submit
from tackroom.core.task import Task
from tackroom.sandbox import sandbox_available
from tackroom.suites.terminal.env import TerminalEnv
from tackroom.suites.terminal.taskdir import load_task

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="needs bubblewrap")

CTRF = {"results": {"tool": {"name": "pytest"},
                    "summary": {"tests": 2, "passed": 1, "failed": 1, "start": 1, "stop": 2},
                    "tests": [{"name": "test_exists", "status": "passed", "duration": 1},
                              {"name": "test_content", "status": "failed", "duration": 2}]}}


def _task(root: Path, reward_file: str, reward: str) -> Path:
    task = root / "ctrf-probe"
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "instruction.md").write_text("Write done.txt.\n")
    (task / "task.toml").write_text('version = "1.0"\n')
    (task / "environment" / "seed.txt").write_text("seed\n")
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\n"
        f"cat > /logs/verifier/ctrf.json <<'EOF'\n{json.dumps(CTRF)}\nEOF\n"
        f"[ -f done.txt ] && echo '{reward}' > /logs/verifier/{reward_file} "
        f"|| echo 0 > /logs/verifier/{reward_file}\n")
    return task


@pytest.mark.parametrize(("reward_file", "written", "expected"), [
    ("reward.txt", "1", 1.0), ("reward.json", '{"reward": 0.5}', 0.5),
    ("reward.json", '{"tests": 1.0, "style": 0.0}', 0.5)])
def test_the_reward_file_decides_and_the_ctrf_report_is_kept(tmp_path, reward_file, written,
                                                             expected):
    td = load_task(_task(tmp_path, reward_file, written))
    env = TerminalEnv(Task(td.id, "terminal", frozenset({"shell", "submit"})), td)
    try:
        env.reset(0)
        env.step(Shell("touch done.txt"))
        result = env.step(Submit())
    finally:
        env.close()
    assert result.reward == expected and result.success == (expected >= 1.0)
    ctrf = result.info["verifier"]["ctrf"]
    assert ctrf["summary"] == CTRF["results"]["summary"]
    assert ctrf["tests"] == [{"name": "test_exists", "status": "passed"},
                             {"name": "test_content", "status": "failed"}]
