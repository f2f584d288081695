"""Chat-completions replies: one shaping of a finished answer, whole or streamed, for every server.

A :class:`Completion` is what a server has to say; :func:`completion_body` is
the ``chat.completion`` object, :func:`stream_chunks` the ``chat.completion.chunk``
objects whose deltas concatenate to exactly it, and :func:`sse_events` their
Server-Sent Events. Streaming is replayed: the answer is finished first.
``tackroom serve`` knows each token's text (``pieces``) and streams one chunk
per token; the gateway passes on a policy's answer in one content chunk.

vLLM's extensions are kept: with ``token_ids`` asked for, the choice carries
``token_ids`` and the reply ``prompt_token_ids`` (when known).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tackroom.core.policy import PolicyResponse, ToolCall
from tackroom.wire.errors import dumps

__all__ = ["Completion", "Shape", "completion_body", "content_deltas", "fixed_calls", "from_response",
           "sse_events", "stream_chunks"]


@dataclass
class Completion:
    """One finished reply, ready to be sent whole or as a stream.

    ``tool_calls`` are :class:`ToolCall` objects, or dicts placed as they are
    (a scripted server's malformed calls). When ``pieces`` is given it is aligned
    with ``token_ids`` (and ``logprob_entries``): ``pieces[k]`` is the visible text
    token ``k`` added (``""`` for the stop token). ``logprob_entries`` are sent
    when not ``None`` (set them only when the request asked for log-probs).
    """

    content: str | None
    tool_calls: list[Any]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    logprob_entries: list[dict[str, Any]] | None = None
    pieces: list[str] | None = None
    prompt_token_ids: list[int] | None = None
    #: The adapter that wrote the reply (``None``: the base model).
    adapter: str | None = None
    #: The stop string that ended the reply, when one did (Anthropic's ``stop_sequence``).
    stop_sequence: str | None = None


@dataclass
class Shape:
    """How a request wants its reply: the model name to show, usage chunk, token ids."""

    model: str
    include_usage: bool = False
    token_ids: bool = False


def _call_dict(tc: Any) -> dict[str, Any]:
    return tc if isinstance(tc, dict) else tc.to_dict()


def fixed_calls(calls: list[ToolCall]) -> list[ToolCall]:
    """``calls`` with an id each, unique within the reply (the client echoes them back)."""
    seen: set[str] = set()
    out = []
    for tc in calls:
        cid = tc.id
        if not cid or cid in seen:
            cid = f"call_{uuid.uuid4().hex[:24]}"
        seen.add(cid)
        out.append(tc if cid == tc.id else ToolCall(cid, tc.name, tc.arguments))
    return out


def from_response(response: PolicyResponse, *, logprobs: bool) -> Completion:
    """A policy's answer as a reply (tool-call ids made unique; finish ``tool_calls`` for calls).

    Log-prob entries name each token ``token_id:N`` (vLLM's
    ``--return-tokens-as-token-ids``): a policy gives ids, not token strings.
    """
    calls = fixed_calls(list(response.tool_calls))
    finish = response.finish_reason or "stop"
    entries: list[dict[str, Any]] | None = None
    if logprobs and response.logprobs is not None:
        ids = response.token_ids or []
        entries = [{"token": f"token_id:{int(ids[k])}" if k < len(ids) else "",
                    "logprob": float(lp), "bytes": None, "top_logprobs": []}
                   for k, lp in enumerate(response.logprobs)]
    return Completion(
        content=response.text, tool_calls=calls,
        finish_reason="tool_calls" if calls and finish == "stop" else finish,
        prompt_tokens=int(response.prompt_tokens),
        completion_tokens=int(response.completion_tokens),
        token_ids=None if response.token_ids is None else [int(t) for t in response.token_ids],
        logprobs=response.logprobs, logprob_entries=entries, adapter=response.adapter,
        prompt_token_ids=None if response.prompt_token_ids is None
        else [int(t) for t in response.prompt_token_ids])


def _usage(c: Completion) -> dict[str, int]:
    return {"prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
            "total_tokens": c.prompt_tokens + c.completion_tokens}


def completion_body(c: Completion, shape: Shape, *, rid: str | None = None,
                    created: int | None = None) -> dict[str, Any]:
    """The ``chat.completion`` object (non-streaming)."""
    message: dict[str, Any] = {"role": "assistant", "content": c.content}
    if c.tool_calls:
        message["tool_calls"] = [_call_dict(tc) for tc in c.tool_calls]
    choice: dict[str, Any] = {
        "index": 0, "message": message, "finish_reason": c.finish_reason,
        "logprobs": {"content": c.logprob_entries, "refusal": None}
        if c.logprob_entries is not None else None,
    }
    out: dict[str, Any] = {
        "id": rid or f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
        "created": created or int(time.time()), "model": shape.model,
        "choices": [choice], "usage": _usage(c),
    }
    if shape.token_ids and c.token_ids is not None:  # vLLM's extension
        choice["token_ids"] = list(c.token_ids)
    if shape.token_ids and c.prompt_token_ids is not None:
        out["prompt_token_ids"] = list(c.prompt_token_ids)
    return out


def content_deltas(c: Completion, pieces: list[str]) -> list[str]:
    """What each token adds to ``content``; joined, exactly ``content``."""
    n = len(pieces)
    content = c.content or ""
    if not n:
        return []
    deltas = [""] * n
    start = "".join(pieces).find(content) if content else -1
    if start < 0:  # not one run of the text (tool blocks cut out of its middle)
        deltas[-1] = content
        return deltas
    sent, seen = 0, 0
    for k, piece in enumerate(pieces):
        seen += len(piece)
        upto = min(max(seen - start, 0), len(content))
        deltas[k] = content[sent:upto]
        sent = max(sent, upto)
    deltas[-1] += content[sent:]
    return deltas


def stream_chunks(c: Completion, shape: Shape, *, rid: str | None = None,
                  created: int | None = None) -> Iterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of a streamed reply (without ``[DONE]``)."""
    rid = rid or f"chatcmpl-{uuid.uuid4().hex}"
    created = created or int(time.time())
    ids = c.token_ids if shape.token_ids else None

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None,
                                  "finish_reason": finish, **extra}
        out: dict[str, Any] = {"id": rid, "object": "chat.completion.chunk",
                               "created": created, "model": shape.model, "choices": [choice]}
        if shape.include_usage:
            out["usage"] = None
        return out

    first = chunk({"role": "assistant", "content": ""})
    if shape.token_ids and c.prompt_token_ids is not None:
        first["prompt_token_ids"] = list(c.prompt_token_ids)
    yield first
    if c.pieces is not None:  # one chunk per token
        for k, delta in enumerate(content_deltas(c, c.pieces)):
            extra: dict[str, Any] = {}
            if c.logprob_entries is not None:
                extra["logprobs"] = {"content": [c.logprob_entries[k]], "refusal": None}
            if ids is not None:
                extra["token_ids"] = [ids[k]]
            if delta or extra:
                yield chunk({"content": delta}, **extra)
    else:  # the whole text in one chunk
        extra = {}
        if c.logprob_entries is not None:
            extra["logprobs"] = {"content": c.logprob_entries, "refusal": None}
        if ids is not None:
            extra["token_ids"] = list(ids)
        if c.content or extra:
            yield chunk({"content": c.content or ""}, **extra)
    for i, tc in enumerate(c.tool_calls):
        d = _call_dict(tc)
        fn = d.get("function") or {}
        yield chunk({"tool_calls": [{"index": i, "id": d.get("id"), "type": "function",
                                     "function": {"name": fn.get("name"), "arguments": ""}}]})
        if fn.get("arguments"):
            yield chunk({"tool_calls": [{"index": i,
                                         "function": {"arguments": fn["arguments"]}}]})
    yield chunk({}, c.finish_reason)
    if shape.include_usage:
        yield {"id": rid, "object": "chat.completion.chunk", "created": created,
               "model": shape.model, "choices": [], "usage": _usage(c)}


def sse_events(chunks: Iterator[dict[str, Any]]) -> bytes:
    """Server-Sent Events: one ``data:`` line per chunk, then ``data: [DONE]``."""
    parts = [b"data: " + dumps(c) + b"\n\n" for c in chunks]
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)
