"""Anthropic Messages as a dialect: ``POST /v1/messages`` (what Claude Code speaks).

Claude Code posts to ``/v1/messages?beta=true``; the query is not part of the
path a route matches, so the same route answers it. ``POST
/v1/messages/count_tokens`` is a ``count_tokens`` route: ``{"input_tokens": N}``.

The request becomes a chat-completions body:

* ``system`` (a string, or text blocks joined by newlines) -> a leading
  ``system`` message;
* a ``user`` message's blocks: ``text`` -> the user message's text (blocks joined
  by newlines); ``tool_result`` -> a ``tool`` message (``tool_call_id`` the
  ``tool_use_id``; its ``content`` a string or text blocks), placed before the
  user's text as the API requires them to come first. ``is_error: true`` is kept
  on the tool message as ``is_error`` (the record keeps it; chat templates have
  no such field, and the result's text says what failed). ``image`` and
  ``document`` blocks are a 400 naming them: they would otherwise be dropped;
* an ``assistant`` message's blocks: ``text`` -> its content, ``tool_use`` ->
  ``tool_calls`` (``input`` as the JSON ``arguments``), ``thinking`` -> its
  ``reasoning_content`` (what chat templates that render reasoning read, Qwen3's
  among them), ``redacted_thinking`` -> kept under ``redacted_thinking`` for the
  record only (it is encrypted: no model but Anthropic's can read it);
* ``tools`` (``name``, ``description``, ``input_schema``) -> chat functions;
  Anthropic's server tools (``web_search_…``, ``code_execution_…``, ...; a ``type``
  other than ``custom``) run on Anthropic's servers only: they are not offered,
  and each one dropped is named in the chat body's ``dropped_tools`` (recorded
  with the turn);
* ``tool_choice``: ``auto`` -> ``"auto"``, ``any`` -> ``"required"``, ``tool`` -> the
  named function, ``none`` -> ``"none"``; ``disable_parallel_tool_use`` ->
  ``parallel_tool_calls: false``;
* ``max_tokens`` (required, as by the API), ``temperature``, ``top_p``, ``top_k``,
  ``stop_sequences`` (as ``stop``), ``stream`` are passed on; ``output_config.format``
  (structured output) becomes ``response_format`` (which ``tackroom serve`` refuses:
  it cannot honour it); ``metadata`` is dropped; every other key (``thinking``,
  ``output_config``, ``service_tier``, ...) is kept in the chat body for the record. vLLM's ``return_token_ids`` and chat's ``logprobs``
  may be sent as extra keys, as to chat completions.

The reply is a ``message``: a ``text`` block (when there is text, or nothing
else), a ``tool_use`` block per call (``input`` the parsed arguments; arguments
that are not a JSON object come as ``{"arguments": TEXT}``, so the CLI can tell
the model its call was malformed), ``stop_reason`` ``end_turn`` / ``tool_use`` /
``max_tokens`` / ``stop_sequence`` (with ``stop_sequence`` set), usage in
``input_tokens`` / ``output_tokens``, ids ``msg_…`` and ``toolu_…`` (a call id
``call_X`` is sent as ``toolu_X``). With token ids asked for, the message also
carries ``token_ids``, ``prompt_token_ids`` and ``logprobs`` (floats; with
``logprobs`` asked for, too), vLLM-style extra keys. Streamed, it is Anthropic's
event sequence: ``message_start``, then per block ``content_block_start``
(``ping`` after the first), its ``text_delta`` / ``input_json_delta`` deltas and
``content_block_stop``, then ``message_delta`` (``stop_reason``, usage) and
``message_stop``. Errors are ``{"type": "error", "error": {"type", "message"}}``
with Anthropic's type names; a prompt over the context says ``prompt is too
long``, which Claude Code answers by compacting.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

from tackroom.wire.dialect import Dialect, Route, register_dialect
from tackroom.wire.errors import ApiError
from tackroom.wire.replies import Completion, Shape, content_deltas

__all__ = ["ANTHROPIC", "error", "events", "reply", "to_chat"]

#: Request keys translated (the others are kept in the chat body as they are).
_TRANSLATED = ("messages", "system", "tools", "tool_choice", "stop_sequences", "metadata",
               "max_tokens", "stream")
#: Anthropic's error ``type`` per HTTP status.
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                429: "rate_limit_error", 500: "api_error", 502: "api_error",
                503: "overloaded_error", 529: "overloaded_error"}
#: Chat's finish reasons as Anthropic's stop reasons.
_STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens",
                 "content_filter": "refusal"}


def _bad(where: str, what: str) -> ApiError:
    return ApiError(400, f"{where}: {what}", param=where)


# ----------------------------------------------------------------- request
def _block_text(block: dict[str, Any], where: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise _bad(f"{where}.text", "a text block needs a string 'text'")
    return text


def _refuse_media(kind: str, where: str) -> ApiError:
    return _bad(where, f"a {kind!r} block cannot be passed on: this server's models read "
                       "text only (send the content as text)")


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    """``content`` as a list of blocks (a string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise _bad(where, "content must be a string or a list of content blocks")
    for k, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise _bad(f"{where}.{k}", "a content block must be an object with a string "
                                       "'type'")
    return content


def _text_of(content: Any, where: str) -> str:
    """A string, or text blocks joined by newlines (``system``, a tool result's content)."""
    if content is None:
        return ""
    texts = []
    for k, block in enumerate(_blocks(content, where)):
        if block["type"] in ("image", "document"):
            raise _refuse_media(block["type"], f"{where}.{k}")
        if block["type"] != "text":
            raise _bad(f"{where}.{k}", f"a {block['type']!r} block is not allowed here; "
                                       "send text blocks")
        texts.append(_block_text(block, f"{where}.{k}"))
    return "\n".join(texts)


def _user(content: Any, where: str) -> list[dict[str, Any]]:
    """A user message's blocks as chat messages: its tool results, then its text."""
    results: list[dict[str, Any]] = []
    texts: list[str] = []
    for k, block in enumerate(_blocks(content, f"{where}.content")):
        at, kind = f"{where}.content.{k}", block["type"]
        if kind == "text":
            texts.append(_block_text(block, at))
        elif kind == "tool_result":
            tid = block.get("tool_use_id")
            if not isinstance(tid, str) or not tid:
                raise _bad(f"{at}.tool_use_id", "a tool_result needs the string "
                                                "'tool_use_id' of its tool_use")
            msg: dict[str, Any] = {"role": "tool", "tool_call_id": tid,
                                   "content": _text_of(block.get("content"), f"{at}.content")}
            if block.get("is_error") is True:
                msg["is_error"] = True
            results.append(msg)
        elif kind in ("image", "document"):
            raise _refuse_media(kind, at)
        else:
            raise _bad(at, f"a {kind!r} block is not allowed in a user message (text, "
                           "tool_result)")
    if texts or not results:
        results.append({"role": "user", "content": "\n".join(texts)})
    return results


def _assistant(content: Any, where: str) -> dict[str, Any]:
    texts: list[str] = []
    thoughts: list[str] = []
    redacted: list[Any] = []
    calls: list[dict[str, Any]] = []
    for k, block in enumerate(_blocks(content, f"{where}.content")):
        at, kind = f"{where}.content.{k}", block["type"]
        if kind == "text":
            texts.append(_block_text(block, at))
        elif kind == "tool_use":
            cid, name, args = block.get("id"), block.get("name"), block.get("input", {})
            if not isinstance(cid, str) or not isinstance(name, str) or not name:
                raise _bad(at, "a tool_use block needs a string 'id' and 'name'")
            if not isinstance(args, dict):
                raise _bad(f"{at}.input", "a tool_use's input must be an object")
            calls.append({"id": cid, "type": "function",
                          "function": {"name": name,
                                       "arguments": json.dumps(args, ensure_ascii=False)}})
        elif kind == "thinking":
            if not isinstance(block.get("thinking"), str):
                raise _bad(f"{at}.thinking", "a thinking block needs a string 'thinking'")
            thoughts.append(block["thinking"])
        elif kind == "redacted_thinking":
            redacted.append(block.get("data"))
        elif kind in ("image", "document"):
            raise _refuse_media(kind, at)
        else:
            raise _bad(at, f"a {kind!r} block is not allowed in an assistant message (text, "
                           "tool_use, thinking, redacted_thinking)")
    msg: dict[str, Any] = {"role": "assistant",
                           "content": "\n".join(texts) if texts or not calls else None}
    if calls:
        msg["tool_calls"] = calls
    if thoughts:
        msg["reasoning_content"] = "\n".join(thoughts)
    if redacted:
        msg["redacted_thinking"] = redacted
    return msg


def _tools(tools: Any) -> tuple[list[dict[str, Any]] | None, list[str]]:
    """Chat functions for the custom tools; the server tools' names, dropped."""
    if tools is None:
        return None, []
    if not isinstance(tools, list):
        raise _bad("tools", "must be a list of tools")
    out, dropped = [], []
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str) or not t["name"]:
            raise _bad(f"tools.{i}", "a tool must be an object with a string 'name'")
        kind = t.get("type")
        if kind not in (None, "custom"):
            dropped.append(f"{t['name']} ({kind})")
            continue
        schema = t.get("input_schema")
        if not isinstance(schema, dict):
            raise _bad(f"tools.{i}.input_schema", "a custom tool needs an object "
                                                  "'input_schema' (a JSON schema)")
        fn: dict[str, Any] = {"name": t["name"]}  # chat's key order: templates print it
        if isinstance(t.get("description"), str):
            fn["description"] = t["description"]
        fn["parameters"] = schema
        out.append({"type": "function", "function": fn})
    return out or None, dropped


def _tool_choice(choice: Any, chat: dict[str, Any]) -> None:
    if choice is None:
        return
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "auto":
        chat["tool_choice"] = "auto"
    elif kind == "any":
        chat["tool_choice"] = "required"
    elif kind == "none":
        chat["tool_choice"] = "none"
    elif kind == "tool" and isinstance(choice.get("name"), str):
        chat["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    else:
        raise _bad("tool_choice", "must be {\"type\": \"auto\" | \"any\" | \"none\"} or "
                                  "{\"type\": \"tool\", \"name\": ...}")
    if choice.get("disable_parallel_tool_use") is True:
        chat["parallel_tool_calls"] = False


def to_chat(body: Any, match: re.Match[str] | None = None) -> dict[str, Any]:
    """A Messages request (or a count_tokens one) as a chat-completions body; 400 if unusable."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    counting = match is not None and match.string.endswith("/count_tokens")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise _bad("model", "Field required (a string)")
    chat: dict[str, Any] = {k: v for k, v in body.items() if k not in _TRANSLATED}
    if not counting:
        max_tokens = body.get("max_tokens")
        if max_tokens is None:
            raise _bad("max_tokens", "Field required")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise _bad("max_tokens", "must be an integer >= 1")
        chat["max_tokens"] = max_tokens
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages", "must be a non-empty list of messages")
    out: list[dict[str, Any]] = []
    if body.get("system") is not None:
        out.append({"role": "system", "content": _text_of(body["system"], "system")})
    for i, m in enumerate(messages):
        where = f"messages.{i}"
        role = m.get("role") if isinstance(m, dict) else None
        if role == "user":
            out += _user(m.get("content"), where)
        elif role == "assistant":
            out.append(_assistant(m.get("content"), where))
        elif role == "system":  # a mid-conversation system turn (Claude Code 2.1's environment)
            out.append({"role": "system", "content": _text_of(m.get("content"), where)})
        else:
            raise _bad(f"{where}.role", "must be \"user\", \"assistant\" or \"system\"")
    chat["messages"] = out
    tools, dropped = _tools(body.get("tools"))
    if tools is not None:
        chat["tools"] = tools
    if dropped:
        chat["dropped_tools"] = dropped
    _tool_choice(body.get("tool_choice"), chat)
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise _bad("stop_sequences", "must be a list of strings")
        chat["stop"] = stops
    fmt = (body.get("output_config") or {}).get("format") \
        if isinstance(body.get("output_config"), dict) else None
    if fmt is not None:  # structured output: chat's response_format (serve refuses it)
        if not isinstance(fmt, dict) or not isinstance(fmt.get("schema"), dict):
            raise _bad("output_config.format", "must be {\"type\": \"json_schema\", "
                                               "\"schema\": {...}}")
        chat["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "output", "schema": fmt["schema"]}}
    if "stream" in body:
        chat["stream"] = body["stream"]
    return chat


# ------------------------------------------------------------------- reply
def _tool_id(cid: str) -> str:
    if cid.startswith("toolu_"):
        return cid
    return "toolu_" + (cid.removeprefix("call_") or uuid.uuid4().hex[:24])


def _input(arguments: str) -> dict[str, Any]:
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"arguments": arguments}


def _calls(c: Completion) -> list[dict[str, Any]]:
    """The reply's tool calls as ``tool_use`` blocks (``input`` kept as the policy wrote it)."""
    out = []
    for tc in c.tool_calls:
        d = tc if isinstance(tc, dict) else tc.to_dict()
        fn = d.get("function")
        fn = fn if isinstance(fn, dict) else {}
        args = fn.get("arguments")
        out.append({"type": "tool_use", "id": _tool_id(str(d.get("id") or "")),
                    "name": str(fn.get("name") or ""),
                    "input": _input(args if isinstance(args, str)
                                    else "" if args is None else json.dumps(args))})
    return out


def _stop(c: Completion) -> tuple[str, str | None]:
    if c.stop_sequence is not None:
        return "stop_sequence", c.stop_sequence
    return _STOP_REASONS.get(c.finish_reason, "end_turn"), None


def _extras(c: Completion, shape: Shape) -> dict[str, Any]:
    """vLLM-style extra keys: the token ids and log-probs, when the client asked for them."""
    out: dict[str, Any] = {}
    if shape.token_ids and c.token_ids is not None:
        out["token_ids"] = list(c.token_ids)
    if shape.token_ids and c.prompt_token_ids is not None:
        out["prompt_token_ids"] = list(c.prompt_token_ids)
    if c.logprobs is not None and (c.logprob_entries is not None or "token_ids" in out):
        out["logprobs"] = [float(x) for x in c.logprobs]
    return out


def _usage(c: Completion, *, output_tokens: int | None = None) -> dict[str, Any]:
    return {"input_tokens": c.prompt_tokens, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": c.completion_tokens if output_tokens is None else output_tokens}


def _content(c: Completion, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if c.content or not calls:
        blocks.append({"type": "text", "text": c.content or ""})
    return blocks + calls


def _message(c: Completion, shape: Shape, content: list[dict[str, Any]], *, done: bool,
             mid: str) -> dict[str, Any]:
    reason, sequence = _stop(c) if done else (None, None)
    return {"id": mid, "type": "message", "role": "assistant", "model": shape.model,
            "content": content, "stop_reason": reason, "stop_sequence": sequence,
            "usage": _usage(c) if done else _usage(c, output_tokens=1)}


def reply(c: Completion, shape: Shape, body: Any) -> dict[str, Any]:
    """The ``message`` object (non-streaming)."""
    out = _message(c, shape, _content(c, _calls(c)), done=True,
                   mid=f"msg_{uuid.uuid4().hex[:24]}")
    out.update(_extras(c, shape))
    return out


def _text_deltas(c: Completion) -> list[str]:
    if c.pieces is not None:
        return [d for d in content_deltas(c, c.pieces) if d]
    return [c.content] if c.content else []


def events(c: Completion, shape: Shape, body: Any) -> Iterator[tuple[str | None, Any]]:
    """The streamed reply: Anthropic's event sequence, each event named by its ``type``."""
    calls = _calls(c)
    start = _message(c, shape, [], done=False, mid=f"msg_{uuid.uuid4().hex[:24]}")

    def all_events() -> Iterator[dict[str, Any]]:
        yield {"type": "message_start", "message": start}
        for index, block in enumerate(_content(c, calls)):
            if block["type"] == "text":
                yield {"type": "content_block_start", "index": index,
                       "content_block": {"type": "text", "text": ""}}
                if index == 0:
                    yield {"type": "ping"}
                for delta in _text_deltas(c):
                    yield {"type": "content_block_delta", "index": index,
                           "delta": {"type": "text_delta", "text": delta}}
            else:
                yield {"type": "content_block_start", "index": index,
                       "content_block": {**block, "input": {}}}
                if index == 0:
                    yield {"type": "ping"}
                args = json.dumps(block["input"], ensure_ascii=False) if block["input"] else ""
                yield {"type": "content_block_delta", "index": index,
                       "delta": {"type": "input_json_delta", "partial_json": args}}
            yield {"type": "content_block_stop", "index": index}
        reason, sequence = _stop(c)
        yield {"type": "message_delta",
               "delta": {"stop_reason": reason, "stop_sequence": sequence},
               "usage": {"output_tokens": c.completion_tokens}, **_extras(c, shape)}
        yield {"type": "message_stop"}

    for event in all_events():
        yield event["type"], event


def error(e: ApiError) -> dict[str, Any]:
    """Anthropic's error object: ``{"type": "error", "error": {"type", "message"}}``."""
    message = e.message.replace("'stop'", "'stop_sequences'").replace(
        "'response_format'", "'output_config.format'")
    if e.code == "context_length_exceeded":  # the words Claude Code compacts on
        message = f"prompt is too long: {message}"
    return {"type": "error",
            "error": {"type": _ERROR_TYPES.get(e.status, "api_error" if e.status >= 500
                                               else "invalid_request_error"),
                      "message": message}}


def count(n: int) -> dict[str, Any]:
    """``POST /v1/messages/count_tokens``'s answer."""
    return {"input_tokens": n}


ANTHROPIC = register_dialect(Dialect(
    name="anthropic",
    summary="Anthropic Messages: POST /v1/messages, POST /v1/messages/count_tokens (Claude Code)",
    routes=(Route("POST", r"(?:/v1)?/messages"),
            Route("POST", r"(?:/v1)?/messages/count_tokens", "count_tokens")),
    to_chat=to_chat, reply=reply, events=events, error=error, count=count))
