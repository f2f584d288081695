"""Recorded episodes → what a policy-gradient step trains on.

Every turn of an episode is one *completion*: the exact prompt the policy saw
that turn (its messages rendered by the chat template, with the harness's
tool schemas) and the tokens it wrote (``Turn.token_ids``, stop token
included). An episode's advantage applies to each of its turns; with a
critic each turn gets its own (GAE over the episode's turns).

π_old is the recorded ``Turn.logprobs`` when they are usable: one per
completion token, finite, and of the distribution the loss uses. The hf and
OpenAI-compatible backends record log-probs of the model's temperature-1
distribution, so at another training temperature they are recomputed.
Turns recorded without token ids (a backend that returns none) are
re-tokenised through the chat template, and their log-probs recomputed.

Token-exact: a turn that recorded the prompt's ids as the backend served them
(``Turn.prompt_token_ids``: ``tackroom serve``, vLLM's ``return_token_ids``)
trains on exactly those and its completion ids — no chat template is applied
again, so no re-tokenisation drift. An agent CLI's side calls (``Turn.side``:
a session title, a summary, a sub-agent) are left out unless asked for
(``side_calls=True``); each turn's prompt is its own call's, whatever thread.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tackroom.core.episode import Episode, Outcome
from tackroom.core.registry import entry
from tackroom.policies.chat_format import text_only
from tackroom.train.rewards import episode_return
from tackroom.train.sft import IGNORE, encode_turn, reply_message


@dataclass
class TurnSample:
    """One turn of one episode, as a completion to train on.

    Attributes:
        prompt: token ids of the prompt (chat template with generation prompt).
        completion: the token ids the policy wrote.
        old_logp: π_old per completion token; ``None`` until known (recorded or
            recomputed before the update).
        episode: index of the episode in its step's list.
        turn: the turn's index in the episode.
        harness: the harness the episode ran under.
        advantage: A for every token of this completion.
        ref_logp: π_ref per token (only when the KL term is on).
        value: V(s) at the last prompt token, before the update (critic only).
        ret: the GAE return this turn's value regresses to (critic only).
    """

    prompt: list[int]
    completion: list[int]
    old_logp: list[float] | None
    episode: int
    turn: int
    harness: str
    advantage: float = 0.0
    ref_logp: list[float] | None = None
    value: float | None = None
    ret: float | None = None
    recorded_logp: bool = field(default=False, repr=False)

    @property
    def length(self) -> int:
        return len(self.prompt) + len(self.completion)


def prompt_ids(tokenizer: Any, messages: list[dict[str, Any]],
               tools: list[dict[str, Any]] | None) -> list[int]:
    """The ids the policy saw: the chat template with its generation prompt (as ``HFPolicy``)."""
    ids = tokenizer.apply_chat_template(text_only(messages), tools=tools or None,
                                        add_generation_prompt=True, tokenize=True,
                                        return_dict=False)
    if ids and isinstance(ids[0], list):  # a batch of one
        ids = ids[0]
    return [int(i) for i in ids]


def usable_logprobs(turn: Any, n_tokens: int) -> bool:
    """Whether a turn's recorded log-probs can stand for π_old: one finite value per token."""
    lp = turn.logprobs
    return (lp is not None and len(lp) == n_tokens and n_tokens > 0
            and all(isinstance(x, (int, float)) and math.isfinite(x) and x <= 0 for x in lp))


def episode_samples(ep: Episode, index: int, tokenizer: Any,
                    tools: list[dict[str, Any]] | None, *,
                    use_recorded: bool = True, side_calls: bool = False) -> list[TurnSample]:
    """The turns of ``ep`` as :class:`TurnSample` s (advantages left at 0).

    Turns without a reply (no tokens, no text) are skipped, and side calls
    unless ``side_calls``. Malformed replies are kept: the reward says they
    were bad, which is how a policy unlearns them.
    """
    out: list[TurnSample] = []
    for turn in ep.turns:
        if turn.side is not None and not side_calls:
            continue
        if turn.token_ids and turn.prompt_token_ids:  # as served: no template again
            prompt = [int(t) for t in turn.prompt_token_ids]
            completion = [int(t) for t in turn.token_ids]
        elif turn.token_ids:
            prompt = prompt_ids(tokenizer, turn.messages, tools)
            completion = [int(t) for t in turn.token_ids]
        elif turn.raw_text or turn.tool_calls:
            ids, labels = encode_turn(tokenizer, turn.messages, reply_message(turn), tools)
            first = next((i for i, t in enumerate(labels) if t != IGNORE), len(ids))
            end = first
            while end < len(labels) and labels[end] != IGNORE:
                end += 1
            prompt, completion = ids[:first], ids[first:end]
        else:
            continue
        if not completion:
            continue
        recorded = use_recorded and bool(turn.token_ids) and usable_logprobs(turn,
                                                                             len(completion))
        logprobs = turn.logprobs if recorded else None  # recorded: usable, so not None
        out.append(TurnSample(prompt, completion,
                              [float(x) for x in logprobs] if logprobs is not None else None,
                              index, turn.index, ep.harness, recorded_logp=recorded))
    return out


def scored(episodes: Iterable[Episode]) -> list[Episode]:
    """The episodes a step may learn from: every outcome but ``infra_error`` (never scored)."""
    return [ep for ep in episodes if ep.outcome is not Outcome.INFRA_ERROR]


def episode_reward(ep: Episode, mode: str = "success", verifier: bool = False) -> float:
    """An episode's return under ``data.reward = mode`` (and ``data.verifier``).

    ``success`` — 1 if it succeeded, else 0; ``recorded`` — its reward;
    ``proxy:NAME`` — the registered proxy reward r̂(episode)
    (:mod:`tackroom.train.rewards`). With ``verifier`` the return is gated by
    the outcome verifier, r = v(o)·r with v(o) = 1 iff the episode succeeded:
    a proxy then pays nothing for a wrong outcome it scores highly.

    ``success`` is the default because it is what evaluation measures (solve
    rate), and because environments' own rewards can rank failures oddly: a
    MiniWoB-style task scores a wrong click −1 but an episode that ran out of
    turns on malformed replies 0, which would teach a policy to stop acting.
    """
    return episode_return(ep, mode, verifier)


def episode_sample(ep: Episode, mode: str = "success", verifier: bool = False) -> Any:
    """The :class:`~tackroom.train.advantages.Sample` of ``ep``, its reward per ``mode``."""
    import dataclasses

    from tackroom.train.advantages import Sample

    return dataclasses.replace(Sample.from_episode(ep),
                               reward=episode_reward(ep, mode, verifier))


def turn_rewards(ep: Episode, mode: str = "success", verifier: bool = False) -> list[float]:
    """Per-turn rewards for GAE: 0 on every turn but the last, which gets the episode's return.

    With ``recorded`` the turns keep their environment rewards and the last
    one is the episode's. Either way the return is what group advantages use,
    so the two estimators agree on what is being maximised.
    """
    per_turn = entry("reward", mode, where="data.reward").meta.get("per_turn", False)
    rewards = [float(t.reward) if per_turn else 0.0 for t in ep.turns]
    if rewards:
        rewards[-1] = episode_reward(ep, mode, verifier)
    return rewards


def spread(samples: Sequence[TurnSample], per_episode: Mapping[int, float]) -> None:
    """Give every turn of an episode that episode's advantage."""
    for s in samples:
        s.advantage = float(per_episode[s.episode])
