"""The build network: a namespace with only ``lo``, and a proxy to the package registries.

Three groups of tests:

* the allow-list, the environment, the root check: pure, run anywhere;
* the proxy itself against local origin servers, in this network namespace: no root, no
  internet (pipelining, keep-alive, host changes, tunnels, 403/502/400);
* the real thing, as root with bubblewrap: a sandbox started with ``preexec_fn=net.enter``
  sees only ``lo``, cannot connect out, and reaches PyPI and Debian through the proxy (curl,
  then a real ``apt-get update``). These need this machine's internet access and say so
  when it is missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import socketserver
import subprocess
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tackroom.core.errors import ConfigError, InfraError
from tackroom.images import egress
from tackroom.images.egress import (
    ALLOW_ENV,
    CA_ENV_VARS,
    DEFAULT_REGISTRIES,
    SANDBOX_CA_BUNDLE,
    BuildNetwork,
    host_ca_bundle,
    parse_allow,
)

needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="a network namespace for the build needs root")
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap (bwrap) is not installed")
NO_NETWORK_HINT = ("through the build proxy; this test needs this machine's internet access "
                   "(PyPI and deb.debian.org) — is it up?")


# --- the allow-list and the environment ------------------------------------------------------

def test_default_registries_and_wildcards():
    allow = egress._AllowList(DEFAULT_REGISTRIES)
    assert allow.allows("deb.debian.org", 80, 80)
    assert allow.allows("pypi.org", 443, 443)
    assert allow.allows("cdn-fastly.deb.debian.org", 80, 80)       # *.debian.org
    assert allow.allows("a.b.npmjs.org", 443, 443)
    assert not allow.allows("debian.org", 80, 80)                  # a wildcard needs a label
    assert not allow.allows("evil-debian.org", 80, 80)
    assert not allow.allows("pypi.org.evil.example", 443, 443)
    assert not allow.allows("pypi.org", 22, 443)                   # the default port only
    assert not allow.allows("example.com", 443, 443)


def test_patterns_with_ports_and_addresses():
    allow = egress._AllowList(parse_allow(
        " Mirror.Example.ORG. , *.example.net:8443,,10.0.0.1, [::1]:3000"))
    assert allow.patterns == ("mirror.example.org", "*.example.net:8443", "10.0.0.1", "[::1]:3000")
    assert allow.allows("mirror.example.org", 443, 443)
    assert allow.allows("mirror.example.org", 80, 80)
    assert allow.allows("x.example.net", 8443, 443)
    assert not allow.allows("x.example.net", 443, 443)
    assert allow.allows("10.0.0.1", 80, 80)
    assert allow.allows("::1", 3000, 443)


@pytest.mark.parametrize("bad", ["http://pypi.org", "pypi.org/simple", "*", "a..b", "*.[::1]",
                                 "host:99999", "host:0", "-bad.example", "spaces here", "::1",
                                 "[10.0.0.1]"])
def test_bad_patterns_are_config_errors(bad):
    with pytest.raises(ConfigError) as caught:
        parse_allow(f"pypi.org,{bad}")
    assert caught.value.where == ALLOW_ENV
    assert repr(bad.strip()) in caught.value.line()


def test_allow_list_is_defaults_then_env_then_argument():
    net = BuildNetwork(allow=["extra.example"],
                       environ={ALLOW_ENV: "*.example.net, registry.example:8443"})
    assert net.allow == (*DEFAULT_REGISTRIES, "*.example.net", "registry.example:8443",
                         "extra.example")
    assert BuildNetwork(environ={}).allow == DEFAULT_REGISTRIES
    assert BuildNetwork(registries=(), environ={}, allow=["only.example"]).allow == (
        "only.example",)
    with pytest.raises(ConfigError) as caught:
        BuildNetwork(environ={ALLOW_ENV: "https://x"})
    assert caught.value.where == ALLOW_ENV


def test_host_ca_bundle(tmp_path, monkeypatch):
    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    assert host_ca_bundle() == bundle
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "missing.pem"))
    debian = Path(SANDBOX_CA_BUNDLE)
    assert host_ca_bundle() == (debian if debian.is_file() else None)


def test_env_names_the_proxy_and_the_ca_bundle_inside_the_sandbox():
    net = BuildNetwork(port=3128, environ={})
    env = net.env()
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        assert env[name] == "http://127.0.0.1:3128"
    assert env["no_proxy"] == "" and env["PIP_DEFAULT_TIMEOUT"]
    assert not set(CA_ENV_VARS) & set(env)          # no bundle known: none named
    net.ca_bundle = Path("/somewhere/on/the/host.pem")
    env = net.env()
    assert {env[name] for name in CA_ENV_VARS} == {SANDBOX_CA_BUNDLE}
    assert {net.env(ca_path="/run/b/ca.crt")[name] for name in CA_ENV_VARS} == {"/run/b/ca.crt"}


def test_without_root_it_is_an_infra_error(monkeypatch):
    monkeypatch.setattr(egress.os, "geteuid", lambda: 1000)
    fds = _fds()
    with pytest.raises(InfraError) as caught:
        BuildNetwork(environ={}).start()
    line = caught.value.line()
    assert "root" in line and "--sandbox docker" in line
    assert _fds() == fds


def test_enter_refuses_when_not_started():
    net = BuildNetwork(environ={})
    with pytest.raises(RuntimeError):
        net.enter()
    with pytest.raises(RuntimeError):
        _ = net.ns_path
    with pytest.raises(subprocess.SubprocessError):   # nothing runs on the host's network
        subprocess.run(["true"], preexec_fn=net.enter, timeout=10)


# --- the proxy, against local origins ----------------------------------------------------------

class Origin(socketserver.ThreadingTCPServer):
    """An HTTP/1.1 origin on 127.0.0.1 that records what it is sent.

    ``/chunked`` answers chunked, ``/eof`` with a body ended by closing, ``/bye`` closes the
    connection after a framed answer without saying so, ``/drop-next`` closes it when the next
    request comes (the keep-alive race), ``/304`` has no body; anything else
    echoes the method, target, Host and body it got.
    """

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), OriginHandler)
        self.port = self.server_address[1]
        self.connections = 0
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.lock = threading.Lock()
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    def handle_error(self, request, client_address) -> None:
        pass  # a connection the proxy dropped on purpose (a malformed request): expected

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class OriginHandler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        server: Origin = self.server  # type: ignore[assignment]
        with server.lock:
            server.connections += 1
        while line := self.rfile.readline():
            method, target, _ = line.decode().split()
            headers = {}
            while (field := self.rfile.readline()) not in (b"\r\n", b""):
                name, _, value = field.decode().partition(":")
                headers[name.strip().lower()] = value.strip()
            body = b""
            if "content-length" in headers:
                body = self.rfile.read(int(headers["content-length"]))
            elif headers.get("transfer-encoding") == "chunked":
                while size := int(self.rfile.readline().split(b";")[0], 16):
                    body += self.rfile.read(size)
                    self.rfile.readline()
                self.rfile.readline()
            with server.lock:
                server.requests.append((method, target, headers, body))
            out = self.wfile
            if target == "/chunked":
                out.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                          b"6\r\nhello \r\n7;ext=1\r\nchunked\r\n0\r\nX-Trailer: t\r\n\r\n")
            elif target == "/eof":
                out.write(b"HTTP/1.1 200 OK\r\n\r\nuntil the end")
                return
            elif target == "/304":
                out.write(b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n")
            else:
                text = f"{method} {target} host={headers.get('host')} body={body.decode()}"
                data = text.encode()
                out.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nKeep-Alive: timeout=5\r\n"
                          b"Connection: keep-alive\r\n\r\n%s" % (len(data), data))
                if target == "/bye":
                    return
                if target == "/drop-next":  # the keep-alive race: the next request is lost
                    while self.rfile.readline() not in (b"\r\n", b""):
                        pass
                    return


def read_response(f, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    """One response from a buffered socket file: status, headers (lower-case names), body."""
    status_line = f.readline()
    assert status_line, "the proxy closed the connection"
    status = int(status_line.split()[1])
    headers: dict[str, str] = {}
    while (field := f.readline()) not in (b"\r\n", b""):
        name, _, value = field.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    if method == "HEAD" or status in (204, 304):
        return status, headers, b""
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while size := int(f.readline().split(b";")[0], 16):
            body += f.read(size)
            f.readline()
        while f.readline() not in (b"\r\n", b""):
            pass
        return status, headers, body
    if "content-length" in headers:
        return status, headers, f.read(int(headers["content-length"]))
    return status, headers, f.read()


@pytest.fixture
def origins() -> Iterator[tuple[Origin, Origin]]:
    a, b = Origin(), Origin()
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture
def make_proxy() -> Iterator[Callable[..., tuple[egress._Proxy, int]]]:
    """``make_proxy(*patterns, **options)``: a proxy served in this namespace, and its port."""
    started: list[egress._ProxyThread] = []

    def make(*patterns: str, **options) -> tuple[egress._Proxy, int]:
        options.setdefault("block_local", False)
        options.setdefault("connect_timeout", 10)
        proxy = egress._Proxy(egress._AllowList(parse_allow(",".join(patterns))), **options)
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        thread = egress._ProxyThread(proxy, listener)
        thread.start()
        started.append(thread)
        return proxy, port

    threads = threading.active_count()
    yield make
    for thread in started:
        thread.stop()
    assert threading.active_count() <= threads + 2  # the origins' serving threads at most


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=15)


def test_pipelined_requests_to_two_origins_on_one_connection(make_proxy, origins):
    a, b = origins
    proxy, port = make_proxy(f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}")
    ua, ub = f"http://127.0.0.1:{a.port}", f"http://127.0.0.1:{b.port}"
    with connect(port) as sock, sock.makefile("rb") as f:
        sock.sendall(
            f"GET {ua}/one?x=1 HTTP/1.1\r\nHost: wrong.example\r\nProxy-Connection: keep-alive\r\n"
            f"Proxy-Authorization: Basic eA==\r\n\r\n"
            f"GET {ua}/chunked HTTP/1.1\r\nHost: x\r\n\r\n"
            f"HEAD {ua}/head HTTP/1.1\r\nHost: x\r\n\r\n"
            f"GET {ub}/two HTTP/1.1\r\nHost: x\r\n\r\n"
            f"POST {ua}/post HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody"
            f"POST {ua}/chunked-post HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            f"3\r\nabc\r\n0\r\n\r\n"
            f"GET {ua}/304 HTTP/1.1\r\nHost: x\r\n\r\n"
            f"GET {ua}/last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        responses = [read_response(f, m) for m in
                     ("GET", "GET", "HEAD", "GET", "POST", "POST", "GET", "GET")]
        assert f.read() == b""                      # closed after the Connection: close one
    bodies = [body for _, _, body in responses]
    assert [status for status, _, _ in responses] == [200, 200, 200, 200, 200, 200, 304, 200]
    assert bodies[0] == f"GET /one?x=1 host=127.0.0.1:{a.port} body=".encode()
    assert bodies[1] == b"hello chunked"
    assert responses[1][1]["transfer-encoding"] == "chunked"
    assert bodies[2] == b"" and responses[2][1]["content-length"]
    assert bodies[3] == f"GET /two host=127.0.0.1:{b.port} body=".encode()
    assert bodies[4].endswith(b"body=body") and bodies[5].endswith(b"body=abc")
    assert responses[7][1]["connection"] == "close"
    assert "keep-alive" not in responses[0][1]        # hop-by-hop headers are not passed on
    sent = [headers for _, _, headers, _ in a.requests]
    assert not any("proxy-connection" in h or "proxy-authorization" in h for h in sent)
    # a → b → a: the host changed twice, so a saw two connections and b one.
    assert (a.connections, b.connections) == (2, 1)
    assert proxy.allowed_hosts == {f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"}
    assert proxy.denied == []


def test_upstream_connection_is_reused_and_reopened_when_the_origin_closed_it(
        make_proxy, origins):
    a, _ = origins
    _, port = make_proxy(f"127.0.0.1:{a.port}")
    url = f"http://127.0.0.1:{a.port}"
    with connect(port) as sock, sock.makefile("rb") as f:
        # /bye closes its end without a word; /drop-next closes it on the next request.
        for path in ("/1", "/2", "/bye", "/3", "/drop-next", "/4"):
            sock.sendall(f"GET {url}{path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            status, _, body = read_response(f)
            assert status == 200 and body.startswith(f"GET {path} ".encode())
    assert a.connections == 3  # /1 /2 /bye | /3 /drop-next (/4 lost) | /4 again
    assert [target for _, target, _, _ in a.requests] == ["/1", "/2", "/bye", "/3", "/drop-next",
                                                          "/4"]


def test_a_body_ended_by_closing_closes_the_client_connection(make_proxy, origins):
    a, _ = origins
    _, port = make_proxy(f"127.0.0.1:{a.port}")
    with connect(port) as sock, sock.makefile("rb") as f:
        sock.sendall(f"GET http://127.0.0.1:{a.port}/eof HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        status, headers, body = read_response(f)
    assert (status, headers.get("connection"), body) == (200, "close", b"until the end")


@pytest.mark.parametrize("size", [b"-1", b"0x3", b"1_0", b"+3"])
def test_chunk_sizes_that_only_python_would_read_end_the_connection(make_proxy, origins, size):
    a, _ = origins
    _, port = make_proxy(f"127.0.0.1:{a.port}")
    with connect(port) as sock, sock.makefile("rb") as f:
        sock.sendall(f"POST http://127.0.0.1:{a.port}/p HTTP/1.1\r\nHost: x\r\n"
                     f"Transfer-Encoding: chunked\r\n\r\n".encode() + size + b"\r\nabc\r\n0\r\n\r\n")
        first = f.readline()
    assert not first.startswith(b"HTTP/1.1 200"), first


def test_hosts_off_the_list_get_403_and_are_recorded_once_in_order(make_proxy, origins):
    a, _ = origins
    proxy, port = make_proxy(f"127.0.0.1:{a.port}")
    for request in (b"GET http://blocked.example/x HTTP/1.1\r\nHost: blocked.example\r\n\r\n",
                    b"CONNECT other.example:443 HTTP/1.1\r\nHost: other.example:443\r\n\r\n",
                    b"GET http://blocked.example/y HTTP/1.1\r\nHost: blocked.example\r\n\r\n",
                    b"CONNECT 127.0.0.1:22 HTTP/1.1\r\n\r\n"):
        with connect(port) as sock, sock.makefile("rb") as f:
            sock.sendall(request)
            status, headers, body = read_response(f)
            assert status == 403 and headers["connection"] == "close"
            assert ALLOW_ENV.encode() in body
    assert proxy.denied == ["blocked.example:80", "other.example:443", "127.0.0.1:22"]
    assert b"TACKROOM_BUILD_ALLOW=127.0.0.1:22" in body    # the hint names the port too
    assert a.requests == [] and proxy.allowed_hosts == set()


def test_connect_tunnels_bytes_both_ways(make_proxy):
    echo = socket.create_server(("127.0.0.1", 0))
    echo_port = echo.getsockname()[1]

    def serve() -> None:
        conn, _ = echo.accept()
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data.upper())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    proxy, port = make_proxy(f"127.0.0.1:{echo_port}")
    with connect(port) as sock, sock.makefile("rb") as f:
        # The first tunnel bytes come in the same write as the CONNECT head, as TLS clients do.
        sock.sendall(f"CONNECT 127.0.0.1:{echo_port} HTTP/1.1\r\n\r\nhello".encode())
        assert f.readline().startswith(b"HTTP/1.1 200")
        assert f.readline() == b"\r\n"
        assert f.read(5) == b"HELLO"
        sock.sendall(b"x" * 200_000)
        sock.shutdown(socket.SHUT_WR)                # half-close: the answer still comes
        assert f.read() == b"X" * 200_000
    thread.join(10)
    echo.close()
    assert proxy.allowed_hosts == {f"127.0.0.1:{echo_port}"}


def test_unreachable_origins_get_502_with_a_one_line_reason(make_proxy):
    closed = socket.create_server(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()                                   # nothing listens there now
    _, port = make_proxy(f"127.0.0.1:{closed_port}", "nonexistent.invalid", connect_timeout=30)
    cases = {f"CONNECT 127.0.0.1:{closed_port} HTTP/1.1\r\n\r\n": b"cannot connect",
             f"GET http://127.0.0.1:{closed_port}/ HTTP/1.1\r\n\r\n": b"cannot connect",
             "CONNECT nonexistent.invalid:443 HTTP/1.1\r\n\r\n": b"cannot resolve"}
    for request, reason in cases.items():
        with connect(port) as sock, sock.makefile("rb") as f:
            sock.sendall(request.encode())
            status, _, body = read_response(f)
            assert status == 502 and reason in body, body
            assert body.count(b"\n") == 1


def test_names_that_resolve_to_this_machine_are_refused(make_proxy, origins):
    a, _ = origins
    _, port = make_proxy(f"localhost:{a.port}", f"127.0.0.1:{a.port}", block_local=True)
    for target in (f"localhost:{a.port}", f"127.0.0.1:{a.port}"):
        with connect(port) as sock, sock.makefile("rb") as f:
            sock.sendall(f"GET http://{target}/ HTTP/1.1\r\n\r\n".encode())
            status, _, body = read_response(f)
            assert status == 502 and b"local addresses" in body
    assert a.requests == []


@pytest.mark.parametrize("request_bytes, reason", [
    (b"GET /origin-form HTTP/1.1\r\nHost: x\r\n\r\n", b"absolute URIs"),
    (b"GET https://pypi.org/ HTTP/1.1\r\n\r\n", b"CONNECT"),
    (b"GET http://user:pw@pypi.org/ HTTP/1.1\r\n\r\n", b"credentials"),
    (b"BREW\r\n\r\n", b"bad request line"),
    (b"GET http://pypi.org/ HTTP/2.0\r\n\r\n", b"bad request line"),
    (b"GET http://pypi.org/ HTTP/1.1\r\nBad Header\r\n\r\n", b"bad header line"),
    (b"GET http://pypi.org/ HTTP/1.1\r\n folded\r\n\r\n", b"bad header line"),
    (b"GET http://pypi.org/ HTTP/1.1\r\nX: a\rInjected: b\r\n\r\n", b"CR or NUL"),
    (b"GET http://pypi.org:http/ HTTP/1.1\r\n\r\n", b"bad port"),
    (b"CONNECT pypi.org HTTP/1.1\r\n\r\n", b"host:port"),
    (b"POST http://pypi.org/ HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n"
     b"\r\n", b"both"),
])
def test_malformed_requests_get_400(make_proxy, request_bytes, reason):
    proxy, port = make_proxy("pypi.org")
    with connect(port) as sock, sock.makefile("rb") as f:
        sock.sendall(request_bytes)
        status, _, body = read_response(f)
    assert status == 400 and reason in body, body
    assert proxy.allowed_hosts <= {"pypi.org:80"}    # nothing was forwarded anywhere


def test_stopping_cuts_open_tunnels_and_leaves_nothing_behind(make_proxy):
    listener = socket.create_server(("127.0.0.1", 0))
    target = listener.getsockname()[1]
    fds, threads = _fds(), threading.active_count()
    proxy = egress._Proxy(egress._AllowList([f"127.0.0.1:{target}"]), block_local=False)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    sock.setblocking(False)
    port = sock.getsockname()[1]
    server = egress._ProxyThread(proxy, sock)
    server.start()
    with connect(port) as client, client.makefile("rb") as f:
        client.sendall(f"CONNECT 127.0.0.1:{target} HTTP/1.1\r\n\r\n".encode())
        assert f.readline().startswith(b"HTTP/1.1 200")
        accepted, _ = listener.accept()
        server.stop()                                 # with the tunnel open
        f.readline()
        assert f.read() == b""                        # the tunnel was closed
        accepted.close()
    listener.close()
    assert threading.active_count() == threads
    assert _fds() == fds - 1                          # the listener above is gone too


# --- the real thing: bwrap in the build namespace ------------------------------------------------

def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _root_links() -> list[str]:
    """``/bin``, ``/lib``… as the host has them: links into /usr (merged /usr), or binds."""
    args = []
    for name in ("bin", "sbin", "lib", "lib64", "lib32"):
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    return args


def in_build(net: BuildNetwork, script: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``bash -c script`` in bwrap, in the build's network namespace, with its environment."""
    argv = ["bwrap", "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc", *_root_links(),
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--unshare-pid",
            "--die-with-parent", "bash", "-c", script]
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C",
           **net.env()}
    return subprocess.run(argv, preexec_fn=net.enter, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def net() -> Iterator[BuildNetwork]:
    with BuildNetwork(environ={}) as network:
        yield network


@needs_root
def test_the_process_stays_on_the_host_network(net):
    host = os.readlink("/proc/thread-self/ns/net")
    assert os.readlink("/proc/self/ns/net") == host
    assert os.readlink(net.ns_path) != host
    assert net.port == egress.DEFAULT_PORT
    with BuildNetwork(environ={}) as other:          # each namespace has its own port 3128
        assert other.port == net.port and os.readlink(other.ns_path) != os.readlink(net.ns_path)


@needs_root
def test_nsenter_with_ns_path_sees_only_loopback(net):
    if shutil.which("nsenter") is None:
        pytest.skip("nsenter is not installed")
    out = subprocess.run(["nsenter", f"--net={net.ns_path}", "cat", "/proc/net/dev"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    assert [line.split(":")[0].strip() for line in out.splitlines()[2:]] == ["lo"]


@needs_root
@needs_bwrap
def test_inside_only_lo_and_no_way_out(net):
    proc = in_build(net, "cat /proc/net/dev; echo ---; "
                         "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 443),"
                         " timeout=5)' 2>&1; echo ---; "
                         "python3 -c 'import socket; socket.getaddrinfo(\"deb.debian.org\", 80)'"
                         " 2>&1; true")
    assert proc.returncode == 0, proc.stderr
    devices, direct, dns = proc.stdout.split("---\n")
    assert [line.split(":")[0].strip() for line in devices.splitlines()[2:]] == ["lo"]
    assert "Network is unreachable" in direct, direct
    assert "gaierror" in dns or "unreachable" in dns, dns
    assert net.allowed_hosts == set() and net.denied == []


@needs_root
@needs_bwrap
def test_https_to_pypi_through_the_proxy(net):
    proc = in_build(net, "curl -sS --max-time 25 -o /dev/null -w '%{http_code}' "
                         "https://pypi.org/simple/pip/")
    assert proc.stdout == "200", f"curl https://pypi.org {NO_NETWORK_HINT} {proc.stderr}"
    assert net.allowed_hosts == {"pypi.org:443"}


@needs_root
@needs_bwrap
def test_http_to_debian_through_the_proxy(net):
    proc = in_build(net, "curl -sS --max-time 25 -o /dev/null -w '%{http_code}' "
                         "http://deb.debian.org/debian/dists/bookworm/Release")
    assert proc.stdout == "200", f"curl http://deb.debian.org {NO_NETWORK_HINT} {proc.stderr}"
    assert net.allowed_hosts == {"deb.debian.org:80"}


@needs_root
@needs_bwrap
def test_other_hosts_are_denied_and_recorded(net):
    proc = in_build(net, "curl -sS --max-time 25 -o /dev/null -w '%{http_code}' "
                         "https://example.com/; echo; "
                         "curl -sS --max-time 25 -w '%{http_code}' http://example.com/x")
    https, http = proc.stdout.split("\n", 1)
    assert "403" in proc.stderr and https == "000", proc.stderr  # curl: CONNECT tunnel failed
    assert http.endswith("403") and f"{ALLOW_ENV}=example.com" in http
    assert net.denied == ["example.com:443", "example.com:80"]
    assert net.allowed_hosts == set()


@needs_root
@needs_bwrap
@pytest.mark.slow
def test_apt_get_update_through_the_proxy(net):
    """A real apt: it pipelines several requests on one connection through the proxy."""
    options = ("-o Dir::State::Lists=/tmp/lists -o Dir::Cache=/tmp/cache "
               "-o Dir::Etc::SourceList=/tmp/sources.list -o Dir::Etc::SourceParts=/dev/null "
               "-o APT::Sandbox::User=root -o Debug::NoLocking=1 "
               "-o Acquire::http::Timeout=20 -o Acquire::Retries=0")
    proc = in_build(net, f"""
        set -e
        mkdir -p /tmp/lists/partial /tmp/cache/archives/partial
        printf 'deb http://deb.debian.org/debian bookworm main\\n''deb http://deb.debian.org/debian bookworm-updates main\\n' > /tmp/sources.list
        apt-get update {options}
        ls /tmp/lists
    """, timeout=120)
    assert proc.returncode == 0, f"apt-get update {NO_NETWORK_HINT}\n{proc.stdout}\n{proc.stderr}"
    lists = proc.stdout.split()
    assert any(name.startswith("deb.debian.org_debian_dists_bookworm_main_binary-")
               and "_Packages" in name for name in lists), proc.stdout
    assert any(name.endswith("bookworm-updates_InRelease") for name in lists), proc.stdout
    assert net.allowed_hosts == {"deb.debian.org:80"} and net.denied == []


@needs_root
@needs_bwrap
def test_closing_cuts_tunnels_and_leaves_no_threads_or_descriptors():
    fds, threads = _fds(), threading.active_count()
    client = textwrap.dedent("""
        import socket, sys
        s = socket.create_connection(("127.0.0.1", 3128), timeout=25)
        s.sendall(b"CONNECT pypi.org:443 HTTP/1.1\\r\\n\\r\\n")
        print(s.recv(100).split(b"\\r\\n")[0].decode(), flush=True)
        print("eof" if s.recv(100) == b"" else "data", flush=True)
    """)
    network = BuildNetwork(environ={}).start()
    try:
        inode = os.stat(network.ns_path).st_ino
        assert threading.active_count() == threads + 1           # the proxy's loop
        argv = ["bwrap", "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc",
                *_root_links(), "--proc", "/proc", "--dev", "/dev", "--die-with-parent",
                "python3", "-c", client]
        with subprocess.Popen(argv, preexec_fn=network.enter, stdout=subprocess.PIPE,
                              text=True) as proc:
            first = proc.stdout.readline().strip()
            assert first == "HTTP/1.1 200 Connection established", (
                f"CONNECT pypi.org:443 {NO_NETWORK_HINT} (got {first!r})")
            network.close()                                       # the tunnel is open
            assert proc.stdout.readline().strip() == "eof"
            assert proc.wait(30) == 0
    finally:
        network.close()
    assert _fds() == fds and threading.active_count() == threads
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            assert os.stat(f"/proc/self/fd/{fd}").st_ino != inode
