"""Delegation at run time: ask the decision model first, the LLM otherwise.

One :class:`Delegator` per episode. Each turn, :meth:`Delegator.decide` builds the
harness's decision points from the observation, asks the decision model for p_D at
each, and returns the action of the first point where it is confident (or ``None``:
the LLM acts). Whatever happens is recorded on the turn (``Turn.delegation``): the
choice sets, p_D, τ_c, the scripted expert's choice where the task has an expert,
who acted, and — when the decision model acted — what the LLM call it replaced would
have cost. A decision model that raises or answers something that is not a
probability distribution over the choices is recorded as a ``fallback`` and the LLM
acts: the episode is never lost to it.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tackroom.core.actions import Action
from tackroom.core.errors import ConfigError
from tackroom.core.observation import Observation
from tackroom.harness.delegation import (
    action_label,
    choice_action,
    decision_points,
    match_choice,
)

#: Loaded decision models, by (directory, pinned hash): episodes share one copy.
_MODELS: dict[tuple[str, str], Any] = {}


def load_decision_model(slot: dict[str, Any]) -> Any:
    """The decision model a ``[delegation]`` slot names, loaded once per process.

    Raises :class:`ConfigError` (what, where, what to do) when it is missing, corrupt or
    not the model the harness pins.
    """
    key = (slot["model"], slot["model_hash"])
    if key not in _MODELS:
        from tackroom.policies.delegation.models import load_model
        _MODELS[key] = load_model(slot["model"], expected_hash=slot["model_hash"])
    return _MODELS[key]


@dataclass
class _Cost:
    """What an LLM call of one policy costs, as seen so far in this process."""

    calls: int = 0
    chars: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0


#: By policy id: the runs of one process share what they learn of a policy's cost.
_COSTS: dict[str, _Cost] = {}


def note_llm_call(policy_id: str, messages: Sequence[dict[str, Any]], prompt_tokens: int,
                  completion_tokens: int, seconds: float) -> None:
    """Remember one real LLM call, to estimate the calls the decision model saves."""
    c = _COSTS.setdefault(policy_id, _Cost())
    c.calls += 1
    c.chars += _chars(messages)
    c.prompt_tokens += prompt_tokens
    c.completion_tokens += completion_tokens
    c.seconds += seconds


def saved_cost(policy_id: str, messages: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The tokens and seconds the LLM would have spent on ``messages``.

    Prompt tokens scale the policy's measured tokens-per-character to this prompt;
    completion tokens and seconds are its mean per call. Before any real call has been
    seen (``basis = "chars/4"``) prompt tokens are the characters / 4 and the rest 0.
    """
    chars = _chars(messages)
    c = _COSTS.get(policy_id)
    if c is None or c.calls == 0 or c.chars == 0:
        return {"prompt_tokens": round(chars / 4), "completion_tokens": 0, "seconds": 0.0,
                "basis": "chars/4"}
    return {"prompt_tokens": round(chars * c.prompt_tokens / c.chars),
            "completion_tokens": round(c.completion_tokens / c.calls),
            "seconds": round(c.seconds / c.calls, 4), "basis": f"{c.calls} calls"}


def _chars(messages: Sequence[dict[str, Any]]) -> int:
    n = 0
    for m in messages:
        content = m.get("content")
        n += len(content) if isinstance(content, str) else len(json.dumps(content or ""))
        if m.get("tool_calls"):
            n += len(json.dumps(m["tool_calls"]))
    return n


@dataclass
class Decision:
    """What the decision model decided this turn: ``action`` is ``None`` when the LLM acts."""

    record: dict[str, Any]
    action: Action | None = None


@dataclass
class Delegator:
    """The ``[delegation]`` slot of one episode's harness, at run time.

    ``expert`` is the task's scripted expert (or ``None``): its choice at each point is
    recorded as the label decision models are trained on. It gets a state of its own,
    apart from any expert *policy* of the episode.
    """

    slot: dict[str, Any]
    expert: Callable[[Observation, dict[str, Any]], list[Action]] | None = None
    takeovers: int = 0
    previous: list[str] = field(default_factory=list)
    _expert_state: dict[str, Any] = field(default_factory=dict)

    async def decide(self, obs: Observation, turn: int, turns: int, last_error: bool
                     ) -> Decision:
        """Ask the decision model at this turn's points; never raises for its failures."""
        context = {"instruction": obs.instruction, "turn": turn, "turns_left": turns - turn,
                   "previous": list(self.previous), "last_error": last_error,
                   "n_elements": len(obs.elements)}
        points = decision_points(obs, self.slot, context)
        record: dict[str, Any] = {"acted": "llm", "point": None, "choice": None,
                                  "points": points}
        if self.slot.get("record", True):
            self._label(obs, points, record)
        if not points or "model" not in self.slot:
            return Decision(record)
        limit = self.slot.get("max_takeovers", 0)
        if limit and self.takeovers >= limit:
            record["note"] = f"max_takeovers = {limit} reached"
            return Decision(record)
        try:
            model = load_decision_model(self.slot)
            probs = await asyncio.to_thread(_predict_all, model, points)
        except ConfigError:
            raise  # a harness naming a model that is not there: the user's to fix
        except Exception as e:  # the decision model's own failure: the LLM takes the turn
            record["fallback"] = f"decision model failed: {type(e).__name__}: {e}"[:500]
            return Decision(record)
        always = self.slot.get("mode") == "always"
        for k, (point, p) in enumerate(zip(points, probs, strict=True)):
            point["p"] = [round(x, 6) for x in p]
            tau = self.slot["thresholds"].get(point["type"])
            point["tau"] = 0.0 if always else tau
            best = _best(point, p, skip_continue=always)
            if best is None or (not always and (tau is None or p[best] < tau)):
                continue
            action = choice_action(point["choices"][best])
            if action is None:  # a confident "continue": the LLM acts
                continue
            record.update(acted="decision", point=k, choice=best)
            self.takeovers += 1
            return Decision(record, action)
        return Decision(record)

    def after(self, record: dict[str, Any], actions: Sequence[dict[str, Any]],
              obs: Observation) -> None:
        """Record which choice the turn's action took at each point; remember its label."""
        for point in record.get("points", []):
            point["taken"] = match_choice(point, actions)
        if actions:
            self.previous.append(action_label(actions[0], obs))

    def _label(self, obs: Observation, points: list[dict[str, Any]],
               record: dict[str, Any]) -> None:
        if self.expert is None or not points:
            return
        try:
            plan = self.expert(obs, self._expert_state)
        except Exception as e:  # a scripted expert that cannot read this state: no label
            record["expert_error"] = f"{type(e).__name__}: {e}"[:300]
            return
        first = [plan[0].to_dict()] if plan else []
        for point in points:
            point["expert"] = match_choice(point, first) if first else None


def _predict_all(model: Any, points: list[dict[str, Any]]) -> list[list[float]]:
    out = []
    for point in points:
        # The model sees the point as recorded, without what this run adds to it.
        clean = {"type": point["type"], "context": point["context"],
                 "choices": point["choices"]}
        out.append(_checked(model.predict(clean), len(point["choices"])))
    return out


def _checked(p: Any, n: int) -> list[float]:
    """``p`` as a probability distribution over ``n`` choices, or ``ValueError``."""
    try:
        values = [float(x) for x in p]
    except (TypeError, ValueError):
        raise ValueError(f"returned {type(p).__name__}, not a list of probabilities") from None
    if len(values) != n:
        raise ValueError(f"returned {len(values)} probabilities for {n} choices")
    if any(not math.isfinite(x) or x < 0 for x in values):
        raise ValueError("returned a negative or non-finite probability")
    total = sum(values)
    if not 0.99 <= total <= 1.01:
        raise ValueError(f"probabilities sum to {total:.3g}, not 1")
    return values


def _best(point: dict[str, Any], p: list[float], skip_continue: bool) -> int | None:
    order = sorted(range(len(p)), key=lambda i: (-p[i], i))
    for i in order:
        if skip_continue and point["choices"][i]["action"] is None:
            continue
        return i
    return None
