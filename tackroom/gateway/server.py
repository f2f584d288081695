"""The recording model gateway: an OpenAI-compatible endpoint in front of any tackroom Policy.

An agent CLI that tackroom does not control (mini-swe-agent, Aider, Qwen Code,
OpenHands, ...) is pointed at the gateway with ``OPENAI_BASE_URL`` /
``OPENAI_API_KEY`` set to its episode's route; every model call it makes
becomes a :class:`~tackroom.core.episode.Turn` of that episode::

    async with ModelGateway(policy) as gw:
        route = gw.open_episode(Sampling(temperature=0.0, max_tokens=512))
        ...  # run the CLI with route.env()
        gw.close_episode(route.token)
        route.turns  # what the CLI asked and what the model answered

Endpoints::

    POST /v1/chat/completions   messages, tools, stream (SSE), logprobs
    GET  /v1/models             one model (``model_name``, default "tackroom")
    GET  /v1/models/{name}
    GET  /health                200 when up (no token needed)

Choices, and why:

* **One asyncio server on the caller's event loop**, HTTP/1.1 parsed by
  ``h11`` (keep-alive, pipelining, ``Content-Length`` and chunked request
  bodies, ``Expect: 100-continue``). Each connection is a task and each
  request awaits ``policy.act`` directly, so concurrent episodes reach the
  policy concurrently and its own batching (``HFPolicy``) or concurrency limit
  (``OpenAIPolicy``) applies — no threads, no second event loop.
* **Also on a Unix socket** when ``unix_socket`` is given: a sandboxed CLI
  without a network reaches the gateway through a socket bound into its
  sandbox. A stale socket file is replaced; one another server answers on is
  refused.
* **A route per episode.** ``open_episode`` makes a random bearer token
  (``secrets.token_urlsafe``); a request is attributed by ``Authorization:
  Bearer TOKEN`` (or ``x-api-key`` / ``api-key: TOKEN``). Tokens are looked up by
  their SHA-256, so lookup time says nothing about a token. Unknown, missing and
  closed tokens get 401. The CLI never sees the user's real key: the backend's
  key stays inside the policy.
* **Lenient about requests, strict about sampling.** Keys a CLI sends that do
  not apply (``n``, penalties, ``stop``, ``response_format``, ``user``, ...) are
  accepted and ignored; temperature, top_p, max_tokens and seed always come from
  the route's :class:`Sampling`, whatever the client asked. What it asked is
  kept per turn in ``route.requested`` for diagnosis. ``tool_choice: "none"``
  hides the tools from the policy; other choices are treated as ``"auto"``.
* **Streaming is replayed**: the policy answers whole, then the reply is sent as
  Server-Sent Events whose deltas concatenate to exactly the non-streaming reply
  (text, tool calls with ids, finish reason; a usage chunk when
  ``stream_options.include_usage``).
* **A turn budget per route**: ``open_episode(..., max_turns=N)`` answers N
  calls (those in flight count) and refuses every later one with a 400, code
  ``budget_exhausted`` — an error no client library retries (more than once),
  so a CLI that has no turn limit of its own, or ignores it, ends its run
  there. Refused calls never reach the policy and are counted in
  ``route.refused``, not in ``route.errors``.
* **Token ids and log-probs** are recorded whenever the backend gives them, and
  sent when the client asks ``logprobs`` (each token written ``token_id:N``, as
  vLLM's ``--return-tokens-as-token-ids`` does) or ``return_token_ids``.
* **The client is untrusted** (an agent in a sandbox can talk to the socket), so
  nothing it sends can crash the gateway or get a traceback. The HTTP rules are
  :mod:`tackroom.wire`'s, shared with ``tackroom serve``: strict framing (a
  request whose end is in doubt is a 400 and the connection closes), bodies
  over ``max_body`` get 413 before they are read, heads over 16 KiB 431, a
  request that does not arrive within ``read_timeout`` 408, a client that does
  not read its reply is cut off; every answer on every path and method is
  OpenAI's JSON error shape (400/401/404/405).
* **One client cannot starve the routes.** A connection counts as its route's
  once a request on it carries the route's token; until then it is
  unauthenticated: limited per peer and in all, and closed after 5 s idle (or
  sooner, for a newcomer). The connection ceiling is a share per open route
  (:attr:`ModelGateway.capacity`), so it follows the episodes in flight; at the
  ceiling the gateway stops accepting (clients wait in the listen backlog) and
  closes idle connections, and a body that does not fit ``max_buffered`` waits:
  legitimate calls are delayed, not refused.
  Backend failures are 503 (``InfraError``: transient, the client may retry) or
  502 (anything else) with a generic message — the details (backend URL, model)
  go to ``route.errors``, not to the agent. A prompt over the model's context is
  a 400 with code ``context_length_exceeded``, which agent CLIs recognise.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tackroom.core.episode import Turn
from tackroom.core.errors import (
    ConfigError,
    ContextLengthExceeded,
    InfraError,
    TackroomError,
)
from tackroom.core.policy import Policy, PolicyRequest, Sampling
from tackroom.wire import (
    MAX_BODY,
    READ_TIMEOUT,
    ApiError,
    ChatCall,
    HttpServer,
    Limits,
    Reply,
    Request,
    Shape,
    completion_body,
    dumps,
    error_reply,
    from_response,
    loads,
    parse_chat,
    sse_events,
    stream_chunks,
)

__all__ = ["BUDGET_STATUS", "DEFAULT_MODEL_NAME", "BudgetExhausted", "ModelGateway", "Route"]

log = logging.getLogger("tackroom.gateway")

#: The model name ``/v1/models`` lists unless the gateway is given another.
DEFAULT_MODEL_NAME = "tackroom"
#: Connections per open route in the default ceiling (see :attr:`ModelGateway.capacity`).
CONNECTIONS_PER_ROUTE = 4
#: Connections the ceiling allows with no route open (health checks, start-up).
BASE_CONNECTIONS = 256
#: Request-body bytes held by all connections at once, by default (see ``BodyBudget``).
MAX_BUFFERED = 256 * 2**20
_CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
_MODELS_PATHS = ("/v1/models", "/models")
_HEALTH_PATHS = ("/health", "/v1/health")
#: The status of a call refused because its route's turn budget is used up.
BUDGET_STATUS = 400


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


@dataclass
class Route:
    """One episode's way in: its token, base URL, enforced sampling and what it recorded.

    ``turns[i]`` is the i-th answered call (in the order the answers came);
    ``requested[i]`` is everything else that call's body held (the client's own
    ``temperature``, ``max_tokens``, ``stream``, ``model``, ...); ``errors`` the
    calls the backend failed (status sent, error kind, the full error line).
    """

    token: str
    base_url: str
    sampling: Sampling
    label: str = ""
    model: str = DEFAULT_MODEL_NAME
    turns: list[Turn] = field(default_factory=list)
    requested: list[dict[str, Any]] = field(default_factory=list)
    #: ``tools[i]``: the tool schemas call ``i`` offered (a CLI's own; ``None``: none).
    tools: list[list[dict[str, Any]] | None] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    closed: bool = False
    opened_at: float = field(default_factory=time.time)
    #: When the first call arrived (``time.time()``; ``None`` before): a CLI's start-up.
    first_call_at: float | None = None
    #: Answers this route's calls instead of the gateway's policy (an agent harness's
    #: scripted expert, which knows its episode's task), when set.
    policy: Any = field(default=None, repr=False)
    #: Model calls this route answers at most (the harness's ``[budget] turns``); a call
    #: past it is refused (see :data:`BUDGET_STATUS`) and counted in ``refused``.
    max_turns: int | None = None
    #: Calls refused because ``max_turns`` were used (the CLI asked for more).
    refused: int = 0
    #: Calls being answered now (they count against ``max_turns`` while in flight).
    pending: int = field(default=0, repr=False)

    @property
    def exhausted(self) -> bool:
        """Whether the turn budget is used up: ``max_turns`` calls answered or in flight."""
        return self.max_turns is not None and len(self.turns) + self.pending >= self.max_turns

    def env(self) -> dict[str, str]:
        """Environment variables that point an OpenAI-SDK-based CLI at this route."""
        return {"OPENAI_BASE_URL": self.base_url, "OPENAI_API_BASE": self.base_url,
                "OPENAI_API_KEY": self.token, "OPENAI_MODEL": self.model}

    def __repr__(self) -> str:  # never the token
        return (f"Route(label={self.label!r}, base_url={self.base_url!r}, "
                f"turns={len(self.turns)}, errors={len(self.errors)}, closed={self.closed})")


class ModelGateway:
    """An OpenAI-compatible HTTP endpoint on 127.0.0.1 (and a Unix socket) over ``policy``.

    Args:
        policy: any tackroom :class:`Policy`; the gateway calls ``act`` on the
            event loop it was started on and never closes the policy.
        host, port: where to listen over TCP; ``port=0`` picks a free port.
        unix_socket: a path to listen on as well (for sandboxed clients).
        model_name: the model ``/v1/models`` lists (what the CLI is told to use);
            any model name in a request is accepted.
        max_body: the largest request body, in bytes (413 past it).
        read_timeout: seconds a connection may stay idle between requests, and
            seconds a started request has to arrive whole (408 then); also how
            long a reply may wait for a client that does not read it.
        max_connections: open connections at most; by default a share per open
            route (:attr:`capacity`), within the process's file-descriptor limit.
            At the ceiling the gateway stops accepting (clients wait) and closes
            idle connections, unauthenticated ones first.
        max_buffered: request-body bytes all connections may hold at once (a body
            that does not fit waits; 503 after ``read_timeout``); by default the
            larger of 256 MiB and 32 bodies of ``max_body`` (never less than one body).
        limits: the admission limits (unauthenticated and per-route connections,
            :class:`~tackroom.wire.Limits`); ``max_connections`` overrides its ceiling.
    """

    def __init__(self, policy: Policy, *, host: str = "127.0.0.1", port: int = 0,
                 unix_socket: str | Path | None = None, model_name: str = DEFAULT_MODEL_NAME,
                 max_body: int = MAX_BODY, read_timeout: float = READ_TIMEOUT,
                 max_connections: int | None = None, max_buffered: int | None = None,
                 limits: Limits | None = None) -> None:
        if int(max_body) < 1 or float(read_timeout) <= 0 or \
                (max_connections is not None and int(max_connections) < 1):
            raise ConfigError(f"bad settings (max_body={max_body}, read_timeout="
                              f"{read_timeout}, max_connections={max_connections})",
                              "gateway", "use max_body >= 1, read_timeout > 0, "
                              "max_connections >= 1")
        self.policy = policy
        self.model_name = model_name or DEFAULT_MODEL_NAME
        self.max_body = int(max_body)
        self.read_timeout = float(read_timeout)
        if max_buffered is None:
            max_buffered = max(32 * self.max_body, MAX_BUFFERED)
        limits = limits or Limits()
        if max_connections is not None:
            limits.max_connections = int(max_connections)
        self.created = int(time.time())
        self._routes: dict[bytes, Route] = {}  # open routes, by their token's SHA-256
        self._closed_routes: set[bytes] = set()  # closed ones: the digest is all that is kept
        self._http = HttpServer(self._dispatch, host=host, port=port, unix_socket=unix_socket,
                                max_body=self.max_body, read_timeout=self.read_timeout,
                                max_buffered=max_buffered, limits=limits,
                                capacity=self.capacity, where="gateway")
        self._started = False
        self._closed = False

    # ------------------------------------------------------------------ life
    @property
    def host(self) -> str:
        return self._http.host

    @property
    def port(self) -> int:
        """The TCP port (the one picked, once started with ``port=0``)."""
        return self._http.port

    @property
    def unix_socket(self) -> Path | None:
        return self._http.unix_socket

    @property
    def max_connections(self) -> int:
        """Open connections at most, now (grows with the routes open, by default)."""
        return self._http.ceiling

    def capacity(self) -> int:
        """The default ceiling on connections: a share per episode in flight (open route)."""
        return BASE_CONNECTIONS + CONNECTIONS_PER_ROUTE * len(self._routes)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: the root an OpenAI client takes as ``base_url``."""
        if not self._started:
            raise RuntimeError("the gateway is not started: await gw.start() first")
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        host = "[::1]" if host == "::" else (f"[{host}]" if ":" in host else host)
        return f"http://{host}:{self.port}/v1"

    async def start(self) -> ModelGateway:
        """Listen (idempotent). Raises :class:`ConfigError` if an address cannot be bound."""
        if self._started:
            return self
        if self._closed:
            raise RuntimeError("this gateway was closed; make a new one")
        await self._http.start()
        self._started = True
        return self

    async def aclose(self) -> None:
        """Stop listening, end open connections, remove the Unix socket (idempotent)."""
        if self._closed:
            return
        self._closed = True
        await self._http.aclose()

    async def __aenter__(self) -> ModelGateway:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ---------------------------------------------------------------- routes
    def open_episode(self, sampling: Sampling, *, label: str = "",
                     policy: Policy | None = None, max_turns: int | None = None) -> Route:
        """A new route: its token and base URL go to the CLI, its turns fill as it calls.

        ``policy`` answers this route's calls instead of the gateway's own;
        ``max_turns`` caps the calls it answers (later ones are refused).
        """
        if max_turns is not None and (isinstance(max_turns, bool) or int(max_turns) < 1):
            raise ConfigError(f"max_turns = {max_turns!r}", "gateway",
                              "give a positive number of model calls, or None")
        token = secrets.token_urlsafe(32)
        route = Route(token=token, base_url=self.base_url, sampling=sampling, label=label,
                      model=self.model_name, policy=policy,
                      max_turns=None if max_turns is None else int(max_turns))
        self._routes[_digest(token)] = route
        return route

    def close_episode(self, token: str) -> Route | None:
        """Close a route: later calls with its token get 401, and its turns are final.

        A call in flight when the route closes is answered 401 and not recorded.
        The gateway forgets the route (its turns are the caller's now) and keeps
        only its token's digest. Returns the route; ``None`` if it was closed
        already. Raises ``KeyError`` for a token this gateway never gave out.
        """
        digest = _digest(token)
        if digest in self._closed_routes:
            return None
        route = self._routes.pop(digest)
        route.closed = True
        self._closed_routes.add(digest)
        return route

    def route(self, token: str) -> Route | None:
        """The open route of ``token``, or ``None``."""
        return self._routes.get(_digest(token))

    @property
    def routes(self) -> list[Route]:
        """The open routes."""
        return list(self._routes.values())

    @property
    def open_connections(self) -> int:
        """Client connections open now (TCP and Unix socket)."""
        return len(self._http.connections)

    @property
    def buffered_bytes(self) -> int:
        """Request-body bytes held now, across connections (bounded by ``max_buffered``)."""
        return self._http.budget.used

    # --------------------------------------------------------------- routing
    async def _dispatch(self, request: Request) -> Reply:
        path, method = request.path, request.method
        try:
            allowed = _allowed(path)
            if allowed is None:
                raise ApiError(404, f"no route {method} {path[:200]}; this gateway serves "
                                    "POST /v1/chat/completions and GET /v1/models")
            if method not in allowed:
                raise ApiError(405, f"use {' or '.join(allowed)} for {path}, not {method}",
                               headers={"Allow": ", ".join(allowed)})
            if path in _HEALTH_PATHS:
                return Reply(200, b'{"status":"ok"}')
            digest, route = self._authorize(request.headers)
            request.connection.identify(digest.hex())
            if path in _CHAT_PATHS:
                return await self._chat(route, request.body)
            return self._models(path)
        except ApiError as e:
            return error_reply(e)
        except Exception as e:  # noqa: BLE001 - never a traceback to the client
            log.exception("gateway request failed")
            return error_reply(ApiError(500, f"internal gateway error ({type(e).__name__})"))

    def _authorize(self, headers: Any) -> tuple[bytes, Route]:
        token = None
        for name, value in headers:
            if name == b"authorization":
                scheme, _, rest = value.decode("latin-1").strip().partition(" ")
                if scheme.lower() == "bearer":
                    token = rest.strip()
                    break
            elif name in (b"x-api-key", b"api-key"):
                token = value.decode("latin-1").strip()
                break
        digest = _digest(token) if token else b""
        route = self._routes.get(digest)
        if route is not None:
            return digest, route
        if digest in self._closed_routes:
            raise ApiError(401, "this episode's route is closed; its token no longer works",
                           code="invalid_api_key")
        raise ApiError(401, "missing or unknown token: send 'Authorization: Bearer <token>' "
                            "with the key this episode was given", code="invalid_api_key")

    def _models(self, path: str) -> Reply:
        entry = {"id": self.model_name, "object": "model", "created": self.created,
                 "owned_by": "tackroom"}
        if path in _MODELS_PATHS:
            return Reply(200, dumps({"object": "list", "data": [entry]}))
        name = path.split("/models/", 1)[1]
        if name != self.model_name:
            raise ApiError(404, f"The model `{name[:200]}` does not exist. Served: "
                                f"{self.model_name}", code="model_not_found")
        return Reply(200, dumps(entry))

    async def _chat(self, route: Route, body: bytes) -> Reply:
        if route.first_call_at is None:
            route.first_call_at = time.time()
        call = parse_chat(loads(body))
        if route.exhausted:
            route.refused += 1
            raise BudgetExhausted(route.max_turns or 0)
        request = PolicyRequest(messages=call.messages, tools=call.tools,
                                sampling=route.sampling)
        t0 = time.perf_counter()
        route.pending += 1
        try:
            response = await (route.policy or self.policy).act(request)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a backend failure is the backend's, not ours
            raise self._failed(route, call, e, time.perf_counter() - t0) from None
        finally:
            route.pending -= 1
        t_policy = time.perf_counter() - t0
        if route.closed:
            raise ApiError(401, "this episode's route was closed while the model answered",
                           code="invalid_api_key")
        reply = from_response(response, logprobs=call.logprobs)
        route.turns.append(Turn(
            index=len(route.turns), messages=call.sent, raw_text=response.text,
            tool_calls=[tc.to_dict() for tc in reply.tool_calls],
            prompt_tokens=int(response.prompt_tokens),
            completion_tokens=int(response.completion_tokens),
            token_ids=response.token_ids, logprobs=response.logprobs,
            adapter=response.adapter, t_policy=t_policy))
        route.requested.append(call.requested)
        route.tools.append(call.tools)
        shape = Shape(self.model_name, include_usage=call.include_usage,
                      token_ids=call.logprobs or call.token_ids)
        rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if call.stream:
            return Reply(200, sse_events(stream_chunks(reply, shape, rid=rid, created=created)),
                         content_type=b"text/event-stream", stream=True)
        return Reply(200, dumps(completion_body(reply, shape, rid=rid, created=created)))

    def _failed(self, route: Route, call: ChatCall, e: Exception,
                t_policy: float) -> ApiError:
        """Record a backend failure on the route; the error the client gets (no details)."""
        if isinstance(e, ContextLengthExceeded):
            err = ApiError(400, "This model's maximum context length is exceeded by these "
                                "messages; shorten them", param="messages",
                           code="context_length_exceeded")
        elif isinstance(e, InfraError):
            err = ApiError(503, "the model backend is unavailable (infrastructure error); "
                                "retry later", code="backend_unavailable")
        else:
            err = ApiError(502, f"the model backend failed ({type(e).__name__})",
                           code="backend_error")
        if not isinstance(e, TackroomError):
            log.error("gateway backend %s failed", getattr(self.policy, "id", "?"),
                      exc_info=e)
        line = e.line() if isinstance(e, TackroomError) else f"{type(e).__name__}: {e}"
        route.errors.append({"status": err.status, "kind": type(e).__name__,
                             "message": line[:2000], "t_policy": t_policy,
                             "after_turn": len(route.turns), "requested": call.requested})
        return err


class BudgetExhausted(ApiError):
    """The refusal of a call past its route's ``max_turns``: final, not to be retried.

    A 400 (``invalid_request_error``, code ``budget_exhausted``): what every
    client library treats as final. OpenAI's SDKs retry 408/409/429/5xx, and
    litellm (under mini-swe-agent, Aider and OpenHands) maps the other statuses
    it has no class for — 403 and 402 among them — to a generic ``APIError``
    that Aider retries for a minute; a 400 is a ``BadRequestError``, which none
    of the shipped CLIs retries more than once. The message names no context
    length (a CLI would compact its history and call again).
    """

    def __init__(self, max_turns: int) -> None:
        super().__init__(BUDGET_STATUS, f"this episode's turn budget of {max_turns} model "
                                        "call(s) is used up; stop here",
                         code="budget_exhausted")


def _allowed(path: str) -> tuple[str, ...] | None:
    if path in _CHAT_PATHS:
        return ("POST",)
    if path in _HEALTH_PATHS or path in _MODELS_PATHS or any(
            path.startswith(p + "/") for p in _MODELS_PATHS):
        return ("GET", "HEAD")
    return None
