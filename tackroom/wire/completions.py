"""OpenAI Chat Completions as a dialect: the pivot itself, so the translation is the identity.

``POST /v1/chat/completions`` (and ``/chat/completions``, for clients whose
base URL has no ``/v1``). Its replies are :func:`~tackroom.wire.replies.completion_body`
and :func:`~tackroom.wire.replies.stream_chunks`; its errors OpenAI's shape.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from tackroom.wire.dialect import Dialect, Route, register_dialect
from tackroom.wire.errors import ApiError
from tackroom.wire.replies import Completion, Shape, completion_body, stream_chunks

__all__ = ["CHAT"]


def _to_chat(body: Any, match: re.Match[str]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def _reply(c: Completion, shape: Shape, body: Any) -> dict[str, Any]:
    return completion_body(c, shape)


def _events(c: Completion, shape: Shape, body: Any) -> Iterator[tuple[str | None, Any]]:
    for chunk in stream_chunks(c, shape):
        yield None, chunk


def _error(e: ApiError) -> dict[str, Any]:
    return e.body()


CHAT = register_dialect(Dialect(
    name="chat", summary="OpenAI Chat Completions: POST /v1/chat/completions",
    routes=(Route("POST", r"(?:/v1)?/chat/completions"),),
    to_chat=_to_chat, reply=_reply, events=_events, error=_error, done_marker=True))
