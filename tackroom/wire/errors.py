"""The one error shape every tackroom server answers with, and the JSON a request body may hold.

OpenAI's shape (``{"error": {message, type, param, code}}``) is what every agent
CLI and SDK parses; ``tackroom serve``, the gateway and the scripted test server
all answer with it, from :class:`ApiError`.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["ApiError", "dumps", "first_line", "loads"]

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abAB]")


class ApiError(Exception):
    """An HTTP error answered in OpenAI's shape: ``{"error": {message, type, param, code}}``.

    ``headers`` are sent with it (``Allow``, ``Retry-After``); a 401 also gets
    ``WWW-Authenticate: Bearer``. ``close`` ends the connection after the answer
    (a framing error: nothing after it on the connection can be trusted).
    """

    TYPES = {400: "invalid_request_error", 401: "authentication_error",
             404: "invalid_request_error", 405: "invalid_request_error",
             408: "invalid_request_error", 411: "invalid_request_error",
             413: "invalid_request_error", 414: "invalid_request_error",
             431: "invalid_request_error", 500: "server_error",
             505: "invalid_request_error"}

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None,
                 close: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = dict(headers or {})
        self.close = close

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message,
                          "type": self.TYPES.get(self.status, "server_error"),
                          "param": self.param, "code": self.code}}


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (at most 200 characters), for a client."""
    lines = str(e).strip().splitlines()
    return (lines[0] if lines else type(e).__name__)[:200]


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (JSON has no NaN or Infinity)")


def loads(raw: bytes) -> Any:
    """A request body as JSON; :class:`ApiError` 400 when it is not JSON we can pass on.

    ``NaN`` / ``Infinity`` are refused (JSON has neither), and so is a lone
    UTF-16 surrogate escape (it cannot be encoded again).
    """
    if not raw.strip():
        raise ApiError(400, "empty request body: send a JSON object")
    try:
        body = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise ApiError(400, f"the request body is not valid JSON ({first_line(e)})") from None
    if _SURROGATE_ESCAPE.search(raw):  # rare: escaped emoji pairs, or a lone half
        try:
            json.dumps(body, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise ApiError(400, "the request body holds a lone UTF-16 surrogate escape "
                                "(\\ud800-\\udfff); send valid Unicode") from None
    return body


def dumps(obj: Any) -> bytes:
    """Compact JSON bytes; ASCII-escaped, so any string a policy returned can be sent."""
    return json.dumps(obj, separators=(",", ":")).encode()
