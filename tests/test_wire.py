"""The one HTTP/1.1 stack (``tackroom.wire``): strict framing for every server tackroom runs.

Request smuggling needs two parsers that disagree on where a request ends. Every
server tackroom runs — ``tackroom serve``, the recording gateway, the scripted test
server — reads requests through one parser that refuses every ambiguous framing
(two ``Content-Length`` headers, a list of lengths, ``Content-Length`` beside
``Transfer-Encoding``, a transfer coding other than ``chunked``, a malformed chunk)
with a 400 and then closes the connection, so bytes after a bad request are never
read as a second request. Each test talks to a real server over raw sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator

import pytest

from tackroom.core.policy import PolicyResponse, Sampling
from tackroom.gateway import ModelGateway

WAIT = 30.0  # seconds: a bound for "eventually", never a timing assertion
#: A request the smuggler hides after its own; answering it would prove the smuggle worked.
SMUGGLED = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"


class Echo:
    """A policy that answers every call with one word (the gateway's backend here)."""

    id = "echo"

    async def act(self, request):
        return PolicyResponse(text="ok", prompt_tokens=1, completion_tokens=1)

    async def aclose(self):
        return None


@contextlib.contextmanager
def gateway_thread() -> Iterator[tuple[int, str]]:
    """A gateway on its own event loop in a thread: ``(port, token)``."""
    loop = asyncio.new_event_loop()
    gw = ModelGateway(Echo())
    loop.run_until_complete(gw.start())
    token = gw.open_episode(Sampling()).token
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield gw.port, token
    finally:
        asyncio.run_coroutine_threadsafe(gw.aclose(), loop).result(WAIT)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT)
        loop.close()


@contextlib.contextmanager
def serve_thread(tiny_chat_dir) -> Iterator[tuple[int, str]]:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tackroom.serve import ServerThread

    with ServerThread(tiny_chat_dir, api_key="k") as srv:
        yield srv.port, "k"


@pytest.fixture(params=["serve", "gateway"])
def server(request) -> Iterator[tuple[int, str]]:
    """``tackroom serve`` (on the tiny chat model) and the gateway: ``(port, token)``."""
    if request.param == "gateway":
        with gateway_thread() as s:
            yield s
    else:
        with serve_thread(request.getfixturevalue("tiny_chat_dir")) as s:
            yield s


def exchange(port: int, data: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """Send ``data`` on one connection; every response until the server closes it.

    Raises if the server keeps the connection open (a bound of ``WAIT`` seconds).
    """
    async def talk() -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(data)
            await writer.drain()
            out = b""
            while chunk := await asyncio.wait_for(reader.read(65536), WAIT):
                out += chunk
            return out
        except ConnectionResetError:
            return out
        finally:
            writer.close()

    return parse_responses(asyncio.run(talk()))


def parse_responses(data: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    out = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        assert sep, data
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in
                   (ln.partition(":") for ln in lines[1:])}
        n = int(headers.get("content-length", "0"))
        out.append((int(lines[0].split()[1]), headers, rest[:n]))
        data = rest[n:]
    return out


def chat_head(token: str, framing: str) -> bytes:
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\n{framing}\r\n").encode()


def only_a_400_then_closed(got: list[tuple[int, dict[str, str], bytes]]) -> None:
    """One answer, a JSON 400 that says the connection closes; nothing after it was read."""
    assert [status for status, _, _ in got] == [400], got
    status, headers, body = got[0]
    assert headers.get("connection") == "close", headers
    error = json.loads(body)["error"]
    assert error["message"] and error["type"] == "invalid_request_error", error


BODY = json.dumps({"model": "tiny-chat", "messages": [{"role": "user", "content": "hi"}],
                   "max_tokens": 1}).encode()


@pytest.mark.parametrize("lengths", [(len(BODY), 5), (5, len(BODY)), (len(BODY), len(BODY))])
def test_two_content_length_headers_are_refused_and_the_connection_closed(server, lengths):
    port, token = server
    framing = "".join(f"Content-Length: {n}\r\n" for n in lengths)
    only_a_400_then_closed(exchange(port, chat_head(token, framing) + BODY + SMUGGLED))


def test_a_list_of_lengths_is_refused(server):
    port, token = server
    framing = f"Content-Length: {len(BODY)}, {len(BODY)}\r\n"
    only_a_400_then_closed(exchange(port, chat_head(token, framing) + BODY + SMUGGLED))


@pytest.mark.parametrize("order", ["cl-first", "te-first"])
def test_content_length_beside_transfer_encoding_is_refused_and_nothing_smuggled(server, order):
    port, token = server
    cl, te = "Content-Length: 5\r\n", "Transfer-Encoding: chunked\r\n"
    framing = cl + te if order == "cl-first" else te + cl
    only_a_400_then_closed(exchange(port, chat_head(token, framing) + b"0\r\n\r\n" + SMUGGLED))


@pytest.mark.parametrize("coding", ["gzip", "chunked, chunked", "identity"])
def test_transfer_codings_other_than_chunked_are_refused(server, coding):
    port, token = server
    got = exchange(port, chat_head(token, f"Transfer-Encoding: {coding}\r\n")
                   + b"0\r\n\r\n" + SMUGGLED)
    assert len(got) == 1 and got[0][0] in (400, 501), got
    assert got[0][1].get("connection") == "close"


@pytest.mark.parametrize("chunks", [b"zz\r\nhello\r\n0\r\n\r\n", b"5\r\nhelloXX0\r\n\r\n", b"-1\r\n\r\n"])
def test_bad_chunking_is_refused_and_the_connection_closed(server, chunks):
    port, token = server
    only_a_400_then_closed(exchange(port, chat_head(token, "Transfer-Encoding: chunked\r\n")
                                    + chunks + SMUGGLED))


def test_a_good_chunked_body_is_answered_and_the_connection_kept(server):
    """Strict is not stingy: a well-formed chunked request is answered, and the next one too."""
    port, token = server
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)
    keep = chat_head(token, "Transfer-Encoding: chunked\r\n") + chunked
    last = f"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n" \
           "Connection: close\r\n\r\n"
    got = exchange(port, keep + last.encode())
    assert [status for status, _, _ in got] == [200, 200], got
    assert json.loads(got[0][2])["choices"][0]["message"]["role"] == "assistant"
