"""The robot's browser interface: a local HTTP server around one :class:`RobotSim`.

It serves the three.js web app (``web/index.html``, ``web/app.js``), three.js itself
from its npm install (``/vendor/three.module.js``, see :mod:`.web.assets`), and a
JSON command API, all on ``127.0.0.1`` at an ephemeral port:

=======================  ======================================================
``GET  /``               the 3D view (``?hud=1`` adds a status line)
``GET  /api``            this API, as text
``GET  /api/version``    ``{"version": N}`` — bumps on every change of the state
``GET  /api/scene``      geoms and camera, as the page draws them
``GET  /api/state``      the simulator state (end effector, gripper, objects, zones)
``POST /api/command``    one command, e.g. ``{"op": "move_ee", ...}``; its result
``POST /api/camera``     ``{"pos": [x, y, z], "target": [x, y, z]}`` (a ``camera`` command)
``POST /api/reset``      ``{"task": "robot/reach", "seed": 0}``; the new state
=======================  ======================================================

A command the simulator refuses (:class:`CommandError`) answers ``400`` with
``{"error": "<message for the model>"}``; malformed JSON answers ``400`` too. Every
call into the simulator holds :attr:`RobotServer.lock`, so the page's polling, a
harness and a human at the same URL never interleave inside the simulator.

Run it standalone to drive the robot by hand or from an unmodified coding CLI::

    python -m tackroom.suites.robot.server --task robot/reach --seed 0

An agent harness's episode serves the API on a Unix socket instead
(``RobotServer(sim, unix_socket=path, allow_reset=False, max_commands=n)``), which the
environment binds into the CLI's sandbox (see :mod:`.env`): there ``POST /api/reset``
is refused (an episode cannot pick another task or seed) and commands past ``n`` are
refused with a message that says so. :attr:`RobotServer.commands` and
:attr:`RobotServer.refused` count what came through ``/api/command`` (``camera`` aside).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import socketserver
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

from tackroom.core.errors import InfraError
from tackroom.suites.robot.web.assets import SERVED, ensure_three

WEB = Path(__file__).parent / "web"
#: Largest request body accepted (bytes).
MAX_BODY = 1 << 20
#: The page files served from :data:`WEB`, with their content types.
PAGES = {"/": ("index.html", "text/html; charset=utf-8"),
         "/index.html": ("index.html", "text/html; charset=utf-8"),
         "/app.js": ("app.js", "text/javascript; charset=utf-8")}

API_HELP = """\
tackroom robot API (JSON over HTTP, 127.0.0.1 only)

GET  /api/version   {"version": N}; N changes whenever the simulator state does
GET  /api/scene     geoms (type, MuJoCo half-sizes, rgba, pos, quat [w,x,y,z]) and camera
GET  /api/state     end effector, gripper, objects {name: {pos, quat, kind, color, size}}, zones
POST /api/command   one command object, e.g.
                      {"op": "move_ee", "pos": [x, y, z]}
                      {"op": "move_joint", ...}   {"op": "gripper", ...}
                      {"op": "step", "n": 10}      {"op": "done"}
                    answers the command's result; 400 {"error": "..."} if refused
POST /api/camera    {"pos": [x, y, z], "target": [x, y, z]}
POST /api/reset     {"task": "robot/reach", "seed": 0}
World frame: metres, z up.
"""


def _command_error() -> type[Exception]:
    """The simulator's model-facing error type (``ValueError`` until the sim is importable)."""
    try:
        from tackroom.suites.robot.sim import CommandError
    except ImportError:  # pragma: no cover - the simulation module ships with the suite
        return ValueError
    return CommandError


class _Handler(BaseHTTPRequestHandler):
    server_version = "tackroom-robot"
    protocol_version = "HTTP/1.1"  # keep-alive: a controller posting many commands reuses one
    owner: RobotServer  # set on the per-server subclass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        pass

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes: without this, Nagle's algorithm and the
        # client's delayed ACK add ~40 ms to every keep-alive request.
        if self.connection.family != socket.AF_UNIX:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # -- replies ---------------------------------------------------------------------
    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj, allow_nan=False).encode(),
                   "application/json; charset=utf-8")

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": message})

    def _host_ok(self) -> bool:
        # A page on another origin could point a browser at 127.0.0.1 (DNS rebinding):
        # only Host headers naming this loopback server are served.
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0].strip("[]")
        return host in ("127.0.0.1", "localhost", "::1")

    # -- routes ----------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        if not self._host_ok():
            return self._error(HTTPStatus.FORBIDDEN, "unexpected Host header")
        path = self.path.split("?", 1)[0]
        o = self.owner
        if path in PAGES:
            name, ctype = PAGES[path]
            return self._send(HTTPStatus.OK, (WEB / name).read_bytes(), ctype)
        if path.startswith("/vendor/"):
            name = path[len("/vendor/"):]
            if name not in SERVED:
                return self._error(HTTPStatus.NOT_FOUND, f"no such file: {path}")
            if o.vendor is None:  # a Unix-socket server installs three.js only if asked
                o.vendor = ensure_three()
            return self._send(HTTPStatus.OK, (o.vendor / name).read_bytes(),
                              "text/javascript; charset=utf-8")
        if path in ("/api", "/api/"):
            return self._send(HTTPStatus.OK, API_HELP.encode(), "text/plain; charset=utf-8")
        if path == "/api/version":
            return self._call(lambda sim: {"version": sim.state()["version"]})
        if path == "/api/scene":
            return self._call(lambda sim: sim.scene())
        if path == "/api/state":
            return self._call(lambda sim: sim.state())
        return self._error(HTTPStatus.NOT_FOUND, f"no such endpoint: GET {path}; see GET /api")

    do_HEAD = do_GET

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        if not self._host_ok():
            return self._error(HTTPStatus.FORBIDDEN, "unexpected Host header")
        path = self.path.split("?", 1)[0]
        body = self._body()
        if body is None:
            return None
        if path == "/api/command":
            return self._call(lambda sim: sim.command(body), counted=body.get("op") != "camera")
        if path == "/api/camera":
            return self._call(lambda sim: sim.command({**body, "op": "camera"}))
        if path == "/api/reset":
            if not self.owner.allow_reset:
                return self._error(HTTPStatus.FORBIDDEN, "reset is not available in an "
                                   "episode: the task and seed are fixed")
            task, seed = body.get("task"), body.get("seed", 0)
            if not isinstance(task, str) or not isinstance(seed, int) or isinstance(seed, bool):
                return self._error(HTTPStatus.BAD_REQUEST,
                                   'reset needs {"task": "<task id>", "seed": <integer>}')

            def reset(sim: Any) -> Any:
                sim.reset(task, seed)
                return sim.state()
            return self._call(reset)
        return self._error(HTTPStatus.NOT_FOUND, f"no such endpoint: POST {path}; see GET /api")

    def _body(self) -> dict[str, Any] | None:
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            n = -1
        if n < 0 or n > MAX_BODY:
            self.close_connection = True
            self._error(HTTPStatus.BAD_REQUEST, f"the body must be a JSON object of at most "
                        f"{MAX_BODY} bytes with a Content-Length")
            return None
        raw = self.rfile.read(n) if n else b""
        try:
            body = json.loads(raw.decode("utf-8")) if raw.strip() else {}
        except (UnicodeDecodeError, ValueError) as e:
            self._error(HTTPStatus.BAD_REQUEST, f"the body is not valid JSON ({e})")
            return None
        if not isinstance(body, dict):
            self._error(HTTPStatus.BAD_REQUEST, "the body must be a JSON object")
            return None
        return body

    def _call(self, fn: Any, counted: bool = False) -> None:
        o = self.owner
        try:
            with o.lock:
                if o.sim is None:
                    return self._error(HTTPStatus.SERVICE_UNAVAILABLE, "no simulator attached")
                if counted:
                    if o.max_commands is not None and o.commands >= o.max_commands:
                        return self._error(HTTPStatus.BAD_REQUEST,
                                           f"the command limit ({o.max_commands}) is reached: "
                                           "no more commands; the task is checked as it "
                                           "stands")
                    o.commands += 1
                try:
                    result = fn(o.sim)
                except o.command_error:
                    if counted:
                        o.refused += 1
                    raise
        except o.command_error as e:
            return self._error(HTTPStatus.BAD_REQUEST, str(e))
        except Exception as e:  # noqa: BLE001 - a simulator bug must not kill the server
            return self._error(HTTPStatus.INTERNAL_SERVER_ERROR,
                               f"simulator error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        try:
            return self._json(HTTPStatus.OK, result)
        except (TypeError, ValueError) as e:
            return self._error(HTTPStatus.INTERNAL_SERVER_ERROR,
                               f"the simulator's answer is not JSON: {e}")


class _UnixHTTPServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True


class RobotServer:
    """The web app and command API of ``sim`` on ``http://127.0.0.1:<port>/``.

    Starts serving (in a daemon thread) when made; :meth:`close` stops it. Use it
    as a context manager. :meth:`attach` points it at another simulator.

    ``unix_socket``: serve on that Unix socket instead of TCP (three.js is then
    installed only when the page asks for it); ``allow_reset=False`` refuses
    ``/api/reset``; ``max_commands`` caps the commands ``/api/command`` runs.

    Raises:
        InfraError: three.js cannot be installed, or no port (socket) can be bound.
    """

    def __init__(self, sim: Any = None, *, host: str = "127.0.0.1", port: int = 0,
                 unix_socket: str | os.PathLike[str] | None = None, allow_reset: bool = True,
                 max_commands: int | None = None) -> None:
        self.sim = sim
        #: Held around every call into the simulator made through this server.
        self.lock = threading.RLock()
        self.command_error = _command_error()
        self.allow_reset = allow_reset
        self.max_commands = max_commands
        #: Commands run through ``/api/command`` (``camera`` aside), and those refused.
        self.commands = self.refused = 0
        self.unix_socket = None if unix_socket is None else str(unix_socket)
        self.vendor = ensure_three() if unix_socket is None else None
        handler = type("Handler", (_Handler,), {"owner": self})
        try:
            if self.unix_socket is not None:
                self._httpd: socketserver.BaseServer = _UnixHTTPServer(self.unix_socket,
                                                                       handler)
                self.host, self.port = "localhost", 0
            else:
                self._httpd = ThreadingHTTPServer((host, port), handler)
                self._httpd.daemon_threads = True
                # An AF_INET socket's name is (host, port), the host a str.
                self.host, self.port = cast(tuple[str, int], self._httpd.server_address[:2])
        except OSError as e:
            where = self.unix_socket or f"{host}:{port}"
            raise InfraError(f"cannot serve the robot interface on {where} "
                             f"({e.strerror or e})", "robot server",
                             "pick another --port, or free that one") from None
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.2},
                                        name=f"robot-server-{self.port}", daemon=True)
        self._thread.start()
        self._closed = False

    @property
    def url(self) -> str:
        """The page's URL (the API is under ``/api``); on a Unix socket, its Host is localhost."""
        return f"http://{self.host}:{self.port}/" if self.port else f"http://{self.host}/"

    @property
    def closed(self) -> bool:
        return self._closed

    def attach(self, sim: Any) -> None:
        """Serve ``sim`` from now on (the page picks it up at its next poll)."""
        with self.lock:
            self.sim = sim

    def close(self) -> None:
        """Stop serving. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
        if self.unix_socket is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.unix_socket)

    def __enter__(self) -> RobotServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RobotServer({self.url!r})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tackroom.suites.robot.server",
        description="Serve the robot simulator's 3D view and command API on 127.0.0.1.")
    ap.add_argument("--task", default="robot/reach", help="task id (default robot/reach)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--port", type=int, default=0, help="port (default: any free one)")
    args = ap.parse_args(argv)
    try:
        from tackroom.suites.robot.sim import RobotSim

        sim = RobotSim()
        sim.reset(args.task, args.seed)
        server = RobotServer(sim, port=args.port)
    except InfraError as e:
        print(f"error: {e.line()}")
        return 1
    except (ImportError, ValueError, KeyError) as e:
        print(f"error: cannot start the simulator for {args.task!r} seed {args.seed}: {e}")
        return 1
    print(f"robot {args.task} seed {args.seed}: {server.url}  (API: {server.url}api)",
          flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
