"""The episode loop and the grid on the toy suite: one outcome per episode, always."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tackroom.core import InfraError, Outcome, PolicyError, Sampling, episode_id
from tackroom.core.policy import PolicyRequest, PolicyResponse, ToolCall
from tackroom.harness.spec import load_harness
from tackroom.policies import make_policy
from tackroom.runner.grid import plan_grid, resume_attempts, run_cells
from tackroom.suites import get_suite

SUITE = get_suite("toy")
TASKS = {t.id: t for t in SUITE.tasks()}


class Scripted:
    """A real in-process policy that answers from a function of the request."""

    def __init__(self, fn, pid="scripted"):
        self.fn = fn
        self.id = pid
        self.calls = 0

    async def act(self, request: PolicyRequest) -> PolicyResponse:
        self.calls += 1
        out = self.fn(request)
        if asyncio.iscoroutine(out):
            out = await out
        return out

    async def aclose(self) -> None:
        return None


class ListStore:
    """Collects what the runner writes, in order (the DuckDB store is tested on its own)."""

    def __init__(self) -> None:
        self.episodes: list = []

    def append_many(self, eps) -> None:
        self.episodes.extend(eps)


def harness(tmp_path: Path, base: str, extra: str = ""):
    p = tmp_path / f"h{abs(hash(extra)) % 10**6}.toml"
    p.write_text(f'extends = "{base}"\n{extra}')
    return load_harness(str(p))


def run(cells, **kw):
    return asyncio.run(run_cells(cells, SUITE, "run-test", **kw))


def one(task: str, h, policy, seed: int = 0):
    plan = plan_grid([TASKS[task]], [h], [policy], [seed], Sampling())
    (ep,) = run(plan.cells, concurrency=1)
    return ep


@pytest.mark.parametrize("name", ["som-tools", "html-commands", "outline-coords",
                                  "som-tools-reflect", "html-commands-single"])
def test_expert_solves_every_toy_task_through_every_shipped_harness(name):
    plan = plan_grid(list(TASKS.values()), [load_harness(name)], [make_policy("expert")],
                     range(5), Sampling())
    eps = run(plan.cells, concurrency=8)
    assert len(eps) == len(TASKS) * 5
    failed = [(e.task, e.seed, e.outcome, e.error) for e in eps if not e.success]
    assert not failed
    # The expert went through the harness's own format and parser.
    e = eps[0]
    assert e.turns and e.turns[0].actions and e.turns[0].parse_error is None
    if name.startswith("som-tools"):
        assert e.turns[0].tool_calls and e.turns[0].raw_text is None
    else:
        assert e.turns[0].raw_text and not e.turns[0].tool_calls


def test_wrong_action_is_a_task_failure(tmp_path):
    def wrong(req: PolicyRequest):
        obs = req.view.observation
        target = req.view.observation.instruction.split()[-1].strip(".\"'")
        bad = [e for e in obs.elements if e.tag == "button" and e.text != target]
        return PolicyResponse(tool_calls=[ToolCall("c", "click", f'{{"ref": {bad[0].ref}}}')])

    ep = one("click-button", load_harness("som-tools"), Scripted(wrong))
    assert ep.outcome is Outcome.FAILURE and ep.n_turns == 1 and ep.reward < 0


def test_garbage_output_is_recorded_with_the_feedback_shown(tmp_path):
    h = harness(tmp_path, "som-tools", "budget.turns = 3\n")
    ep = one("click-button", h, Scripted(lambda r: PolicyResponse(text="I am not sure.")))
    assert ep.outcome is Outcome.BUDGET_EXHAUSTED and ep.n_turns == 3
    for t in ep.turns:
        assert t.raw_text == "I am not sure."
        assert "no tool call" in t.parse_error
        assert "could not be read" in t.feedback
    # The model saw the feedback in its next turn.
    assert "could not be read" in ep.turns[1].messages[-1]["content"]
    assert ep.turns[1].messages[-2]["role"] == "assistant"


def test_malformed_output_can_end_the_episode(tmp_path):
    h = harness(tmp_path, "html-commands", 'loop.on_malformed = "end"\n')
    ep = one("click-button", h, Scripted(lambda r: PolicyResponse(text="```\nfly 3\n```")))
    assert ep.outcome is Outcome.FAILURE and ep.n_turns == 1
    assert "unknown command" in ep.turns[0].parse_error


def test_consecutive_errors_end_the_episode(tmp_path):
    h = harness(tmp_path, "som-tools", "loop.max_consecutive_errors = 2\n")
    ep = one("click-button", h, Scripted(
        lambda r: PolicyResponse(tool_calls=[ToolCall("c", "click", '{"ref": 999}')])))
    assert ep.outcome is Outcome.FAILURE and ep.n_turns == 2
    assert all("999" in t.action_error for t in ep.turns)
    assert "2 errors in a row" in ep.error


def test_action_error_feedback_reflects_where_the_harness_says(tmp_path):
    calls = {"n": 0}

    def bad_then_good(req):
        calls["n"] += 1
        if calls["n"] == 1:
            return PolicyResponse(text="```\nclick 999\n```")
        return req.view.encode(req.view.expert(req.view.observation, req.view.state))

    ep = one("click-button", load_harness("html-commands"), Scripted(bad_then_good))
    assert ep.outcome is Outcome.SUCCESS and ep.n_turns == 2
    assert "999" in ep.turns[0].action_error and "reflect" in ep.turns[0].feedback.lower()
    assert "reflect" in ep.turns[1].messages[-1]["content"].lower()


def test_slow_policy_times_out_on_the_wall_budget(tmp_path):
    h = harness(tmp_path, "som-tools", "budget.wall_seconds = 0.2\n")

    async def slow(req):
        await asyncio.Event().wait()  # never answers: only the wall budget can end the turn

    ep = one("click-button", h, Scripted(slow))
    assert ep.outcome is Outcome.TIMEOUT and "wall-clock" in ep.error


def test_token_budget(tmp_path):
    h = harness(tmp_path, "som-tools", "budget.tokens = 100\n")
    ep = one("click-checkboxes", h, Scripted(
        lambda r: PolicyResponse(text="hmm", prompt_tokens=80, completion_tokens=30)))
    assert ep.outcome is Outcome.BUDGET_EXHAUSTED and ep.n_turns == 1
    assert ep.prompt_tokens == 80 and ep.completion_tokens == 30


def test_infra_error_is_recorded_apart_and_retried_as_a_new_attempt():
    seen = []

    def flaky(req):
        seen.append(req.view.seed)
        if len(seen) == 1:
            raise InfraError("model server at http://127.0.0.1:1/v1 unreachable")
        return req.view.encode(req.view.expert(req.view.observation, req.view.state))

    store = ListStore()
    written = store.episodes
    plan = plan_grid([TASKS["click-button"]], [load_harness("som-tools")],
                     [Scripted(flaky)], [0], Sampling())
    (final,) = run(plan.cells, concurrency=1, store=store)
    assert [e.outcome for e in written] == [Outcome.INFRA_ERROR, Outcome.SUCCESS]
    assert [e.attempt for e in written] == [0, 1]
    assert written[0].episode_id != written[1].episode_id
    assert "unreachable" in written[0].error
    assert final.success


def test_policy_error_stops_the_run_and_keeps_finished_episodes():
    n = {"calls": 0}

    def bad_key(req):
        n["calls"] += 1
        if n["calls"] > 2:
            raise PolicyError("model server rejected the API key", "http://x/v1",
                              "check OPENAI_API_KEY")
        return req.view.encode(req.view.expert(req.view.observation, req.view.state))

    store = ListStore()
    written = store.episodes
    plan = plan_grid([TASKS["click-button"]], [load_harness("som-tools")],
                     [Scripted(bad_key)], range(10), Sampling())
    with pytest.raises(PolicyError, match="API key"):
        run(plan.cells, concurrency=1, store=store)
    assert [e.outcome for e in written] == [Outcome.SUCCESS] * 2 + [Outcome.INFRA_ERROR]


def test_episode_ids_are_deterministic_and_resume_skips_done_cells():
    a = episode_id("toy/x", "abc", "expert", Sampling().to_dict(), 3)
    assert a == episode_id("toy/x", "abc", "expert", Sampling().to_dict(), 3)
    assert a != episode_id("toy/x", "abc", "expert", Sampling(temperature=1).to_dict(), 3)
    assert a != episode_id("toy/x", "abc", "expert", Sampling().to_dict(), 3, attempt=1)
    plan = plan_grid([TASKS["click-button"]], [load_harness("som-tools")],
                     [make_policy("expert")], range(3), Sampling())
    c0, c1, _ = plan.cells
    todo, done = resume_attempts(plan, {c0.episode_id: "success", c1.episode_id: "infra_error"})
    assert done == 1
    assert [(c.seed, c.attempt) for c in todo] == [(1, 1), (2, 0)]


def test_tasks_a_harness_cannot_express_are_not_run(tmp_path):
    from tackroom.core.registry import register, unregister
    from tackroom.harness.interfaces import ElementRefInterface

    class ClicksOnly(ElementRefInterface):
        name = "clicks_only"
        supports = frozenset({"click"})
        specs = ElementRefInterface.specs[:1]

    register("interface")(ClicksOnly())
    try:
        h = harness(tmp_path, "som-tools", 'actions.interface = "clicks_only"\n')
        plan = plan_grid([TASKS["click-button"], TASKS["enter-text"]], [h],
                         [make_policy("expert")], range(2), Sampling())
        assert [c.task.id for c in plan.cells] == ["click-button"] * 2
        assert [(t.id, hh.name) for t, hh in plan.inexpressible] == [("enter-text", h.name)]
    finally:
        unregister("interface", "clicks_only")


class AppendStore(ListStore):
    """A store with ``append`` / ``flush`` (the runner's writer thread feeds it) that
    refuses one episode, as a real store refuses one it cannot record."""

    def __init__(self, refuse_seed: int | None = None) -> None:
        super().__init__()
        self.refuse_seed = refuse_seed
        self.flushed = 0

    def append(self, ep) -> None:
        if ep.seed == self.refuse_seed:
            raise ValueError(f"cannot record seed {ep.seed}")
        self.episodes.append(ep)

    def flush(self) -> None:
        self.flushed += 1


def test_the_writer_thread_records_every_episode_and_raises_what_the_store_refused():
    import gc

    plan = plan_grid([TASKS["click-button"]], [load_harness("som-tools")],
                     [make_policy("expert")], range(6), Sampling())
    threshold = gc.get_threshold()
    store = AppendStore()
    eps = run(plan.cells, concurrency=3, store=store)
    assert sorted(e.episode_id for e in store.episodes) == sorted(e.episode_id for e in eps)
    assert store.flushed >= 1 and gc.get_threshold() == threshold  # the run's GC undone
    with pytest.raises(ValueError, match="cannot record seed 2"):
        run(plan.cells, concurrency=3, store=AppendStore(refuse_seed=2))
    assert gc.get_threshold() == threshold
