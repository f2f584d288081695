"""Side calls: a CLI's calls that are not agent turns are labelled, kept out of the budget, the
expert's script and training data, and each call keeps its own thread (tackroom.gateway.calls)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import openai
import pytest

from tackroom.agents.experts import make_agent_expert
from tackroom.core.actions import Shell
from tackroom.core.episode import Episode, Outcome, Turn
from tackroom.core.errors import ConfigError
from tackroom.core.policy import PolicyResponse, Sampling
from tackroom.gateway import ModelGateway
from tackroom.gateway.calls import CallClassifier, read_rules
from tackroom.records import RecordStore

OPENCODE = Path(__file__).parent / "fixtures" / "dialects" / "opencode"


def opencode(name: str) -> dict:
    """One of OpenCode 1.18.33's captured requests (title, first-turn, tool-result)."""
    return json.loads((OPENCODE / f"opencode-1.18.33-{name}.json").read_text())


def classify(calls: CallClassifier, body: dict):
    return calls.classify(body["messages"], body.get("tools"), body.get("model", ""))


def test_opencode_title_call_comes_first_and_is_relabelled_a_side_call() -> None:
    calls = CallClassifier()
    title = classify(calls, opencode("title"))
    assert (title.side, title.thread) == (None, 0)  # nothing to tell it from yet
    first = classify(calls, opencode("first-turn"))
    assert (first.side, first.thread, first.relabel) == (None, 1, {0: "title"})
    after = classify(calls, opencode("tool-result"))
    assert (after.side, after.thread) == (None, 1)  # an append-only continuation


def test_summaries_subagents_and_compacted_histories_get_their_own_threads() -> None:
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
    other = [{"type": "function", "function": {"name": "grep", "parameters": {}}}]
    sys_ = {"role": "system", "content": "You are the agent."}
    task = {"role": "user", "content": "fix the bug"}
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}
    result = {"role": "tool", "tool_call_id": "c1", "content": "ok"}
    calls = CallClassifier()
    assert calls.classify([sys_, task], tools).thread == 0
    # The client echoes the reply back in another form ("" content, reformatted arguments).
    echoed = {**call, "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{ }"}}]}
    assert calls.classify([sys_, task, echoed, result], tools).thread == 0
    summary = calls.classify([sys_, task, echoed, result,
                              {"role": "user", "content": "Summarise the conversation"}], None)
    assert summary.side == "summary" and summary.thread == 1
    compacted = calls.classify([sys_, {"role": "user", "content": "Summary: ran bash."}], tools)
    assert (compacted.side, compacted.thread) == (None, 2)  # the agent, after compaction
    sub = calls.classify([{"role": "system", "content": "You search code."}, task], other)
    assert (sub.side, sub.thread) == ("subagent", 3)
    assert calls.classify([sys_, {"role": "user", "content": "Summary: ran bash."},
                           echoed, result], tools).thread == 2


def test_a_harness_hint_labels_calls_and_bad_hints_are_one_clear_error() -> None:
    rules = read_rules([{"label": "title", "system": "title generator"}], "h [agent] side_calls")
    calls = CallClassifier(rules)
    assert classify(calls, opencode("title")).side == "title"
    assert classify(calls, opencode("first-turn")).relabel == {}
    with pytest.raises(ConfigError) as e:
        read_rules([{"label": "nap", "system": "x"}], "h [agent] side_calls")
    assert "label" in e.value.what and "title" in e.value.fix
    with pytest.raises(ConfigError, match="regular expression"):
        read_rules([{"label": "side", "model": "("}], "h [agent] side_calls")


async def _post(client: openai.AsyncOpenAI, body: dict) -> str:
    """Send one captured request as OpenCode does (streamed); the reply's text and calls."""
    said = []
    async for chunk in await client.chat.completions.create(**body):
        for choice in chunk.choices:
            said.append(choice.delta.content or "")
            said += [c.function.arguments or "" for c in choice.delta.tool_calls or []
                     if c.function]
    return "".join(said)


async def test_opencode_through_the_gateway_keeps_the_expert_script_and_budget() -> None:
    expert = make_agent_expert([Shell("echo hello > out.txt")], "shell-tool")
    async with ModelGateway(policy=expert) as gw:  # the route's expert answers
        route = gw.open_episode(Sampling(temperature=0.0), policy=expert, max_turns=2)
        client = openai.AsyncOpenAI(base_url=route.base_url, api_key=route.token,
                                    max_retries=0, timeout=30)
        async with client:  # closed first: the gateway's close need not wait for it
            title = await _post(client, opencode("title"))
            first = await _post(client, opencode("first-turn"))
            second = await _post(client, opencode("tool-result"))
            with pytest.raises(openai.BadRequestError) as refused:
                await _post(client, opencode("tool-result"))
        gw.close_episode(route.token)
    assert "Solving the task" in title  # a neutral title, not a step of the script
    assert "echo hello > out.txt" in first  # the script, whole, on the first agent turn
    assert "The task is done." in second
    # The title call did not count: the budget of 2 agent turns ran out on the fourth call.
    assert refused.value.code == "budget_exhausted"
    assert [(t.side, t.thread) for t in route.turns] == [("title", 0), (None, 1), (None, 1)]
    assert route.agent_turns == 2 and route.refused == 1


def _episode(turns: list[Turn]) -> Episode:
    return Episode(episode_id="e1", run_id="r1", task="code/t", suite="code", harness="opencode",
                   harness_hash="h", policy="expert", seed=0, outcome=Outcome.SUCCESS,
                   reward=1.0, turns=turns)


def test_labels_and_threads_survive_the_record_store(tmp_path: Path) -> None:
    title, first, second = opencode("title"), opencode("first-turn"), opencode("tool-result")
    turns = [Turn(0, messages=title["messages"], raw_text="Solving the task", side="title"),
             Turn(1, messages=first["messages"], raw_text=None, thread=1,
                  tool_calls=[{"id": "c", "type": "function",
                               "function": {"name": "bash", "arguments": "{}"}}],
                  token_ids=[5, 6], prompt_token_ids=[1, 2, 3]),
             Turn(2, messages=second["messages"], raw_text="done", thread=1)]
    ep = _episode(copy.deepcopy(turns))
    with RecordStore(tmp_path / "r.duckdb") as store:
        store.append(ep)
        store.flush()
        back = store.load_episode("e1", run_id="r1")
        froms = store.query("SELECT idx, messages_from, side, thread FROM turns ORDER BY idx")
    assert back.turns == turns
    # Turn 2 is a delta of turn 1, its own thread's last turn, not of the title call.
    assert [(r["messages_from"], r["side"], r["thread"]) for r in froms] == \
        [(None, "title", 0), (None, None, 1), (1, None, 1)]


def test_a_side_call_is_never_a_step_of_a_tool_experts_script() -> None:
    import asyncio

    from tackroom.core.policy import PolicyRequest

    expert = make_agent_expert([Shell("ls")], "shell-tool")
    title = opencode("title")
    out = asyncio.run(expert.act(PolicyRequest(messages=title["messages"], tools=None)))
    assert isinstance(out, PolicyResponse) and out.text and not out.tool_calls
    assert expert.calls == 0  # the script is still whole for the first agent turn


def test_show_prints_the_cli_run_and_labels_side_calls(tmp_path: Path) -> None:
    from conftest import run_cli

    title, first = opencode("title"), opencode("first-turn")
    ep = _episode([Turn(0, messages=title["messages"], raw_text="Solving the task",
                        side="title"),
                   Turn(1, messages=first["messages"], raw_text="done", thread=1)])
    output = "\n".join(f"line {i}" for i in range(100)) + "\nError: the last words"
    ep.meta["agent"] = {"cli": "opencode", "version": "1.18.33", "exit": 3, "timed_out": False,
                        "killed": None, "seconds": 12.5, "output": output, "startup_s": 1.25}
    db = tmp_path / "r.duckdb"
    with RecordStore(db) as store:
        store.start_run("r1", "tackroom eval", {}, n_planned=1)
        store.append(ep)
    shown = run_cli("show", "r1", "e1", "--db", str(db), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "side call (title) 0" in out and "turn 1 · thread 1" in out
    assert "agent CLI opencode 1.18.33" in out and "exit 3 · 12.5 s" in out
    assert "1 agent turn(s), 1 side call(s)" in out
    assert "Error: the last words" in out and "line 99" in out
    assert "line 5\n" not in out and "earlier line(s)" in out  # the tail, not all of it


@pytest.mark.slow
def test_an_infra_error_caused_by_the_harness_config_does_not_advise_resume(tmp_path) -> None:
    # Codex offers an exec tool with a 'cmd' parameter; an expert that needs a shell tool's
    # 'command' cannot answer it: the harness is misconfigured, re-running cannot help. The
    # gateway says so with a 400 (final for a client: Codex stops at once, no retries).
    import tackroom
    from tackroom.sandbox import sandbox_available

    if not sandbox_available():
        pytest.skip("needs bubblewrap")
    shipped = Path(tackroom.__file__).parent / "harness" / "agents" / "codex.toml"
    text = shipped.read_text().replace('name = "codex"', 'name = "codex-misfit"')
    assert 'expert = "exec-command"' in text
    misfit = tmp_path / "codex-misfit.toml"
    misfit.write_text(text.replace('expert = "exec-command"', 'expert = "shell-tool"'))
    run = tackroom.evaluate("terminal", tasks=["csv-column-sum"], harnesses=[str(misfit)],
                            policies=["expert"], seeds=[0], store=tmp_path / "r.duckdb")
    [final] = run.final_episodes()
    assert final["outcome"] == "infra_error"
    assert "offered no shell tool" in final["error"] and "codex-misfit" in final["error"]
    assert "--resume" not in final["error"] and "[agent] table" in final["error"]


def test_a_retried_call_stays_in_its_thread() -> None:
    calls = CallClassifier()
    body = opencode("first-turn")
    assert [classify(calls, body).thread for _ in range(3)] == [0, 0, 0]
    assert len(calls.threads) == 1
