"""The episode loop: environment ⇄ harness ⇄ policy, with exactly one outcome.

Outcomes:
- ``success`` / ``failure``: the task's verifier decided (or the harness's
  control loop ended the episode after malformed output or a failed action);
- ``budget_exhausted``: the harness's turn or token budget ran out first;
- ``timeout``: the harness's wall-clock budget ran out;
- ``infra_error``: a browser, sandbox or model server failed — never counted
  as a task failure, and retried by ``--resume``.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from dataclasses import dataclass

from tackroom.agents.install import ensure_installed
from tackroom.core.actions import Action, Submit
from tackroom.core.episode import Episode, Outcome, Turn, episode_id
from tackroom.core.errors import (
    ActionError,
    ContextLengthExceeded,
    InfraError,
    PolicyError,
    TackroomError,
)
from tackroom.core.observation import Observation
from tackroom.core.policy import ExpertView, Policy, PolicyRequest, PolicyResponse, Sampling
from tackroom.core.task import Environment, EnvironmentPool, Expert, Task, call_env
from tackroom.harness.session import HarnessSession
from tackroom.harness.spec import AgentHarness, HarnessSpec
from tackroom.policies.delegation.runtime import Delegator, note_llm_call, saved_cost
from tackroom.runner.agent import GRACE_S, Gateways, agent_loop


@dataclass(frozen=True)
class EpisodeSpec:
    """One cell of the grid: what to run, and which attempt this is."""

    task: Task
    harness: HarnessSpec
    policy: Policy
    seed: int
    sampling: Sampling
    attempt: int = 0

    @property
    def episode_id(self) -> str:
        return episode_id(self.task.key, self.harness.hash, self.policy.id,
                          self.sampling.to_dict(), self.seed, self.attempt)


async def run_episode(spec: EpisodeSpec, pool: EnvironmentPool, run_id: str,
                      expert: Expert | None = None, gateways: Gateways | None = None
                      ) -> Episode:
    """Run one episode to its single outcome. Never raises for task or infra failures.

    A :class:`PolicyError` (bad credentials, unknown model) is recorded as
    ``infra_error`` and then re-raised, because every later episode would hit it.
    An agent harness (a third-party CLI) runs through ``gateways``, the run's
    model gateways (see :mod:`tackroom.runner.agent`).
    """
    h = spec.harness
    ep = Episode(
        episode_id=spec.episode_id, run_id=run_id, task=spec.task.key, suite=spec.task.suite,
        harness=h.name, harness_hash=h.hash, policy=spec.policy.id, seed=spec.seed,
        attempt=spec.attempt, sampling=spec.sampling.to_dict(), started_at=time.time(),
    )
    wall = float(h.budget["wall_seconds"]) or None
    fatal: PolicyError | None = None
    try:
        if isinstance(h, AgentHarness):
            # Installed before the clock starts (the first time on a machine takes minutes);
            # the CLI's own time is the wall budget, reset and verifier get a grace.
            await asyncio.to_thread(ensure_installed, h.agent)
            wall = wall + GRACE_S if wall else None
        # The clock starts once the environment is the episode's: waiting for one of a
        # bounded pool's browsers (a thousand episodes, eight browsers) is not its time.
        async with pool.acquire(spec.task) as env:
            deadline = time.monotonic() + wall if wall else None
            async with asyncio.timeout(wall):
                if isinstance(h, AgentHarness):
                    await agent_loop(spec, env, ep, expert, gateways or _no_gateways())
                else:
                    await _loop(spec, env, ep, expert, deadline)
    except TimeoutError:
        ep.outcome = Outcome.TIMEOUT
        ep.error = f"wall-clock budget of {wall:g} s ran out"
    except ContextLengthExceeded as e:
        ep.outcome, ep.error = Outcome.BUDGET_EXHAUSTED, e.line()
    except PolicyError as e:
        ep.outcome, ep.error, fatal = Outcome.INFRA_ERROR, e.line(), e
    except (InfraError, TackroomError) as e:
        ep.outcome, ep.error = Outcome.INFRA_ERROR, e.line()
    except Exception as e:  # a bug or an unexpected library failure: keep the episode
        ep.outcome = Outcome.INFRA_ERROR
        ep.error = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}"
    ep.ended_at = time.time()
    if ep.failure_mode is None and ep.outcome not in (Outcome.SUCCESS, Outcome.INFRA_ERROR):
        # Endings the runner decided (budgets, the harness's error limits), in the words of
        # suites that name failure modes: Task.meta["failure_modes"] maps outcome -> mode.
        ep.failure_mode = spec.task.meta.get("failure_modes", {}).get(ep.outcome.value)
    ep.t_policy = sum(t.t_policy for t in ep.turns)
    ep.t_env += sum(t.t_env for t in ep.turns)
    ep.t_harness = sum(t.t_harness for t in ep.turns)
    if fatal is not None:
        fatal.episode = ep
        raise fatal
    return ep


def _no_gateways() -> Gateways:
    raise InfraError("an agent harness needs the run's model gateways", "runner",
                     "run it through run_cells (tackroom eval), not run_episode alone")


async def _loop(spec: EpisodeSpec, env: Environment, ep: Episode, expert: Expert | None,
                deadline: float | None) -> None:
    h = spec.harness
    t0 = time.perf_counter()
    obs = await call_env(env, env.reset, spec.seed)
    ep.t_env = time.perf_counter() - t0
    ep.instruction = obs.instruction
    session = HarnessSession.open(h, obs.instruction)
    budget = h.budget
    state: dict = {}
    feedback: str | None = None
    tokens = 0
    errors_in_row = 0
    max_errors = int(h.loop["max_consecutive_errors"])
    # Decision points declared by the harness: a decision model may take the turn.
    delegator = Delegator(h.delegation, expert) if h.delegation is not None else None
    last_error = False

    def seconds_left() -> float | None:
        # One clock for the model: the harness's wall budget and the task's own episode
        # time (a sandbox reports it as ``episode_left_s``), whichever ends first.
        left = None if deadline is None else deadline - time.monotonic()
        task_left = obs.extra.get("episode_left_s") if obs.extra else None
        if isinstance(task_left, (int, float)):
            left = float(task_left) if left is None else min(left, float(task_left))
        return left

    t0 = time.perf_counter()
    rendered = session.render(obs)
    session.add_observation(rendered, None, session.budget_line(0, 0, seconds_left()))
    pending_harness = time.perf_counter() - t0

    for t in range(int(budget["turns"])):
        t0 = time.perf_counter()
        turn = Turn(index=t, messages=session.messages())
        current = obs

        def encode(actions: list[Action], o: Observation = current) -> PolicyResponse | None:
            return session.encode(actions, o)  # `o`: this turn's observation, bound now

        view = ExpertView(task=spec.task, observation=current, state=state, encode=encode,
                          expert=expert, seed=spec.seed, harness=h.name, turn=t)
        request = PolicyRequest(messages=turn.messages, tools=session.tools,
                                sampling=spec.sampling, view=view)
        t_h = time.perf_counter() - t0 + pending_harness

        response: PolicyResponse | None = None
        if delegator is not None:
            t0 = time.perf_counter()
            decision = await delegator.decide(current, t, int(budget["turns"]), last_error)
            turn.delegation = decision.record
            if decision.action is not None:
                # Written the way the harness writes any action, so the turn reads as usual.
                response = session.encode([decision.action], current)
                if response is None:
                    decision.record.update(acted="llm", point=None, choice=None,
                                           fallback="the harness cannot express the "
                                                    "decision model's action")
                    delegator.takeovers -= 1
                else:
                    decision.record["saved"] = saved_cost(spec.policy.id, turn.messages)
            t_h += time.perf_counter() - t0
        t0 = time.perf_counter()
        if response is None:
            response = await spec.policy.act(request)
            turn.t_policy = time.perf_counter() - t0
            if delegator is not None:
                note_llm_call(spec.policy.id, turn.messages, response.prompt_tokens,
                              response.completion_tokens, turn.t_policy)

        t0 = time.perf_counter()
        turn.raw_text = response.text
        turn.tool_calls = [tc.to_dict() for tc in response.tool_calls]
        turn.prompt_tokens, turn.completion_tokens = (response.prompt_tokens,
                                                      response.completion_tokens)
        turn.token_ids, turn.logprobs, turn.adapter = (response.token_ids, response.logprobs,
                                                       response.adapter)
        turn.prompt_token_ids = response.prompt_token_ids
        turn.notes = list(response.notes)
        tokens += response.prompt_tokens + response.completion_tokens
        parsed = session.parse(response)
        turn.t_harness = t_h + time.perf_counter() - t0
        ep.turns.append(turn)

        results: list[str] = []
        feedback = None
        done = False
        if parsed.error is not None:
            turn.parse_error = parsed.error
            feedback = session.feedback_for_parse_error(parsed.error)
            results = [f"error: {parsed.error}"] * max(1, len(response.tool_calls))
            errors_in_row += 1
            if h.loop["on_malformed"] == "end":
                ep.outcome, ep.error, done = Outcome.FAILURE, "malformed output", True
        else:
            turn.actions = [a.to_dict() for a in parsed.actions]
            t0 = time.perf_counter()
            step = None
            for action in parsed.actions:
                try:
                    step = await call_env(env, env.step, action)
                except ActionError as e:
                    turn.action_error = str(e)
                    break
                turn.reward = step.reward
                if step.terminated or step.truncated:
                    break
            turn.t_env = time.perf_counter() - t0
            if step is not None:
                obs = step.observation
            results = ["ok"] * len(response.tool_calls)
            if turn.action_error:
                feedback = session.feedback_for_action_error(turn.action_error)
                results = [f"error: {turn.action_error}"] * max(1, len(response.tool_calls))
                errors_in_row += 1
                if h.loop["on_action_error"] == "end":
                    ep.outcome, ep.error, done = Outcome.FAILURE, "action error", True
            else:
                errors_in_row = 0
            if parsed.dropped:
                note = (f"Only {session.per_turn} action(s) per turn are allowed; "
                        f"{parsed.dropped} more were ignored.")
                feedback = f"{feedback} {note}" if feedback else note
            if step is not None and (step.terminated or step.truncated):
                ep.reward = step.reward
                if "verifier" in step.info:  # what the task's tests printed, for `show`
                    ep.meta["verifier"] = step.info["verifier"]
                ep.outcome = Outcome.SUCCESS if step.success else Outcome.FAILURE
                if not step.success:
                    ep.failure_mode = step.info.get("failure_mode")
                done = True

        t0 = time.perf_counter()
        turn.feedback = feedback
        if delegator is not None and turn.delegation is not None:
            delegator.after(turn.delegation, turn.actions, current)
        last_error = bool(turn.parse_error or turn.action_error)
        session.record_reply(response, results)
        if not done and errors_in_row >= max_errors:
            ep.outcome, ep.error, done = (Outcome.FAILURE,
                                          f"{errors_in_row} errors in a row", True)
        if not done and budget["tokens"] and tokens >= budget["tokens"]:
            turn.t_harness += time.perf_counter() - t0
            await _stop_on_budget(env, ep, f"token budget of {budget['tokens']} used")
            return
        if done:
            turn.t_harness += time.perf_counter() - t0
            return
        rendered = session.render(obs)
        turn.observation = rendered
        session.add_observation(rendered, feedback,
                                session.budget_line(t + 1, tokens, seconds_left()))
        pending_harness = 0.0
        turn.t_harness += time.perf_counter() - t0
    await _stop_on_budget(env, ep, f"turn budget of {budget['turns']} used")


async def _stop_on_budget(env: Environment, ep: Episode, why: str) -> None:
    """The budget ran out. A task that is verified whenever the agent stops (Terminal-Bench's
    rule: ``verifies_on_stop``) runs its tests now: solved is ``success``, else the episode
    stays ``budget_exhausted`` with the tests' reward and output recorded."""
    ep.outcome, ep.error = Outcome.BUDGET_EXHAUSTED, why
    if not getattr(env, "verifies_on_stop", False):
        return
    step = await call_env(env, env.step, Submit())
    ep.reward = step.reward
    ep.meta["verified_on_stop"] = True
    if "verifier" in step.info:
        ep.meta["verifier"] = step.info["verifier"]
    if step.success:
        ep.outcome, ep.error = Outcome.SUCCESS, None
