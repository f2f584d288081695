"""Codex and OpenCode as harnesses: their experts through the gateway, and a local model.

Codex speaks OpenAI's Responses API (``POST /v1/responses``), OpenCode chat
completions; the gateway answers each in its own dialect and asks the backend in
chat completions. Each CLI's expert solves 3 code and 3 terminal tasks; OpenCode's
title call (made without ``--title``) is a labelled side call; a tiny model behind
``tackroom serve`` completes an episode under each with the served token ids and
log-probs on every agent turn. The reachability probe for both is a row of
tests/test_agents.py. One fast test: the exec-command expert answers Codex's captured
requests in Codex's own format.
"""

from __future__ import annotations

import inspect
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest
from cli_model import check_tiny_model_episodes, one_layer_chat_dir  # noqa: F401 - a fixture

import tackroom
from tackroom.agents.experts import make_agent_expert
from tackroom.agents.install import ensure_installed
from tackroom.core.actions import Shell
from tackroom.core.policy import Sampling
from tackroom.gateway import ModelGateway
from tackroom.harness.spec import load_harness
from tackroom.sandbox import sandbox_available

CODEX = Path(__file__).parent / "fixtures" / "dialects" / "codex"

TERMINAL_TASKS = ["csv-column-sum", "archive-logs", "count-errors"]
CODE_TASKS = ["add-business-days", "allocate-ratios", "args-double-dash"]
#: Each CLI and the tool its expert calls: Codex's exec_command (a `cmd` string),
#: OpenCode's bash (`command` and `description`).
CLIS = {"codex": "exec_command", "opencode": "bash"}


def runs_the_clis(test):
    """Marks a test that runs the CLIs in the sandbox: slow, and the CLIs installed first."""
    for mark in (pytest.mark.usefixtures("installed"), pytest.mark.slow,
                 pytest.mark.skipif(not sandbox_available(), reason="needs bubblewrap")):
        test = mark(test)
    return test


@pytest.fixture(scope="module")
def installed():
    """Both CLIs in the shared cache, side by side (a cache hit after the first run)."""
    with ThreadPoolExecutor(len(CLIS)) as pool:
        return list(pool.map(ensure_installed, [load_harness(n).agent for n in CLIS]))


@pytest.mark.parametrize("suite", ["code", "terminal"])
@runs_the_clis
def test_each_cli_solves_tasks_with_its_expert_behind_the_gateway(tmp_path, suite):
    """Both CLIs in one run (their episodes side by side): each solves every task."""
    tasks = CODE_TASKS if suite == "code" else TERMINAL_TASKS
    run = tackroom.evaluate(suite, tasks=tasks, harnesses=list(CLIS), policies=["expert"],
                            seeds=[0], store=tmp_path / "r.duckdb")
    episodes = run.load_episodes()
    for cli in CLIS:
        assert sorted(ep.task.split("/")[-1] for ep in episodes if ep.harness == cli) == \
            sorted(tasks), cli
    for ep in episodes:
        agent, cli = ep.meta["agent"], ep.harness
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


@runs_the_clis
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


@runs_the_clis
def test_a_tiny_model_completes_episodes_under_each_cli(tmp_path, one_layer_chat_dir,  # noqa: F811
                                                        monkeypatch):
    """gateway -> ``tackroom serve`` -> a random model (one layer: the CLIs' prompts are long):
    every agent turn of either CLI has the served token ids and log-probs, whatever API it
    came in; the episodes end as the model's own (no infra_error)."""
    monkeypatch.setenv("TACKROOM_HARNESS_PATH", str(tmp_path))
    check_tiny_model_episodes(tmp_path, one_layer_chat_dir, CLIS, turns=2)


async def test_the_exec_command_expert_answers_codexs_captured_requests_in_its_format():
    """Codex's own requests (tests/fixtures/dialects/codex) through the gateway's Responses
    dialect: the expert calls exec_command with the script as its ``cmd`` string, then ends
    the run in plain text."""
    expert = make_agent_expert([Shell("echo hello > out.txt")], "exec-command")
    bodies = [json.loads((CODEX / f"codex-0.171.0-{n}.json").read_text())
              for n in ("first-turn", "tool-result")]
    async with ModelGateway(policy=expert) as gw:
        route = gw.open_episode(Sampling(temperature=0.0), policy=expert, max_turns=2)
        async with openai.AsyncOpenAI(base_url=route.base_url, api_key=route.token,
                                      max_retries=0, timeout=30) as client:
            # The body as Codex sent it; the keys the SDK does not know go as they are.
            known = set(inspect.signature(client.responses.create).parameters)
            replies = [await client.responses.create(
                **{k: v for k, v in b.items() if k in known and k != "stream"},
                extra_body={k: v for k, v in b.items() if k not in known}) for b in bodies]
        gw.close_episode(route.token)
    [call] = [i for i in replies[0].output if i.type == "function_call"]
    assert call.name == "exec_command"
    assert json.loads(call.arguments) == {"cmd": "set -e\necho hello > out.txt",
                                          "yield_time_ms": 30000}
    assert replies[1].output_text == "The task is done."
    assert [(t.side, t.thread) for t in route.turns] == [(None, 0), (None, 0)]
