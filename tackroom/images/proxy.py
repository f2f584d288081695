"""The build network's HTTP forward proxy: an allow-list of hosts, ``CONNECT`` tunnels for
https, absolute-URI requests (what apt sends through ``http_proxy``) relayed in order.

:class:`~tackroom.images.egress.BuildNetwork` serves it on a listening socket made in the
build's own network namespace; its outbound connections are made from the host's.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import re
import socket
import threading
from collections.abc import Iterable
from typing import cast

from tackroom.core.errors import InfraError

log = logging.getLogger(__name__)

_HTTP_PORT, _TLS_PORT = 80, 443
#: The environment variable that extends the allow-list: comma-separated host patterns.
ALLOW_ENV = "TACKROOM_BUILD_ALLOW"
_HEAD_LIMIT = 64 * 1024       # bytes in a request or response head
_MAX_HEADERS = 200
_CHUNK = 64 * 1024
_HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-connection", "proxy-authenticate",
    "proxy-authorization", "te", "upgrade",
})
_CHUNK_SIZE = re.compile(rb"^[0-9A-Fa-f]{1,16}$")
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_HOST_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")


class _AllowList:
    """Which ``host:port`` a build may reach."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(dict.fromkeys(patterns))
        self._rules: list[tuple[str, bool, int | None]] = []
        for pattern in self.patterns:
            wildcard = pattern.startswith("*.")
            body = pattern[2:] if wildcard else pattern
            if body.startswith("["):
                host, _, port = body[1:].partition("]")
                port = port[1:]
            elif body.count(":") == 1:
                host, _, port = body.partition(":")
            else:
                host, port = body, ""
            self._rules.append((host, wildcard, int(port) if port else None))

    def allows(self, host: str, port: int, default_port: int) -> bool:
        for name, wildcard, rule_port in self._rules:
            if (rule_port or default_port) != port:
                continue
            if host == name if not wildcard else host.endswith("." + name):
                return True
        return False


def _valid_host(host: str) -> bool:
    """Whether ``host`` (lower case) is a DNS name or an IP address."""
    with contextlib.suppress(ValueError):
        ipaddress.ip_address(host)
        return True
    return 0 < len(host) <= 253 and all(_HOST_LABEL.match(label) for label in host.split("."))


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"




# --- the proxy --------------------------------------------------------------------------------

class _Refusal(Exception):
    """An error response to send the client, after which its connection is closed."""

    def __init__(self, status: int, reason: str, body: str) -> None:
        super().__init__(body)
        self.status, self.reason, self.body = status, reason, body


class _Malformed(Exception):
    """A request or response head (or body framing) that is not valid HTTP/1.x."""


class _Head:
    """A parsed HTTP head: the start line and the headers, in order, as sent."""

    __slots__ = ("start", "headers")

    def __init__(self, start: str, headers: list[tuple[str, str]]) -> None:
        self.start, self.headers = start, headers

    def values(self, name: str) -> list[str]:
        return [v for n, v in self.headers if n.lower() == name]

    def tokens(self, name: str) -> set[str]:
        return {t.strip().lower() for v in self.values(name) for t in v.split(",") if t.strip()}

    def forwarded(self, *, drop: Iterable[str] = ()) -> list[str]:
        """The header lines to pass on: without hop-by-hop ones, nor those in ``drop``."""
        skip = _HOP_BY_HOP | self.tokens("connection") | set(drop)
        return [f"{n}: {v}" for n, v in self.headers if n.lower() not in skip]


async def _read_head(reader: asyncio.StreamReader) -> _Head | None:
    """The next head on ``reader``; None at a clean end of stream before its first byte."""
    lines: list[bytes] = []
    size = 0
    while True:
        try:
            line = await reader.readline()
        except ValueError as exc:  # a line longer than the reader's limit
            raise _Malformed("a header line is too long") from exc
        if not line:
            if size == 0:
                return None
            raise _Malformed("the connection closed inside a head")
        size += len(line)
        if size > _HEAD_LIMIT or len(lines) > _MAX_HEADERS:
            raise _Malformed("the head is too large")
        if not line.endswith(b"\n"):
            raise _Malformed("the connection closed inside a head")
        line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        if b"\r" in line or b"\0" in line:  # a lone CR could split the line further on
            raise _Malformed("a CR or NUL inside a head line")
        if not line:
            if lines:
                break
            continue  # blank lines before a request are ignored (RFC 9112, 2.2)
        lines.append(line)
    start, *fields = (raw.decode("latin-1") for raw in lines)
    headers = []
    for field in fields:
        name, sep, value = field.partition(":")
        if not sep or not _TOKEN.match(name):  # also refuses obs-fold and spaces before ':'
            raise _Malformed(f"bad header line {field[:80]!r}")
        headers.append((name, value.strip(" \t")))
    return _Head(start, headers)


def _body_framing(head: _Head, *, request: bool) -> tuple[str, int]:
    """How a body is delimited: ``("length", n)``, ``("chunked", 0)`` or ``("close", 0)``."""
    codings = [t.strip().lower() for v in head.values("transfer-encoding") for t in v.split(",")]
    lengths = {t.strip() for v in head.values("content-length") for t in v.split(",")}
    if codings:
        if request and lengths:
            raise _Malformed("both Transfer-Encoding and Content-Length")
        if codings[-1] == "chunked":
            return "chunked", 0
        if request:
            raise _Malformed("a request body that is not chunked last")
        return "close", 0
    if lengths:
        if len(lengths) != 1 or not next(iter(lengths)).isdigit():
            raise _Malformed("a bad Content-Length")
        return "length", int(next(iter(lengths)))
    return ("length", 0) if request else ("close", 0)


def _split_authority(text: str, default_port: int | None) -> tuple[str, int]:
    """``(host, port)`` of ``host[:port]`` / ``[v6][:port]``; host lower case, checked."""
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket:
            raise _Malformed(f"bad authority {text[:80]!r}")
    elif text.count(":") <= 1:
        host, colon, rest = text.partition(":")
        rest = colon + rest
    else:
        raise _Malformed(f"bad authority {text[:80]!r}")
    host = host.lower().rstrip(".")
    if rest:
        digits = rest[1:]
        if not rest.startswith(":") or not digits.isdigit() or len(digits) > 5:
            raise _Malformed(f"bad port in {text[:80]!r}")
        port = int(digits)
    elif default_port is None:
        raise _Malformed(f"no port in {text[:80]!r}")
    else:
        port = default_port
    if not 0 < port < 65536 or not _valid_host(host):
        raise _Malformed(f"bad authority {text[:80]!r}")
    return host, port


def _local_address(address: str) -> bool:
    """Whether an address is this machine's own or its link's: never a registry."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast


def _response(status: int, reason: str, body: str, *, close: bool = True) -> bytes:
    data = body.encode("utf-8")
    head = [f"HTTP/1.1 {status} {reason}", "Content-Type: text/plain; charset=utf-8",
            f"Content-Length: {len(data)}", "Cache-Control: no-store"]
    if close:
        head.append("Connection: close")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data


class _Upstream:
    """A connection to an origin (or tunnel end), by ``host:port``."""

    def __init__(self, key: str, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.key, self.reader, self.writer = key, reader, writer
        self.used = False

    def close(self) -> None:
        self.writer.close()


class _Proxy:
    """The HTTP/1.1 forward proxy: one :meth:`handle` task per client connection."""

    def __init__(self, allow: _AllowList, *, connect_timeout: float = 20.0,
                 response_timeout: float = 120.0, idle_timeout: float = 300.0,
                 block_local: bool = True) -> None:
        self._allow = allow
        self._connect_timeout = connect_timeout
        self._response_timeout = response_timeout
        self._idle_timeout = idle_timeout
        self._block_local = block_local
        self._lock = threading.Lock()
        self._allowed: set[str] = set()
        self._denied: dict[str, None] = {}
        self._tasks: set[asyncio.Task] = set()

    @property
    def allowed_hosts(self) -> set[str]:
        with self._lock:
            return set(self._allowed)

    @property
    def denied(self) -> list[str]:
        with self._lock:
            return list(self._denied)

    async def aclose(self) -> None:
        """Cancel every client connection (tunnels included) and wait for them to end."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        upstream: list[_Upstream] = []  # at most one: the current origin connection
        try:
            await self._serve(reader, writer, upstream)
        except _Refusal as refusal:
            with contextlib.suppress(ConnectionError, OSError):
                writer.write(_response(refusal.status, refusal.reason, refusal.body))
                await asyncio.wait_for(writer.drain(), 10)
        except (ConnectionError, OSError, TimeoutError, _Malformed, asyncio.IncompleteReadError):
            pass  # a connection that broke or stalled: nothing to tell anyone
        except Exception:  # noqa: BLE001 - a bug must not take the proxy down
            log.exception("build proxy: unexpected error")
        finally:
            for up in upstream:
                up.close()
            writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     upstream: list[_Upstream]) -> None:
        while True:
            try:
                async with asyncio.timeout(self._idle_timeout):
                    head = await _read_head(reader)
            except _Malformed as exc:
                raise _Refusal(400, "Bad Request", f"tackroom build proxy: {exc}\n") from exc
            if head is None:
                return
            parts = head.start.split(" ")
            if len(parts) != 3 or not _TOKEN.match(parts[0]) or parts[2] not in (
                    "HTTP/1.1", "HTTP/1.0"):
                raise _Refusal(400, "Bad Request",
                               f"tackroom build proxy: bad request line {head.start[:100]!r}\n")
            method, target, version = parts
            if method == "CONNECT":
                await self._tunnel(target, reader, writer)
                return
            if not await self._forward(head, method, target, version, reader, writer, upstream):
                return

    # -- the allow-list, connecting --

    def _check(self, host: str, port: int, default_port: int) -> None:
        key = _hostport(host, port)
        if self._allow.allows(host, port, default_port):
            with self._lock:
                self._allowed.add(key)
            return
        with self._lock:
            self._denied[key] = None
        log.info("build proxy: denied %s", key)
        suggestion = host if port == default_port else key
        raise _Refusal(
            403, f"Forbidden: {key} is not in {ALLOW_ENV}",
            f"tackroom build network: {key} is not on the allow-list of package registries.\n"
            f"To allow it, set {ALLOW_ENV}={suggestion} (comma-separated host patterns; "
            f"'*.example.org' for subdomains, 'host:port' for a port other than "
            f"{_HTTP_PORT} or {_TLS_PORT}).\n")

    async def _open(self, host: str, port: int) -> _Upstream:
        key = _hostport(host, port)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout):
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except TimeoutError as exc:
            raise _Refusal(504, "Gateway Timeout",
                           f"tackroom build proxy: resolving {host} timed out\n") from exc
        except OSError as exc:
            raise _Refusal(502, "Bad Gateway", f"tackroom build proxy: cannot resolve {host}: "
                           f"{exc.strerror or exc}\n") from exc
        # SOCK_STREAM results are IPv4/IPv6: an address is a str (an int only where Python lacks IPv6)
        addresses = list(dict.fromkeys(cast(str, info[4][0]) for info in infos))
        if self._block_local:
            addresses = [a for a in addresses if not _local_address(a)]
            if not addresses:
                raise _Refusal(502, "Bad Gateway", f"tackroom build proxy: {host} resolves only "
                               "to local addresses\n")
        last: str = "no address"
        for address in addresses:
            try:
                async with asyncio.timeout(self._connect_timeout):
                    reader, writer = await asyncio.open_connection(address, port, limit=_HEAD_LIMIT)
            except TimeoutError:
                last = "timed out"
                continue
            except OSError as exc:
                last = exc.strerror or str(exc)
                continue
            return _Upstream(key, reader, writer)
        status, reason = (504, "Gateway Timeout") if last == "timed out" else (502, "Bad Gateway")
        raise _Refusal(status, reason, f"tackroom build proxy: cannot connect to {key}: {last}\n")

    # -- CONNECT --

    async def _tunnel(self, target: str, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        try:
            host, port = _split_authority(target, None)
        except _Malformed as exc:
            raise _Refusal(400, "Bad Request", f"tackroom build proxy: CONNECT needs host:port, "
                           f"got {target[:100]!r}\n") from exc
        self._check(host, port, _TLS_PORT)
        up = await self._open(host, port)
        try:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            pipes = [asyncio.create_task(_pipe(reader, up.writer, writer)),
                     asyncio.create_task(_pipe(up.reader, writer, up.writer))]
            try:
                await asyncio.gather(*pipes)
            finally:
                for pipe in pipes:
                    pipe.cancel()
                await asyncio.gather(*pipes, return_exceptions=True)
        finally:
            up.close()

    # -- absolute-URI requests --

    async def _forward(self, head: _Head, method: str, target: str, version: str,
                       reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       upstream: list[_Upstream]) -> bool:
        """Relay one request and its response; whether the client connection stays open."""
        scheme, sep, rest = target.partition("://")
        if not sep or scheme.lower() != "http":
            hint = ("https goes through CONNECT: set https_proxy"
                    if scheme.lower() == "https" else
                    "this is a forward proxy: send absolute URIs (set http_proxy)")
            raise _Refusal(400, "Bad Request",
                           f"tackroom build proxy: cannot serve {target[:100]!r}: {hint}\n")
        cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
        authority, path = rest[:cut], rest[cut:]
        if not path.startswith("/"):
            path = "/" + path
        if "@" in authority:
            raise _Refusal(400, "Bad Request",
                           "tackroom build proxy: credentials in a URI are not forwarded\n")
        try:
            host, port = _split_authority(authority, _HTTP_PORT)
            framing, length = _body_framing(head, request=True)
        except _Malformed as exc:
            raise _Refusal(400, "Bad Request", f"tackroom build proxy: {exc}\n") from exc
        self._check(host, port, _HTTP_PORT)

        client_keep = version == "HTTP/1.1" and "close" not in head.tokens("connection")
        expect = "100-continue" in head.tokens("expect")
        has_body = framing == "chunked" or length > 0
        host_field = _hostport(host, port)
        if port == _HTTP_PORT:
            host_field = host_field.rsplit(":", 1)[0]
        lines = [f"{method} {path} {version}", f"Host: {host_field}",
                 *head.forwarded(drop=("host", "expect") if expect else ("host",))]
        request_head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

        key = _hostport(host, port)
        response: _Head | None = None
        for attempt in (1, 2):
            if upstream and (upstream[0].key != key or upstream[0].writer.is_closing()):
                upstream.pop().close()
            if not upstream:
                upstream.append(await self._open(host, port))
            up = upstream[0]
            reused, up.used = up.used, True
            try:
                up.writer.write(request_head)
                await up.writer.drain()
                if has_body:
                    if expect:
                        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    await self._copy_body(reader, up.writer, framing, length)
                async with asyncio.timeout(self._response_timeout):
                    response = await _read_head(up.reader)
                    while response is not None and _status(response) // 100 == 1:
                        if _status(response) == 101:
                            raise _Malformed("a protocol switch")
                        if not expect:  # we sent our own 100 already
                            writer.write(("\r\n".join([response.start, *response.forwarded()])
                                          + "\r\n\r\n").encode("latin-1"))
                        response = await _read_head(up.reader)
            except TimeoutError as exc:
                raise _Refusal(504, "Gateway Timeout", f"tackroom build proxy: {key} did not "
                               "answer in time\n") from exc
            except (ConnectionError, _Malformed) as exc:
                if reused and not has_body and attempt == 1:
                    upstream.pop().close()
                    continue
                raise _Refusal(502, "Bad Gateway", f"tackroom build proxy: {key}: "
                               f"{exc}\n") from exc
            if response is None and reused and not has_body and attempt == 1:
                upstream.pop().close()  # it closed an idle keep-alive connection: once more
                continue
            break
        if response is None:
            raise _Refusal(502, "Bad Gateway",
                           f"tackroom build proxy: {key} closed the connection without answering\n")

        status = _status(response)
        try:
            if method == "HEAD" or status in (204, 304):
                rframing, rlength = "length", 0
            else:
                rframing, rlength = _body_framing(response, request=False)
        except _Malformed as exc:
            raise _Refusal(502, "Bad Gateway", f"tackroom build proxy: {key}: {exc}\n") from exc
        upstream_keep = (response.start.startswith("HTTP/1.1 ") and rframing != "close"
                         and "close" not in response.tokens("connection"))
        keep = client_keep and rframing != "close"
        out = [response.start, *response.forwarded(
            drop=("content-length",) if rframing == "chunked" else ())]
        if not keep:
            out.append("Connection: close")
        writer.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1"))
        await self._copy_body(up.reader, writer, rframing, rlength)
        if not upstream_keep:
            upstream.pop().close()
        return keep

    async def _copy_body(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         framing: str, length: int) -> None:
        if framing == "length":
            await self._copy_exact(reader, writer, length)
        elif framing == "chunked":
            while True:
                line = await self._line(reader)
                writer.write(line)
                size_text = line.split(b";", 1)[0].strip(b" \t\r\n")
                if not _CHUNK_SIZE.match(size_text):  # int() alone takes "-1", "0x1", "1_0"
                    raise _Malformed("a bad chunk size")
                size = int(size_text, 16)
                if size == 0:
                    while (trailer := await self._line(reader)) not in (b"\r\n", b"\n"):
                        writer.write(trailer)
                    writer.write(trailer)
                    await writer.drain()
                    return
                await self._copy_exact(reader, writer, size)
                if (end := await self._line(reader)) not in (b"\r\n", b"\n"):
                    raise _Malformed("a chunk without its line end")
                writer.write(end)
        else:
            while True:
                async with asyncio.timeout(self._idle_timeout):
                    data = await reader.read(_CHUNK)
                    if not data:
                        return
                    writer.write(data)
                    await writer.drain()

    async def _line(self, reader: asyncio.StreamReader) -> bytes:
        try:
            async with asyncio.timeout(self._idle_timeout):
                line = await reader.readline()
        except ValueError as exc:
            raise _Malformed("a line too long in a chunked body") from exc
        if not line.endswith(b"\n"):
            raise _Malformed("a chunked body cut short")
        return line

    async def _copy_exact(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          length: int) -> None:
        while length > 0:
            async with asyncio.timeout(self._idle_timeout):
                data = await reader.read(min(length, _CHUNK))
                if not data:
                    raise _Malformed("a body cut short")
                writer.write(data)
                length -= len(data)
                await writer.drain()


def _status(head: _Head) -> int:
    parts = head.start.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not (
            len(parts[1]) == 3 and parts[1].isdigit()):
        raise _Malformed(f"a bad status line {head.start[:80]!r}")
    return int(parts[1])


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                source: asyncio.StreamWriter) -> None:
    """Copy one direction of a tunnel; at its end, half-close the other side."""
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        # One side broke: end the whole tunnel.
        writer.transport.abort()
        source.transport.abort()


class _ProxyThread:
    """Serves a listening socket with a :class:`_Proxy` on an event loop in its own thread."""

    def __init__(self, proxy: _Proxy, listener: socket.socket) -> None:
        self._proxy, self._listener = proxy, listener
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="tackroom-build-proxy",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise InfraError(f"cannot start the build proxy: {self._error}", "build network")

    def stop(self) -> None:
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop is already gone
                loop.call_soon_threadsafe(stopping.set)
        self._thread.join()

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - reported by start()
            self._error = exc
        finally:
            self._listener.close()  # a no-op when the server closed it
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._proxy.handle, sock=self._listener,
                                            limit=_HEAD_LIMIT)
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            server.close()
            await self._proxy.aclose()
            await server.wait_closed()
