"""The ``openai`` policy's ``"sdk"`` client: the official ``openai`` SDK on httpx.

Loaded only when a policy asks for it (``client="sdk"``, or a proxy applies to the
server's host): importing the SDK costs ~0.3 s and ~24 MiB per process, which the
lean client's runs — and every Ray worker — should not pay.
"""

from __future__ import annotations

from typing import Any

import openai

try:  # the HTTP library under the openai SDK: httpx2 in recent releases, httpx before
    import httpx2 as httpx
except ImportError:  # pragma: no cover - older openai
    import httpx  # type: ignore[no-redef]

from tackroom.policies.openai_wire import (
    MAX_OTHER_BODY_BYTES,
    Attempt,
    Failure,
    Models,
    Status,
    TooLarge,
    error_message,
    model_names,
    transport_cause,
)

__all__ = ["SDKClient"]


class SDKClient:
    """The official ``openai`` SDK on httpx, every body but a completion's capped below it."""

    def __init__(self, base_url: str, key: str, timeout: float, max_concurrency: int) -> None:
        self.client = openai.AsyncOpenAI(
            api_key=key, base_url=base_url, timeout=timeout, max_retries=0,
            http_client=openai.DefaultAsyncHttpxClient(
                transport=_CappedTransport(connections=max_concurrency)))

    async def chat(self, fields: dict[str, Any], extra: dict[str, Any],
                   max_bytes: int) -> Attempt:
        kwargs = {**fields, "extra_body": extra} if extra else fields
        try:
            return await self._read_body(kwargs, max_bytes)
        except openai.APIStatusError as e:
            return Status(e.status_code, _sdk_message(e), e.response.headers.get("retry-after"))
        except openai.APITimeoutError:
            return Failure("timeout")
        except openai.APIConnectionError as e:
            return Failure("connection", message=transport_cause(e))
        except Exception as e:
            # While the body streams, httpx's own errors reach us unwrapped.
            if not type(e).__module__.startswith("httpx"):
                raise
            if "timeout" in type(e).__name__.lower():
                return Failure("timeout")
            return Failure("connection", message=transport_cause(e, e))

    async def _read_body(self, kwargs: dict[str, Any], max_bytes: int) -> bytes:
        """The response body, streamed; raises :class:`TooLarge` past ``max_bytes``."""
        chunks: list[bytes] = []
        size = 0
        completions = self.client.chat.completions.with_streaming_response
        async with completions.create(**kwargs) as response:
            async for chunk in response.iter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise TooLarge  # leaving the block closes the connection
                chunks.append(chunk)
        return b"".join(chunks)

    async def models(self, timeout: float) -> Models:
        try:
            page = await self.client.with_options(timeout=timeout).models.list()
            return model_names(list(page.data or []))
        except (openai.APIConnectionError, openai.APITimeoutError):
            return Failure("connection")
        except openai.APIStatusError as e:
            return Status(e.status_code, _sdk_message(e))
        except (ValueError, openai.OpenAIError):
            return None  # a model list that cannot be read (cut, not JSON)

    async def aclose(self) -> None:
        await self.client.close()


def _sdk_message(e: openai.APIStatusError) -> str:
    try:
        text = e.response.text[:200]
    except Exception:  # noqa: BLE001 - body may be unreadable; we have the status
        text = ""
    return error_message(e.body, text)


class _CappedBody(httpx.AsyncByteStream):
    """A response body that ends after ``limit`` bytes (the rest is never read)."""

    def __init__(self, inner: httpx.AsyncByteStream, limit: int) -> None:
        self.inner, self.limit = inner, limit

    async def __aiter__(self):  # type: ignore[override]
        left = self.limit
        async for chunk in self.inner:
            yield chunk[:left]
            left -= len(chunk)
            if left <= 0:
                break

    async def aclose(self) -> None:
        await self.inner.aclose()


class _CappedTransport(httpx.AsyncBaseTransport):
    """Caps every body but a successful chat completion's, which ``_read_body`` bounds.

    The cap sits under the SDK because the SDK reads an error body whole
    (``aread``) before it raises, where no caller can stop it.
    """

    def __init__(self, limit: int = MAX_OTHER_BODY_BYTES, connections: int = 100) -> None:
        # The SDK's own pool limits (openai.DefaultAsyncHttpxClient), raised to the
        # policy's concurrency so that every request in flight keeps its connection.
        self.inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(
            max_connections=max(1000, connections),
            max_keepalive_connections=max(100, connections)))
        self.limit = limit

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.method == "POST" and response.status_code < 400:
            return response
        # Content-Length no longer describes what is read: drop it.
        headers = [(k, v) for k, v in response.headers.raw if k.lower() != b"content-length"]
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(response.status_code, headers=headers,
                              stream=_CappedBody(response.stream, self.limit),
                              extensions=response.extensions, request=request)

    async def aclose(self) -> None:
        await self.inner.aclose()
