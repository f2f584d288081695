"""Reading a chat completion into a :class:`~tackroom.core.policy.PolicyResponse`.

The ``openai`` policy's parser, whatever client fetched the body. A server is
outside tackroom, so every field is read tolerantly: a malformed tool call is
kept as data for the harness to judge, a reply is cut at its character budget
(``finish_reason`` becomes ``"length"`` and the text ends with :data:`CUT_NOTE`),
and numbers are checked where they enter — a usage count that is not a count, or
log-probs that are not finite, are recorded as missing with a note on the turn.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tackroom.core.finite import NON_FINITE_LOGPROBS, finite_logprobs, token_count
from tackroom.core.policy import PolicyResponse, ToolCall

__all__ = ["CUT_NOTE", "ids_from_tokens", "parse_completion"]

#: Appended to a reply's text that was cut at the cap.
CUT_NOTE = "\n[tackroom: reply cut at {n} characters]"


def parse_completion(data: dict[str, Any], max_chars: int, model: str,
                     scrub: Callable[[str], str]) -> PolicyResponse:
    """The :class:`PolicyResponse` of a chat completion ``data``, read tolerantly.

    A malformed tool call is data, not an error. Text and tool-call arguments share
    a budget of ``max_chars`` characters (after ``scrub`` redacted our secrets); what
    is past it is dropped. ``model`` is the name when the reply names none. Usage
    counts that are not counts and log-probs that are not finite are recorded as
    missing, each with a note (:mod:`tackroom.core.finite`).
    """
    budget = max_chars
    cut = False

    def keep(value: str) -> str:
        nonlocal budget, cut
        value = scrub(value)
        if len(value) > budget:
            value, cut = value[:budget], True
        budget -= len(value)
        return value

    choice = data["choices"][0] if isinstance(data["choices"][0], dict) else {}
    message = choice.get("message") or {}
    content = message.get("content")
    if isinstance(content, list):  # content parts; join the text ones
        content = "".join(p.get("text", "") for p in content
                          if isinstance(p, dict) and isinstance(p.get("text", ""), str))
    if isinstance(content, str):
        content = keep(content)
        if cut:
            content += CUT_NOTE.format(n=max_chars)
    tool_calls = []
    raw_calls = message.get("tool_calls") or []
    for i, tc in enumerate(raw_calls if isinstance(raw_calls, list) else []):
        if budget <= 0 and i > 0:
            cut = True
            break  # no room left for more calls
        if not isinstance(tc, dict):
            tool_calls.append(ToolCall(id=f"call_{i}", name="", arguments=keep(str(tc))))
            continue
        fn = tc.get("function")
        if not isinstance(fn, dict):
            fn = {}
        args = fn.get("arguments")
        if args is None:
            args = ""
        elif not isinstance(args, str):  # some servers send an object
            args = json.dumps(args)
        tool_calls.append(ToolCall(
            id=scrub(str(tc.get("id") or f"call_{i}"))[:200],
            name=scrub(str(fn.get("name") or ""))[:200],
            arguments=keep(args)))

    notes: list[str] = []
    logprobs = None
    lp_content = (choice.get("logprobs") or {}).get("content") \
        if isinstance(choice.get("logprobs"), dict) else None
    if isinstance(lp_content, list):
        raw = [t.get("logprob", 0.0) for t in lp_content if isinstance(t, dict)]
        logprobs = finite_logprobs(raw)
        if logprobs is None:
            notes.append(NON_FINITE_LOGPROBS)
    token_ids = choice.get("token_ids")
    if token_ids is None:
        token_ids = choice.get("response_token_ids")  # SGLang's spelling
    if token_ids is None and isinstance(lp_content, list):
        token_ids = ids_from_tokens(lp_content)  # vLLM --return-tokens-as-token-ids
    usage = data.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    counts = {}
    for name in ("prompt_tokens", "completion_tokens"):
        counts[name], note = token_count(usage.get(name), name)
        if note:
            notes.append(note)
    token_ids = _token_ids(token_ids, max_chars, notes)
    # The prompt as the server tokenised it (vLLM's and tackroom serve's return_token_ids):
    # training then uses it as served instead of re-applying the chat template.
    prompt_ids = data.get("prompt_token_ids")
    prompt_ids = _token_ids(prompt_ids, len(prompt_ids), notes) \
        if isinstance(prompt_ids, list) and token_ids is not None else None
    return PolicyResponse(
        text=content if isinstance(content, str) else None,
        tool_calls=tool_calls,
        prompt_tokens=counts["prompt_tokens"],
        completion_tokens=counts["completion_tokens"],
        # At most one token per kept character: the body limit bounds the rest.
        token_ids=token_ids,
        logprobs=logprobs[:max_chars] if logprobs is not None else None,
        model=scrub(str(data.get("model") or model))[:200],
        finish_reason="length" if cut else str(choice.get("finish_reason") or "stop")[:40],
        notes=notes,
        prompt_token_ids=prompt_ids,
    )


def _token_ids(ids: Any, max_chars: int, notes: list[str]) -> list[int] | None:
    """Sampled token ids, at most one per kept character (the body limit bounds the rest);
    ``None`` with a note if any is not a token id."""
    if not isinstance(ids, list):
        return None
    ids = ids[:max_chars]
    if all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 2**31 for t in ids):
        return ids
    notes.append("token ids not recorded: the server sent values that are not token ids")
    return None


def ids_from_tokens(content: list[Any]) -> list[int] | None:
    """vLLM's ``--return-tokens-as-token-ids`` writes each token as ``token_id:123``."""
    ids = []
    for t in content:
        tok = t.get("token") if isinstance(t, dict) else None
        if not isinstance(tok, str) or not tok.startswith("token_id:"):
            return None
        try:
            ids.append(int(tok[len("token_id:"):]))
        except ValueError:
            return None
    return ids or None
