"""Claude Code and Gemini CLI as harnesses: their experts through the gateway, and a local model.

Neither CLI speaks OpenAI's chat completions: the gateway answers Claude Code in
Anthropic's Messages API (``POST /v1/messages?beta=true``, streamed) and Gemini
CLI in Gemini's ``streamGenerateContent``, and asks the backend in chat
completions. Each CLI's expert solves 3 code and 3 terminal tasks; a tiny model
behind ``tackroom serve`` completes an episode under each with the served token
ids and log-probs on every agent turn; each CLI's own sub-agent's calls are
labelled side calls in threads of their own; each stops itself at its turn budget.
The reachability probe has a row per CLI in tests/test_agents.py. The requests each
CLI sent, captured, are in tests/fixtures/dialects/claude-code and gemini-cli.
"""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cli_model import check_tiny_model_episodes, one_layer_chat_dir  # noqa: F401 - a fixture

import tackroom
from tackroom.agents.install import ensure_installed
from tackroom.core.policy import PolicyRequest, PolicyResponse, ToolCall
from tackroom.harness.spec import load_harness
from tackroom.sandbox import sandbox_available
from tackroom.wire.dialect import find

FIXTURES = Path(__file__).parent / "fixtures" / "dialects"
needs_sandbox = pytest.mark.skipif(not sandbox_available(), reason="needs bubblewrap")

TERMINAL_TASKS = ["csv-column-sum", "archive-logs", "count-errors"]
CODE_TASKS = ["add-business-days", "allocate-ratios", "args-double-dash"]
#: Each CLI and the shell tool its expert calls (both take a `command` string).
CLIS = {"claude-code": "Bash", "gemini-cli": "run_shell_command"}
#: A random model's replies are cut at max_tokens; Claude Code then compacts its history, a
#: summary side call over its ~25k-token prompt each time (minutes on a CPU): not what the
#: tiny-model test is about.
QUICK = {"claude-code": '[agent.env]\nDISABLE_COMPACT = "1"\n'}
#: Each CLI's tool that starts a sub-agent, and a call of it that waits for its answer.
DELEGATE = {
    "claude-code": ("Agent", {"description": "Count the files", "subagent_type": "general-purpose",
                              "prompt": "Say how many files there are.",
                              "run_in_background": False}),
    "gemini-cli": ("invoke_agent", {"agent_name": "generalist",
                                    "prompt": "Say how many files there are."})}


@pytest.fixture(scope="module")
def installed():
    """Both CLIs in the shared cache, side by side (a cache hit after the first run)."""
    with ThreadPoolExecutor(len(CLIS)) as pool:
        return list(pool.map(ensure_installed, [load_harness(n).agent for n in CLIS]))


@pytest.mark.parametrize(("cli", "dialect"), [("claude-code", "anthropic"),
                                              ("gemini-cli", "gemini")])
def test_the_gateway_reads_each_clis_requests_as_captured(cli, dialect):
    """Every captured request of the CLI finds its dialect by method and path, and translates
    to a chat request with the CLI's shell tool, its system prompt first and, on the second
    turn, the shell's output as a tool message."""
    sent = json.loads((FIXTURES / cli / "requests.json").read_text())
    assert len(sent) == 2
    for name, request in sent.items():
        path, _, query = request["path"].partition("?")
        found = find(request["method"], path, query)
        assert found is not None, request["path"]
        d, route, match = found
        assert (d.name, route.kind) == (dialect, "turn")
        chat = d.to_chat(json.loads((FIXTURES / cli / name).read_text()), match)
        assert chat["stream"] is True
        assert chat["messages"][0]["role"] == "system"
        assert len(chat["messages"][0]["content"]) > 1000
        assert CLIS[cli] in [t["function"]["name"] for t in chat["tools"]]
        tool_messages = [m for m in chat["messages"] if m["role"] == "tool"]
        assert len(tool_messages) == (1 if "tool-result" in name else 0)
    if cli == "claude-code":  # its environment, sent as a system turn after the task
        assert [m["role"] for m in chat["messages"][:3]] == ["system", "user", "system"]


@pytest.mark.parametrize("suite", ["code", "terminal"])
@pytest.mark.usefixtures("installed")
@needs_sandbox
@pytest.mark.slow
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
        # Under -p neither CLI makes a side call (a title, a summary, a token count): both
        # calls are agent turns of one thread, the second's history extending the first's.
        assert agent["calls"] == len(ep.turns) == 2, agent
        assert [(t.side, t.thread) for t in ep.turns] == [(None, 0), (None, 0)]
        first, second = ep.turns
        assert first.messages[0]["role"] == "system"  # the CLI's own system prompt
        assert len(first.messages[0]["content"]) > 1000
        assert [tc["function"]["name"] for tc in first.tool_calls] == [CLIS[cli]]
        assert any(m.get("role") == "tool" for m in second.messages)
        assert second.raw_text and not second.tool_calls
        assert CLIS[cli] in [t["function"]["name"] for t in agent["tools"]]


@pytest.mark.usefixtures("installed")
@needs_sandbox
@pytest.mark.slow
def test_a_tiny_model_completes_an_episode_under_each_cli(
        tmp_path, one_layer_chat_dir, monkeypatch):  # noqa: F811
    """gateway -> ``tackroom serve`` -> a random model: every agent turn has the served token
    ids and log-probs, though each CLI asked in its own API; each episode ends as the model's
    own (no infra_error). Both CLIs in one run, behind one server."""
    monkeypatch.setenv("TACKROOM_HARNESS_PATH", str(tmp_path))
    check_tiny_model_episodes(tmp_path, one_layer_chat_dir, CLIS, turns=1, extra=QUICK)


class Delegating:
    """A policy whose agent hands the task to a sub-agent on its first call; every later call,
    the sub-agent's and the agent's own, gets a plain-text answer."""

    id = "delegating"

    def __init__(self, cli: str) -> None:
        self.tool, self.arguments = DELEGATE[cli]
        self.calls = 0

    async def act(self, request: PolicyRequest) -> PolicyResponse:
        self.calls += 1
        if self.calls > 1:
            return PolicyResponse(text="There is one file.", model="delegating")
        call = ToolCall(id="call_delegate", name=self.tool, arguments=json.dumps(self.arguments))
        return PolicyResponse(text=None, tool_calls=[call], model="delegating")

    async def aclose(self) -> None:
        return None


@pytest.mark.parametrize("cli", list(CLIS))
@pytest.mark.usefixtures("installed")
@needs_sandbox
@pytest.mark.slow
def test_each_clis_sub_agent_calls_are_labelled_side_calls_in_threads_of_their_own(tmp_path,
                                                                                  cli):
    """The CLI's own sub-agent (Claude Code's Agent tool, Gemini CLI's invoke_agent) calls the
    model with a prompt of its own: those calls are recorded as ``subagent`` side calls, each
    sub-agent's in a thread of its own, and the agent's calls before and after it are the
    agent thread's turns."""
    run = tackroom.evaluate("terminal", tasks=["csv-column-sum"], harnesses=[cli],
                            policies=[Delegating(cli)], seeds=[0], store=tmp_path / "r.duckdb")
    [ep] = run.load_episodes()
    agent = ep.meta["agent"]
    assert ep.outcome.value == "failure" and agent["exit"] == 0, (ep.error, agent.get("output"))
    first, *middle, last = ep.turns
    assert [tc["function"]["name"] for tc in first.tool_calls] == [DELEGATE[cli][0]]
    assert (first.side, first.thread, last.side, last.thread) == (None, 0, None, 0)
    assert middle and all(t.side == "subagent" and t.thread > 0 for t in middle), [
        (t.side, t.thread) for t in ep.turns]
    assert any(m.get("role") == "tool" for m in last.messages)  # the sub-agent's answer


@pytest.mark.usefixtures("installed")
@needs_sandbox
@pytest.mark.slow
def test_each_cli_stops_itself_at_its_turn_budget(tmp_path, monkeypatch):
    """Given ``[budget] turns`` as its own limit (Claude Code's ``--max-turns``, exit 1; Gemini
    CLI's ``model.maxSessionTurns``, exit 53), each CLI makes that many calls and stops: the
    gateway has nothing to refuse. Under a one-call budget the expert's one call runs the
    whole solution, so the task is solved all the same."""
    monkeypatch.setenv("TACKROOM_HARNESS_PATH", str(tmp_path))
    for cli in CLIS:
        (tmp_path / f"{cli}-1.toml").write_text(
            f'extends = "{cli}"\nname = "{cli}-1"\n[budget]\nturns = 1\nwall_seconds = 300\n')
    run = tackroom.evaluate("terminal", tasks=["csv-column-sum"],
                            harnesses=[f"{cli}-1" for cli in CLIS], policies=["expert"],
                            seeds=[0], store=tmp_path / "r.duckdb")
    episodes = {ep.harness: ep for ep in run.load_episodes()}
    for cli, status in (("claude-code", 1), ("gemini-cli", 53)):
        ep = episodes[f"{cli}-1"]
        agent = ep.meta["agent"]
        assert ep.outcome.value == "success", (ep.error, agent.get("output"))
        assert (agent["exit"], agent["calls"], agent["refused_calls"]) == (status, 1, 0), agent


def test_the_shell_script_expert_sends_what_gemini_cli_would_refuse_base64_encoded(tmp_path):
    """Gemini CLI refuses a command with ``$(…)``, backticks, ``<(…)`` or ``>(…)`` anywhere
    in it (a comment of Terminal-Bench's solution template has backticks): the expert's
    script then goes as ``echo B64 | base64 -d | bash``, which runs the same script."""
    from tackroom.agents.experts import make_agent_expert
    from tackroom.core.actions import Shell

    plain = make_agent_expert([Shell("echo hi > a.txt")], "shell-script")
    assert plain.script == "set -e\necho hi > a.txt"
    script = "# use the `ls` command\necho \"$(printf %s ok)\" > b.txt\ncat <(echo c) > c.txt"
    expert = make_agent_expert([Shell(script)], "shell-script")
    assert not any(m in expert.script for m in ("$(", "`", "<(", ">(")), expert.script
    assert expert.script.startswith("echo ") and expert.script.endswith(" | base64 -d | bash")
    subprocess.run(["bash", "-c", expert.script], cwd=tmp_path, check=True)
    assert [(tmp_path / f).read_text() for f in ("b.txt", "c.txt")] == ["ok\n", "c\n"]
