"""A scripted, real OpenAI-compatible HTTP server for tests and examples.

It listens on 127.0.0.1 (a free port), serves ``POST /v1/chat/completions``
(non-streaming) and ``GET /v1/models`` in the OpenAI wire shape, answers each
chat request with the next scripted :class:`Reply`, and records what it
received. Because it is a real server, the client under test runs its whole
network path: the ``openai`` SDK, httpx, timeouts, retries.

    from tackroom.testing import ScriptedOpenAIServer, text, tool_call, error

    script = [error(500), text("hello"), tool_call("click", '{"ref": "b1"}')]
    with ScriptedOpenAIServer(script) as srv:
        policy = OpenAIPolicy("scripted", base_url=srv.base_url)
        ...
        assert len(srv.requests) == 3

Log-probs and token ids are sent only when the request asks for them
(``logprobs: true`` / ``return_token_ids: true``), as OpenAI and vLLM do; when a
reply does not script them the server makes up deterministic ones.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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
    """One request the server received: method, path, headers (lower-cased), JSON body."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


Script = Iterable[Reply | str] | Callable[[dict[str, Any]], Reply | str | None]


class ScriptedOpenAIServer:
    """A real OpenAI-compatible server on 127.0.0.1 that answers from a script.

    ``script`` is a list of replies (a ``str`` is a text reply), consumed in the
    order requests arrive, or a callable ``(request_json) -> Reply | str | None``
    called for each chat request. When the list runs out (or the callable
    returns ``None``) the server answers ``default`` if given, else HTTP 500
    saying the script is exhausted. ``models`` (when given) is what
    ``/v1/models`` lists, and a request for any other model gets a 404 as vLLM
    sends; without it every model name is accepted. ``huge_models`` makes the
    model list a body of that many bytes (a hostile server's).
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
        self._stop = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._bound_port: int | None = None
        self.received: list[RecordedRequest] = []
        self.in_flight = 0
        self.max_concurrent = 0
        self.bytes_sent = 0  # body bytes written so far

    # ------------------------------------------------------------------ life
    def start(self) -> ScriptedOpenAIServer:
        self._stop.clear()
        handler = type("_Handler", (_Handler,), {"server_ref": self})
        self._httpd = ThreadingHTTPServer((self._host, self._port), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
            name="scripted-openai-server", daemon=True)
        self._thread.start()
        self._bound_port = self._httpd.server_address[1]
        return self

    def stop(self) -> None:
        self._stop.set()  # wakes handlers sleeping on a scripted delay
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

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
        with self._lock:
            return [r for r in self.received if r.path.endswith("/chat/completions")]

    @property
    def requests(self) -> list[Any]:
        """The JSON bodies of every chat-completions request, in arrival order."""
        return [r.body for r in self.chat_requests]

    @property
    def headers(self) -> list[dict[str, str]]:
        """The headers (names lower-cased) of every chat-completions request."""
        return [r.headers for r in self.chat_requests]

    def push(self, *replies: Reply | str) -> None:
        """Append replies to a list script (e.g. between two phases of a test)."""
        with self._lock:
            self._queue.extend(replies)

    # ------------------------------------------------------------- internals
    def _record(self, req: RecordedRequest) -> None:
        with self._lock:
            self.received.append(req)

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            if self._script is not None:
                nxt = self._script(body)
            elif self._queue:
                nxt = self._queue.pop(0)
            else:
                nxt = None
            n_chat = sum(1 for r in self.received if r.path.endswith("/chat/completions"))
        if nxt is None:
            nxt = self.default
        if nxt is None:
            return error(500, f"ScriptedOpenAIServer: script exhausted (request #{n_chat} "
                              "has no scripted reply)")
        return Reply(text=nxt) if isinstance(nxt, str) else nxt

    def _enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_concurrent = max(self.max_concurrent, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1


# ---------------------------------------------------------------- wire shape
_TOKEN_RE = re.compile(r"\s*\S+|\s+")


def _tokenize(s: str) -> list[str]:
    """Whitespace-led word pieces: a stand-in for a real tokenizer."""
    return _TOKEN_RE.findall(s)


def _fake_id(tok: str) -> int:
    return zlib.crc32(tok.encode()) % 50_000


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


def completion_body(reply: Reply, request: dict[str, Any]) -> dict[str, Any]:
    """The ``chat.completion`` JSON object for a 200 reply to ``request``."""
    tool_calls = []
    for i, tc in enumerate(reply.tool_calls):
        if isinstance(tc, dict):
            tool_calls.append(tc)
        else:
            name, args = tc
            tool_calls.append({"id": f"call_{uuid.uuid4().hex[:12]}_{i}", "type": "function",
                               "function": {"name": name, "arguments": args}})
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if tool_calls:
        message["tool_calls"] = tool_calls

    tokens = reply.tokens if reply.tokens is not None else _tokenize(reply.text or "")
    if reply.logprobs is not None and len(reply.logprobs) != len(tokens):
        tokens = [f"<t{i}>" for i in range(len(reply.logprobs))]
    n_completion = reply.completion_tokens
    if n_completion is None:
        n_completion = len(tokens) + sum(
            len(_tokenize(json.dumps(tc))) for tc in tool_calls)
    n_prompt = reply.prompt_tokens if reply.prompt_tokens is not None else _prompt_size(request)

    logprobs = None
    if request.get("logprobs"):
        values = reply.logprobs if reply.logprobs is not None else [-0.25] * len(tokens)
        logprobs = {"content": [
            {"token": tok, "logprob": lp, "bytes": list(tok.encode()), "top_logprobs": []}
            for tok, lp in zip(tokens, values, strict=True)], "refusal": None}

    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "finish_reason": reply.finish_reason or ("tool_calls" if tool_calls else "stop"),
        "logprobs": logprobs,
    }
    out: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": reply.model or request.get("model") or "scripted-model",
        "choices": [choice],
        "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_completion,
                  "total_tokens": n_prompt + n_completion},
    }
    if request.get("return_token_ids"):  # vLLM's extension
        choice["token_ids"] = (reply.token_ids if reply.token_ids is not None
                               else [_fake_id(t) for t in tokens])
        out["prompt_token_ids"] = (reply.prompt_token_ids if reply.prompt_token_ids is not None
                                   else list(range(n_prompt)))
    return out


def _error_body(message: str, status: int) -> dict[str, Any]:
    kind = {400: "BadRequestError", 401: "AuthenticationError", 403: "PermissionDeniedError",
            404: "NotFoundError", 429: "RateLimitError"}.get(status, "InternalServerError")
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


class _Handler(BaseHTTPRequestHandler):
    server_ref: ScriptedOpenAIServer  # set on the per-server subclass
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers do

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        pass  # tests stay quiet; requests are recorded instead

    def _headers(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.headers.items()}

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None,
              trickle: float = 0.0) -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        srv = self.server_ref
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if trickle > 0:
                self.wfile.flush()
                for i in range(len(data)):
                    if srv._stop.wait(trickle):
                        self.close_connection = True
                        return
                    self.wfile.write(data[i:i + 1])
                    self.wfile.flush()
                    srv.bytes_sent += 1
                return
            self.wfile.write(data)
            self.wfile.flush()
            srv.bytes_sent += len(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (timeout); nothing to do

    def _send_huge(self, size: int, status: int = 200, head: bytes | None = None) -> None:
        """A reply of ``size`` bytes, written in chunks until done or the client leaves."""
        srv = self.server_ref
        if head is None:
            head = (b'{"object": "chat.completion", "choices": [{"message": {"content": "'
                    if status == 200 else b'{"error": {"message": "')
        chunk = b"x" * 65536
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            self.wfile.write(head)
            sent = len(head)
            while sent < size and not srv._stop.is_set():
                piece = chunk[:size - sent]
                self.wfile.write(piece)
                sent += len(piece)
                srv.bytes_sent += len(piece)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
        self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        srv = self.server_ref
        srv._record(RecordedRequest("GET", self.path, self._headers(), None))
        if self.path.rstrip("/").endswith("/models") and srv.huge_models:
            self._send_huge(srv.huge_models, head=b'{"object": "list", "data": [{"id": "')
        elif self.path.rstrip("/").endswith("/models"):
            names = srv.models or ["scripted-model"]
            now = int(time.time())
            self._send(200, {"object": "list", "data": [
                {"id": m, "object": "model", "created": now, "owned_by": "tackroom"}
                for m in names]})
        else:
            self._send(404, _error_body(f"no route GET {self.path}", 404))

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        srv = self.server_ref
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"null")
        except json.JSONDecodeError:
            body = raw.decode(errors="replace")
        srv._record(RecordedRequest("POST", self.path, self._headers(), body))
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, _error_body(f"no route POST {self.path}", 404))
            return
        if not isinstance(body, dict):
            self._send(400, _error_body("request body is not a JSON object", 400))
            return
        srv._enter()
        try:
            self._answer(srv, body)
        finally:
            srv._leave()

    def _answer(self, srv: ScriptedOpenAIServer, body: dict[str, Any]) -> None:
        if body.get("stream"):
            self._send(400, _error_body("ScriptedOpenAIServer does not stream", 400))
            return
        if srv.models is not None and body.get("model") not in srv.models:
            self._send(404, _error_body(f"The model `{body.get('model')}` does not exist.", 404))
            return
        reply = srv._next_reply(body)
        if reply.delay > 0 and srv._stop.wait(reply.delay):
            self.close_connection = True
            return
        if reply.drop:
            self.close_connection = True
            return
        if reply.huge:
            self._send_huge(reply.huge, reply.status)
            return
        if reply.echo_key:
            key = self._headers().get("authorization", "").removeprefix("Bearer ")
            text_ = None if reply.text is None else reply.text.replace("{key}", key)
            reply = replace(reply, text=text_, tool_calls=[
                (tc[0], tc[1].replace("{key}", key)) if isinstance(tc, tuple) else tc
                for tc in reply.tool_calls])
        if reply.body is not None:
            self._send(reply.status, reply.body, reply.headers, reply.trickle)
        elif reply.status != 200:
            self._send(reply.status, _error_body(reply.error or f"error {reply.status}",
                                                 reply.status), reply.headers)
        else:
            self._send(200, completion_body(reply, body), reply.headers, reply.trickle)
