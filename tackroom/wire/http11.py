"""HTTP/1.1 for every tackroom server, parsed with h11: one :class:`HttpConnection` per client.

Keep-alive and pipelining, ``Content-Length`` and chunked request bodies,
``Expect: 100-continue``. A client is untrusted:

* **Framing is strict** (no request smuggling): a request head with two
  ``Content-Length`` headers (equal or not), a list of lengths, ``Content-Length``
  beside ``Transfer-Encoding``, more than one ``Transfer-Encoding`` or a coding
  other than ``chunked``, a malformed length or chunk, is answered 400 and the
  connection is closed: nothing after a request whose end is in doubt is read.
* A body over ``max_body`` is answered 413 before it is read; a request head
  over :data:`MAX_HEADER_BYTES` gets 431; a request that does not arrive whole
  within ``read_timeout`` of its first byte gets 408; an idle connection is
  closed after ``idle_timeout``; a reply the client does not read within
  ``read_timeout`` ends the connection. After an answer sent before the body was
  read whole, what the client still sends is read and dropped for a moment
  (:data:`LINGER_S`), so that closing does not reset the connection before the
  client reads the answer.
* Request bodies held at once are bounded (:class:`BodyBudget`): a request
  whose body does not fit waits for room (back-pressure), 503 only after
  ``read_timeout``.

Every error is OpenAI's JSON shape (:class:`~tackroom.wire.errors.ApiError`).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import h11

from tackroom.wire.errors import ApiError, dumps

__all__ = ["MAX_HEADER_BYTES", "BodyBudget", "Gone", "Handler", "HttpConnection", "Reply",
           "Request", "error_reply"]

#: The most bytes of request line and headers accepted (431 past it).
MAX_HEADER_BYTES = 16 * 1024
#: After an early 413, how long what the client still sends is read and dropped.
LINGER_S = 2.0
_READ_SIZE = 65536
JSON = b"application/json"
_HEAD_END = re.compile(rb"\r?\n\r?\n")


@dataclass
class Reply:
    """One response: ``stream`` sends it without ``Content-Length`` (chunked).

    ``pieces``, when given, is more body sent after ``body`` as it is produced (a
    reply too large to hold, or one written slowly), with ``length`` as its
    ``Content-Length`` (the whole body's; ``None``: chunked).
    """

    status: int
    body: bytes
    content_type: bytes = JSON
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    stream: bool = False
    close: bool = False
    pieces: AsyncIterator[bytes] | None = None
    length: int | None = None


@dataclass
class Request:
    """One request, read whole: what a :data:`Handler` answers.

    ``connection`` is the connection it came on; a handler that recognises the
    client calls ``connection.identify(key)`` (the admission limits then count
    the connection as that client's, not as unauthenticated).
    """

    method: str
    target: bytes
    headers: Any
    body: bytes
    connection: HttpConnection

    @property
    def path(self) -> str:
        """The target without its query, trailing ``/`` removed (``/`` for the root)."""
        return self.target.split(b"?", 1)[0].decode("latin-1").rstrip("/") or "/"

    def header(self, name: bytes) -> str | None:
        """The first value of a header (lower-case name), or ``None``."""
        for k, v in self.headers:
            if k == name:
                return v.decode("latin-1")
        return None


#: ``Request -> Reply``: what answers each request.
Handler = Callable[[Request], Awaitable[Reply]]


def error_reply(e: ApiError, *, close: bool = False) -> Reply:
    """The JSON reply of an error (``WWW-Authenticate`` on a 401)."""
    headers = [(k.encode(), v.encode()) for k, v in e.headers.items()]
    if e.status == 401:
        headers.append((b"WWW-Authenticate", b"Bearer"))
    return Reply(e.status, dumps(e.body()), headers=headers, close=close or e.close)


class Gone(Exception):
    """The client went away or stopped talking: the connection just ends."""


class BodyBudget:
    """Request-body bytes that all connections together may hold at once.

    Without it, many clients each sending ``max_body`` bytes would make the
    server hold their product in memory. A body that does not fit waits until
    others are answered (back-pressure, not an error); past ``wait`` seconds
    the request gets 503 with ``Retry-After``.
    """

    def __init__(self, limit: int) -> None:
        self.limit, self.used = int(limit), 0
        self._waiting: list[asyncio.Future[None]] = []

    async def take(self, n: int, wait: float) -> None:
        """Hold ``n`` bytes; wait up to ``wait`` seconds for room, then 503."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while self.used + n > self.limit:
            left = deadline - loop.time()
            fut: asyncio.Future[None] = loop.create_future()
            self._waiting.append(fut)
            try:
                await asyncio.wait_for(fut, left if left > 0 else 0)
            except TimeoutError:
                raise ApiError(503, "the server holds too many request bytes right now; "
                                    "retry", headers={"Retry-After": "1"}) from None
            finally:
                if fut in self._waiting:
                    self._waiting.remove(fut)
        self.used += n

    def give(self, n: int) -> None:
        """Give ``n`` bytes back; the waiting requests look again."""
        self.used -= n
        waiting, self._waiting = self._waiting, []
        for fut in waiting:
            if not fut.done():
                fut.set_result(None)


def check_framing(head: bytes) -> None:
    """Refuse a request head whose body's end could be read two ways (400, then close).

    h11 merges equal ``Content-Length`` headers and lets ``Transfer-Encoding``
    win over ``Content-Length``; a proxy in front may do otherwise, so both are
    refused here, from the bytes as sent.
    """
    lengths, codings = 0, 0
    for line in head.split(b"\n")[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        name = name.strip().lower()
        if name == b"content-length":
            lengths += 1
            if b"," in value:
                raise ApiError(400, "malformed HTTP request (a list of Content-Length values)",
                               close=True)
        elif name == b"transfer-encoding":
            codings += 1
    if lengths > 1:
        raise ApiError(400, "malformed HTTP request (more than one Content-Length header)",
                       close=True)
    if codings > 1:
        raise ApiError(400, "malformed HTTP request (more than one Transfer-Encoding header)",
                       close=True)
    if lengths and codings:
        raise ApiError(400, "malformed HTTP request (Content-Length and Transfer-Encoding "
                            "together)", close=True)


class HttpConnection:
    """Requests in, replies out, on one stream connection (TCP or Unix socket).

    ``peer`` names the client for the admission limits (its IP address, or
    ``unix``); ``identity`` is set by the handler once a request authenticates.
    ``idle_since`` is when the connection last became idle (waiting for a request
    that has not started; ``None`` while one is being read or answered).
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 handler: Handler, *, max_body: int, read_timeout: float,
                 budget: BodyBudget | None = None, peer: str = "",
                 idle_timeout: Callable[[HttpConnection], float] | None = None,
                 on_identify: Callable[[HttpConnection, str], None] | None = None) -> None:
        self.reader, self.writer, self.handler = reader, writer, handler
        self.max_body, self.read_timeout = max_body, read_timeout
        self.budget = budget
        self.peer = peer
        self.identity: str | None = None
        self.idle_since: float | None = time.monotonic()
        self.opened = time.monotonic()
        self._idle_timeout = idle_timeout
        self._on_identify = on_identify
        self._held = 0  # bytes of the current request's body taken from the budget
        self._evicted = False
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)

    # -------------------------------------------------------- admission
    def identify(self, identity: str) -> None:
        """Count this connection as ``identity``'s (an authenticated client) from now on."""
        if self.identity != identity:
            self.identity = identity
            if self._on_identify is not None:
                self._on_identify(self, identity)

    def evict(self) -> None:
        """Close an idle connection to make room (the client sees it closed, as after a timeout)."""
        self._evicted = True
        self.writer.close()

    def pending_bytes(self) -> bool:
        """Whether request bytes wait to be read (in the reader's buffer or h11's)."""
        return bool(self.conn.trailing_data[0]) or bool(getattr(self.reader, "_buffer", b""))

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
                reply = await self.handler(Request(method, request.target, request.headers,
                                                   body, self))
            finally:
                self._release()
            await self.send(reply, head=method == "HEAD")
            if reply.close or self.conn.our_state is not h11.DONE \
                    or self.conn.their_state is not h11.DONE:
                return
            self.conn.start_next_cycle()

    async def _receive(self, deadline: float) -> Any:
        """The next h11 event; ``TimeoutError`` past ``deadline`` (loop time)."""
        loop = asyncio.get_running_loop()
        while True:
            if self.conn.their_state is h11.IDLE:
                self._check_head()
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

    def _check_head(self) -> None:
        """Check the framing of the request head waiting in h11's buffer, once it is whole."""
        buffered = self.conn.trailing_data[0]
        end = _HEAD_END.search(buffered, 0, MAX_HEADER_BYTES + 4)
        if end is not None:
            check_framing(buffered[:end.start()].lstrip(b"\r\n"))

    async def read_request(self) -> tuple[h11.Request, bytes] | None:
        """The next request and its whole body; ``None`` when the client is done."""
        loop = asyncio.get_running_loop()
        timeout = self.read_timeout
        if self.conn.their_state is h11.IDLE and not self.conn.trailing_data[0]:
            idle = self._idle_timeout(self) if self._idle_timeout else timeout
            self.idle_since = time.monotonic()
            try:  # idle (kept alive, or just connected): wait for the first bytes
                first = await asyncio.wait_for(self.reader.read(_READ_SIZE), idle)
            except TimeoutError:
                return None  # nothing asked: just close
            finally:
                self.idle_since = None
            if not first and self._evicted:
                return None
            self.conn.receive_data(first)
        self.idle_since = None
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
        return event, await self._read_body(deadline)

    async def _read_body(self, deadline: float) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                part = await self._receive(deadline)
            except TimeoutError:
                raise ApiError(408, "the request body did not arrive within "
                                    f"{self.read_timeout:g} s") from None
            if isinstance(part, h11.Data):
                size += len(part.data)
                if size > self.max_body:
                    raise ApiError(413, f"request body over the {self.max_body} byte limit")
                if self.budget is not None:
                    await self.budget.take(len(part.data), self.read_timeout)
                    self._held += len(part.data)
                chunks.append(bytes(part.data))
            elif isinstance(part, h11.EndOfMessage):
                return b"".join(chunks)
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
        headers = [(b"Content-Type", reply.content_type), *reply.headers]
        if reply.stream:
            headers += [(b"Cache-Control", b"no-cache")]
        elif reply.pieces is None or reply.length is not None:
            size = len(reply.body) if reply.pieces is None else reply.length
            headers.append((b"Content-Length", str(size).encode()))
        if reply.close:
            headers.append((b"Connection", b"close"))
        try:
            phrase = HTTPStatus(reply.status).phrase.encode()
        except ValueError:
            phrase = b""
        out = self.conn.send(h11.Response(status_code=reply.status, headers=headers,
                                          reason=phrase))
        if reply.body and not head:
            out += self.conn.send(h11.Data(data=reply.body))
        if reply.pieces is not None and not head:
            await self._write(out)
            out = b""
            async for piece in reply.pieces:  # each written out before the next is made
                await self._write(self.conn.send(h11.Data(data=piece)))
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
