"""``tackroom serve MODEL_DIR``: an OpenAI-compatible HTTP server over the ``hf`` backend.

A local model is then evaluated through exactly the same ``openai`` policy as
a vLLM or SGLang server (``--policy openai:NAME --base-url http://127.0.0.1:8000/v1``),
so "local" and "served" results are comparable by construction, and anything
that speaks the OpenAI API (the ``openai`` SDK, curl, other harnesses) can
drive a model that ``tackroom model init`` built or tackroom trained.

Endpoints::

    GET  /v1/models              the base model (its directory name) and one entry per adapter
    GET  /v1/models/{name}
    POST /v1/chat/completions    messages, tools, sampling, logprobs, stream, token ids
    POST /v1/load_lora_adapter   {"lora_name", "lora_path"}: serve a peft adapter under a name
    POST /v1/unload_lora_adapter {"lora_name"}: stop serving it
    GET  /health                 200 when up (no key needed)

Every completion names the adapter that wrote it: ``model`` is the adapter's
name (or the base model's), and the ``X-Tackroom-Adapter`` header says the same
(``base`` for the base model).

Choices, and why:

* **Standard library only** (``ThreadingHTTPServer``): no ASGI stack to install
  for a server that mostly waits on ``generate``. Each HTTP connection gets a
  thread; every request's coroutine is submitted to *one* asyncio event loop
  in a background thread (``run_coroutine_threadsafe``), so
  :class:`~tackroom.policies.hf_policy.HFPolicy` batches concurrent requests
  from different connections exactly as it batches concurrent ``act`` calls.
  All tokenizer work also runs on that loop thread: Hugging Face fast
  tokenizers are not safe to share between threads.
* **Requests that come back together are batched together.** HTTP clients
  return a few to tens of milliseconds apart (threads share the GIL), so after
  a batch the server holds new requests briefly until as many are back as it
  just answered (at most a quarter of the batch's time, ``coalesce_ms``); without
  this, 8 clients fall into a 7 + 1 rhythm and lose ~30% throughput. A lone
  client never waits.
* **The wire shape is vLLM's**: ``return_token_ids: true`` adds ``token_ids`` to
  the choice and ``prompt_token_ids`` at the top level; log-probs are those of
  the sampled tokens (``top_logprobs`` must be 0); the stop token
  (``<|im_end|>``) is part of ``token_ids`` and ``logprobs`` as in vLLM — the
  model chose to stop, and training needs that token — but never of the text.
* **Tool calls** are read from ``<tool_call>`` blocks when the request offers
  tools (and ``tool_choice`` is not ``"none"``), as vLLM's ``hermes`` parser does,
  and with the same fallback: if any block is not valid JSON with a ``name``, the
  whole reply comes back as plain text content — never an HTTP error. (The
  in-process ``hf`` policy keeps such a block as a call with raw ``arguments``
  instead. Both are parse errors to the harness, but with different feedback —
  "no tool call found" here, "arguments ... not valid JSON" there — so served
  and in-process episodes part ways after such a turn.)
* **Streaming is replayed**: a request is generated in its batch, then sent as
  Server-Sent Events, one chunk per token (text deltas and log-probs), then the
  tool-call deltas, the finish reason and, when asked, a usage chunk. The
  chunks concatenate to exactly the non-streaming reply; the first byte comes
  when the batch is done, not token by token.
* **Log-probs** are ``log_softmax`` of the model's unmodified logits (see
  ``HFPolicy``), whatever ``temperature`` / ``top_p`` are.
* **Sampling knobs we cannot honour are refused** (400, naming the field):
  ``n > 1``, penalties, ``top_k``, ``min_p``, ``logit_bias``, ``top_logprobs > 0``,
  ``response_format`` other than text, ``tool_choice`` ``"required"`` or a named
  function. A silently ignored knob would make a comparison quietly wrong.
* **Hostile clients are contained.** The listen backlog is 1024 (the standard
  library's 5 resets connections when a few dozen clients connect at once); a
  connection silent for ``read_timeout`` (30 s) while a request is awaited is
  closed (408 when its body stops short); a body over ``max_body`` (8 MB) is a
  413 sent before the body is read. Every answer, on every path and method,
  is OpenAI's JSON error shape (404 unknown path, 405 wrong method, 400 for a
  malformed request line); ``NaN``/``Infinity``, unknown roles and content parts
  other than text (images, audio) are refused with a 400 — never silently dropped.
* **Adapters load and unload at run time** with vLLM's endpoints and answers
  (``VLLM_ALLOW_RUNTIME_LORA_UPDATING``): 200 with a plain-text ``Success: ...``
  line; 400 for a missing field, a name already served (the base model's too) or
  an adapter that does not load on this model; 404 for a path with no adapter
  and for unloading a name that is not loaded. ``tackroom train`` with
  ``rollout.backend = "openai"`` loads each new weight version this way. Loading
  runs on the event-loop thread, between batches' admissions, so a request is
  answered by the adapter it named when it was admitted; an unloaded adapter
  stops being offered at once and is dropped when the requests using it are done.
* ``stop`` strings are applied to the finished text (generation is not cut
  short by them); the reply's tokens end with the one that completed the stop
  string, as in vLLM.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import hmac
import json
import re
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tackroom.core.errors import (
    ConfigError,
    ContextLengthExceeded,
    PolicyError,
    TackroomError,
)
from tackroom.core.policy import PolicyRequest, PolicyResponse, Sampling, ToolCall

__all__ = [
    "DEFAULT_MAX_TOKENS", "ApiError", "ChatRequest", "Completion", "ModelServer",
    "ServerThread", "build_completion", "completion_body", "parse_chat_request",
    "serve_main", "split_reply", "stream_chunks",
]

#: ``max_tokens`` when a request gives none (vLLM would allow the whole context;
#: a random model that never says ``<|im_end|>`` would then run for minutes).
DEFAULT_MAX_TOKENS = 2048
#: The largest request body accepted by default (bytes; ``max_body``).
MAX_BODY = 8 * 2**20
#: Seconds a connection may stay silent while the server waits for a request's
#: headers or body, or for the next request on a kept-alive connection (``read_timeout``).
READ_TIMEOUT = 30.0
#: The listen backlog: connections the kernel queues before the server accepts them.
LISTEN_BACKLOG = 1024
#: Message roles the chat template renders as the model was trained on.
ROLES = ("system", "user", "assistant", "tool")
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
# The same blocks tackroom.policies.chat_format.parse_tool_calls reads (an
# unterminated block, cut off by max_tokens, counts too).
_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)


# ------------------------------------------------------------------ errors
class ApiError(Exception):
    """An HTTP error answered in OpenAI's shape: ``{"error": {message, type, param, code}}``."""

    TYPES = {400: "invalid_request_error", 401: "authentication_error",
             404: "invalid_request_error", 405: "invalid_request_error",
             408: "invalid_request_error", 411: "invalid_request_error",
             413: "invalid_request_error", 414: "invalid_request_error",
             431: "invalid_request_error", 500: "server_error",
             505: "invalid_request_error"}

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message,
                          "type": self.TYPES.get(self.status, "server_error"),
                          "param": self.param, "code": self.code}}


# ----------------------------------------------------------------- request
@dataclass
class ChatRequest:
    """A validated chat-completions request."""

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


def _check_message(i: int, m: Any) -> None:
    """Refuse a message the chat template would render wrongly or silently shorten."""
    where = f"messages[{i}]"
    message_role(i, m)
    content = m.get("content")
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise ApiError(400, f"{where}.content must be a string, null or a list of "
                            "text parts", param=where)
    for k, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind != "text":
            what = f"a {json.dumps(kind)[:40]} part" if isinstance(kind, str) else "a part " \
                "without a string 'type'"
            raise ApiError(400, f"{where}.content[{k}] is {what}; this model takes only "
                                "text parts ({\"type\": \"text\", \"text\": ...})",
                           param=where)
        if not isinstance(part.get("text"), str):
            raise ApiError(400, f"{where}.content[{k}] needs a string 'text'", param=where)


def _refuse(key: str, why: str) -> ApiError:
    return ApiError(400, f"'{key}' {why} is not supported by tackroom serve (the hf backend "
                         "cannot honour it, and ignoring it would change the results)", param=key)


def parse_chat_request(body: Any, served: dict[str, str | None], *,
                       default_max_tokens: int = DEFAULT_MAX_TOKENS) -> ChatRequest:
    """Validate a ``/v1/chat/completions`` body; ``served`` maps model names to adapters.

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
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list", param="messages")
    for i, m in enumerate(messages):
        _check_message(i, m)
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
    if _number(body, "top_k", -1, integer=True) not in (-1, 0):
        raise _refuse("top_k", "other than -1/0")
    if _number(body, "min_p", 0.0):
        raise _refuse("min_p", "other than 0")
    if body.get("logit_bias"):
        raise _refuse("logit_bias", "")
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise _refuse("response_format", "other than {\"type\": \"text\"}")

    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise ApiError(400, "'tools' must be a list", param="tools")
        for i, t in enumerate(tools):
            fn = t.get("function") if isinstance(t, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise ApiError(400, f"tools[{i}] must be {{\"type\": \"function\", "
                                    "\"function\": {\"name\": ...}}", param=f"tools[{i}]")
    choice = body.get("tool_choice")
    if choice not in (None, "auto", "none"):
        raise _refuse("tool_choice", f"= {json.dumps(choice)[:60]} (use \"auto\" or \"none\")")

    temperature = _number(body, "temperature", 1.0, lo=0.0, hi=2.0)
    top_p = _number(body, "top_p", 1.0, lo=0.0, hi=1.0, lo_open=True)
    max_tokens = body.get("max_completion_tokens")
    key = "max_completion_tokens"
    if max_tokens is None:
        key = "max_tokens"
    max_tokens = _number(body, key, default_max_tokens, lo=1, integer=True)
    seed = _number(body, "seed", None, lo=-(2**63), hi=2**64 - 1, integer=True)

    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise ApiError(400, "'logprobs' must be true or false", param="logprobs")
    top = _number(body, "top_logprobs", 0, lo=0, integer=True)
    if top:
        raise _refuse("top_logprobs", f"= {top} (only the sampled token's log-prob is "
                                      "returned; use 0)")
    stop = body.get("stop")
    if stop is None:
        stops: list[str] = []
    elif isinstance(stop, str):
        stops = [stop]
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stops = list(stop)
    else:
        raise ApiError(400, "'stop' must be a string or a list of strings", param="stop")
    stops = [s for s in stops if s]

    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise ApiError(400, "'stream' must be true or false", param="stream")
    opts = body.get("stream_options")
    if opts is not None and (not isinstance(opts, dict) or not stream):
        raise ApiError(400, "'stream_options' needs \"stream\": true and must be an object",
                       param="stream_options")
    return ChatRequest(
        model=model, adapter=served[model], messages=messages, tools=tools or None,
        parse_tools=bool(tools) and choice != "none",
        sampling=Sampling(temperature=float(temperature), top_p=float(top_p),
                          max_tokens=int(max_tokens), seed=seed, logprobs=bool(logprobs)),
        stop=stops, logprobs=bool(logprobs), stream=bool(stream),
        include_usage=bool((opts or {}).get("include_usage")),
        return_token_ids=body.get("return_token_ids") is True)


# ------------------------------------------------------------------- reply
def _well_formed(block: str) -> bool:
    try:
        obj = json.loads(block.strip())
    except (ValueError, RecursionError):
        return False
    return isinstance(obj, dict) and isinstance(obj.get("name"), str)


def split_reply(text: str, parse_tools: bool) -> tuple[str | None, list[ToolCall]]:
    """The message ``content`` and ``tool_calls`` of a raw completion text.

    Without tools the text is the content, as is. With tools, ``<tool_call>``
    blocks become calls and the rest (stripped) the content — ``None`` when only
    calls remain — exactly as the in-process ``hf`` policy splits it. If any block
    is malformed the whole text is the content and there are no calls (vLLM's
    ``hermes`` parser does the same): a broken call is the model's error, shown
    to the harness, never a server error.
    """
    from tackroom.policies.chat_format import parse_tool_calls

    if not parse_tools or "<tool_call>" not in text:
        return (text.strip() if parse_tools else text), []
    if not all(_well_formed(m.group(1)) for m in _BLOCK.finditer(text)):
        return text, []
    rest, calls = parse_tool_calls(text)
    return (None if not rest and calls else rest), calls


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: byte → the printable character that stands for it."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs), strict=True))


class _Vocab:
    """Per-token bytes and visible text for a tokenizer (cached; use from one thread)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.special = set(tokenizer.all_special_ids)
        self.added = {i: t.content for i, t in tokenizer.added_tokens_decoder.items()}
        self.byte_of = {c: b for b, c in _bytes_to_unicode().items()}
        self._cache: dict[int, bytes] = {}

    def token_bytes(self, tid: int) -> bytes:
        b = self._cache.get(tid)
        if b is None:
            if tid in self.added:
                b = self.added[tid].encode()
            else:
                piece = self.tokenizer.convert_ids_to_tokens(tid)
                if isinstance(piece, str) and all(c in self.byte_of for c in piece):
                    b = bytes(self.byte_of[c] for c in piece)
                else:  # not a byte-level vocabulary: the token's own decoding
                    b = self.tokenizer.decode([tid]).encode()
            self._cache[tid] = b
        return b

    def pieces(self, ids: list[int]) -> list[str]:
        """The visible text each token adds; joined, exactly ``decode(ids, skip_special)``."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        out = [("" if t in self.special else decoder.decode(self.token_bytes(t))) for t in ids]
        if out:
            out[-1] += decoder.decode(b"", final=True)
        full = self.tokenizer.decode(ids, skip_special_tokens=True)
        if "".join(out) == full:
            return out
        # A tokenizer whose decoding is not plain byte concatenation: slower, still exact.
        out, prev = [], ""
        for k in range(1, len(ids) + 1):
            text = self.tokenizer.decode(ids[:k], skip_special_tokens=True)
            if not text.startswith(prev) or not full.startswith(text):
                out.append("")
                continue
            out.append(text[len(prev):])
            prev = text
        if out:
            out[-1] += full[len(prev):]
        return out

    def logprob_entry(self, tid: int, logprob: float) -> dict[str, Any]:
        b = self.token_bytes(tid)
        return {"token": b.decode("utf-8", errors="replace"), "logprob": logprob,
                "bytes": list(b), "top_logprobs": []}


@dataclass
class Completion:
    """One finished reply, ready to be sent whole or as a stream.

    ``token_ids``, ``logprobs`` and ``pieces`` are aligned: ``pieces[k]`` is the
    visible text token ``k`` added (``""`` for the stop token).
    """

    content: str | None
    tool_calls: list[ToolCall]
    finish_reason: str
    token_ids: list[int]
    logprobs: list[float]
    pieces: list[str]
    prompt_tokens: int
    prompt_token_ids: list[int] | None = None
    logprob_entries: list[dict[str, Any]] | None = None
    #: The adapter that wrote the reply (``None``: the base model).
    adapter: str | None = None


def _find_stop(text: str, stops: list[str]) -> tuple[int, int] | None:
    """(start, end) of the earliest stop string in ``text``."""
    best = None
    for s in stops:
        i = text.find(s)
        if i >= 0 and (best is None or i < best[0]):
            best = (i, i + len(s))
    return best


def build_completion(response: PolicyResponse, req: ChatRequest, vocab: _Vocab,
                     stop_ids: list[int] | set[int],
                     prompt_token_ids: list[int] | None = None) -> Completion:
    """Turn the hf policy's answer into the reply for ``req`` (stop strings, tool calls)."""
    ids = [int(t) for t in (response.token_ids or [])]
    lps = [float(x) for x in (response.logprobs or [])]
    finish = response.finish_reason or "stop"
    by_token = finish == "stop" and bool(ids) and ids[-1] in stop_ids
    visible = ids[:-1] if by_token else ids
    pieces = vocab.pieces(visible) + ([""] if by_token else [])
    raw = "".join(pieces)
    hit = _find_stop(raw, req.stop) if req.stop else None
    if hit is not None:
        start, end = hit
        k, seen = 0, 0
        while k < len(pieces) and seen < end:
            seen += len(pieces[k])
            k += 1
        ids, lps, pieces = ids[:k], lps[:k], pieces[:k]
        raw, finish = raw[:start], "stop"
    content, calls = split_reply(raw, req.parse_tools)
    if calls and finish == "stop":
        finish = "tool_calls"
    entries = [vocab.logprob_entry(t, lp) for t, lp in zip(ids, lps, strict=False)] \
        if req.logprobs else None
    return Completion(content=content, tool_calls=calls, finish_reason=finish,
                      token_ids=ids, logprobs=lps, pieces=pieces,
                      prompt_tokens=response.prompt_tokens,
                      prompt_token_ids=prompt_token_ids, logprob_entries=entries)


def _usage(c: Completion) -> dict[str, int]:
    n = len(c.token_ids)
    return {"prompt_tokens": c.prompt_tokens, "completion_tokens": n,
            "total_tokens": c.prompt_tokens + n}


def completion_body(c: Completion, req: ChatRequest, *, rid: str | None = None,
                    created: int | None = None) -> dict[str, Any]:
    """The ``chat.completion`` object (non-streaming)."""
    message: dict[str, Any] = {"role": "assistant", "content": c.content}
    if c.tool_calls:
        message["tool_calls"] = [tc.to_dict() for tc in c.tool_calls]
    choice: dict[str, Any] = {
        "index": 0, "message": message, "finish_reason": c.finish_reason,
        "logprobs": {"content": c.logprob_entries, "refusal": None}
        if c.logprob_entries is not None else None,
    }
    out: dict[str, Any] = {
        "id": rid or f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
        "created": created or int(time.time()), "model": req.model,
        "choices": [choice], "usage": _usage(c),
    }
    if req.return_token_ids:  # vLLM's extension
        choice["token_ids"] = list(c.token_ids)
        out["prompt_token_ids"] = c.prompt_token_ids
    return out


def _content_deltas(c: Completion) -> list[str]:
    """What each token adds to ``content``; joined, exactly ``content``."""
    n = len(c.pieces)
    content = c.content or ""
    if not n:
        return []
    deltas = [""] * n
    start = "".join(c.pieces).find(content) if content else -1
    if start < 0:  # not one run of the text (tool blocks cut out of its middle)
        deltas[-1] = content
        return deltas
    sent, seen = 0, 0
    for k, piece in enumerate(c.pieces):
        seen += len(piece)
        upto = min(max(seen - start, 0), len(content))
        deltas[k] = content[sent:upto]
        sent = max(sent, upto)
    deltas[-1] += content[sent:]
    return deltas


def stream_chunks(c: Completion, req: ChatRequest, *, rid: str | None = None,
                  created: int | None = None) -> Iterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of a streamed reply (without ``[DONE]``)."""
    rid = rid or f"chatcmpl-{uuid.uuid4().hex}"
    created = created or int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None,
                                  "finish_reason": finish}
        choice.update(extra)
        out: dict[str, Any] = {"id": rid, "object": "chat.completion.chunk",
                               "created": created, "model": req.model, "choices": [choice]}
        if req.include_usage:
            out["usage"] = None
        return out

    first = chunk({"role": "assistant", "content": ""})
    if req.return_token_ids:
        first["prompt_token_ids"] = c.prompt_token_ids
    yield first
    for k, delta in enumerate(_content_deltas(c)):
        extra: dict[str, Any] = {}
        if c.logprob_entries is not None:
            extra["logprobs"] = {"content": [c.logprob_entries[k]], "refusal": None}
        if req.return_token_ids:
            extra["token_ids"] = [c.token_ids[k]]
        if delta or extra:
            yield chunk({"content": delta}, **extra)
    for i, tc in enumerate(c.tool_calls):
        yield chunk({"tool_calls": [{"index": i, "id": tc.id, "type": "function",
                                     "function": {"name": tc.name, "arguments": ""}}]})
        yield chunk({"tool_calls": [{"index": i, "function": {"arguments": tc.arguments}}]})
    yield chunk({}, c.finish_reason)
    if req.include_usage:
        yield {"id": rid, "object": "chat.completion.chunk", "created": created,
               "model": req.model, "choices": [], "usage": _usage(c)}


# ------------------------------------------------------------------ engine
class _Gate:
    """Admission to the policy, so that clients who come back together share a batch.

    ``HFPolicy`` batches the calls that reach it within ``batch_wait_ms`` of each
    other, then generates; calls that arrive meanwhile form the next batch, which
    starts the moment the current one ends. In-process workers all resubmit in
    the same event-loop tick, but HTTP clients come back a few milliseconds
    apart, so the late ones used to start a batch of their own and the server
    fell into a stable 7 + 1 rhythm (a 1-row batch costs ~40% of an 8-row one on
    CPU). So, while the policy is busy (past its batch-forming window), new
    requests wait here; when the last running request ends, the waiting ones
    are released together once as many are back as just finished (plus those
    already waiting), or after a quarter of the last batch's time, at most
    ``coalesce_s`` (HTTP clients on a busy CPU take tens of milliseconds to come
    back: Python threads share the GIL). A lone client never waits.
    Runs on the engine's event loop only.
    """

    def __init__(self, max_batch: int, forming_s: float, coalesce_s: float) -> None:
        self.max_batch = max(1, int(max_batch))
        self.forming_s = forming_s
        self.coalesce_s = coalesce_s
        self.busy = 0  # admitted and not finished
        self.group_started = float("-inf")
        self.group_size = 0
        self.finished = 0  # of the current group
        self.waiting: list[asyncio.Future[None]] = []
        self.target = 0
        self.coalescing = False
        self.timer: asyncio.TimerHandle | None = None

    async def enter(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        forming = now < self.group_started + self.forming_s and self.group_size < self.max_batch
        if not self.waiting and not self.coalescing and (self.busy == 0 or forming):
            self._admit(now)
            return
        fut: asyncio.Future[None] = loop.create_future()
        self.waiting.append(fut)
        if self.coalescing and len(self.waiting) >= self.target:
            self._flush()
        try:
            await fut
        except asyncio.CancelledError:
            if fut in self.waiting:
                self.waiting.remove(fut)
            elif fut.done() and not fut.cancelled():
                self.leave()  # admitted, then cancelled before it ran
            raise

    def _admit(self, now: float) -> None:
        if self.busy == 0:
            self.group_started, self.group_size, self.finished = now, 0, 0
        self.busy += 1
        self.group_size += 1

    def leave(self) -> None:
        self.busy -= 1
        self.finished += 1
        if self.busy:
            return
        self.target = min(self.max_batch, self.finished + len(self.waiting))
        self.coalescing = True
        if len(self.waiting) >= self.target:
            self._flush()
            return
        loop = asyncio.get_running_loop()
        # Wait at most a quarter of what the batch took: a client that does not
        # come back costs little next to a batch split in two.
        took = loop.time() - self.group_started
        window = min(self.coalesce_s, max(0.01, 0.25 * took))
        self.timer = loop.call_later(window, self._flush)

    def _flush(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.coalescing = False
        now = asyncio.get_running_loop().time()
        release, self.waiting = self.waiting[: self.max_batch], self.waiting[self.max_batch:]
        for fut in release:
            self._admit(now)
            fut.set_result(None)


class _Engine:
    """One asyncio loop in a thread: every request's ``act`` runs there, so they batch."""

    def __init__(self, policy: Any, coalesce_ms: float = 100.0) -> None:
        self.policy = policy
        self.vocab = _Vocab(policy.tokenizer)
        self.stop_ids = set(policy.stop_ids)
        self.gate = _Gate(getattr(policy, "max_batch", 8),
                          getattr(policy, "batch_wait_ms", 5.0) / 1000, coalesce_ms / 1000)
        self.loop = asyncio.new_event_loop()
        #: Whether a model name is served now (set by the server; read on the loop).
        self.is_served: Any = lambda name: True
        #: Requests admitted per adapter and not yet answered, and the adapters
        #: unloaded while some were (dropped when the last one is answered).
        self.inflight: dict[str, int] = {}
        self.retired: set[str] = set()
        self.thread = threading.Thread(target=self._run, name="tackroom-serve-loop",
                                       daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def complete(self, req: ChatRequest) -> Completion:
        """Blocking: the finished reply to ``req`` (called from an HTTP thread)."""
        return asyncio.run_coroutine_threadsafe(self._complete(req), self.loop).result()

    def call(self, fn: Any, *args: Any) -> Any:
        """Blocking: ``fn(*args)`` run on the loop thread, between other requests' steps."""
        async def run() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result()

    def _release(self, adapter: str) -> None:
        left = self.inflight.get(adapter, 0) - 1
        if left > 0:
            self.inflight[adapter] = left
            return
        self.inflight.pop(adapter, None)
        if adapter in self.retired:
            self.retired.discard(adapter)
            with contextlib.suppress(TackroomError):
                self.policy.unload_adapter(adapter)

    async def _complete(self, req: ChatRequest) -> Completion:
        p = self.policy
        preq = PolicyRequest(messages=req.messages, tools=req.tools, sampling=req.sampling)
        try:
            prompt = p.prompt_ids(req.messages, req.tools)
        except Exception as e:  # noqa: BLE001 - rendering depends on the request alone
            raise ApiError(400, "the chat template cannot render these messages "
                                f"({type(e).__name__}: {_first_line(e)})",
                           param="messages") from None
        await self.gate.enter()
        counted = None
        try:
            if req.adapter is not None and not self.is_served(req.model):
                raise ApiError(404, f"The model `{req.model}` does not exist (its adapter "
                                    "was unloaded)", param="model", code="model_not_found")
            if req.adapter is not None:
                counted = req.adapter
                self.inflight[counted] = self.inflight.get(counted, 0) + 1
            # set_adapter and act's synchronous start (prompt, job with the active
            # adapter) run without a suspension in between: no other request can
            # switch the adapter under this one.
            p.set_adapter(req.adapter)
            response = await p.act(preq)
        except ContextLengthExceeded as e:
            limit = getattr(p, "max_positions", None)
            raise ApiError(400, f"{e.what}: this model's maximum context length is {limit} "
                                "tokens; shorten the messages", param="messages",
                           code="context_length_exceeded") from None
        except TackroomError as e:
            raise ApiError(500, e.line()) from None
        finally:
            self.gate.leave()
            if counted is not None:
                self._release(counted)
        out = build_completion(response, req, self.vocab, self.stop_ids,
                               prompt if req.return_token_ids else None)
        out.adapter = req.adapter
        return out

    def close(self, close_policy: bool) -> None:
        if self.loop.is_closed():
            return
        if close_policy:
            fut = asyncio.run_coroutine_threadsafe(self.policy.aclose(), self.loop)
            try:
                fut.result(timeout=30)
            except Exception:  # noqa: BLE001,S110 - closing; nothing to report to anyone
                pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        if not self.thread.is_alive():
            self.loop.close()


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else "")[:200]


# ------------------------------------------------------------------ server
class _HTTPServer(ThreadingHTTPServer):
    """A thread per connection, and a listen backlog for bursts of clients.

    The standard library's backlog of 5 resets connections when a few dozen
    clients connect at once; the kernel caps this one at ``net.core.somaxconn``.
    """

    request_queue_size = LISTEN_BACKLOG
    daemon_threads = True


class ModelServer:
    """An OpenAI-compatible server over one :class:`HFPolicy`; bound, not yet serving.

    Args:
        model_dir: a model directory (``tackroom model init DIR`` writes one).
        policy: an already loaded ``HFPolicy`` to serve instead (the server then
            owns its event loop: do not call its ``act`` elsewhere meanwhile).
        host, port: where to listen; ``port=0`` picks a free one.
        api_key: when set, every ``/v1`` request needs ``Authorization: Bearer <key>``.
        adapters: LoRA adapters to serve, ``name → directory``; a request picks one
            by ``"model": name``.
        served_name: the base model's name (default: the directory's name).
        max_batch, batch_wait_ms, device, dtype, threads: ``HFPolicy`` settings
            (ignored when ``policy`` is given: it has its own).
        default_max_tokens: ``max_tokens`` for a request that gives none.
        coalesce_ms: after a batch, how long (at most) requests wait for the
            clients it answered to come back and share the next batch (``_Gate``).
        log: print one line per request to stderr.
        max_body: the largest request body accepted, in bytes; a longer one is
            answered 413 without being read.
        read_timeout: seconds a connection may stay silent while the server waits
            for a request (its headers, its body, or the next one on a kept-alive
            connection); then it is closed (408 when a body was cut short).

    Adapters can also be loaded and unloaded while serving
    (:meth:`load_lora_adapter`, :meth:`unload_lora_adapter`: vLLM's endpoints);
    ``answered`` counts the completions each model name (adapter) wrote.

    Raises:
        PolicyError: the model or an adapter cannot be loaded (one clear line).
        ConfigError: the address cannot be bound, or names collide.
    """

    def __init__(self, model_dir: str | Path | None = None, *, policy: Any = None,
                 host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None,
                 adapters: dict[str, str] | None = None, served_name: str | None = None,
                 max_batch: int = 8, batch_wait_ms: float = 5.0, device: str = "cpu",
                 dtype: str | None = None, threads: int | None = None,
                 default_max_tokens: int = DEFAULT_MAX_TOKENS, coalesce_ms: float = 100.0,
                 log: bool = False, max_body: int = MAX_BODY,
                 read_timeout: float | None = READ_TIMEOUT) -> None:
        if (model_dir is None) == (policy is None):
            raise ConfigError("give a model directory or a loaded policy, not both or neither",
                              "serve", "tackroom serve MODEL_DIR")
        self._owns_policy = policy is None
        if policy is None:
            from tackroom.policies.hf_policy import HFPolicy

            policy = HFPolicy(model_dir, device=device, dtype=dtype, max_batch=max_batch,
                              batch_wait_ms=batch_wait_ms, threads=threads)
        self.policy = policy
        self.model_dir = str(policy.model_dir)
        self.model_name = served_name or Path(self.model_dir).resolve().name or "model"
        for name, path in (adapters or {}).items():
            if name == self.model_name:
                raise ConfigError(f"adapter name {name!r} is the base model's name", "serve",
                                  "give the adapter another name (NAME=DIR)")
            policy.load_adapter(name, path)
        self.served: dict[str, str | None] = {self.model_name: None}
        self.served.update({name: name for name in (adapters or {})})
        self.adapter_dirs = {name: str(path) for name, path in (adapters or {}).items()}
        self.api_key = api_key or None
        self.default_max_tokens = int(default_max_tokens)
        self.log = log
        self.max_body = int(max_body)
        self.created = int(time.time())
        handler = type("_BoundHandler", (_Handler,), {"app": self, "timeout": read_timeout})
        try:
            self.httpd = _HTTPServer((host, int(port)), handler)
        except OSError as e:
            raise ConfigError(f"cannot listen on {host}:{port} ({e.strerror or e})", "serve",
                              "pick another --port, or stop what is using it") from None
        self.httpd.daemon_threads = True
        self.host = host
        self.port = int(self.httpd.server_address[1])
        self.engine = _Engine(policy, coalesce_ms)
        self.engine.is_served = lambda name: name in self.served
        #: Completions answered per model name (adapter, or the base model's name).
        self.answered: dict[str, int] = {}
        self._answered_lock = threading.Lock()
        self._closed = False

    @property
    def base_url(self) -> str:
        """The ``/v1`` root an OpenAI client takes as ``base_url``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        if host in ("0.0.0.0", "[::]"):
            host = "127.0.0.1"
        return f"http://{host}:{self.port}/v1"

    def models(self) -> list[dict[str, Any]]:
        limit = getattr(self.policy, "max_positions", None)
        out = [{"id": self.model_name, "object": "model", "created": self.created,
                "owned_by": "tackroom", "root": self.model_dir, "parent": None,
                "max_model_len": limit}]
        for name, path in self.adapter_dirs.items():
            out.append({"id": name, "object": "model", "created": self.created,
                        "owned_by": "tackroom", "root": path, "parent": self.model_name,
                        "max_model_len": limit})
        return out

    # ``served`` and ``adapter_dirs`` are replaced, never changed in place, and only on
    # the engine's loop thread: HTTP threads read a consistent table without a lock.
    def load_lora_adapter(self, body: Any) -> str:
        """``POST /v1/load_lora_adapter``: serve the peft adapter at ``lora_path`` as ``lora_name``."""
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        name, path = body.get("lora_name"), body.get("lora_path")
        if not isinstance(name, str) or not name or not isinstance(path, str) or not path:
            raise ApiError(400, "Both 'lora_name' and 'lora_path' must be provided.",
                           param="lora_name" if not name else "lora_path")
        return self.engine.call(self._load_on_loop, name, path)

    def _load_on_loop(self, name: str, path: str) -> str:
        if name in self.served:
            raise ApiError(400, f"The lora adapter '{name}' has already been loaded.",
                           param="lora_name")
        if name in self.engine.retired:
            raise ApiError(400, f"The lora adapter '{name}' was unloaded and still answers "
                                f"{self.engine.inflight.get(name, 0)} request(s); load it "
                                "again when they are done, or under another name",
                           param="lora_name")
        if not re.fullmatch(r"[A-Za-z0-9_\-]+", name):
            raise ApiError(400, f"bad adapter name {name!r}: use letters, digits, '_' and "
                                "'-' only", param="lora_name")
        try:
            found = (Path(path) / "adapter_config.json").is_file()
        except (OSError, ValueError):  # a NUL byte, a name too long for the file system
            found = False
        if not found:
            raise ApiError(404, f"No adapter found for {path} (no adapter_config.json there; "
                                "the path is read by the server)", param="lora_path")
        try:
            self.policy.load_adapter(name, path)
        except PolicyError as e:
            raise ApiError(400, e.what, param="lora_path") from None
        self.served = {**self.served, name: name}
        self.adapter_dirs = {**self.adapter_dirs, name: str(path)}
        return f"Success: LoRA adapter '{name}' added successfully."

    def unload_lora_adapter(self, body: Any) -> str:
        """``POST /v1/unload_lora_adapter``: stop serving adapter ``lora_name``."""
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        name = body.get("lora_name")
        if not isinstance(name, str) or not name:
            raise ApiError(400, "either 'lora_name' and 'lora_int_id' needs to be provided.",
                           param="lora_name")
        return self.engine.call(self._unload_on_loop, name)

    def _unload_on_loop(self, name: str) -> str:
        if self.served.get(name) is None:  # not served, or the base model
            raise ApiError(404, f"The lora adapter '{name}' cannot be found.",
                           param="lora_name", code="model_not_found")
        self.served = {k: v for k, v in self.served.items() if k != name}
        self.adapter_dirs = {k: v for k, v in self.adapter_dirs.items() if k != name}
        if self.engine.inflight.get(name):
            self.engine.retired.add(name)  # dropped when its last request is answered
        else:
            self.policy.unload_adapter(name)
        return f"Success: LoRA adapter '{name}' removed successfully."

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.1)

    def close(self) -> None:
        """Stop serving and free the address (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.httpd.server_close()
        self.engine.close(close_policy=self._owns_policy)


class ServerThread(ModelServer):
    """A :class:`ModelServer` serving from a background thread; a context manager.

    Defaults to a free port on 127.0.0.1 (for tests)::

        with ServerThread(model_dir) as srv:
            policy = OpenAIPolicy(srv.model_name, base_url=srv.base_url)
    """

    def __init__(self, model_dir: str | Path | None = None, *, port: int = 0,
                 **kwargs: Any) -> None:
        super().__init__(model_dir, port=port, **kwargs)
        self._thread: threading.Thread | None = None

    def start(self) -> ServerThread:
        if self._thread is None:
            self._thread = threading.Thread(target=self.serve_forever, daemon=True,
                                            name="tackroom-serve-http")
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_main(model_dir: str, *, host: str = "127.0.0.1", port: int = 8000,
               api_key: str | None = None, adapters: dict[str, str] | None = None,
               max_batch: int = 8, **kwargs: Any) -> None:
    """``tackroom serve``: load the model, listen, serve until interrupted (blocks).

    ``kwargs`` are more :class:`ModelServer` settings (``served_name``,
    ``batch_wait_ms``, ``device``, ``dtype``, ``threads``, ``default_max_tokens``,
    ``coalesce_ms``, ``log``, ``max_body``, ``read_timeout``). A bad model directory
    raises :class:`PolicyError`, a busy port :class:`ConfigError`: one line each, for
    the CLI to print (exit code 2).
    """
    kwargs.setdefault("log", True)
    server = ModelServer(model_dir, host=host, port=port, api_key=api_key,
                         adapters=adapters, max_batch=max_batch, **kwargs)
    names = ", ".join(server.served)
    print(f"tackroom serve: {names} at {server.base_url} (Ctrl-C to stop)", file=sys.stderr)
    if host not in _LOOPBACK and not api_key:
        print(f"tackroom serve: warning: listening on {host} without an API key; anyone who "
              "can reach this port can use the model (pass --api-key)", file=sys.stderr)
    # SIGTERM (``docker stop``, ``kill``) stops as cleanly as Ctrl-C does.
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    print("tackroom serve: stopped", file=sys.stderr)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


# ----------------------------------------------------------------- handler
class _Handler(BaseHTTPRequestHandler):
    app: ModelServer  # set on the per-server subclass
    protocol_version = "HTTP/1.1"  # keep-alive, as clients expect
    server_version = "tackroom-serve"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        if self.app.log:
            sys.stderr.write(f"{self.address_string()} - {format % args}\n")

    # ------------------------------------------------------------ sending
    def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(obj, ensure_ascii=False).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _send_text(self, status: int, text: str) -> None:
        data = text.encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _send_error(self, e: ApiError) -> None:
        headers = {"WWW-Authenticate": "Bearer"} if e.status == 401 else {}
        self._send_json(e.status, e.body(), {**headers, **e.headers})

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        """The standard library's own errors (a bad request line, headers too long) as JSON."""
        self.log_error("code %d, message %s", code, message)
        if self.request_version == "HTTP/0.9":  # an unparsable line: answer in HTTP/1.x
            self.request_version = "HTTP/1.0"
        short, long = self.responses.get(code, ("Error", ""))
        self.close_connection = True
        text = message or short
        if explain or long:
            text = f"{text} ({explain or long})"
        self._send_error(ApiError(code, text))

    def _send_stream(self, chunks: Iterator[dict[str, Any]],
                     headers: dict[str, str] | None = None) -> None:
        """Server-Sent Events, in HTTP/1.1 chunked transfer encoding (keeps the connection)."""
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            events = [f"data: {json.dumps(c, ensure_ascii=False)}\n\n" for c in chunks]
            events.append("data: [DONE]\n\n")
            for ev in events:
                data = ev.encode()
                self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # ------------------------------------------------------------ routing
    def _route(self) -> str:
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        return path

    def _authorized(self) -> bool:
        key = self.app.api_key
        if not key:
            return True
        got = self.headers.get("Authorization") or ""
        scheme, _, token = got.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            token.strip().encode(), key.encode())

    def _check_auth(self) -> None:
        if not self._authorized():
            raise ApiError(401, "missing or wrong API key: send the header "
                                "'Authorization: Bearer <key>' with the key the server was "
                                "started with", code="invalid_api_key")

    def __getattr__(self, name: str) -> Any:
        # Any method (PUT, DELETE, BREW, ...) is routed, so it is answered with a JSON
        # 404 or 405 instead of the standard library's HTML 501.
        if name.startswith("do_"):
            return self._handle
        raise AttributeError(name)

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        self._handle()

    def do_HEAD(self) -> None:  # noqa: N802 - stdlib name
        self._handle()

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        self._handle()

    def _handle(self) -> None:
        path, method = self._route(), self.command
        try:
            if method == "POST" and path == "/v1/chat/completions":
                body = self._read_body()  # always read it, so the connection stays usable
                self._check_auth()
                self._chat(body)
                return
            if method == "POST" and path in _ADAPTER_ROUTES:
                body = self._read_body()
                self._check_auth()
                action = getattr(self.app, _ADAPTER_ROUTES[path])
                self._send_text(200, action(body))
                return
            if self.headers.get("Content-Length", "0").strip() not in ("", "0") \
                    or "Transfer-Encoding" in self.headers:
                self.close_connection = True  # a body this route does not read
            allowed = _allowed_methods(path)
            if allowed and method in allowed and path in ("/health", "/v1/health"):
                self._send_json(200, {"status": "ok"})
                return
            self._check_auth()
            if allowed is None:
                raise ApiError(404, f"no route {method} {path}; this server serves GET "
                                    "/v1/models, POST /v1/chat/completions (chat models "
                                    "only), /v1/load_lora_adapter and /v1/unload_lora_adapter")
            if method not in allowed:
                raise ApiError(405, f"use {' or '.join(allowed)} for {path}, not {method}",
                               headers={"Allow": ", ".join(allowed)})
            self._get(path)
        except ApiError as e:
            self._send_error(e)
            if e.status == 413:
                self._linger()
        except (ConnectionError, TimeoutError):
            self.close_connection = True
        except Exception as e:  # noqa: BLE001 - never a traceback to the client
            if self.app.log:
                import traceback

                traceback.print_exc(file=sys.stderr)
            self._send_error(ApiError(500, f"internal error ({type(e).__name__}: "
                                           f"{_first_line(e)})"))

    def _get(self, path: str) -> None:
        if path == "/v1/models":
            self._send_json(200, {"object": "list", "data": self.app.models()})
            return
        name = path[len("/v1/models/"):]
        for m in self.app.models():
            if m["id"] == name:
                self._send_json(200, m)
                return
        raise ApiError(404, f"The model `{name}` does not exist. Served models: "
                            f"{', '.join(self.app.served)}", code="model_not_found")

    def _linger(self, seconds: float = 2.0) -> None:
        """After an early answer (413), read what the client still sends for a moment.

        Closing a socket with unread data resets the connection, and the client
        may then lose the answer; the rest is cut off (only this thread waits).
        """
        self.close_connection = True
        deadline = time.monotonic() + seconds
        try:
            self.connection.shutdown(socket.SHUT_WR)
            while (left := deadline - time.monotonic()) > 0:
                self.connection.settimeout(left)
                if not self.connection.recv(65536):
                    break
        except OSError:
            pass

    def _read_body(self) -> Any:
        raw_len = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self.close_connection = True
            raise ApiError(411, "chunked request bodies are not supported: send Content-Length")
        try:
            length = int(raw_len or 0)
        except ValueError:
            self.close_connection = True
            raise ApiError(400, f"bad Content-Length {raw_len!r}") from None
        if length < 0:
            self.close_connection = True
            raise ApiError(400, f"bad Content-Length {raw_len!r}")
        limit = self.app.max_body
        if length > limit:
            self.close_connection = True
            raise ApiError(413, f"request body of {length} bytes is over the "
                                f"{limit} byte limit")
        try:
            raw = self.rfile.read(length) if length > 0 else b""
        except TimeoutError:
            self.close_connection = True
            raise ApiError(408, f"the request body did not arrive: nothing came for "
                                f"{self.timeout:g} s") from None
        if len(raw) < length:
            self.close_connection = True
            raise ApiError(400, f"the request body ended after {len(raw)} of the "
                                f"{length} bytes its Content-Length announced")
        if not raw.strip():
            raise ApiError(400, "empty request body: send a JSON object")
        try:
            return json.loads(raw, parse_constant=_no_constant)
        except (ValueError, RecursionError) as e:
            raise ApiError(400, f"the request body is not valid JSON ({_first_line(e)})") \
                from None

    def _chat(self, body: Any) -> None:
        app = self.app
        req = parse_chat_request(body, app.served, default_max_tokens=app.default_max_tokens)
        completion = app.engine.complete(req)
        rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        served_by = {"X-Tackroom-Adapter": completion.adapter or "base"}
        name = completion.adapter or app.model_name
        with app._answered_lock:
            app.answered[name] = app.answered.get(name, 0) + 1
        if req.stream:
            self._send_stream(stream_chunks(completion, req, rid=rid, created=created),
                              served_by)
        else:
            self._send_json(200, completion_body(completion, req, rid=rid, created=created),
                            served_by)


def _allowed_methods(path: str) -> tuple[str, ...] | None:
    """The methods a path answers, or ``None`` for a path this server does not serve."""
    if path in ("/health", "/v1/health", "/v1/models") or path.startswith("/v1/models/"):
        return ("GET", "HEAD")
    if path == "/v1/chat/completions" or path in _ADAPTER_ROUTES:
        return ("POST",)
    return None


#: The adapter routes, and the :class:`ModelServer` method that answers each.
_ADAPTER_ROUTES = {"/v1/load_lora_adapter": "load_lora_adapter",
                   "/v1/unload_lora_adapter": "unload_lora_adapter"}


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (JSON has no NaN or Infinity)")
