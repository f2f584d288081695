"""The ``openai`` policy against a real scripted server on 127.0.0.1 (real HTTP).

Every test runs twice, once per wire client: the lean default and the SDK.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os

import pytest
from conftest import free_port

from tackroom.core.errors import ContextLengthExceeded, InfraError, PolicyError
from tackroom.core.policy import Policy, PolicyRequest, Sampling, ToolCall
from tackroom.policies import make_policy, openai_policy
from tackroom.policies.openai_policy import CLIENTS, OpenAIPolicy, make_openai_policy
from tackroom.testing import Reply, ScriptedOpenAIServer, error, text, tool_call

SECRET = "sk-test-SECRET-0123456789abcdef"
MESSAGES = [{"role": "system", "content": "You click buttons."},
            {"role": "user", "content": "Click the OK button."}]
TOOLS = [{"type": "function", "function": {
    "name": "click", "description": "Click an element.",
    "parameters": {"type": "object", "properties": {"ref": {"type": "string"}},
                   "required": ["ref"]}}}]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture(autouse=True, params=CLIENTS)
def client(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The wire client every policy built without ``client=`` gets in this test."""
    monkeypatch.setattr(openai_policy, "DEFAULT_CLIENT", request.param)
    return request.param


def fast_policy(base_url: str, **kw) -> OpenAIPolicy:
    """Small timeouts and backoff so the whole file stays quick."""
    opts = {"timeout": 2.0, "max_retries": 2, "backoff_base": 0.01, "backoff_max": 0.05}
    opts.update(kw)
    return OpenAIPolicy("scripted-model", base_url=base_url, **opts)


def req(**sampling) -> PolicyRequest:
    return PolicyRequest(messages=MESSAGES, sampling=Sampling(**sampling))


async def test_text_reply_and_request_shape() -> None:
    with ScriptedOpenAIServer([text("I will click OK.")]) as srv:
        async with fast_policy(srv.base_url) as policy:
            assert isinstance(policy, Policy)
            out = await policy.act(req(temperature=0.7, top_p=0.9, max_tokens=64, seed=3))
        body = srv.requests[0]
    assert out.text == "I will click OK."
    assert out.tool_calls == []
    assert out.finish_reason == "stop"
    assert out.model == "scripted-model"
    assert out.prompt_tokens > 0 and out.completion_tokens == 4
    assert out.logprobs is None
    assert body["model"] == "scripted-model"
    assert body["messages"] == MESSAGES
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"]) == (
        0.7, 0.9, 64, 3)
    assert "tools" not in body and "tool_choice" not in body and "logprobs" not in body


async def test_tool_call_round_trip() -> None:
    with ScriptedOpenAIServer([tool_call("click", {"ref": "b1"})]) as srv:
        async with fast_policy(srv.base_url) as policy:
            out = await policy.act(PolicyRequest(messages=MESSAGES, tools=TOOLS))
        body = srv.requests[0]
    assert body["tools"] == TOOLS and body["tool_choice"] == "auto"
    assert out.finish_reason == "tool_calls"
    assert out.text is None
    [call] = out.tool_calls
    assert isinstance(call, ToolCall) and call.name == "click"
    assert json.loads(call.arguments) == {"ref": "b1"}
    assert call.id.startswith("call_")
    # The call goes back into the next turn's messages in the OpenAI shape.
    assert call.to_dict()["function"] == {"name": "click", "arguments": call.arguments}


async def test_malformed_tool_calls_pass_through_raw() -> None:
    nameless = {"id": "call_x", "type": "function", "function": {"arguments": '{"ref": 1}'}}
    script = [Reply(tool_calls=[("click", '{"ref": "b1"'), nameless,
                                {"type": "function", "function": {"name": "type",
                                                                  "arguments": {"t": "hi"}}}])]
    with ScriptedOpenAIServer(script) as srv:
        async with fast_policy(srv.base_url) as policy:
            out = await policy.act(PolicyRequest(messages=MESSAGES, tools=TOOLS))
    bad_json, no_name, dict_args = out.tool_calls
    assert bad_json.name == "click" and bad_json.arguments == '{"ref": "b1"'
    assert no_name == ToolCall(id="call_x", name="", arguments='{"ref": 1}')
    assert dict_args.name == "type" and json.loads(dict_args.arguments) == {"t": "hi"}
    assert dict_args.id == "call_2"


async def test_500_then_success_is_retried() -> None:
    with ScriptedOpenAIServer([error(500), error(503), text("ok")]) as srv:
        async with fast_policy(srv.base_url) as policy:
            out = await policy.act(req())
        assert len(srv.requests) == 3
    assert out.text == "ok"


async def test_429_retry_after_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    script = [error(429, "slow down", headers={"Retry-After": "0.2"}), text("ok")]
    with ScriptedOpenAIServer(script) as srv:
        async with fast_policy(srv.base_url, backoff_max=1.0) as policy:
            waits: list[float] = []  # the delays the policy chose, not a clock reading
            backoff = policy._backoff
            monkeypatch.setattr(policy, "_backoff",
                                lambda *a: waits.append(backoff(*a)) or waits[-1])
            out = await policy.act(req())
    assert out.text == "ok" and waits == [0.2]


async def test_persistent_500_is_infra_error_after_retries() -> None:
    with ScriptedOpenAIServer(default=error(500, "CUDA out of memory")) as srv:
        async with fast_policy(srv.base_url, max_retries=3) as policy:
            with pytest.raises(InfraError) as ei:
                await policy.act(req())
        assert len(srv.requests) == 4
    line = ei.value.line()
    assert srv.base_url in line and "HTTP 500" in line and "4 time(s)" in line
    assert "CUDA out of memory" in line
    assert "\n" not in line


async def test_slow_reply_times_out_then_infra_error() -> None:
    with ScriptedOpenAIServer(default=Reply(text="late", delay=2.0)) as srv:
        # ``timeout`` bounds the whole attempt, connect and send included: not too
        # small, so that a loaded machine still gets the retry to the server.
        async with fast_policy(srv.base_url, timeout=0.5, max_retries=1) as policy:
            with pytest.raises(InfraError) as ei:
                await policy.act(req())
        assert len(srv.requests) == 2
    assert "timed out" in ei.value.line() and srv.base_url in ei.value.line()


async def test_slow_reply_then_fast_reply_succeeds() -> None:
    with ScriptedOpenAIServer([Reply(text="late", delay=2.0), text("on time")]) as srv:
        async with fast_policy(srv.base_url, timeout=0.5) as policy:
            out = await policy.act(req())
    assert out.text == "on time"


async def test_dropped_connection_is_retried() -> None:
    with ScriptedOpenAIServer([Reply(drop=True), text("ok")]) as srv:
        async with fast_policy(srv.base_url) as policy:
            out = await policy.act(req())
    assert out.text == "ok"


async def test_unreachable_server_is_quick_clear_infra_error() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    async with fast_policy(url) as policy:
        with pytest.raises(InfraError) as ei:
            await policy.act(req())
    line = ei.value.line()
    assert f"model server at {url} unreachable" in line
    assert "start your vLLM/SGLang server or pass --base-url" in line


async def test_logprobs_and_token_ids() -> None:
    script = [text("OK done", logprobs=[-0.5, -1.25], token_ids=[11, 22])]
    with ScriptedOpenAIServer(script) as srv:
        async with fast_policy(srv.base_url) as policy:
            assert policy.return_token_ids  # local server: assumed vLLM-like
            out = await policy.act(req(logprobs=True))
        body = srv.requests[0]
    assert body["logprobs"] is True and body["return_token_ids"] is True
    assert out.logprobs == [-0.5, -1.25]
    assert out.token_ids == [11, 22]


async def test_no_token_ids_when_server_omits_them() -> None:
    with ScriptedOpenAIServer([text("OK")]) as srv:
        async with fast_policy(srv.base_url, return_token_ids=False) as policy:
            out = await policy.act(req(logprobs=True))
        assert "return_token_ids" not in srv.requests[0]
    assert out.token_ids is None and out.logprobs == [-0.25]


async def test_token_ids_from_vllm_token_strings() -> None:
    # vLLM's --return-tokens-as-token-ids writes tokens as "token_id:N".
    script = [text("ab", tokens=["token_id:7", "token_id:9"], logprobs=[-0.1, -0.2])]
    with ScriptedOpenAIServer(script) as srv:
        async with fast_policy(srv.base_url, return_token_ids=False) as policy:
            out = await policy.act(req(logprobs=True))
    assert out.token_ids == [7, 9] and out.logprobs == [-0.1, -0.2]


async def test_concurrency_limit_respected() -> None:
    with ScriptedOpenAIServer(default=Reply(text="ok", delay=0.15)) as srv:
        async with fast_policy(srv.base_url, max_concurrency=2) as policy:
            outs = await asyncio.gather(*(policy.act(req()) for _ in range(6)))
        assert srv.max_concurrent == 2
    assert [o.text for o in outs] == ["ok"] * 6


async def test_api_key_sent_but_never_shown(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    # OpenAI quotes (part of) a wrong key in its 401 message; ours echoes all of it.
    script = [text("hi"), error(401, f"Incorrect API key provided: {SECRET}."),
              error(500, f"internal: token {SECRET}"), error(500), error(500)]
    with ScriptedOpenAIServer(script) as srv:
        async with fast_policy(srv.base_url, api_key=SECRET) as policy:
            assert (await policy.act(req())).text == "hi"
            with pytest.raises(PolicyError) as auth:
                await policy.act(req())
            with pytest.raises(InfraError) as infra:
                await policy.act(req())
            shown = [repr(policy), str(policy.describe()), policy.id]
        assert srv.headers[0]["authorization"] == f"Bearer {SECRET}"
    assert "check OPENAI_API_KEY" in auth.value.line()
    assert policy.describe()["api_key_set"] is True
    for err in (auth.value, infra.value):
        shown += [str(err), repr(err), err.line(), str(err.__cause__), str(err.__context__)]
    shown.append(caplog.text)
    for s in shown:
        assert SECRET not in s
        assert "SECRET-0123" not in s


async def test_404_lists_served_models() -> None:
    with ScriptedOpenAIServer(models=["qwen-7b", "llama-8b"]) as srv:
        async with fast_policy(srv.base_url) as policy:
            with pytest.raises(PolicyError) as ei:
                await policy.act(req())
        assert len(srv.requests) == 1  # not retried
    line = ei.value.line()
    assert "'scripted-model' not found" in line and "qwen-7b, llama-8b" in line


async def test_context_overflow_is_its_own_policy_error() -> None:
    msg = ("This model's maximum context length is 4096 tokens. However, you requested "
           "5000 tokens.")
    with ScriptedOpenAIServer([error(400, msg)]) as srv:
        async with fast_policy(srv.base_url) as policy:
            with pytest.raises(ContextLengthExceeded) as ei:
                await policy.act(req())
    assert not isinstance(ei.value, PolicyError) and "4096" in ei.value.line()


async def test_non_json_reply_is_infra_error() -> None:
    with ScriptedOpenAIServer([Reply(body="<html>proxy page</html>")]) as srv:
        async with fast_policy(srv.base_url) as policy:
            with pytest.raises(InfraError) as ei:
                await policy.act(req())
    assert "not a chat completion" in ei.value.line()


async def test_callable_script_sees_request() -> None:
    def script(body: dict) -> str:
        return f"you said {body['messages'][-1]['content']}"

    with ScriptedOpenAIServer(script) as srv:
        async with fast_policy(srv.base_url) as policy:
            out = await policy.act(req())
    assert out.text == "you said Click the OK button."


def test_exhausted_script_says_so() -> None:
    import urllib.error
    import urllib.request

    with ScriptedOpenAIServer([]) as srv:
        r = urllib.request.Request(f"{srv.base_url}/chat/completions",
                                   data=json.dumps({"model": "m", "messages": []}).encode(),
                                   headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as ei:
            urllib.request.urlopen(r, timeout=5)
        assert ei.value.code == 500 and "script exhausted" in ei.value.read().decode()
        with urllib.request.urlopen(f"{srv.base_url}/models", timeout=5) as resp:
            assert json.load(resp)["data"][0]["id"] == "scripted-model"


def test_spec_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    p = make_openai_policy("openai:Qwen/Qwen2.5-7B-Instruct@http://127.0.0.1:8000/v1",
                           timeout="5", max_retries="1")
    assert p.id == "openai:Qwen/Qwen2.5-7B-Instruct" and p.model == "Qwen/Qwen2.5-7B-Instruct"
    assert p.base_url == "http://127.0.0.1:8000/v1" and p.timeout == 5.0 and p.max_retries == 1
    assert p.describe()["api_key_set"] is False  # local server, no key: "EMPTY"
    assert make_openai_policy("openai:llama3:8b", base_url="http://localhost:11434/v1").model \
        == "llama3:8b"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://10.0.0.5:8000/v1/")
    p = make_openai_policy("openai:m")
    assert p.base_url == "http://10.0.0.5:8000/v1" and p.return_token_ids is False
    for bad in ("hf:gpt2", "openai:", "openai"):
        with pytest.raises(PolicyError):
            make_openai_policy(bad)
    with pytest.raises(PolicyError, match="unknown option"):
        make_openai_policy("openai:m", temprature=0.3)


def test_openai_host_without_key_is_policy_error() -> None:
    with pytest.raises(PolicyError, match="OPENAI_API_KEY"):
        OpenAIPolicy("gpt-4o-mini")


def test_describe_strips_credentials_from_url() -> None:
    p = OpenAIPolicy("m", base_url="http://user:pw@gpu-node:8000/v1?token=abc", api_key=SECRET)
    d = p.describe()
    assert d["base_url"] == "http://gpu-node:8000/v1"
    assert "pw" not in repr(p) and "abc" not in str(d) and SECRET not in str(d)


# ------------------------------------------------------- hostile servers
async def test_trickling_reply_is_bounded_by_the_whole_call_timeout() -> None:
    # One byte a second: every read is quick, the whole reply would take minutes.
    with ScriptedOpenAIServer(default=Reply(text="slow", trickle=1.0)) as srv:
        async with fast_policy(srv.base_url, timeout=2.0, max_retries=1) as policy:
            with pytest.raises(InfraError) as ei:
                await policy.act(req())
        assert len(srv.requests) == 2  # the same retry path as other timeouts
    line = ei.value.line()
    assert "timed out after 2s" in line and "unreachable" not in line


async def test_huge_reply_is_cut_to_max_reply_chars() -> None:
    big = "A" * 2_000_000
    script = [text(big), tool_call("click", '{"ref": "' + "b" * 2_000_000 + '"}'), text(big)]
    with ScriptedOpenAIServer(script) as srv:
        async with fast_policy(srv.base_url) as policy:
            out = await policy.act(req(max_tokens=512))
            calls = await policy.act(PolicyRequest(messages=MESSAGES, tools=TOOLS))
            custom = OpenAIPolicy("scripted-model", base_url=srv.base_url, max_reply_chars=100)
            small = await custom.act(req(max_tokens=512))
            await custom.aclose()
    assert out.finish_reason == "length"
    assert len(out.text) < 17_000 and out.text.startswith("A" * 16_384)
    assert "cut" in out.text[16_384:]  # a note the harness and the records can see
    [call] = calls.tool_calls
    assert calls.finish_reason == "length" and len(call.arguments) <= 16_384
    assert small.finish_reason == "length" and len(small.text) < 200
    assert policy.describe()["max_reply_chars"] is None  # per request: max(16384, 8*max_tokens)


async def test_reply_cap_follows_max_tokens() -> None:
    with ScriptedOpenAIServer([text("B" * 100_000)]) as srv:
        async with fast_policy(srv.base_url) as policy:
            out = await policy.act(req(max_tokens=4096))  # cap 32768 chars
    assert out.finish_reason == "length" and out.text.startswith("B" * 32_768)
    assert "B" * 32_769 not in out.text


async def test_endless_body_is_not_read_whole() -> None:
    size = 100 * 1024 * 1024
    with ScriptedOpenAIServer(default=Reply(huge=size)) as srv:
        async with fast_policy(srv.base_url, timeout=30.0) as policy:
            with pytest.raises(InfraError) as ei:
                await policy.act(req())
        assert len(srv.requests) == 1  # a server that does this will do it again
    assert "larger than" in ei.value.line() and srv.base_url in ei.value.line()
    assert srv.bytes_sent < size // 2  # stopped reading long before the end


@pytest.mark.parametrize(("status", "error_type", "says"), [
    (400, PolicyError, "refused the request (HTTP 400)"),
    (500, InfraError, "HTTP 500"),
])
async def test_huge_error_bodies_are_not_read_whole(status, error_type, says) -> None:
    # The SDK reads an error body whole before it raises; 100 MB of it must not be.
    size = 100 * 1024 * 1024
    with ScriptedOpenAIServer(default=Reply(status=status, huge=size)) as srv:
        async with fast_policy(srv.base_url, timeout=30.0, max_retries=1) as policy:
            with pytest.raises(error_type) as ei:
                await policy.act(req())
    line = ei.value.line()
    assert says in line and "timed out" not in line, line
    assert len(line) < 1000
    assert srv.bytes_sent < size // 2


async def test_a_huge_model_list_is_not_read_whole() -> None:
    size = 100 * 1024 * 1024
    script = [error(404, "The model `scripted-model` does not exist.")]
    with ScriptedOpenAIServer(script, huge_models=size) as srv:
        async with fast_policy(srv.base_url, timeout=30.0) as policy:
            with pytest.raises(PolicyError) as ei:
                await policy.act(req())
    assert "404" in ei.value.line() and srv.bytes_sent < size // 2
    with ScriptedOpenAIServer([text("hi")], huge_models=size) as srv:
        async with fast_policy(srv.base_url, timeout=30.0) as policy:
            await policy.check()  # an unreadable list is no verdict: the chat call decides
            assert (await policy.act(req())).text == "hi"


async def test_echoed_key_without_known_prefix_is_scrubbed() -> None:
    key = "plainkey-0123456789-abcdef"  # no sk-/hf_ prefix for a pattern to catch
    script = [Reply(text="your key is {key}!", tool_calls=[("click", '{"ref": "{key}"}')],
                    echo_key=True)]
    with ScriptedOpenAIServer(script) as srv:
        async with fast_policy(srv.base_url, api_key=key) as policy:
            out = await policy.act(PolicyRequest(messages=MESSAGES, tools=TOOLS))
        assert srv.headers[0]["authorization"] == f"Bearer {key}"
    assert key not in out.text and out.text.startswith("your key is ")
    assert key not in out.tool_calls[0].arguments
    from tackroom.core.secrets import scrub, scrub_text
    assert key not in scrub_text(f"echo {key}") and key not in str(scrub({"m": [key]}))


async def test_url_password_is_never_shown_and_at_signs_parse() -> None:
    p = make_openai_policy("openai:m@http://user:p@ss-w0rd@127.0.0.1:8000/v1")
    assert p.model == "m" and p.id == "openai:m" and p.url == "http://127.0.0.1:8000/v1"
    assert "p@ss-w0rd" not in str(p.describe()) + repr(p) + p.id
    p = make_openai_policy("openai:org/model@v2@http://127.0.0.1:8000/v1")
    assert p.model == "org/model@v2" and p.url == "http://127.0.0.1:8000/v1"
    assert make_openai_policy("openai:model@v2", base_url="http://127.0.0.1:1/v1").model \
        == "model@v2"
    with pytest.raises(PolicyError) as bad:
        make_openai_policy("openai:m@http://user:p@ss-w0rd@127.0.0.1:8000/v1", timeout="x")
    assert "p@ss-w0rd" not in bad.value.line()
    # An unreachable server's error does not quote the password either.
    url = f"http://user:hunter2-pw@127.0.0.1:{free_port()}/v1"
    async with make_openai_policy(f"openai:m@{url}", timeout=2.0, max_retries=0) as policy:
        with pytest.raises(InfraError) as ei:
            await policy.act(req())
    assert "hunter2" not in ei.value.line() + repr(ei.value) + str(policy.describe())
    assert "unreachable" in ei.value.line()


def test_a_url_given_is_never_replaced_by_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    for spec in ("openai:m@127.0.0.1:8000/v1", "openai:m@localhost:8000/v1",
                 "openai:m@HTTP://127.0.0.1:8000/v1", "openai:m@ftp://host/v1"):
        try:
            p = make_openai_policy(spec)
        except PolicyError as e:
            assert "openai:MODEL@http://host:port/v1" in e.line(), spec
        else:
            assert "api.openai.com" not in p.url, spec


# ------------------------------------------------------------ the two clients
async def test_default_client_and_choice(client: str) -> None:
    with ScriptedOpenAIServer([text("one"), text("two")]) as srv:
        async with fast_policy(srv.base_url) as default:
            assert default.client == client and default.describe()["client"] == client
            assert (await default.act(req())).text == "one"
        other = "sdk" if client == "lean" else "lean"
        async with make_policy(f"openai:scripted-model@{srv.base_url}", client=other) as chosen:
            assert chosen.describe()["client"] == other
            assert (await chosen.act(req())).text == "two"
        # The same JSON goes over the wire either way.
        assert srv.requests[0] == srv.requests[1]
    with pytest.raises(PolicyError, match="unknown client"):
        OpenAIPolicy("m", base_url="http://127.0.0.1:1/v1", client="curl")


def test_a_proxy_in_the_environment_selects_the_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openai_policy, "DEFAULT_CLIENT", "lean")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert OpenAIPolicy("m", base_url="https://gpu.example/v1").client == "sdk"
    assert OpenAIPolicy("m", base_url="http://gpu.example/v1").client == "lean"  # not http
    monkeypatch.setenv("NO_PROXY", "gpu.example")
    assert OpenAIPolicy("m", base_url="https://gpu.example/v1").client == "lean"


async def test_connections_are_kept_alive_and_extra_body_wins() -> None:
    with ScriptedOpenAIServer(default=text("ok")) as srv:
        async with fast_policy(srv.base_url, extra_body={"top_k": 20, "top_p": 0.5}) as policy:
            for _ in range(3):
                assert (await policy.act(req())).text == "ok"
            await asyncio.gather(*(policy.act(req()) for _ in range(4)))
        assert [b["top_k"] for b in srv.requests] == [20] * 7
        assert all(b["top_p"] == 0.5 for b in srv.requests)  # extra_body overrides sampling


# ------------------------------------------------- the lean client's HTTP/1.1
COMPLETION = json.dumps({"object": "chat.completion", "model": "m", "choices": [
    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}]})


class RawServer:
    """Answers each request with the next raw bytes of ``replies`` (``close``: then hang up)."""

    def __init__(self, replies: list[tuple[bytes, bool]]) -> None:
        self.replies, self.heads, self.connections = list(replies), [], 0
        self.hung_up = asyncio.Event()  # set each time the server has closed a connection

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.replies:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                self.heads.append(head.decode())
                raw, close = self.replies.pop(0)
                writer.write(raw)
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()
        try:
            await writer.wait_closed()
        except ConnectionError:
            pass
        self.hung_up.set()


def http_reply(body: str, *, status: str = "200 OK", chunked: bool = False,
               length: bool = True) -> bytes:
    data = body.encode()
    head = f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
    if chunked:
        mid = len(data) // 2
        parts = [data[:mid], data[mid:]]
        wire = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
        return (head + "transfer-encoding: chunked\r\n\r\n").encode() + wire
    if length:
        head += f"content-length: {len(data)}\r\n"
    else:
        head += "connection: close\r\n"
    return (head + "\r\n").encode() + data


async def test_lean_reads_chunked_and_read_to_close_bodies(client: str) -> None:
    if client == "sdk":
        pytest.skip("the lean client's own HTTP/1.1")
    raw = RawServer([(http_reply(COMPLETION, chunked=True), False),
                     (http_reply(COMPLETION), False),
                     (http_reply(COMPLETION, length=False), True)])
    async with raw as url:
        async with OpenAIPolicy("m", base_url=url, client="lean", max_retries=0) as policy:
            for _ in range(3):
                assert (await policy.act(req())).text == "hi"
    assert raw.connections == 1  # kept alive until the server closed it
    assert raw.heads[0].startswith("POST /v1/chat/completions HTTP/1.1\r\n")
    assert "Authorization: Bearer EMPTY" in raw.heads[0]


async def test_lean_retries_a_kept_alive_connection_the_server_closed(client: str) -> None:
    if client == "sdk":
        pytest.skip("the lean client's own HTTP/1.1")
    # The server closes after each reply without saying so: the next request on that
    # connection finds it gone before any reply byte and goes once more, on a new one.
    raw = RawServer([(http_reply(COMPLETION), True), (http_reply(COMPLETION), True)])
    async with raw as url:
        async with OpenAIPolicy("m", base_url=url, client="lean", max_retries=0) as policy:
            assert (await policy.act(req())).text == "hi"
            await raw.hung_up.wait()  # the kept-alive connection is closed on the server
            assert (await policy.act(req())).text == "hi"
    assert raw.connections == 2


async def test_lean_chunked_error_body_is_cut_and_url_user_info_is_basic_auth(
        client: str) -> None:
    if client == "sdk":
        pytest.skip("the lean client's own HTTP/1.1")
    huge = '{"error": {"message": "' + "e" * (3 * 1024 * 1024) + '"}}'
    raw = RawServer([(http_reply(huge, status="400 Bad Request", chunked=True), False)])
    async with raw as url:
        url = url.replace("http://", "http://user:pw%40x@")
        async with OpenAIPolicy("m", base_url=url, client="lean", max_retries=0) as policy:
            with pytest.raises(PolicyError) as ei:
                await policy.act(req())
    assert "HTTP 400" in ei.value.line() and len(ei.value.line()) < 1000
    assert "Authorization: Basic dXNlcjpwd0B4\r\n" in raw.heads[0]  # user:pw@x
    assert "pw" not in ei.value.line()


def test_a_lean_client_run_never_loads_the_sdk(client: str) -> None:
    """The lean client's runs (and every Ray worker) do not pay the SDK's import."""
    if client != "lean":
        pytest.skip("the lean client's property")
    import subprocess
    import sys

    code = """
import sys, tempfile, tackroom
from tackroom.testing import ScriptedOpenAIServer, text
with ScriptedOpenAIServer(default=text("no tool call")) as srv, tempfile.TemporaryDirectory() as d:
    run = tackroom.evaluate("toy", tasks=["click-button"], harnesses=["som-tools"],
                            policies=["openai:scripted-model"], base_url=srv.base_url, seeds=[0],
                            store=d + "/r.duckdb")
    assert len(run.episodes()) == 1, run
print(sorted(m for m in sys.modules if m.split(".")[0] in ("openai", "httpx", "httpx2")))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "OPENAI_API_KEY": ""})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
