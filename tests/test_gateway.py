"""The recording model gateway, driven by the real ``openai`` SDK and raw sockets.

Backends are real: :class:`OpenAIPolicy` against a :class:`ScriptedOpenAIServer`
on 127.0.0.1, and :class:`HFPolicy` on the tiny random chat model (token ids and
log-probs). No test asserts a timing; waits are generous bounds ("within 30 s").
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import tempfile
from contextlib import asynccontextmanager
from pathlib import Path

import openai
import pytest

from tackroom.core.errors import ConfigError
from tackroom.core.policy import Sampling, ToolCall
from tackroom.gateway import ModelGateway
from tackroom.policies.openai_policy import OpenAIPolicy
from tackroom.testing import Reply, ScriptedOpenAIServer, error, text

try:
    import httpx2 as httpx
except ImportError:  # pragma: no cover - older openai
    import httpx  # type: ignore[no-redef]

RUN = Sampling(temperature=0.2, top_p=0.9, max_tokens=32, seed=7)
HELLO = [{"role": "system", "content": "You are a coding agent."},
         {"role": "user", "content": "fix the bug"}]
TOOLS = [{"type": "function", "function": {
    "name": "bash", "description": "Run a shell command.",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}},
                   "required": ["cmd"]}}}]
WAIT = 30.0  # seconds: a bound for "eventually", never a timing assertion


@pytest.fixture(autouse=True)
def no_logged_errors(caplog):
    """No test may make the gateway (or asyncio under it) log an error: that is a bug path."""
    yield
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR
           and r.name.split(".")[0] in ("tackroom", "asyncio")]
    assert not bad, [r.getMessage() for r in bad]


@asynccontextmanager
async def scripted_gateway(script, default=None, **kw):
    """A gateway over ``OpenAIPolicy`` against a scripted server: ``(gateway, server)``."""
    with ScriptedOpenAIServer(script, default=default) as srv:
        policy = OpenAIPolicy("scripted", base_url=srv.base_url, max_retries=0, timeout=WAIT)
        try:
            async with ModelGateway(policy, **kw) as gw:
                yield gw, srv
        finally:
            await policy.aclose()


def client(route, **kw) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=route.base_url, api_key=route.token, max_retries=0,
                              timeout=WAIT, **kw)


async def collect(stream):
    """A streamed reply, assembled as agent CLIs do: content, tool calls by index, finish."""
    content, calls, finish, usage = "", {}, None, None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for tc in choice.delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                slot["id"] += tc.id or ""
                slot["name"] += (tc.function.name or "") if tc.function else ""
                slot["arguments"] += (tc.function.arguments or "") if tc.function else ""
            finish = choice.finish_reason or finish
    return content, [calls[i] for i in sorted(calls)], finish, usage


def calls_of(message):
    return [{"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments}
            for tc in message.tool_calls or []]


# ------------------------------------------------------------ raw HTTP
async def raw(where: int | str, data: bytes) -> bytes:
    """Send ``data`` over TCP (port) or a Unix socket (path); all bytes until the server closes."""
    if isinstance(where, int):
        reader, writer = await asyncio.open_connection("127.0.0.1", where)
    else:
        reader, writer = await asyncio.open_unix_connection(where)
    try:
        writer.write(data)
        await writer.drain()
        out = b""
        while True:
            try:
                chunk = await asyncio.wait_for(reader.read(65536), WAIT)
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
        return out
    finally:
        writer.close()


def responses(data: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """Parse the ``Content-Length`` framed responses in ``data`` (what the gateway sends)."""
    out = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        assert sep, data
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in
                   (ln.partition(":") for ln in lines[1:])}
        n = int(headers.get("content-length", "0"))
        out.append((status, headers, rest[:n]))
        data = rest[n:]
    return out


def request(method: str, path: str, body: bytes = b"", token: str | None = None,
            close: bool = True, extra: str = "") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: gw\r\n"
    if token:
        head += f"Authorization: Bearer {token}\r\n"
    if body or method == "POST":
        head += f"Content-Length: {len(body)}\r\nContent-Type: application/json\r\n"
    if close:
        head += "Connection: close\r\n"
    return (head + extra + "\r\n").encode() + body


def openai_error(status: int, body: bytes, expected: int) -> dict:
    assert status == expected, (status, body)
    obj = json.loads(body)
    assert set(obj) == {"error"}, obj
    err = obj["error"]
    assert isinstance(err["message"], str) and err["message"] and "Traceback" not in err["message"]
    assert {"type", "param", "code"} <= set(err)
    return err


# ------------------------------------------------------------- replies
async def test_stream_and_non_stream_give_the_same_reply():
    reply = Reply(text="I will look first.", tool_calls=[("bash", '{"cmd": "ls"}'),
                                                         ("bash", '{"cmd": "cat a.py"}')])
    async with scripted_gateway([reply, reply, text("done"), text("done")]) as (gw, srv):
        route = gw.open_episode(RUN, label="ep")
        async with client(route) as c:
            whole = await c.chat.completions.create(model="tackroom", messages=HELLO,
                                                    tools=TOOLS)
            stream = await c.chat.completions.create(
                model="tackroom", messages=HELLO, tools=TOOLS, stream=True,
                stream_options={"include_usage": True})
            content, calls, finish, usage = await collect(stream)
            plain = await c.chat.completions.create(model="tackroom", messages=HELLO)
            plain_stream = await collect(await c.chat.completions.create(
                model="tackroom", messages=HELLO, stream=True))
        msg = whole.choices[0].message
        assert msg.content == content == "I will look first."
        assert [(x["name"], x["arguments"]) for x in calls_of(msg)] == \
            [(x["name"], x["arguments"]) for x in calls] == \
            [("bash", '{"cmd": "ls"}'), ("bash", '{"cmd": "cat a.py"}')]
        assert whole.choices[0].finish_reason == finish == "tool_calls"
        assert usage is not None and usage.total_tokens == whole.usage.total_tokens > 0
        assert plain.choices[0].message.content == plain_stream[0] == "done"
        assert plain_stream[1] == [] and plain_stream[2] == "stop"

        # Four turns, recorded as tackroom records them (ToolCall.to_dict), with the
        # ids the client got, so its next messages can refer to them.
        assert [t.index for t in route.turns] == [0, 1, 2, 3]
        first = route.turns[0]
        assert first.messages == HELLO and first.raw_text == "I will look first."
        assert first.tool_calls == [ToolCall(x["id"], x["name"], x["arguments"]).to_dict()
                                    for x in calls_of(msg)]
        assert [tc["id"] for tc in route.turns[1].tool_calls] == [x["id"] for x in calls]
        assert first.prompt_tokens > 0 and first.completion_tokens > 0 and first.t_policy > 0
        assert route.requested[1]["stream"] is True and route.errors == []
        assert len(srv.requests) == 4 and not any(r.get("stream") for r in srv.requests)


async def test_sampling_is_the_runs_whatever_the_client_asks():
    history = [
        {"role": "developer", "content": [{"type": "text", "text": "Be brief."},
                                          {"type": "text", "text": "Use tools."}]},
        {"role": "user", "content": [{"type": "text", "text": "list files"}]},
        {"role": "assistant", "content": None, "refusal": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py\nb.py"},
    ]
    async with scripted_gateway([text("two files")]) as (gw, srv):
        route = gw.open_episode(RUN)
        async with client(route) as c:
            out = await c.chat.completions.create(
                model="gpt-4o", messages=history, tools=TOOLS, temperature=1.7, top_p=0.3,
                max_tokens=9999, seed=123, n=1, presence_penalty=0.5, frequency_penalty=0.5,
                parallel_tool_calls=False, response_format={"type": "text"}, user="agent",
                stop=["\n\n"], tool_choice="auto",
                extra_body={"vendor_knob": {"x": 1}, "max_completion_tokens": 5000})
        assert out.choices[0].message.content == "two files"
    sent = srv.requests[0]
    assert (sent["temperature"], sent["top_p"], sent["max_tokens"], sent["seed"]) == \
        (0.2, 0.9, 32, 7)
    assert "presence_penalty" not in sent and "vendor_knob" not in sent
    assert sent["tools"] == TOOLS
    # Text parts are joined, developer is system, extra message keys stay behind.
    assert sent["messages"][0] == {"role": "system", "content": "Be brief.\nUse tools."}
    assert sent["messages"][1] == {"role": "user", "content": "list files"}
    assert sent["messages"][2]["tool_calls"][0]["function"]["name"] == "bash"
    assert "refusal" not in sent["messages"][2]
    assert sent["messages"][3] == {"role": "tool", "content": "a.py\nb.py",
                                   "tool_call_id": "call_1"}
    # The turn keeps the messages as the client sent them, and what it asked.
    assert route.turns[0].messages == history
    asked = route.requested[0]
    assert (asked["temperature"], asked["max_tokens"], asked["seed"], asked["model"]) == \
        (1.7, 9999, 123, "gpt-4o")
    assert asked["vendor_knob"] == {"x": 1} and "messages" not in asked


async def test_concurrent_episodes_each_record_their_own_turns():
    def echo(body):
        return text("echo: " + body["messages"][-1]["content"])

    async with scripted_gateway(echo) as (gw, srv):
        routes = [gw.open_episode(RUN, label=f"ep{k}") for k in range(3)]

        async def agent(route, k):
            async with client(route) as c:
                for i in range(4):
                    msgs = [{"role": "user", "content": f"{route.label}-{i}"}]
                    out = await c.chat.completions.create(model="tackroom", messages=msgs,
                                                          stream=(i + k) % 2 == 1)
                    if (i + k) % 2 == 0:
                        assert out.choices[0].message.content == f"echo: {route.label}-{i}"
                    else:
                        assert (await collect(out))[0] == f"echo: {route.label}-{i}"

        await asyncio.gather(*(agent(r, k) for k, r in enumerate(routes)))
    for route in routes:
        assert [t.messages[-1]["content"] for t in route.turns] == \
            [f"{route.label}-{i}" for i in range(4)]
        assert [t.raw_text for t in route.turns] == [f"echo: {route.label}-{i}"
                                                     for i in range(4)]
        assert [t.index for t in route.turns] == [0, 1, 2, 3]
    assert len(srv.requests) == 12


async def test_hf_backend_token_ids_and_logprobs_are_recorded(tiny_chat_dir):
    pytest.importorskip("torch")
    from tackroom.policies.hf_policy import HFPolicy

    policy = HFPolicy(tiny_chat_dir, threads=1)
    try:
        async with ModelGateway(policy) as gw:
            route = gw.open_episode(Sampling(temperature=0.0, max_tokens=6))
            async with client(route) as c:
                out = await c.chat.completions.create(model="tackroom", messages=HELLO,
                                                      logprobs=True, max_tokens=500)
                streamed = await collect(await c.chat.completions.create(
                    model="tackroom", messages=HELLO, stream=True))
                bare = await c.chat.completions.create(model="tackroom", messages=HELLO)
    finally:
        await policy.aclose()
    turn = route.turns[0]
    assert turn.token_ids and len(turn.logprobs) == len(turn.token_ids) <= 6
    assert all(lp <= 0 for lp in turn.logprobs)
    assert turn.completion_tokens == len(turn.token_ids) and turn.prompt_tokens > 0
    choice = out.choices[0]
    assert choice.model_extra["token_ids"] == turn.token_ids
    assert [e.logprob for e in choice.logprobs.content] == turn.logprobs
    assert [e.token for e in choice.logprobs.content] == [f"token_id:{t}"
                                                         for t in turn.token_ids]
    # Greedy: the same prompt gives the same reply, streamed or not.
    assert (choice.message.content or "") == streamed[0]
    assert route.turns[1].token_ids == turn.token_ids
    # Not asked for: not sent, but recorded all the same.
    assert bare.choices[0].logprobs is None and "token_ids" not in (bare.choices[0].model_extra
                                                                     or {})
    assert route.turns[2].token_ids == turn.token_ids


# ------------------------------------------------------------ tokens
async def test_tokens_attribute_calls_and_closed_routes_are_refused():
    async with scripted_gateway([text("one"), text("two")]) as (gw, srv):
        route = gw.open_episode(RUN)
        other = gw.open_episode(RUN)
        body = json.dumps({"model": "m", "messages": HELLO}).encode()
        for token in (None, "wrong", route.token + "x"):
            [(status, headers, got)] = responses(await raw(
                gw.port, request("POST", "/v1/chat/completions", body, token)))
            openai_error(status, got, 401)
            assert headers["www-authenticate"] == "Bearer"
        # x-api-key works as well as Authorization: Bearer.
        [(status, _, got)] = responses(await raw(gw.port, request(
            "POST", "/v1/chat/completions", body, extra=f"x-api-key: {other.token}\r\n")))
        assert status == 200 and json.loads(got)["choices"][0]["message"]["content"] == "one"
        async with client(route) as c:
            assert (await c.chat.completions.create(model="m", messages=HELLO)
                    ).choices[0].message.content == "two"
            assert gw.close_episode(route.token) is route and route.closed
            with pytest.raises(openai.AuthenticationError) as e:
                await c.chat.completions.create(model="m", messages=HELLO)
            assert "closed" in e.value.message
            with pytest.raises(openai.AuthenticationError):
                await c.models.list()
        async with client(other) as c:
            assert [m.id for m in (await c.models.list()).data] == ["tackroom"]
        assert len(route.turns) == 1 and len(other.turns) == 1 and len(srv.requests) == 2
        assert route.token not in repr(route)
        assert gw.routes == [other] and gw.route(route.token) is None
        with pytest.raises(KeyError):
            gw.close_episode("never-issued")
        assert gw.close_episode(route.token) is None  # closing twice is harmless


# ------------------------------------------------------------ hostile clients
async def test_client_mistakes_get_json_4xx_and_the_gateway_keeps_serving():
    async with scripted_gateway([], default=text("fine"), max_body=10_000) as (gw, srv):
        route = gw.open_episode(RUN)
        tok = route.token
        chat = "/v1/chat/completions"
        cases = [
            (request("POST", chat, b"{not json", tok), 400),
            (request("POST", chat, b"", tok), 400),
            (request("POST", chat, b'{"messages": [{"role": "user", "content": NaN}]}', tok),
             400),
            (request("POST", chat, b'{"model": "m"}', tok), 400),
            (request("POST", chat, b'[1, 2]', tok), 400),
            (request("POST", chat, json.dumps({"messages": [{"role": "wizard",
                                                             "content": "x"}]}).encode(), tok),
             400),
            (request("POST", chat, json.dumps({"messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "data:,"}}]}]}).encode(), tok), 400),
            (request("POST", chat, b'{"messages": [{"role": "user", "content": "\\ud800"}]}',
                     tok), 400),
            (request("POST", chat, b"[" * 10_000 + b"]" * 10_000, tok), 413),
            (request("POST", chat, b"[" * 4000 + b"]" * 4000, tok), 400),
            (request("GET", chat, token=tok), 405),
            (request("DELETE", "/v1/models", token=tok), 405),
            (request("GET", "/v1/completions", token=tok), 404),
            (request("GET", "/", token=tok), 404),
            (request("BREW", "/coffee"), 404),
            (request("GET", "/v1/models/gpt-4", token=tok), 404),
            (f"POST {chat} HTTP/1.1\r\nHost: gw\r\nContent-Length: 99999999\r\n\r\n{{"
             .encode(), 413),
            (b"GARBAGE\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40_000 + b"\r\n\r\n", 431),
            (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000, 431),
        ]
        for data, expected in cases:
            [(status, headers, body)] = responses(await raw(gw.port, data))
            err = openai_error(status, body, expected)
            if expected == 405:
                assert headers["allow"] in ("POST", "GET, HEAD")
            assert srv.base_url not in err["message"]
        # A chunked body is read (and its size limited as it arrives).
        body = json.dumps({"messages": HELLO}).encode()
        chunked = (f"POST {chat} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {tok}\r\n"
                   "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n").encode()
        ok = chunked + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
        [(status, _, got)] = responses(await raw(gw.port, ok))
        assert status == 200 and json.loads(got)["choices"][0]["message"]["content"] == "fine"
        big = chunked + b"".join(b"1000\r\n" + b" " * 4096 + b"\r\n" for _ in range(4))
        [(status, _, got)] = responses(await raw(gw.port, big))
        openai_error(status, got, 413)
        # One kept-alive connection: a 400, then a good request, then a 404, all answered.
        good = request("POST", chat, json.dumps({"messages": HELLO}).encode(), tok, close=False)
        got = responses(await raw(gw.port, request("POST", chat, b"{", tok, close=False) + good
                                  + request("GET", "/nope", token=tok)))
        assert [s for s, _, _ in got] == [400, 200, 404]
        # HEAD and health.
        [(status, _, got)] = responses(await raw(gw.port, request("GET", "/health")))
        assert status == 200 and json.loads(got) == {"status": "ok"}
        head = await raw(gw.port, request("HEAD", "/v1/models", token=tok))
        assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n")
        # Still serving the SDK after all that.
        async with client(route) as c:
            out = await c.chat.completions.create(model="m", messages=HELLO)
        assert out.choices[0].message.content == "fine"
        assert len(route.turns) == 3 and route.errors == []


async def test_silent_and_half_open_connections_are_closed():
    async with scripted_gateway([], default=text("fine"), read_timeout=0.5) as (gw, _):
        route = gw.open_episode(RUN)
        # Headers that never finish, a body that stops short, an idle keep-alive
        # connection: each is closed by the gateway (raw() returns when it closes).
        partial = await raw(gw.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n")
        [(status, _, body)] = responses(partial)
        openai_error(status, body, 408)
        short = await raw(gw.port, request("POST", "/v1/chat/completions", b"{}",
                                           route.token)[:-1])
        [(status, _, body)] = responses(short)
        openai_error(status, body, 408)
        assert await raw(gw.port, b"") == b""
        # A request that waits for "100 Continue" gets it, then its answer.
        body = json.dumps({"messages": HELLO}).encode()
        got = await raw(gw.port, (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer "
            f"{route.token}\r\nExpect: 100-continue\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode() + body)
        assert got.startswith(b"HTTP/1.1 100")
        assert b"HTTP/1.1 200" in got and b'"fine"' in got


async def until(condition, what: str) -> None:
    """Wait (bounded, never asserted as a timing) until ``condition()`` holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not condition():
        assert loop.time() < deadline, f"never: {what}"
        await asyncio.sleep(0.01)


async def test_connections_and_buffered_bodies_are_bounded():
    async with scripted_gateway([], default=text("fine"), max_body=10_000, max_buffered=10_000,
                                max_connections=3) as (gw, _):
        route = gw.open_episode(RUN)
        body = json.dumps({"messages": HELLO, "pad": "x" * 7000}).encode()
        # One client is sending a big body slowly; a second one's body does not fit
        # beside it: it waits for room (back-pressure), not a 503 or a memory spike.
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
        head = request("POST", "/v1/chat/completions", body, route.token)
        writer.write(head[:-100])
        await until(lambda: gw.buffered_bytes >= 6000, "the first body is buffered")
        second = asyncio.ensure_future(raw(gw.port, request(
            "POST", "/v1/chat/completions",
            json.dumps({"messages": HELLO, "pad": "y" * 4000}).encode(), route.token)))
        await until(lambda: gw.open_connections == 2, "the second client is connected")
        assert gw.buffered_bytes <= 10_000 and not second.done()
        writer.write(head[-100:])
        [(status, _, got)] = responses(await asyncio.wait_for(reader.read(), WAIT))
        assert status == 200 and b'"fine"' in got
        writer.close()
        [(status, _, got)] = responses(await asyncio.wait_for(second, WAIT))
        assert status == 200 and b'"fine"' in got
        await until(lambda: gw.buffered_bytes == 0, "the budget is given back")
        # At max_connections the gateway stops accepting and closes the connection
        # idle longest to make room: a newcomer waits, then is answered.
        idle = [await asyncio.open_connection("127.0.0.1", gw.port) for _ in range(3)]
        await until(lambda: gw.open_connections == 3, "three connections are open")
        [(status, _, _)] = responses(await raw(gw.port, request("GET", "/health")))
        assert status == 200
        assert b"" in [await asyncio.wait_for(r.read(), WAIT) for r, _ in idle]
        for _, w in idle:
            w.close()
        await until(lambda: gw.open_connections == 0, "the idle connections are closed")


async def test_backend_failures_are_json_5xx_and_recorded():
    script = [error(500, "engine died"), error(401, "bad key sk-secret"),
              error(400, "This model's maximum context length is 10 tokens"), text("back")]
    async with scripted_gateway(script) as (gw, srv):
        route = gw.open_episode(RUN)
        async with client(route) as c:
            for expected, kind in [(503, openai.InternalServerError),
                                   (502, openai.InternalServerError),
                                   (400, openai.BadRequestError)]:
                with pytest.raises(kind) as e:
                    await c.chat.completions.create(model="m", messages=HELLO)
                assert e.value.status_code == expected
                assert srv.base_url not in e.value.message and "sk-secret" not in e.value.message
            assert e.value.code == "context_length_exceeded"
            out = await c.chat.completions.create(model="m", messages=HELLO)
        assert out.choices[0].message.content == "back"
    assert [x["status"] for x in route.errors] == [503, 502, 400]
    assert [x["kind"] for x in route.errors] == ["InfraError", "PolicyError",
                                                 "ContextLengthExceeded"]
    assert "engine died" in route.errors[0]["message"]
    assert len(route.turns) == 1 and route.turns[0].raw_text == "back"


class GatedPolicy:
    """Answers "ok", each call only once the test lets it (to hold a call in flight)."""

    id = "gated"

    def __init__(self) -> None:
        self.gates: list[asyncio.Event] = []
        self.calls = 0

    async def act(self, request):
        from tackroom.core.policy import PolicyResponse

        self.calls += 1
        n, gate = self.calls, asyncio.Event()
        self.gates.append(gate)
        await gate.wait()
        return PolicyResponse(text=f"ok {n}")

    async def aclose(self) -> None:
        return None


async def test_a_route_answers_its_turn_budget_and_refuses_the_call_past_it():
    """``max_turns``: the calls answered and in flight count; the next is a 400 the SDK does
    not retry, never reaches the policy, is not a turn and not a backend error."""
    from tackroom.gateway.server import BUDGET_STATUS

    policy = GatedPolicy()
    async with ModelGateway(policy) as gw:
        route = gw.open_episode(RUN, max_turns=2)
        free = gw.open_episode(RUN)
        # SDK retries on: a refusal must be final all the same (one request, refused once).
        async with openai.AsyncOpenAI(base_url=route.base_url, api_key=route.token,
                                      max_retries=2, timeout=WAIT) as c:
            first = asyncio.create_task(c.chat.completions.create(model="m", messages=HELLO))
            for _ in range(int(WAIT * 100)):  # until the first call is in flight
                if route.pending:
                    break
                await asyncio.sleep(0.01)
            assert route.pending == 1 and not route.exhausted
            second = asyncio.create_task(c.chat.completions.create(model="m", messages=HELLO))
            for _ in range(int(WAIT * 100)):
                if route.pending == 2:
                    break
                await asyncio.sleep(0.01)
            assert route.exhausted  # two in flight: the budget is taken
            with pytest.raises(openai.BadRequestError) as e:  # a third, while both wait
                await c.chat.completions.create(model="m", messages=HELLO, stream=True)
            assert e.value.status_code == BUDGET_STATUS and e.value.code == "budget_exhausted"
            assert "turn budget of 2" in e.value.message
            for gate in policy.gates:
                gate.set()
            assert {(await t).choices[0].message.content for t in (first, second)} == \
                {"ok 1", "ok 2"}
            with pytest.raises(openai.BadRequestError):
                await c.chat.completions.create(model="m", messages=HELLO)
        assert len(route.turns) == 2 and route.refused == 2 and route.errors == []
        assert policy.calls == 2  # the refused calls never reached the policy
        # Another route has its own budget (none here).
        async with client(free) as c:
            task = asyncio.create_task(c.chat.completions.create(model="m", messages=HELLO))
            for _ in range(int(WAIT * 100)):
                if policy.calls == 3:
                    break
                await asyncio.sleep(0.01)
            policy.gates[-1].set()
            assert (await task).choices[0].message.content == "ok 3"
        assert not free.exhausted and free.refused == 0
        with pytest.raises(ConfigError):
            gw.open_episode(RUN, max_turns=0)


# ------------------------------------------------------------ unix socket
async def test_a_unix_socket_request_is_recorded_like_a_tcp_one():
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="gw") as d:
        path = Path(d) / "gw.sock"
        stale = socket.socket(socket.AF_UNIX)
        stale.bind(str(path))  # a socket file nobody listens on: replaced
        stale.close()
        async with scripted_gateway([text("over tcp"), text("over uds")],
                                    unix_socket=path) as (gw, srv):
            route = gw.open_episode(RUN)
            async with client(route) as c:
                await c.chat.completions.create(model="m", messages=HELLO)
            transport = httpx.AsyncHTTPTransport(uds=str(path))
            async with client(route, http_client=openai.DefaultAsyncHttpxClient(
                    transport=transport)) as c:
                out = await c.chat.completions.create(model="m", messages=HELLO,
                                                      temperature=1.5)
            assert out.choices[0].message.content == "over uds"
            [(status, _, body)] = responses(await raw(str(path), request("GET", "/nope")))
            openai_error(status, body, 404)
            # A second gateway cannot take a socket that one is serving on.
            with pytest.raises(ConfigError, match="another server"):
                await ModelGateway(gw.policy, unix_socket=path).start()
        assert not path.exists()  # removed on close
    assert [t.raw_text for t in route.turns] == ["over tcp", "over uds"]
    assert route.turns[1].messages == HELLO and route.requested[1]["temperature"] == 1.5
    assert srv.requests[1]["temperature"] == 0.2


async def test_a_unix_socket_path_that_is_a_file_is_refused(tmp_path):
    path = tmp_path / "not-a-socket"
    path.write_text("data")
    with ScriptedOpenAIServer([]) as srv:
        policy = OpenAIPolicy("scripted", base_url=srv.base_url)
        with pytest.raises(ConfigError, match="not a socket"):
            await ModelGateway(policy, unix_socket=path).start()
        await policy.aclose()
    assert path.read_text() == "data" and os.path.isfile(path)
