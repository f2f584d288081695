"""OpenAI Chat Completions as a dialect: the pivot itself, so the translation is the identity.

``POST /v1/chat/completions`` and ``GET /v1/models[/NAME]`` (and the same
without ``/v1``, for clients whose base URL has none). Its replies are :func:`~tackroom.wire.replies.completion_body`
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


def _models(entries: list[dict[str, Any]], match: re.Match[str]) -> dict[str, Any]:
    name = match.groupdict().get("model")
    if name is None:
        return {"object": "list", "data": entries}
    for entry in entries:
        if entry["id"] == name:
            return entry
    raise ApiError(404, f"The model `{name[:200]}` does not exist. Served models: "
                        f"{', '.join(e['id'] for e in entries)}", code="model_not_found")


CHAT = register_dialect(Dialect(
    name="chat", summary="OpenAI Chat Completions: POST /v1/chat/completions, GET /v1/models",
    routes=(Route("POST", r"(?:/v1)?/chat/completions"),
            Route("GET", r"(?:/v1)?/models", "models"),
            Route("GET", r"(?:/v1)?/models/(?P<model>[^/?]+)", "models")),
    to_chat=_to_chat, reply=_reply, events=_events, error=_error, done_marker=True,
    models=_models))
