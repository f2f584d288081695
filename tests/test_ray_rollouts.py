"""Ray rollout workers: `tackroom eval --ray` on a real local Ray cluster.

Starting Ray takes seconds, so there are few tests. The same grid is run locally
and on Ray actors; the records must be the same episodes — ids, outcomes, and
every action of every turn — recorded by the driver through the same writer.
An agent harness (a real CLI in the sandbox) runs on the actors too, through
the actor's own model gateway.
"""

from __future__ import annotations

import importlib.util

import pytest
from conftest import run_cli

from tackroom.records import RecordStore
from tackroom.sandbox import sandbox_available

# find_spec, not importorskip: importing Ray at collection costs seconds.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                reason="needs the scale extra: pip install 'tackroom[scale]'")
GRID = ["--suite", "toy", "--tasks", "click-button,enter-text,login-user",
        "--harness", "som-tools,html-commands", "--policy", "expert", "--seeds", "0-2", "-n", "4"]


def episodes(db: str) -> dict[str, tuple]:
    with RecordStore(db) as store:
        (run,) = store.runs()
        assert run["status"] == "finished"
        return {ep.episode_id: (ep.task, ep.harness, ep.seed, ep.attempt, ep.outcome.value,
                                [t.actions for t in ep.turns])
                for ep in store.iter_episodes(run["run_id"])}


@pytest.mark.slow
def test_ray_workers_record_the_same_episodes_as_a_local_run(tmp_path):
    local, on_ray = str(tmp_path / "local.duckdb"), str(tmp_path / "ray.duckdb")
    p = run_cli("eval", *GRID, "--db", local, cwd=tmp_path, timeout=240)
    assert p.returncode == 0, p.stderr
    p = run_cli("eval", *GRID, "--ray", "--db", on_ray, cwd=tmp_path, timeout=240)
    assert p.returncode == 0, p.stderr
    assert "Ray rollout worker(s)" in p.stdout and "18/18" in p.stdout

    a, b = episodes(local), episodes(on_ray)
    assert len(a) == 3 * 2 * 3
    assert a == b
    assert {v[4] for v in b.values()} == {"success"}


#: Codex: a native binary that starts in a second (mini-swe-agent on Ray actors is
#: tests/test_agents_rl.py's), through the Responses dialect of each actor's gateway.
AGENT_GRID = ["--suite", "code", "--tasks", "add-business-days,allocate-ratios",
              "--harness", "codex", "--policy", "expert", "--seeds", "0", "-n", "2"]


def agent_episodes(db: str) -> dict[str, tuple]:
    with RecordStore(db) as store:
        (run,) = store.runs()
        assert run["status"] == "finished"
        return {ep.episode_id: (ep.task, ep.harness, ep.seed, ep.attempt, ep.outcome.value,
                                ep.error, len(ep.turns), ep.meta["agent"]["calls"],
                                [[tc["function"]["name"] for tc in t.tool_calls]
                                 for t in ep.turns])
                for ep in store.iter_episodes(run["run_id"])}


@pytest.mark.slow
@pytest.mark.skipif(not sandbox_available(), reason="needs bubblewrap")
def test_agent_harness_episodes_run_on_ray_workers_as_they_do_locally(tmp_path):
    """Codex, unmodified, with its expert behind each actor's own gateway: the same
    episodes, outcomes and turns as the local executor (the CLI from the install cache)."""
    local, on_ray = str(tmp_path / "local.duckdb"), str(tmp_path / "ray.duckdb")
    p = run_cli("eval", *AGENT_GRID, "--db", local, cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr
    p = run_cli("eval", *AGENT_GRID, "--ray", "--db", on_ray, cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "Ray rollout worker(s)" in p.stdout and "2/2" in p.stdout

    a, b = agent_episodes(local), agent_episodes(on_ray)
    assert len(a) == 2 and a == b
    for value in b.values():
        assert value[4] == "success" and value[6] == value[7] == 2, value
        assert value[8] == [["exec_command"], []]  # its exec tool, then a plain reply
