"""A minimal HTTP/1.1 client for the ``openai:`` policy's hot path.

Why not httpx: measured on this project's benchmark (``bench/concurrency.py``)
one request through ``httpx.AsyncClient`` costs ~1.2 ms of CPU and one through
the ``openai`` SDK ~4 ms, while the same request written to an asyncio stream
costs ~0.08 ms. At a thousand episodes in flight the client's CPU, not the
model server, would set the pace. This client does only what a JSON API call
needs: keep-alive connections (a LIFO pool, so warm connections are reused),
``Content-Length``, chunked and read-to-close bodies, TLS through :mod:`ssl`,
gzip/deflate bodies (it asks for none), and a byte limit on every body it
reads. What it does not do — proxies from the environment, HTTP/2, redirects,
other encodings — is what the SDK client (``client="sdk"``) is there for.

Nothing here knows about OpenAI: :class:`LeanHTTP.request` returns the status,
the headers and the body, or raises :class:`HTTPFailure` for a connection that
could not carry the exchange. Timeouts are the caller's (``asyncio.timeout``
around the call): a cancelled request closes its connection instead of
returning it to the pool, so a half-read reply is never read as the next one.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
import zlib
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

__all__ = ["HTTPFailure", "LeanHTTP", "Response", "TooLarge"]

_MAX_HEAD_BYTES = 64 * 1024  # status line and headers of one response
_READ = 65536


class HTTPFailure(Exception):
    """The exchange failed below HTTP (refused, reset, closed, malformed): ``str`` says how."""


class TooLarge(Exception):
    """A body passed the byte limit of a request made with ``raise_over``."""


@dataclass
class Response:
    """One response: status, headers (names lower-cased; the last value of a repeated one)."""

    status: int
    headers: dict[str, str]
    body: bytes


class _Conn:
    __slots__ = ("reader", "writer", "used")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.used = False  # has carried an exchange (so it may have gone stale idle)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class LeanHTTP:
    """Keep-alive HTTP/1.1 to one origin (``base_url``'s scheme, host and port).

    Args:
        base_url: the API root; its path prefixes every request's path. User-info
            in it becomes ``Authorization: Basic`` (what httpx, under the SDK, does).
        headers: sent with every request (e.g. the bearer token).
        max_idle: idle connections kept for reuse; more are closed when returned.
    """

    def __init__(self, base_url: str, headers: dict[str, str], *, max_idle: int = 64) -> None:
        parts = urlsplit(base_url)
        self.tls = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.tls else 80)
        self.prefix = parts.path.rstrip("/")
        self.query = parts.query
        host = f"[{self.host}]" if ":" in self.host else self.host
        default_port = self.port == (443 if self.tls else 80)
        fixed = {"Host": host if default_port else f"{host}:{self.port}",
                 "Accept": "application/json", "Accept-Encoding": "identity",
                 "User-Agent": "tackroom", **headers}
        if parts.username is not None or parts.password is not None:
            pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
            fixed["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        # The fixed part of every request head, encoded once.
        self._head = "".join(f"{k}: {v}\r\n" for k, v in fixed.items()).encode("latin-1")
        self.max_idle = max_idle
        self._idle: list[_Conn] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ssl: ssl.SSLContext | None = None

    def target(self, path: str) -> str:
        """The request target for ``path`` under the base URL (its query kept)."""
        return f"{self.prefix}{path}" + (f"?{self.query}" if self.query else "")

    async def request(self, method: str, path: str, body: bytes | None = None, *,
                      limit: int, error_limit: int, raise_over: bool = False) -> Response:
        """One exchange: at most ``limit`` body bytes of a reply below 400, at most
        ``error_limit`` of an error's (400 and up).

        A body past its limit is cut there (the rest is never read and the
        connection is dropped); with ``raise_over``, a reply below 400 past
        ``limit`` raises :class:`TooLarge` instead — an error body is always cut.
        """
        head = (f"{method} {self.target(path)} HTTP/1.1\r\n").encode("latin-1") + self._head
        if body is not None:
            head += b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        head += b"\r\n"
        # Head and body go out together but are not joined here: a joined copy would be
        # held for the whole wait on the reply, a second copy of every request in flight.
        data = (head, body) if body else (head,)
        for _ in range(2):
            conn = await self._get()
            reused = conn.used
            keep = False
            try:
                conn.writer.writelines(data)
                resp, keep = await self._read(conn.reader, method, limit, error_limit,
                                              raise_over)
                return resp
            except _Stale:
                if reused:
                    continue  # closed while idle, before any reply byte: once more, fresh
                raise HTTPFailure("connection closed by server") from None
            finally:
                if keep:
                    self._put(conn)
                else:
                    conn.close()
        raise HTTPFailure("connection closed by server")

    async def _get(self) -> _Conn:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # connections belong to the loop that opened them
            self._drop_idle()
            self._loop = loop
        while self._idle:
            conn = self._idle.pop()
            if not conn.reader.at_eof() and not conn.writer.is_closing():
                return conn
            conn.close()
        try:
            if self.tls:
                if self._ssl is None:
                    self._ssl = ssl.create_default_context()
                reader, writer = await asyncio.open_connection(
                    self.host, self.port, ssl=self._ssl, limit=_MAX_HEAD_BYTES)
            else:
                reader, writer = await asyncio.open_connection(self.host, self.port,
                                                               limit=_MAX_HEAD_BYTES)
        except ConnectionRefusedError:
            raise HTTPFailure("connection refused") from None
        except OSError as e:  # DNS, unreachable network, TLS handshake
            raise HTTPFailure(" ".join(str(e).split())[:120] or type(e).__name__) from None
        return _Conn(reader, writer)

    def _put(self, conn: _Conn) -> None:
        conn.used = True
        if len(self._idle) < self.max_idle and asyncio.get_running_loop() is self._loop:
            self._idle.append(conn)
        else:
            conn.close()

    def _drop_idle(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()

    async def _read(self, reader: asyncio.StreamReader, method: str, limit: int,
                    error_limit: int, raise_over: bool) -> tuple[Response, bool]:
        """The response and whether the connection can carry another exchange."""
        while True:
            try:
                raw = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as e:
                if not e.partial:
                    raise _Stale from None
                raise HTTPFailure("connection closed by server") from None
            except asyncio.LimitOverrunError:
                raise HTTPFailure("response headers too large") from None
            except (ConnectionError, OSError):
                raise _Stale from None
            lines = raw.decode("latin-1").split("\r\n")
            status_line = lines[0].split(" ", 2)
            try:
                status = int(status_line[1])
            except (IndexError, ValueError):
                raise HTTPFailure(f"not an HTTP response: {lines[0][:60]!r}") from None
            if not 100 <= status < 200 or status == 101:
                break  # 1xx (e.g. 100 Continue) precede the real response
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        keep = status_line[0] == "HTTP/1.1" and "close" not in headers.get(
            "connection", "").lower()
        raising = raise_over and status < 400
        if status >= 400:
            limit = error_limit
        try:
            if method == "HEAD" or status in (204, 304):
                body, whole = b"", True
            elif "chunked" in headers.get("transfer-encoding", "").lower():
                body, whole = await _chunked(reader, limit, raising)
            elif "content-length" in headers:
                try:
                    length = int(headers["content-length"])
                except ValueError:
                    raise HTTPFailure("bad Content-Length") from None
                if length > limit and raising:
                    raise TooLarge
                body = await reader.readexactly(min(length, limit))
                whole = length <= limit
            else:  # read to close
                body, whole = await _to_eof(reader, limit, raising)
                keep = False
        except asyncio.IncompleteReadError:
            raise HTTPFailure("connection closed by server") from None
        except (ConnectionError, OSError) as e:
            raise HTTPFailure(" ".join(str(e).split())[:120] or type(e).__name__) from None
        encoding = headers.get("content-encoding", "identity").lower()
        if encoding in ("gzip", "deflate") and body:
            body = _inflate(body, encoding, limit, raising)
        elif encoding != "identity":
            raise HTTPFailure(f"unsupported Content-Encoding {encoding!r}")
        return Response(status, headers, body), keep and whole

    async def aclose(self) -> None:
        """Close the idle connections (those in use close when their exchange ends)."""
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        for conn in idle:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.writer.wait_closed(), 1.0)


class _Stale(Exception):
    """No byte of a response arrived before the connection ended (internal)."""


async def _chunked(reader: asyncio.StreamReader, limit: int, raising: bool
                   ) -> tuple[bytes, bool]:
    parts: list[bytes] = []
    size = 0
    while True:
        line = await reader.readline()
        if not line:
            raise asyncio.IncompleteReadError(b"", None)
        try:
            n = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise HTTPFailure("malformed chunked body") from None
        if n == 0:
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(parts), True
        if size + n > limit:
            if raising:
                raise TooLarge
            parts.append(await reader.readexactly(limit - size))
            return b"".join(parts), False
        parts.append(await reader.readexactly(n))
        size += n
        await reader.readexactly(2)  # the chunk's CRLF


async def _to_eof(reader: asyncio.StreamReader, limit: int, raising: bool
                  ) -> tuple[bytes, bool]:
    parts: list[bytes] = []
    size = 0
    while chunk := await reader.read(_READ):
        size += len(chunk)
        if size > limit:
            if raising:
                raise TooLarge
            parts.append(chunk[:len(chunk) - (size - limit)])
            return b"".join(parts), False
        parts.append(chunk)
    return b"".join(parts), True


def _inflate(body: bytes, encoding: str, limit: int, raising: bool) -> bytes:
    """A compressed body, decompressed to at most ``limit`` bytes (a bomb stops there)."""
    d = zlib.decompressobj(wbits=31 if encoding == "gzip" else 15)
    try:
        out = d.decompress(body, limit)
    except zlib.error:
        raise HTTPFailure(f"bad {encoding} body") from None
    if d.unconsumed_tail and raising:
        raise TooLarge
    return out
