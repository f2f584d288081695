"""A sandboxed command reaches the model gateway, and nothing else, through a Unix socket.

The sandbox has its own network namespace; the gateway's socket is bound in
read-only and ``tackroom/gateway/forward.py`` (run by the sandbox's own Python)
relays the sandbox's ``127.0.0.1:PORT`` to it.
"""

from __future__ import annotations

import json
import os
import socketserver
import tempfile
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tackroom.gateway import forward
from tackroom.sandbox import BubblewrapSandbox, Limits, sandbox_available
from tackroom.testing import ScriptedOpenAIServer

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="needs bubblewrap")

FORWARD = "/opt/tackroom/forward.py"
SOCKET_DIR = "/run/tackroom"


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class _Echo(BaseHTTPRequestHandler):
    """Answers every request with what it was (method, path, body) as JSON."""

    protocol_version = "HTTP/1.1"

    def address_string(self) -> str:  # a Unix socket has no client address
        return "unix"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        data = json.dumps({"method": self.command, "path": self.path, "body": body,
                           "via": "unix"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer  # noqa: N815 - stdlib names


@pytest.fixture
def unix_server():
    # A short path: Unix socket paths are limited to 108 bytes.
    sock_dir = Path(tempfile.mkdtemp(prefix="trk-gw-"))
    os.chmod(sock_dir, 0o755)  # the sandbox's own uid must reach the socket
    path = sock_dir / "gw.sock"
    server = _UnixHTTPServer(str(path), _Echo)
    os.chmod(path, 0o777)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield sock_dir
    finally:
        server.shutdown()
        server.server_close()
        path.unlink(missing_ok=True)
        sock_dir.rmdir()


def _sandbox(tmp_path: Path, sock_dir: Path) -> BubblewrapSandbox:
    work = tmp_path / "task"
    work.mkdir()
    return BubblewrapSandbox(work, Limits(wall_s=60, processes=64),
                   ro_binds={SOCKET_DIR: sock_dir, FORWARD: Path(forward.__file__)})


PROBE = r"""
import json, os, socket, sys, urllib.request
base = os.environ["OPENAI_BASE_URL"]
req = urllib.request.Request(base + "/chat/completions", data=b'{"x": 1}', method="POST")
print("GATEWAY", urllib.request.urlopen(req, timeout=20).read().decode())
print("GATEWAY", urllib.request.urlopen(base + "/models", timeout=20).read().decode())
for host, port in [("127.0.0.1", int(sys.argv[1])), ("10.0.0.1", 80), ("1.1.1.1", 443)]:
    try:
        socket.create_connection((host, port), timeout=3).close()
        print("REACHED", host, port)
    except OSError as e:
        print("BLOCKED", host, port, type(e).__name__)
"""


def test_a_sandboxed_command_reaches_the_gateway_socket_and_nothing_else(tmp_path, unix_server):
    # A TCP server on the host's loopback: the sandbox's loopback is another one.
    with ScriptedOpenAIServer() as host_tcp, _sandbox(tmp_path, unix_server) as box:
        (tmp_path / "task" / "probe.py").write_text(PROBE)
        res = box.run(f"python3 {FORWARD} --port 4000 --socket {SOCKET_DIR}/gw.sock -- "
                      f"python3 probe.py {host_tcp.port}", timeout_s=60)
        assert host_tcp.requests == []
    assert res.exit_code == 0, res.output()
    replies = [json.loads(line.split(" ", 1)[1]) for line in res.stdout.splitlines()
               if line.startswith("GATEWAY ")]
    assert [(r["method"], r["path"], r["via"]) for r in replies] == [
        ("POST", "/v1/chat/completions", "unix"), ("GET", "/v1/models", "unix")]
    assert replies[0]["body"] == '{"x": 1}'
    assert "REACHED" not in res.stdout
    assert res.stdout.count("BLOCKED") == 3, res.stdout


def test_the_command_status_and_a_missing_command_pass_through(tmp_path, unix_server):
    with _sandbox(tmp_path, unix_server) as box:
        ok = box.run(f"python3 {FORWARD} --port 4000 --socket {SOCKET_DIR}/gw.sock -- "
                     "bash -c 'echo $OPENAI_BASE_URL; exit 7'")
        missing = box.run(f"python3 {FORWARD} --port 4000 --socket {SOCKET_DIR}/gw.sock -- "
                          "no-such-agent-cli --yes")
    assert ok.exit_code == 7 and ok.stdout.strip() == "http://127.0.0.1:4000/v1"
    assert missing.exit_code == 127 and "cannot run 'no-such-agent-cli'" in missing.stderr


def test_a_gateway_that_is_gone_is_a_closed_connection_not_a_hang(tmp_path):
    sock_dir = Path(tempfile.mkdtemp(prefix="trk-gw-"))
    os.chmod(sock_dir, 0o755)
    try:
        with _sandbox(tmp_path, sock_dir) as box:
            res = box.run(
                f"python3 {FORWARD} --port 4000 --socket {SOCKET_DIR}/gw.sock -- python3 -c "
                "\"import urllib.request as u\ntry: u.urlopen('http://127.0.0.1:4000/v1/models',"
                " timeout=20)\nexcept Exception as e: print('FAILED', type(e).__name__)\"",
                timeout_s=60)
    finally:
        sock_dir.rmdir()
    assert res.exit_code == 0 and "FAILED" in res.stdout, res.output()


def test_read_only_binds_are_reachable_by_the_sandbox_uid_wherever_they_are(tmp_path):
    """Mount points' parents are made 0755 — also under the sandbox's own /tmp (a cache
    under /tmp) — so the sandbox's uid reaches what is bound there."""
    tool = Path(tempfile.mkdtemp(prefix="trk-tool-"))  # /tmp/trk-tool-XXXX, mode 0700
    nested = tool / "deep" / "bin"
    nested.mkdir(parents=True)
    (nested / "hello").write_text("hello from the tool\n")
    for p in (tool, tool / "deep", nested):
        os.chmod(p, 0o755)
    work = tmp_path / "task"
    work.mkdir()
    try:
        with BubblewrapSandbox(work, Limits(), ro_binds={str(nested): nested,
                                               "/opt/x/y/hello": nested / "hello"}) as box:
            res = box.run(f"cat {nested}/hello /opt/x/y/hello")
    finally:
        (nested / "hello").unlink()
        for p in (nested, tool / "deep", tool):
            p.rmdir()
    assert res.exit_code == 0 and res.stdout.count("hello from the tool") == 2, res.output()
