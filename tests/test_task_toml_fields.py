"""Harbor's ``task.toml`` fields beyond the basics: the network asked for, the verifier's and
the solution's env tables (schema 1.1–1.4), each honoured or refused with a reason.

The tasks are written here, without a Dockerfile, so they run on the host-system sandbox in
seconds: what is checked is how the fields are read and where they reach, which is the same
on a built environment (the same ``TerminalEnv`` code sets the env and writes the notes).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli

import tackroom
from tackroom.sandbox import sandbox_available
from tackroom.suites.terminal import TerminalSuite
from tackroom.suites.terminal.importer import import_tasks

needs_sandbox = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap cannot run here")

#: Tries a TCP connection out of the sandbox: "net" when one opened, "none" when none could.
PROBE = "(exec 3<>/dev/tcp/1.1.1.1/53) 2>/dev/null && echo net || echo none"


def _task(root: Path, name: str, toml: str, solve: str, test: str) -> Path:
    """A Harbor task directory ``root/name`` with no Dockerfile (the host-system sandbox)."""
    d = root / name
    (d / "tests").mkdir(parents=True)
    (d / "solution").mkdir()
    (d / "instruction.md").write_text("Create done.txt.\n")
    (d / "task.toml").write_text('version = "1.0"\n' + toml)
    (d / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solve + "\n")
    (d / "tests" / "test.sh").write_text("#!/bin/bash\n" + test + "\n")
    return d


def _episode(tmp_path: Path, store: Path, task: str):
    run = tackroom.evaluate(TerminalSuite(store=store), tasks=[task],
                            harnesses=["terminal-bash"], policies=["expert"], seeds=[0],
                            store=tmp_path / "r.duckdb")
    (ep,) = run.load_episodes()
    return ep


@needs_sandbox
def test_a_task_asking_for_the_internet_runs_without_one_and_its_episode_says_so(tmp_path):
    src = tmp_path / "src"
    _task(src, "wants-net",
          '[environment]\nallow_internet = true\n[verifier]\nnetwork_mode = "public"\n',
          solve=f"{PROBE} > agent-net.txt; touch done.txt",
          test=f'[ -f done.txt ] && [ "$(cat agent-net.txt)" = none ] && [ "$({PROBE})" = none ]'
               " && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt")
    store = tmp_path / "tasks"
    (result,) = import_tasks(src, store)  # checked: untouched fails, the oracle passes
    assert (result.imported, result.checked) == (True, True), result.reason
    asked = ["[environment] allow_internet = true", '[verifier] network_mode = "public"']
    assert [n.split(" is not given")[0] for n in result.notes] == \
        [f"task.toml's {a}" for a in asked]
    assert "its episodes run with no network" in result.notes[0]
    assert "the tests run with no network" in result.notes[1]

    # The agent's commands and the tests both had no network: the reward says so.
    ep = _episode(tmp_path, store, "wants-net")
    assert ep.outcome.value == "success", ep.error
    assert ep.meta["verifier"]["notes"] == list(result.notes)
    shown = run_cli("show", "latest", ep.episode_id[:8], "--db", str(tmp_path / "r.duckdb"),
                    cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "note: task.toml's [environment] allow_internet = true is not given" in \
        " ".join(shown.stdout.split())


@needs_sandbox
def test_verifier_and_solution_env_reach_their_own_scripts_and_no_host_variable_is_read(
        tmp_path, monkeypatch):
    # The host has the variable the task names; tackroom takes the task's default instead.
    monkeypatch.setenv("TACKROOM_TEST_HOST_ONLY", "host-secret-value")
    src = tmp_path / "src"
    _task(src, "env-tables",
          '[verifier]\nenv = { GREETING = "hello there", FROM_HOST = '
          '"${TACKROOM_TEST_HOST_ONLY:-the-default}" }\n'
          '[solution]\nenv = { ANSWER = "42" }\n',
          solve='echo "$ANSWER" > answer.txt; echo "${GREETING:-unset}" > solver-saw.txt; '
                "touch done.txt",
          test='[ "$(cat answer.txt)" = 42 ] && [ "$GREETING" = "hello there" ] '
               '&& [ "$FROM_HOST" = the-default ] && [ "$(cat solver-saw.txt)" = unset ] '
               '&& [ -z "${ANSWER:-}" ] && [ -f done.txt ] '
               "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt")
    store = tmp_path / "tasks"
    (result,) = import_tasks(src, store)  # the check runs solve.sh with [solution] env
    assert (result.imported, result.checked) == (True, True), result.reason
    assert result.notes == ("[verifier] env FROM_HOST takes its default 'the-default': "
                            "tackroom never reads this machine's $TACKROOM_TEST_HOST_ONLY",)

    ep = _episode(tmp_path, store, "env-tables")  # the expert's script exports [solution] env
    assert ep.outcome.value == "success", ep.error
    assert ep.meta["verifier"]["env"] == ["FROM_HOST", "GREETING"]
    exported = tackroom.export_run("latest", fmt="jsonl", out=tmp_path / "e.jsonl",
                                   store=tmp_path / "r.duckdb")
    assert exported.n_episodes == 1
    text = (tmp_path / "e.jsonl").read_text()
    assert "export ANSWER=42" in text and "host-secret-value" not in text


def test_a_host_variable_without_a_default_or_a_bad_network_mode_is_refused_on_import(
        tmp_path):
    src = tmp_path / "src"
    _task(src, "judge-key", '[verifier]\nenv = { OPENAI_API_KEY = "${OPENAI_API_KEY}" }\n',
          solve="touch done.txt", test="echo 1 > /logs/verifier/reward.txt")
    _task(src, "odd-network", '[environment]\nnetwork_mode = "bridge"\n',
          solve="touch done.txt", test="echo 1 > /logs/verifier/reward.txt")
    results = {r.id: r for r in import_tasks(src, tmp_path / "tasks", check=False)}
    assert not any(r.imported for r in results.values())
    assert results["judge-key"].reason == (
        "task.toml's [verifier] env OPENAI_API_KEY = '${OPENAI_API_KEY}' reads this machine's "
        "$OPENAI_API_KEY, which tackroom never passes into an episode (its records would keep "
        "it); give it a default: ${OPENAI_API_KEY:-value}")
    assert "[environment] network_mode must be one of public, no-network, allowlist, not " \
           "'bridge'" in results["odd-network"].reason
    assert all("\n" not in r.reason for r in results.values())
    assert not (tmp_path / "tasks").exists() or not any((tmp_path / "tasks").iterdir())
