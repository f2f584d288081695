"""The dispatch every server shares: which dialect answers a request, with which key, in which shape.

Driven over HTTP against the gateway (a scripted in-process policy), for every
registered dialect: the same conversation sent in each API's own request shape
reaches the policy as the same chat messages; a wrong method, a missing key and
a path no dialect has are answered in the right API's error shape.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from tackroom.core.policy import PolicyRequest, PolicyResponse, Sampling, ToolCall
from tackroom.core.registry import names
from tackroom.gateway import ModelGateway
from tackroom.wire import ApiError
from tackroom.wire.dialect import allowed_methods, credential, dialects, find

RUN = Sampling(temperature=0.0, max_tokens=32)
WAIT = 30.0  # seconds: a bound for "eventually", never a timing assertion
SYSTEM, ASK, RESULT = "You fix bugs.", "Fix the parser.", "FAILED test_x"
ARGS = {"cmd": "pytest -q"}
SCHEMA = {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}

#: One conversation (system, user, a bash call, its result) in each API's request shape.
REQUESTS: dict[str, tuple[str, dict]] = {
    "chat": ("/v1/chat/completions", {"model": "m", "messages": [
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": ASK},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "c1", "type": "function",
            "function": {"name": "bash", "arguments": json.dumps(ARGS)}}]},
        {"role": "tool", "tool_call_id": "c1", "content": RESULT}],
        "tools": [{"type": "function", "function": {"name": "bash", "parameters": SCHEMA}}]}),
    "anthropic": ("/v1/messages?beta=true", {
        "model": "m", "max_tokens": 32, "system": SYSTEM,
        "tools": [{"name": "bash", "input_schema": SCHEMA}],
        "messages": [{"role": "user", "content": ASK},
                     {"role": "assistant", "content": [
                         {"type": "tool_use", "id": "c1", "name": "bash", "input": ARGS}]},
                     {"role": "user", "content": [
                         {"type": "tool_result", "tool_use_id": "c1", "content": RESULT}]}]}),
    "responses": ("/v1/responses", {
        "model": "m", "instructions": SYSTEM,
        "tools": [{"type": "function", "name": "bash", "parameters": SCHEMA}],
        "input": [{"type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": ASK}]},
                  {"type": "function_call", "call_id": "c1", "name": "bash",
                   "arguments": json.dumps(ARGS)},
                  {"type": "function_call_output", "call_id": "c1", "output": RESULT}]}),
    "gemini": ("/v1beta/models/m:generateContent", {
        "systemInstruction": {"parts": [{"text": SYSTEM}]},
        "tools": [{"functionDeclarations": [{"name": "bash",
                                             "parametersJsonSchema": SCHEMA}]}],
        "contents": [{"role": "user", "parts": [{"text": ASK}]},
                     {"role": "model", "parts": [{"functionCall": {"name": "bash",
                                                                   "args": ARGS}}]},
                     {"role": "user", "parts": [{"functionResponse": {
                         "name": "bash", "response": {"output": RESULT}}}]}]}),
}


class Scripted:
    """Answers every call with a tool call, and keeps what it was asked."""

    id = "scripted"

    def __init__(self) -> None:
        self.asked: list[PolicyRequest] = []

    async def act(self, request: PolicyRequest) -> PolicyResponse:
        self.asked.append(request)
        return PolicyResponse(text="again", tool_calls=[ToolCall("call_9", "bash",
                                                                 json.dumps(ARGS))],
                              prompt_tokens=20, completion_tokens=4)

    async def aclose(self) -> None:
        pass


async def http(port: int, method: str, target: str, body: object = None,
               *headers: str) -> tuple[int, dict[str, str], bytes]:
    """One request on a fresh connection: status, headers (lower-case), body."""
    data = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
    extra = "".join(f"{h}\r\n" for h in headers)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{method} {target} HTTP/1.1\r\nHost: gw\r\nContent-Length: {len(data)}\r\n"
                 f"{extra}Connection: close\r\n\r\n".encode() + data)
    await writer.drain()
    try:
        answer = await asyncio.wait_for(reader.read(), WAIT)
    finally:
        writer.close()
    head, _, rest = answer.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    fields = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), {k.lower(): v for k, v in fields.items()}, rest


def shaped(got: object, like: object) -> bool:
    """Whether ``got`` has every key ``like`` has, nested (the shape, not words or values)."""
    if isinstance(like, dict):
        return isinstance(got, dict) and all(k in got and shaped(got[k], v)
                                             for k, v in like.items())
    return not isinstance(got, dict)


def registered() -> list[str]:
    return [n for n in REQUESTS if n in names("dialect")]


def test_every_dialect_has_a_conversation_here_and_its_routes_are_found():
    assert set(names("dialect")) <= set(REQUESTS), "add the new dialect's request to REQUESTS"
    for d in dialects():
        path = REQUESTS[d.name][0].split("?")[0]
        found = find("POST", path)
        assert found is not None and found[0] is d and found[1].kind == "turn"
        assert "POST" in allowed_methods(path)
    assert find("POST", "/v1/nothing") is None
    # A GET route answers HEAD; a path's other routes are only a fallback for a 405.
    found = find("HEAD", "/v1/models")
    assert found is not None and found[1].allows("HEAD") and found[1].kind == "models"


def test_the_key_comes_in_whichever_way_the_api_sends_it():
    assert credential([(b"authorization", b"Bearer  tok1 ")], b"/v1/x") == "tok1"
    assert credential([(b"authorization", b"Basic abc")], b"/v1/x") is None
    assert credential([(b"x-api-key", b"tok2")], b"/v1/messages") == "tok2"
    assert credential([(b"x-goog-api-key", b"tok3")], b"/v1beta/models/m:x") == "tok3"
    assert credential([], b"/v1beta/models/m:x?alt=sse&key=a%2Bb") == "a+b"
    assert credential([], b"/v1/x?keys=no") is None and credential([], b"/v1/x") is None


async def test_one_conversation_in_every_dialect_reaches_the_policy_alike():
    policy = Scripted()
    async with ModelGateway(policy) as gw:
        route = gw.open_episode(RUN)
        keys = {"anthropic": f"x-api-key: {route.token}",
                "gemini": f"x-goog-api-key: {route.token}"}
        for name in registered():
            path, body = REQUESTS[name]
            status, headers, reply = await http(
                gw.port, "POST", path, body,
                keys.get(name, f"Authorization: Bearer {route.token}"))
            assert status == 200, (name, reply)
            assert headers["content-type"] == "application/json"
            assert b"bash" in reply and b"pytest -q" in reply  # the call, in the API's shape
    assert len(policy.asked) == len(registered()) == len(route.turns)
    for name, asked in zip(registered(), policy.asked, strict=True):
        got = [(m["role"], m.get("content"),
                [(tc["function"]["name"], json.loads(tc["function"]["arguments"]))
                 for tc in m.get("tool_calls") or []]) for m in asked.messages]
        assert got[:3] == [("system", SYSTEM, []), ("user", ASK, []),
                           ("assistant", got[2][1], [("bash", ARGS)])], name
        assert got[2][1] in (None, "") and got[3][0] == "tool" and RESULT in got[3][1], name
        assert [t["function"]["name"] for t in asked.tools] == ["bash"], name
    assert [r.get("dialect", "chat") for r in route.requested] == registered()


async def test_errors_come_in_the_shape_of_the_api_whose_path_it_was():
    async with ModelGateway(Scripted()) as gw:
        route = gw.open_episode(RUN)
        for d in dialects():
            path = REQUESTS[d.name][0]
            status, headers, body = await http(gw.port, "PUT", path, {})
            assert status == 405 and "POST" in headers["allow"], d.name
            assert shaped(json.loads(body), d.error(ApiError(405, "x"))), d.name
            status, _, body = await http(gw.port, "POST", path, REQUESTS[d.name][1])
            assert status == 401, d.name
            assert shaped(json.loads(body), d.error(ApiError(401, "x"))), d.name
            status, _, body = await http(gw.port, "POST", path, b"", f"x-api-key: {route.token}")
            assert status == 400, d.name
            assert shaped(json.loads(body), d.error(ApiError(400, "x"))), d.name
        # A path no dialect has: OpenAI's shape, naming what the gateway does answer.
        status, _, body = await http(gw.port, "POST", "/v2/complete", {},
                                     f"Authorization: Bearer {route.token}")
        err = json.loads(body)["error"]
        assert status == 404 and err["type"] == "invalid_request_error"
        for d in dialects():
            assert d.summary in err["message"]
        assert (await http(gw.port, "GET", "/health"))[0] == 200
    assert route.turns == [] and [u["path"] for u in route.unanswered] == ["/v2/complete"]


@pytest.mark.parametrize("header", ["Authorization: Bearer {t}", "x-api-key: {t}",
                                    "x-goog-api-key: {t}", "api-key: {t}"])
async def test_any_key_header_identifies_the_route(header):
    async with ModelGateway(Scripted()) as gw:
        route = gw.open_episode(RUN)
        path, body = REQUESTS["chat"]
        status, _, _ = await http(gw.port, "POST", path, body, header.format(t=route.token))
        status_q, _, _ = await http(gw.port, "POST", f"{path}?key={route.token}", body)
    assert status == 200 and status_q == 200 and len(route.turns) == 2
