"""Hardening of the environments' edges (issue 35 items 4, 5, 6 and 12).

Each test drives the real component through the CLI or the public API: an agent that leaves
special files in its task directory, a verifier that writes a reward that is not a number,
an ``extends`` chain thousands deep, a verifier whose test runner is missing.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import run_cli

import tackroom
from tackroom.sandbox import sandbox_available
from tackroom.suites.terminal import TerminalSuite
from tackroom.suites.terminal.importer import import_tasks

needs_sandbox = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap cannot run here")

PASS_IF_DONE = ('[ -f done.txt ] && echo 1 > /logs/verifier/reward.txt || '
                'echo 0 > /logs/verifier/reward.txt')


def write_task(root: Path, name: str, *, test: str = PASS_IF_DONE, solve: str = "touch done.txt",
               reward_file: str | None = None) -> Path:
    """A Harbor task folder: instruction, task.toml, tests/test.sh, solution/solve.sh."""
    d = root / name
    (d / "tests").mkdir(parents=True)
    (d / "solution").mkdir()
    (d / "instruction.md").write_text("Create done.txt.\n")
    (d / "task.toml").write_text('version = "1.0"\n')
    (d / "tests" / "test.sh").write_text("#!/bin/bash\n" + test + "\n")
    (d / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solve + "\n")
    return d


def evaluate(tmp_path: Path, store: Path, tasks: list[str]) -> dict[str, dict]:
    """The expert (each task's own solution) on ``tasks``: final episode rows by task id."""
    run = tackroom.evaluate(TerminalSuite(store=store), tasks=tasks,
                            harnesses=["terminal-bash"], policies=["expert"], seeds=[0],
                            store=tmp_path / "r.duckdb")
    return {r["task"].split("/")[-1]: r for r in run.final_episodes()}


# -- 4. special files in the task directory are the agent's doing ------------------------------
@needs_sandbox
def test_special_files_an_agent_leaves_do_not_make_an_infra_error(tmp_path):
    store = tmp_path / "store"
    write_task(store, "fifo", solve="mkfifo fifo; mkdir -p sub && mkfifo sub/pipe; touch done.txt")
    write_task(store, "socket", solve="python3 -c \"import socket; "
               "socket.socket(socket.AF_UNIX).bind('sock')\"; touch done.txt")
    write_task(store, "fifo-fails", solve="mkfifo fifo")
    final = evaluate(tmp_path, store, ["fifo", "socket", "fifo-fails"])
    assert final["fifo"]["outcome"] == "success", final["fifo"]["error"]
    assert final["socket"]["outcome"] == "success", final["socket"]["error"]
    assert final["fifo-fails"]["outcome"] == "failure", final["fifo-fails"]["error"]
    for row in final.values():
        assert "Traceback" not in (row["error"] or "")


@needs_sandbox
def test_special_files_in_a_code_repository_neither_hang_nor_fail_the_episode():
    """The code suite reads the repository after every command (to show its files) and copies
    it for the hidden tests: a FIFO there once blocked the read forever. Run in a child
    process with a bound, so that a regression fails instead of hanging the suite."""
    code = textwrap.dedent("""
        from tackroom.core.actions import Shell, Submit
        from tackroom.suites import get_suite
        suite = get_suite("code")
        env = suite.make_env(suite.code_task("memo-kwargs").task)
        env.reset(0)
        env.step(Shell("mkfifo pipe; python3 -c \\"import socket; "
                       "socket.socket(socket.AF_UNIX).bind('sock')\\""))
        end = env.step(Submit())
        print("outcome", end.terminated, end.info.get("failure_mode"))
        env.close()
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "outcome True" in proc.stdout and "Traceback" not in proc.stderr


# -- 5. a reward that is not a finite number is never scored -----------------------------------
@needs_sandbox
@pytest.mark.parametrize("writes", [
    "echo nan > /logs/verifier/reward.txt",
    "echo inf > /logs/verifier/reward.txt",
    "echo '{\"reward\": NaN}' > /logs/verifier/reward.json",
])
def test_import_refuses_a_verifier_whose_reward_is_not_finite(tmp_path, writes):
    src = tmp_path / "src"
    write_task(src, "nan-reward", test=writes)
    (result,) = import_tasks(src, tmp_path / "tasks")
    assert not result.imported
    assert "not a finite number" in result.reason, result.reason


@needs_sandbox
def test_an_episode_with_a_non_finite_reward_is_not_scored(tmp_path):
    store = tmp_path / "store"
    write_task(store, "nan", test="echo nan > /logs/verifier/reward.txt")
    write_task(store, "inf-json", test="echo '{\"reward\": Infinity}' > "
               "/logs/verifier/reward.json")
    final = evaluate(tmp_path, store, ["nan", "inf-json"])
    for task in ("nan", "inf-json"):
        row = final[task]
        assert row["outcome"] == "infra_error", row
        assert "not a finite number" in row["error"] and "Traceback" not in row["error"]
        assert row["reward"] == 0.0  # nothing non-finite is stored


# -- 6. a deep ``extends`` chain is one clear line --------------------------------------------
def test_a_ten_thousand_deep_extends_chain_is_one_clear_line(tmp_path):
    (tmp_path / "h0.toml").write_text('extends = "som-tools"\n')
    for i in range(1, 10_000):
        (tmp_path / f"h{i}.toml").write_text(f'extends = "h{i - 1}.toml"\n')
    # With a chain within the limit, which still resolves (validate reports each file).
    p = run_cli("harness", "validate", "h9999.toml", "h20.toml", cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stdout + p.stderr and "RecursionError" not in p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "extends" in lines[0] and "deep" in lines[0], lines
    assert "h9999.toml" in lines[0] and "ok h20.toml" in p.stdout, p.stdout
    p = run_cli("eval", "--suite", "toy", "--harness", str(tmp_path / "h9999.toml"),
                "--policy", "expert", "--seeds", "0", "--db", str(tmp_path / "r.duckdb"),
                cwd=tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "deep" in p.stderr


# -- 12. a verifier whose runner is missing, whatever the script does next --------------------
@needs_sandbox
def test_a_missing_runner_is_an_infra_error_whatever_the_script_does_next(tmp_path):
    store = tmp_path / "store"
    write_task(store, "if-then", test="tackroom-no-such-pytest /tests -q; if [ $? -eq 0 ]; "
               "then echo 1 > /logs/verifier/reward.txt; else echo 0 > "
               "/logs/verifier/reward.txt; fi")
    write_task(store, "redirected", test="tackroom-no-such-pytest > /logs/out.txt 2>&1 "
               "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt")
    write_task(store, "agent-binary", test="./built-by-the-agent && echo 1 > "
               "/logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt")
    write_task(store, "probes-first", test="command -v tackroom-no-such-tool >/dev/null || true; "
               + PASS_IF_DONE)
    final = evaluate(tmp_path, store, ["if-then", "redirected", "agent-binary", "probes-first"])
    for task in ("if-then", "redirected"):
        assert final[task]["outcome"] == "infra_error", final[task]
        assert "tackroom-no-such-pytest" in final[task]["error"]
        assert "verifier could not run" in final[task]["error"]
    assert final["agent-binary"]["outcome"] == "failure"  # a path the agent had to make
    assert final["probes-first"]["outcome"] == "success"  # asking is not running
