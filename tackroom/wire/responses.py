"""OpenAI Responses as a dialect: ``POST /v1/responses`` (and ``/responses``), what Codex speaks.

``POST /v1/responses/input_tokens`` counts a request's prompt tokens (a side
call: no model turn).

The request's ``input`` items become chat messages, in order:

* a string, or ``message`` items (roles ``user``, ``assistant``, ``system``,
  ``developer``; parts ``input_text`` / ``output_text`` / ``refusal``) -> messages
  with their text joined by newlines (``developer`` is passed on as ``system``,
  the role every chat template knows). Any other part (an image, a file, audio)
  is a 400 naming it: it would otherwise be dropped silently;
* ``function_call`` / ``custom_tool_call`` items -> ``tool_calls`` of the assistant
  message they belong to (a model turn's items, ``reasoning`` / ``message`` /
  calls, in a row, are one assistant message); ``function_call_output`` /
  ``custom_tool_call_output`` -> ``tool`` messages;
* ``reasoning`` items are carried, not shown: they ride on their assistant
  message under ``reasoning_items`` (as sent, ``encrypted_content`` and all), so
  the recorded turn keeps them; no chat template reads that key, so the policy
  does not see them as text (an encrypted summary means nothing to another
  model, and a plain one was never what the model wrote);
* ``instructions`` -> a leading ``system`` message.

Tools: ``function`` tools as chat functions; ``custom`` (freeform) tools, e.g.
Codex's ``apply_patch``, as a function of one string argument ``input`` (the
grammar, when given, in its description), and a call to one goes back as a
``custom_tool_call`` whose ``input`` is that string; a ``namespace``'s tools
flattened under their own names (``NAMESPACE__NAME`` where that would clash),
their calls sent back with ``namespace`` set. Hosted tools (``web_search``,
``file_search``, ``code_interpreter``, ...) run on OpenAI's servers only: they are
not offered to the model, and each one dropped is named in the chat body's
``dropped_tools`` (the gateway records it with the turn). Codex 0.171 sends
``function`` tools, one ``namespace`` (its sub-agent tools) and ``web_search``.

There is no server-side state: ``previous_response_id``, ``conversation``,
``item_reference`` items, ``background`` and stored ``prompt`` templates are a 400
telling the client to send the whole input (Codex sends it whole, with
``store: false``); ``store: true`` is accepted and nothing is stored.
``max_output_tokens`` is ``max_completion_tokens``; ``temperature``, ``top_p``,
``top_logprobs``, ``parallel_tool_calls`` are passed on as they are; ``text.format``
other than text becomes ``response_format`` (which ``tackroom serve`` refuses: it
cannot honour it); ``include: ["message.output_text.logprobs"]`` asks for
log-probs; ``reasoning``, ``include``, ``text`` and every other key are kept in
the chat body for the record. vLLM's ``return_token_ids`` / chat's ``logprobs``
may be sent as extra keys, as to chat completions.

The reply is the ``response`` object: a ``message`` item (``output_text``,
``annotations`` ``[]``, per-token ``logprobs`` when asked) and a
``function_call`` / ``custom_tool_call`` item per call; ``status`` ``incomplete``
with ``incomplete_details.reason`` ``max_output_tokens`` when the reply was cut
off. With token ids asked for, the response also carries ``token_ids``,
``prompt_token_ids`` and ``logprobs`` (floats), vLLM-style extra keys. Streamed,
it is OpenAI's event sequence (``response.created``, ``response.in_progress``,
then per item ``output_item.added``, its content part / argument deltas and
``.done`` events, ``output_item.done``, and ``response.completed`` or
``response.incomplete``), each event's data carrying ``type`` and
``sequence_number`` (the in-progress snapshots leave out the request's
``instructions`` and ``tools``, which the finished response echoes). Errors are
OpenAI's shape, with chat keys named back as the client sent them
(``max_output_tokens``, ``text.format``, ``input``).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tackroom.wire.dialect import Dialect, Route, register_dialect
from tackroom.wire.errors import ApiError
from tackroom.wire.replies import Completion, Shape, content_deltas

__all__ = ["RESPONSES", "ToolSet", "count", "error", "events", "read_tools", "reply", "to_chat"]

#: Message roles an input ``message`` item may have.
ROLES = ("user", "assistant", "system", "developer")
#: Content part types read as text (``refusal`` parts carry their text in ``refusal``).
_TEXT_PARTS = ("input_text", "output_text", "text")
#: The ``include`` value that asks for the output text's log-probs.
LOGPROBS_INCLUDE = "message.output_text.logprobs"
#: Keys read into the chat body another way (or refused); every other key is kept as sent.
_CONSUMED = ("input", "instructions", "tools", "tool_choice", "max_output_tokens",
             "stream_options", "previous_response_id", "conversation", "background", "prompt")
_STATELESS = ("(this server keeps no responses): send the whole conversation in 'input', "
              "with store: false")
#: Chat keys named in a downstream error, and the Responses key the client sent instead.
_CHAT_KEYS = {"max_completion_tokens": "max_output_tokens", "max_tokens": "max_output_tokens",
              "response_format": "text.format", "messages": "input"}


def _where(i: int) -> str:
    return f"input[{i}]"


def _string(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise ApiError(400, f"{where} needs a string '{key}'", param=where)
    return value


# ------------------------------------------------------------------- tools
@dataclass
class ToolSet:
    """A request's tools as the policy sees them, and how each one's calls go back.

    ``chat`` are chat-completions function schemas; ``kinds[name]`` is
    ``(kind, name as the client knows it, namespace)`` for each policy-side
    name, ``kind`` being ``"function"`` or ``"custom"``; ``dropped`` the hosted
    tools not offered, each with why.
    """

    chat: list[dict[str, Any]] = field(default_factory=list)
    kinds: dict[str, tuple[str, str, str | None]] = field(default_factory=dict)
    dropped: list[dict[str, str]] = field(default_factory=list)

    def policy_name(self, name: str, namespace: str | None) -> str:
        """The name the policy knows a client's (namespaced) tool by."""
        for key, (_kind, original, ns) in self.kinds.items():
            if original == name and ns == namespace:
                return key
        return name

    def item(self, name: str, call_id: str, arguments: str) -> dict[str, Any]:
        """The output item for a policy's call of ``name`` (before ids and status)."""
        kind, original, ns = self.kinds.get(name, ("function", name, None))
        if kind == "custom":
            return {"type": "custom_tool_call", "call_id": call_id, "name": original,
                    "input": _custom_input(arguments)}
        item = {"type": "function_call", "call_id": call_id, "name": original,
                "arguments": arguments}
        if ns is not None:
            item["namespace"] = ns
        return item


def _custom_input(arguments: str) -> str:
    """A custom tool's raw input from the ``{"input": ...}`` the policy wrote (as is if not)."""
    try:
        obj = json.loads(arguments)
    except (ValueError, RecursionError):
        return arguments  # the model's malformed call, passed on as data
    if isinstance(obj, dict) and isinstance(obj.get("input"), str) and len(obj) == 1:
        return obj["input"]
    return arguments


def _custom_schema(tool: dict[str, Any]) -> dict[str, Any]:
    fmt = tool.get("format")
    about = "The tool's raw input, as free text."
    if isinstance(fmt, dict) and fmt.get("type") == "grammar":
        about = (f"The tool's raw input, written in this {fmt.get('syntax', '')} grammar:\n"
                 f"{fmt.get('definition', '')}")
    return {"type": "object", "properties": {"input": {"type": "string", "description": about}},
            "required": ["input"], "additionalProperties": False}


def read_tools(tools: Any) -> ToolSet:
    """The request's ``tools`` read into a :class:`ToolSet`; 400 naming the tool if unusable."""
    out = ToolSet()
    if tools is None:
        return out
    if not isinstance(tools, list):
        raise ApiError(400, "'tools' must be a list", param="tools")
    flat: list[tuple[str, dict[str, Any], str | None]] = []
    for i, t in enumerate(tools):
        where = f"tools[{i}]"
        kind = t.get("type") if isinstance(t, dict) else None
        if not isinstance(kind, str):
            raise ApiError(400, f"{where} must be an object with a string 'type'", param=where)
        if kind == "namespace":
            inner = t.get("tools")
            if not isinstance(inner, list):
                raise ApiError(400, f"{where} (a namespace) needs a list 'tools'", param=where)
            ns = _string(t, "name", where)
            for k, sub in enumerate(inner):
                flat.append((f"{where}.tools[{k}]", sub, ns))
        else:
            flat.append((where, t, None))
    taken = {t["name"] for _w, t, ns in flat
             if ns is None and isinstance(t, dict) and isinstance(t.get("name"), str)}
    for where, t, space in flat:
        kind = t.get("type") if isinstance(t, dict) else None
        if not isinstance(kind, str):
            raise ApiError(400, f"{where} must be an object with a string 'type'", param=where)
        if kind not in ("function", "custom"):
            why = "a namespace within a namespace" if kind == "namespace" else \
                "a hosted tool, run by OpenAI's servers only"
            out.dropped.append({"tool": where, "type": kind[:60],
                                "why": f"{why}: not offered to the model"})
            continue
        name = _string(t, "name", where)
        key = name if space is None or name not in taken else f"{space}__{name}"
        taken.add(key)
        fn: dict[str, Any] = {"name": key}
        if isinstance(t.get("description"), str):
            fn["description"] = t["description"]
        if kind == "custom":
            fn["parameters"] = _custom_schema(t)
        else:
            params = t.get("parameters")
            fn["parameters"] = params if isinstance(params, dict) else \
                {"type": "object", "properties": {}}
            if isinstance(t.get("strict"), bool):
                fn["strict"] = t["strict"]
        out.chat.append({"type": "function", "function": fn})
        out.kinds[key] = (kind, name, space)
    return out


def _tool_choice(choice: Any, tools: ToolSet) -> Any:
    if isinstance(choice, dict) and choice.get("type") in ("function", "custom") and \
            isinstance(choice.get("name"), str):
        name = tools.policy_name(choice["name"], choice.get("namespace"))
        return {"type": "function", "function": {"name": name}}
    return choice  # "auto" / "none" / "required" mean what they mean to chat


# ------------------------------------------------------------------- input
def _part_text(part: Any, where: str) -> str:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "refusal" and isinstance(part.get("refusal"), str):
        return str(part["refusal"])
    if kind not in _TEXT_PARTS:
        shown = f"a {json.dumps(kind)[:40]} part" if isinstance(kind, str) \
            else "a part without a string 'type'"
        raise ApiError(400, f"{where} is {shown}; this server passes on text parts only "
                            "({\"type\": \"input_text\", \"text\": ...})", param=where)
    return _string(part, "text", where)


def _text(content: Any, where: str) -> str:
    """A message's or tool output's content as one string (text parts joined by newlines)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ApiError(400, f"{where} must be a string or a list of text parts", param=where)
    return "\n".join(_part_text(p, f"{where}[{k}]") for k, p in enumerate(content))


class _Messages:
    """Chat messages built item by item; a model turn's items make one assistant message."""

    def __init__(self) -> None:
        self.out: list[dict[str, Any]] = []

    def assistant(self, fresh: bool) -> dict[str, Any]:
        """The open assistant message; a new one if there is none or ``fresh`` and it has text/calls."""
        last = self.out[-1] if self.out else None
        if last is None or last["role"] != "assistant" or \
                (fresh and (last["content"] is not None or last.get("tool_calls"))):
            last = {"role": "assistant", "content": None}
            self.out.append(last)
        return last

    def add(self, i: int, item: Any, tools: ToolSet) -> None:
        where = _where(i)
        if isinstance(item, str):  # some clients send bare strings as user turns
            self.out.append({"role": "user", "content": item})
            return
        if not isinstance(item, dict):
            raise ApiError(400, f"{where} must be an object (an input item)", param=where)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            self.message(where, item)
        elif kind in ("function_call", "custom_tool_call"):
            name = _string(item, "name", where)
            call_id = _string(item, "call_id", where)
            if kind == "custom_tool_call":
                args = json.dumps({"input": _string(item, "input", where)}, ensure_ascii=False)
            else:
                raw = item.get("arguments")
                args = raw if isinstance(raw, str) else \
                    "" if raw is None else json.dumps(raw, ensure_ascii=False)
            ns = item.get("namespace") if isinstance(item.get("namespace"), str) else None
            msg = self.assistant(fresh=False)
            msg.setdefault("tool_calls", []).append(
                {"id": call_id, "type": "function",
                 "function": {"name": tools.policy_name(name, ns), "arguments": args}})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            self.out.append({"role": "tool", "tool_call_id": _string(item, "call_id", where),
                             "content": _text(item.get("output"), f"{where}.output")})
        elif kind == "reasoning":
            self.assistant(fresh=True).setdefault("reasoning_items", []).append(item)
        elif kind == "item_reference":
            raise ApiError(400, f"{where} is an item_reference, which is not supported "
                                f"{_STATELESS}", param=where)
        else:
            shown = json.dumps(kind)[:40] if isinstance(kind, str) else "no string 'type'"
            raise ApiError(400, f"{where} has type {shown}; this server takes message, "
                                "function_call, function_call_output, custom_tool_call, "
                                "custom_tool_call_output and reasoning items", param=where)

    def message(self, where: str, item: dict[str, Any]) -> None:
        role = item.get("role")
        if role not in ROLES:
            raise ApiError(400, f"{where} has role {json.dumps(role)[:40]}; the roles are "
                                f"{', '.join(ROLES)}", param=where)
        text = _text(item.get("content"), f"{where}.content")
        if role != "assistant":
            self.out.append({"role": "system" if role == "developer" else role,
                             "content": text})
            return
        # A model turn's text comes before its calls; a second text starts a new message.
        self.assistant(fresh=True)["content"] = text


def to_chat(body: Any, match: re.Match[str] | None = None) -> dict[str, Any]:
    """The chat-completions body a Responses request means (see the module docstring)."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    for key in ("previous_response_id", "conversation"):
        if body.get(key) is not None:
            raise ApiError(400, f"'{key}' is not supported {_STATELESS}", param=key)
    if body.get("background"):
        raise ApiError(400, "'background' responses are not supported (this server keeps "
                            "no responses to poll): send the request without it",
                       param="background")
    if body.get("prompt") is not None:
        raise ApiError(400, "'prompt' (a stored prompt template) is not supported: send its "
                            "text in 'instructions' and 'input'", param="prompt")
    tools = read_tools(body.get("tools"))
    built = _Messages()
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise ApiError(400, "'instructions' must be a string", param="instructions")
        built.out.append({"role": "system", "content": instructions})
    sent = body.get("input")
    if isinstance(sent, str):
        built.out.append({"role": "user", "content": sent})
    elif isinstance(sent, list):
        for i, item in enumerate(sent):
            built.add(i, item, tools)
    elif sent is not None:
        raise ApiError(400, "'input' must be a string or a list of items", param="input")
    if not built.out:
        raise ApiError(400, "'input' must be a non-empty string or list of items",
                       param="input")
    chat: dict[str, Any] = {k: v for k, v in body.items() if k not in _CONSUMED}
    chat["messages"] = built.out
    if tools.chat:
        chat["tools"] = tools.chat
    if tools.dropped:
        chat["dropped_tools"] = tools.dropped
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"], tools)
    if body.get("max_output_tokens") is not None:
        chat["max_completion_tokens"] = body["max_output_tokens"]
    include = body.get("include")
    if isinstance(include, list) and LOGPROBS_INCLUDE in include:
        chat["logprobs"] = True
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if isinstance(fmt, dict) and fmt.get("type") not in (None, "text"):
        chat["response_format"] = _response_format(fmt)
    return chat


def _response_format(fmt: dict[str, Any]) -> dict[str, Any]:
    if fmt.get("type") == "json_schema":
        inner = {k: v for k, v in fmt.items() if k != "type"}
        return {"type": "json_schema", "json_schema": inner}
    return dict(fmt)


# ------------------------------------------------------------------- reply
def _logprob_entries(c: Completion) -> list[dict[str, Any]] | None:
    if c.logprob_entries is None:
        return None
    return [{"token": e.get("token", ""), "logprob": e.get("logprob"),
             "bytes": list(e.get("bytes") or []), "top_logprobs": []}
            for e in c.logprob_entries]


def _calls(c: Completion) -> list[tuple[str, str, str]]:
    out = []
    for tc in c.tool_calls:
        d = tc if isinstance(tc, dict) else tc.to_dict()
        fn = d.get("function")
        fn = fn if isinstance(fn, dict) else {}
        out.append((str(d.get("id") or f"call_{uuid.uuid4().hex[:24]}"),
                    str(fn.get("name") or ""), str(fn.get("arguments") or "")))
    return out


def _incomplete(c: Completion) -> dict[str, str] | None:
    if c.finish_reason == "length":
        return {"reason": "max_output_tokens"}
    if c.finish_reason == "content_filter":
        return {"reason": "content_filter"}
    return None


def _output(c: Completion, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The response's output items, finished (ids, status) — the streamed events replay them."""
    status = "incomplete" if _incomplete(c) else "completed"
    items: list[dict[str, Any]] = []
    calls = _calls(c)
    if c.content or not calls:  # a reply that is only calls has no message item
        part: dict[str, Any] = {"type": "output_text", "text": c.content or "",
                                "annotations": []}
        entries = _logprob_entries(c)
        if entries is not None:
            part["logprobs"] = entries
        items.append({"id": f"msg_{uuid.uuid4().hex}", "type": "message", "status": status,
                      "role": "assistant", "content": [part]})
    tools = read_tools(body.get("tools"))
    for call_id, name, args in calls:
        item = tools.item(name, call_id, args)
        prefix = "ctc" if item["type"] == "custom_tool_call" else "fc"
        items.append({"id": f"{prefix}_{uuid.uuid4().hex}", **item, "status": "completed"})
    return items


def _response(c: Completion, shape: Shape, body: dict[str, Any], output: list[dict[str, Any]],
              rid: str, created: int, *, done: bool) -> dict[str, Any]:
    incomplete = _incomplete(c)
    out: dict[str, Any] = {
        "id": rid, "object": "response", "created_at": created,
        "status": ("incomplete" if incomplete else "completed") if done else "in_progress",
        "background": False, "error": None,
        "incomplete_details": incomplete if done else None,
        # The client's own instructions and tools (40 kB for Codex) are echoed in the
        # finished response only: a copy in each in-progress snapshot tripled the CPU per call.
        "instructions": body.get("instructions") if done else None,
        "max_output_tokens": body.get("max_output_tokens"), "model": shape.model,
        "output": output if done else [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": None, "reasoning": body.get("reasoning"),
        "store": body.get("store", False), "temperature": body.get("temperature"),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"), "tools": (body.get("tools") or []) if done else [],
        "top_p": body.get("top_p"), "truncation": "disabled",
        "usage": None, "user": body.get("user"), "metadata": body.get("metadata") or {},
    }
    if done:
        out["usage"] = {"input_tokens": c.prompt_tokens,
                        "input_tokens_details": {"cached_tokens": 0,
                                                 "cache_write_tokens": 0},
                        "output_tokens": c.completion_tokens,
                        "output_tokens_details": {"reasoning_tokens": 0},
                        "total_tokens": c.prompt_tokens + c.completion_tokens}
        if shape.token_ids and c.token_ids is not None:  # vLLM-style extras
            out["token_ids"] = list(c.token_ids)
            if c.logprobs is not None:
                out["logprobs"] = list(c.logprobs)
        if shape.token_ids and c.prompt_token_ids is not None:
            out["prompt_token_ids"] = list(c.prompt_token_ids)
    return out


def _body(body: Any) -> dict[str, Any]:
    return body if isinstance(body, dict) else {}


def reply(c: Completion, shape: Shape, body: Any) -> dict[str, Any]:
    """The ``response`` object (non-streaming)."""
    body = _body(body)
    return _response(c, shape, body, _output(c, body), f"resp_{uuid.uuid4().hex}",
                     int(time.time()), done=True)


def _text_events(c: Completion, item: dict[str, Any], index: int) -> Iterator[dict[str, Any]]:
    part = item["content"][0]
    where = {"item_id": item["id"], "output_index": index, "content_index": 0}
    yield {"type": "response.content_part.added", **where,
           "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}
    text, entries = part["text"], part.get("logprobs")
    if c.pieces is not None and (entries is None or len(entries) == len(c.pieces)):
        deltas = content_deltas(c, c.pieces)  # one delta per token, as served
    else:
        deltas = [text] if text or entries else []
    for k, delta in enumerate(deltas):
        if entries is None:
            lps: list[dict[str, Any]] = []
        elif len(deltas) == len(entries):
            lps = [entries[k]]
        else:
            lps = list(entries)
        if delta or lps:
            yield {"type": "response.output_text.delta", **where, "delta": delta,
                   "logprobs": lps}
    yield {"type": "response.output_text.done", **where, "text": text,
           "logprobs": entries or []}
    yield {"type": "response.content_part.done", **where, "part": part}


def _item_events(c: Completion, item: dict[str, Any], index: int) -> Iterator[dict[str, Any]]:
    added = {**item, "status": "in_progress"}
    if item["type"] == "message":
        added["content"] = []
    elif item["type"] == "function_call":
        added["arguments"] = ""
    else:
        added["input"] = ""
    yield {"type": "response.output_item.added", "output_index": index, "item": added}
    where = {"item_id": item["id"], "output_index": index}
    if item["type"] == "message":
        yield from _text_events(c, item, index)
    elif item["type"] == "function_call":
        if item["arguments"]:
            yield {"type": "response.function_call_arguments.delta", **where,
                   "delta": item["arguments"]}
        yield {"type": "response.function_call_arguments.done", **where,
               "name": item["name"], "arguments": item["arguments"]}
    else:
        if item["input"]:
            yield {"type": "response.custom_tool_call_input.delta", **where,
                   "delta": item["input"]}
        yield {"type": "response.custom_tool_call_input.done", **where, "input": item["input"]}
    yield {"type": "response.output_item.done", "output_index": index, "item": item}


def events(c: Completion, shape: Shape, body: Any) -> Iterator[tuple[str | None, Any]]:
    """The streamed reply: OpenAI's event sequence, each event named and numbered."""
    body = _body(body)
    rid, created = f"resp_{uuid.uuid4().hex}", int(time.time())
    output = _output(c, body)
    start = _response(c, shape, body, output, rid, created, done=False)
    final = _response(c, shape, body, output, rid, created, done=True)

    def all_events() -> Iterator[dict[str, Any]]:
        yield {"type": "response.created", "response": start}
        yield {"type": "response.in_progress", "response": start}
        for index, item in enumerate(output):
            yield from _item_events(c, item, index)
        end = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        yield {"type": end, "response": final}

    for n, event in enumerate(all_events()):
        event["sequence_number"] = n
        yield event["type"], event


def error(e: ApiError) -> dict[str, Any]:
    """OpenAI's error object, naming the Responses keys where a chat key was named."""
    out = e.body()
    err = out["error"]
    message = err["message"]
    for chat_key, key in _CHAT_KEYS.items():
        message = message.replace(f"'{chat_key}'", f"'{key}'")
    err["message"] = message
    if isinstance(err.get("param"), str):
        param = err["param"]
        head = param.split("[", 1)[0]
        if head in _CHAT_KEYS:
            err["param"] = _CHAT_KEYS[head] + param[len(head):] if head != "messages" \
                else "input"
    return out


def count(n: int) -> dict[str, Any]:
    """The answer of ``POST /v1/responses/input_tokens`` for a prompt of ``n`` tokens."""
    return {"object": "response.input_tokens", "input_tokens": n}


RESPONSES = register_dialect(Dialect(
    name="responses",
    summary="OpenAI Responses: POST /v1/responses, POST /v1/responses/input_tokens",
    routes=(Route("POST", r"(?:/v1)?/responses"),
            Route("POST", r"(?:/v1)?/responses/input_tokens", "count_tokens")),
    to_chat=to_chat, reply=reply, events=events, error=error, count=count))
