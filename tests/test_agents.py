"""Real agent CLIs, unmodified, as harnesses: in the sandbox, their model calls through the gateway.

The CLI is installed from its registry on first use into ``~/.cache/tackroom``
(reused afterwards). Its scripted expert answers behind the gateway in the CLI's
own format, so every episode solves its task; every call is a turn.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from cli_model import one_layer_chat_dir  # noqa: F401 - a fixture
from conftest import free_port

import tackroom
from tackroom.agents.install import ensure_installed, find_python
from tackroom.core.errors import InfraError
from tackroom.core.policy import Sampling
from tackroom.harness.spec import load_harness
from tackroom.records.store import RecordStore
from tackroom.sandbox import sandbox_available
from tackroom.serve import ServerThread
from tackroom.suites.terminal import TerminalSuite
from tackroom.testing import ScriptedOpenAIServer
from tackroom.train.config import RLConfig
from tackroom.train.export import export_groups

pytestmark = [pytest.mark.skipif(not sandbox_available(), reason="needs bubblewrap"),
              pytest.mark.slow]

TERMINAL_TASKS = ["csv-column-sum", "archive-logs", "count-errors"]
CODE_TASKS = ["add-business-days", "allocate-ratios", "args-double-dash"]
MINI_SYSTEM = "You are a helpful assistant that can interact with a computer."
#: Each shipped CLI and the shell tool its expert calls (Aider has none: it only edits).
SHIPPED = {"mini-swe-agent": "bash", "qwen-code": "run_shell_command", "openhands": "terminal",
           "aider": None}


def _runnable(name: str) -> bool:
    """Whether this machine has what the CLI's install needs (OpenHands: a Python 3.12)."""
    python = load_harness(name).agent["install"].get("python")
    try:
        return python is None or bool(find_python(python))
    except InfraError:
        return False


RUNNABLE = [name for name in SHIPPED if _runnable(name)]


@pytest.fixture(scope="module", autouse=True)
def installed():
    """Every shipped CLI this machine can run in the cache, installed side by side (minutes,
    the first time on a machine; a cache hit afterwards)."""
    agents = [load_harness(name).agent for name in RUNNABLE]
    with ThreadPoolExecutor(len(agents)) as pool:
        return list(pool.map(ensure_installed, agents))


@pytest.mark.parametrize("suite", ["code", "terminal"])
def test_each_cli_solves_tasks_with_its_expert_behind_the_gateway(tmp_path, suite):
    """Every shipped CLI this machine can run, in one run (their episodes side by side): each
    solves every task of the suite (Aider, which has no shell, the code tasks only)."""
    tasks = CODE_TASKS if suite == "code" else TERMINAL_TASKS
    harnesses = [h for h in RUNNABLE if suite == "code" or SHIPPED[h]]
    run = tackroom.evaluate(suite, tasks=tasks, harnesses=harnesses, policies=["expert"],
                            seeds=[0], store=tmp_path / "r.duckdb")
    episodes = run.load_episodes()
    for harness in harnesses:
        assert sorted(ep.task.split("/")[-1] for ep in episodes if ep.harness == harness) \
            == sorted(tasks), harness
    for ep in episodes:
        harness, tool = ep.harness, SHIPPED[ep.harness]
        assert ep.outcome.value == "success", (ep.task, ep.error, ep.meta.get("agent"))
        agent = ep.meta["agent"]
        assert agent["exit"] == 0 and agent["cli"] == harness, agent
        # Every model call the CLI made is a turn, with the CLI's own prompt and tools.
        assert agent["calls"] == len(ep.turns) >= 1
        first = ep.turns[0]
        assert first.messages[0]["role"] == "system"  # the CLI's own system prompt, as sent
        assert len(json.dumps(first.messages)) > 1000
        if tool is None:  # Aider: SEARCH/REPLACE edits in text, no tools
            assert "<<<<<<< SEARCH" in first.raw_text and not first.tool_calls
            continue
        assert [tc["function"]["name"] for tc in first.tool_calls] == [tool]
        # The second call carries what the first command printed back to the model.
        assert len(ep.turns) == 2 and any(m.get("role") == "tool"
                                          for m in ep.turns[1].messages)
        if harness == "mini-swe-agent":
            assert MINI_SYSTEM in ep.turns[0].messages[0]["content"]
            assert "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in json.dumps(ep.turns[1].tool_calls)


def test_aider_cannot_express_a_task_that_needs_a_shell():
    plan = tackroom.plan("terminal", tasks=["csv-column-sum"], harnesses=["aider", "openhands"],
                         policies=["expert"], seeds=[0])
    assert [(t.id, h.name) for t, h in plan.grid.inexpressible] == [("csv-column-sum", "aider")]
    assert [c.harness.name for c in plan.grid.cells] == ["openhands"]


#: A CLI of each kind: Python (litellm), Node, a native binary (Codex), Bun (OpenCode).
PROBED = ["mini-swe-agent", "codex", "opencode", "claude-code", "gemini-cli"]


def test_an_agent_cli_reaches_only_the_gateway(tmp_path):
    """The reference solution of this task is a probe run *by the CLI*; the tests pass
    only if the probe reached nothing: not the host's loopback, not the internet. Every
    probed CLI in one run, their episodes side by side."""
    store = tmp_path / "tasks"
    d = store / "net-probe"
    (d / "tests").mkdir(parents=True)
    (d / "solution").mkdir()
    (d / "instruction.md").write_text("Report which hosts you can reach.\n")
    (d / "task.toml").write_text('version = "1.0"\n')
    with ScriptedOpenAIServer() as host_server:
        (d / "solution" / "solve.sh").write_text(
            "#!/bin/bash\npython3 - <<'EOF'\nimport socket\n"
            f"targets = [('127.0.0.1', {host_server.port}), ('127.0.0.1', {free_port()}), "
            "('1.1.1.1', 443), ('10.0.0.1', 80)]\nout = []\n"
            "for host, port in targets:\n"
            "    try:\n        socket.create_connection((host, port), timeout=3).close()\n"
            "        out.append(f'REACHED {host}:{port}')\n"
            "    except OSError as e:\n        out.append(f'blocked {host}:{port}')\n"
            "open('probe.txt', 'w').write('\\n'.join(out) + '\\n')\nEOF\n")
        (d / "tests" / "test.sh").write_text(
            "#!/bin/bash\nif [ -f probe.txt ] && ! grep -q REACHED probe.txt && "
            "[ $(grep -c blocked probe.txt) = 4 ]; then echo 1 > /logs/verifier/reward.txt; "
            "else cat probe.txt; echo 0 > /logs/verifier/reward.txt; fi\n")
        run = tackroom.evaluate(TerminalSuite(store=store), tasks=["net-probe"],
                                harnesses=PROBED, policies=["expert"], seeds=[0],
                                store=tmp_path / "r.duckdb")
        assert host_server.requests == []
    episodes = run.load_episodes()
    assert sorted(ep.harness for ep in episodes) == sorted(PROBED)
    for ep in episodes:
        assert ep.outcome.value == "success", (ep.harness, ep.error, ep.meta.get("verifier"))
        assert len(ep.turns) == 2  # and the gateway it did reach recorded both calls


def test_eval_through_tackroom_serve_records_token_ids_and_logprobs(
        tmp_path, one_layer_chat_dir, monkeypatch):  # noqa: F811
    """``--policy openai:MODEL --base-url URL`` against ``tackroom serve``: the CLIs' calls go
    gateway -> serve -> the local model; each is a turn with its token ids and log-probs, and
    the records export for training across both real harnesses with the CLIs' own tools."""
    monkeypatch.setenv("TACKROOM_HARNESS_PATH", str(tmp_path))  # the variants, by name
    harnesses = []
    for name in ("mini-swe-agent", "aider"):
        short = tmp_path / f"{name}-short.toml"
        short.write_text(f'extends = "{name}"\n[budget]\nturns = 2\nwall_seconds = 300\n')
        harnesses.append(str(short))
    with ServerThread(one_layer_chat_dir) as srv:
        run = tackroom.evaluate("code", tasks=["add-business-days"], harnesses=harnesses,
                                policies=[f"openai:{srv.model_name}"], base_url=srv.base_url,
                                seeds=[0], sampling=Sampling(max_tokens=8, logprobs=True),
                                store=tmp_path / "r.duckdb")
    episodes = run.load_episodes()
    assert sorted(ep.harness for ep in episodes) == ["aider-short", "mini-swe-agent-short"]
    for ep in episodes:
        # Two turns of a random model: it fails, or uses both turns (the gateway refuses more).
        assert ep.outcome.value in ("failure", "timeout", "budget_exhausted"), (ep.harness,
                                                                                ep.error)
        assert ep.turns, ep.meta.get("agent")
        for turn in ep.turns:
            assert turn.token_ids and len(turn.token_ids) == len(turn.logprobs) <= 8
            assert turn.completion_tokens == len(turn.token_ids)
            assert turn.messages[0]["role"] == "system"
    with RecordStore(tmp_path / "r.duckdb") as store:
        out = export_groups(store, tmp_path / "groups", RLConfig(group="cross"),
                            runs=[run.id])
    assert out.episodes == 2 and out.groups == 1  # cross: one group over both harnesses
    rows = pq.read_table(out.files["trl"]).to_pylist()
    assert rows and all(r["group"] == rows[0]["group"] for r in rows)
    # Each row offers the tools its CLI offered (no harness file holds them): recorded
    # with the episode, e.g. mini-swe-agent's one bash tool; Aider has none.
    recorded = {ep.harness: ep.meta["agent"]["tools"] for ep in episodes}
    assert [t["function"]["name"] for t in recorded["mini-swe-agent-short"]] == ["bash"]
    assert recorded["aider-short"] is None
    for r in rows:
        assert json.loads(r["tools"]) == (recorded[r["harness"]] or [])


def test_a_cli_that_crashes_on_start_is_an_infra_error_with_its_output(tmp_path):
    broken = tmp_path / "mini-broken.toml"
    broken.write_text(Path(tackroom.__file__).parent.joinpath(
        "harness", "agents", "mini-swe-agent.toml").read_text().replace(
        '"-m", "minisweagent"', '"-m", "minisweagent_no_such_module"').replace(
        'name = "mini-swe-agent"', 'name = "mini-broken"'))
    run = tackroom.evaluate("terminal", tasks=["csv-column-sum"], harnesses=[str(broken)],
                            policies=["expert"], seeds=[0], store=tmp_path / "r.duckdb")
    final = run.final_episodes()
    assert [r["outcome"] for r in final] == ["infra_error"]
    assert "exited 1 before its first model call" in final[0]["error"]
    assert "minisweagent_no_such_module" in final[0]["error"]
