"""The Docker Engine API over the daemon's Unix socket, for an episode's hot path.

Each ``docker`` CLI call is a Go program's start-up — 25–40 ms on these machines, several
times what the daemon spends answering — and an agent episode under ``--sandbox docker``
made five of them around its CLI's run (``run``, ``inspect``, two ``update``\\s, ``rm``). The
container's life (create, start, inspect, update, remove) goes straight to the daemon's
socket instead, one HTTP request each on a connection of its own. Streaming commands
(``docker exec -i``), builds, ``cp`` and ``import`` stay with the CLI, which does them well.

The socket is ``DOCKER_HOST``'s when that is ``unix://…``, else ``/var/run/docker.sock``.
:func:`socket_path` is ``None`` when the CLI is pointed elsewhere (a TCP or SSH
``DOCKER_HOST``, a context other than the default) or the socket is missing: callers then
use the CLI.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from tackroom.core.errors import InfraError

#: Where dockerd listens when nothing says otherwise.
DEFAULT_SOCKET = "/var/run/docker.sock"


def socket_path() -> str | None:
    """The daemon's Unix socket the CLI would talk to, or ``None`` (use the CLI)."""
    if os.environ.get("DOCKER_CONTEXT") or _current_context() not in ("", "default"):
        return None
    host = os.environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        return None
    path = host[len("unix://"):] if host else DEFAULT_SOCKET
    return path if Path(path).is_socket() else None


def _current_context() -> str:
    """The CLI's current context as its config file names it (``""`` when none)."""
    config = Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker") / "config.json"
    try:
        value = json.loads(config.read_text()).get("currentContext", "")
    except (OSError, ValueError, AttributeError):
        return ""
    return value if isinstance(value, str) else ""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("docker", timeout=timeout)  # the Host header dockerd expects
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def request(method: str, path: str, body: Any = None, *, query: dict[str, str] | None = None,
            ok: tuple[int, ...] = (200, 201, 204), timeout: float = 120,
            where: str = "docker") -> Any:
    """One Engine API call (``path`` without a version: the daemon's own); its JSON reply
    (``None`` when empty). :class:`InfraError` with the daemon's message unless the status
    is in ``ok``."""
    sock = socket_path()
    if sock is None:
        raise InfraError("no Docker daemon socket to talk to", where,
                         "start dockerd, or point DOCKER_HOST at its unix:// socket")
    url = path + (f"?{urlencode(query)}" if query else "")
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if data is not None else {}
    conn = _UnixConnection(sock, timeout)
    try:
        conn.request(method, url, body=data, headers=headers)
        reply = conn.getresponse()
        raw = reply.read()
    except (OSError, http.client.HTTPException) as exc:
        raise InfraError(f"the Docker daemon did not answer {method} {path}: {exc}", where,
                         "check that dockerd is running (docker info)") from None
    finally:
        conn.close()
    try:
        payload = json.loads(raw) if raw.strip() else None
    except ValueError:
        payload = raw.decode(errors="replace")
    if reply.status not in ok:
        message = payload.get("message") if isinstance(payload, dict) else payload
        raise InfraError(f"docker: {method} {path} failed ({reply.status}): "
                         + " ".join(str(message).split())[:300], where)
    return payload


def container_path(name: str, *parts: str) -> str:
    """``/containers/NAME/…`` with ``name`` quoted."""
    return "/".join(["/containers", quote(name, safe=""), *parts])
