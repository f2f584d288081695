"""``tackroom serve`` against hostile clients: floods, slow and huge requests, odd methods.

Every test talks to a real server on 127.0.0.1 over raw sockets or ``http.client``.
No test asserts a timing: bounds are generous ("answers within 30 s").
"""

from __future__ import annotations

import http.client
import json
import socket
import threading

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
from conftest import http_request, one_line_error, run_cli  # noqa: E402
from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tackroom.serve import ServerThread  # noqa: E402

#: The read timeout of the server that tests half-open connections (the default is 30 s).
#: The other tests keep the default: on a loaded machine a flood's client thread
#: may not run for a second between its connect and its send.
READ_TIMEOUT = 1.5
#: The request body limit in these tests (the default is 8 MB).
MAX_BODY = 1_000_000
HELLO = [{"role": "system", "content": "You are a web agent."},
         {"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def srv(tiny_chat_dir):
    with ServerThread(tiny_chat_dir, max_body=MAX_BODY) as s:
        yield s


@pytest.fixture(scope="module")
def impatient(tiny_chat_dir):
    with ServerThread(tiny_chat_dir, read_timeout=READ_TIMEOUT, max_body=MAX_BODY) as s:
        yield s


def request(srv, method, path, body=None, headers=None):
    return http_request(srv.port, method, path, body, headers)


def assert_openai_error(status, body, expected):
    assert status == expected, (status, body)
    assert isinstance(body, dict) and set(body) == {"error"}, body
    err = body["error"]
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["type"], str) and "code" in err
    return err["message"]


def read_reply(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    chunks = []
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)


def post_chat(srv, **extra):
    payload = {"model": "tiny-chat", "messages": HELLO, "max_tokens": 2, **extra}
    return request(srv, "POST", "/v1/chat/completions", payload)


# ------------------------------------------------------------- the command
@pytest.mark.parametrize(("option", "value"), [
    ("--port", "70000"), ("--max-batch", "0"), ("--threads", "0"), ("--max-body", "0"),
    ("--read-timeout", "-1"), ("--read-timeout", "nan"),
])
def test_serve_options_are_bounded_before_the_model_loads(tmp_path, option, value):
    err = one_line_error(run_cli("serve", str(tmp_path / "no-model"), option, value,
                                 cwd=tmp_path))
    assert f"{option}:" in err and "out of range" in err


# ------------------------------------------------------------------ floods
def test_256_concurrent_connections_are_all_answered(srv):
    n = 256
    barrier = threading.Barrier(n)
    results: list[object] = [None] * n

    def client(i: int) -> None:
        try:
            barrier.wait(timeout=60)
            with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
                s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                results[i] = read_reply(s)
        except Exception as e:  # noqa: BLE001 - reported below
            results[i] = e

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=90)
    errors = [r for r in results if not isinstance(r, bytes)]
    assert not errors, f"{len(errors)} of {n} clients failed: {errors[:3]}"
    statuses = [r.split(b"\r\n", 1)[0] for r in results]  # type: ignore[union-attr]
    assert all(s.startswith(b"HTTP/1.1 200") for s in statuses), set(statuses)


# ------------------------------------------------------- slow and huge clients
def test_a_huge_content_length_is_a_413_without_reading_the_body(srv):
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: application/json\r\nContent-Length: 30000000\r\n\r\n")
        reply = read_reply(s)  # no body sent: only a server that does not wait answers
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), reply[:200]
    message = assert_openai_error(413, json.loads(body), 413)
    assert "30000000" in message and str(MAX_BODY) in message


def test_a_client_that_sends_the_whole_big_body_still_reads_its_413(srv):
    payload = json.dumps({"model": "tiny-chat", "messages": HELLO, "max_tokens": 2,
                          "pad": "x" * (2 * MAX_BODY)})
    status, body, headers = request(srv, "POST", "/v1/chat/completions", payload.encode(),
                                    {"Content-Type": "application/json"})
    assert_openai_error(status, body, 413)
    assert {k.lower(): v for k, v in headers.items()}.get("connection") == "close"
    assert request(srv, "GET", "/health")[0] == 200


def test_a_half_open_connection_blocks_no_one_and_is_closed(impatient):
    srv = impatient
    slow = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    slow_body = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    try:
        slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
        slow_body.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Length: 100\r\n\r\n{\"model\": ")
        # Others are served meanwhile.
        status, body, _ = request(srv, "GET", "/v1/models")
        assert status == 200 and body["data"][0]["id"] == "tiny-chat"
        # The server gives up on both with a 408 (after READ_TIMEOUT; the 30 s bound is
        # generous), as the gateway does: one HTTP stack.
        for conn in (slow, slow_body):
            reply = read_reply(conn)
            head, _, rest = reply.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 408"), reply[:200]
            assert_openai_error(408, json.loads(rest), 408)
    finally:
        slow.close()
        slow_body.close()
    assert request(srv, "GET", "/health")[0] == 200


# -------------------------------------------------------- methods and paths
@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH", "OPTIONS", "BREW"])
def test_other_methods_are_json_405s_or_404s(srv, method):
    status, body, headers = request(srv, method, "/v1/chat/completions")
    assert_openai_error(status, body, 405)
    assert {k.lower(): v for k, v in headers.items()}.get("allow") == "POST"
    status, body, headers = request(srv, method, "/v1/models")
    assert_openai_error(status, body, 405)
    assert "GET" in {k.lower(): v for k, v in headers.items()}.get("allow", "")
    status, body, _ = request(srv, method, "/v1/nothing/here")
    assert_openai_error(status, body, 404)


def test_wrong_method_and_unknown_paths_are_json(srv):
    assert_openai_error(*request(srv, "POST", "/v1/models", {"x": 1})[:2], 405)
    assert_openai_error(*request(srv, "GET", "/v1/chat/completions")[:2], 405)
    assert_openai_error(*request(srv, "POST", "/v2/anything", {})[:2], 404)
    assert_openai_error(*request(srv, "GET", "/")[:2], 404)
    # HEAD answers like GET, without a body.
    status, body, headers = request(srv, "HEAD", "/v1/models")
    assert status == 200 and body is None and headers["Content-Type"] == "application/json"
    # What the HTTP parser refuses itself is JSON too: a request line that is not
    # HTTP, a request head over 16 KiB (many headers, or a huge target).
    many_headers = b"".join(b"X-%d: %s\r\n" % (i, b"y" * 200) for i in range(150))
    for raw, status in ((b"GARBAGE\r\n\r\n", 400),
                        (b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + many_headers + b"\r\n",
                         431),
                        (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 431)):
        with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
            s.sendall(raw)
            reply = read_reply(s)
        head, _, rest = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 %d" % status), reply[:200]
        assert_openai_error(status, json.loads(rest), status)


# ------------------------------------------------------------- bad bodies
@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_refused(srv, constant):
    for raw in (f'{{"model": "tiny-chat", "max_tokens": 2, "temperature": {constant}, '
                f'"messages": [{{"role": "user", "content": "hi"}}]}}',
                f'{{"model": "tiny-chat", "max_tokens": 2, "extra": [{constant}], '
                f'"messages": [{{"role": "user", "content": "hi"}}]}}'):
        status, body, _ = request(srv, "POST", "/v1/chat/completions", raw.encode(),
                                  {"Content-Type": "application/json"})
        assert constant in assert_openai_error(status, body, 400)


def test_unknown_roles_are_refused(srv):
    for role in ("wizard", "function", ""):
        messages = [{"role": role, "content": "hi"}, {"role": "user", "content": "hi"}]
        status, body, _ = post_chat(srv, messages=messages)
        message = assert_openai_error(status, body, 400)
        assert "role" in message and "messages[0]" in message, message
        assert body["error"]["param"] == "messages[0]"


def test_content_parts_the_model_cannot_take_are_refused(srv):
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    bad = [[{"type": "text", "text": "look"}, image], [{"type": "input_audio"}],
           [{"type": "text", "text": 3}], ["just a string"], 7, {"type": "text"}]
    for content in bad:
        messages = [{"role": "user", "content": content}]
        status, body, _ = post_chat(srv, messages=messages)
        message = assert_openai_error(status, body, 400)
        assert "messages[0]" in message, (content, message)
    status, body, _ = post_chat(srv, messages=[{"role": "user", "content": [image]}])
    assert "image_url" in body["error"]["message"]
    # Text parts are fine.
    status, body, _ = post_chat(srv, messages=[
        {"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    assert status == 200, body


def test_non_object_bodies_are_400s(srv):
    for raw in (b"[1, 2]", b'"text"', b"3", b"null", b"true"):
        status, body, _ = request(srv, "POST", "/v1/chat/completions", raw,
                                  {"Content-Type": "application/json"})
        assert "JSON object" in assert_openai_error(status, body, 400)


# ------------------------------------------------------------- properties
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12)
_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool", "wizard"])
     | st.sampled_from(["user"]) | _json},
    optional={"content": st.text(max_size=20) | _json | st.lists(st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "image_url"]), "text": st.text(max_size=8)}),
        max_size=2),
              "tool_calls": _json, "name": _json})
_chat = st.fixed_dictionaries(
    {"model": st.sampled_from(["tiny-chat", "nope"]), "messages": st.lists(_message, max_size=3)},
    optional={key: _json | plain for key, plain in {
        "temperature": st.floats(0, 2), "top_p": st.floats(0.01, 1),
        "stop": st.text(max_size=3), "stream": st.booleans(), "logprobs": st.booleans(),
        "tools": st.just([{"type": "function", "function": {"name": "click"}}]),
        "tool_choice": st.sampled_from(["auto", "none", "required"]),
        "seed": st.integers(), "stream_options": st.just({"include_usage": True}),
        "response_format": st.just({"type": "text"}), "n": st.integers(0, 2),
        "top_logprobs": st.integers(0, 2), "return_token_ids": st.booleans()}.items()})
_methods = st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]) \
    | st.from_regex(r"\A[A-Z]{1,8}\Z")
_paths = st.sampled_from(["/v1/chat/completions", "/v1/models", "/v1/models/tiny-chat",
                          "/health", "/"]) \
    | st.text("abcdefghijklmnopqrstuvwxyz0123456789/-_.%?=&", max_size=30).map(lambda p: "/" + p)


def _exchange(srv, method, path, body):
    data = None if body is None else json.dumps(body).encode()
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    try:
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    event(f"status {resp.status}")
    assert resp.status < 500, (resp.status, raw[:300])
    kind = resp.getheader("Content-Type")
    assert kind == "application/json" or (kind == "text/event-stream" and resp.status == 200)
    if method != "HEAD" and kind == "application/json":
        parsed = json.loads(raw)
        assert isinstance(parsed, dict)
        if resp.status >= 400:
            assert isinstance(parsed["error"]["message"], str)
    assert request(srv, "GET", "/v1/models")[0] == 200


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(method=_methods, path=_paths, body=st.none() | _json)
def test_random_methods_and_paths_never_get_a_5xx(srv, method, path, body):
    _exchange(srv, method, path, body)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=_json | _chat.map(lambda b: {**b, "max_tokens": 2}))
def test_random_chat_bodies_never_get_a_5xx(srv, body):
    _exchange(srv, "POST", "/v1/chat/completions", body)
