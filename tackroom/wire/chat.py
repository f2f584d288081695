"""Chat-completions requests: one reading of messages, tools and options for every server.

Two servers read the same body with two intents, in one place:

* :func:`parse_chat` — the **gateway**'s lenient reading. Agent CLIs send
  whatever their SDK sends (``stream_options``, ``n``, penalties,
  ``parallel_tool_calls``, ``response_format``, ``user``, vendor keys, ...); only
  messages, tools, ``tool_choice``, ``stream`` and ``logprobs`` are read, the rest
  kept in ``requested`` for diagnosis (the run's :class:`Sampling` is enforced).
* :func:`parse_chat_request` — ``tackroom serve``'s strict reading: every sampling
  knob is read (``temperature``, ``top_p``, ``top_k`` — ``0`` and ``-1`` mean off,
  as in vLLM — ``max_tokens``, ``seed``, ``stop``), and one the ``hf`` backend cannot
  honour is refused with a 400 naming it (a silently ignored knob would make a
  comparison quietly wrong).

Both refuse what cannot be passed on faithfully with a 400 that names the field:
a message without a known role, a content part other than text (an image would
otherwise be dropped silently), a tool without a function name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tackroom.core.policy import Sampling
from tackroom.wire.errors import ApiError

__all__ = ["DEFAULT_MAX_TOKENS", "ROLES", "ChatCall", "ChatRequest", "message_role",
           "parse_chat", "parse_chat_request", "read_tools", "text_of"]

#: ``max_tokens`` when a request to ``tackroom serve`` gives none (vLLM would allow the
#: whole context; a random model that never says ``<|im_end|>`` would then run for minutes).
DEFAULT_MAX_TOKENS = 2048
#: Message roles a chat template renders as the model was trained on.
ROLES = ("system", "user", "assistant", "tool")
#: The gateway passes ``developer`` (OpenAI's newer name for ``system``) on as ``system``.
GATEWAY_ROLES = ("system", "developer", "user", "assistant", "tool")
#: Message keys passed on to the policy (others, e.g. ``refusal``, ``annotations``,
#: ``reasoning_content``, ``cache_control``, stay in the recorded turn only).
_MESSAGE_KEYS = ("name", "tool_call_id")
#: Request keys that are not recorded in ``requested`` (they are the turn itself).
_BULK_KEYS = ("messages", "tools")


# ---------------------------------------------------------------- messages
def message_role(i: int, m: Any, roles: tuple[str, ...] = ROLES) -> str:
    """The role of ``messages[i]``, or a 400 naming the message and the roles allowed."""
    where = f"messages[{i}]"
    if not isinstance(m, dict) or not isinstance(m.get("role"), str):
        raise ApiError(400, f"{where} must be an object with a string 'role'", param=where)
    role = m["role"]
    if role not in roles:
        raise ApiError(400, f"{where} has role {json.dumps(role)[:40]}; the roles are "
                            f"{', '.join(roles)}", param=where)
    return role


def text_of(content: Any, where: str, *, lenient: bool = True) -> str | None:
    """``content`` as one string (text parts joined by newlines, as vLLM joins them).

    ``lenient`` also takes bare strings and ``input_text`` parts as text (what
    some SDKs send); any other part (an image, audio) is a 400 naming it.
    """
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ApiError(400, f"{where}.content must be a string, null or a list of text parts",
                       param=where)
    kinds = ("text", "input_text") if lenient else ("text",)
    texts = []
    for k, part in enumerate(content):
        if lenient and isinstance(part, str):
            texts.append(part)
            continue
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in kinds:
            shown = f"a {json.dumps(kind)[:40]} part" if isinstance(kind, str) \
                else "a part without a string 'type'"
            raise ApiError(400, f"{where}.content[{k}] is {shown}; this server passes on "
                                "text parts only ({\"type\": \"text\", \"text\": ...})",
                           param=where)
        if not isinstance(part.get("text"), str):
            raise ApiError(400, f"{where}.content[{k}] needs a string 'text'", param=where)
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


def _gateway_message(i: int, m: Any) -> dict[str, Any]:
    where = f"messages[{i}]"
    role = message_role(i, m, GATEWAY_ROLES)
    out: dict[str, Any] = {"role": "system" if role == "developer" else role,
                           "content": text_of(m.get("content"), where)}
    for key in _MESSAGE_KEYS:
        if isinstance(m.get(key), str):
            out[key] = m[key]
    if role == "assistant" and m.get("tool_calls"):
        out["tool_calls"] = _tool_calls(m["tool_calls"], where)
    if role in ("user", "system", "developer", "tool") and out["content"] is None:
        out["content"] = ""
    return out


def read_tools(tools: Any) -> list[dict[str, Any]] | None:
    """The request's tool schemas as ``{"type": "function", "function": ...}``; 400 if unusable."""
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


def _stream_flag(body: dict[str, Any]) -> bool:
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise ApiError(400, "'stream' must be true or false", param="stream")
    return bool(stream)


def _messages(body: Any) -> list[Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    sent = body.get("messages")
    if not isinstance(sent, list) or not sent:
        raise ApiError(400, "'messages' must be a non-empty list", param="messages")
    return sent


# ----------------------------------------------------------- the gateway's
@dataclass
class ChatCall:
    """One chat-completions request, read leniently (the gateway's reading).

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


def parse_chat(body: Any) -> ChatCall:
    """Read a ``/v1/chat/completions`` body leniently; 400 naming the field if unusable."""
    sent = _messages(body)
    messages = [_gateway_message(i, m) for i, m in enumerate(sent)]
    if body.get("functions") is not None:
        raise ApiError(400, "'functions' (the legacy function-calling API) is not supported: "
                            "send 'tools'", param="functions")
    tools = read_tools(body.get("tools"))
    if body.get("tool_choice") == "none":  # the model is not to call tools: do not show them
        tools = None
    stream = _stream_flag(body)
    opts = body.get("stream_options")
    include_usage = isinstance(opts, dict) and opts.get("include_usage") is True
    requested = {k: v for k, v in body.items() if k not in _BULK_KEYS}
    return ChatCall(messages=messages, sent=sent, tools=tools, stream=stream,
                    include_usage=stream and include_usage,
                    logprobs=body.get("logprobs") is True,
                    token_ids=body.get("return_token_ids") is True, requested=requested)


# ------------------------------------------------------- tackroom serve's
@dataclass
class ChatRequest:
    """A chat-completions request read strictly (``tackroom serve``'s reading)."""

    model: str
    adapter: str | None
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    parse_tools: bool = False
    sampling: Sampling = field(default_factory=Sampling)
    stop: list[str] = field(default_factory=list)
    logprobs: bool = False
    stream: bool = False
    include_usage: bool = False
    return_token_ids: bool = False


def _number(body: dict[str, Any], key: str, default: Any, *, lo: float | None = None,
            hi: float | None = None, integer: bool = False, lo_open: bool = False) -> Any:
    value = body.get(key)
    if value is None:
        return default
    kind = "an integer" if integer else "a number"
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if not ok or isinstance(value, bool):
        raise ApiError(400, f"'{key}' must be {kind}, not {json.dumps(value)[:40]}", param=key)
    if (lo is not None and (value <= lo if lo_open else value < lo)) or \
            (hi is not None and value > hi):
        low = f"> {lo:g}" if lo_open else f">= {lo:g}"
        span = f"{low} and <= {hi:g}" if hi is not None else low
        raise ApiError(400, f"'{key}' is {value}; it must be {span}", param=key)
    return value


def _refuse(key: str, why: str) -> ApiError:
    return ApiError(400, f"'{key}' {why} is not supported by tackroom serve (the hf backend "
                         "cannot honour it, and ignoring it would change the results)", param=key)


def _refuse_unhonoured_knobs(body: dict[str, Any]) -> None:
    n = _number(body, "n", 1, integer=True)
    if n != 1:
        raise ApiError(400, f"'n' is {n}; tackroom serve returns one choice per request "
                            "(n=1): send n requests instead", param="n")
    if _number(body, "best_of", 1, integer=True) != 1:
        raise _refuse("best_of", "other than 1")
    for key in ("presence_penalty", "frequency_penalty"):
        if _number(body, key, 0.0):
            raise _refuse(key, "other than 0")
    if _number(body, "repetition_penalty", 1.0) != 1.0:
        raise _refuse("repetition_penalty", "other than 1")
    if _number(body, "min_p", 0.0):
        raise _refuse("min_p", "other than 0")
    if body.get("logit_bias"):
        raise _refuse("logit_bias", "")
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise _refuse("response_format", "other than {\"type\": \"text\"}")
    top = _number(body, "top_logprobs", 0, lo=0, integer=True)
    if top:
        raise _refuse("top_logprobs", f"= {top} (only the sampled token's log-prob is "
                                      "returned; use 0)")


def _stops(body: dict[str, Any]) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        stops = [stop]
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stops = list(stop)
    else:
        raise ApiError(400, "'stop' must be a string or a list of strings", param="stop")
    return [s for s in stops if s]


def parse_chat_request(body: Any, served: dict[str, str | None], *,
                       default_max_tokens: int = DEFAULT_MAX_TOKENS) -> ChatRequest:
    """Read a ``/v1/chat/completions`` body strictly; ``served`` maps model names to adapters.

    Raises :class:`ApiError` (400, or 404 for an unknown model) with a message
    that names the field.
    """
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "'model' is required: one of " + ", ".join(served), param="model")
    if model not in served:
        raise ApiError(404, f"The model `{model}` does not exist. Served models: "
                            f"{', '.join(served)}", param="model", code="model_not_found")
    messages = _messages(body)
    for i, m in enumerate(messages):  # the template renders them as sent: only check them
        message_role(i, m)
        text_of(m.get("content"), f"messages[{i}]", lenient=False)
    _refuse_unhonoured_knobs(body)
    tools = read_tools(body.get("tools"))
    choice = body.get("tool_choice")
    if choice not in (None, "auto", "none"):
        raise _refuse("tool_choice", f"= {json.dumps(choice)[:60]} (use \"auto\" or \"none\")")
    temperature = _number(body, "temperature", 1.0, lo=0.0, hi=2.0)
    top_p = _number(body, "top_p", 1.0, lo=0.0, hi=1.0, lo_open=True)
    top_k = _number(body, "top_k", 0, integer=True)
    if top_k < -1:  # -1 and 0 both mean off, as in vLLM
        raise ApiError(400, f"'top_k' is {top_k}; it must be a positive integer, or 0 or -1 "
                            "for no top-k", param="top_k")
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None \
        else "max_tokens"
    max_tokens = _number(body, key, default_max_tokens, lo=1, integer=True)
    seed = _number(body, "seed", None, lo=-(2**63), hi=2**64 - 1, integer=True)
    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise ApiError(400, "'logprobs' must be true or false", param="logprobs")
    stops = _stops(body)
    stream = _stream_flag(body)
    opts = body.get("stream_options")
    if opts is not None and (not isinstance(opts, dict) or not stream):
        raise ApiError(400, "'stream_options' needs \"stream\": true and must be an object",
                       param="stream_options")
    return ChatRequest(
        model=model, adapter=served[model], messages=messages, tools=tools,
        parse_tools=bool(tools) and choice != "none",
        sampling=Sampling(temperature=float(temperature), top_p=float(top_p),
                          max_tokens=int(max_tokens), seed=seed, logprobs=bool(logprobs),
                          top_k=max(int(top_k), 0)),
        stop=stops, logprobs=bool(logprobs), stream=stream,
        include_usage=bool((opts or {}).get("include_usage")),
        return_token_ids=body.get("return_token_ids") is True)
