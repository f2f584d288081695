"""Episodes and turns: the records every later stage reads."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class Outcome(StrEnum):
    """Exactly one per episode. ``infra_error`` is never a task failure."""

    SUCCESS = "success"
    FAILURE = "failure"
    BUDGET_EXHAUSTED = "budget_exhausted"
    TIMEOUT = "timeout"
    INFRA_ERROR = "infra_error"


def episode_id(task: str, harness_hash: str, policy_id: str, sampling: dict[str, Any],
               seed: int, attempt: int = 0) -> str:
    """Deterministic id of an episode: same inputs, same id, on any machine."""
    key = json.dumps([task, harness_hash, policy_id, sampling, seed, attempt],
                     sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(key.encode()).hexdigest()[:20]


@dataclass
class Turn:
    """One model call and what followed it.

    Attributes:
        index: 0-based turn number.
        messages: the exact messages the model saw this turn (OpenAI format).
        raw_text / tool_calls: what the model wrote.
        parse_error: why the output could not be parsed (``None`` if it could).
        feedback: the text shown to the model after this turn (parse error,
            action error, reflection prompt), if any.
        actions: the actions parsed and sent to the environment (dicts).
        action_error: the environment's rejection message, if any.
        observation: the rendered observation that followed the actions.
        reward: environment reward after this turn.
        t_policy / t_env / t_harness: seconds spent in each phase.
        delegation: the decision points of this turn, their choice sets, the decision
            model's p_D and τ_c, who acted (``"decision"`` or ``"llm"``) and what the LLM
            call it replaced would have cost (see :mod:`tackroom.harness.delegation`);
            ``None`` under a harness without a ``[delegation]`` slot.
        notes: what the policy could not take from the model server as sent (e.g.
            usage counts or log-probs that are not finite numbers, recorded as missing).
        side: what the call was when it was not an agent turn — an agent CLI's side
            call (``"title"``, ``"summary"``, ``"subagent"``, ``"count_tokens"``,
            ``"side"``; see :mod:`tackroom.gateway.calls`); ``None``: an agent turn.
            Side calls are kept out of the turn budget and out of training data.
        thread: the call sequence the turn belongs to (0: the first): a call that does
            not continue an earlier one's history (a sub-agent, the history after a
            compaction) starts another, so each turn's prompt is its own thread's.
        prompt_token_ids: the prompt's token ids as the backend tokenised them, when it
            returned them (``tackroom serve``, vLLM's ``return_token_ids``): training
            uses them with ``token_ids`` instead of re-applying the chat template.
    """

    index: int
    messages: list[dict[str, Any]] = field(default_factory=list)
    raw_text: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    parse_error: str | None = None
    feedback: str | None = None
    actions: list[dict[str, Any]] = field(default_factory=list)
    action_error: str | None = None
    observation: str | None = None
    reward: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    adapter: str | None = None
    t_policy: float = 0.0
    t_env: float = 0.0
    t_harness: float = 0.0
    delegation: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    side: str | None = None
    thread: int = 0
    prompt_token_ids: list[int] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Episode:
    """One run of (task, harness, policy, seed): the spine of the records."""

    episode_id: str
    run_id: str
    task: str
    suite: str
    harness: str
    harness_hash: str
    policy: str
    seed: int
    attempt: int = 0
    sampling: dict[str, Any] = field(default_factory=dict)
    outcome: Outcome = Outcome.FAILURE
    reward: float = 0.0
    instruction: str = ""
    error: str | None = None
    turns: list[Turn] = field(default_factory=list)
    started_at: float = 0.0
    ended_at: float = 0.0
    t_policy: float = 0.0
    t_env: float = 0.0
    t_harness: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)
    #: Why a failed episode failed, in the suite's words (e.g. the code suite's
    #: ``dropped_requirement``); ``None`` for successes and suites without modes.
    failure_mode: str | None = None

    @property
    def n_turns(self) -> int:
        return len(self.turns)

    @property
    def prompt_tokens(self) -> int:
        return sum(t.prompt_tokens for t in self.turns)

    @property
    def completion_tokens(self) -> int:
        return sum(t.completion_tokens for t in self.turns)

    @property
    def parse_errors(self) -> int:
        return sum(1 for t in self.turns if t.parse_error)

    @property
    def success(self) -> bool:
        return self.outcome is Outcome.SUCCESS

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["outcome"] = self.outcome.value
        return d
