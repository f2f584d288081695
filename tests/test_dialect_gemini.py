"""The Gemini API dialect: Gemini CLI's real requests, the official ``google-genai`` SDK as
the client (streamed and not) against the recording gateway and ``tackroom serve``, and
round trips (Gemini request -> chat body -> Gemini request; reply -> next request).

Backends are real: the gateway over :class:`OpenAIPolicy` against a
:class:`ScriptedOpenAIServer`, and ``tackroom serve`` on the tiny random chat model.
"""

from __future__ import annotations

import asyncio
import json
import re
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from conftest import http_request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tackroom.core.policy import PolicyRequest, PolicyResponse, Sampling, ToolCall
from tackroom.gateway import ModelGateway
from tackroom.policies.openai_policy import OpenAIPolicy
from tackroom.testing import Reply, ScriptedOpenAIServer, text
from tackroom.wire.chat import parse_chat, parse_chat_request
from tackroom.wire.dialect import find, sse
from tackroom.wire.errors import ApiError
from tackroom.wire.gemini import error, events, json_schema, reply, to_chat
from tackroom.wire.replies import Completion, Shape

genai = pytest.importorskip("google.genai")
from google.genai import errors as genai_errors  # noqa: E402
from google.genai import types  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "dialects" / "gemini-cli"
RUN = Sampling(temperature=0.2, top_p=0.9, max_tokens=32, seed=7)
WAIT = 30.0  # seconds: a bound for "eventually", never a timing assertion
STREAM = "/v1beta/models/tackroom:streamGenerateContent"
SSE = STREAM + "?alt=sse"  # what google-genai and Gemini CLI send
BASH = types.FunctionDeclaration(
    name="bash", description="Run a shell command.",
    parameters=types.Schema(type="OBJECT", properties={"cmd": types.Schema(type="STRING")},
                            required=["cmd"]))
CONFIG = types.GenerateContentConfig(
    system_instruction="You are a coding agent.",
    tools=[types.Tool(function_declarations=[BASH])],
    automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))


def match(path: str = SSE):
    found = find("POST", path)
    assert found is not None and found[0].name == "gemini"
    return found[2]


def gemini_cli(name: str) -> dict:
    return json.loads((FIXTURES / f"gemini-cli-0.61.0-{name}.json").read_text())


def sdk(root_url: str, key: str, version: str = "v1beta") -> genai.Client:
    """The SDK at ``root_url`` (given a base URL it says ``/v1``; Gemini CLI says ``/v1beta``)."""
    return genai.Client(api_key=key, http_options=types.HttpOptions(
        base_url=root_url, api_version=version, timeout=int(WAIT * 1000),
        retry_options=types.HttpRetryOptions(attempts=1)))


def data_lines(raw: bytes) -> list[dict]:
    """A server-sent-events body's ``data:`` payloads (Gemini sends no event names)."""
    text_ = raw.decode()
    assert "event:" not in text_ and "[DONE]" not in text_
    return [json.loads(line[len("data: "):]) for line in text_.splitlines()
            if line.startswith("data: ")]


# ------------------------------------------------------- Gemini CLI's requests
def test_gemini_cli_requests_become_chat_bodies():
    first = to_chat(gemini_cli("first-turn"), match())
    assert first["model"] == "tackroom" and first["stream"] is True
    assert (first["temperature"], first["top_p"], first["top_k"]) == (1, 0.95, 64)
    assert first["gemini_config"] == {"thinkingConfig": {"includeThoughts": True}}
    system, user = first["messages"]
    assert system["role"] == "system" and system["content"].startswith("You are Gemini CLI")
    # Two text parts stay two parts; the chat reader joins them by a newline.
    assert [p["text"][:17] for p in user["content"]] == ["<session_context>", "Write hello into "]
    call = parse_chat(first)
    assert call.messages[1]["content"].endswith("</session_context>\nWrite hello into out.txt")
    # parametersJsonSchema is JSON Schema already: passed on untouched.
    sent = gemini_cli("first-turn")["tools"][0]["functionDeclarations"]
    assert [t["function"]["parameters"] for t in call.tools] == \
        [d["parametersJsonSchema"] for d in sent]
    assert len(call.tools) == 15

    second = to_chat(gemini_cli("tool-result"), match())["messages"]
    assert second[2] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1_0", "type": "function", "function": {
            "name": "run_shell_command", "arguments": '{"command": "echo hello > out.txt"}'}}]}
    assert second[3] == {"role": "tool", "tool_call_id": "call_1_0", "name": "run_shell_command",
                         "content": "<untrusted_context>\nOutput: (empty)\nProcess Group "
                                    "PGID: 12353\n</untrusted_context>"}
    # tackroom serve reads it strictly: Gemini CLI's topK is honoured as top_k; a topK
    # that is no top-k is refused, named as Gemini names it.
    strict = parse_chat_request(to_chat(gemini_cli("tool-result"), match()), {"tackroom": None})
    assert (strict.sampling.top_k, strict.sampling.top_p) == (64, 0.95)
    bad = gemini_cli("tool-result")
    bad["generationConfig"]["topK"] = -2
    with pytest.raises(ApiError) as e:
        parse_chat_request(to_chat(bad, match()), {"tackroom": None})
    assert error(e.value)["error"]["message"].startswith("'generationConfig.topK' is -2;")


def test_the_same_conversation_gives_the_same_chat_body():
    """Gemini CLI's call ids differ run to run; the chat body's do not."""
    body = gemini_cli("tool-result")
    other = json.loads(json.dumps(body).replace("run_shell_command_1796329936054_0", "xyz_9"))
    assert to_chat(body, match()) == to_chat(other, match())


def test_gemini_schemas_become_json_schema():
    schema = {"type": "OBJECT", "propertyOrdering": ["path", "tags"], "properties": {
        "path": {"type": "STRING", "nullable": True, "description": "where"},
        "tags": {"type": "ARRAY", "items": {"type": "STRING", "enum": ["a", "b"]},
                 "maxItems": "3", "min_items": "1"},
        "mode": {"anyOf": [{"type": "INTEGER"}, {"type": "BOOLEAN"}], "nullable": True}},
        "required": ["path"]}
    assert json_schema(schema) == {"type": "object", "properties": {
        "path": {"type": ["string", "null"], "description": "where"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]},
                 "maxItems": 3, "minItems": 1},
        "mode": {"anyOf": [{"type": "integer"}, {"type": "boolean"}, {"type": "null"}]}},
        "required": ["path"]}
    already = {"type": "object", "properties": {"n": {"type": ["integer", "null"]}}}
    assert json_schema(already) == already


def _body(**kw):
    return {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], **kw}


CALL = {"role": "model", "parts": [{"functionCall": {"name": "bash", "args": {"cmd": "ls"}}}]}


@pytest.mark.parametrize(("body", "path", "words"), [
    ({"contents": []}, SSE, "'contents' must be a non-empty list"),
    (_body(contents=[{"role": "user", "parts": [
        {"text": "what is this?"}, {"inlineData": {"mimeType": "image/png", "data": "AA=="}}]}]),
     SSE, "contents[0].parts[1] is an inlineData part (an image, audio or file)"),
    (_body(contents=[{"role": "assistant", "parts": [{"text": "x"}]}]), SSE,
     "contents[0] has role \"assistant\"; the roles are user and model"),
    (_body(contents=[{"role": "user", "parts": [{"text": "go"}]}, CALL, {"role": "user", "parts": [
        {"functionResponse": {"name": "python", "response": {"output": "1"}}}]}]), SSE,
     "contents[2].parts[0].functionResponse for \"python\" answers no functionCall"),
    (_body(generationConfig={"candidateCount": 2}), SSE,
     "generationConfig.candidateCount is 2; this server returns one candidate"),
    (_body(generationConfig={"temperature": "hot"}), SSE,
     "generationConfig.temperature must be a number"),
    (_body(tools=[{"googleSearch": {}}]), SSE,
     "tools[0].googleSearch is a tool that runs on Google's servers"),
    (_body(generationConfig={"responseModalities": ["IMAGE"]}), SSE,
     "this server answers with text only"),
    (_body(), STREAM, "add ?alt=sse to the URL"),
    (_body(), STREAM + "?key=abc", "add ?alt=sse to the URL"),
    (_body(), STREAM + "?alt=json", "a JSON-array stream is not supported"),
])
def test_unusable_requests_are_400s_naming_what_to_change(body, path, words):
    with pytest.raises(ApiError) as e:
        to_chat(body, match(path))
    out = error(e.value)["error"]
    assert (out["code"], out["status"]) == (400, "INVALID_ARGUMENT")
    assert words in out["message"]


def test_config_tool_choice_and_token_ids_are_passed_on():
    chat = to_chat(_body(
        tools=[{"function_declarations": [{"name": "bash"}]}],
        toolConfig={"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["bash"]}},
        generationConfig={"maxOutputTokens": 64, "stopSequences": ["\n\n"], "seed": 3,
                          "responseLogprobs": True, "logprobs": 2,
                          "responseMimeType": "application/json"},
        return_token_ids=True), match("/v1/models/gemini-2.5-pro:generateContent"))
    assert chat["model"] == "gemini-2.5-pro" and chat["stream"] is False
    assert chat["tools"] == [{"type": "function", "function": {
        "name": "bash", "parameters": {"type": "object", "properties": {}}}}]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "bash"}}
    assert (chat["max_tokens"], chat["stop"], chat["seed"]) == (64, ["\n\n"], 3)
    assert (chat["logprobs"], chat["top_logprobs"], chat["return_token_ids"]) == (True, 2, True)
    assert chat["response_format"] == {"type": "json_object"}
    none = to_chat(_body(toolConfig={"functionCallingConfig": {"mode": "NONE"}}), match())
    assert none["tool_choice"] == "none"
    counted = to_chat({"generateContentRequest": {"model": "models/x", **_body()}},
                      match("/v1beta/models/x:countTokens"))
    assert counted["messages"] == [{"role": "user", "content": "hi"}]


def test_errors_are_googles_shape():
    assert error(ApiError(401, "missing key", code="invalid_api_key")) == {"error": {
        "code": 401, "message": "missing key", "status": "UNAUTHENTICATED", "details": [
            {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "INVALID_API_KEY",
             "domain": "tackroom"}]}}
    assert error(ApiError(404, "no such model"))["error"]["status"] == "NOT_FOUND"
    assert error(ApiError(503, "later"))["error"]["status"] == "UNAVAILABLE"


# ------------------------------------------------------------------ round trips
NAMES = st.sampled_from(["bash", "read_file", "write_file"])
WORDS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
ARGS = st.dictionaries(st.text(min_size=1, max_size=5), st.one_of(
    st.integers(-5, 5), WORDS, st.booleans(), st.none(), st.lists(st.integers(), max_size=2)),
    max_size=3)
LOGPROB = st.floats(-20, 0, allow_nan=False)


@st.composite
def conversations(draw):
    """Gemini contents as a client sends them: user turns, model turns with calls, and the
    calls' responses (with Gemini CLI's ids in any order, or without ids in order)."""
    contents = [{"role": "user", "parts": [{"text": t} for t in draw(
        st.lists(WORDS, min_size=1, max_size=3))]}]
    for n in range(draw(st.integers(0, 3))):
        parts = []
        if draw(st.booleans()):
            parts.append({"text": draw(WORDS.filter(bool)), "thought": True})
        if draw(st.booleans()):
            parts.append({"text": draw(WORDS.filter(bool))})
        calls = [{"name": draw(NAMES), "args": draw(ARGS)} for _ in range(draw(st.integers(
            0 if parts else 1, 3)))]
        with_ids = draw(st.booleans())
        for k, call in enumerate(calls):
            if with_ids:
                call["id"] = f"{call['name']}_{n}_{k}"
            parts.append({"functionCall": call})
        contents.append({"role": "model", "parts": parts})
        if calls:
            answers = [{"functionResponse": {
                "name": c["name"], **({"id": c["id"]} if with_ids else {}),
                "response": draw(st.sampled_from([{"output": draw(WORDS)},
                                                  {"error": draw(WORDS)}]))}} for c in calls]
            if with_ids:
                answers = draw(st.permutations(answers))
            contents.append({"role": "user", "parts": answers})
        else:
            contents.append({"role": "user", "parts": [{"text": draw(WORDS)}]})
    return contents


def back_to_gemini(messages: list[dict]) -> list[dict]:
    """The test's own inverse: chat messages as the Gemini contents they came from (no ids)."""
    out: list[dict] = []
    names: dict[str, str] = {}
    for m in messages:
        if m["role"] == "user":
            content = m["content"]
            parts = [{"text": content}] if isinstance(content, str) else \
                [{"text": p["text"]} for p in content]
            out.append({"role": "user", "parts": parts})
        elif m["role"] == "assistant":
            parts = [{"text": m["reasoning_content"], "thought": True}] \
                if "reasoning_content" in m else []
            if m["content"] is not None:
                parts.append({"text": m["content"]})
            for tc in m.get("tool_calls", []):
                names[tc["id"]] = tc["function"]["name"]
                parts.append({"functionCall": {"name": tc["function"]["name"],
                                               "args": json.loads(tc["function"]["arguments"])}})
            out.append({"role": "model", "parts": parts})
        else:
            assert names[m["tool_call_id"]] == m["name"]
            response = json.loads(m["content"]) if m["content"].startswith('{"error"') \
                else {"output": m["content"]}
            part = {"functionResponse": {"name": m["name"], "response": response}}
            if out[-1]["role"] == "user" and "functionResponse" in out[-1]["parts"][0]:
                out[-1]["parts"].append(part)
            else:
                out.append({"role": "user", "parts": [part]})
    return out


def without_ids(contents: list[dict]) -> list[dict]:
    return json.loads(re.sub(r', "id": "[^"]*"', "", json.dumps(contents)))


@given(conversations())
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_request_goes_to_chat_and_back_unchanged(contents):
    chat = to_chat({"contents": contents}, match())
    assert back_to_gemini(chat["messages"]) == without_ids(contents)
    # Each response is paired with the call it answers (by id when both have one); a
    # call's chat id names its place: call_I_K is call K of contents[I].
    tool_messages = [m for m in chat["messages"] if m["role"] == "tool"]
    answers = [p["functionResponse"] for c in contents for p in c["parts"]
               if "functionResponse" in p]
    for m, answer in zip(tool_messages, answers, strict=True):
        i, k = map(int, m["tool_call_id"].split("_")[1:])
        call = [p["functionCall"] for p in contents[i]["parts"] if "functionCall" in p][k]
        assert call["name"] == answer["name"] and call.get("id") == answer.get("id")


@st.composite
def completions(draw):
    """A finished reply: text by tokens (``pieces``) or whole, calls, log-probs, token ids."""
    calls = [ToolCall(f"call_{k}", draw(NAMES), json.dumps(draw(ARGS)))
             for k in range(draw(st.integers(0, 2)))]
    by_token = draw(st.booleans())
    pieces = draw(st.lists(WORDS, max_size=6)) + [""] if by_token else None
    content = "".join(pieces) if pieces is not None else draw(WORDS)
    n = len(pieces) if pieces is not None else draw(st.integers(0, 5))
    logprobs = [draw(LOGPROB) for _ in range(n)] if draw(st.booleans()) else None
    return Completion(
        content=content or None, tool_calls=calls,
        finish_reason=draw(st.sampled_from(["stop", "length"])) if not calls else "tool_calls",
        prompt_tokens=draw(st.integers(1, 50)), completion_tokens=n, token_ids=list(range(n)),
        logprobs=logprobs, pieces=pieces, prompt_token_ids=[7, 8, 9],
        logprob_entries=None if logprobs is None else [
            {"token": f"token_id:{k}", "logprob": lp, "bytes": None, "top_logprobs": []}
            for k, lp in enumerate(logprobs)])


def merged(chunks: list[dict]) -> dict:
    """A stream as google-genai / Gemini CLI put it together: texts joined, parts in order."""
    parts, chosen, ids, floats = [], [], [], []
    for chunk in chunks:
        cand = chunk["candidates"][0]
        for part in cand["content"]["parts"]:
            if "text" in part and parts and "text" in parts[-1]:
                parts[-1] = {"text": parts[-1]["text"] + part["text"]}
            elif part != {"text": ""}:
                parts.append(part)
        chosen += cand.get("logprobsResult", {}).get("chosenCandidates", [])
        ids += chunk.get("token_ids", [])
        floats += chunk.get("logprobs", [])
    last = chunks[-1]
    return {"parts": parts, "finish": last["candidates"][0]["finishReason"],
            "usage": last["usageMetadata"], "chosen": chosen, "ids": ids,
            "floats": floats, "prompt_ids": chunks[0].get("prompt_token_ids")}


@given(completions(), st.booleans())
@settings(max_examples=80, deadline=None)
def test_a_reply_streams_whole_and_comes_back_as_the_same_assistant_message(c, token_ids):
    shape = Shape("tackroom", token_ids=token_ids)
    whole = reply(c, shape, {})
    chunks = list(events(c, shape, {}))
    assert all(name is None for name, _ in chunks)
    assert all(chunk["candidates"][0]["content"]["parts"] for _, chunk in chunks)
    assert not any("finishReason" in chunk["candidates"][0] for _, chunk in chunks[:-1])
    cand = whole["candidates"][0]
    stream = merged([chunk for _, chunk in chunks])
    parts = [p for p in cand["content"]["parts"] if p != {"text": ""}]
    assert stream["parts"] == parts
    assert stream["finish"] == cand["finishReason"] == \
        {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS"}[c.finish_reason]
    assert stream["usage"] == whole["usageMetadata"]
    assert whole["usageMetadata"]["totalTokenCount"] == c.prompt_tokens + c.completion_tokens
    if c.logprobs is not None:
        assert [x["logProbability"] for x in stream["chosen"]] == c.logprobs == \
            [x["logProbability"] for x in cand["logprobsResult"]["chosenCandidates"]]
    else:
        assert "logprobsResult" not in cand and stream["chosen"] == []
    # tackroom's extra keys, as in every dialect: token ids, their log-probs, the prompt's.
    assert (stream["ids"] == whole.get("token_ids") == c.token_ids) if token_ids else \
        ("token_ids" not in whole and stream["ids"] == [])
    assert stream["floats"] == whole.get("logprobs", []) == \
        (c.logprobs if token_ids and c.logprobs is not None else [])
    assert stream["prompt_ids"] == whole.get("prompt_token_ids") == \
        ([7, 8, 9] if token_ids else None)
    # The reply, sent back as the model's turn, is the assistant message the policy wrote.
    history = {"contents": [{"role": "user", "parts": [{"text": "go"}]}, cand["content"]]}
    assistant = to_chat(history, match())["messages"][1]
    assert assistant["content"] == c.content
    assert [(tc["function"]["name"], json.loads(tc["function"]["arguments"]))
            for tc in assistant.get("tool_calls", [])] == \
        [(tc.name, json.loads(tc.arguments)) for tc in c.tool_calls]
    raw = sse(chunks)
    assert [json.loads(line[6:]) for line in raw.decode().split("\n\n") if line] == \
        [chunk for _, chunk in chunks]


# ------------------------------------------------------------------- the gateway
@asynccontextmanager
async def scripted_gateway(script, **kw):
    """A gateway over ``OpenAIPolicy`` against a scripted server: ``(gateway, server, connect)``.

    ``connect(route, key=None, version="v1beta")`` is the SDK's async client for a route;
    the clients are closed before the gateway (a kept-alive connection would hold it open).
    """
    clients: list[genai.Client] = []

    def connect(route, key: str | None = None, version: str = "v1beta"):
        clients.append(sdk(route.root_url, key or route.token, version))
        return clients[-1].aio

    with ScriptedOpenAIServer(script) as srv:
        policy = OpenAIPolicy("scripted", base_url=srv.base_url, max_retries=0, timeout=WAIT)
        try:
            async with ModelGateway(policy, **kw) as gw:
                try:
                    yield gw, srv, connect
                finally:
                    for client in clients:
                        await client.aio.aclose()
        finally:
            await policy.aclose()


async def streamed(client, **kw) -> tuple[str, list, str, object]:
    """A streamed reply as Gemini CLI reads it: text joined, calls, last finish and usage."""
    texts, calls, finish, usage = [], [], None, None
    async for chunk in await client.models.generate_content_stream(**kw):
        for part in chunk.candidates[0].content.parts:
            texts.append(part.text or "")
            if part.function_call is not None:
                calls.append((part.function_call.name, part.function_call.args))
        finish = chunk.candidates[0].finish_reason or finish
        usage = chunk.usage_metadata or usage
    return "".join(texts), calls, finish, usage


async def test_text_and_function_calls_whole_and_streamed():
    said = Reply(text="I will look first.", tool_calls=[("bash", '{"cmd": "ls"}'),
                                                        ("bash", '{"cmd": "cat a.py"}')])
    async with scripted_gateway([said, said, text("done"), text("done")]) as (gw, srv, connect):
        route = gw.open_episode(RUN, label="ep")
        c = connect(route)
        whole = await c.models.generate_content(model="tackroom", contents="fix the bug",
                                                    config=CONFIG)
        content, calls, finish, usage = await streamed(
            c, model="tackroom", contents="fix the bug", config=CONFIG)
        v1 = connect(route, version="v1")
        plain = await v1.models.generate_content(model="tackroom", contents="fix the bug")
        plain_stream = await streamed(v1, model="tackroom", contents="fix the bug")
    assert whole.text == content == "I will look first."
    assert [(f.name, f.args) for f in whole.function_calls] == calls == \
        [("bash", {"cmd": "ls"}), ("bash", {"cmd": "cat a.py"})]
    assert whole.candidates[0].finish_reason == finish == types.FinishReason.STOP
    assert usage.total_token_count == whole.usage_metadata.total_token_count > 0
    assert whole.model_version == "tackroom" and whole.response_id
    assert plain.text == plain_stream[0] == "done" and plain_stream[1] == []
    # Four turns, recorded as chat messages, the Gemini request's keys kept for diagnosis.
    assert [t.index for t in route.turns] == [0, 1, 2, 3]
    assert route.turns[0].messages == [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "fix the bug"}]
    assert [tc["function"]["name"] for tc in route.turns[0].tool_calls] == ["bash", "bash"]
    assert route.requested[1]["stream"] is True and route.requested[1]["dialect"] == "gemini"
    assert srv.requests[0]["tools"] == [{"type": "function", "function": {
        "name": "bash", "description": "Run a shell command.", "parameters": {
            "type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}}]
    assert route.errors == [] and not any(r.get("stream") for r in srv.requests)


async def test_function_responses_are_paired_with_their_calls_over_many_turns():
    script = [Reply(tool_calls=[("bash", '{"cmd": "ls"}')]),
              Reply(text="Two at once.", tool_calls=[("read", '{"path": "a.py"}'),
                                                     ("bash", '{"cmd": "pwd"}')]),
              text("all done")]
    read = types.FunctionDeclaration(name="read", parameters_json_schema={
        "type": "object", "properties": {"path": {"type": "string"}}})
    config = CONFIG.model_copy(update={"tools": [types.Tool(function_declarations=[BASH, read])]})
    async with scripted_gateway(script) as (gw, srv, connect):
        route = gw.open_episode(RUN)
        c = connect(route)
        history = [types.Content(role="user", parts=[types.Part(text="look around")])]
        for n in range(3):
            out = await c.models.generate_content(model="tackroom", contents=history,
                                                  config=config)
            history.append(out.candidates[0].content)
            answers = [types.Part(function_response=types.FunctionResponse(
                id=f"{f.name}-{n}", name=f.name, response={"output": f"{f.name} said {n}"}))
                for f in out.function_calls or []]
            for part, f in zip(answers, out.function_calls or [], strict=True):
                f.id = part.function_response.id  # as Gemini CLI names its calls
            if answers:  # answered in reverse order: the ids pair them
                history.append(types.Content(role="user", parts=answers[::-1]))
        assert out.text == "all done"
    last = srv.requests[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "tool", "assistant",
                                         "tool", "tool"]
    assert last[2]["tool_calls"][0]["id"] == last[3]["tool_call_id"] == "call_1_0"
    assert last[4]["content"] == "Two at once."
    assert [(m["tool_call_id"], m["content"]) for m in last[5:]] == \
        [("call_3_1", "bash said 1"), ("call_3_0", "read said 1")]
    assert [len(t.messages) for t in route.turns] == [2, 4, 7]
    assert route.turns[2].messages == last


async def test_gemini_cli_requests_are_answered_as_it_reads_them():
    said = Reply(tool_calls=[("run_shell_command", '{"command": "echo hello > out.txt"}')])
    async with scripted_gateway([said, text("Done.")]) as (gw, _srv, _connect):
        route = gw.open_episode(RUN)
        headers = {"x-goog-api-key": route.token, "Content-Type": "application/json"}
        loop = asyncio.get_running_loop()
        port = int(route.root_url.rsplit(":", 1)[1])
        answers = []
        for name in ("first-turn", "tool-result"):
            path = json.loads((FIXTURES / "requests.json").read_text())[
                f"gemini-cli-0.61.0-{name}.json"]["path"]
            answers.append(await loop.run_in_executor(None, raw_post, port, path,
                                                      gemini_cli(name), headers))
        # The query reaches the dialect: a stream asked for as a JSON array is refused.
        no_alt, refused, _ = await loop.run_in_executor(
            None, http_request, port, "POST", STREAM, gemini_cli("first-turn"), headers)
    (status, kind, first), (_, _, second) = answers
    assert status == 200 and kind.startswith("text/event-stream")
    assert first[-1]["candidates"][0]["content"]["parts"] == [{"functionCall": {
        "name": "run_shell_command", "args": {"command": "echo hello > out.txt"}}}]
    assert "".join(p.get("text", "") for chunk in second
                   for p in chunk["candidates"][0]["content"]["parts"]) == "Done."
    assert second[-1]["candidates"][0]["finishReason"] == "STOP"
    assert len(route.turns) == 2 and route.turns[1].messages[-1]["role"] == "tool"
    assert no_alt == 400 and refused["error"]["status"] == "INVALID_ARGUMENT"
    assert "add ?alt=sse" in refused["error"]["message"]


def raw_post(port: int, path: str, body: dict, headers: dict) -> tuple[int, str, list[dict]]:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    try:
        conn.request("POST", path, body=json.dumps(body).encode(), headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type") or "", data_lines(resp.read())
    finally:
        conn.close()


async def test_errors_reach_the_sdk_in_googles_shape():
    async with scripted_gateway([text("ok")] * 3) as (gw, srv, connect):
        route = gw.open_episode(RUN, max_turns=1)
        c = connect(route)
        with pytest.raises(genai_errors.ClientError) as e:
            await connect(route, "wrong-key").models.generate_content(
                model="tackroom", contents="hi")
        assert (e.value.code, e.value.status) == (401, "UNAUTHENTICATED")
        image = types.Part.from_bytes(data=b"\x89PNG", mime_type="image/png")
        with pytest.raises(genai_errors.ClientError) as e:
            await c.models.generate_content(model="tackroom", contents=["what?", image])
        assert (e.value.code, e.value.status) == (400, "INVALID_ARGUMENT")
        assert "contents[0].parts[1] is an inlineData part" in e.value.message
        with pytest.raises(genai_errors.ClientError) as e:
            await c.models.generate_content(
                model="tackroom", contents="hi",
                config=types.GenerateContentConfig(candidate_count=2))
        assert "candidateCount is 2" in e.value.message
        assert (await c.models.generate_content(model="tackroom", contents="hi")).text == "ok"
        with pytest.raises(genai_errors.ClientError) as e:  # past the turn budget: final
            await streamed(c, model="tackroom", contents="hi")
        assert e.value.code == 400 and "turn budget of 1" in e.value.message
        assert e.value.details["error"]["details"][0]["reason"] == "BUDGET_EXHAUSTED"
    assert len(route.turns) == 1 and route.refused == 1 and len(srv.requests) == 1


async def test_count_tokens_is_a_side_call_not_a_turn():
    async with scripted_gateway([]) as (gw, srv, connect):
        route = gw.open_episode(RUN)
        c = connect(route)
        n = await c.models.count_tokens(model="tackroom", contents="how long is this?")
        model = await c.models.get(model="tackroom")
    assert n.total_tokens > 0 and model.name == "models/tackroom"
    assert route.turns == [] and srv.requests == []
    assert route.side_calls == [{"kind": "count_tokens", "dialect": "gemini",
                                 "tokens": n.total_tokens, "estimated": True}]


# ------------------------------------------------------------- tackroom serve
@pytest.fixture(scope="module")
def served(tiny_chat_dir):
    """``tackroom serve`` on the tiny model; a last message ``SAY:<text>`` makes it "write"
    <text> (its own tokens and log-probs), so a tool call goes down the server's real path."""
    pytest.importorskip("torch")
    from tackroom.policies.hf_policy import HFPolicy
    from tackroom.serve import ServerThread

    class SayHF(HFPolicy):
        seen: list[Sampling] = []  # every request's sampling, as the policy got it

        async def act(self, request: PolicyRequest) -> PolicyResponse:
            self.seen.append(request.sampling)
            last = request.messages[-1].get("content")
            if not (isinstance(last, str) and last.startswith("SAY:")):
                return await super().act(request)
            ids = self.tokenizer.encode(last[4:], add_special_tokens=False)
            ids.append(self.tokenizer.eos_token_id)
            return PolicyResponse(
                token_ids=ids, logprobs=self.score(request.messages, ids, request.tools),
                prompt_tokens=len(self.prompt_ids(request.messages, request.tools)),
                completion_tokens=len(ids), model=self.model_dir, adapter=self.adapter)

    with ServerThread(policy=SayHF(tiny_chat_dir, batch_wait_ms=10)) as srv:
        yield srv


def test_serve_answers_the_sdk_text_calls_results_and_counts(served):
    root = served.base_url.removesuffix("/v1")
    c = sdk(root, "unused")
    model = served.model_name
    greedy = types.GenerateContentConfig(temperature=0, max_output_tokens=8,
                                         response_logprobs=True)
    whole = c.models.generate_content(model=model, contents="hello", config=greedy)
    pieces = list(c.models.generate_content_stream(model=model, contents="hello",
                                                   config=greedy))
    assert "".join(p.text or "" for p in pieces) == (whole.text or "")
    chosen = whole.candidates[0].logprobs_result.chosen_candidates
    assert len(chosen) == whole.usage_metadata.candidates_token_count > 0
    assert [x.log_probability for p in pieces for x in p.candidates[0].logprobs_result
            .chosen_candidates] == [x.log_probability for x in chosen]
    assert pieces[-1].candidates[0].finish_reason in (types.FinishReason.STOP,
                                                      types.FinishReason.MAX_TOKENS)

    say = '<tool_call>{"name": "bash", "arguments": {"cmd": "ls"}}</tool_call>'
    config = CONFIG.model_copy(update={"temperature": 0, "max_output_tokens": 64})
    called = c.models.generate_content(model=model, contents="SAY:" + say, config=config)
    assert [(f.name, f.args) for f in called.function_calls] == [("bash", {"cmd": "ls"})]
    streamed_calls = [(p.function_call.name, p.function_call.args)
                      for chunk in c.models.generate_content_stream(
                          model=model, contents="SAY:" + say, config=config)
                      for p in chunk.candidates[0].content.parts if p.function_call]
    assert streamed_calls == [("bash", {"cmd": "ls"})]
    history = [types.Content(role="user", parts=[types.Part(text="SAY:" + say)]),
               called.candidates[0].content,
               types.Content(role="user", parts=[types.Part.from_function_response(
                   name="bash", response={"output": "SAY:all done"})])]
    answered = c.models.generate_content(model=model, contents=history, config=config)
    assert answered.text == "all done"
    # tackroom's extra key, as vLLM's in chat: the reply's token ids (not in the SDK's types).
    status, out, _ = http_request(served.port, "POST", f"/v1beta/models/{model}:generateContent",
                                  {"contents": [{"parts": [{"text": "SAY:all done"}]}],
                                   "return_token_ids": True})
    tokenizer = served.policy.tokenizer
    assert status == 200 and out["token_ids"] == \
        tokenizer.encode("all done", add_special_tokens=False) + [tokenizer.eos_token_id]
    assert len(out["logprobs"]) == len(out["token_ids"])
    assert out["prompt_token_ids"] == served.policy.prompt_ids(
        [{"role": "user", "content": "SAY:all done"}], None)

    n = c.models.count_tokens(model=model, contents="hello")
    assert n.total_tokens == len(served.policy.prompt_ids(
        [{"role": "user", "content": "hello"}], None))


def test_serve_refuses_in_googles_shape(served):
    c = sdk(served.base_url.removesuffix("/v1"), "unused")
    with pytest.raises(genai_errors.ClientError) as e:
        c.models.generate_content(model="gemini-2.5-pro", contents="hi")
    assert (e.value.code, e.value.status) == (404, "NOT_FOUND")
    assert served.model_name in e.value.message
    with pytest.raises(genai_errors.ClientError) as e:
        c.models.generate_content(model=served.model_name, contents="hi",
                                  config=types.GenerateContentConfig(top_k=-3))
    assert e.value.code == 400 and "'generationConfig.topK' is -3;" in e.value.message


def test_serve_honours_top_k(served):
    """Gemini CLI's default topK (64) reaches the policy as top_k, and is applied: top-k 1
    at temperature 1 writes what greedy decoding writes, whatever the seed."""
    c = sdk(served.base_url.removesuffix("/v1"), "unused")
    ask = dict(model=served.model_name, contents="hello")
    c.models.generate_content(**ask, config=types.GenerateContentConfig(
        top_k=64, top_p=0.95, temperature=1, max_output_tokens=4))
    assert (served.policy.seen[-1].top_k, served.policy.seen[-1].top_p) == (64, 0.95)
    greedy = c.models.generate_content(**ask, config=types.GenerateContentConfig(
        temperature=0, max_output_tokens=12, response_logprobs=True))
    for seed in (1, 2, 3):
        top1 = c.models.generate_content(**ask, config=types.GenerateContentConfig(
            top_k=1, temperature=1, seed=seed, max_output_tokens=12, response_logprobs=True))
        assert served.policy.seen[-1].top_k == 1
        assert top1.text == greedy.text
        # Log-probs stay those of the unmodified model, not of the top-1 filtered one (0.0).
        assert [x.log_probability for x in top1.candidates[0].logprobs_result
                .chosen_candidates] == [x.log_probability for x in greedy.candidates[0]
                                        .logprobs_result.chosen_candidates]


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                    | WORDS, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(WORDS, inner, max_size=3), max_leaves=8)
FULL = {"systemInstruction": {"parts": [{"text": "be brief"}]},
        "contents": [{"role": "user", "parts": [{"text": "go"}]}, CALL, {"role": "user", "parts": [
            {"functionResponse": {"name": "bash", "response": {"output": "a.py"}}}]}],
        "tools": [{"functionDeclarations": [{"name": "bash", "parameters": {
            "type": "OBJECT", "properties": {"cmd": {"type": "STRING"}}}}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY"}},
        "generationConfig": {"temperature": 0.5, "stopSequences": ["x"], "candidateCount": 1,
                             "responseModalities": ["TEXT"], "responseMimeType": "text/plain"}}


def _places(value, path=()):
    yield path
    items = value.items() if isinstance(value, dict) else \
        enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield from _places(child, (*path, key))


@given(st.data())
@settings(max_examples=100, deadline=None)
def test_any_value_anywhere_is_read_or_refused_with_a_400(data):
    """A hostile client: any JSON value in place of any part of a good request is either read
    or a 400 naming what to change, never another exception (a 500)."""
    body = json.loads(json.dumps(FULL))
    place = data.draw(st.sampled_from(list(_places(body))[1:]))
    node = body
    for key in place[:-1]:
        node = node[key]
    node[place[-1]] = data.draw(JSON)
    try:
        parse_chat(to_chat(body, match("/v1beta/models/m:generateContent")))
    except ApiError as e:
        assert e.status == 400 and e.message
