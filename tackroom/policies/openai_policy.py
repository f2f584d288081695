"""The ``openai`` policy: any OpenAI-compatible chat-completions server.

vLLM, SGLang, Ollama, llama.cpp's server and OpenAI itself all speak this API.
Two clients speak it, chosen with ``client``:

* ``"lean"`` (the default, :mod:`tackroom.policies.openai_lean`): the request body
  is built as a dict, written with the stdlib ``json`` over a keep-alive HTTP/1.1 connection of
  :class:`~tackroom.policies.lean_http.LeanHTTP`, and the reply read as JSON.
  No per-call schema walk, no HTTP library: ~0.1 ms of CPU a call instead of
  the SDK's ~4 ms, which is what lets a thousand episodes share two cores.
* ``"sdk"``: the official ``openai`` SDK (on httpx), for servers or networks
  that need what it does and the lean client does not — proxies from
  ``HTTPS_PROXY``/``HTTP_PROXY`` (the default becomes ``"sdk"`` when one
  applies to the server's host), HTTP/2, redirects, brotli/zstd bodies. It lives
  in :mod:`tackroom.policies.openai_sdk` and is imported only by a policy that
  uses it, so lean runs never load the SDK (~0.3 s and ~24 MiB a process).

Both send the same JSON and go through the same code here for everything
else: the retries (ours, the SDK's ``max_retries`` is 0, so which failures are
retried, how often and how long we wait are explicit here and testable), the
whole-call deadline, error classification, reply caps, secrets and parsing. A
client only turns a request into a body, an HTTP status or a transport failure.

Failure classes, and why:

* connection refused / reset, timeouts, HTTP 429 and 5xx: transient or
  infrastructure trouble. Retried with exponential backoff and jitter; when the
  retries run out, :class:`InfraError` — the episode gets ``infra_error`` and is
  never scored as the model's failure.
* HTTP 401/403 (bad key), 404 (no such model), other 4xx (a request the server
  will never accept): retrying cannot help and every episode would fail the same
  way, so :class:`PolicyError` — the run stops with one clear line.
  A prompt longer than the server's context is a 400 too, but it belongs to one
  episode, not the run: :class:`ContextLengthExceeded` (a ``PolicyError``) lets
  the runner tell the two apart.

The API key is a secret: it is never part of ``id``, ``repr``, ``describe()``
or any error text, and server messages are scrubbed of it before we quote them
(OpenAI echoes part of a wrong key back in its 401 message). What the model
server returns (text, tool calls) is scrubbed of the key too, and the key is
registered with :func:`tackroom.core.secrets.register_secret` so that the
record store redacts it wherever it turns up. The same holds for a password in
the base URL (``http://user:pass@host/v1``), which is never printed either; a spec
that holds one is stored and printed through :func:`tackroom.core.secrets.redact_url`.

A hostile or broken server cannot hang or flood a run: ``timeout`` bounds the
whole call (a reply trickled one byte at a time times out like a silent one),
a reply's text and tool-call arguments are cut at ``max_reply_chars``
(``finish_reason`` becomes ``"length"`` and the text ends with a note saying
so), and at most ``max_reply_bytes`` of a body are read before the call fails.
Every other body — an error's (4xx/5xx), a model list's — is read to at most
:data:`MAX_OTHER_BODY_BYTES` and the rest dropped: the SDK would otherwise read
an error body whole before raising, however large the server makes it.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
from typing import Any
from urllib.parse import quote

from tackroom.core.errors import ContextLengthExceeded, InfraError, PolicyError
from tackroom.core.policy import PolicyRequest, PolicyResponse
from tackroom.core.secrets import MIN_SECRET_CHARS, REDACTED, register_secret
from tackroom.policies.openai_lean import LeanClient
from tackroom.policies.openai_reply import CUT_NOTE, parse_completion
from tackroom.policies.openai_spec import (
    check_url,
    is_local,
    is_openai_host,
    proxied,
    read_spec,
    split_userinfo,
)
from tackroom.policies.openai_wire import (
    START_SERVER,
    Client,
    Failure,
    Models,
    Status,
    TooLarge,
)
from tackroom.policies.options import construct

__all__ = ["CLIENTS", "CUT_NOTE", "ContextLengthExceeded", "OpenAIPolicy", "make_openai_policy"]

#: The wire clients ``OpenAIPolicy(client=...)`` takes.
CLIENTS = ("lean", "sdk")
#: The client when none is given and no proxy applies (tests switch it to run both).
DEFAULT_CLIENT = "lean"

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# OpenAI-style secret keys, in case a server quotes one we did not send.
_KEY_PATTERN = re.compile(r"\b(sk|rk|pk)-[A-Za-z0-9_\-*]{8,}")
#: The smallest default reply cap (characters); it grows with ``max_tokens``.
MIN_REPLY_CHARS = 16_384
#: The default body limit is this many bytes per character of the reply cap
#: (log-probs and JSON escapes make a body far bigger than its text), and at
#: least :data:`MIN_REPLY_BYTES`.
BYTES_PER_REPLY_CHAR = 64
MIN_REPLY_BYTES = 8 * 1024 * 1024
_CONTEXT_WORDS = ("context length", "context_length", "maximum context", "context window",
                  "too long", "max_model_len", "maximum model length")


class OpenAIPolicy:
    """A :class:`~tackroom.core.policy.Policy` backed by an OpenAI-compatible server.

    Args:
        model: the model name the server serves (for vLLM: ``--served-model-name``
            or a LoRA adapter's name).
        base_url: the API root ending in ``/v1``; default ``$OPENAI_BASE_URL``,
            else OpenAI's.
        api_key: default ``$OPENAI_API_KEY``. Without one, any server other than
            api.openai.com gets ``"EMPTY"``, as vLLM users pass.
        timeout: seconds for one HTTP attempt.
        max_retries: retries after the first attempt, for transient failures.
        max_concurrency: at most this many requests in flight from this policy.
        backoff_base, backoff_max: retry ``n`` (from 0) waits
            ``min(backoff_max, backoff_base * 2**n)`` times a jitter in [0.5, 1];
            a ``Retry-After`` header on a 429/503 is honoured up to ``backoff_max``.
        return_token_ids: ask for sampled token ids (vLLM's ``return_token_ids``
            extension). ``None`` (default): ask when the server is local, where it
            is almost surely vLLM/SGLang; hosted APIs may reject unknown fields.
        extra_body: more fields for every request (e.g. ``{"min_p": 0.05}``);
            they win over the request's own. A request whose :class:`Sampling`
            sets ``top_k`` sends it (vLLM's and SGLang's field; never sent when off).
        max_reply_chars: the most characters of text plus tool-call arguments
            kept from one reply; the rest is dropped, ``finish_reason`` becomes
            ``"length"`` and the text ends with :data:`CUT_NOTE`. ``None``
            (default): ``max(16384, 8 * max_tokens)`` for each request.
        max_reply_bytes: the most bytes of a response body read; past it the
            call fails with ``InfraError`` (not retried). ``None`` (default):
            ``max(8 MiB, 64 * the reply cap)``.
        client: ``"lean"`` or ``"sdk"`` (see the module docstring). ``None``
            (default): :data:`DEFAULT_CLIENT`, unless an ``HTTP(S)_PROXY`` variable applies to
            the server's host — only the SDK client goes through proxies.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        max_concurrency: int = 16,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
        return_token_ids: bool | None = None,
        extra_body: dict[str, Any] | None = None,
        max_reply_chars: int | None = None,
        max_reply_bytes: int | None = None,
        client: str | None = None,
    ) -> None:
        if not model:
            raise PolicyError("empty model name", "openai:", "write openai:MODEL")
        if (max_retries < 0 or max_concurrency < 1 or timeout <= 0
                or (max_reply_chars is not None and max_reply_chars < 1)
                or (max_reply_bytes is not None and max_reply_bytes < 1)):
            raise PolicyError(
                f"bad settings (max_retries={max_retries}, max_concurrency={max_concurrency}, "
                f"timeout={timeout}, max_reply_chars={max_reply_chars}, "
                f"max_reply_bytes={max_reply_bytes})", f"openai:{model}",
                "use max_retries >= 0, max_concurrency >= 1, timeout > 0, "
                "max_reply_chars >= 1, max_reply_bytes >= 1")
        if client is not None and client not in CLIENTS:
            raise PolicyError(f"unknown client {client!r}", f"openai:{model}",
                              f"use client={' or client='.join(CLIENTS)}")
        self.model = model
        given = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL)
        self.id = f"openai:{model}"
        self.base_url, _, password = split_userinfo(given.rstrip("/"))
        self.url = check_url(self.base_url, self.id)
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.max_concurrency = int(max_concurrency)
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.return_token_ids = (is_local(self.base_url) if return_token_ids is None
                                 else return_token_ids)
        self.extra_body = dict(extra_body or {})
        self.max_reply_chars = None if max_reply_chars is None else int(max_reply_chars)
        self.max_reply_bytes = None if max_reply_bytes is None else int(max_reply_bytes)

        key = api_key or os.environ.get("OPENAI_API_KEY")
        if not key:
            if is_openai_host(self.base_url):
                raise PolicyError(f"no API key for {self.url}", self.id,
                                  "set OPENAI_API_KEY or pass --base-url for a local server")
            key = "EMPTY"
        # Kept only inside the client and for scrubbing; never printed.
        self._has_key = key != "EMPTY"
        secrets = [key] if self._has_key else []
        if password:
            secrets += [password, quote(password, safe="")]
        self._secrets = sorted(set(secrets), key=len, reverse=True)
        # Long enough to redact from model output without mangling it.
        self._output_secrets = [v for v in self._secrets if len(v) >= MIN_SECRET_CHARS]
        for value in self._output_secrets:
            register_secret(value)  # the record store redacts it wherever it appears
        self.client = client or ("sdk" if proxied(self.base_url) else DEFAULT_CLIENT)
        self._client: Client
        if self.client == "sdk":
            from tackroom.policies.openai_sdk import SDKClient  # the SDK loads only here

            self._client = SDKClient(self.base_url, key, self.timeout, self.max_concurrency)
        else:
            self._client = LeanClient(self.base_url, key, self.max_concurrency)
        self._semaphore = asyncio.Semaphore(self.max_concurrency)

    # ------------------------------------------------------------ identity
    def __repr__(self) -> str:
        return f"OpenAIPolicy(model={self.model!r}, base_url={self.url!r})"

    def describe(self) -> dict[str, Any]:
        """Settings for the run config snapshot (no secrets)."""
        return {
            "backend": "openai",
            "id": self.id,
            "model": self.model,
            "base_url": self.url,
            "api_key_set": self._has_key,
            "timeout": self.timeout,
            "max_retries": self.max_retries,
            "max_concurrency": self.max_concurrency,
            "return_token_ids": self.return_token_ids,
            "extra_body": self._scrub_obj(self.extra_body),
            "max_reply_chars": self.max_reply_chars,
            "max_reply_bytes": self.max_reply_bytes,
            "client": self.client,
        }

    def reply_limits(self, max_tokens: int) -> tuple[int, int]:
        """``(characters kept, body bytes read)`` for a request with ``max_tokens``."""
        chars = self.max_reply_chars or max(MIN_REPLY_CHARS, 8 * int(max_tokens))
        size = self.max_reply_bytes or max(MIN_REPLY_BYTES, BYTES_PER_REPLY_CHAR * chars)
        return chars, size

    # ----------------------------------------------------------------- act
    async def act(self, request: PolicyRequest) -> PolicyResponse:
        s = request.sampling
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": request.messages,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "max_tokens": s.max_tokens,
        }
        if s.seed is not None:
            kwargs["seed"] = s.seed
        if request.tools:
            kwargs["tools"] = request.tools
            kwargs["tool_choice"] = "auto"
        if s.logprobs:
            kwargs["logprobs"] = True
        extra = self.extra_body
        if self.return_token_ids:
            extra = {**extra, "return_token_ids": True}
        if s.top_k:  # not an OpenAI field (vLLM's and SGLang's): sent only when set;
            extra = {"top_k": s.top_k, **extra}  # extra_body wins, as over every field
        max_chars, max_bytes = self.reply_limits(s.max_tokens)
        data = await self._post_with_retries(kwargs, extra, max_bytes)
        return parse_completion(data, max_chars, self.model, self._scrub_output)

    async def _post_with_retries(self, kwargs: dict[str, Any], extra: dict[str, Any],
                                 max_bytes: int) -> dict[str, Any]:
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            failure = await self._attempt(kwargs, extra, max_bytes)
            if isinstance(failure, bytes):
                return self._decode(failure)
            # Raised here, outside any ``except`` block, so that no client exception
            # (an SDK one holds the request and its Authorization header) rides
            # along as ``__context__``.
            if isinstance(failure, (PolicyError, ContextLengthExceeded, InfraError)):
                raise failure  # retrying cannot help
            if attempt + 1 < attempts:
                await asyncio.sleep(self._backoff(attempt, failure.retry_after))
                continue
            raise failure.final(self, attempts)
        raise AssertionError("unreachable")  # the loop always returns or raises

    async def _attempt(self, kwargs: dict[str, Any], extra: dict[str, Any], max_bytes: int
                       ) -> bytes | Failure | PolicyError | ContextLengthExceeded | InfraError:
        """One HTTP attempt: the body, or what went wrong (client exceptions do not escape).

        ``timeout`` bounds the whole attempt (connect, wait, every byte of the
        body), not only each read, so a server that trickles cannot hold a call
        open; the wait for a concurrency slot is not counted.
        """
        try:
            async with self._semaphore:
                async with asyncio.timeout(self.timeout):
                    got = await self._client.chat(kwargs, extra, max_bytes)
        except TimeoutError:
            return Failure("timeout")
        except TooLarge:
            return InfraError(
                f"model server at {self.url} sent a reply larger than {max_bytes} bytes; "
                "stopped reading", self.id,
                "check the server (no chat completion is this big), or raise max_reply_bytes")
        if isinstance(got, Status):
            msg = self._scrub(got.message)
            if got.status == 429 or got.status >= 500:
                return Failure("status", status=got.status, message=msg,
                                retry_after=got.retry_after)
            return await self._client_error(got.status, msg)
        if isinstance(got, Failure):
            got.message = self._scrub(got.message)
        return got

    def _decode(self, body: bytes) -> dict[str, Any]:
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            data = None
        if not isinstance(data, dict) or not data.get("choices"):
            snippet = self._scrub(body[:200].decode(errors="replace"))
            raise InfraError(
                f"model server at {self.url} sent a response that is not a chat "
                f"completion: {snippet!r}", self.id,
                "check that --base-url points at an OpenAI-compatible /v1 root")
        return data

    def _backoff(self, attempt: int, retry_after: str | None = None) -> float:
        delay = min(self.backoff_max, self.backoff_base * 2**attempt)
        delay *= random.uniform(0.5, 1.0)
        if retry_after:
            try:
                delay = max(delay, min(float(retry_after), self.backoff_max))
            except ValueError:
                pass  # an HTTP date; our own backoff will do
        return delay

    async def _client_error(self, status: int, msg: str) -> PolicyError | ContextLengthExceeded:
        """A ``PolicyError`` for a 4xx that retrying cannot fix (``msg`` already scrubbed)."""
        if status in (401, 403):
            return PolicyError(
                f"model server at {self.url} rejected the API key (HTTP {status})",
                self.id, "check OPENAI_API_KEY (or pass the key the server expects)")
        if status == 404:
            names = await self.list_models()
            if names is None:
                return PolicyError(
                    f"model server at {self.url} answered 404 for model {self.model!r}: {msg}",
                    self.id, "check the model name and that --base-url ends in /v1")
            if self.model in names:  # the model exists: the route is what is missing
                return PolicyError(
                    f"model server at {self.url} answered 404: {msg}", self.id,
                    "check that --base-url is the /v1 root of an OpenAI-compatible server")
            shown = ", ".join(names[:20]) + (" …" if len(names) > 20 else "")
            return PolicyError(
                f"model {self.model!r} not found at {self.url} (served: {shown or 'none'})",
                self.id, "use one of the served names: openai:NAME")
        if status == 400 and any(w in msg.lower() for w in _CONTEXT_WORDS):
            return ContextLengthExceeded(
                f"prompt too long for {self.model!r} at {self.url}: {msg}", self.id,
                "shorten the harness's observations or budgets, or lower max_tokens")
        return PolicyError(
            f"model server at {self.url} refused the request (HTTP {status}): {msg}",
            self.id, "check the sampling settings and tool schemas this server accepts")

    async def check(self, timeout: float = 5.0) -> None:
        """Fail fast before a run: is the server up, the key accepted, the model served?

        Raises ``InfraError`` (unreachable) or ``PolicyError`` (key, model) with one
        line that says what to do. A server without ``GET /models`` passes.
        """
        got = await self._models(timeout)
        if isinstance(got, Failure):
            raise InfraError(f"model server at {self.url} unreachable", self.id, START_SERVER)
        if isinstance(got, Status) and got.status in (401, 403):
            raise PolicyError(
                f"model server at {self.url} rejected the API key (HTTP {got.status})",
                self.id, "check OPENAI_API_KEY")
        # Any other status, or a list that cannot be read: the chat call will tell.
        if isinstance(got, list) and self.model not in got:
            shown = ", ".join(got[:20])
            raise PolicyError(f"model {self.model!r} is not served at {self.url} "
                              f"(served: {shown or 'none'})", self.id,
                              "use one of the served names: --policy openai:NAME")

    async def list_models(self) -> list[str] | None:
        """The model names ``GET /models`` lists, or ``None`` if it cannot be read."""
        try:
            got = await self._models(self.timeout)
        except Exception:  # noqa: BLE001 - a courtesy look-up inside an error path
            return None
        return got if isinstance(got, list) else None

    async def _models(self, timeout: float) -> Models:
        """``GET /models`` within ``timeout`` seconds in all."""
        try:
            async with asyncio.timeout(timeout):
                return await self._client.models(timeout)
        except TimeoutError:
            return Failure("timeout")

    # ------------------------------------------------------------- secrets
    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return _KEY_PATTERN.sub("***", text)

    def _scrub_output(self, text: str) -> str:
        """What the server returned, with our key (and URL password) redacted."""
        for secret in self._output_secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def _scrub_obj(self, obj: Any) -> Any:
        return json.loads(self._scrub(json.dumps(obj)))

    # --------------------------------------------------------------- close
    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> OpenAIPolicy:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


_INT_OPTS = {"max_retries", "max_concurrency", "max_reply_chars", "max_reply_bytes"}
_FLOAT_OPTS = {"timeout", "backoff_base", "backoff_max"}
def make_openai_policy(spec: str, **opts: Any) -> OpenAIPolicy:
    """Build a policy from ``openai:MODEL`` or ``openai:MODEL@http://host:port/v1``.

    ``opts`` are :class:`OpenAIPolicy` keyword arguments; numeric ones may come
    as strings (from the command line). A ``base_url`` in ``opts`` wins over none
    in the spec; giving both is an error. How the spec is read (an ``@`` may be
    in the model name and in the URL's password) is
    :func:`~tackroom.policies.openai_spec.read_spec`'s.
    """
    model, shown = read_spec(spec, opts)
    return construct(OpenAIPolicy, model, opts, spec=shown, ints=_INT_OPTS,
                     floats=_FLOAT_OPTS)
