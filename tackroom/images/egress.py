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

import contextlib
import ctypes
import fcntl
import logging
import os
import re
import socket
import struct
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from tackroom.core.errors import ConfigError, InfraError
from tackroom.images.proxy import (
    ALLOW_ENV,
    _AllowList,
    _Proxy,
    _ProxyThread,
    _valid_host,
)

log = logging.getLogger(__name__)

#: Hosts a build may reach without being told: the package registries of Debian, Ubuntu,
#: PyPI, npm, Go modules, crates.io, RubyGems and Maven Central. ``*.`` matches any
#: subdomain (not the domain itself).
DEFAULT_REGISTRIES: tuple[str, ...] = (
    "deb.debian.org", "security.debian.org", "*.debian.org",
    "archive.ubuntu.com", "security.ubuntu.com", "ports.ubuntu.com",
    "pypi.org", "files.pythonhosted.org",
    "registry.npmjs.org", "*.npmjs.org",
    "proxy.golang.org", "sum.golang.org",
    "index.crates.io", "static.crates.io",
    "rubygems.org", "index.rubygems.org",
    "repo.maven.apache.org", "repo1.maven.org",
)
#: Where the proxy listens, inside the build namespace (each namespace has its own).
DEFAULT_PORT = 3128
#: The CA bundle as a build step sees it: the builder binds :func:`host_ca_bundle` here.
SANDBOX_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
#: Variables that point TLS clients (pip, requests, OpenSSL, Node, curl, git) at a CA bundle.
CA_ENV_VARS: tuple[str, ...] = (
    "PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
)

_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_IFREQ = "16sH22x"  # struct ifreq: the name, then ifr_flags in a 24-byte union

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


# --- the namespace ----------------------------------------------------------------------------

def _needs_root(what: str) -> InfraError:
    return InfraError(what, "build network",
                      "build task environments as root, or use --sandbox docker")


def loopback_namespace() -> int:
    """A new network namespace holding only ``lo`` (up): its descriptor, for :func:`enter`.

    What an episode's sandboxes share when a task has services: they reach each
    other on ``127.0.0.1`` and nothing else. Close the descriptor to let it go.
    """
    return _make_namespace(None)[0]


def enter(ns_fd: int) -> None:
    """Move the calling (forked, about to ``exec``) process into the namespace ``ns_fd``."""
    if _setns(ns_fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns into a network namespace: {os.strerror(err)}")


@contextlib.contextmanager
def thread_inside(ns_fd: int) -> Iterator[None]:
    """This thread alone in the network namespace ``ns_fd`` for the ``with`` block (a
    namespace is a thread's own in Linux): what it starts meanwhile starts there, with no
    code run in the child to get it there. Back to the thread's own namespace after."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        enter(ns_fd)
        try:
            yield
        finally:
            if _setns(home, _CLONE_NEWNET) != 0:  # cannot happen to root: say it if it does
                raise OSError(ctypes.get_errno(), "setns back to this thread's namespace")
    finally:
        os.close(home)


def _make_namespace(port: int | None, join: int | None = None) -> tuple[int, socket.socket | None]:
    """A new network namespace with ``lo`` up: its descriptor and a socket listening in it
    on ``port`` (none when ``port`` is ``None``). With ``join`` (a namespace's descriptor:
    a Docker container's, whose only interface is its loopback), that namespace instead of
    a new one; its descriptor is then a duplicate of ``join``.

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
            if join is not None and _setns(join, _CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                result["error"] = _needs_root(
                    f"cannot enter the container's network namespace: {os.strerror(err)}")
                return
            if join is None and _unshare(_CLONE_NEWNET) != 0:
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
                if port is not None:
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

    ``netns`` (a descriptor) puts the proxy into an existing namespace instead of a new one:
    a Docker container started with ``--network none`` (its ``docker build`` steps join it
    with ``--network container:NAME``), which then reaches the registries and nothing else.
    """

    def __init__(self, allow: Iterable[str] = (), *, port: int = DEFAULT_PORT,
                 registries: Iterable[str] = DEFAULT_REGISTRIES,
                 environ: Mapping[str, str] | None = None,
                 connect_timeout: float = 20.0, netns: int | None = None) -> None:
        self._join = netns
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
        ns_fd, listener = _make_namespace(self.port, self._join)
        assert listener is not None
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
        enter(fd)

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
