"""The gateway's OpenAI wire shape: lenient request reading, reply and stream building.

Agent CLIs send whatever their SDK sends (``stream_options``, ``n``, penalties,
``parallel_tool_calls``, ``response_format``, ``user``, vendor keys, ...). The
gateway reads only what it needs — messages, tools, ``tool_choice``, ``stream``,
``logprobs`` — and ignores the rest; the sampling settings the client asked for
are kept for diagnosis but never used (the run's :class:`Sampling` is enforced).
What cannot be passed on faithfully is refused with a 400 that names the field:
a message without a known role, a content part other than text (an image would
otherwise be dropped silently), a tool without a function name.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tackroom.core.policy import PolicyResponse, ToolCall
from tackroom.serve import ApiError, message_role

__all__ = ["ChatCall", "completion_body", "fixed_calls", "parse_chat", "sse_events"]

#: Roles passed on; ``developer`` (OpenAI's newer name for ``system``) becomes ``system``.
ROLES = ("system", "developer", "user", "assistant", "tool")
#: Message keys passed on to the policy (others, e.g. ``refusal``, ``annotations``,
#: ``reasoning_content``, ``cache_control``, stay in the recorded turn only).
_MESSAGE_KEYS = ("name", "tool_call_id")
#: Request keys that are not recorded in ``requested`` (they are the turn itself).
_BULK_KEYS = ("messages", "tools")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abAB]")


@dataclass
class ChatCall:
    """One chat-completions request, read leniently.

    ``messages`` / ``tools`` are what the policy gets (normalised: text parts
    joined, ``developer`` as ``system``); ``sent`` is the messages exactly as
    the client sent them (what the turn records); ``requested`` every other key
    the client sent (its sampling wishes, ``stream``, ``model``, ...).
    """

    messages: list[dict[str, Any]]
    sent: list[Any]
    tools: list[dict[str, Any]] | None = None
    stream: bool = False
    include_usage: bool = False
    logprobs: bool = False
    token_ids: bool = False
    requested: dict[str, Any] = field(default_factory=dict)


def loads(raw: bytes) -> Any:
    """The request body as JSON; :class:`ApiError` 400 when it is not JSON we can pass on."""
    if not raw.strip():
        raise ApiError(400, "empty request body: send a JSON object")
    try:
        body = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise ApiError(400, f"the request body is not valid JSON ({_first_line(e)})") from None
    if _SURROGATE_ESCAPE.search(raw):  # rare: escaped emoji pairs, or a lone half
        try:
            json.dumps(body, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise ApiError(400, "the request body holds a lone UTF-16 surrogate escape "
                                "(\\ud800-\\udfff); send valid Unicode") from None
    return body


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (JSON has no NaN or Infinity)")


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return (lines[0] if lines else type(e).__name__)[:200]


def _text_of(content: Any, where: str) -> str | None:
    """``content`` as one string (text parts joined by newlines, as vLLM joins them)."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ApiError(400, f"{where}.content must be a string, null or a list of text parts",
                       param=where)
    texts = []
    for k, part in enumerate(content):
        if isinstance(part, str):
            texts.append(part)
            continue
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in ("text", "input_text") or not isinstance(part.get("text"), str):
            shown = json.dumps(kind)[:40] if isinstance(kind, str) else "a part without a type"
            raise ApiError(400, f"{where}.content[{k}] is {shown}; this gateway passes on "
                                "text parts only ({\"type\": \"text\", \"text\": ...})",
                           param=where)
        texts.append(part["text"])
    return "\n".join(texts)


def _tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise ApiError(400, f"{where}.tool_calls must be a list", param=where)
    out = []
    for k, tc in enumerate(calls):
        fn = tc.get("function") if isinstance(tc, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ApiError(400, f"{where}.tool_calls[{k}] must be {{\"id\": ..., \"type\": "
                                "\"function\", \"function\": {\"name\": ..., \"arguments\": "
                                "...}}", param=where)
        args = fn.get("arguments")
        if args is None:
            args = ""
        elif not isinstance(args, str):  # some clients send the object itself
            args = json.dumps(args, ensure_ascii=False)
        out.append({"id": str(tc.get("id") or f"call_{k}"), "type": "function",
                    "function": {"name": fn["name"], "arguments": args}})
    return out


def _message(i: int, m: Any) -> dict[str, Any]:
    where = f"messages[{i}]"
    role = message_role(i, m, ROLES)
    out: dict[str, Any] = {"role": "system" if role == "developer" else role,
                           "content": _text_of(m.get("content"), where)}
    for key in _MESSAGE_KEYS:
        if isinstance(m.get(key), str):
            out[key] = m[key]
    if role == "assistant" and m.get("tool_calls"):
        out["tool_calls"] = _tool_calls(m["tool_calls"], where)
    if role in ("user", "system", "developer", "tool") and out["content"] is None:
        out["content"] = ""
    return out


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise ApiError(400, "'tools' must be a list", param="tools")
    out = []
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ApiError(400, f"tools[{i}] must be {{\"type\": \"function\", \"function\": "
                                "{\"name\": ...}}", param=f"tools[{i}]")
        out.append({"type": "function", "function": fn})
    return out or None


def parse_chat(body: Any) -> ChatCall:
    """Read a ``/v1/chat/completions`` body; :class:`ApiError` 400 naming the field if unusable."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    sent = body.get("messages")
    if not isinstance(sent, list) or not sent:
        raise ApiError(400, "'messages' must be a non-empty list", param="messages")
    messages = [_message(i, m) for i, m in enumerate(sent)]
    if body.get("functions") is not None:
        raise ApiError(400, "'functions' (the legacy function-calling API) is not supported: "
                            "send 'tools'", param="functions")
    tools = _tools(body.get("tools"))
    if body.get("tool_choice") == "none":  # the model is not to call tools: do not show them
        tools = None
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise ApiError(400, "'stream' must be true or false", param="stream")
    opts = body.get("stream_options")
    include_usage = isinstance(opts, dict) and opts.get("include_usage") is True
    requested = {k: v for k, v in body.items() if k not in _BULK_KEYS}
    return ChatCall(messages=messages, sent=sent, tools=tools, stream=bool(stream),
                    include_usage=bool(stream) and include_usage,
                    logprobs=body.get("logprobs") is True,
                    token_ids=body.get("return_token_ids") is True, requested=requested)


# ------------------------------------------------------------------- reply
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


def finish_reason(response: PolicyResponse, calls: list[ToolCall]) -> str:
    reason = response.finish_reason or "stop"
    return "tool_calls" if calls and reason == "stop" else reason


def _logprob_entries(response: PolicyResponse) -> list[dict[str, Any]] | None:
    """OpenAI log-prob entries; the token is ``token_id:N`` (vLLM's convention) when known."""
    if response.logprobs is None:
        return None
    ids = response.token_ids or []
    out = []
    for k, lp in enumerate(response.logprobs):
        token = f"token_id:{int(ids[k])}" if k < len(ids) else ""
        out.append({"token": token, "logprob": float(lp), "bytes": None, "top_logprobs": []})
    return out


def _usage(response: PolicyResponse) -> dict[str, int]:
    p, c = int(response.prompt_tokens), int(response.completion_tokens)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def completion_body(response: PolicyResponse, calls: list[ToolCall], call: ChatCall, *,
                    model: str, rid: str | None = None,
                    created: int | None = None) -> dict[str, Any]:
    """The ``chat.completion`` object for ``response`` (``calls``: its fixed tool calls)."""
    message: dict[str, Any] = {"role": "assistant", "content": response.text}
    if calls:
        message["tool_calls"] = [tc.to_dict() for tc in calls]
    choice: dict[str, Any] = {"index": 0, "message": message,
                              "finish_reason": finish_reason(response, calls),
                              "logprobs": None}
    if call.logprobs and (entries := _logprob_entries(response)) is not None:
        choice["logprobs"] = {"content": entries, "refusal": None}
    if (call.logprobs or call.token_ids) and response.token_ids is not None:
        choice["token_ids"] = [int(t) for t in response.token_ids]
    return {"id": rid or f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
            "created": created or int(time.time()), "model": model, "choices": [choice],
            "usage": _usage(response)}


def stream_chunks(response: PolicyResponse, calls: list[ToolCall], call: ChatCall, *,
                  model: str, rid: str | None = None,
                  created: int | None = None) -> Iterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects whose deltas add up to :func:`completion_body`."""
    rid = rid or f"chatcmpl-{uuid.uuid4().hex}"
    created = created or int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None,
                                  "finish_reason": finish, **extra}
        out: dict[str, Any] = {"id": rid, "object": "chat.completion.chunk",
                               "created": created, "model": model, "choices": [choice]}
        if call.include_usage:
            out["usage"] = None
        return out

    yield chunk({"role": "assistant", "content": ""})
    extra: dict[str, Any] = {}
    if call.logprobs and (entries := _logprob_entries(response)) is not None:
        extra["logprobs"] = {"content": entries, "refusal": None}
    if (call.logprobs or call.token_ids) and response.token_ids is not None:
        extra["token_ids"] = [int(t) for t in response.token_ids]
    if response.text or extra:
        yield chunk({"content": response.text or ""}, **extra)
    for i, tc in enumerate(calls):
        yield chunk({"tool_calls": [{"index": i, "id": tc.id, "type": "function",
                                     "function": {"name": tc.name, "arguments": ""}}]})
        if tc.arguments:
            yield chunk({"tool_calls": [{"index": i, "function": {"arguments": tc.arguments}}]})
    yield chunk({}, finish_reason(response, calls))
    if call.include_usage:
        yield {"id": rid, "object": "chat.completion.chunk", "created": created,
               "model": model, "choices": [], "usage": _usage(response)}


def sse_events(chunks: Iterator[dict[str, Any]]) -> bytes:
    """Server-Sent Events: one ``data:`` line per chunk, then ``data: [DONE]``."""
    parts = [b"data: " + dumps(c) + b"\n\n" for c in chunks]
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


def dumps(obj: Any) -> bytes:
    """Compact JSON bytes; ASCII-escaped, so any string the policy returned can be sent."""
    return json.dumps(obj, separators=(",", ":")).encode()
