"""What the ``openai`` policy's two wire clients share: the result of one attempt.

A client (:class:`Client`: the lean one in :mod:`tackroom.policies.openai_lean`,
the SDK's in :mod:`tackroom.policies.openai_sdk`) turns a request into a body, an
HTTP status (:class:`Status`) or a transport failure (:class:`Failure`) and
nothing more: retries, deadlines, scrubbing and parsing are the policy's. This
module has no third-party imports, so that the lean path never loads the SDK.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from tackroom.core.errors import InfraError

__all__ = ["MAX_OTHER_BODY_BYTES", "START_SERVER", "Attempt", "Client", "Failure", "Models",
           "Server", "Status", "TooLarge", "transport_cause", "error_message", "loads_body",
           "model_names"]

#: Bytes kept of an error body or a model list (a thousand model names fit).
MAX_OTHER_BODY_BYTES = 1024 * 1024
START_SERVER = "start your vLLM/SGLang server or pass --base-url"


class Server(Protocol):
    """What an error names about the policy: its id, its server's URL and timeout."""

    id: str
    url: str
    timeout: float


@dataclass
class Failure:
    """A transient failure of one attempt, kept as plain data (no SDK exception)."""

    kind: str  # "status" (429/5xx), "timeout" or "connection"
    status: int = 0
    message: str = ""
    retry_after: str | None = None

    def final(self, policy: Server, attempts: int) -> InfraError:
        """The error to raise once the retries are spent."""
        if self.kind == "status":
            return InfraError(
                f"model server at {policy.url} answered HTTP {self.status} {attempts} "
                f"time(s): {self.message}", policy.id,
                "wait and --resume, lower concurrency, or check the server's log")
        if self.kind == "timeout":
            return InfraError(
                f"model server at {policy.url} timed out after {policy.timeout:g}s "
                f"({attempts} attempt(s))", policy.id,
                "raise the policy timeout, lower concurrency, or check the server's load")
        return InfraError(
            f"model server at {policy.url} unreachable ({self.message}; {attempts} "
            "attempt(s))", policy.id, START_SERVER)


class TooLarge(Exception):
    """The body passed the byte limit (internal; becomes an ``InfraError``)."""


@dataclass
class Status:
    """An HTTP error status one attempt got, as plain data (message not yet scrubbed)."""

    status: int
    message: str
    retry_after: str | None = None


def error_message(body: Any, text: str) -> str:
    """The server's message in an error body (OpenAI's ``{"error": {"message"}}``, FastAPI's
    ``{"detail"}``, or plain text), on one line and short."""
    msg = None
    if isinstance(body, dict):
        err = body.get("error", body)
        msg = err.get("message") if isinstance(err, dict) else err
        msg = msg or body.get("message") or body.get("detail")
    elif isinstance(body, str):
        msg = body
    if not msg:
        msg = text[:200]
    return " ".join(str(msg).split())[:300] or "(no message)"


def model_names(models: Any) -> list[str]:
    """The names in a ``GET /models`` list, as a hostile server may shape it."""
    items = models if isinstance(models, list) else []
    return [str(m.get("id", "") if isinstance(m, dict) else getattr(m, "id", ""))[:200]
            for m in items[:1000]]


def transport_cause(e: BaseException, cause: BaseException | None = None) -> str:
    """A transport failure in a few words (not yet scrubbed)."""
    cause = cause or e.__cause__ or e.__context__
    text = str(cause) if cause is not None and str(cause) else str(e)
    low = text.lower()
    if "refused" in low or "errno 111" in low or "all connection attempts failed" in low:
        return "connection refused"
    if "disconnected" in low or "reset" in low or "closed" in low:
        return "connection closed by server"
    return " ".join(text.split())[:120] or type(e).__name__


#: What one chat attempt of a client gives: the body of a reply below 400, an
#: error status, or a transport failure. :class:`TooLarge` is raised.
Attempt = bytes | Status | Failure
#: What a model-list request gives; ``None``: a list that cannot be read.
Models = list[str] | Status | Failure | None


class Client(Protocol):
    """The wire under :class:`OpenAIPolicy`: no retries, no deadline, no scrubbing here."""

    async def chat(self, fields: dict[str, Any], extra: dict[str, Any],
                   max_bytes: int) -> Attempt: ...

    async def models(self, timeout: float) -> Models: ...

    async def aclose(self) -> None: ...


def loads_body(body: bytes) -> tuple[Any, str]:
    """``(parsed JSON or the text, the text)`` of an error or model-list body."""
    text = body.decode(errors="replace")
    try:
        return json.loads(text), text
    except ValueError:
        return text, text
