"""``tackroom serve MODEL_DIR``: an OpenAI-compatible (and Anthropic-, ...) HTTP server over ``hf``.

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

and every route of every registered API dialect (:mod:`tackroom.wire.dialect`):
Anthropic's ``POST /v1/messages`` (and ``/v1/messages/count_tokens``: the
prompt's length under the chat template), ... Each is translated to a
chat-completions request, read as strictly as one (a knob the backend cannot
honour is a 400), and answered in its own API's shape, streamed or not; its
errors too. The API key may come as ``Authorization: Bearer``, ``x-api-key``,
``x-goog-api-key`` or ``?key=``.

Every completion names the adapter that wrote it: ``model`` is the adapter's
name (or the base model's), and the ``X-Tackroom-Adapter`` header says the same
(``base`` for the base model).

Choices, and why:

* **The wire package's HTTP stack** (:mod:`tackroom.wire`, h11 on asyncio, the
  gateway's too): no ASGI stack to install for a server that mostly waits on
  ``generate``. Connections and requests are served on *one* asyncio event loop
  in a background thread (:mod:`tackroom.serve.engine`), so
  :class:`~tackroom.policies.hf_policy.HFPolicy` batches concurrent requests
  from different connections exactly as it batches concurrent ``act`` calls
  (generation itself runs in the policy's worker thread). All tokenizer work
  also runs on that loop thread: Hugging Face fast tokenizers are not safe to
  share between threads.
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
  ``HFPolicy``), whatever ``temperature`` / ``top_k`` / ``top_p`` are.
* **Sampling** honours ``temperature``, ``top_k`` (``0`` or ``-1``: off, as in vLLM;
  applied before ``top_p``, as vLLM and transformers do), ``top_p`` and ``seed``.
* **Sampling knobs we cannot honour are refused** (400, naming the field):
  ``n > 1``, penalties, ``min_p``, ``logit_bias``, ``top_logprobs > 0``,
  ``response_format`` other than text, ``tool_choice`` ``"required"`` or a named
  function. A silently ignored knob would make a comparison quietly wrong.
* **Hostile clients are contained** by the wire stack's rules, the gateway's
  too: strict framing (two ``Content-Length`` headers, or one beside
  ``Transfer-Encoding``, or bad chunking: 400 and the connection closed); a
  listen backlog of 1024; a request that does not arrive within
  ``read_timeout`` (30 s) is a 408; a body over ``max_body`` (8 MB) is a 413 sent
  before the body is read; the admission limits of
  :class:`~tackroom.wire.Limits` (an unauthenticated idle connection is closed
  after 5 s, or sooner for a newcomer). Every answer, on every path and method,
  is OpenAI's JSON error shape (404 unknown path, 405 wrong method, 400 for a
  malformed request); ``NaN``/``Infinity``, unknown roles and content parts
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

import hmac
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tackroom.core.errors import ConfigError, PolicyError
from tackroom.serve.engine import _Engine
from tackroom.wire import (
    DEFAULT_MAX_TOKENS,
    MAX_BODY,
    READ_TIMEOUT,
    ApiError,
    HttpServer,
    Limits,
    Reply,
    Request,
    Shape,
    dumps,
    first_line,
    loads,
    parse_chat_request,
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
from tackroom.wire.dialect import Route as DialectRoute

__all__ = ["ModelServer", "ServerThread", "serve_main"]

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
#: Connections the server keeps open at most, by default (within the descriptor limit).
MAX_CONNECTIONS = 4096


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
        limits: the admission limits (:class:`~tackroom.wire.Limits`): a client
            that sent the API key (any client, without one) counts as identified.

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
                 read_timeout: float | None = READ_TIMEOUT, limits: Limits | None = None) -> None:
        if (model_dir is None) == (policy is None):
            raise ConfigError("give a model directory or a loaded policy, not both or neither",
                              "serve", "tackroom serve MODEL_DIR")
        self._owns_policy = policy is None
        if policy is None:
            from tackroom.policies.hf_policy import HFPolicy

            assert model_dir is not None  # checked above: exactly one of the two is given
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
        self.read_timeout = float(read_timeout or READ_TIMEOUT)
        self.http = HttpServer(self._handle, host=host, port=int(port), max_body=self.max_body,
                               read_timeout=self.read_timeout,
                               max_buffered=max(32 * self.max_body, 256 * 2**20),
                               limits=limits, capacity=lambda: MAX_CONNECTIONS, where="serve")
        self.http.bind()
        self.host = host
        self.port = self.http.port
        self.engine = _Engine(policy, coalesce_ms)
        self.engine.is_served = lambda name: name in self.served
        #: Completions answered per model name (adapter, or the base model's name).
        self.answered: dict[str, int] = {}
        self._answered_lock = threading.Lock()
        self._stopped = threading.Event()
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
        return self._load_on_loop(name, path)

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
        return self._unload_on_loop(name)

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

    # ------------------------------------------------------------- requests
    def _authorized(self, request: Request) -> bool:
        if not self.api_key:
            return True
        key = credential(request.headers, request.target) or ""
        return hmac.compare_digest(key.encode("utf-8", "surrogateescape"),
                                   self.api_key.encode())

    def _check_auth(self, request: Request) -> None:
        if not self._authorized(request):
            raise ApiError(401, "missing or wrong API key: send the header "
                                "'Authorization: Bearer <key>' (or x-api-key, x-goog-api-key) "
                                "with the key the server was started with",
                           code="invalid_api_key")
        request.connection.identify("key" if self.api_key else request.connection.peer)

    async def _handle(self, request: Request) -> Reply:
        """Answer one request (on the engine's loop); every error in its dialect's JSON shape."""
        path, method = request.path, request.method
        t0 = time.perf_counter()
        found = None if path in _OWN_ROUTES else find(method, path, query_of(request.target))
        dialect = found[0] if found else None
        try:
            reply = await self._route(request, path, method, found)
        except ApiError as e:
            reply = dialect_error_reply(dialect, e)
        except Exception as e:  # noqa: BLE001 - never a traceback to the client
            if self.log:
                import traceback

                traceback.print_exc(file=sys.stderr)
            reply = dialect_error_reply(dialect, ApiError(
                500, f"internal error ({type(e).__name__}: {first_line(e)})"))
        if self.log:
            sys.stderr.write(f"{request.connection.peer} - \"{method} {path}\" {reply.status} "
                             f"{time.perf_counter() - t0:.3f}s\n")
        return reply

    async def _route(self, request: Request, path: str, method: str,
                     found: tuple[Dialect, DialectRoute, re.Match[str]] | None) -> Reply:
        allowed = _OWN_ROUTES.get(path) or (allowed_methods(path) if found else None)
        if allowed and method in allowed and path in _HEALTH:
            return Reply(200, b'{"status":"ok"}')
        self._check_auth(request)
        if allowed is None:
            raise ApiError(404, f"no route {method} {path[:200]}; this server answers "
                                f"{served_apis()}; and POST /v1/load_lora_adapter, "
                                "/v1/unload_lora_adapter")
        if method not in allowed:
            raise ApiError(405, f"use {' or '.join(allowed)} for {path}, not {method}",
                           headers={"Allow": ", ".join(allowed)})
        if path in _ADAPTER_ROUTES:
            text = getattr(self, _ADAPTER_ROUTES[path])(loads(request.body))
            return Reply(200, text.encode(), content_type=b"text/plain; charset=utf-8")
        assert found is not None  # the own routes are answered above
        dialect, api, match = found
        if api.kind == "models":
            if dialect.models is None:
                raise ApiError(404, f"the {dialect.name} dialect lists no models")
            return Reply(200, dumps(dialect.models(self.models(), match)))
        body = loads(request.body)
        chat = dialect.to_chat(body, match)
        if api.kind == "count_tokens":
            return self._count_tokens(dialect, chat)
        return await self._turn(dialect, body, chat)

    def _count_tokens(self, dialect: Dialect, chat: dict[str, Any]) -> Reply:
        """The prompt's token count under the model's chat template (no generation)."""
        if dialect.count is None:
            raise ApiError(404, f"the {dialect.name} dialect has no token counting")
        chat.setdefault("max_tokens", 1)  # a count needs no budget to generate
        req = parse_chat_request(chat, self.served, default_max_tokens=self.default_max_tokens)
        try:
            n = len(self.policy.prompt_ids(req.messages, req.tools))
        except Exception as e:  # noqa: BLE001 - rendering depends on the request alone
            raise ApiError(400, "the chat template cannot render these messages "
                                f"({type(e).__name__}: {first_line(e)})",
                           param="messages") from None
        return Reply(200, dumps(dialect.count(n)))

    async def _turn(self, dialect: Dialect, body: Any, chat: dict[str, Any]) -> Reply:
        req = parse_chat_request(chat, self.served, default_max_tokens=self.default_max_tokens)
        completion = await self.engine.complete_on_loop(req)
        served_by = [(b"X-Tackroom-Adapter", (completion.adapter or "base").encode())]
        name = completion.adapter or self.model_name
        with self._answered_lock:
            self.answered[name] = self.answered.get(name, 0) + 1
        shape = Shape(req.model, include_usage=req.include_usage,
                      token_ids=req.return_token_ids)
        if req.stream:
            return Reply(200, sse(dialect.events(completion, shape, body),
                                  done_marker=dialect.done_marker),
                         content_type=b"text/event-stream", headers=served_by, stream=True)
        return Reply(200, dumps(dialect.reply(completion, shape, body)), headers=served_by)

    def serve_forever(self) -> None:
        """Serve on the engine's loop until :meth:`shutdown` (blocks; Ctrl-C interrupts it)."""
        self.engine.run(self.http.start())
        while not self._stopped.wait(0.2):
            pass

    def shutdown(self) -> None:
        """Make :meth:`serve_forever` return (from any thread)."""
        self._stopped.set()

    def close(self) -> None:
        """Stop serving and free the address (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._stopped.set()
        self.http.close_now()
        if not self.engine.loop.is_closed():
            try:
                self.engine.run(self.http.aclose(), timeout=10)
            except Exception:  # noqa: BLE001,S110 - closing; nothing to report to anyone
                pass
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
            self.shutdown()
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


_HEALTH = ("/health", "/v1/health")
#: The adapter routes, and the :class:`ModelServer` method that answers each.
_ADAPTER_ROUTES = {"/v1/load_lora_adapter": "load_lora_adapter",
                   "/v1/unload_lora_adapter": "unload_lora_adapter"}
#: The routes this server answers itself (the others are the dialects'), and their methods.
_OWN_ROUTES: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(_HEALTH, ("GET", "HEAD")), **dict.fromkeys(_ADAPTER_ROUTES, ("POST",))}
