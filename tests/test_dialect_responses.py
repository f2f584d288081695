"""The OpenAI Responses dialect (``POST /v1/responses``): Codex's requests, the official SDK, round trips.

Three layers: the translation itself on Codex 0.171's captured requests
(tests/fixtures/dialects/codex/); a hypothesis round trip (Responses request ->
chat body -> Completion -> Responses reply -> the client's next request) whose
replies the ``openai`` SDK's own models validate; and the SDK's
``client.responses.create`` as a real client, streamed and not, against the
gateway (scripted policy) and ``tackroom serve`` (the tiny local model).
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from itertools import pairwise
from pathlib import Path
from typing import Any

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tackroom.core.policy import Sampling, ToolCall
from tackroom.gateway import ModelGateway
from tackroom.policies.openai_policy import OpenAIPolicy
from tackroom.testing import Reply, ScriptedOpenAIServer, text
from tackroom.wire import ApiError, Completion, Shape, parse_chat, parse_chat_request
from tackroom.wire.dialect import find, sse
from tackroom.wire.responses import RESPONSES, to_chat

try:  # the same client the gateway tests use
    import httpx2 as httpx
except ImportError:
    import httpx  # type: ignore[no-redef]

CODEX = Path(__file__).parent / "fixtures" / "dialects" / "codex"
WAIT = 30.0  # seconds: a bound for "eventually", never a timing assertion
EVENTS = TypeAdapter(ResponseStreamEvent)
EXEC = {"type": "function", "name": "exec_command", "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}},
                       "required": ["cmd"]}}
PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files.",
         "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}


def codex(name: str) -> dict[str, Any]:
    return json.loads((CODEX / f"codex-0.171.0-{name}.json").read_text())


def refused(body: Any) -> dict[str, Any]:
    """The error object the dialect answers ``body`` with (it must be refused)."""
    with pytest.raises(ApiError) as e:
        to_chat(body)
    assert e.value.status == 400
    return RESPONSES.error(e.value)["error"]


def completion(content: str | None, calls: list[tuple[str, str]] = (), **kw: Any) -> Completion:
    tcs = [ToolCall(f"call_{i}", name, args) for i, (name, args) in enumerate(calls)]
    kw.setdefault("finish_reason", "tool_calls" if tcs else "stop")
    return Completion(content=content, tool_calls=tcs, prompt_tokens=7,
                      completion_tokens=3, **kw)


def streamed(events: list[tuple[str | None, Any]]) -> list[dict[str, Any]]:
    """The output items a client assembles from the events (deltas joined), checked on the way."""
    assert [data["sequence_number"] for _n, data in events] == list(range(len(events)))
    for name, data in events:
        assert name == data["type"]
        EVENTS.validate_python(data)  # the SDK's own model of each event
    items: dict[int, dict[str, Any]] = {}
    for _n, data in events:
        kind = data["type"]
        if kind == "response.output_item.added":
            items[data["output_index"]] = {"item": data["item"], "text": "", "args": "",
                                           "lps": []}
        elif kind == "response.output_text.delta":
            items[data["output_index"]]["text"] += data["delta"]
            items[data["output_index"]]["lps"] += data["logprobs"]
        elif kind in ("response.function_call_arguments.delta",
                      "response.custom_tool_call_input.delta"):
            items[data["output_index"]]["args"] += data["delta"]
        elif kind == "response.output_item.done":
            done, got = data["item"], items[data["output_index"]]
            assert done["id"] == got["item"]["id"]
            if done["type"] == "message":
                assert done["content"][0]["text"] == got["text"]
                assert done["content"][0].get("logprobs", []) == got["lps"]
            elif done["type"] == "function_call":
                assert done["arguments"] == got["args"]
            else:
                assert done["input"] == got["args"]
    last = events[-1][1]
    assert last["type"] in ("response.completed", "response.incomplete")
    assert events[0][1]["response"]["id"] == last["response"]["id"]
    return last["response"]["output"]


def without_ids(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in it.items() if k != "id"} for it in items]


# ------------------------------------------------------- Codex's requests
def test_codex_requests_translate_and_both_servers_read_them():
    first, second = codex("first-turn"), codex("tool-result")
    assert find("POST", "/v1/responses")[0] is RESPONSES
    assert find("POST", "/responses")[0] is RESPONSES
    chat = to_chat(first)
    # Codex's system prompt is two developer items: system messages, in order.
    assert [m["role"] for m in chat["messages"]] == ["system", "system", "user", "user"]
    assert chat["messages"][-1]["content"] == first["input"][-1]["content"][0]["text"]
    names = [t["function"]["name"] for t in chat["tools"]]
    assert names[:4] == ["exec_command", "write_stdin", "request_user_input", "view_image"]
    # The namespace's sub-agent tools are offered under their own names.
    namespace = next(t for t in first["tools"] if t["type"] == "namespace")
    assert {t["name"] for t in namespace["tools"]} <= set(names)
    assert chat["stream"] is True and chat["model"] == first["model"]
    assert chat["reasoning"] == first["reasoning"] and chat["store"] is False
    assert "input" not in chat and "dropped_tools" not in chat

    call = parse_chat(to_chat(second))  # the gateway's reading
    assistant, tool = call.messages[-2:]
    fc, out = second["input"][-2:]
    assert assistant["tool_calls"] == [{"id": fc["call_id"], "type": "function", "function": {
        "name": "exec_command", "arguments": fc["arguments"]}}]
    assert tool == {"role": "tool", "tool_call_id": fc["call_id"], "content": out["output"]}
    served = parse_chat_request(to_chat(second), {second["model"]: None})  # serve's
    assert served.messages[-1]["tool_call_id"] == fc["call_id"] and served.stream

    # With web search left on Codex adds a hosted tool: dropped, and said so.
    first["tools"].append({"type": "web_search", "external_web_access": True})
    chat = to_chat(first)
    assert chat["dropped_tools"] == [{"tool": f"tools[{len(first['tools']) - 1}]",
                                      "type": "web_search", "why": chat["dropped_tools"][0]["why"]}]
    assert "web_search" not in [t["function"]["name"] for t in chat["tools"]]


def test_a_namespaced_call_goes_back_with_its_namespace():
    body = {"model": "m", "input": "spawn one", "tools": [EXEC, {
        "type": "namespace", "name": "agents", "description": "Sub-agents.",
        "tools": [{"type": "function", "name": "spawn", "parameters": {"type": "object"}},
                  {"type": "function", "name": "exec_command", "parameters": {}}]}]}
    names = [t["function"]["name"] for t in to_chat(body)["tools"]]
    assert names == ["exec_command", "spawn", "agents__exec_command"]  # a clash is qualified
    out = RESPONSES.reply(completion(None, [("spawn", "{}"), ("agents__exec_command", "{}")]),
                          Shape("m"), body)["output"]
    assert [(o["name"], o.get("namespace")) for o in out] == [("spawn", "agents"),
                                                              ("exec_command", "agents")]
    history = {**body, "input": ["spawn one", *out]}
    calls = to_chat(history)["messages"][-1]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["spawn", "agents__exec_command"]


def test_custom_tools_are_one_string_argument_and_come_back_as_custom_calls():
    body = {"model": "m", "input": "fix it", "tools": [PATCH]}
    fn = to_chat(body)["tools"][0]["function"]
    assert fn["name"] == "apply_patch" and fn["parameters"]["required"] == ["input"]
    assert "start: /.+/" in fn["parameters"]["properties"]["input"]["description"]
    patch = "*** Begin Patch\n*** End Patch\n"
    reply = RESPONSES.reply(completion(None, [("apply_patch", json.dumps({"input": patch}))]),
                            Shape("m"), body)
    Response.model_validate(reply)
    (item,) = reply["output"]
    assert item["type"] == "custom_tool_call" and item["input"] == patch
    history = {**body, "input": ["fix it", item, {"type": "custom_tool_call_output",
                                                  "call_id": item["call_id"], "output": "ok"}]}
    assistant, tool = to_chat(history)["messages"][-2:]
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"input": patch}
    assert tool == {"role": "tool", "tool_call_id": item["call_id"], "content": "ok"}
    # A call the model wrote wrong is passed on as it was written (the model's error, as data).
    bad = RESPONSES.reply(completion(None, [("apply_patch", "not json")]), Shape("m"), body)
    assert bad["output"][0]["input"] == "not json"


def test_reasoning_items_are_carried_with_their_turn_but_not_shown():
    reasoning = {"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAA...",
                 "summary": [{"type": "summary_text", "text": "think"}]}
    body = {"model": "m", "instructions": "Be brief.", "input": [
        {"role": "user", "content": "hi"}, reasoning,
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "calling", "annotations": []}]},
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1",
         "output": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
        {"role": "developer", "content": "Now finish."}]}
    chat = to_chat(body)
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant", "tool",
                                                     "system"]
    turn = chat["messages"][2]
    assert turn["reasoning_items"] == [reasoning] and turn["content"] == "calling"
    assert [c["id"] for c in turn["tool_calls"]] == ["c1"]
    assert chat["messages"][3]["content"] == "a\nb"
    # The policy's messages (the gateway's reading) carry no trace of the reasoning.
    assert "think" not in json.dumps(parse_chat(chat).messages)


def test_bad_requests_are_one_clear_line_naming_the_field():
    cases = [
        ({"input": "hi", "previous_response_id": "resp_1"}, "previous_response_id",
         "send the whole conversation"),
        ({"input": "hi", "conversation": "conv_1"}, "conversation", "keeps no responses"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]", "item_reference"),
        ({"input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": "data:"}]}]}, "input[0].content[0]",
         "input_image"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0]", "roles are"),
        ({"input": [{"type": "web_search_call", "id": "ws"}]}, "input[0]", "web_search_call"),
        ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0]",
         "call_id"),
        ({"input": []}, "input", "non-empty"),
        ({"input": 5}, "input", "string or a list"),
        ({"input": "hi", "tools": [{"type": "function"}]}, "tools[0]", "'name'"),
        ({"input": "hi", "background": True}, "background", "without it"),
    ]
    for body, param, says in cases:
        err = refused(body)
        assert err["param"] == param and says in err["message"], (body, err)
        assert err["type"] == "invalid_request_error" and "\n" not in err["message"]
    # A chat key named downstream (tackroom serve's strict reading) is named as the client sent it.
    chat = to_chat({"model": "m", "input": "hi", "max_output_tokens": 0})
    with pytest.raises(ApiError) as e:
        parse_chat_request(chat, {"m": None})
    err = RESPONSES.error(e.value)["error"]
    assert err["param"] == "max_output_tokens" and "'max_output_tokens'" in err["message"]


def test_sampling_keys_and_output_options_are_read_deliberately():
    chat = to_chat({"model": "m", "input": "hi", "max_output_tokens": 9, "temperature": 0.5,
                    "top_p": 0.9, "top_logprobs": 0, "include": ["message.output_text.logprobs"],
                    "text": {"format": {"type": "json_schema", "name": "x",
                                        "schema": {"type": "object"}}},
                    "tool_choice": {"type": "function", "name": "exec_command"},
                    "tools": [EXEC], "parallel_tool_calls": False, "store": True,
                    "stream_options": {"include_obfuscation": False}})
    req = parse_chat(chat)
    assert req.logprobs and req.requested["parallel_tool_calls"] is False
    assert chat["max_completion_tokens"] == 9 and "max_output_tokens" not in chat
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "exec_command"}}
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object"}}}
    assert "stream_options" not in chat
    with pytest.raises(ApiError) as e:  # serve cannot honour a schema: refused, named
        parse_chat_request(chat, {"m": None})
    assert RESPONSES.error(e.value)["error"]["param"] == "text.format"


def test_a_reply_cut_off_is_incomplete_and_token_ids_come_when_asked():
    c = completion("partial", finish_reason="length", token_ids=[5, 6, 7],
                   logprobs=[-0.5, -0.25, -1.0], prompt_token_ids=[1, 2],
                   logprob_entries=[{"token": f"token_id:{t}", "logprob": lp, "bytes": None,
                                     "top_logprobs": []}
                                    for t, lp in [(5, -0.5), (6, -0.25), (7, -1.0)]])
    body = {"model": "m", "input": "hi", "max_output_tokens": 3}
    reply = RESPONSES.reply(c, Shape("m", token_ids=True), body)
    Response.model_validate(reply)
    assert reply["status"] == "incomplete"
    assert reply["incomplete_details"] == {"reason": "max_output_tokens"}
    assert reply["token_ids"] == [5, 6, 7] and reply["prompt_token_ids"] == [1, 2]
    assert reply["logprobs"] == [-0.5, -0.25, -1.0]
    part = reply["output"][0]["content"][0]
    assert [e["logprob"] for e in part["logprobs"]] == [-0.5, -0.25, -1.0]
    assert reply["usage"] == {"input_tokens": 7, "input_tokens_details": {
                                  "cached_tokens": 0, "cache_write_tokens": 0},
                              "output_tokens": 3, "output_tokens_details": {
                                  "reasoning_tokens": 0}, "total_tokens": 10}
    events = list(RESPONSES.events(c, Shape("m", token_ids=True), body))
    assert events[-1][0] == "response.incomplete"
    assert without_ids(streamed(events)) == without_ids(reply["output"])
    plain = RESPONSES.reply(c, Shape("m"), body)
    assert "token_ids" not in plain and "prompt_token_ids" not in plain
    # SSE: an `event:` line naming each event, then its data.
    raw = sse(events).decode()
    assert raw.startswith("event: response.created\ndata: {") and "[DONE]" not in raw


# ----------------------------------------------------- the round trip
NAMES = st.sampled_from(["exec_command", "read_file", "apply_patch", "spawn"])
TEXT = st.text(max_size=40)


@st.composite
def requests(draw: st.DrawFn) -> tuple[dict[str, Any], Completion]:
    """A Responses request with history and tools, and the policy's next answer to it."""
    names = draw(st.lists(NAMES, min_size=0, max_size=4, unique=True))
    tools = [{"type": "custom", "name": n} if n == "apply_patch" else
             {"type": "function", "name": n, "parameters": {"type": "object"}} for n in names]
    items: list[Any] = [{"role": "user", "content": draw(TEXT)}]
    for k in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            items.append({"type": "reasoning", "id": f"rs_{k}", "summary": []})
        said = draw(st.one_of(st.none(), TEXT.filter(bool)))
        if said is not None:
            items.append({"type": "message", "role": "assistant",
                          "content": [{"type": "output_text", "text": said}]})
        for j in range(draw(st.integers(0 if said is not None else 1, 2))):
            items.append({"type": "function_call", "call_id": f"c{k}_{j}", "name": "exec_command",
                          "arguments": json.dumps({"cmd": draw(TEXT)})})
            items.append({"type": "function_call_output", "call_id": f"c{k}_{j}",
                          "output": draw(TEXT)})
        items.append({"role": draw(st.sampled_from(["user", "developer"])), "content": [
            {"type": "input_text", "text": draw(TEXT)}]})
    body: dict[str, Any] = {"model": "m", "input": items, "tools": tools}
    if draw(st.booleans()):
        body["instructions"] = draw(TEXT)
    calls = []
    for name in draw(st.lists(st.sampled_from(names), max_size=3)) if names else []:
        arg = draw(TEXT)
        calls.append((name, json.dumps({"input": arg} if name == "apply_patch" else {"q": arg},
                                       ensure_ascii=False)))
    content = draw(st.one_of(st.none(), TEXT)) if calls else draw(TEXT)
    pieces = None
    if content and draw(st.booleans()):  # served token by token: the pieces are the text
        cut = sorted(draw(st.lists(st.integers(0, len(content)), max_size=4)))
        bounds = [0, *cut, len(content)]
        pieces = [content[a:b] for a, b in pairwise(bounds)] + [""]
    c = completion(content, calls, finish_reason=draw(st.sampled_from(["stop", "length"])),
                   pieces=pieces, token_ids=list(range(len(pieces))) if pieces else None,
                   logprob_entries=[{"token": f"token_id:{i}", "logprob": -0.5, "bytes": None,
                                     "top_logprobs": []} for i in range(len(pieces))]
                   if pieces else None)
    return body, c


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def test_round_trip_request_chat_reply_and_the_next_request(case):
    body, c = case
    chat = to_chat(body)
    call = parse_chat(chat)
    roles = [m["role"] for m in call.messages]
    users = [it for it in body["input"] if it.get("role") in ("user", "developer")]
    assert roles.count("user") + roles.count("system") == len(users) + ("instructions" in body)
    assert roles.count("tool") == sum(it.get("type") == "function_call_output"
                                      for it in body["input"])
    assert sorted(t["function"]["name"] for t in call.tools or []) == \
        sorted(t["name"] for t in body["tools"])

    reply = RESPONSES.reply(c, Shape("m"), body)
    Response.model_validate(reply)
    assert reply["status"] == ("incomplete" if c.finish_reason == "length" else "completed")
    assert without_ids(streamed(list(RESPONSES.events(c, Shape("m"), body)))) == \
        without_ids(reply["output"])

    # The client sends the reply's items back, with each call's output: the policy then
    # sees exactly the answer it gave.
    outputs = [{"type": f"{it['type']}_output", "call_id": it["call_id"], "output": "ok"}
               for it in reply["output"] if it["type"] != "message"]
    after = parse_chat(to_chat({**body, "input": [*body["input"], *reply["output"],
                                                  *outputs]})).messages
    n = len(call.messages)
    assistant = after[n]
    assert (assistant["content"] or None) == (c.content or None)
    assert [(tc["id"], tc["function"]["name"], tc["function"]["arguments"])
            for tc in assistant.get("tool_calls", [])] == \
        [(tc.id, tc.name, tc.arguments) for tc in c.tool_calls]
    assert [m["role"] for m in after[n + 1:]] == ["tool"] * len(c.tool_calls)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8)
    | st.sampled_from(["message", "function_call", "function_call_output", "reasoning",
                       "custom_tool_call", "namespace", "function", "custom", "user",
                       "assistant", "input_text", "input_image"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["type", "role", "content", "text", "name", "call_id", "arguments",
                         "output", "input", "tools", "parameters", "format", "namespace"]),
        inner, max_size=4),
    max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(st.fixed_dictionaries({}, optional={"input": JSON, "tools": JSON, "instructions": JSON,
                                           "tool_choice": JSON, "text": JSON, "include": JSON}))
def test_any_request_is_translated_or_refused_with_a_400(body):
    try:
        chat = to_chat(body)
    except ApiError as e:  # a client's mistake: one line naming it, never another exception
        assert e.status == 400 and "\n" not in e.message
        return
    try:
        parse_chat(chat)
    except ApiError as e:  # what the dialect passes on, the chat reading may still refuse
        assert e.status == 400
        return
    reply = RESPONSES.reply(completion("ok"), Shape("m"), body)
    assert reply["output"][0]["content"][0]["text"] == "ok"


# ------------------------------------------------- the SDK, against the gateway
@asynccontextmanager
async def scripted_gateway(script):
    with ScriptedOpenAIServer(script) as srv:
        policy = OpenAIPolicy("scripted", base_url=srv.base_url, max_retries=0, timeout=WAIT)
        try:
            async with ModelGateway(policy) as gw:
                yield gw, srv
        finally:
            await policy.aclose()


async def assemble(stream) -> tuple[Any, str, dict[str, str]]:
    """A streamed reply as a client reads it: the final response, text deltas, call arguments."""
    said, args, final = "", {}, None
    async for ev in stream:
        if ev.type == "response.output_text.delta":
            said += ev.delta
        elif ev.type == "response.function_call_arguments.delta":
            args[ev.item_id] = args.get(ev.item_id, "") + ev.delta
        elif ev.type in ("response.completed", "response.incomplete"):
            final = ev.response
    return final, said, args


async def test_sdk_responses_against_the_gateway_text_calls_results_and_errors():
    look = Reply(text="I will look.", tool_calls=[("exec_command", '{"cmd": "ls"}')])
    async with scripted_gateway([look, look, text("Two files."), text("done")]) as (gw, srv):
        route = gw.open_episode(Sampling(temperature=0.0, max_tokens=64), label="codex")
        async with openai.AsyncOpenAI(base_url=route.base_url, api_key=route.token,
                                      max_retries=0, timeout=WAIT) as c:
            whole = await c.responses.create(model="tackroom", instructions="Be brief.",
                                             input="list files", tools=[EXEC])
            final, said, args = await assemble(await c.responses.create(
                model="tackroom", instructions="Be brief.", input="list files", tools=[EXEC],
                stream=True))
            # Multi-turn: the reply's items and the call's output go back as input.
            fc = whole.output[1]
            history = [{"role": "user", "content": "list files"},
                       *[o.model_dump(exclude_none=True) for o in whole.output],
                       {"type": "function_call_output", "call_id": fc.call_id,
                        "output": "a.py\nb.py"}]
            second = await c.responses.create(model="tackroom", input=history, tools=[EXEC])
            done = await c.responses.create(model="tackroom", input="bye", store=True)
            counted = await c.responses.input_tokens.count(model="tackroom", input=history,
                                                           tools=[EXEC])
            with pytest.raises(openai.BadRequestError) as e:
                await c.responses.create(model="tackroom", input="again",
                                         previous_response_id=done.id)
    assert whole.output_text == said == "I will look."
    assert (fc.type, fc.name, fc.arguments) == ("function_call", "exec_command", '{"cmd": "ls"}')
    assert [o.type for o in final.output] == ["message", "function_call"]
    assert list(args.values()) == [final.output[1].arguments] == [fc.arguments]
    assert whole.status == final.status == "completed" and whole.usage.total_tokens > 0
    assert second.output_text == "Two files." and done.output_text == "done"
    assert e.value.body["param"] == "previous_response_id"
    # Counting tokens is a side call: answered, kept apart, no turn and no model call.
    assert counted.object == "response.input_tokens" and counted.input_tokens > 0
    assert [(s["kind"], s["dialect"]) for s in route.side_calls] == [("count_tokens",
                                                                       "responses")]

    # Recorded as turns: the chat messages the policy saw; the tool result in its place.
    assert len(route.turns) == 4 and route.errors == []
    assert route.turns[0].messages == [{"role": "system", "content": "Be brief."},
                                       {"role": "user", "content": "list files"}]
    assert route.turns[0].tool_calls == [ToolCall(fc.call_id, "exec_command",
                                                  fc.arguments).to_dict()]
    assert route.turns[2].messages[-1] == {"role": "tool", "tool_call_id": fc.call_id,
                                           "content": "a.py\nb.py"}
    sent = srv.requests[2]["messages"]
    assert sent[-2]["tool_calls"][0]["id"] == fc.call_id and sent[-1]["role"] == "tool"


async def test_codex_first_turn_through_the_gateway_is_answered_as_codex_reads_it():
    first = codex("first-turn")
    async with scripted_gateway([Reply(tool_calls=[("exec_command", '{"cmd": "ls"}')])]) \
            as (gw, _srv):
        route = gw.open_episode(Sampling(temperature=0.0, max_tokens=64))
        async with httpx.AsyncClient(timeout=WAIT) as http:  # the body exactly as Codex sent it
            raw = await http.post(route.base_url + "/responses", json=first, headers={
                "Authorization": f"Bearer {route.token}", "Accept": "text/event-stream"})
    assert raw.status_code == 200 and raw.headers["content-type"].startswith("text/event-stream")
    body = raw.text
    events = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]
    names = [line[7:] for line in body.splitlines() if line.startswith("event: ")]
    assert names == [e["type"] for e in events]
    assert names[0] == "response.created" and names[-1] == "response.completed"
    assert "response.output_item.done" in names
    (item,) = events[-1]["response"]["output"]
    assert item["type"] == "function_call" and item["name"] == "exec_command"
    assert len(route.turns[0].messages) == 4


# ------------------------------------------------- the SDK, against tackroom serve
@pytest.mark.slow
def test_sdk_responses_against_tackroom_serve_with_the_tiny_model(tiny_chat_dir):
    pytest.importorskip("torch")
    from tackroom.policies.hf_policy import HFPolicy
    from tackroom.serve import ServerThread

    with ServerThread(policy=HFPolicy(tiny_chat_dir, threads=1)) as s, \
            openai.OpenAI(base_url=s.base_url, api_key="EMPTY", max_retries=0, timeout=120) as c:
        kw = {"model": s.model_name, "instructions": "Be brief.", "input": "Say hi.",
              "temperature": 0, "max_output_tokens": 8,
              "include": ["message.output_text.logprobs"],
              "extra_body": {"return_token_ids": True}}
        whole = c.responses.create(**kw)
        said, final = "", None
        for ev in c.responses.create(stream=True, **kw):
            said += ev.delta if ev.type == "response.output_text.delta" else ""
            final = ev.response if ev.type in ("response.completed",
                                               "response.incomplete") else final
        history = [{"role": "user", "content": "Say hi."},
                   *[o.model_dump(exclude_none=True) for o in whole.output],
                   {"role": "user", "content": "Again."}]
        again = c.responses.create(model=s.model_name, input=history, max_output_tokens=4)
        counted = c.responses.input_tokens.count(model=s.model_name, input="Say hi.",
                                                 instructions="Be brief.")
        # Codex's own request (its 40 kB prompt, tools and a tool result), pointed at serve.
        sent = {**codex("tool-result"), "model": s.model_name, "max_output_tokens": 4}
        raw = httpx.post(s.base_url + "/responses", json=sent, timeout=120)
        with pytest.raises(openai.BadRequestError) as e:
            c.responses.create(model=s.model_name, input="hi",
                               text={"format": {"type": "json_object"}})
    ids = whole.model_extra["token_ids"]
    assert 0 < len(ids) <= 8 and whole.usage.output_tokens == len(ids)
    lps = [lp.logprob for lp in whole.output[0].content[0].logprobs]
    assert lps == whole.model_extra["logprobs"] and len(lps) == len(ids)
    assert whole.model_extra["prompt_token_ids"] and whole.usage.input_tokens == len(
        whole.model_extra["prompt_token_ids"])
    # Greedy: streamed or not, the same reply, token by token.
    assert said == whole.output_text and final.model_extra["token_ids"] == ids
    assert whole.status in ("completed", "incomplete") and again.usage.output_tokens <= 4
    assert e.value.body["param"] == "text.format"
    assert counted.input_tokens == whole.usage.input_tokens  # the served prompt, exactly
    assert raw.status_code == 200
    events = [json.loads(line[6:]) for line in raw.text.splitlines() if line.startswith("data: ")]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    done = events[-1]["response"]
    assert events[-1]["type"] == f"response.{done['status']}"
    assert done["usage"]["input_tokens"] > 1000 and 0 < done["usage"]["output_tokens"] <= 4

