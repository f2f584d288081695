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
* ``error(e)`` the API's own error object for ``e`` (its status is ``e.status``).

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

from tackroom.core.registry import entries, register
from tackroom.wire.errors import ApiError, dumps
from tackroom.wire.replies import Completion, Shape

__all__ = ["Dialect", "Route", "find", "register_dialect", "sse", "dialects"]

#: ``to_chat(body, match)`` -> a chat-completions body.
ToChat = Callable[[Any, "re.Match[str]"], dict[str, Any]]
#: ``reply(completion, shape, request body)`` -> the reply object.
ReplyFn = Callable[[Completion, Shape, Any], dict[str, Any]]
#: ``events(completion, shape, request body)`` -> ``(event name or None, data)`` pairs.
EventsFn = Callable[[Completion, Shape, Any], Iterable[tuple[str | None, Any]]]
#: ``error(api error)`` -> the API's error object.
ErrorFn = Callable[[ApiError], dict[str, Any]]


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
    meta: dict[str, Any] = field(default_factory=dict)


def register_dialect(dialect: Dialect) -> Dialect:
    """Register ``dialect`` as kind ``dialect`` under its name; returns it."""
    register("dialect", dialect.name, summary=dialect.summary)(dialect)
    return dialect


def dialects() -> list[Dialect]:
    """Every registered dialect, in name order."""
    return [e.obj for e in entries("dialect")]


def find(method: str, path: str) -> tuple[Dialect, Route, re.Match[str]] | None:
    """The dialect and route that answer ``path`` (any method; the caller checks it)."""
    for d in dialects():
        for r in d.routes:
            m = r.match(method, path)
            if m is not None:
                return d, r, m
    return None


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
