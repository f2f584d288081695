"""Codex and OpenCode as harnesses: their experts through the gateway, and a local model.

Codex speaks OpenAI's Responses API (``POST /v1/responses``), OpenCode chat
completions; the gateway answers each in its own dialect and asks the backend in
chat completions. Each CLI's expert solves 3 code and 3 terminal tasks; OpenCode's
title call (made without ``--title``) is a labelled side call; a tiny model behind
``tackroom serve`` completes an episode under each with the served token ids and
log-probs on every agent turn. The reachability probe for both is a row of
tests/test_agents.py.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

import tackroom
from tackroom.agents.install import ensure_installed
from tackroom.core.policy import Sampling
from tackroom.harness.spec import load_harness
from tackroom.sandbox import sandbox_available
from tackroom.serve import ServerThread

pytestmark = [pytest.mark.skipif(not sandbox_available(), reason="needs bubblewrap"),
              pytest.mark.slow]

TERMINAL_TASKS = ["csv-column-sum", "archive-logs", "count-errors"]
CODE_TASKS = ["add-business-days", "allocate-ratios", "args-double-dash"]
#: Each CLI and the tool its expert calls: Codex's exec_command (a `cmd` string),
#: OpenCode's bash (`command` and `description`).
CLIS = {"codex": "exec_command", "opencode": "bash"}


@pytest.fixture(scope="module", autouse=True)
def installed():
    """Both CLIs in the shared cache, side by side (a cache hit after the first run)."""
    with ThreadPoolExecutor(len(CLIS)) as pool:
        return list(pool.map(ensure_installed, [load_harness(n).agent for n in CLIS]))


@pytest.mark.parametrize("suite", ["code", "terminal"])
@pytest.mark.parametrize("cli", list(CLIS))
def test_each_cli_solves_tasks_with_its_expert_behind_the_gateway(tmp_path, cli, suite):
    tasks = CODE_TASKS if suite == "code" else TERMINAL_TASKS
    run = tackroom.evaluate(suite, tasks=tasks, harnesses=[cli], policies=["expert"],
                            seeds=[0], store=tmp_path / "r.duckdb")
    episodes = run.load_episodes()
    assert sorted(ep.task.split("/")[-1] for ep in episodes) == sorted(tasks)
    for ep in episodes:
        agent = ep.meta["agent"]
        assert ep.outcome.value == "success", (ep.task, ep.error, agent.get("output"))
        assert agent["exit"] == 0 and agent["cli"] == cli, agent
        assert not agent.get("unanswered_calls"), agent  # it called no API the gateway lacks
        # Every agent turn is recorded, with the CLI's own prompt and tools: the script in
        # its shell tool, then (its output sent back) the plain reply that ends its run.
        # Neither makes a side call here (Codex's exec none, OpenCode none with --title):
        # both calls are agent turns of one thread.
        assert agent["calls"] == len(ep.turns) == 2, agent
        assert [(t.side, t.thread) for t in ep.turns] == [(None, 0), (None, 0)]
        first, second = ep.turns
        assert first.messages[0]["role"] == "system"  # the CLI's own system prompt
        assert len(first.messages[0]["content"]) > 1000
        assert [tc["function"]["name"] for tc in first.tool_calls] == [CLIS[cli]]
        assert any(m.get("role") == "tool" for m in second.messages)
        assert second.raw_text and not second.tool_calls
        assert CLIS[cli] in [t["function"]["name"] for t in agent["tools"]]


def test_opencodes_title_call_without_title_flag_is_a_labelled_side_call(tmp_path):
    """Without ``--title`` OpenCode first asks the model for a session title (no tools): the
    call is recorded, labelled a side call, answered without using the expert's script and
    kept out of the turn budget, so the expert still solves the task in its 2 turns."""
    command = [c for c in load_harness("opencode").agent["command"] if c != "--title="]
    variant = tmp_path / "opencode-titling.toml"
    variant.write_text('extends = "opencode"\nname = "opencode-titling"\n'
                       f'[agent]\ncommand = {json.dumps(command)}\n[budget]\nturns = 2\n')
    run = tackroom.evaluate("terminal", tasks=["csv-column-sum"], harnesses=[str(variant)],
                            policies=["expert"], seeds=[0], store=tmp_path / "r.duckdb")
    [ep] = run.load_episodes()
    agent = ep.meta["agent"]
    assert ep.outcome.value == "success", (ep.error, agent.get("output"))
    title, first, second = ep.turns
    assert title.side == "title" and "title generator" in title.messages[0]["content"]
    assert [(t.side, t.thread) for t in (first, second)] == [(None, 1), (None, 1)]
    assert [tc["function"]["name"] for tc in first.tool_calls] == ["bash"]
    assert agent["agent_turns"] == 2 and agent["refused_calls"] == 0, agent


def test_a_tiny_model_completes_episodes_under_each_cli(tmp_path, tiny_chat_dir, monkeypatch):
    """gateway -> ``tackroom serve`` -> a random model: every agent turn of either CLI has
    the served token ids and log-probs, whatever API it came in; the episodes end as the
    model's own (no infra_error)."""
    monkeypatch.setenv("TACKROOM_HARNESS_PATH", str(tmp_path))
    harnesses = []
    for name in CLIS:
        short = tmp_path / f"{name}-short.toml"
        short.write_text(f'extends = "{name}"\n[budget]\nturns = 2\nwall_seconds = 300\n')
        harnesses.append(str(short))
    with ServerThread(tiny_chat_dir) as srv:
        run = tackroom.evaluate("code", tasks=["add-business-days"], harnesses=harnesses,
                                policies=[f"openai:{srv.model_name}"], base_url=srv.base_url,
                                seeds=[0], sampling=Sampling(max_tokens=8, logprobs=True),
                                store=tmp_path / "r.duckdb")
    episodes = {ep.harness: ep for ep in run.load_episodes()}
    assert sorted(episodes) == sorted(f"{name}-short" for name in CLIS)
    for name, tool in CLIS.items():
        ep = episodes[f"{name}-short"]
        agent = ep.meta["agent"]
        assert ep.outcome.value in ("failure", "timeout", "budget_exhausted"), (
            name, ep.error, agent.get("output"))
        assert ep.turns and agent["calls"] == len(ep.turns), agent
        for turn in ep.turns:
            assert turn.token_ids and len(turn.token_ids) == len(turn.logprobs) <= 8
            assert turn.completion_tokens == len(turn.token_ids)
            assert turn.messages[0]["role"] == "system"  # the CLI's own, translated
        assert tool in [t["function"]["name"] for t in agent["tools"]]
