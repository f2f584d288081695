"""The listener every tackroom server runs: sockets, one task per connection, and who may hold one.

``tackroom serve``, the recording gateway and the scripted test server each give
an :class:`HttpServer` a handler; it listens on TCP (and a Unix socket when
asked), accepts, and runs one :class:`~tackroom.wire.http11.HttpConnection` per
client on the caller's event loop.

**Admission** (why one client cannot starve the others). Connections are a
bounded resource (file descriptors); a client that opens hundreds and never
authenticates must not take the places of the clients that do:

* A connection is *unauthenticated* until a request on it is recognised (the
  handler calls ``connection.identify(key)``: the gateway with an episode's
  token, ``tackroom serve`` with its API key). An unauthenticated connection may
  stay idle :attr:`Limits.unauthenticated_idle_s` (5 s), not ``read_timeout``;
  past :attr:`Limits.max_unauthenticated_per_peer` from one peer (an IP address;
  all Unix-socket clients are one peer) or :attr:`Limits.max_unauthenticated`
  in all, a newcomer closes the oldest idle one.
* An identified client holds at most :attr:`Limits.max_per_identity`
  connections; past it, its own oldest idle one is closed.
* The ceiling on open connections is :attr:`Limits.max_connections`, or by
  default ``capacity()`` (the gateway: a share per open route, so it grows with
  the episodes in flight) within three quarters of ``RLIMIT_NOFILE``. At the
  ceiling the server **stops accepting** (new clients wait in the listen
  backlog: back-pressure, never a 503) and closes idle connections —
  unauthenticated ones first — to make room.

"Idle" is strict: waiting for a request with no byte of it sent, for at least
:attr:`Limits.evict_after_s`, so a client that has just connected and is about to
send is never the one closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import select
import socket
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h11

from tackroom.core.errors import ConfigError
from tackroom.wire.http11 import BodyBudget, Gone, Handler, HttpConnection

__all__ = ["LISTEN_BACKLOG", "Limits", "HttpServer", "fd_ceiling"]

log = logging.getLogger("tackroom.wire")

#: Connections the kernel queues before the server accepts them (and while it waits
#: at its ceiling); the kernel caps it at ``net.core.somaxconn``.
LISTEN_BACKLOG = 1024


@dataclass
class Limits:
    """Who may hold a connection, and for how long (see the module's notes)."""

    #: Open connections at most; ``None``: ``capacity()`` within :func:`fd_ceiling`.
    max_connections: int | None = None
    max_unauthenticated: int = 256
    max_unauthenticated_per_peer: int = 32
    max_per_identity: int = 64
    #: Seconds an unauthenticated connection may wait for its next request.
    unauthenticated_idle_s: float = 5.0
    #: Seconds a connection must have been idle before it may be closed for a newcomer.
    evict_after_s: float = 1.0


def fd_ceiling() -> int:
    """Connections this process can afford: three quarters of its ``RLIMIT_NOFILE`` soft limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 65536
    return max(16, soft * 3 // 4)


def _waiting_bytes(conn: HttpConnection) -> bool:
    """Whether the client has sent bytes not read yet (buffered, or in the kernel)."""
    if conn.pending_bytes():
        return True
    sock = conn.writer.get_extra_info("socket")
    if sock is None:
        return False
    try:
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return False


class HttpServer:
    """Listens, accepts within the admission limits, and serves each connection with ``handler``.

    Args:
        handler: answers each :class:`~tackroom.wire.http11.Request`.
        host, port: TCP address (``port=0``: a free one).
        unix_socket: a path to listen on as well; a stale socket file is replaced,
            one that another server answers on is refused.
        max_body, read_timeout: per request (see :class:`HttpConnection`).
        max_buffered: request-body bytes all connections may hold at once.
        limits: the admission limits.
        capacity: the default ceiling on open connections, read at each accept.
        where: what to name in a :class:`ConfigError` (``serve``, ``gateway``).
    """

    def __init__(self, handler: Handler, *, host: str = "127.0.0.1", port: int = 0,
                 unix_socket: str | Path | None = None, max_body: int, read_timeout: float,
                 max_buffered: int, limits: Limits | None = None,
                 capacity: Callable[[], int] | None = None, where: str = "server") -> None:
        self.handler = handler
        self.host, self.port = host, int(port)
        self.unix_socket = Path(unix_socket) if unix_socket is not None else None
        self.max_body, self.read_timeout = int(max_body), float(read_timeout)
        self.budget = BodyBudget(max(int(max_buffered), self.max_body))
        self.limits = limits or Limits()
        self.capacity = capacity or (lambda: 1024)
        self.where = where
        self.connections: set[HttpConnection] = set()
        self._sockets: list[socket.socket] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._freed = asyncio.Event()  # set whenever a connection ends
        self._closed = False

    # ------------------------------------------------------------------ life
    def bind(self) -> None:
        """Bind the sockets now (raises :class:`ConfigError` naming the address)."""
        if self._sockets:
            return
        try:
            tcp = socket.create_server((self.host, self.port), backlog=LISTEN_BACKLOG,
                                       family=socket.AF_INET6 if ":" in self.host
                                       else socket.AF_INET)
        except OSError as e:
            raise ConfigError(f"cannot listen on {self.host}:{self.port} ({e.strerror or e})",
                              self.where, "pick another port, or stop what is using it") \
                from None
        self.port = int(tcp.getsockname()[1])
        self._sockets.append(tcp)
        if self.unix_socket is not None:
            try:
                _clear_stale_socket(self.unix_socket, self.where)
                unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    unix.bind(str(self.unix_socket))
                    unix.listen(LISTEN_BACKLOG)
                except OSError:
                    unix.close()
                    raise
            except (OSError, ConfigError) as e:
                tcp.close()
                self._sockets.clear()
                if isinstance(e, ConfigError):
                    raise
                raise ConfigError(f"cannot listen on Unix socket {self.unix_socket} "
                                  f"({e.strerror or e})", self.where,
                                  "use a short path (under 108 bytes) in a writable "
                                  "directory") from None
            self._sockets.append(unix)
        for s in self._sockets:
            s.setblocking(False)

    async def start(self) -> None:
        """Bind (if not yet) and accept on the running event loop."""
        self.bind()
        loop = asyncio.get_running_loop()
        for s in self._sockets:
            self._keep(loop.create_task(self._accept(s)))

    async def aclose(self) -> None:
        """Stop accepting, end open connections, remove the Unix socket (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for s in self._sockets:
            s.close()
        if self.unix_socket is not None and self._sockets:
            with contextlib.suppress(OSError):
                if stat.S_ISSOCK(os.lstat(self.unix_socket).st_mode):
                    os.unlink(self.unix_socket)
        self._sockets.clear()

    def close_now(self) -> None:
        """Close the listening sockets from any thread (no new connections)."""
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.close()

    def _keep(self, task: asyncio.Task[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def ceiling(self) -> int:
        """Open connections at most, now."""
        if self.limits.max_connections is not None:
            return self.limits.max_connections
        return max(1, min(fd_ceiling(), int(self.capacity())))

    # ------------------------------------------------------------ accepting
    async def _accept(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wait_for_room()
            try:
                client, addr = await loop.sock_accept(sock)
            except OSError as e:  # out of descriptors, mostly: let some close first
                log.warning("%s: accept failed (%s)", self.where, e)
                await asyncio.sleep(0.1)
                continue
            peer = addr[0] if isinstance(addr, tuple) and addr else "unix"
            self._keep(loop.create_task(self._connection(client, str(peer))))

    async def _wait_for_room(self) -> None:
        """Back-pressure: while at the ceiling, close idle connections or wait for one to end."""
        while len(self.connections) >= self.ceiling:
            victim = self._idlest(self.connections, prefer_unauthenticated=True)
            if victim is not None:
                victim.evict()
            self._freed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._freed.wait(), self.limits.evict_after_s / 2)

    def _idlest(self, conns: Any, *, prefer_unauthenticated: bool = False,
                min_idle: float | None = None) -> HttpConnection | None:
        """The connection idle longest (unauthenticated first, if asked), or ``None``."""
        now = time.monotonic()
        least = self.limits.evict_after_s if min_idle is None else min_idle
        idle = sorted((c for c in conns
                       if c.idle_since is not None and now - c.idle_since >= least),
                      key=lambda c: (prefer_unauthenticated and c.identity is not None,
                                     c.idle_since))
        # The poll is a system call: made only for the candidates in order.
        return next((c for c in idle if not _waiting_bytes(c)), None)

    async def _connection(self, client: socket.socket, peer: str) -> None:
        writer = None
        try:
            reader, writer = await asyncio.open_connection(sock=client, limit=2**16)
        except OSError:
            client.close()
            return
        http = HttpConnection(reader, writer, self.handler, max_body=self.max_body,
                              read_timeout=self.read_timeout, budget=self.budget, peer=peer,
                              idle_timeout=self._idle_timeout, on_identify=self._identified)
        self.connections.add(http)
        try:
            self._admit(http)
            await http.serve()
        except (Gone, ConnectionError, TimeoutError, h11.ProtocolError):
            pass
        except asyncio.CancelledError:
            if not self._closed:
                raise
            # aclose() ends this connection: finish quietly
        except Exception:  # noqa: BLE001 - a server bug must not take the server down
            log.exception("%s connection failed", self.where)
        finally:
            self.connections.discard(http)
            self._freed.set()
            # On shutdown the event loop may have closed the transport already: closing
            # it again raises, and nothing is left to do.
            with contextlib.suppress(Exception):
                writer.close()
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    # ------------------------------------------------------------ admission
    def _idle_timeout(self, conn: HttpConnection) -> float:
        if conn.identity is None:
            return min(self.read_timeout, self.limits.unauthenticated_idle_s)
        return self.read_timeout

    def _admit(self, newcomer: HttpConnection) -> None:
        """Unauthenticated connections past a limit: the oldest idle one makes room."""
        unauth = [c for c in self.connections if c.identity is None and c is not newcomer]
        same = [c for c in unauth if c.peer == newcomer.peer]
        if len(same) >= self.limits.max_unauthenticated_per_peer:
            victim = self._idlest(same)
            if victim is not None:
                victim.evict()
                return
        if len(unauth) >= self.limits.max_unauthenticated:
            victim = self._idlest(unauth)
            if victim is not None:
                victim.evict()

    def _identified(self, conn: HttpConnection, identity: str) -> None:
        """An identified client past ``max_per_identity``: its own oldest idle one makes room."""
        mine = [c for c in self.connections if c.identity == identity and c is not conn]
        if len(mine) >= self.limits.max_per_identity:
            victim = self._idlest(mine, min_idle=0.0)
            if victim is not None:
                victim.evict()


def _clear_stale_socket(path: Path, where: str) -> None:
    """Remove a socket file nothing listens on; refuse one in use, or any other file."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ConfigError(f"{path} exists and is not a socket", where,
                          "give a path that does not exist yet")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(str(path))
    except OSError:
        os.unlink(path)  # stale: its server is gone
        return
    finally:
        probe.close()
    raise ConfigError(f"another server listens on {path}", where,
                      "stop it, or give another path")
