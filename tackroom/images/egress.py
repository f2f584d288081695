"""The network of a Dockerfile build: a namespace that reaches only the package registries.

A build step (``RUN apt-get install …``, ``RUN pip install …``) runs in ``bwrap`` *without*
``--unshare-net``, inside a network namespace made here that holds nothing but a loopback
interface. On that loopback, at ``127.0.0.1:3128``, listens an HTTP forward proxy; the
build step is told about it through ``http_proxy``/``https_proxy`` (:meth:`BuildNetwork.env`)
and has no other way out: no route, no DNS. The proxy itself runs in this process, in the
host's namespace, so its own connections reach the internet — but only to hosts on the
allow-list (:data:`DEFAULT_REGISTRIES`, plus ``TACKROOM_BUILD_ALLOW``, plus ``allow=``).

How the namespace is made without moving the process: ``unshare(CLONE_NEWNET)`` affects only
the calling *thread*, so a short-lived thread unshares, keeps a descriptor of its new
namespace, brings ``lo`` up, creates the listening socket (a socket belongs to the namespace it
was created in, whoever serves it later) and goes back. The namespace lives as long as that
descriptor (and the processes in it); :meth:`BuildNetwork.close` lets it go.

The proxy speaks HTTP/1.1:

* ``CONNECT host:443`` opens an opaque tunnel (https; pip, npm, curl). Only port 443, unless
  an allow-list entry names another port (``registry.example:8443``).
* ``GET http://host/path HTTP/1.1`` (what apt sends through ``http_proxy``) is forwarded to the
  origin on port 80 in origin form, with hop-by-hop headers removed; responses stream back.
  Requests on one client connection are answered in order (pipelining works: the next request
  waits in the socket until the previous response is relayed); the upstream connection is
  kept alive and reused while requests go to the same host, and replaced when the host
  changes. A reused upstream connection the origin closed meanwhile is reopened once, for
  requests without a body.
* A host not on the allow-list gets ``403 Forbidden``, with a body (and reason phrase) naming
  the host and :data:`ALLOW_ENV`; it is recorded in :attr:`BuildNetwork.denied`. A name that
  does not resolve, or a refused connection, gets ``502`` with a one-line reason; an upstream
  that does not answer in time, ``504``. Names that resolve only to loopback, link-local
  (cloud metadata), unspecified or multicast addresses are refused (``502``): the allow-list
  is about the registries, not about this machine.

TLS is never intercepted here. Where the *host's* own egress passes through an intercepting
proxy with a private CA, the client inside the build must trust that CA: the builder binds
:func:`host_ca_bundle` read-only over the image's :data:`SANDBOX_CA_BUNDLE`, and
:meth:`BuildNetwork.env` points the usual variables (``PIP_CERT``, ``SSL_CERT_FILE``, …) at it.

Root only: making a network namespace needs ``CAP_SYS_ADMIN``. Without it,
:class:`BuildNetwork` raises :class:`~tackroom.core.errors.InfraError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import ipaddress
import logging
import os
import re
import socket
import struct
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

from tackroom.core.errors import ConfigError, InfraError

log = logging.getLogger(__name__)

#: Hosts a build may reach without being told: the package registries of Debian, Ubuntu,
#: PyPI and npm. ``*.`` matches any subdomain (not the domain itself).
DEFAULT_REGISTRIES: tuple[str, ...] = (
    "deb.debian.org", "security.debian.org", "*.debian.org",
    "archive.ubuntu.com", "security.ubuntu.com", "ports.ubuntu.com",
    "pypi.org", "files.pythonhosted.org",
    "registry.npmjs.org", "*.npmjs.org",
)
#: The environment variable that extends the allow-list: comma-separated host patterns.
ALLOW_ENV = "TACKROOM_BUILD_ALLOW"
#: Where the proxy listens, inside the build namespace (each namespace has its own).
DEFAULT_PORT = 3128
#: The CA bundle as a build step sees it: the builder binds :func:`host_ca_bundle` here.
SANDBOX_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
#: Variables that point TLS clients (pip, requests, OpenSSL, Node, curl, git) at a CA bundle.
CA_ENV_VARS: tuple[str, ...] = (
    "PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
)

_HTTP_PORT, _TLS_PORT = 80, 443
_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_IFREQ = "16sH22x"  # struct ifreq: the name, then ifr_flags in a 24-byte union

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
_PATTERN = re.compile(r"^(\*\.)?([a-z0-9_.-]+|\[[0-9a-f:.]+\])(:[0-9]{1,5})?$")

_libc = ctypes.CDLL(None, use_errno=True)
# Resolved once, here: :meth:`BuildNetwork.enter` runs in a forked child, where the less
# it does the better.
_setns = _libc.setns
_setns.argtypes = (ctypes.c_int, ctypes.c_int)
_setns.restype = ctypes.c_int
_unshare = _libc.unshare
_unshare.argtypes = (ctypes.c_int,)
_unshare.restype = ctypes.c_int


def host_ca_bundle() -> Path | None:
    """The CA bundle this machine trusts: ``$SSL_CERT_FILE``, else the Debian bundle, else None.

    The builder binds it read-only over the image's :data:`SANDBOX_CA_BUNDLE` during a build, so
    that TLS through an intercepting proxy on the way out (whose CA is in this bundle) verifies.
    """
    named = os.environ.get("SSL_CERT_FILE")
    for candidate in (named, SANDBOX_CA_BUNDLE):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


# --- the allow-list ---------------------------------------------------------------------------

def parse_allow(text: str, *, where: str = ALLOW_ENV) -> tuple[str, ...]:
    """The host patterns of a comma-separated list (``TACKROOM_BUILD_ALLOW``), normalized.

    A pattern is a host name (``mirror.example.org``), ``*.`` and a domain (any subdomain), or
    an IP address, each optionally with ``:port`` (that port only; without one, 80 for http
    and 443 for https). Raises :class:`ConfigError` naming ``where`` for anything else.
    """
    patterns = []
    for raw in text.split(","):
        item = raw.strip().lower().rstrip(".")
        if not item:
            continue
        match = _PATTERN.match(item)
        if match:
            wildcard, host, port = match.groups()
            bracketed = host.startswith("[")
            valid = (_valid_host(host.strip("[]")) and not (wildcard and bracketed)
                     and (not bracketed or ":" in host)
                     and (port is None or 0 < int(port[1:]) < 65536))
        if not match or not valid:
            raise ConfigError(
                f"{raw.strip()!r} is not a host pattern", where,
                "give host names, '*.domain' or IP addresses, each optionally with ':port', "
                "separated by commas (e.g. mirror.example.org,*.example.net:8443)")
        patterns.append(item)
    return tuple(patterns)


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


# --- the namespace ----------------------------------------------------------------------------

def _needs_root(what: str) -> InfraError:
    return InfraError(what, "build network",
                      "build task environments as root, or use --sandbox docker")


def _make_namespace(port: int) -> tuple[int, socket.socket]:
    """A new network namespace with ``lo`` up: its descriptor and a socket listening in it.

    The work happens in a thread of its own, which goes back to its original namespace when
    done (and ends): the rest of the process never leaves the host's network.
    """
    result: dict[str, object] = {}

    def work() -> None:
        ns_fd = -1
        listener = None
        try:
            home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            result["error"] = exc
            return
        try:
            if _unshare(_CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                result["error"] = _needs_root(
                    f"cannot create the build's network namespace: {os.strerror(err)}")
                return
            try:
                ns_fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as ctl:
                    flags = struct.unpack(_IFREQ, fcntl.ioctl(
                        ctl, _SIOCGIFFLAGS, struct.pack(_IFREQ, b"lo", 0)))[1]
                    fcntl.ioctl(ctl, _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))
                listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                listener.bind(("127.0.0.1", port))
                listener.listen(128)
                listener.setblocking(False)
                result["ok"] = (ns_fd, listener)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                result["error"] = exc
                if listener is not None:
                    listener.close()
                if ns_fd >= 0:
                    os.close(ns_fd)
            finally:
                # Not strictly needed (the thread ends next), but leaves nothing to chance.
                _setns(home, _CLONE_NEWNET)
        finally:
            os.close(home)

    thread = threading.Thread(target=work, name="tackroom-build-netns", daemon=True)
    thread.start()
    thread.join()
    if "ok" not in result:
        error = result.get("error")
        if isinstance(error, InfraError):
            raise error
        raise InfraError(f"cannot set up the build's network namespace: {error}",
                         "build network", "check that /proc is mounted and bwrap works")
    return result["ok"]  # type: ignore[return-value]


class BuildNetwork:
    """A network namespace for a build, whose only way out is a proxy to the registries.

    Use as a context manager (or :meth:`start` / :meth:`close`)::

        with BuildNetwork(allow=extra_hosts) as net:
            binds = []
            if net.ca_bundle:
                binds = ["--ro-bind", str(net.ca_bundle), SANDBOX_CA_BUNDLE]
            env = {**base_env, **net.env()}
            subprocess.run(["bwrap", ..., *binds, "--", "sh", "-c", step],
                           env=env, preexec_fn=net.enter)      # no --unshare-net
            if failed and net.denied:
                ...  # tell the user which hosts were refused and how to allow them

    ``allow`` adds host patterns (see :func:`parse_allow`) to ``registries`` (by default
    :data:`DEFAULT_REGISTRIES`) and to those in ``$TACKROOM_BUILD_ALLOW`` (read from
    ``environ``, by default ``os.environ``, when constructed).
    """

    def __init__(self, allow: Iterable[str] = (), *, port: int = DEFAULT_PORT,
                 registries: Iterable[str] = DEFAULT_REGISTRIES,
                 environ: Mapping[str, str] | None = None,
                 connect_timeout: float = 20.0) -> None:
        environ = os.environ if environ is None else environ
        patterns = (*parse_allow(",".join(registries), where="registries"),
                    *parse_allow(environ.get(ALLOW_ENV, ""), where=ALLOW_ENV),
                    *parse_allow(",".join(allow), where="allow"))
        self._allow = _AllowList(patterns)
        #: The port the proxy listens on, on the namespace's 127.0.0.1 (known once started
        #: when 0 was asked for).
        self.port = port
        #: The host's CA bundle (:func:`host_ca_bundle`), decided once, at start.
        self.ca_bundle: Path | None = None
        self._connect_timeout = connect_timeout
        self._ns_fd: int | None = None
        self._proxy: _Proxy | None = None
        self._server: _ProxyThread | None = None

    # -- lifecycle --

    def start(self) -> BuildNetwork:
        """Make the namespace and start the proxy. Raises :class:`InfraError` without root."""
        if self._server is not None or self._ns_fd is not None:
            raise RuntimeError("this BuildNetwork is already started")
        if os.geteuid() != 0:
            raise _needs_root("building task environments needs root "
                              "(the build gets a network namespace of its own)")
        ns_fd, listener = _make_namespace(self.port)
        self.port = listener.getsockname()[1]
        self._proxy = _Proxy(self._allow, connect_timeout=self._connect_timeout)
        server = _ProxyThread(self._proxy, listener)
        try:
            server.start()
        except BaseException:
            os.close(ns_fd)
            raise
        self._ns_fd, self._server = ns_fd, server
        self.ca_bundle = host_ca_bundle()
        log.debug("build network up: %s, proxy on 127.0.0.1:%d", self.ns_path, self.port)
        return self

    def close(self) -> None:
        """Stop the proxy (cutting open tunnels) and let the namespace go. Idempotent."""
        server, self._server = self._server, None
        if server is not None:
            server.stop()
        fd, self._ns_fd = self._ns_fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> BuildNetwork:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- joining the namespace --

    def enter(self) -> None:
        """Move the calling process into the build namespace: ``Popen(preexec_fn=net.enter)``.

        Meant for the forked child before ``exec`` (the descriptor is still in its table then,
        close-on-exec or not). Raises when the network is not started, so that nothing ever
        runs on the host's network by mistake. (``preexec_fn`` is not safe in every program
        with threads; ``nsenter --net=`` with :attr:`ns_path` is the alternative.)
        """
        fd = self._ns_fd
        if fd is None:
            raise RuntimeError("the build network is not started")
        if _setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into the build network: {os.strerror(err)}")

    @property
    def ns_path(self) -> str:
        """A path to the namespace while started, for ``nsenter --net=PATH``."""
        if self._ns_fd is None:
            raise RuntimeError("the build network is not started")
        return f"/proc/{os.getpid()}/fd/{self._ns_fd}"

    # -- what a build step needs --

    def env(self, *, ca_path: str = SANDBOX_CA_BUNDLE) -> dict[str, str]:
        """Environment variables for a build step: the proxy and, with a host CA bundle, it.

        ``ca_path`` is where the builder binds :attr:`ca_bundle` inside the sandbox (by
        default :data:`SANDBOX_CA_BUNDLE`); the :data:`CA_ENV_VARS` are set only when
        :attr:`ca_bundle` is (after :meth:`start`), that is when there is one to bind.
        """
        url = f"http://127.0.0.1:{self.port}"
        env = {name: url for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")}
        env.update(no_proxy="", NO_PROXY="", PIP_DEFAULT_TIMEOUT="60")
        if self.ca_bundle is not None:
            env.update(dict.fromkeys(CA_ENV_VARS, ca_path))
        return env

    # -- what happened --

    @property
    def allow(self) -> tuple[str, ...]:
        """The host patterns in effect."""
        return self._allow.patterns

    @property
    def allowed_hosts(self) -> set[str]:
        """Each ``host:port`` the proxy let through (a copy)."""
        return self._proxy.allowed_hosts if self._proxy else set()

    @property
    def denied(self) -> list[str]:
        """Each ``host:port`` refused for not being on the allow-list, first refusal first."""
        return self._proxy.denied if self._proxy else []


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
        addresses = list(dict.fromkeys(info[4][0] for info in infos))
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
