"""The Gemini API as a dialect: ``generateContent``, ``streamGenerateContent``, ``countTokens``.

Routes: ``POST /v1beta/models/MODEL:generateContent`` and ``:streamGenerateContent``
(also under ``/v1`` and ``/v1alpha``, or with no version), ``POST
.../models/MODEL:countTokens`` (kind ``count_tokens``), and ``GET /v1beta/models[/MODEL]``.
The model is named in the path. A stream is server-sent events (``?alt=sse``,
what google-genai and Gemini CLI ask for); without ``alt=sse`` Google streams one
JSON array instead, which is refused with a 400 saying to add it (servers match
``path?query`` first: :func:`~tackroom.wire.dialect.find`).

The request becomes chat messages, in order:

* ``systemInstruction`` (a ``Content`` or a string) -> a leading ``system`` message;
* ``contents`` with role ``user`` (or none, or the old ``function``): text parts
  -> a ``user`` message (one part: a string; several: a list of text parts, which
  the chat reader joins by newlines); ``functionResponse`` parts -> ``tool``
  messages. Role ``model``: text parts joined -> the ``assistant`` message's
  content, ``functionCall`` parts -> its ``tool_calls``, thought parts
  (``"thought": true``) -> its ``reasoning_content`` (kept for the record; no
  template shows it);
* Gemini's calls carry no ids (Gemini CLI adds its own, different each run): a
  call is named ``call_I_K`` (content ``I``, call ``K`` in it), so the same
  conversation gives the same chat body. A ``functionResponse`` is paired with a
  call of the model content just before it: the one with its ``id`` when both
  have one, else the first unanswered one of its ``name``; one that pairs with
  none is a 400 (as Google's API refuses it);
* ``inlineData`` / ``fileData`` (images, audio, files) and code-execution parts
  are a 400 naming the part: dropping them silently would change the task.

Tools: ``functionDeclarations`` with ``parametersJsonSchema`` (Gemini CLI) as
they are, or with ``parameters`` in Gemini's schema dialect (upper-case types,
``nullable``, counts as strings, ``propertyOrdering``) normalised to JSON
Schema; built-in Google tools (``googleSearch``, ``codeExecution``, ...) run on
Google's servers only and are a 400. ``toolConfig.functionCallingConfig.mode``
maps to ``tool_choice`` (``AUTO`` auto, ``NONE`` none, ``ANY`` required or the one
allowed function). ``generationConfig``: ``temperature``, ``topP`` (``top_p``),
``topK`` (``top_k``), ``maxOutputTokens`` (``max_tokens``), ``stopSequences``
(``stop``), ``seed``, the penalties, ``responseLogprobs`` / ``logprobs``
(``logprobs`` / ``top_logprobs``), a JSON ``responseMimeType`` / schema
(``response_format``, which ``tackroom serve`` refuses); ``candidateCount`` other
than 1 is a 400; ``thinkingConfig`` and the other keys are kept in the chat
body's ``gemini_config`` for the record. vLLM's ``return_token_ids`` (or
``returnTokenIds``) may be sent as an extra top-level key.

The reply is a ``GenerateContentResponse``: one candidate (a text part, a
``functionCall`` part per call, ``finishReason`` ``STOP`` / ``MAX_TOKENS``),
``usageMetadata``, ``modelVersion``, ``responseId``; ``logprobsResult`` /
``avgLogprobs`` when log-probs were asked; with token ids asked, ``token_ids``,
``prompt_token_ids`` and ``logprobs`` (floats), the extra keys of every dialect.
Streamed: one response per run of text (per token when the server knows them),
the last with the calls, ``finishReason`` and whole usage; bare ``data:`` lines,
no end marker. Errors are Google's ``{"error": {"code", "message", "status"}}``,
chat keys named back as the client sent them.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, unquote

from tackroom.wire.dialect import Dialect, Route, register_dialect
from tackroom.wire.errors import ApiError
from tackroom.wire.replies import Completion, Shape, content_deltas

__all__ = ["GEMINI", "count", "error", "events", "json_schema", "reply", "to_chat"]

#: ``/v1beta/models/MODEL`` (the version optional: some clients put it in the base URL).
_MODEL_PATH = r"(?:/v1beta|/v1alpha|/v1)?/models/(?P<model>[^/:?]+)"
#: The query, when a server lets it reach the match (``alt=sse``, ``key=...``).
_QUERY = r"(?:\?(?P<query>[^#]*))?"
#: Roles a ``Content`` may have (``function``: the old name of a functionResponse turn).
ROLES = ("user", "model", "function")
#: Part keys that carry no data (a part holding only these is skipped).
_PART_META = frozenset({"thought", "thoughtSignature", "thought_signature", "partMetadata",
                        "part_metadata", "videoMetadata", "video_metadata", "mediaResolution",
                        "media_resolution"})
#: Part kinds this server cannot pass on, and what they are.
_REFUSED_PARTS = {"inlineData": "an inlineData part (an image, audio or file)",
                  "fileData": "a fileData part (a file by URI)",
                  "executableCode": "an executableCode part (Google's code execution)",
                  "codeExecutionResult": "a codeExecutionResult part (Google's code execution)"}
#: Tool kinds that run on Google's servers only.
_GOOGLE_TOOLS = ("googleSearch", "googleSearchRetrieval", "codeExecution", "urlContext",
                 "retrieval", "fileSearch", "googleMaps", "computerUse", "enterpriseWebSearch")
#: Gemini schema keys whose integer values the API's JSON sends as strings (int64).
_COUNTS = frozenset({"minItems", "maxItems", "minLength", "maxLength", "minProperties",
                     "maxProperties"})
#: HTTP status -> Google's canonical error status.
_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
           404: "NOT_FOUND", 405: "INVALID_ARGUMENT", 408: "DEADLINE_EXCEEDED",
           409: "ABORTED", 411: "INVALID_ARGUMENT", 413: "INVALID_ARGUMENT",
           414: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 431: "INVALID_ARGUMENT",
           499: "CANCELLED", 500: "INTERNAL", 501: "UNIMPLEMENTED", 502: "UNAVAILABLE",
           503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED", 505: "INVALID_ARGUMENT"}
#: Chat keys (as ``tackroom serve``'s strict reader names them) -> the Gemini request's.
_CHAT_KEYS = {"temperature": "generationConfig.temperature", "top_p": "generationConfig.topP",
              "top_k": "generationConfig.topK", "max_tokens": "generationConfig.maxOutputTokens",
              "stop": "generationConfig.stopSequences", "seed": "generationConfig.seed",
              "presence_penalty": "generationConfig.presencePenalty",
              "frequency_penalty": "generationConfig.frequencyPenalty",
              "logprobs": "generationConfig.responseLogprobs",
              "top_logprobs": "generationConfig.logprobs",
              "response_format": "generationConfig.responseMimeType",
              "tool_choice": "toolConfig", "messages": "contents", "tools": "tools"}
#: ``generationConfig`` keys -> chat keys, and what each must be.
_CONFIG = {"temperature": ("temperature", "a number"), "topP": ("top_p", "a number"),
           "topK": ("top_k", "an integer"), "maxOutputTokens": ("max_tokens", "an integer"),
           "seed": ("seed", "an integer"), "presencePenalty": ("presence_penalty", "a number"),
           "frequencyPenalty": ("frequency_penalty", "a number"),
           "logprobs": ("top_logprobs", "an integer")}
#: ``generationConfig`` keys read here (the rest go to ``gemini_config``).
_READ_CONFIG = frozenset({*_CONFIG, "stopSequences", "candidateCount", "responseLogprobs",
                          "responseMimeType", "responseSchema", "responseJsonSchema",
                          "responseModalities"})
#: Chat finish reasons -> Gemini's (a call ends a turn with ``STOP`` in Gemini).
_FINISH = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS",
           "content_filter": "SAFETY"}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


@functools.cache
def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def _field(obj: dict[str, Any], name: str) -> Any:
    """``obj[name]``, or its snake_case spelling (the REST docs' examples use both)."""
    value = obj.get(name)
    return obj.get(_snake(name)) if value is None else value


def _bad(message: str, where: str | None = None) -> ApiError:
    return ApiError(400, message, param=where)


# ---------------------------------------------------------------- request
def json_schema(schema: Any) -> Any:
    """A Gemini ``Schema`` as JSON Schema: lower-case types, ``nullable`` as a null type.

    Counts sent as strings (the API's int64s) become integers; ``propertyOrdering``
    (the properties' order is kept by the object itself) is dropped. A schema
    already in JSON Schema comes back equal.
    """
    if isinstance(schema, list):
        return [json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        key = _camel(key) if "_" in key and key not in ("$defs", "$ref") else key
        if key in ("propertyOrdering", "nullable"):
            continue
        if key == "type" and isinstance(value, str):
            if value.upper() == "TYPE_UNSPECIFIED":
                continue
            value = value.lower()
        elif key in ("properties", "$defs", "definitions", "patternProperties") \
                and isinstance(value, dict):
            value = {k: json_schema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not", "anyOf", "oneOf", "allOf",
                     "prefixItems"):
            value = json_schema(value)
        elif key in _COUNTS and isinstance(value, str) and value.isdigit():
            value = int(value)
        out[key] = value
    if schema.get("nullable") is True:
        kind = out.get("type")
        if isinstance(kind, str):
            out["type"] = [kind, "null"]
        elif isinstance(kind, list) and "null" not in kind:
            out["type"] = [*kind, "null"]
        elif kind is None and isinstance(out.get("anyOf"), list):
            out["anyOf"] = [*out["anyOf"], {"type": "null"}]
    return out


def _tools(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise _bad("'tools' must be a list of {\"functionDeclarations\": [...]}", "tools")
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise _bad(f"{where} must be an object", where)
        for kind in _GOOGLE_TOOLS:
            if _field(tool, kind) is not None:
                raise _bad(f"{where}.{kind} is a tool that runs on Google's servers; this "
                           "server offers the model functionDeclarations only", where)
        decls = _field(tool, "functionDeclarations")
        if decls is None:
            raise _bad(f"{where} has no functionDeclarations (keys: "
                       f"{', '.join(sorted(tool))[:120]})", where)
        if not isinstance(decls, list):
            raise _bad(f"{where}.functionDeclarations must be a list", where)
        for j, decl in enumerate(decls):
            here = f"{where}.functionDeclarations[{j}]"
            if not isinstance(decl, dict) or not isinstance(decl.get("name"), str) \
                    or not decl["name"]:
                raise _bad(f"{here} must be an object with a string 'name'", here)
            fn: dict[str, Any] = {"name": decl["name"]}
            if isinstance(decl.get("description"), str):
                fn["description"] = decl["description"]
            raw = _field(decl, "parametersJsonSchema")
            params = raw if raw is not None else _field(decl, "parameters")
            if params is not None and not isinstance(params, dict):
                raise _bad(f"{here}.parameters must be a schema object", here)
            try:
                fn["parameters"] = params if raw is not None else json_schema(params) \
                    if params is not None else {"type": "object", "properties": {}}
            except RecursionError:  # a hostile schema nested as deep as JSON allows
                raise _bad(f"{here}.parameters is nested too deeply", here) from None
            out.append({"type": "function", "function": fn})
    return out


def _tool_choice(config: Any) -> Any:
    if not isinstance(config, dict):
        raise _bad("'toolConfig' must be an object", "toolConfig")
    calling = _field(config, "functionCallingConfig")
    if calling is None:
        return None
    if not isinstance(calling, dict):
        raise _bad("toolConfig.functionCallingConfig must be an object", "toolConfig")
    mode = str(calling.get("mode") or "AUTO").upper()
    allowed = _field(calling, "allowedFunctionNames") or []
    if mode in ("NONE", "AUTO", "VALIDATED", "MODE_UNSPECIFIED"):
        return "none" if mode == "NONE" else "auto"
    if mode != "ANY":
        raise _bad(f"toolConfig.functionCallingConfig.mode is {json.dumps(mode)[:40]}; the "
                   "modes are AUTO, ANY, NONE, VALIDATED", "toolConfig")
    if not isinstance(allowed, list) or len(allowed) > 1:
        raise _bad("toolConfig.functionCallingConfig.allowedFunctionNames with more than "
                   "one name is not supported: give one, or none (any function)", "toolConfig")
    if allowed:
        return {"type": "function", "function": {"name": str(allowed[0])}}
    return "required"


def _config(config: Any, chat: dict[str, Any]) -> None:
    """``generationConfig`` read into ``chat`` (the keys not read kept in ``gemini_config``)."""
    if not isinstance(config, dict):
        raise _bad("'generationConfig' must be an object", "generationConfig")
    config = {_camel(k): v for k, v in config.items()}
    for key, (chat_key, kind) in _CONFIG.items():
        value = config.get(key)
        if value is None:
            continue
        if kind == "an integer" and isinstance(value, float) and value.is_integer():
            value = int(value)  # google-genai types topK as a float: 64.0 (as Google reads it)
        ok = isinstance(value, int) if kind == "an integer" else isinstance(value, (int, float))
        if not ok or isinstance(value, bool):
            raise _bad(f"generationConfig.{key} must be {kind}, not "
                       f"{json.dumps(value)[:40]}", f"generationConfig.{key}")
        chat[chat_key] = value
    count = config.get("candidateCount")
    if count is not None and count != 1:
        raise _bad(f"generationConfig.candidateCount is {json.dumps(count)[:40]}; this server "
                   "returns one candidate per request: send several requests instead",
                   "generationConfig.candidateCount")
    stops = config.get("stopSequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise _bad("generationConfig.stopSequences must be a list of strings",
                       "generationConfig.stopSequences")
        chat["stop"] = stops
    wants = config.get("responseLogprobs")
    if wants is not None:
        if not isinstance(wants, bool):
            raise _bad("generationConfig.responseLogprobs must be true or false",
                       "generationConfig.responseLogprobs")
        chat["logprobs"] = wants
    modalities = config.get("responseModalities")
    if modalities is not None and (not isinstance(modalities, list) or [
            str(m).upper() for m in modalities] not in ([], ["TEXT"])):
        raise _bad(f"generationConfig.responseModalities is {json.dumps(modalities)[:60]}; "
                   "this server answers with text only ([\"TEXT\"])",
                   "generationConfig.responseModalities")
    fmt = _response_format(config)
    if fmt is not None:
        chat["response_format"] = fmt
    rest = {k: v for k, v in config.items() if k not in _READ_CONFIG}
    if rest:
        chat["gemini_config"] = rest


def _response_format(config: dict[str, Any]) -> dict[str, Any] | None:
    mime = config.get("responseMimeType")
    schema = config.get("responseJsonSchema")
    if schema is None and config.get("responseSchema") is not None:
        schema = json_schema(config["responseSchema"])
    if mime in (None, "text/plain") and schema is None:
        return None
    if mime not in (None, "application/json"):
        raise _bad(f"generationConfig.responseMimeType {json.dumps(mime)[:60]} is not "
                   "supported: use text/plain or application/json",
                   "generationConfig.responseMimeType")
    if schema is None:
        return {"type": "json_object"}
    return {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _bad(f"{where}.text must be a string", where)
    return value


def _system(value: Any) -> str:
    if isinstance(value, str):
        return value
    parts = value.get("parts") if isinstance(value, dict) else None
    if not isinstance(parts, list):
        raise _bad("'systemInstruction' must be a string or {\"parts\": [{\"text\": ...}]}",
                   "systemInstruction")
    texts = []
    for k, part in enumerate(parts):
        where = f"systemInstruction.parts[{k}]"
        if not isinstance(part, dict) or "text" not in part:
            raise _bad(f"{where} must be a text part; the system instruction is text only",
                       where)
        texts.append(_text(part["text"], where))
    return "\n".join(texts)


def _part_kind(part: Any, where: str) -> str | None:
    """Which data a part holds: ``text``, ``functionCall``, ``functionResponse``; ``None``: none."""
    if not isinstance(part, dict):
        raise _bad(f"{where} must be an object (a part)", where)
    for kind in ("text", "functionCall", "functionResponse"):
        if part.get(kind) is not None:  # as clients send them: no snake-case look-up
            return kind
    for kind in ("function_call", "function_response"):
        if part.get(kind) is not None:
            return _camel(kind)
    for kind, what in _REFUSED_PARTS.items():
        if _field(part, kind) is not None:
            raise _bad(f"{where} is {what}; this server passes on text, functionCall and "
                       "functionResponse parts only", where)
    if all(k in _PART_META for k in part):
        return None  # e.g. a lone thoughtSignature: nothing to pass on
    raise _bad(f"{where} has no text, functionCall or functionResponse (keys: "
               f"{', '.join(sorted(part))[:120]})", where)


class _Calls:
    """The calls of the latest model content, waiting for their functionResponses."""

    def __init__(self) -> None:
        self.waiting: list[tuple[str, str, str | None]] = []  # chat id, name, client's id

    def answer(self, response: dict[str, Any], where: str) -> tuple[str, str]:
        name = response.get("name")
        if not isinstance(name, str):
            raise _bad(f"{where}.functionResponse needs a string 'name'", where)
        sent_id = response.get("id")
        pick = next((k for k, (_, _, cid) in enumerate(self.waiting)
                     if sent_id and cid == sent_id), None)
        if pick is None:
            pick = next((k for k, (_, n, _) in enumerate(self.waiting) if n == name), None)
        if pick is None:
            raise _bad(f"{where}.functionResponse for {json.dumps(name)[:80]} answers no "
                       "functionCall of the model content just before it; send each "
                       "functionResponse right after the model's functionCall", where)
        chat_id, _, _ = self.waiting.pop(pick)
        return chat_id, name


def _arguments(call: dict[str, Any], where: str) -> str:
    args = call.get("args")
    if args is None:
        return "{}"
    if not isinstance(args, dict):
        raise _bad(f"{where}.functionCall.args must be an object", where)
    return json.dumps(args, ensure_ascii=False)


def _response_text(response: Any) -> str:
    """A ``functionResponse.response`` as the tool message's text.

    Google's convention is ``{"output": ...}`` (or ``{"error": ...}``): a lone
    string ``output`` is the text itself; anything else its JSON.
    """
    if isinstance(response, dict) and list(response) == ["output"] \
            and isinstance(response["output"], str):
        return response["output"]
    return json.dumps(response, ensure_ascii=False)


def _model_message(i: int, parts: list[Any], calls: _Calls) -> dict[str, Any]:
    texts: list[str] = []
    thoughts: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    calls.waiting = []
    for k, part in enumerate(parts):
        where = f"contents[{i}].parts[{k}]"
        kind = _part_kind(part, where)
        if kind == "text":
            (thoughts if part.get("thought") is True else texts).append(
                _text(part["text"], where))
        elif kind == "functionCall":
            call = _field(part, "functionCall")
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                raise _bad(f"{where}.functionCall needs a string 'name'", where)
            chat_id = f"call_{i}_{len(tool_calls)}"
            tool_calls.append({"id": chat_id, "type": "function",
                               "function": {"name": call["name"],
                                            "arguments": _arguments(call, where)}})
            sent_id = call.get("id")
            calls.waiting.append((chat_id, call["name"],
                                  sent_id if isinstance(sent_id, str) else None))
        elif kind == "functionResponse":
            raise _bad(f"{where} is a functionResponse in a model content; send it in a "
                       "user content after the model's functionCall", where)
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    if thoughts:
        message["reasoning_content"] = "".join(thoughts)
    return message


def _user_messages(i: int, parts: list[Any], calls: _Calls) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    texts: list[str] = []

    def flush() -> None:
        if texts:
            content: Any = texts[0] if len(texts) == 1 else \
                [{"type": "text", "text": t} for t in texts]
            out.append({"role": "user", "content": content})
            texts.clear()

    for k, part in enumerate(parts):
        where = f"contents[{i}].parts[{k}]"
        kind = _part_kind(part, where)
        if kind == "text":
            texts.append(_text(part["text"], where))
        elif kind == "functionResponse":
            flush()
            response = _field(part, "functionResponse")
            if not isinstance(response, dict):
                raise _bad(f"{where}.functionResponse must be an object", where)
            chat_id, name = calls.answer(response, where)
            out.append({"role": "tool", "tool_call_id": chat_id, "name": name,
                        "content": _response_text(response.get("response"))})
        elif kind == "functionCall":
            raise _bad(f"{where} is a functionCall in a user content; calls are the "
                       "model's (role \"model\")", where)
    flush()
    return out


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    system = _field(body, "systemInstruction")
    if system is not None:
        out.append({"role": "system", "content": _system(system)})
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise _bad("'contents' must be a non-empty list of {\"role\": ..., \"parts\": [...]}",
                   "contents")
    calls = _Calls()
    for i, content in enumerate(contents):
        where = f"contents[{i}]"
        if not isinstance(content, dict):
            raise _bad(f"{where} must be an object with 'role' and 'parts'", where)
        role = content.get("role") or "user"
        if role not in ROLES:
            raise _bad(f"{where} has role {json.dumps(role)[:40]}; the roles are user and "
                       "model", where)
        parts = content.get("parts")
        if not isinstance(parts, list):
            raise _bad(f"{where}.parts must be a list of parts", where)
        if role == "model":
            out.append(_model_message(i, parts, calls))
        else:
            out.extend(_user_messages(i, parts, calls))
    return out


def _stream_query(query: str | None) -> None:
    """Refuse a stream asked for as a JSON array (no ``alt=sse``: Google's default)."""
    alt = parse_qs(query or "").get("alt", [""])[-1]
    if alt != "sse":
        raise _bad("streamGenerateContent is answered as server-sent events only: add "
                   "?alt=sse to the URL (google-genai and Gemini CLI do); a JSON-array "
                   "stream is not supported", "alt")


def to_chat(body: Any, match: re.Match[str]) -> dict[str, Any]:
    """The chat-completions body a Gemini request means (see the module docstring)."""
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object")
    groups = match.groupdict()
    method = groups.get("method") or "generateContent"
    if method == "countTokens":
        inner = _field(body, "generateContentRequest")
        if isinstance(inner, dict):
            body = inner
    stream = method == "streamGenerateContent"
    if stream:
        _stream_query(groups.get("query"))
    if _field(body, "cachedContent") is not None:
        raise _bad("'cachedContent' is not supported (this server keeps no caches): send "
                   "the whole contents", "cachedContent")
    chat: dict[str, Any] = {"model": unquote(groups.get("model") or ""),
                            "messages": _messages(body), "stream": stream}
    tools = _tools(_field(body, "tools")) if _field(body, "tools") is not None else None
    if tools:
        chat["tools"] = tools
    tool_config = _field(body, "toolConfig")
    if tool_config is not None:
        choice = _tool_choice(tool_config)
        if choice is not None:
            chat["tool_choice"] = choice
    config = _field(body, "generationConfig")
    if config is not None:
        _config(config, chat)
    if body.get("return_token_ids") is True or body.get("returnTokenIds") is True:
        chat["return_token_ids"] = True
    return chat


# ------------------------------------------------------------------ reply
def _args(arguments: Any) -> dict[str, Any]:
    """A call's arguments as the object Gemini sends (``{}`` when they are not one)."""
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments) if isinstance(arguments, str) and arguments else {}
    except (ValueError, RecursionError):
        return {}  # the model's malformed call: the recorded turn keeps its text
    return value if isinstance(value, dict) else {}


def _call_parts(c: Completion) -> list[dict[str, Any]]:
    out = []
    for tc in c.tool_calls:
        d = tc if isinstance(tc, dict) else tc.to_dict()
        fn = d.get("function") or {}
        out.append({"functionCall": {"name": fn.get("name") or "",
                                     "args": _args(fn.get("arguments"))}})
    return out


def _usage(c: Completion, candidates: int | None = None) -> dict[str, Any]:
    n = c.completion_tokens if candidates is None else candidates
    return {"promptTokenCount": c.prompt_tokens, "candidatesTokenCount": n,
            "totalTokenCount": c.prompt_tokens + n,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": c.prompt_tokens}]}


def _logprobs_result(entries: list[dict[str, Any]], ids: list[int] | None) -> dict[str, Any]:
    chosen = []
    for k, e in enumerate(entries):
        one: dict[str, Any] = {"token": e.get("token", ""), "logProbability": e.get("logprob")}
        if ids is not None and k < len(ids):
            one["tokenId"] = ids[k]
        chosen.append(one)
    out: dict[str, Any] = {"chosenCandidates": chosen}
    if any(e.get("top_logprobs") for e in entries):
        out["topCandidates"] = [{"candidates": [
            {"token": t.get("token", ""), "logProbability": t.get("logprob")}
            for t in e.get("top_logprobs") or []]} for e in entries]
    return out


def _response(c: Completion, shape: Shape, parts: list[dict[str, Any]], positions: list[int],
              *, rid: str, last: bool, first: bool, sent: int) -> dict[str, Any]:
    """One ``GenerateContentResponse``: the whole reply, or a chunk of a stream.

    ``positions`` are the tokens it carries (their log-probs, ids); ``last`` gives
    it the finish and the whole usage, ``first`` the prompt's token ids.
    """
    cand: dict[str, Any] = {"content": {"parts": parts or [{"text": ""}], "role": "model"}}
    if last:
        cand["finishReason"] = _FINISH.get(c.finish_reason, "OTHER")
    cand["index"] = 0
    ids = c.token_ids or []
    if c.logprob_entries is not None:
        entries = [c.logprob_entries[k] for k in positions if k < len(c.logprob_entries)]
        shown = [ids[k] for k in positions if k < len(ids)] \
            if len(ids) == len(c.logprob_entries) else None
        cand["logprobsResult"] = _logprobs_result(entries, shown)
        if entries:
            cand["avgLogprobs"] = sum(float(e.get("logprob") or 0.0) for e in entries) \
                / len(entries)
    out: dict[str, Any] = {"candidates": [cand], "usageMetadata": _usage(c, None if last
                                                                          else sent),
                           "modelVersion": shape.model, "responseId": rid}
    if shape.token_ids and c.token_ids is not None:  # the extra keys of every dialect
        out["token_ids"] = [ids[k] for k in positions if k < len(ids)]
        if c.logprobs is not None:
            out["logprobs"] = [float(c.logprobs[k]) for k in positions
                               if k < len(c.logprobs)]
    if first and shape.token_ids and c.prompt_token_ids is not None:
        out["prompt_token_ids"] = list(c.prompt_token_ids)
    return out


def _response_id() -> str:
    """An id like Google's (URL-safe base64 of random bytes)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def reply(c: Completion, shape: Shape, body: Any) -> dict[str, Any]:
    """The ``GenerateContentResponse`` of a whole reply."""
    parts: list[dict[str, Any]] = [{"text": c.content}] if c.content else []
    n = max(len(c.token_ids or []), len(c.logprob_entries or []))
    return _response(c, shape, parts + _call_parts(c), list(range(n)), rid=_response_id(),
                     last=True, first=True, sent=n)


def _runs(c: Completion) -> list[tuple[str, list[int]]]:
    """The reply's text in runs, each with the token positions it spans.

    One run per token that adds text (tokens that add none, such as the stop
    token, ride with the run before, or the first); without per-token pieces,
    the whole text is one run.
    """
    if c.pieces is None:
        n = max(len(c.token_ids or []), len(c.logprob_entries or []))
        return [(c.content or "", list(range(n)))] if c.content or n else []
    runs: list[tuple[str, list[int]]] = []
    for k, delta in enumerate(content_deltas(c, c.pieces)):
        if delta or not runs:
            runs.append((delta, [k]))
        else:
            runs[-1][1].append(k)
    return runs


def events(c: Completion, shape: Shape, body: Any) -> Iterator[tuple[str | None, Any]]:
    """The streamed reply: ``GenerateContentResponse`` chunks as bare ``data:`` lines."""
    rid = _response_id()
    runs = _runs(c) or [("", [])]
    sent = 0
    for n, (text, positions) in enumerate(runs):
        last = n == len(runs) - 1
        parts: list[dict[str, Any]] = [{"text": text}] if text else []
        sent += len(positions)
        yield None, _response(c, shape, parts + (_call_parts(c) if last else []), positions,
                              rid=rid, last=last, first=n == 0, sent=sent)


def count(n: int) -> dict[str, Any]:
    """The ``countTokens`` answer for ``n`` prompt tokens."""
    return {"totalTokens": n, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": n}]}


def models(entries: list[dict[str, Any]], match: re.Match[str]) -> dict[str, Any]:
    """``GET /v1beta/models[/MODEL]``: the served models as Gemini ``Model`` objects."""
    shown = [{"name": f"models/{e['id']}", "baseModelId": e["id"], "version": "tackroom",
              "displayName": e["id"], "supportedGenerationMethods":
              ["generateContent", "streamGenerateContent", "countTokens"]} for e in entries]
    name = match.groupdict().get("model")
    if name is None:
        return {"models": shown}
    for model in shown:
        if model["baseModelId"] == unquote(name):
            return model
    raise ApiError(404, f"models/{unquote(name)[:200]} is not found. Served models: "
                        f"{', '.join(e['id'] for e in entries)}")


def error(e: ApiError) -> dict[str, Any]:
    """Google's error object, naming the Gemini request's keys where a chat key was named."""
    message = e.message
    for chat_key, key in _CHAT_KEYS.items():
        message = message.replace(f"'{chat_key}'", f"'{key}'")
    out: dict[str, Any] = {"code": e.status, "message": message,
                           "status": _STATUS.get(e.status, "UNKNOWN")}
    if e.code:  # the reason a client can act on, as Google's ErrorInfo carries it
        out["details"] = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                           "reason": e.code.upper(), "domain": "tackroom"}]
    return {"error": out}


GEMINI = register_dialect(Dialect(
    name="gemini",
    summary="Gemini API: POST /v1beta/models/MODEL:generateContent, "
            ":streamGenerateContent?alt=sse, :countTokens (Gemini CLI)",
    routes=(Route("POST", _MODEL_PATH + r":(?P<method>generateContent|streamGenerateContent)"
                  + _QUERY),
            Route("POST", _MODEL_PATH + r":(?P<method>countTokens)" + _QUERY, "count_tokens"),
            Route("GET", r"/v1beta/models", "models"),
            Route("GET", r"/v1beta/models/(?P<model>[^/:?]+)", "models")),
    to_chat=to_chat, reply=reply, events=events, error=error, count=count, models=models))
