"""Anthropic Messages, spoken by the gateway and ``tackroom serve``, with the official ``anthropic`` SDK.

The gateway runs over a scripted in-process policy (what it is asked is read
back from the policy and the route's records); ``tackroom serve`` over the tiny
random chat model, whose replies are steered by ``SAY:`` (the tokenizer's own
tokens and the model's own log-probs, down the server's real path). A property
test takes random requests and replies through the dialect and back.
"""

from __future__ import annotations

import asyncio
import json

import anthropic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tackroom.core.policy import PolicyRequest, PolicyResponse, Sampling, ToolCall
from tackroom.gateway import ModelGateway
from tackroom.wire import Completion, Shape, parse_chat
from tackroom.wire.anthropic import events, reply, to_chat
from tackroom.wire.dialect import find

RUN = Sampling(temperature=0.0, max_tokens=64)
TOOLS = [{"name": "bash", "description": "Run a shell command.",
          "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}},
                           "required": ["cmd"]}}]
WAIT = 30.0  # seconds: a bound for "eventually", never a timing assertion


class Scripted:
    """A policy that answers from a list, and keeps what it was asked."""

    id = "scripted"

    def __init__(self, *replies: PolicyResponse) -> None:
        self.replies = list(replies)
        self.asked: list[PolicyRequest] = []

    async def act(self, request: PolicyRequest) -> PolicyResponse:
        self.asked.append(request)
        return self.replies.pop(0)

    async def aclose(self) -> None:
        pass


def said(text: str) -> PolicyResponse:
    return PolicyResponse(text=text, prompt_tokens=11, completion_tokens=3)


def calls(*pairs: tuple[str, dict]) -> PolicyResponse:
    return PolicyResponse(text="", prompt_tokens=12, completion_tokens=5, tool_calls=[
        ToolCall(f"call_{i}", name, json.dumps(args)) for i, (name, args) in enumerate(pairs)])


def sdk(route, **kw) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=route.root_url, api_key=route.token,
                                    max_retries=0, timeout=WAIT, **kw)


async def raw(port: int, method: str, target: str, body: object = None,
              *headers: str) -> bytes:
    """One request over a fresh connection; every byte of the answer (the server closes)."""
    data = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
    head = "".join(f"{h}\r\n" for h in headers)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{method} {target} HTTP/1.1\r\nHost: gw\r\nContent-Length: {len(data)}\r\n"
                 f"{head}Connection: close\r\n\r\n".encode() + data)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), WAIT)
    finally:
        writer.close()


# ------------------------------------------------------------------ gateway
async def test_gateway_text_reply_whole_and_streamed_and_what_the_policy_saw():
    policy = Scripted(said("hello there"), said("hello there"))
    async with ModelGateway(policy) as gw:
        route = gw.open_episode(RUN)
        async with sdk(route) as c:
            msg = await c.messages.create(
                model="claude-x", max_tokens=100, extra_body={"temperature": 0.7},
                system=[{"type": "text", "text": "Be brief."},
                        {"type": "text", "text": "Use tools.", "cache_control": {"type":
                                                                                 "ephemeral"}}],
                messages=[{"role": "user", "content": "hi"}], metadata={"user_id": "u1"},
                output_config={"effort": "low", "format": {"type": "json_schema",
                                                           "schema": {"type": "object"}}})
            async with c.messages.stream(model="claude-x", max_tokens=100,
                                         messages=[{"role": "user", "content": "hi"}]) as s:
                streamed = await s.get_final_message()
    assert msg.id.startswith("msg_") and msg.role == "assistant" and msg.type == "message"
    assert [b.type for b in msg.content] == ["text"] and msg.content[0].text == "hello there"
    assert msg.stop_reason == "end_turn" and msg.stop_sequence is None
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (11, 3)
    assert msg.model == gw.model_name
    assert streamed.content[0].text == "hello there" and streamed.stop_reason == "end_turn"
    assert (streamed.usage.input_tokens, streamed.usage.output_tokens) == (11, 3)
    # The policy got chat messages; the route enforces its own sampling.
    assert policy.asked[0].messages == [
        {"role": "system", "content": "Be brief.\nUse tools."},
        {"role": "user", "content": "hi"}]
    assert policy.asked[0].sampling == RUN
    assert len(route.turns) == 2 and route.turns[0].raw_text == "hello there"
    asked = route.requested[0]
    assert asked["dialect"] == "anthropic" and asked["temperature"] == 0.7
    assert asked["max_tokens"] == 100 and "metadata" not in asked
    assert asked["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "output", "schema": {"type": "object"}}}
    assert asked["output_config"]["effort"] == "low"  # kept for the record
    assert route.requested[1]["stream"] is True


async def test_gateway_tool_call_then_tool_result_over_several_turns():
    policy = Scripted(calls(("bash", {"cmd": "ls"}), ("bash", {"cmd": "pwd"})),
                      said("done: two files"))
    async with ModelGateway(policy) as gw:
        route = gw.open_episode(RUN)
        async with sdk(route) as c:
            history = [{"role": "user", "content": "list the files"}]
            first = await c.messages.create(model="m", max_tokens=64, tools=TOOLS,
                                            tool_choice={"type": "auto"}, messages=history)
            assert first.stop_reason == "tool_use"
            uses = [b for b in first.content if b.type == "tool_use"]
            assert [(u.name, u.input) for u in uses] == [("bash", {"cmd": "ls"}),
                                                          ("bash", {"cmd": "pwd"})]
            assert all(u.id.startswith("toolu_") for u in uses) and uses[0].id != uses[1].id
            history += [
                {"role": "assistant", "content": [b.model_dump() for b in first.content]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": uses[0].id, "content": "a.py b.py"},
                    {"type": "tool_result", "tool_use_id": uses[1].id, "is_error": True,
                     "content": [{"type": "text", "text": "pwd: not allowed"}]},
                    {"type": "text", "text": "go on"}]}]
            second = await c.messages.create(model="m", max_tokens=64, tools=TOOLS,
                                             messages=history)
    assert second.content[0].text == "done: two files" and second.stop_reason == "end_turn"
    sent = policy.asked[1].messages
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool", "user"]
    assert [tc["id"] for tc in sent[1]["tool_calls"]] == [u.id for u in uses]
    assert json.loads(sent[1]["tool_calls"][0]["function"]["arguments"]) == {"cmd": "ls"}
    assert (sent[2]["tool_call_id"], sent[2]["content"]) == (uses[0].id, "a.py b.py")
    assert (sent[3]["tool_call_id"], sent[3]["content"]) == (uses[1].id, "pwd: not allowed")
    assert sent[4] == {"role": "user", "content": "go on"}
    assert [t["function"]["name"] for t in policy.asked[0].tools] == ["bash"]
    # The record keeps what the policy does not see: the error flag on the tool result.
    assert route.turns[1].messages[3]["is_error"] is True
    assert len(route.turns) == 2 and route.turns[0].tool_calls[0]["function"]["name"] == "bash"


async def test_gateway_streamed_tool_call_is_anthropics_event_sequence():
    policy = Scripted(*[PolicyResponse(text="Let me look.", tool_calls=[
        ToolCall("call_a", "bash", '{"cmd": "ls -la"}')], prompt_tokens=9,
        completion_tokens=7)] * 2)
    body = {"model": "m", "max_tokens": 64, "tools": TOOLS, "stream": True,
            "messages": [{"role": "user", "content": "go"}]}
    async with ModelGateway(policy) as gw:
        route = gw.open_episode(RUN)
        async with sdk(route) as c:
            stream = await c.messages.create(**body)
            got = [e async for e in stream]
        # On the wire, as Anthropic sends it: named events, a ping after the first block starts.
        wire = await raw(gw.port, "POST", "/v1/messages?beta=true", body,
                         f"x-api-key: {route.token}")
    head, _, sent = wire.partition(b"\r\n\r\n")
    assert b"text/event-stream" in head
    names = [line[len("event: "):] for line in sent.decode().splitlines()
             if line.startswith("event: ")]
    assert names == [
        "message_start", "content_block_start", "ping", "content_block_delta",
        "content_block_stop", "content_block_start", "content_block_delta",
        "content_block_stop", "message_delta", "message_stop"]
    assert [e.type for e in got] == [n for n in names if n != "ping"]  # the SDK drops pings
    got = [e for e in got if e.type != "ping"]
    assert got[1].content_block.type == "text" and got[2].delta.text == "Let me look."
    assert got[4].content_block.type == "tool_use" and got[4].content_block.name == "bash"
    assert got[4].content_block.id == "toolu_a"
    assert json.loads(got[5].delta.partial_json) == {"cmd": "ls -la"}
    assert got[7].delta.stop_reason == "tool_use" and got[7].usage.output_tokens == 7
    assert got[0].message.usage.input_tokens == 9


async def test_gateway_errors_are_anthropics_shape():
    policy = Scripted(said("never"))
    async with ModelGateway(policy) as gw:
        route = gw.open_episode(RUN)
        async with sdk(route) as c:
            with pytest.raises(anthropic.BadRequestError) as e:  # max_tokens is required
                await c.post("/v1/messages", cast_to=object, body={
                    "model": "m", "messages": [{"role": "user", "content": "x"}]})
            assert e.value.body == {"type": "error", "error": {
                "type": "invalid_request_error", "message": "max_tokens: Field required"}}
            with pytest.raises(anthropic.BadRequestError, match="image"):
                await c.messages.create(model="m", max_tokens=5, messages=[
                    {"role": "user", "content": [{"type": "image", "source": {
                        "type": "base64", "media_type": "image/png", "data": "AAAA"}}]}])
            with pytest.raises(anthropic.BadRequestError, match="role"):
                await c.messages.create(model="m", max_tokens=5, messages=[
                    {"role": "tool", "content": "x"}])
        answer = await raw(gw.port, "POST", "/v1/messages", b"{not json",
                           f"x-api-key: {route.token}")
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400")
        assert json.loads(body)["error"]["type"] == "invalid_request_error"
        assert "not valid JSON" in json.loads(body)["error"]["message"]
        async with anthropic.AsyncAnthropic(base_url=route.root_url, api_key="wrong",
                                            max_retries=0) as bad:
            with pytest.raises(anthropic.AuthenticationError) as e:
                await bad.messages.create(model="m", max_tokens=5,
                                          messages=[{"role": "user", "content": "x"}])
            assert e.value.body["error"]["type"] == "authentication_error"
    assert route.turns == [] and policy.asked == []


async def test_gateway_beta_query_and_count_tokens_side_call():
    policy = Scripted(said("beta ok"))
    async with ModelGateway(policy) as gw:
        route = gw.open_episode(RUN, max_turns=1)
        async with sdk(route) as c:
            counted = await c.messages.count_tokens(
                model="m", system="Be brief.", tools=TOOLS,
                messages=[{"role": "user", "content": "how many tokens is this?"}])
            # Claude Code's path: /v1/messages?beta=true (the query is not the path).
            msg = await c.beta.messages.create(model="m", max_tokens=8, messages=[
                {"role": "user", "content": "hi"}])
    assert msg.content[0].text == "beta ok"
    # No policy here can count: an estimate, a side call that is neither a turn nor budget.
    assert counted.input_tokens > 5
    assert route.side_calls == [{"kind": "count_tokens", "dialect": "anthropic",
                                 "tokens": counted.input_tokens, "estimated": True}]
    assert len(route.turns) == 1 and route.refused == 0


async def test_a_call_no_dialect_answers_is_recorded_and_named():
    async with ModelGateway(Scripted()) as gw:
        route = gw.open_episode(RUN)
        answer = await raw(gw.port, "POST", "/v1/foo/bar?x=1", {},
                           "User-Agent: claude-cli/9.9 (external, cli)",
                           f"x-api-key: {route.token}")
        # Without the episode's token, nothing is recorded on the route.
        await raw(gw.port, "GET", "/v2/other", None, "User-Agent: curl/8")
    assert answer.startswith(b"HTTP/1.1 404")
    assert b"no route POST /v1/foo/bar" in answer and b"Anthropic Messages" in answer
    [call] = route.unanswered
    assert (call["method"], call["path"], call["user_agent"]) == (
        "POST", "/v1/foo/bar", "claude-cli/9.9 (external, cli)")
    assert route.missing_api("the claude CLI") == (
        "the claude CLI called POST /v1/foo/bar (User-Agent 'claude-cli/9.9 (external, cli)'),"
        " which no dialect of this gateway answers")
    assert route.turns == []


#: A "CLI" that calls an API no dialect has, then exits 1 as a confused CLI would.
FOREIGN_CLI = (
    "import os, urllib.request as u; "
    "r = u.Request(os.environ['OPENAI_BASE_URL'] + '/foo', data=b'x'); "
    "r.add_header('x-api-key', os.environ['OPENAI_API_KEY']); "
    "r.add_header('User-Agent', 'fake-cli/1.0'); "
    "exec('try: u.urlopen(r)\\nexcept Exception: pass'); "
    "print('There is an issue with the selected model'); raise SystemExit(1)")


@pytest.mark.slow
def test_an_episode_whose_cli_needs_a_missing_api_names_it(tmp_path):
    """The episode's error is the API the CLI called and no dialect answers, not its crash."""
    from pathlib import Path

    import tackroom

    base = Path(tackroom.__file__).parent / "harness" / "agents" / "mini-swe-agent.toml"
    text = base.read_text()
    start = text.index("command = [")
    end = text.index("]", text.index('"-o"', start)) + 1
    harness = tmp_path / "foreign-api.toml"
    harness.write_text((text[:start] + "command = " + json.dumps(
        ["{tool}/bin/python", "-c", FOREIGN_CLI]) + text[end:]).replace(
        'name = "mini-swe-agent"', 'name = "foreign-api"'))
    run = tackroom.evaluate("terminal", tasks=["csv-column-sum"], harnesses=[str(harness)],
                            policies=["expert"], seeds=[0], store=tmp_path / "r.duckdb")
    [final] = run.final_episodes()
    assert final["outcome"] == "infra_error"
    assert ("the mini-swe-agent CLI called POST /v1/foo (User-Agent 'fake-cli/1.0'), which "
            "no dialect of this gateway answers") in final["error"]
    assert "selected model" not in final["error"]


# ------------------------------------------------------------ tackroom serve
KEY = "sk-anthropic-dialect-test"


@pytest.fixture(scope="module")
def served(tiny_chat_dir):
    """``tackroom serve`` on the tiny model with an API key; ``SAY:`` steers its replies."""
    import torch

    from tackroom.policies.hf_policy import HFPolicy
    from tackroom.serve import ServerThread

    class SayHF(HFPolicy):
        async def act(self, request: PolicyRequest) -> PolicyResponse:
            last = request.messages[-1].get("content")
            if not (isinstance(last, str) and last.startswith("SAY:")):
                return await super().act(request)
            ids = self.tokenizer.encode(last[4:], add_special_tokens=False)
            ids.append(self.tokenizer.eos_token_id)
            return PolicyResponse(
                token_ids=ids, logprobs=self.score(request.messages, ids, request.tools),
                prompt_tokens=len(self.prompt_ids(request.messages, request.tools)),
                completion_tokens=len(ids), model=self.model_dir)

    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models decode fastest on one thread
    try:
        with ServerThread(policy=SayHF(tiny_chat_dir), api_key=KEY) as srv:
            client = anthropic.Anthropic(base_url=srv.base_url.removesuffix("/v1"),
                                         api_key=KEY, max_retries=0, timeout=120)
            yield srv, client
            client.close()
    finally:
        torch.set_num_threads(before)


def test_serve_answers_text_tool_calls_and_stop_sequences(served):
    from tackroom.models import format_tool_call

    srv, c = served
    ask = [{"role": "user", "content": "SAY:hello world"}]
    msg = c.messages.create(model=srv.model_name, max_tokens=16, messages=ask,
                            extra_body={"return_token_ids": True})
    with c.messages.stream(model=srv.model_name, max_tokens=16, messages=ask) as s:
        streamed = s.get_final_message()
    assert msg.content[0].text == "hello world" == streamed.content[0].text
    assert msg.stop_reason == "end_turn" == streamed.stop_reason
    ids = msg.model_extra["token_ids"]
    prompt = srv.policy.prompt_ids([{"role": "user", "content": "SAY:hello world"}])
    assert msg.model_extra["prompt_token_ids"] == prompt
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (len(prompt), len(ids))
    assert len(msg.model_extra["logprobs"]) == len(ids) and msg.model == srv.model_name
    assert (streamed.usage.input_tokens, streamed.usage.output_tokens) == (len(prompt), len(ids))
    # A tool call the model writes is a tool_use block.
    said = "Let me look.\n" + format_tool_call("bash", {"cmd": "ls"})
    msg = c.messages.create(model=srv.model_name, max_tokens=64, tools=TOOLS,
                            messages=[{"role": "user", "content": "SAY:" + said}])
    assert msg.stop_reason == "tool_use"
    assert [b.type for b in msg.content] == ["text", "tool_use"]
    assert msg.content[0].text == "Let me look." and msg.content[1].input == {"cmd": "ls"}
    # Its result, next turn: the template renders the tool message (a multi-turn history).
    msg = c.messages.create(model=srv.model_name, max_tokens=16, tools=TOOLS, messages=[
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": [b.model_dump() for b in msg.content]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": msg.content[1].id, "content": "a.py"},
            {"type": "text", "text": "SAY:one file"}]}])
    assert msg.content[0].text == "one file"
    # A stop sequence ends the text where it starts, and says which one it was.
    msg = c.messages.create(model=srv.model_name, max_tokens=16, stop_sequences=["STOP"],
                            messages=[{"role": "user", "content": "SAY:alpha STOP beta"}])
    assert (msg.content[0].text, msg.stop_reason, msg.stop_sequence) == (
        "alpha ", "stop_sequence", "STOP")


def test_serve_counts_tokens_with_the_chat_template_and_refuses_in_anthropics_shape(served):
    srv, c = served
    counted = c.messages.count_tokens(model=srv.model_name, system="Be brief.", tools=TOOLS,
                                      messages=[{"role": "user", "content": "how long?"}])
    chat_tools = [{"type": "function", "function": {
        "name": "bash", "description": TOOLS[0]["description"],
        "parameters": TOOLS[0]["input_schema"]}}]
    assert counted.input_tokens == len(srv.policy.prompt_ids(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "how long?"}],
        chat_tools))
    with pytest.raises(anthropic.NotFoundError) as e:
        c.messages.create(model="claude-opus", max_tokens=4,
                          messages=[{"role": "user", "content": "x"}])
    assert e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "not_found_error"
    assert "tiny-chat" in e.value.body["error"]["message"]
    refused = r"output_config\.format.*not supported by tackroom serve"  # named as sent
    with pytest.raises(anthropic.BadRequestError, match=refused):
        c.messages.create(model=srv.model_name, max_tokens=4, messages=[
            {"role": "user", "content": "x"}], output_config={"format": {
                "type": "json_schema", "schema": {"type": "object"}}})
    with pytest.raises(anthropic.BadRequestError, match="tool_choice"):  # cannot be honoured
        c.messages.create(model=srv.model_name, max_tokens=4, tools=TOOLS,
                          tool_choice={"type": "any"}, messages=[{"role": "user", "content": "x"}])
    wrong = anthropic.Anthropic(base_url=srv.base_url.removesuffix("/v1"), api_key="nope",
                                max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        wrong.messages.create(model=srv.model_name, max_tokens=4,
                              messages=[{"role": "user", "content": "x"}])
    assert e.value.body["error"]["type"] == "authentication_error"
    wrong.close()


# -------------------------------------------------------- round-trip property
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
_name = st.from_regex(r"[a-z][a-z_]{0,11}", fullmatch=True)
_args = st.dictionaries(_name, st.one_of(st.integers(-9, 99), _text, st.booleans()),
                        max_size=3)


@st.composite
def conversations(draw):
    """A valid Messages request: user/assistant turns, tool uses answered by results."""
    messages = [{"role": "user", "content": draw(st.one_of(_text, st.lists(
        st.builds(lambda t: {"type": "text", "text": t}, _text), min_size=1, max_size=3)))}]
    n = 0
    for _ in range(draw(st.integers(0, 3))):
        uses = [{"type": "tool_use", "id": f"toolu_{(n := n + 1)}", "name": draw(_name),
                 "input": draw(_args)} for _ in range(draw(st.integers(0, 2)))]
        words = draw(_text)
        content = ([{"type": "text", "text": words}] if words or not uses else []) + uses
        messages.append({"role": "assistant", "content": content})
        results = [{"type": "tool_result", "tool_use_id": u["id"], "content": draw(_text),
                    "is_error": draw(st.booleans())} for u in uses]
        messages.append({"role": "user", "content": results + [
            {"type": "text", "text": draw(_text)}]})
    system = draw(st.one_of(st.none(), _text))
    body = {"model": "m", "max_tokens": draw(st.integers(1, 4096)), "messages": messages}
    if system is not None:
        body["system"] = system
    return body


@settings(max_examples=150, deadline=None)
@given(conversations())
def test_requests_translate_to_chat_faithfully(body):
    found = find("POST", "/v1/messages")
    assert found is not None and found[0].name == "anthropic"
    chat = to_chat(body, found[2])
    call = parse_chat(chat)  # the gateway's reading accepts every translated request
    texts = [m["content"] for m in call.messages if m["role"] in ("user", "system")]
    uses = [b for m in body["messages"] if isinstance(m["content"], list)
            for b in m["content"] if b["type"] == "tool_use"]
    sent_calls = [tc for m in chat["messages"] for tc in m.get("tool_calls", [])]
    assert [(tc["id"], tc["function"]["name"], json.loads(tc["function"]["arguments"]))
            for tc in sent_calls] == [(u["id"], u["name"], u["input"]) for u in uses]
    results = [b for m in body["messages"] if isinstance(m["content"], list)
               for b in m["content"] if b["type"] == "tool_result"]
    tools = [m for m in chat["messages"] if m["role"] == "tool"]
    assert [(t["tool_call_id"], t["content"], t.get("is_error", False)) for t in tools] == [
        (r["tool_use_id"], r["content"], r["is_error"]) for r in results]
    if "system" in body:
        assert chat["messages"][0] == {"role": "system", "content": body["system"]}
    assert all(isinstance(t, str) for t in texts) and chat["max_tokens"] == body["max_tokens"]


@settings(max_examples=150, deadline=None)
@given(content=_text, pairs=st.lists(st.tuples(_name, _args), max_size=3),
       finish=st.sampled_from(["stop", "length"]), pieces=st.booleans())
def test_replies_stream_to_the_whole_reply_and_come_back_as_the_same_calls(
        content, pairs, finish, pieces):
    tcs = [ToolCall(f"call_{i}", name, json.dumps(args)) for i, (name, args) in enumerate(pairs)]
    c = Completion(content=content, tool_calls=tcs,
                   finish_reason="tool_calls" if tcs and finish == "stop" else finish,
                   prompt_tokens=4, completion_tokens=6,
                   pieces=list(content) + [""] if pieces else None)
    whole = reply(c, Shape("m"), {})
    # Streamed: the blocks assembled as the SDK does equal the whole reply's.
    blocks: list[dict] = []
    stop = None
    for name, data in events(c, Shape("m"), {}):
        assert name == data["type"]
        if name == "content_block_start":
            blocks.append(dict(data["content_block"], _json=""))
        elif name == "content_block_delta" and data["delta"]["type"] == "text_delta":
            blocks[data["index"]]["text"] += data["delta"]["text"]
        elif name == "content_block_delta":
            blocks[data["index"]]["_json"] += data["delta"]["partial_json"]
        elif name == "message_delta":
            stop = data["delta"]["stop_reason"]
    for b in blocks:
        raw = b.pop("_json")
        if b["type"] == "tool_use":
            b["input"] = json.loads(raw) if raw else {}
    assert blocks == whole["content"] and stop == whole["stop_reason"]
    assert whole["stop_reason"] == {"stop": "end_turn", "tool_calls": "tool_use",
                                    "length": "max_tokens"}[c.finish_reason]
    # The reply sent back as the next request's assistant turn: the same calls, in chat.
    body = {"model": "m", "max_tokens": 5, "messages": [
        {"role": "user", "content": "x"}, {"role": "assistant", "content": whole["content"]}]}
    back = to_chat(body)["messages"][1]
    assert [(tc["function"]["name"], json.loads(tc["function"]["arguments"]))
            for tc in back.get("tool_calls", [])] == [(n, a) for n, a in pairs]
    assert (back["content"] or "") == content
