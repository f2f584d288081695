"""The scripted test server on the wire package: every dialect, whole and streamed, one script."""

from __future__ import annotations

import openai

from tackroom.testing import ScriptedOpenAIServer, text, tool_call


def test_streamed_chat_reply_concatenates_to_the_scripted_one() -> None:
    script = [text("hello there, world"), tool_call("click", {"ref": "b1"})]
    with ScriptedOpenAIServer(script) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="k", max_retries=0)
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True,
            stream_options={"include_usage": True})
        chunks = list(stream)
        said = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert said == "hello there, world"
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3
        out = client.chat.completions.create(model="m", messages=[{"role": "user",
                                                                   "content": "go"}])
        [call] = out.choices[0].message.tool_calls
        assert call.function.name == "click" and call.function.arguments == '{"ref": "b1"}'
        assert out.choices[0].finish_reason == "tool_calls"
        assert [r.dialect for r in srv.chat_requests] == ["chat", "chat"]


def test_a_responses_call_gets_the_same_script_in_its_own_shape() -> None:
    with ScriptedOpenAIServer([text("from the script"), tool_call("shell", {"cmd": "ls"})]) \
            as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="k", max_retries=0)
        first = client.responses.create(model="m", input="hi")
        assert first.output_text == "from the script"
        with client.responses.stream(model="m", input="list files") as stream:
            final = stream.get_final_response()
        [call] = [item for item in final.output if item.type == "function_call"]
        assert call.name == "shell" and call.arguments == '{"cmd": "ls"}'
        assert [r.dialect for r in srv.chat_requests] == ["responses", "responses"]
        assert srv.requests[0]["input"] == "hi"  # recorded as sent


def test_unknown_routes_and_bad_bodies_are_answered_not_scripted() -> None:
    with ScriptedOpenAIServer([text("kept")]) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="k", max_retries=0)
        try:
            client.post("/no/such/route", body={}, cast_to=object)
        except openai.NotFoundError as e:
            assert "no route POST /v1/no/such/route" in str(e)
        else:
            raise AssertionError("an unknown route was answered")
        out = client.chat.completions.create(model="m", messages=[{"role": "user",
                                                                   "content": "x"}])
        assert out.choices[0].message.content == "kept"  # the 404 used no scripted reply
        assert len(srv.requests) == 1 and len(srv.received) == 2


def test_an_anthropic_call_and_its_token_count() -> None:
    import anthropic

    with ScriptedOpenAIServer([tool_call("bash", {"command": "ls"})]) as srv:
        client = anthropic.Anthropic(base_url=srv.base_url.removesuffix("/v1"), api_key="k",
                                     max_retries=0)
        msg = client.messages.create(model="m", max_tokens=64, system="be brief",
                                     messages=[{"role": "user", "content": "list files"}],
                                     tools=[{"name": "bash", "input_schema": {
                                         "type": "object", "properties": {
                                             "command": {"type": "string"}}}}])
        [use] = [b for b in msg.content if b.type == "tool_use"]
        assert use.name == "bash" and use.input == {"command": "ls"}
        assert msg.stop_reason == "tool_use"
        counted = client.messages.count_tokens(model="m", messages=[
            {"role": "user", "content": "three words here"}])
        assert counted.input_tokens > 0
        assert [r.dialect for r in srv.chat_requests] == ["anthropic"]  # a count is no call
