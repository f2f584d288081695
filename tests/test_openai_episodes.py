"""Episodes against a real OpenAI-compatible HTTP server on 127.0.0.1 with scripted replies.

Every test runs twice, once per wire client: the lean default and the SDK.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from tackroom.core import Outcome, Sampling
from tackroom.harness.spec import load_harness
from tackroom.policies import openai_policy
from tackroom.policies.openai_policy import CLIENTS, OpenAIPolicy
from tackroom.records import RecordStore
from tackroom.runner.grid import plan_grid, run_cells
from tackroom.suites import get_suite
from tackroom.testing import Reply, ScriptedOpenAIServer, error, text, tool_call

SUITE = get_suite("toy")
TASK = next(t for t in SUITE.tasks() if t.id == "click-button")
SECRET = "sk-episode-SECRET-0123456789"


@pytest.fixture(autouse=True, params=CLIENTS)
def client(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The wire client every policy built without ``client=`` gets in this test."""
    monkeypatch.setattr(openai_policy, "DEFAULT_CLIENT", request.param)
    return request.param


def right_ref(seed: int) -> int:
    env = SUITE.make_env(TASK)
    obs = env.reset(seed)
    label = obs.instruction.split('"')[1]
    return next(e.ref for e in obs.elements if e.tag == "button" and e.text == label)


def run_against(srv, harness: str, store=None, seeds=(0,), **policy_opts):
    async def go():
        policy = OpenAIPolicy("scripted-model", base_url=srv.base_url, api_key=SECRET,
                              backoff_base=0.01, backoff_max=0.05, **policy_opts)
        try:
            plan = plan_grid([TASK], [load_harness(harness)], [policy], list(seeds),
                             Sampling(logprobs=True))
            return await run_cells(plan.cells, SUITE, "r", store=store, concurrency=1)
        finally:
            await policy.aclose()

    return asyncio.run(go())


def test_malformed_tool_call_then_http_500_then_success(tmp_path):
    ref = right_ref(0)
    script = [tool_call("click", '{"ref": '), error(500, "overloaded"),
              tool_call("click", {"ref": ref}, logprobs=[-0.25, -0.5])]
    store = RecordStore(tmp_path / "r.duckdb")
    store.start_run("r", "test", {}, 1)
    with ScriptedOpenAIServer(script) as srv:
        (ep,) = run_against(srv, "som-tools", store=store)
        requests = srv.requests
        headers = srv.headers
    assert ep.outcome is Outcome.SUCCESS and ep.n_turns == 2
    bad, good = ep.turns
    assert "not valid JSON" in bad.parse_error and bad.tool_calls[0]["function"]["arguments"] \
        == '{"ref": '
    assert "could not be read" in bad.feedback
    assert good.actions == [{"kind": "click", "ref": ref}] and good.logprobs == [-0.25, -0.5]
    # Three HTTP requests: the 500 was retried transparently inside turn 1.
    assert len(requests) == 3 and requests[1] == requests[2]
    second = requests[2]["messages"]
    assert second[-3]["tool_calls"][0]["function"]["arguments"] == '{"ref": '
    assert second[-2]["role"] == "tool" and "not valid JSON" in second[-2]["content"]
    assert "could not be read" in second[-1]["content"]
    assert [t["function"]["name"] for t in requests[0]["tools"]] == ["click", "type", "press"]
    assert requests[0]["logprobs"] is True
    assert any(SECRET in v for v in headers[0].values())
    # The key went over the wire, and never into a record.
    dump = json.dumps(store.query("SELECT * FROM turns"), default=str)
    dump += json.dumps(store.query("SELECT * FROM runs"), default=str)
    store.close()
    assert SECRET not in dump


def test_slow_replies_become_infra_error_then_the_retry_succeeds(tmp_path):
    ref = right_ref(1)
    slow = Reply(text="too late", delay=3.0)
    written = []

    class Store:
        def append_many(self, eps):
            written.extend(eps)

    with ScriptedOpenAIServer([slow, slow, tool_call("click", {"ref": ref})]) as srv:
        (final,) = run_against(srv, "som-tools", store=Store(), seeds=(1,), timeout=1.0,
                               max_retries=1)
    assert [e.outcome for e in written] == [Outcome.INFRA_ERROR, Outcome.SUCCESS]
    assert "timed out" in written[0].error
    assert final.success and final.attempt == 1


def test_text_harness_reads_commands_from_plain_completions():
    ref = right_ref(2)
    script = [text("Let me think about which button.\n"),
              text(f"The button is [{ref}].\n```\nclick {ref}\n```")]
    with ScriptedOpenAIServer(script) as srv:
        (ep,) = run_against(srv, "html-commands", seeds=(2,))
        first_request = srv.requests[0]
    assert ep.outcome is Outcome.SUCCESS and ep.n_turns == 2
    assert "no command found" in ep.turns[0].parse_error
    assert "tools" not in first_request
    assert "data-ref" in first_request["messages"][1]["content"]


def test_echoed_plain_key_never_reaches_records(tmp_path):
    key = "plainkey-episode-0123456789"  # no known prefix
    ref = right_ref(0)
    script = [Reply(text="I was told {key}.", tool_calls=[("click", f'{{"ref": {ref}}}')],
                    echo_key=True)]
    store = RecordStore(tmp_path / "r.duckdb")
    store.start_run("r", "test", {}, 1)
    with ScriptedOpenAIServer(script) as srv:
        async def go():
            policy = OpenAIPolicy("scripted-model", base_url=srv.base_url, api_key=key)
            try:
                plan = plan_grid([TASK], [load_harness("som-tools")], [policy], [0], Sampling())
                return await run_cells(plan.cells, SUITE, "r", store=store, concurrency=1)
            finally:
                await policy.aclose()

        (ep,) = asyncio.run(go())
        assert srv.headers[0]["authorization"] == f"Bearer {key}"
    assert ep.outcome is Outcome.SUCCESS
    dump = json.dumps(store.query("SELECT * FROM turns"), default=str)
    dump += json.dumps(store.query("SELECT * FROM episodes"), default=str)
    store.close()
    assert "I was told" in dump and key not in dump
