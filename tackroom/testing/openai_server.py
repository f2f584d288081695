"""A scripted, real OpenAI-compatible HTTP server for tests and examples.

It listens on 127.0.0.1 (a free port) and answers each model call with the next
scripted :class:`Reply`, recording what it received. Because it is a real
server, the client under test runs its whole network path: the SDK, httpx,
timeouts, retries.

    from tackroom.testing import ScriptedOpenAIServer, text, tool_call, error

    script = [error(500), text("hello"), tool_call("click", '{"ref": "b1"}')]
    with ScriptedOpenAIServer(script) as srv:
        policy = OpenAIPolicy("scripted", base_url=srv.base_url)
        ...
        assert len(srv.requests) == 3

It is built on :mod:`tackroom.wire`, as ``tackroom serve`` and the gateway are:
the same HTTP/1.1 stack (:class:`~tackroom.wire.HttpServer`, on an event loop of
its own in a background thread), and every API dialect the wire package has
(:func:`tackroom.wire.dialect.find`): a call to ``POST /v1/chat/completions``,
``/v1/messages``, ``/v1/responses`` or Gemini's ``generateContent`` gets the
same scripted reply, shaped by that dialect, whole or streamed. ``GET
/v1/models`` lists the models.

Log-probs and token ids are sent only when the request asks for them
(``logprobs: true`` / ``return_token_ids: true``), as OpenAI and vLLM do; when a
reply does not script them the server makes up deterministic ones.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re
import threading
import time
import uuid
import zlib
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from tackroom.core.policy import ToolCall
from tackroom.wire import ApiError, Completion, HttpServer, Limits, Request, Shape, dumps, loads
from tackroom.wire import Reply as HttpReply
from tackroom.wire.dialect import Dialect, dialect_error_reply, find, query_of, sse
from tackroom.wire.http11 import Gone
from tackroom.wire.server import fd_ceiling

__all__ = ["RecordedRequest", "Reply", "ScriptedOpenAIServer", "error", "text", "tool_call"]


@dataclass
class Reply:
    """One scripted answer to one chat-completions request.

    A 200 reply carries ``text`` and/or ``tool_calls``; each tool call is either
    ``(name, arguments)`` (``arguments`` sent verbatim, valid JSON or not) or a
    dict placed as-is into ``message.tool_calls`` (to script a call with no name,
    say). A non-200 ``status`` sends an OpenAI-style error body with ``error``
    as its message, or ``body`` verbatim when given (a dict is JSON-encoded).
    ``delay`` seconds pass before anything is sent (to exceed client timeouts);
    ``drop`` closes the connection without answering.

    Hostile servers: ``trickle`` sends the body one byte every ``trickle``
    seconds (each read is quick, the whole reply is not); ``huge`` sends a
    reply of that many bytes with ``status`` (a JSON prefix — a completion's or,
    for an error status, an error's — then filler written in chunks, never held
    in memory); ``echo_key`` replaces ``{key}`` in the text and in
    tool-call arguments with the bearer token the request carried.
    """

    text: str | None = None
    tool_calls: list[tuple[str, str] | dict[str, Any]] = field(default_factory=list)
    status: int = 200
    error: str | None = None
    body: str | dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drop: bool = False
    logprobs: list[float] | None = None
    tokens: list[str] | None = None
    token_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    model: str | None = None
    trickle: float = 0.0
    huge: int = 0
    echo_key: bool = False


def text(content: str, **kw: Any) -> Reply:
    """A plain assistant text reply."""
    return Reply(text=content, **kw)


def tool_call(name: str, arguments: str | dict[str, Any] = "{}", **kw: Any) -> Reply:
    """A reply with one tool call; a dict ``arguments`` is JSON-encoded, a str sent as-is."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return Reply(tool_calls=[(name, args)], **kw)


def error(status: int = 500, message: str | None = None, **kw: Any) -> Reply:
    """An HTTP error reply with an OpenAI-style ``{"error": {...}}`` body."""
    return Reply(status=status, error=message or f"scripted error {status}", **kw)


@dataclass
class RecordedRequest:
    """One request the server received: method, target, headers (lower-cased), JSON body."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    #: The API dialect of a model call (``"chat"``, ...); ``None``: not a model call.
    dialect: str | None = None


Script = Iterable[Reply | str] | Callable[[dict[str, Any]], Reply | str | None]


#: The largest request body the server reads (bytes): far above any test's.
MAX_BODY = 64 * 2**20
#: Seconds a connection may stay silent mid-request, or not read its reply.
READ_TIMEOUT = 30.0
#: Threads a callable script may block at once (it runs off the event loop, as a
#: request handler of a threading server would).
SCRIPT_THREADS = 64


class ScriptedOpenAIServer:
    """A real OpenAI-compatible server on 127.0.0.1 that answers from a script.

    ``script`` is a list of replies (a ``str`` is a text reply), consumed in the
    order model calls arrive, or a callable ``(request_json) -> Reply | str | None``
    called for each model call (with the chat-completions body the call means, in
    whichever dialect it came), one call at a time, off the server's event loop: it
    may block (later calls then wait for it; the connections stay served).
    When the list runs out (or the callable returns ``None``) the server answers
    ``default`` if given, else HTTP 500 saying the script is exhausted.
    ``models`` (when given) is what ``/v1/models`` lists, and a request for any
    other model gets a 404 as vLLM sends; without it every model name is
    accepted. ``huge_models`` makes the model list a body of that many bytes (a
    hostile server's).
    """

    def __init__(
        self,
        script: Script = (),
        *,
        default: Reply | str | None = None,
        models: list[str] | None = None,
        huge_models: int = 0,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._script: Callable[[dict[str, Any]], Reply | str | None] | None = None
        self._queue: list[Reply | str] = []
        if callable(script):
            self._script = script
        else:
            self._queue = list(script)
        self.default = default
        self.models = models
        self.huge_models = huge_models
        self._host, self._port = host, port
        self._lock = threading.Lock()
        self._script_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._bound_port: int | None = None
        self.received: list[RecordedRequest] = []
        self.in_flight = 0
        self.max_concurrent = 0
        self.bytes_sent = 0  # body bytes written so far (trickled and huge replies)

    # ------------------------------------------------------------------ life
    def start(self) -> ScriptedOpenAIServer:
        """Listen (on a thread with its own event loop); returns once the port is bound."""
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, args=(ready,),
                                        name="scripted-openai-server", daemon=True)
        self._thread.start()
        ready.result(timeout=30)  # a bind error is raised here
        return self

    def _run(self, ready: concurrent.futures.Future[None]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve(ready))
        finally:
            loop.close()

    async def _serve(self, ready: concurrent.futures.Future[None]) -> None:
        self._stopping = asyncio.Event()
        http = HttpServer(
            self._handle, host=self._host, port=self._port, max_body=MAX_BODY,
            read_timeout=READ_TIMEOUT, max_buffered=4 * MAX_BODY, capacity=fd_ceiling,
            where="ScriptedOpenAIServer",
            # Tests are the only clients: none is cut off for being unauthenticated.
            limits=Limits(max_unauthenticated=100_000, max_unauthenticated_per_peer=100_000,
                          unauthenticated_idle_s=READ_TIMEOUT))
        try:
            await http.start()
        except BaseException as e:  # noqa: BLE001 - handed to start()'s caller
            ready.set_exception(e)
            return
        self._bound_port = http.port
        ready.set_result(None)
        await self._stopping.wait()
        await http.aclose()  # cancels replies still being delayed or trickled

    def stop(self) -> None:
        """Stop listening and end open connections (idempotent)."""
        loop, stopping, thread = self._loop, self._stopping, self._thread
        if loop is not None and stopping is not None and thread is not None:
            loop.call_soon_threadsafe(stopping.set)
            thread.join(timeout=10)
        self._thread = self._loop = self._stopping = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> ScriptedOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------ accessors
    @property
    def port(self) -> int:
        """The bound port (still readable after the server stopped, for assertions)."""
        if self._bound_port is None:
            raise RuntimeError("ScriptedOpenAIServer was never started; use it as a context "
                               "manager or call start()")
        return self._bound_port

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``, what an OpenAI client takes as ``base_url``."""
        return f"http://{self._host}:{self.port}/v1"

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        """Every model call received (any dialect), in arrival order."""
        with self._lock:
            return [r for r in self.received if r.dialect is not None]

    @property
    def requests(self) -> list[Any]:
        """The JSON bodies of every model call, as sent, in arrival order."""
        return [r.body for r in self.chat_requests]

    @property
    def headers(self) -> list[dict[str, str]]:
        """The headers (names lower-cased) of every model call."""
        return [r.headers for r in self.chat_requests]

    def push(self, *replies: Reply | str) -> None:
        """Append replies to a list script (e.g. between two phases of a test)."""
        with self._lock:
            self._queue.extend(replies)

    # ------------------------------------------------------------- answering
    def _record(self, req: RecordedRequest) -> None:
        with self._lock:
            self.received.append(req)

    def _next_reply(self, chat: dict[str, Any]) -> Reply:
        with self._lock:
            if self._script is not None:
                nxt = None  # asked below, outside the lock (it may block)
            elif self._queue:
                nxt = self._queue.pop(0)
            else:
                nxt = None
            n_chat = sum(1 for r in self.received if r.dialect is not None)
        if self._script is not None:
            with self._script_lock:  # one call at a time, as a script written for a list is
                nxt = self._script(chat)
        if nxt is None:
            nxt = self.default
        if nxt is None:
            return error(500, f"ScriptedOpenAIServer: script exhausted (request #{n_chat} "
                              "has no scripted reply)")
        return Reply(text=nxt) if isinstance(nxt, str) else nxt

    async def _reply_for(self, chat: dict[str, Any]) -> Reply:
        if self._script is None:
            return self._next_reply(chat)
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(SCRIPT_THREADS,
                                                               "scripted-openai-script")
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._next_reply,
                                                                chat)

    async def _handle(self, request: Request) -> HttpReply:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.headers}
        target, method = request.target.decode("latin-1"), request.method
        if method in ("GET", "HEAD"):
            self._record(RecordedRequest(method, target, headers, None))
            if request.path.endswith("/models"):
                return self._models()
            return dialect_error_reply(None, ApiError(404, f"no route {method} {target}"))
        found = find(method, request.path, query_of(request.target))
        if found is None or found[1].method != method:
            self._record(RecordedRequest(method, target, headers, _json_or_text(request.body)))
            return dialect_error_reply(None, ApiError(404, f"no route {method} {target}"))
        dialect, route, match = found
        body = _json_or_text(request.body)
        self._record(RecordedRequest(method, target, headers, body,
                                     dialect=dialect.name if route.kind == "turn" else None))
        try:
            if not isinstance(body, dict):
                raise ApiError(400, "request body is not a JSON object")
            chat = dialect.to_chat(body, match)
            if route.kind == "count_tokens" and dialect.count is not None:
                return HttpReply(200, dumps(dialect.count(_prompt_size(chat))))
            if route.kind != "turn":
                raise ApiError(404, f"no route {method} {target}")
            if self.models is not None and chat.get("model") not in self.models:
                raise ApiError(404, f"The model `{chat.get('model')}` does not exist.",
                               code="model_not_found")
            with self._busy():
                return await self._answer(dialect, body, chat, headers)
        except ApiError as e:
            return dialect_error_reply(dialect, e)

    def _busy(self) -> _InFlight:
        return _InFlight(self)

    async def _answer(self, dialect: Dialect, body: dict[str, Any], chat: dict[str, Any],
                      headers: dict[str, str]) -> HttpReply:
        reply = await self._reply_for(chat)
        if reply.delay > 0:
            await asyncio.sleep(reply.delay)  # stop() cancels it
        if reply.drop:
            raise Gone  # the connection closes, unanswered
        extra = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers.items()]
        if reply.huge:
            return self._huge(reply.huge, reply.status)
        if reply.echo_key:
            reply = _with_key(reply, headers)
        if reply.body is not None:
            raw = reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
            return self._send(reply.status, raw.encode(), extra, reply.trickle)
        if reply.status != 200:
            err = dialect_error_reply(dialect, ApiError(reply.status,
                                                        reply.error or f"error {reply.status}"))
            err.headers += extra
            return err
        completion, shape = scripted_completion(reply, chat)
        if chat.get("stream") is True:
            events = dialect.events(completion, shape, body)
            return HttpReply(200, sse(events, done_marker=dialect.done_marker), headers=extra,
                             content_type=b"text/event-stream", stream=True)
        return self._send(200, dumps(dialect.reply(completion, shape, body)), extra,
                          reply.trickle)

    def _models(self) -> HttpReply:
        if self.huge_models:
            return self._huge(self.huge_models, 200, head=b'{"object": "list", "data": [{"id": "')
        now = int(time.time())
        return HttpReply(200, dumps({"object": "list", "data": [
            {"id": m, "object": "model", "created": now, "owned_by": "tackroom"}
            for m in self.models or ["scripted-model"]]}))

    # ----------------------------------------------------- hostile replies
    def _send(self, status: int, data: bytes, headers: list[tuple[bytes, bytes]],
              trickle: float) -> HttpReply:
        if trickle <= 0:
            return HttpReply(status, data, headers=headers)
        return HttpReply(status, b"", headers=headers, pieces=self._trickle(data, trickle),
                         length=len(data))

    async def _trickle(self, data: bytes, every: float) -> AsyncIterator[bytes]:
        for i in range(len(data)):
            await asyncio.sleep(every)
            yield data[i:i + 1]
            self.bytes_sent += 1  # written out (the next piece is asked for after the write)

    def _huge(self, size: int, status: int, head: bytes | None = None) -> HttpReply:
        """A reply of ``size`` bytes, made in chunks while the client reads it."""
        if head is None:
            head = (b'{"object": "chat.completion", "choices": [{"message": {"content": "'
                    if status == 200 else b'{"error": {"message": "')

        async def pieces() -> AsyncIterator[bytes]:
            chunk = b"x" * 65536
            yield head
            sent = len(head)
            while sent < size:
                piece = chunk[:size - sent]
                yield piece
                sent += len(piece)
                self.bytes_sent += len(piece)

        return HttpReply(status, b"", pieces=pieces(), length=size, close=True)


class _InFlight:
    """Counts a call while it is answered (``in_flight``, ``max_concurrent``)."""

    def __init__(self, server: ScriptedOpenAIServer) -> None:
        self.server = server

    def __enter__(self) -> None:
        s = self.server
        with s._lock:
            s.in_flight += 1
            s.max_concurrent = max(s.max_concurrent, s.in_flight)

    def __exit__(self, *exc: object) -> None:
        with self.server._lock:
            self.server.in_flight -= 1


# ---------------------------------------------------------------- wire shape
_TOKEN_RE = re.compile(r"\s*\S+|\s+")


def _tokenize(s: str) -> list[str]:
    """Whitespace-led word pieces: a stand-in for a real tokenizer."""
    return _TOKEN_RE.findall(s)


def _fake_id(tok: str) -> int:
    return zlib.crc32(tok.encode()) % 50_000


def _json_or_text(raw: bytes) -> Any:
    """A request body as JSON (:func:`tackroom.wire.loads`), or its text when it is not JSON."""
    try:
        return loads(raw) if raw.strip() else None
    except ApiError:
        return raw.decode(errors="replace")


def _prompt_size(body: dict[str, Any]) -> int:
    n = 0
    for m in body.get("messages") or []:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            n += len(_tokenize(content))
        elif isinstance(content, list):
            n += sum(len(_tokenize(p.get("text", ""))) for p in content if isinstance(p, dict))
        n += 4  # role and separators, roughly as chat templates add
    return n


def _with_key(reply: Reply, headers: dict[str, str]) -> Reply:
    """``reply`` with ``{key}`` replaced by the API key the request carried."""
    key = headers.get("authorization", "").removeprefix("Bearer ") or \
        headers.get("x-api-key", "")
    text_ = None if reply.text is None else reply.text.replace("{key}", key)
    return replace(reply, text=text_, tool_calls=[
        (tc[0], tc[1].replace("{key}", key)) if isinstance(tc, tuple) else tc
        for tc in reply.tool_calls])


def scripted_completion(reply: Reply, chat: dict[str, Any]) -> tuple[Completion, Shape]:
    """A 200 reply to the chat-completions body ``chat``, as the pivot every dialect shapes.

    Log-probs are sent when ``chat`` asks ``logprobs``, token ids (the reply's and
    the prompt's) when it asks ``return_token_ids``; made up deterministically
    when the reply does not script them.
    """
    calls: list[Any] = [tc if isinstance(tc, dict) else
                        ToolCall(f"call_{uuid.uuid4().hex[:12]}_{i}", tc[0], tc[1])
                        for i, tc in enumerate(reply.tool_calls)]
    tokens = reply.tokens if reply.tokens is not None else _tokenize(reply.text or "")
    if reply.logprobs is not None and len(reply.logprobs) != len(tokens):
        tokens = [f"<t{i}>" for i in range(len(reply.logprobs))]
    n_completion = reply.completion_tokens
    if n_completion is None:
        n_completion = len(tokens) + sum(
            len(_tokenize(json.dumps(tc if isinstance(tc, dict) else tc.to_dict())))
            for tc in calls)
    n_prompt = reply.prompt_tokens if reply.prompt_tokens is not None else _prompt_size(chat)
    values = reply.logprobs if reply.logprobs is not None else [-0.25] * len(tokens)
    entries = None
    if chat.get("logprobs"):
        entries = [{"token": tok, "logprob": lp, "bytes": list(tok.encode()),
                    "top_logprobs": []} for tok, lp in zip(tokens, values, strict=True)]
    ids = reply.token_ids if reply.token_ids is not None else [_fake_id(t) for t in tokens]
    # Streamed one chunk per token when the tokens spell the text (and match the ids).
    pieces = tokens if "".join(tokens) == (reply.text or "") and tokens \
        and len(ids) == len(tokens) else None
    completion = Completion(
        content=reply.text, tool_calls=calls,
        finish_reason=reply.finish_reason or ("tool_calls" if calls else "stop"),
        prompt_tokens=n_prompt, completion_tokens=n_completion, token_ids=ids,
        logprobs=values if entries is not None else None, logprob_entries=entries,
        pieces=pieces, prompt_token_ids=(reply.prompt_token_ids
                                         if reply.prompt_token_ids is not None
                                         else list(range(n_prompt))))
    opts = chat.get("stream_options")
    shape = Shape(reply.model or chat.get("model") or "scripted-model",
                  include_usage=isinstance(opts, dict) and opts.get("include_usage") is True,
                  token_ids=chat.get("return_token_ids") is True)
    return completion, shape
