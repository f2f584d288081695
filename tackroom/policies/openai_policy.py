"""The ``openai`` policy: any OpenAI-compatible chat-completions server.

vLLM, SGLang, Ollama, llama.cpp's server and OpenAI itself all speak this API.
Two clients speak it, chosen with ``client``:

* ``"lean"`` (the default): the request body is built here as a dict, written
  with the stdlib ``json`` over a keep-alive HTTP/1.1 connection of
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
registered with :func:`tackroom.records.secrets.register_secret` so that the
record store redacts it wherever it turns up. The same holds for a password in
the base URL (``http://user:pass@host/v1``), which is never printed either.

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
import ipaddress
import json
import os
import random
import re
import urllib.request
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from tackroom.core.errors import ContextLengthExceeded, InfraError, PolicyError
from tackroom.core.policy import PolicyRequest, PolicyResponse, ToolCall
from tackroom.policies.lean_http import HTTPFailure, LeanHTTP
from tackroom.policies.lean_http import TooLarge as BodyTooLarge
from tackroom.policies.openai_wire import (
    MAX_OTHER_BODY_BYTES,
    START_SERVER,
    Attempt,
    Client,
    Failure,
    Models,
    Status,
    TooLarge,
    error_message,
    loads_body,
    model_names,
)
from tackroom.policies.options import construct
from tackroom.records.secrets import MIN_SECRET_CHARS, REDACTED, register_secret

__all__ = ["CLIENTS", "ContextLengthExceeded", "OpenAIPolicy", "make_openai_policy"]

#: The wire clients ``OpenAIPolicy(client=...)`` takes.
CLIENTS = ("lean", "sdk")
#: The client when none is given and no proxy applies (tests switch it to run both).
DEFAULT_CLIENT = "lean"

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "[::1]"}
# OpenAI-style secret keys, in case a server quotes one we did not send.
_KEY_PATTERN = re.compile(r"\b(sk|rk|pk)-[A-Za-z0-9_\-*]{8,}")
#: The smallest default reply cap (characters); it grows with ``max_tokens``.
MIN_REPLY_CHARS = 16_384
#: The default body limit is this many bytes per character of the reply cap
#: (log-probs and JSON escapes make a body far bigger than its text), and at
#: least :data:`MIN_REPLY_BYTES`.
BYTES_PER_REPLY_CHAR = 64
MIN_REPLY_BYTES = 8 * 1024 * 1024
#: Appended to a reply's text that was cut at the cap.
CUT_NOTE = "\n[tackroom: reply cut at {n} characters]"
_CONTEXT_WORDS = ("context length", "context_length", "maximum context", "context window",
                  "too long", "max_model_len", "maximum model length")


#: JSON as the lean client sends it (compact, UTF-8 as it is).
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


class _LeanClient:
    """The body built as a dict, stdlib JSON, :class:`LeanHTTP` (see the module docstring)."""

    def __init__(self, base_url: str, key: str, max_idle: int) -> None:
        self.http = LeanHTTP(base_url, {"Authorization": f"Bearer {key}"}, max_idle=max_idle)
        # The tool schemas of the last request, encoded: a harness sends the same list
        # object every turn (HarnessSpec.tools), and its nested dicts cost as much to
        # encode as the whole conversation. Held here, so its id cannot be reused.
        self._tools: tuple[Any, bytes] | None = None

    def _body(self, fields: dict[str, Any], extra: dict[str, Any]) -> bytes:
        # Extra fields go in last and win, as the SDK's ``extra_body`` does.
        body = {**fields, **extra} if extra else fields
        tools = body.get("tools")
        if not tools:
            return _encode(body).encode()
        known = self._tools
        if known is None or known[0] is not tools:
            known = self._tools = (tools, _encode(tools).encode())
        rest = _encode({k: v for k, v in body.items() if k != "tools"}).encode()
        return b"%s,\"tools\":%s}" % (rest[:-1], known[1])

    async def chat(self, fields: dict[str, Any], extra: dict[str, Any],
                   max_bytes: int) -> Attempt:
        data = self._body(fields, extra)
        try:
            resp = await self.http.request("POST", "/chat/completions", data, limit=max_bytes,
                                           error_limit=MAX_OTHER_BODY_BYTES, raise_over=True)
        except BodyTooLarge:
            raise TooLarge from None
        except HTTPFailure as e:
            return Failure("connection", message=str(e))
        if resp.status >= 400:
            return Status(resp.status, error_message(*loads_body(resp.body)),
                           resp.headers.get("retry-after"))
        return resp.body

    async def models(self, timeout: float) -> Models:
        try:
            resp = await self.http.request("GET", "/models", limit=MAX_OTHER_BODY_BYTES,
                                           error_limit=MAX_OTHER_BODY_BYTES)
        except HTTPFailure as e:
            return Failure("connection", message=str(e))
        if resp.status >= 400:
            return Status(resp.status, error_message(*loads_body(resp.body)))
        data, _ = loads_body(resp.body)
        if not isinstance(data, dict) or not isinstance(data.get("data"), list):
            return None
        return model_names(data["data"])

    async def aclose(self) -> None:
        await self.http.aclose()


def _split_userinfo(url: str) -> tuple[str, str, str]:
    """``(url with user-info percent-encoded, user, password)``.

    The authority ends at the first ``/``, ``?`` or ``#`` and the user-info at
    its *last* ``@``, so a password may hold ``@`` and ``:``
    (``http://user:p@ss@host:8000/v1``).
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url, "", ""
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    userinfo, at, hostport = authority.rpartition("@")
    if not at:
        return url, "", ""
    user, _, password = userinfo.partition(":")
    user, password = unquote(user), unquote(password)
    enc = quote(user, safe="") + (f":{quote(password, safe='')}" if password else "")
    return f"{scheme}://{enc}@{hostport}{tail}", user, password


def _check_url(url: str, policy_id: str) -> str:
    """The printable form of ``url`` (see :func:`_clean_url`), or a PolicyError if it is not
    an http(s) URL with a host that the HTTP client could use."""
    try:
        parts = urlsplit(url)
        ok = (parts.scheme in ("http", "https") and bool(parts.hostname)
              and _valid_host(parts.hostname) and not _URL_JUNK.search(url))
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        ok = False
    if not ok:
        shown = _clean_url(url) if "@" in url else url  # never a password
        raise PolicyError(f"cannot use base URL {shown!r}", policy_id,
                          "give an http(s) URL with a host, e.g. http://127.0.0.1:8000/v1")
    return _clean_url(url)


# Whitespace and control characters, which no HTTP client puts on a request line.
_URL_JUNK = re.compile(r"[\x00-\x20\x7f]")
_HOST_CHARS = re.compile(r"[a-z0-9._~%!$&'()*+,;=-]+")


def _valid_host(host: str) -> bool:
    """An IP literal, or a name that encodes to ASCII host characters (IDNA for others)."""
    if ":" in host:
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            return False
        return True
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError:
        return False
    return bool(_HOST_CHARS.fullmatch(ascii_host.lower()))


def _clean_url(url: str) -> str:
    """``url`` without user-info, query or fragment: safe to print and record."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def _is_openai_host(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return host == "openai.com" or host.endswith(".openai.com")


def _is_local(url: str) -> bool:
    return (urlsplit(url).hostname or "").lower() in _LOCAL_HOSTS


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
        extra_body: more fields for every request (e.g. ``{"top_k": 20}``).
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
        self.base_url, _, password = _split_userinfo(given.rstrip("/"))
        self.url = _check_url(self.base_url, self.id)
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.max_concurrency = int(max_concurrency)
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.return_token_ids = (_is_local(self.base_url) if return_token_ids is None
                                 else return_token_ids)
        self.extra_body = dict(extra_body or {})
        self.max_reply_chars = None if max_reply_chars is None else int(max_reply_chars)
        self.max_reply_bytes = None if max_reply_bytes is None else int(max_reply_bytes)

        key = api_key or os.environ.get("OPENAI_API_KEY")
        if not key:
            if _is_openai_host(self.base_url):
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
        self.client = client or ("sdk" if _proxied(self.base_url) else DEFAULT_CLIENT)
        self._client: Client
        if self.client == "sdk":
            from tackroom.policies.openai_sdk import SDKClient  # the SDK loads only here

            self._client = SDKClient(self.base_url, key, self.timeout, self.max_concurrency)
        else:
            self._client = _LeanClient(self.base_url, key, self.max_concurrency)
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
        max_chars, max_bytes = self.reply_limits(s.max_tokens)
        data = await self._post_with_retries(kwargs, extra, max_bytes)
        return self._parse(data, max_chars)

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

    # --------------------------------------------------------------- parse
    def _parse(self, data: dict[str, Any], max_chars: int) -> PolicyResponse:
        """Read the raw JSON tolerantly: a malformed tool call is data, not an error.

        Text and tool-call arguments share a budget of ``max_chars`` characters
        (after our secrets are redacted); what is past it is dropped.
        """
        budget = max_chars
        cut = False

        def keep(value: str) -> str:
            nonlocal budget, cut
            value = self._scrub_output(value)
            if len(value) > budget:
                value, cut = value[:budget], True
            budget -= len(value)
            return value

        choice = data["choices"][0] if isinstance(data["choices"][0], dict) else {}
        message = choice.get("message") or {}
        content = message.get("content")
        if isinstance(content, list):  # content parts; join the text ones
            content = "".join(p.get("text", "") for p in content
                              if isinstance(p, dict) and isinstance(p.get("text", ""), str))
        if isinstance(content, str):
            content = keep(content)
            if cut:
                content += CUT_NOTE.format(n=max_chars)
        tool_calls = []
        raw_calls = message.get("tool_calls") or []
        for i, tc in enumerate(raw_calls if isinstance(raw_calls, list) else []):
            if budget <= 0 and i > 0:
                cut = True
                break  # no room left for more calls
            if not isinstance(tc, dict):
                tool_calls.append(ToolCall(id=f"call_{i}", name="", arguments=keep(str(tc))))
                continue
            fn = tc.get("function") if isinstance(tc.get("function"), dict) else {}
            args = fn.get("arguments")
            if args is None:
                args = ""
            elif not isinstance(args, str):  # some servers send an object
                args = json.dumps(args)
            tool_calls.append(ToolCall(
                id=self._scrub_output(str(tc.get("id") or f"call_{i}"))[:200],
                name=self._scrub_output(str(fn.get("name") or ""))[:200],
                arguments=keep(args)))

        logprobs = None
        lp_content = (choice.get("logprobs") or {}).get("content") \
            if isinstance(choice.get("logprobs"), dict) else None
        if isinstance(lp_content, list):
            logprobs = [float(t.get("logprob", 0.0)) for t in lp_content if isinstance(t, dict)]
        token_ids = choice.get("token_ids")
        if token_ids is None:
            token_ids = choice.get("response_token_ids")  # SGLang's spelling
        if token_ids is None and isinstance(lp_content, list):
            token_ids = _ids_from_tokens(lp_content)  # vLLM --return-tokens-as-token-ids
        usage = data.get("usage") or {}
        return PolicyResponse(
            text=content if isinstance(content, str) else None,
            tool_calls=tool_calls,
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            # At most one token per kept character: the body limit bounds the rest.
            token_ids=([int(t) for t in token_ids[:max_chars]]
                       if isinstance(token_ids, list) else None),
            logprobs=logprobs[:max_chars] if logprobs is not None else None,
            model=self._scrub_output(str(data.get("model") or self.model))[:200],
            finish_reason="length" if cut else str(choice.get("finish_reason") or "stop")[:40],
        )

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


def _proxied(url: str) -> bool:
    """Whether an ``HTTP(S)_PROXY`` variable applies to ``url`` (``NO_PROXY`` honoured)."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    if not proxies.get(parts.scheme) and not proxies.get("all"):
        return False
    return not urllib.request.proxy_bypass_environment(parts.hostname or "", proxies)


def _ids_from_tokens(content: list[Any]) -> list[int] | None:
    """vLLM's ``--return-tokens-as-token-ids`` writes each token as ``token_id:123``."""
    ids = []
    for t in content:
        tok = t.get("token") if isinstance(t, dict) else None
        if not isinstance(tok, str) or not tok.startswith("token_id:"):
            return None
        try:
            ids.append(int(tok[len("token_id:"):]))
        except ValueError:
            return None
    return ids or None


_INT_OPTS = {"max_retries", "max_concurrency", "max_reply_chars", "max_reply_bytes"}
_FLOAT_OPTS = {"timeout", "backoff_base", "backoff_max"}
_SPEC_FORM = "write openai:MODEL or openai:MODEL@http://host:port/v1"
# The ``@`` that starts a URL: the first one followed by ``scheme://``.
_URL_AT = re.compile(r"@(?=[A-Za-z][A-Za-z0-9+.-]*://)")
# What follows an ``@`` and looks like a host without a scheme:
# ``localhost[:port]``, an IP, ``[v6]``, or any ``host:port`` / ``host/path``.
_BARE_HOST = re.compile(
    r"^(?:(?:localhost|\d{1,3}(?:\.\d{1,3}){3}|\[[0-9A-Fa-f:.]+\])(?::\d+)?(?:[/?#]|$)"
    r"|[A-Za-z0-9][A-Za-z0-9.-]*(?::\d+(?:[/?#]|$)|\.[A-Za-z0-9-]+/))")


def _shown_spec(spec: str) -> str:
    """``spec`` safe to print: any URL in it without user-info, query or fragment."""
    m = _URL_AT.search(spec)
    return spec if m is None else f"{spec[:m.start()]}@{_clean_url(spec[m.end():])}"


def make_openai_policy(spec: str, **opts: Any) -> OpenAIPolicy:
    """Build a policy from ``openai:MODEL`` or ``openai:MODEL@http://host:port/v1``.

    ``opts`` are :class:`OpenAIPolicy` keyword arguments; numeric ones may come
    as strings (from the command line). A ``base_url`` in ``opts`` wins over none
    in the spec; giving both is an error.

    The URL starts at the first ``@`` followed by ``http://`` or ``https://``,
    so a model name may hold ``@`` (``org/model@v2@http://...``) and so may the
    URL's password. A spec whose ``@`` is followed by something else that looks
    like a server (``m@127.0.0.1:8000/v1``, ``m@ftp://...``) is refused: it is
    never read as a model name served by the default (remote) endpoint.
    """
    shown = _shown_spec(spec)
    prefix, sep, rest = spec.partition(":")
    if prefix != "openai" or not sep or not rest:
        raise PolicyError(f"not an openai policy spec: {shown!r}", "--policy", _SPEC_FORM)
    m = _URL_AT.search(rest)
    if m is not None:
        model, url = rest[:m.start()], rest[m.end():]
        if not url.lower().startswith(("http://", "https://")) or not model:
            raise PolicyError(f"cannot read model and URL from {shown!r}", "--policy",
                              _SPEC_FORM + " (MODEL not empty, the URL starting with http:// or https://)")
        scheme, _, tail = url.partition("://")
        url = f"{scheme.lower()}://{tail}"  # schemes are case-insensitive
        if opts.get("base_url"):
            raise PolicyError(f"two base URLs: {shown!r} and base_url="
                              f"{_clean_url(str(opts['base_url']))!r}",
                              "--policy", "give the URL once")
        opts["base_url"] = url
    else:
        model = rest
        tails = [rest[i + 1:] for i, c in enumerate(rest) if c == "@"]
        if any(_BARE_HOST.match(t) for t in tails):
            raise PolicyError(f"{shown!r} names a server without http:// or https://",
                              "--policy", _SPEC_FORM)
    return construct(OpenAIPolicy, model, opts, spec=shown, ints=_INT_OPTS,
                     floats=_FLOAT_OPTS)
