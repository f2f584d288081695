"""HTTP/1.1 for the gateway, parsed with h11: one :class:`HttpConnection` per client.

Keep-alive and pipelining, ``Content-Length`` and chunked request bodies,
``Expect: 100-continue``. A client is untrusted: a body over ``max_body`` is
answered 413 before it is read; a request head over :data:`MAX_HEADER_BYTES`
gets 431; a request that does not arrive whole within ``read_timeout`` of its
first byte gets 408; an idle connection is closed after ``read_timeout``; a reply
the client does not read within ``read_timeout`` ends the connection. After an
answer sent before the body was read whole, what the client still sends is read
and dropped for a moment (:data:`LINGER_S`), so that closing does not reset the
connection before the client reads the answer. Every error is OpenAI's JSON shape.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import h11

from tackroom.serve import ApiError

__all__ = ["MAX_HEADER_BYTES", "BodyBudget", "Gone", "Handler", "HttpConnection", "Reply", "error_reply"]

#: The most bytes of request line and headers accepted (431 past it).
MAX_HEADER_BYTES = 16 * 1024
#: After an early 413, how long what the client still sends is read and dropped.
LINGER_S = 2.0
_READ_SIZE = 65536
JSON = b"application/json"


@dataclass
class Reply:
    """One response: ``stream`` sends it without ``Content-Length`` (chunked)."""

    status: int
    body: bytes
    content_type: bytes = JSON
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    stream: bool = False
    close: bool = False


#: ``(method, target, headers, body) -> Reply``: what answers each request.
Handler = Callable[[str, bytes, Any, bytes], Awaitable[Reply]]


def error_reply(e: ApiError, *, close: bool = False) -> Reply:
    headers = [(k.encode(), v.encode()) for k, v in e.headers.items()]
    if e.status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    body = json.dumps(e.body(), separators=(",", ":")).encode()
    return Reply(e.status, body, headers=headers, close=close)


class Gone(Exception):
    """The client went away or stopped talking: the connection just ends."""


class BodyBudget:
    """Request-body bytes that all connections together may hold at once.

    Without it, ``max_connections`` clients each sending ``max_body`` bytes would
    make the gateway hold their product in memory; past the budget a request
    gets 503 (with ``Retry-After``: SDKs retry it).
    """

    def __init__(self, limit: int) -> None:
        self.limit, self.used = int(limit), 0

    def take(self, n: int) -> bool:
        if self.used + n > self.limit:
            return False
        self.used += n
        return True

    def give(self, n: int) -> None:
        self.used -= n


class HttpConnection:
    """Requests in, replies out, on one stream connection (TCP or Unix socket)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 handler: Handler, *, max_body: int, read_timeout: float,
                 budget: BodyBudget | None = None) -> None:
        self.reader, self.writer, self.handler = reader, writer, handler
        self.max_body, self.read_timeout = max_body, read_timeout
        self.budget = budget
        self._held = 0  # bytes of the current request's body taken from the budget
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)

    def _release(self) -> None:
        if self.budget is not None and self._held:
            self.budget.give(self._held)
        self._held = 0

    async def serve(self) -> None:
        """Answer requests until the client is done, goes away, or errs (raises :class:`Gone`)."""
        try:
            await self._serve()
        finally:
            self._release()

    async def _serve(self) -> None:
        while True:
            try:
                got = await self.read_request()
            except ApiError as e:
                if self.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
                    return
                unread = self.conn.their_state is h11.SEND_BODY  # answered early
                await self.send(error_reply(e, close=True), head=False)
                if unread:
                    await self.linger()
                return
            if got is None:
                return
            request, body = got
            method = request.method.decode("latin-1")
            try:
                reply = await self.handler(method, request.target, request.headers, body)
            finally:
                self._release()
            await self.send(reply, head=method == "HEAD")
            if self.conn.our_state is not h11.DONE or self.conn.their_state is not h11.DONE:
                return
            self.conn.start_next_cycle()

    async def _receive(self, deadline: float) -> Any:
        """The next h11 event; ``TimeoutError`` past ``deadline`` (loop time)."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                event = self.conn.next_event()
            except h11.RemoteProtocolError as e:
                if not str(e).startswith("peer "):  # not a client that just went away
                    status = e.error_status_hint
                    what = "request headers too large" if status == 431 else str(e)
                    raise ApiError(status, f"malformed HTTP request ({what})") from None
                raise Gone from None
            if event is not h11.NEED_DATA:
                return event
            left = deadline - loop.time()
            if left <= 0:
                raise TimeoutError
            data = await asyncio.wait_for(self.reader.read(_READ_SIZE), left)
            self.conn.receive_data(data)

    async def read_request(self) -> tuple[h11.Request, bytes] | None:
        """The next request and its whole body; ``None`` when the client is done."""
        loop = asyncio.get_running_loop()
        timeout = self.read_timeout
        if self.conn.their_state is h11.IDLE and not self.conn.trailing_data[0]:
            try:  # idle (kept alive, or just connected): wait for the first bytes
                first = await asyncio.wait_for(self.reader.read(_READ_SIZE), timeout)
                self.conn.receive_data(first)
            except TimeoutError:
                return None  # nothing asked: just close
        try:  # then the whole request has read_timeout to arrive
            event = await self._receive(loop.time() + timeout)
        except TimeoutError:
            raise ApiError(408, f"the request did not arrive within {timeout:g} s") from None
        if isinstance(event, h11.ConnectionClosed):
            return None
        if not isinstance(event, h11.Request):
            raise Gone
        deadline = loop.time() + timeout
        if len(event.target) + sum(len(k) + len(v) + 4 for k, v in event.headers) \
                > MAX_HEADER_BYTES:  # h11 checks only a head that arrives in pieces
            raise ApiError(431, f"request headers over {MAX_HEADER_BYTES} bytes")
        length = _content_length(event.headers)
        if length is not None and length > self.max_body:
            raise ApiError(413, f"request body of {length} bytes is over the {self.max_body} "
                                "byte limit")
        if self.conn.they_are_waiting_for_100_continue:
            await self._write(self.conn.send(h11.InformationalResponse(
                status_code=100, headers=[], reason=b"Continue")))
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                part = await self._receive(deadline)
            except TimeoutError:
                raise ApiError(408, f"the request body did not arrive within {timeout:g} s") \
                    from None
            if isinstance(part, h11.Data):
                size += len(part.data)
                if size > self.max_body:
                    raise ApiError(413, f"request body over the {self.max_body} byte limit")
                if self.budget is not None:
                    if not self.budget.take(len(part.data)):
                        raise ApiError(503, "the gateway holds too many request bytes right "
                                            "now; retry", headers={"Retry-After": "1"})
                    self._held += len(part.data)
                chunks.append(bytes(part.data))
            elif isinstance(part, h11.EndOfMessage):
                return event, b"".join(chunks)
            else:  # ConnectionClosed mid-request
                raise Gone

    async def _write(self, data: bytes | None) -> None:
        if not data:
            return
        self.writer.write(data)
        try:
            await asyncio.wait_for(self.writer.drain(), self.read_timeout)
        except TimeoutError:
            raise Gone from None  # a client that does not read its reply

    async def send(self, reply: Reply, *, head: bool = False) -> None:
        headers = [(b"content-type", reply.content_type), *reply.headers]
        if reply.stream:
            headers += [(b"cache-control", b"no-cache")]
        else:
            headers.append((b"content-length", str(len(reply.body)).encode()))
        if reply.close:
            headers.append((b"connection", b"close"))
        try:
            phrase = HTTPStatus(reply.status).phrase.encode()
        except ValueError:
            phrase = b""
        out = self.conn.send(h11.Response(status_code=reply.status, headers=headers, reason=phrase))
        if reply.body and not head:
            out += self.conn.send(h11.Data(data=reply.body))
        out += self.conn.send(h11.EndOfMessage())
        await self._write(out)

    async def linger(self) -> None:
        """Read and drop what the client still sends for a moment, then let it close."""
        with contextlib.suppress(Exception):
            if self.writer.can_write_eof():
                self.writer.write_eof()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + LINGER_S
            while (left := deadline - loop.time()) > 0:
                if not await asyncio.wait_for(self.reader.read(_READ_SIZE), left):
                    break


def _content_length(headers: Any) -> int | None:
    for name, value in headers:
        if name == b"content-length":
            return int(value)  # h11 has checked it is a number
    return None
