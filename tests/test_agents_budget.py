"""The turn budget of an agent harness, enforced at the gateway whatever the CLI.

``[budget] turns`` caps the model calls an episode's route answers; the call
past it is refused (a 400 the CLI does not retry), so the CLI stops. The
episode is ``budget_exhausted`` with every turn it made, and the task's verifier
has run all the same (Terminal-Bench's rule). mini-swe-agent and Qwen Code are
also given the budget as their own limit (``step_limit``, ``--max-session-turns``)
and stop themselves; Qwen Code without its flag, and OpenHands (which has none),
are stopped by the gateway.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import tackroom
from tackroom.agents.experts import shell_tool
from tackroom.agents.install import find_python
from tackroom.core.errors import InfraError
from tackroom.core.policy import PolicyRequest, PolicyResponse, ToolCall
from tackroom.gateway.server import BUDGET_STATUS
from tackroom.sandbox import sandbox_available
from tackroom.suites.terminal import TerminalSuite

pytestmark = [pytest.mark.skipif(not sandbox_available(), reason="needs bubblewrap"),
              pytest.mark.slow]

#: Each CLI under test and the command that says it is done ("" : a plain-text reply).
SUBMIT = {"mini-swe-agent": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "qwen-code": ""}


def _has_python(version: str) -> bool:
    try:
        return bool(find_python(version))
    except InfraError:
        return False


#: OpenHands too (one episode, under the one-turn budget) where its Python 3.12 is here.
ALSO = ["openhands"] if _has_python("3.12") else []


class LookFirst:
    """A scripted model that needs two turns to solve the task: it looks, then writes the
    flag, then says it is done — through the CLI's own shell tool. Stateless (its step is
    the number of replies in the conversation), since one policy serves every episode.

    Not the agent expert: that runs a task's whole solution in its first call (then
    submits), so a one-call budget would stop it only after the task was solved — and the
    verifier, run all the same, would score it a success."""

    id = "look-first"

    async def act(self, request: PolicyRequest) -> PolicyResponse:
        step = sum(m.get("role") == "assistant" for m in request.messages)
        name, extra = shell_tool(request.tools or []) or ("", {})
        # mini-swe-agent's prompt tells the model how it submits; Qwen Code's does not.
        submit = SUBMIT["mini-swe-agent"] if "COMPLETE_TASK_AND_SUBMIT" in json.dumps(
            request.messages) else ""
        command = ["ls -la", "echo ok > flag.txt", submit][min(step, 2)]
        if not command:
            return PolicyResponse(text="The flag is written.", model="look-first")
        call = ToolCall(id=f"call_{step}", name=name,
                        arguments=json.dumps({"command": command, **extra}))
        return PolicyResponse(text=None, tool_calls=[call], model="look-first")

    async def aclose(self) -> None:
        return None


def flag_task(store: Path) -> None:
    d = store / "write-flag"
    (d / "tests").mkdir(parents=True)
    (d / "solution").mkdir()
    (d / "instruction.md").write_text("Write the word ok into flag.txt.\n")
    (d / "task.toml").write_text('version = "1.0"\n')
    (d / "solution" / "solve.sh").write_text("#!/bin/bash\necho ok > flag.txt\n")
    (d / "tests" / "test.sh").write_text(
        "#!/bin/bash\necho VERIFIER-RAN\nif grep -qx ok flag.txt 2>/dev/null; then "
        "echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n")


def one_turn(tmp_path: Path, cli: str, name: str | None = None, drop: str = "") -> str:
    """A variant of ``cli`` with a budget of one model call (``drop``: text cut from its
    file, e.g. its own turn flag); its name."""
    name = name or f"{cli}-1"
    text = (Path(tackroom.__file__).parent / "harness" / "agents" / f"{cli}.toml").read_text()
    assert drop in text
    text = text.replace(drop, "").replace(f'name = "{cli}"', f'name = "{name}"')
    (tmp_path / f"{name}.toml").write_text(text.replace("\nturns = ", "\nturns = 1 #", 1))
    return name


def play(tmp_path: Path, harnesses: list[str]) -> dict[str, Any]:
    """The look-first model on the write-flag task under each harness: episodes by harness."""
    flag_task(tmp_path / "tasks")
    run = tackroom.evaluate(TerminalSuite(store=tmp_path / "tasks"), tasks=["write-flag"],
                            harnesses=[str(tmp_path / f"{h}.toml") if (
                                tmp_path / f"{h}.toml").exists() else h for h in harnesses],
                            policies=[LookFirst()], seeds=[0], store=tmp_path / "r.duckdb")
    episodes = {ep.harness: ep for ep in run.load_episodes()}
    assert sorted(episodes) == sorted(harnesses)
    return episodes


def check_stopped(ep: Any) -> dict[str, Any]:
    """One call under a one-call budget: it looked and was stopped before it wrote; the
    verifier ran after the CLI stopped, and failed. The CLI's ``meta.agent``."""
    agent = ep.meta["agent"]
    assert ep.outcome.value == "budget_exhausted", (ep.harness, ep.error, agent)
    assert ep.error == "turn budget of 1 model call(s) used"
    assert len(ep.turns) == agent["calls"] == 1
    assert "ls -la" in ep.turns[0].tool_calls[0]["function"]["arguments"]
    assert "VERIFIER-RAN" in ep.meta["verifier"]["output"] and ep.reward == 0
    return agent


def test_a_cli_stops_at_its_own_turn_limit_and_the_gateway_stops_one_without(tmp_path):
    """One run, the CLIs' episodes side by side.

    mini-swe-agent (``step_limit``) and Qwen Code (``--max-session-turns``, exit 53) are
    given ``{turns}`` and stop themselves: the gateway has nothing to refuse.

    Qwen Code without its flag, and OpenHands (which has none): the gateway refuses the
    call past the budget, and the CLI ends its run on that error without retrying."""
    own = [one_turn(tmp_path, "mini-swe-agent"), one_turn(tmp_path, "qwen-code")]
    bare = one_turn(tmp_path, "qwen-code", "qwen-bare-1", '"--max-session-turns", "{turns}"')
    gateway_stopped = [bare, *(one_turn(tmp_path, cli) for cli in ALSO)]
    episodes = play(tmp_path, ["mini-swe-agent", "qwen-code", *own, *gateway_stopped])
    # The whole budget: look, write, then submit (mini-swe-agent) or a plain-text reply.
    for full in (episodes["mini-swe-agent"], episodes["qwen-code"]):
        assert full.outcome.value == "success", (full.error, full.meta.get("agent"))
        assert len(full.turns) == 3 and full.meta["agent"]["refused_calls"] == 0
    for name in own:
        assert check_stopped(episodes[name])["refused_calls"] == 0
    assert episodes["qwen-code-1"].meta["agent"]["exit"] == 53
    for name in gateway_stopped:
        assert check_stopped(episodes[name])["refused_calls"] == 1
    qwen = episodes[bare].meta["agent"]
    assert qwen["exit"] not in (0, 53) and f"API Error: {BUDGET_STATUS}" in qwen["output"]
