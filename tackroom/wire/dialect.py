"""API dialects: one translation per vendor API, to and from chat completions.

Every server of tackroom's (``tackroom serve``, the recording gateway, the
scripted test server) works on one pivot: a chat-completions request body in,
a :class:`~tackroom.wire.replies.Completion` out. A dialect is the translation
of one vendor API onto that pivot and back:

* ``to_chat(body, match)`` reads the dialect's request (``match`` is the route's
  regular-expression match: Gemini names the model and the streaming in the
  path) and returns the chat-completions body it means — ``messages``,
  ``tools``, sampling keys, ``stream`` — raising :class:`ApiError` naming the
  field when the request is unusable;
* ``reply(c, shape, body)`` the whole reply object the API returns;
* ``events(c, shape, body)`` the streamed reply as ``(event, data)`` pairs in
  the order the API emits them (``event`` ``None`` where the API sends bare
  ``data:`` lines), sent as server-sent events by :func:`sse`;
* ``error(e)`` the API's own error object for ``e`` (its status is ``e.status``);
* ``count(n)`` (optional) the answer of a ``count_tokens`` route for ``n`` prompt tokens;
* ``models(entries, match)`` (optional) the answer of a ``models`` route, from
  the server's model entries (OpenAI's ``{"id", "object": "model", ...}``).

``body`` in ``reply``/``events`` is the dialect's request as the client sent
it (the reply echoes some of it: a model name, instructions).

A dialect registers itself as kind ``dialect`` with its routes; a server asks
:func:`find` which dialect answers a method and path. Nothing else in a server
knows one API from another.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_to_bytes

from tackroom.core.registry import entries, register
from tackroom.wire.errors import ApiError, dumps
from tackroom.wire.http11 import Reply, error_reply
from tackroom.wire.replies import Completion, Shape

__all__ = ["Dialect", "Route", "allowed_methods", "credential", "dialect_error_reply", "dialects",
           "find", "query_of", "register_dialect", "served_apis", "sse"]

#: ``to_chat(body, match)`` -> a chat-completions body.
ToChat = Callable[[Any, "re.Match[str]"], dict[str, Any]]
#: ``reply(completion, shape, request body)`` -> the reply object.
ReplyFn = Callable[[Completion, Shape, Any], dict[str, Any]]
#: ``events(completion, shape, request body)`` -> ``(event name or None, data)`` pairs.
EventsFn = Callable[[Completion, Shape, Any], Iterable[tuple[str | None, Any]]]
#: ``error(api error)`` -> the API's error object.
ErrorFn = Callable[[ApiError], dict[str, Any]]
#: ``count(prompt tokens)`` -> a ``count_tokens`` route's answer.
CountFn = Callable[[int], dict[str, Any]]
#: ``models(model entries, match)`` -> a ``models`` route's answer (404 for an unknown name).
ModelsFn = Callable[[list[dict[str, Any]], "re.Match[str]"], dict[str, Any]]


def _methods(route: Route) -> tuple[str, ...]:
    return ("GET", "HEAD") if route.method == "GET" else (route.method,)


@dataclass(frozen=True)
class Route:
    """One route a dialect answers: a method and a full-match path pattern.

    ``kind`` says what the route is for: ``"turn"`` (a model call),
    ``"count_tokens"`` (Anthropic's token counting: a side call, no model turn),
    ``"models"`` (a model list or lookup).
    """

    method: str
    pattern: str
    kind: str = "turn"

    def match(self, method: str, path: str) -> re.Match[str] | None:
        """The path's match if this route answers it (whatever the method)."""
        return re.fullmatch(self.pattern, path)

    def allows(self, method: str) -> bool:
        """Whether the route answers ``method`` (``HEAD`` where it answers ``GET``)."""
        return method in _methods(self)


@dataclass(frozen=True)
class Dialect:
    """One vendor API's translation onto chat completions (see the module docstring)."""

    name: str
    summary: str
    routes: tuple[Route, ...]
    to_chat: ToChat
    reply: ReplyFn
    events: EventsFn
    error: ErrorFn
    #: Whether ``events`` yields bare ``data:`` lines ending with ``data: [DONE]``
    #: (OpenAI's chat completions) rather than named events.
    done_marker: bool = False
    count: CountFn | None = None
    models: ModelsFn | None = None
    meta: dict[str, Any] = field(default_factory=dict)


def register_dialect(dialect: Dialect) -> Dialect:
    """Register ``dialect`` as kind ``dialect`` under its name; returns it."""
    register("dialect", dialect.name, summary=dialect.summary)(dialect)
    return dialect


def dialects() -> list[Dialect]:
    """Every registered dialect, in name order."""
    return [e.obj for e in entries("dialect")]


def find(method: str, path: str, query: str = "") -> tuple[Dialect, Route, re.Match[str]] | None:
    """The dialect and route that answer ``path``; ``None`` when no dialect has the path.

    With a ``query`` (the target's part after ``?``), a route is first matched
    against ``path?query`` (Gemini's routes read ``alt=sse`` from it), then
    against the path alone (the others' patterns stop at the path: Claude
    Code's ``/v1/messages?beta=true`` is ``/v1/messages``). A route whose method
    is ``method`` wins (``HEAD`` counts as ``GET``); failing that, the first
    route with the path is returned and the caller answers 405
    (:func:`allowed_methods` says what to allow).
    """
    targets = (f"{path}?{query}", path) if query else (path,)
    fallback = None
    for d in dialects():
        for r in d.routes:
            for target in targets:
                m = r.match(method, target)
                if m is not None:
                    break
            if m is not None:
                if r.allows(method):
                    return d, r, m
                fallback = fallback or (d, r, m)
    return fallback


def query_of(target: bytes) -> str:
    """The query of a request target (after ``?``; ``""`` when none)."""
    _, _, query = target.partition(b"?")
    return query.decode("latin-1")


def served_apis() -> str:
    """What a server answers, for a 404's message: each dialect's summary."""
    return "; ".join(d.summary for d in dialects())


def allowed_methods(path: str) -> tuple[str, ...]:
    """Every method some dialect answers ``path`` with (for a 405's ``Allow``)."""
    out: list[str] = []
    for d in dialects():
        for r in d.routes:
            if r.match(r.method, path) is not None:
                out += [m for m in _methods(r) if m not in out]
    return tuple(out)


#: Headers that carry an API key: OpenAI's (``Authorization: Bearer``), Anthropic's,
#: Azure's and Gemini's. Gemini's SDKs may also send the key as ``?key=`` in the query.
_KEY_HEADERS = (b"x-api-key", b"api-key", b"x-goog-api-key")


def credential(headers: Iterable[tuple[bytes, bytes]], target: bytes) -> str | None:
    """The API key a request carries, in whichever API's way it was sent; ``None`` if none.

    ``Authorization: Bearer KEY``, ``x-api-key`` (Anthropic), ``api-key`` (Azure),
    ``x-goog-api-key`` (Gemini), or ``?key=KEY`` in the target (Gemini's REST form).
    """
    for name, value in headers:
        if name == b"authorization":
            scheme, _, rest = value.decode("latin-1").strip().partition(" ")
            if scheme.lower() == "bearer" and rest.strip():
                return rest.strip()
        elif name in _KEY_HEADERS and value.strip():
            return value.decode("latin-1").strip()
    _, sep, query = target.partition(b"?")
    if sep:
        for pair in query.split(b"&"):
            key, _, value = pair.partition(b"=")
            if key == b"key" and value:
                return unquote_to_bytes(value).decode("latin-1")
    return None


def dialect_error_reply(dialect: Dialect | None, e: ApiError) -> Reply:
    """The reply of ``e`` in ``dialect``'s error shape (OpenAI's when ``None``)."""
    if dialect is None or dialect.name == "chat":
        return error_reply(e)
    reply = error_reply(e)
    reply.body = dumps(dialect.error(e))
    return reply


def sse(events: Iterable[tuple[str | None, Any]], *, done_marker: bool = False) -> bytes:
    """``events`` as server-sent events: ``event: NAME`` (when named) then ``data: JSON``."""
    out: list[bytes] = []
    for name, data in events:
        if name is not None:
            out.append(b"event: " + name.encode() + b"\n")
        out.append(b"data: " + dumps(data) + b"\n\n")
    if done_marker:
        out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def chunks(events: Iterable[tuple[str | None, Any]]) -> Iterator[Any]:
    """Only the data of ``events`` (for a test that reads a stream back)."""
    for _name, data in events:
        yield data
