"""The ``openai`` policy's lean wire client: the body built as a dict, stdlib JSON, LeanHTTP.

No per-call schema walk and no HTTP library: ~0.1 ms of CPU a call instead of the
SDK's ~4 ms, which is what lets a thousand episodes share two cores. Like the SDK
client (:mod:`tackroom.policies.openai_sdk`) it only turns a request into a body, an
HTTP status or a transport failure (:mod:`tackroom.policies.openai_wire`); retries,
deadlines, scrubbing and parsing are the policy's.
"""

from __future__ import annotations

import json
from typing import Any

from tackroom.policies.lean_http import HTTPFailure, LeanHTTP
from tackroom.policies.lean_http import TooLarge as BodyTooLarge
from tackroom.policies.openai_wire import (
    MAX_OTHER_BODY_BYTES,
    Attempt,
    Failure,
    Models,
    Status,
    TooLarge,
    error_message,
    loads_body,
    model_names,
)

__all__ = ["LeanClient"]

#: JSON as the lean client sends it (compact, UTF-8 as it is).
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


class LeanClient:
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
