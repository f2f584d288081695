"""The recording model gateway: every API dialect's endpoint in front of any tackroom Policy.

An agent CLI that tackroom does not control (mini-swe-agent, Aider, Qwen Code,
OpenHands, Claude Code, ...) is pointed at the gateway with ``OPENAI_BASE_URL`` /
``OPENAI_API_KEY`` (or ``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY``, ...: see
:meth:`Route.env`) set to its episode's route; every model call it makes
becomes a :class:`~tackroom.core.episode.Turn` of that episode::

    async with ModelGateway(policy) as gw:
        route = gw.open_episode(Sampling(temperature=0.0, max_tokens=512))
        ...  # run the CLI with route.env()
        gw.close_episode(route.token)
        route.turns  # what the CLI asked and what the model answered

Endpoints: every route of every registered API dialect
(:mod:`tackroom.wire.dialect`: chat completions, Anthropic Messages, ... — each
translated to a chat-completions call, answered, and shaped back in its own
API, streamed or not), and::

    GET  /v1/models             one model (``model_name``, default "tackroom")
    GET  /v1/models/{name}
    GET  /health                200 when up (no token needed)

A route's kind says what happens: ``turn`` is a model call (recorded,
budgeted); ``count_tokens`` a side call answered without the model (the
policy's exact count when it has ``prompt_ids``, else an estimate: see
:meth:`ModelGateway._count_tokens`), kept in ``route.side_calls``; ``models``
the model list. A request on an episode's token for a path no dialect has is
answered 404 and kept in ``route.unanswered`` (method, path, User-Agent), so
the episode can say which API its CLI needed.

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
  Bearer TOKEN`` (or ``x-api-key`` / ``api-key`` / ``x-goog-api-key: TOKEN``, or
  ``?key=TOKEN``: :func:`~tackroom.wire.dialect.credential`). Tokens are looked up by
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
* **Side calls are told from agent turns** (:mod:`tackroom.gateway.calls`): a
  CLI's session title, summary or sub-agent call is recorded as a turn labelled
  ``side`` (and each call's ``thread``), answered by a scripted expert's
  ``side_reply`` instead of a step of its script, and never counted in the budget.
* **A turn budget per route**: ``open_episode(..., max_turns=N)`` answers N
  agent turns (those in flight count) and refuses every later one with a 400, code
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
  a JSON error (400/401/404/405) in the shape of the dialect whose path it
  was (OpenAI's for a path no dialect has).
* **One client cannot starve the routes.** A connection counts as its route's
  once a request on it carries the route's token; until then it is
  unauthenticated: limited per peer and in all, and closed after 5 s idle (or
  sooner, for a newcomer). The connection ceiling is a share per open route
  (:attr:`ModelGateway.capacity`), so it follows the episodes in flight; at the
  ceiling the gateway stops accepting (clients wait in the listen backlog) and
  closes idle connections, and a body that does not fit ``max_buffered`` waits:
  legitimate calls are delayed, not refused.
  Backend failures are 503 (``InfraError``: transient, the client may retry),
  400 with code ``unanswerable_request`` (a ``ConfigError`` or ``HarnessError``: the
  run's own setup cannot answer the call, so retrying is pointless) or
  502 (anything else) with a generic message — the details (backend URL, model)
  go to ``route.errors``, not to the agent. A prompt over the model's context is
  a 400 with code ``context_length_exceeded``, which agent CLIs recognise.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
import time
from pathlib import Path

from tackroom.core.episode import Turn
from tackroom.core.errors import (
    ConfigError,
    ContextLengthExceeded,
    HarnessError,
    InfraError,
    TackroomError,
)
from tackroom.core.policy import Policy, PolicyRequest, PolicyResponse, Sampling
from tackroom.gateway.calls import CallClassifier, SideCallRule
from tackroom.gateway.routes import (
    BUDGET_STATUS,
    DEFAULT_MODEL_NAME,
    BudgetExhausted,
    Route,
    digest,
)
from tackroom.wire import (
    MAX_BODY,
    READ_TIMEOUT,
    ApiError,
    ChatCall,
    Completion,
    HttpServer,
    Limits,
    Reply,
    Request,
    Shape,
    dumps,
    from_response,
    loads,
    parse_chat,
)
from tackroom.wire.dialect import (
    Dialect,
    allowed_methods,
    credential,
    dialect_error_reply,
    find,
    query_of,
    served_apis,
    sse,
)

__all__ = ["BUDGET_STATUS", "DEFAULT_MODEL_NAME", "BudgetExhausted", "ModelGateway", "Route"]

log = logging.getLogger("tackroom.gateway")

#: Connections per open route in the default ceiling (see :attr:`ModelGateway.capacity`).
CONNECTIONS_PER_ROUTE = 4
#: Connections the ceiling allows with no route open (health checks, start-up).
BASE_CONNECTIONS = 256
#: Request-body bytes held by all connections at once, by default (see ``BodyBudget``).
MAX_BUFFERED = 256 * 2**20
_HEALTH_PATHS = ("/health", "/v1/health")


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
                     policy: Policy | None = None, max_turns: int | None = None,
                     side_calls: tuple[SideCallRule, ...] = ()) -> Route:
        """A new route: its token and base URL go to the CLI, its turns fill as it calls.

        ``policy`` answers this route's calls instead of the gateway's own;
        ``max_turns`` caps the agent turns it answers (later ones are refused);
        ``side_calls`` are the harness's hints for telling side calls
        (:func:`tackroom.gateway.calls.read_rules`).
        """
        if max_turns is not None and (isinstance(max_turns, bool) or int(max_turns) < 1):
            raise ConfigError(f"max_turns = {max_turns!r}", "gateway",
                              "give a positive number of model calls, or None")
        token = secrets.token_urlsafe(32)
        route = Route(token=token, base_url=self.base_url, sampling=sampling, label=label,
                      model=self.model_name, policy=policy,
                      max_turns=None if max_turns is None else int(max_turns),
                      calls=CallClassifier(side_calls))
        self._routes[digest(token)] = route
        return route

    def close_episode(self, token: str) -> Route | None:
        """Close a route: later calls with its token get 401, and its turns are final.

        A call in flight when the route closes is answered 401 and not recorded.
        The gateway forgets the route (its turns are the caller's now) and keeps
        only its token's digest. Returns the route; ``None`` if it was closed
        already. Raises ``KeyError`` for a token this gateway never gave out.
        """
        key = digest(token)
        if key in self._closed_routes:
            return None
        route = self._routes.pop(key)
        route.closed = True
        self._closed_routes.add(key)
        return route

    def route(self, token: str) -> Route | None:
        """The open route of ``token``, or ``None``."""
        return self._routes.get(digest(token))

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
        """Answer one request: health, or a dialect's route (errors in that dialect's shape)."""
        path, method = request.path, request.method
        dialect: Dialect | None = None
        try:
            if path in _HEALTH_PATHS:
                if method not in ("GET", "HEAD"):
                    raise ApiError(405, f"use GET or HEAD for {path}, not {method}",
                                   headers={"Allow": "GET, HEAD"})
                return Reply(200, b'{"status":"ok"}')
            found = find(method, path, query_of(request.target))
            if found is None:
                self._note_unanswered(request)
                raise ApiError(404, f"no route {method} {path[:200]}; this gateway answers "
                                    f"{served_apis()}")
            dialect, api, match = found
            if not api.allows(method):
                allowed = allowed_methods(path)
                raise ApiError(405, f"use {' or '.join(allowed)} for {path}, not {method}",
                               headers={"Allow": ", ".join(allowed)})
            digest, route = self._authorize(request)
            request.connection.identify(digest.hex())
            if api.kind == "models":
                return self._models(dialect, match)
            if route.first_call_at is None:
                route.first_call_at = time.time()
            if api.kind == "count_tokens":
                return self._count_tokens(route, dialect, match, request.body)
            return await self._turn(route, dialect, match, request.body)
        except ApiError as e:
            return dialect_error_reply(dialect, e)
        except Exception as e:  # noqa: BLE001 - never a traceback to the client
            log.exception("gateway request failed")
            return dialect_error_reply(dialect, ApiError(
                500, f"internal gateway error ({type(e).__name__})"))

    def _authorize(self, request: Request) -> tuple[bytes, Route]:
        token = credential(request.headers, request.target)
        key = digest(token) if token else b""
        route = self._routes.get(key)
        if route is not None:
            return key, route
        if key in self._closed_routes:
            raise ApiError(401, "this episode's route is closed; its token no longer works",
                           code="invalid_api_key")
        raise ApiError(401, "missing or unknown token: send 'Authorization: Bearer <token>' "
                            "(or x-api-key / x-goog-api-key) with the key this episode was "
                            "given", code="invalid_api_key")

    def _note_unanswered(self, request: Request) -> None:
        """A request no dialect answers, on an episode's token: recorded on its route."""
        token = credential(request.headers, request.target)
        route = self._routes.get(digest(token)) if token else None
        if route is not None:
            route.note_unanswered(request.method, request.path, request.header(b"user-agent"))

    def _models(self, dialect: Dialect, match: re.Match[str]) -> Reply:
        entry = {"id": self.model_name, "object": "model", "created": self.created,
                 "owned_by": "tackroom"}
        if dialect.models is None:
            raise ApiError(404, f"the {dialect.name} dialect lists no models")
        return Reply(200, dumps(dialect.models([entry], match)))

    def _count_tokens(self, route: Route, dialect: Dialect, match: re.Match[str],
                      raw: bytes) -> Reply:
        """A token count (a side call: no turn, no budget): the policy's, or an estimate.

        A policy with ``prompt_ids`` (``hf``) counts the rendered prompt exactly;
        any other is estimated as a quarter of the characters of the messages
        and tools as JSON (about a token per four characters of English and
        code), which is what a CLI needs it for: deciding when to compact.
        """
        if dialect.count is None:
            raise ApiError(404, f"the {dialect.name} dialect has no token counting")
        call = parse_chat(dialect.to_chat(loads(raw), match))
        policy = route.policy or self.policy
        exact, n = False, 0
        prompt_ids = getattr(policy, "prompt_ids", None)
        if callable(prompt_ids):
            try:
                n, exact = len(prompt_ids(call.messages, call.tools)), True
            except Exception:  # noqa: BLE001 - a template that cannot render: estimate
                log.debug("prompt_ids failed; estimating the token count", exc_info=True)
        if not exact:
            chars = len(json.dumps([call.messages, call.tools], ensure_ascii=False))
            n = max(1, (chars + 3) // 4)
        route.side_calls.append({"kind": "count_tokens", "dialect": dialect.name,
                                 "tokens": n, "estimated": not exact})
        return Reply(200, dumps(dialect.count(n)))

    async def _turn(self, route: Route, dialect: Dialect, match: re.Match[str],
                    raw: bytes) -> Reply:
        """One model call: the dialect's body as chat, the policy's answer, recorded, replied."""
        body = loads(raw)
        call = parse_chat(dialect.to_chat(body, match))
        if dialect.name != "chat":
            call.requested["dialect"] = dialect.name
        kind = route.calls.classify(call.messages, call.tools,
                                    str(call.requested.get("model") or ""))
        route.relabel(kind.relabel)
        if kind.side is None and route.exhausted:  # side calls are outside the budget
            route.refused += 1
            raise BudgetExhausted(route.max_turns or 0)
        request = PolicyRequest(messages=call.messages, tools=call.tools,
                                sampling=route.sampling)
        # A scripted expert answers agent turns only: a side call gets its neutral answer.
        side_reply = getattr(route.policy, "side_reply", None) if kind.side else None
        t0 = time.perf_counter()
        agent_turn = int(kind.side is None)
        route.pending += agent_turn
        try:
            response = side_reply(request, kind.side) if side_reply is not None \
                else await (route.policy or self.policy).act(request)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a backend failure is the backend's, not ours
            raise self._failed(route, call, e, time.perf_counter() - t0) from None
        finally:
            route.pending -= agent_turn
        t_policy = time.perf_counter() - t0
        if route.closed:
            raise ApiError(401, "this episode's route was closed while the model answered",
                           code="invalid_api_key")
        reply = from_response(response, logprobs=call.logprobs)
        self._record_turn(route, call, response, reply, t_policy)
        route.turns[-1].side, route.turns[-1].thread = kind.side, kind.thread
        shape = Shape(self.model_name, include_usage=call.include_usage,
                      token_ids=call.logprobs or call.token_ids)
        if call.stream:
            return Reply(200, sse(dialect.events(reply, shape, body),
                                  done_marker=dialect.done_marker),
                         content_type=b"text/event-stream", stream=True)
        return Reply(200, dumps(dialect.reply(reply, shape, body)))

    def _record_turn(self, route: Route, call: ChatCall, response: PolicyResponse,
                     reply: Completion, t_policy: float) -> None:
        """Record one answered model call on its route: the turn, what was asked, the tools."""
        route.turns.append(Turn(
            index=len(route.turns), messages=call.sent, raw_text=response.text,
            tool_calls=[tc.to_dict() for tc in reply.tool_calls],
            prompt_tokens=int(response.prompt_tokens),
            completion_tokens=int(response.completion_tokens),
            token_ids=response.token_ids, logprobs=response.logprobs,
            prompt_token_ids=response.prompt_token_ids,
            adapter=response.adapter, t_policy=t_policy))
        route.requested.append(call.requested)
        route.tools.append(call.tools)

    def _failed(self, route: Route, call: ChatCall, e: Exception,
                t_policy: float) -> ApiError:
        """Record a backend failure on the route; the error the client gets (no details)."""
        if isinstance(e, ContextLengthExceeded):
            err = ApiError(400, "This model's maximum context length is exceeded by these "
                                "messages; shorten them", param="messages",
                           code="context_length_exceeded")
        elif isinstance(e, (ConfigError, HarnessError)):
            # The run's own setup cannot answer this request (e.g. an expert whose tool format
            # the CLI does not offer): the same call fails the same way every time, so a 400,
            # which clients take as final, not a 5xx that they retry with backoff.
            err = ApiError(400, "this request cannot be answered by the model behind this "
                                "gateway (its configuration)", code="unanswerable_request")
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
