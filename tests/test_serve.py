"""``tackroom serve``: a real HTTP server on 127.0.0.1, driven by the real ``openai`` SDK.

The decisive test runs the toy suite twice — through ``OpenAIPolicy`` against
the server, and with ``HFPolicy`` in process — and requires the same outcomes
and the same raw outputs, episode by episode.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
openai = pytest.importorskip("openai")

from conftest import CLICK_TOOLS, free_port, http_request  # noqa: E402

from tackroom.core import Sampling  # noqa: E402
from tackroom.core.errors import ConfigError, ContextLengthExceeded, PolicyError  # noqa: E402
from tackroom.core.policy import PolicyRequest, PolicyResponse  # noqa: E402
from tackroom.harness.spec import load_harness  # noqa: E402
from tackroom.models import format_tool_call  # noqa: E402
from tackroom.policies.hf_policy import HFPolicy  # noqa: E402
from tackroom.policies.openai_policy import OpenAIPolicy  # noqa: E402
from tackroom.runner.grid import plan_grid, run_cells  # noqa: E402
from tackroom.serve import (  # noqa: E402
    ChatRequest,
    ServerThread,
    _Gate,
    _Vocab,
    build_completion,
    serve_main,
    split_reply,
)
from tackroom.suites import get_suite  # noqa: E402

SYSTEM = {"role": "system", "content": "You are a web agent."}
KEY = "sk-serve-test-0123456789"


def chat(text: str) -> list[dict]:
    return [SYSTEM, {"role": "user", "content": text}]


class ScriptedHF(HFPolicy):
    """The hf policy, except that a last message ``SAY:<text>`` makes the model "write" <text>.

    The tokens are the tokenizer's own and the log-probs the model's (``score``),
    so a reply of any shape — a good tool call, a broken one — goes down the
    server's real path.
    """

    async def act(self, request: PolicyRequest) -> PolicyResponse:
        last = request.messages[-1].get("content")
        if not (isinstance(last, str) and last.startswith("SAY:")):
            return await super().act(request)
        ids = self.tokenizer.encode(last[4:], add_special_tokens=False)
        ids.append(self.tokenizer.eos_token_id)
        return PolicyResponse(
            token_ids=ids, logprobs=self.score(request.messages, ids, request.tools),
            prompt_tokens=len(self.prompt_ids(request.messages, request.tools)),
            completion_tokens=len(ids), model=self.model_dir, adapter=self.adapter)


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    # Tiny models decode fastest on one thread (see HFPolicy); restore for other modules.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def direct(tiny_chat_dir):
    return HFPolicy(tiny_chat_dir)


@pytest.fixture(scope="module")
def srv(tiny_chat_dir, lora_adapter_dir):
    policy = ScriptedHF(tiny_chat_dir, batch_wait_ms=50)
    with ServerThread(policy=policy, adapters={"tuned": str(lora_adapter_dir)}) as s:
        yield s


@pytest.fixture(scope="module")
def client(srv):
    c = openai.OpenAI(base_url=srv.base_url, api_key="EMPTY", max_retries=0, timeout=60)
    yield c
    c.close()


def create(client, srv, messages, **kw):
    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", 12)
    return client.chat.completions.create(model=srv.model_name, messages=messages, **kw)


def raw_request(srv, method, path, body=None, headers=None):
    return http_request(srv.port, method, path, body, headers)


# --------------------------------------------------------------- endpoints
def test_models_lists_the_base_model_and_its_adapters(srv, client):
    assert srv.model_name == "tiny-chat"
    ids = [m.id for m in client.models.list().data]
    assert ids == ["tiny-chat", "tuned"]
    status, body, _ = raw_request(srv, "GET", "/v1/models/tuned")
    assert status == 200 and body["parent"] == "tiny-chat"
    assert raw_request(srv, "GET", "/health")[0] == 200


def test_chat_with_tools_is_a_well_formed_completion(srv, client, direct):
    messages = chat("Task: click OK")
    r = create(client, srv, messages, tools=CLICK_TOOLS, tool_choice="auto",
               extra_body={"return_token_ids": True})
    choice = r.choices[0]
    assert r.object == "chat.completion" and r.model == "tiny-chat"
    assert choice.message.role == "assistant" and choice.finish_reason in ("stop", "length")
    prompt = direct.prompt_ids(messages, CLICK_TOOLS)
    extra = r.model_extra
    assert extra["prompt_token_ids"] == prompt
    ids = choice.model_extra["token_ids"]
    assert r.usage.prompt_tokens == len(prompt) and r.usage.completion_tokens == len(ids) <= 12
    # The same tokens as the in-process policy, greedy.
    mine = asyncio.run(direct.act(PolicyRequest(messages, CLICK_TOOLS, Sampling(max_tokens=12))))
    assert ids == mine.token_ids and choice.message.content == mine.text

    # A tool call the model writes comes back as message.tool_calls.
    said = "Let me click.\n" + format_tool_call("click", {"ref": 3})
    r = create(client, srv, chat("SAY:" + said), tools=CLICK_TOOLS)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me click."
    [tc] = choice.message.tool_calls
    assert tc.type == "function" and tc.function.name == "click"
    assert json.loads(tc.function.arguments) == {"ref": 3} and tc.id.startswith("call_")
    # tool_choice "none": the tools are shown to the model but the reply is not parsed.
    r = create(client, srv, chat("SAY:" + said), tools=CLICK_TOOLS, tool_choice="none")
    assert r.choices[0].message.tool_calls is None and r.choices[0].message.content == said


def test_a_broken_tool_call_comes_back_as_text(srv, client, direct):
    broken = 'Clicking.\n<tool_call>\n{"name": "click", "arguments": {bad json\n</tool_call>'
    # The splitting function: any malformed block → the whole text, no calls (vLLM's way).
    assert split_reply(broken, True) == (broken, [])
    content, [call] = split_reply("x " + format_tool_call("click", {"ref": 1}), True)
    assert content == "x" and call.name == "click"
    assert split_reply("  plain  ", True) == ("plain", []) and split_reply(" a ", False)[0] == " a "
    assert split_reply(format_tool_call("click", {}), True)[0] is None
    cut = '<tool_call>\n{"name": "click", "arguments": {"ref"'  # cut off by max_tokens
    assert split_reply(cut, True) == (cut, [])

    # The reply builder, on real tokens.
    tok = direct.tokenizer
    ids = tok.encode(broken, add_special_tokens=False) + [tok.eos_token_id]
    req = ChatRequest(model="m", adapter=None, messages=chat("x"), tools=CLICK_TOOLS,
                      parse_tools=True, logprobs=True)
    c = build_completion(PolicyResponse(token_ids=ids, logprobs=[-1.0] * len(ids),
                                        prompt_tokens=5), req, _Vocab(tok), direct.stop_ids)
    assert c.content == broken and c.tool_calls == [] and c.finish_reason == "stop"
    assert c.token_ids == ids and len(c.logprob_entries) == len(ids)

    # And over HTTP: 200, the text as content, no tool calls.
    r = create(client, srv, chat("SAY:" + broken), tools=CLICK_TOOLS)
    assert r.choices[0].message.content == broken
    assert r.choices[0].message.tool_calls is None and r.choices[0].finish_reason == "stop"


def test_streaming_concatenates_to_the_non_streaming_reply(srv, client):
    said = "Let me click.\n" + format_tool_call("click", {"ref": 3})
    cases = [
        ({"messages": chat("Task: type hello")}),  # greedy, no tools
        ({"messages": chat("Task: type hello"), "tools": CLICK_TOOLS,  # sampled: bytes, odd text
          "temperature": 1.0, "seed": 5, "max_tokens": 40}),
        ({"messages": chat("SAY:" + said), "tools": CLICK_TOOLS}),  # text and a tool call
        ({"messages": chat("SAY:naïve café ☕ done"), "max_tokens": 40}),  # multi-byte text
    ]
    for kw in cases:
        whole = create(client, srv, logprobs=True, extra_body={"return_token_ids": True}, **kw)
        stream = create(client, srv, logprobs=True, stream=True,
                        stream_options={"include_usage": True},
                        extra_body={"return_token_ids": True}, **kw)
        text, lps, ids, calls, finish, usage = "", [], [], {}, None, None
        for chunk in stream:
            assert chunk.object == "chat.completion.chunk"
            if chunk.usage is not None:
                usage = chunk.usage
            if not chunk.choices:
                continue
            ch = chunk.choices[0]
            text += ch.delta.content or ""
            if ch.logprobs and ch.logprobs.content:
                lps += [t.logprob for t in ch.logprobs.content]
            ids += (ch.model_extra or {}).get("token_ids") or []
            for d in ch.delta.tool_calls or []:
                c = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
                c["id"] = d.id or c["id"]
                if d.function:
                    c["name"] += d.function.name or ""
                    c["arguments"] += d.function.arguments or ""
            finish = ch.finish_reason or finish
        w = whole.choices[0]
        assert text == (w.message.content or "")
        assert ids == w.model_extra["token_ids"]
        assert lps == [t.logprob for t in w.logprobs.content]
        assert finish == w.finish_reason and usage == whole.usage
        assert [calls[i] for i in sorted(calls)] == [
            {"id": t.id, "name": t.function.name, "arguments": t.function.arguments}
            for t in w.message.tool_calls or []]
    assert "naïve café ☕" in text  # the last case: multi-byte text survives token splits


def test_logprobs_equal_the_forward_pass(srv, client, direct):
    messages = chat("Task: type hello\nPage: [1] input")
    r = create(client, srv, messages, tools=CLICK_TOOLS, temperature=1.0, seed=7, max_tokens=16,
               logprobs=True, top_logprobs=0, extra_body={"return_token_ids": True})
    choice = r.choices[0]
    ids = choice.model_extra["token_ids"]
    served = [t.logprob for t in choice.logprobs.content]
    assert len(ids) == len(served) == r.usage.completion_tokens > 0
    scored = direct.score(messages, ids, CLICK_TOOLS)
    assert max(abs(a - b) for a, b in zip(scored, served, strict=True)) < 1e-4
    prompt = r.model_extra["prompt_token_ids"]
    x = torch.tensor([prompt + ids])
    with torch.no_grad():
        logits = direct.model(input_ids=x).logits[0]
    manual = torch.log_softmax(logits[len(prompt) - 1:-1], -1).gather(
        -1, x[0, len(prompt):, None]).squeeze(-1).tolist()
    assert max(abs(a - b) for a, b in zip(manual, served, strict=True)) < 1e-4
    for entry, tid in zip(choice.logprobs.content, ids, strict=True):
        assert entry.top_logprobs == [] and isinstance(entry.bytes, list)
        if tid not in direct.stop_ids:
            assert bytes(entry.bytes) == _Vocab(direct.tokenizer).token_bytes(tid)
    # Seeded sampling is the in-process policy's, token for token.
    mine = asyncio.run(direct.act(PolicyRequest(messages, CLICK_TOOLS, Sampling(
        temperature=1.0, seed=7, max_tokens=16))))
    assert ids == mine.token_ids


def test_stop_strings_cut_the_text_and_the_tokens(srv, client):
    r = create(client, srv, chat("SAY:first line. second line."), stop=["line."],
               extra_body={"return_token_ids": True})
    c = r.choices[0]
    assert c.message.content == "first " and c.finish_reason == "stop"
    tok_text = "".join(srv.engine.vocab.pieces(c.model_extra["token_ids"]))
    assert tok_text.startswith("first line.") and r.usage.completion_tokens == len(
        c.model_extra["token_ids"])


def test_adapters_are_chosen_by_model_name(srv, client, tiny_chat_dir, lora_adapter_dir):
    messages = chat("Task: click OK")
    ref = HFPolicy(tiny_chat_dir)
    ref.load_adapter("tuned", lora_adapter_dir)
    ref.set_adapter("tuned")
    want = asyncio.run(ref.act(PolicyRequest(messages, None, Sampling(max_tokens=8))))
    base = create(client, srv, messages, max_tokens=8, extra_body={"return_token_ids": True})
    tuned = client.chat.completions.create(
        model="tuned", messages=messages, temperature=0, max_tokens=8, logprobs=True,
        extra_body={"return_token_ids": True})
    assert tuned.model == "tuned"
    assert tuned.choices[0].model_extra["token_ids"] == want.token_ids
    assert base.choices[0].model_extra["token_ids"] != want.token_ids
    served = [t.logprob for t in tuned.choices[0].logprobs.content]
    assert max(abs(a - b) for a, b in zip(served, want.logprobs, strict=True)) < 1e-4


def test_concurrent_requests_share_one_batch(srv, client, monkeypatch):
    sizes = []
    inner = srv.policy._generate
    monkeypatch.setattr(srv.policy, "_generate",
                        lambda batch: sizes.append(len(batch)) or inner(batch))
    # A wide batch-forming window, so a loaded CI machine still sees all four together.
    monkeypatch.setattr(srv.policy, "batch_wait_ms", 500.0)
    prompts = [chat(f"Task: click button {i}") for i in range(4)]
    alone = [create(client, srv, m, max_tokens=6, extra_body={"return_token_ids": True})
             for m in prompts]
    sizes.clear()
    out: list = [None] * 4
    barrier = threading.Barrier(4)

    def go(i):
        barrier.wait()
        out[i] = create(client, srv, prompts[i], max_tokens=6,
                        extra_body={"return_token_ids": True})

    threads = [threading.Thread(target=go, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sizes == [4]  # four HTTP threads, one generate call
    for a, b in zip(alone, out, strict=True):
        assert a.choices[0].model_extra["token_ids"] == b.choices[0].model_extra["token_ids"]


def test_clients_coming_back_apart_still_share_a_batch():
    """The gate: after a batch, requests wait (briefly) for the clients it answered."""

    async def clients(n: int, stagger: float) -> tuple[list[list[float]], list[list[float]]]:
        loop = asyncio.get_running_loop()
        gate = _Gate(max_batch=4, forming_s=0.005, coalesce_s=2.0)
        arrived: list[list[float]] = [[] for _ in range(3)]
        admitted: list[list[float]] = [[] for _ in range(3)]

        async def client(i: int) -> None:
            for rnd in range(3):
                arrived[rnd].append(loop.time())
                await gate.enter()
                admitted[rnd].append(loop.time())
                await asyncio.sleep(0.8)  # the batch generating
                gate.leave()
                await asyncio.sleep(stagger * i)  # HTTP round trips differ by client

        await asyncio.gather(*(client(i) for i in range(n)))
        return arrived, admitted

    # Clients back 0, 10, 20 and 30 ms after each batch: after the first round nobody
    # is admitted before the last of them has arrived (one batch per round, never 3 + 1).
    arrived, admitted = asyncio.run(clients(4, 0.01))
    for rnd in (1, 2):
        assert min(admitted[rnd]) >= max(arrived[rnd])
    # A lone client never waits for company (waiting would cost the 0.2 s coalescing cap).
    arrived, admitted = asyncio.run(clients(1, 0.0))
    for rnd in range(3):
        assert admitted[rnd][0] - arrived[rnd][0] < 0.15


# ------------------------------------------------------------------ errors
def test_unknown_model_is_a_404_that_lists_the_served_names(srv, client):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-9", messages=chat("hi"))
    err = e.value.body
    assert e.value.status_code == 404 and err["code"] == "model_not_found"
    assert "gpt-9" in err["message"] and "tiny-chat, tuned" in err["message"]
    assert err["type"] == "invalid_request_error"

    async def check():
        p = OpenAIPolicy("gpt-9", base_url=srv.base_url)
        try:
            with pytest.raises(PolicyError, match="served: tiny-chat, tuned"):
                await p.act(PolicyRequest(chat("hi")))
        finally:
            await p.aclose()

    asyncio.run(check())


def test_bad_requests_are_400s_with_clear_messages(srv, client):
    status, body, _ = raw_request(srv, "POST", "/v1/chat/completions", b"{not json",
                                  {"Content-Type": "application/json"})
    assert status == 400 and "not valid JSON" in body["error"]["message"]
    bad = [({"n": 2}, "n=1"), ({"top_logprobs": 3, "logprobs": True}, "top_logprobs"),
           ({"tool_choice": "required", "tools": CLICK_TOOLS}, "tool_choice"),
           ({"temperature": 3}, "temperature"), ({"max_tokens": 0}, "max_tokens"),
           ({"messages": []}, "messages"), ({"presence_penalty": 0.5}, "presence_penalty")]
    for extra, word in bad:
        payload = {"model": "tiny-chat", "messages": chat("hi"), **extra}
        status, body, _ = raw_request(srv, "POST", "/v1/chat/completions", payload)
        assert status == 400 and word in body["error"]["message"], (extra, body)
    with pytest.raises(openai.BadRequestError, match="one choice per request"):
        create(client, srv, chat("hi"), n=2)
    assert raw_request(srv, "POST", "/v1/completions", {"model": "tiny-chat"})[0] == 404
    assert raw_request(srv, "GET", "/v1/nothing")[0] == 404
    # A prompt longer than the context: a 400 the openai policy reads as a budget error.
    srv.policy.max_positions, before = 40, srv.policy.max_positions
    try:
        async def long():
            p = OpenAIPolicy("tiny-chat", base_url=srv.base_url)
            try:
                await p.act(PolicyRequest(chat("a prompt much longer than forty tokens " * 4)))
            finally:
                await p.aclose()

        with pytest.raises(ContextLengthExceeded):
            asyncio.run(long())
    finally:
        srv.policy.max_positions = before


def test_bearer_token_is_enforced(tiny_chat_dir):
    with ServerThread(tiny_chat_dir, api_key=KEY) as s:
        for key in ("EMPTY", KEY[:-1] + "x"):
            c = openai.OpenAI(base_url=s.base_url, api_key=key, max_retries=0)
            with pytest.raises(openai.AuthenticationError):
                c.models.list()
            with pytest.raises(openai.AuthenticationError):
                c.chat.completions.create(model="tiny-chat", messages=chat("hi"), max_tokens=2)
        status, body, headers = raw_request(s, "GET", "/v1/models")
        assert status == 401 and "Authorization: Bearer" in body["error"]["message"]
        assert KEY not in json.dumps(body)
        assert raw_request(s, "GET", "/health")[0] == 200
        c = openai.OpenAI(base_url=s.base_url, api_key=KEY, max_retries=0)
        assert [m.id for m in c.models.list().data] == ["tiny-chat"]
        r = c.chat.completions.create(model="tiny-chat", messages=chat("hi"), max_tokens=2)
        assert r.usage.completion_tokens >= 1


def test_bad_model_dir_is_one_clear_line(tmp_path, srv):
    with pytest.raises(PolicyError) as e:
        serve_main(str(tmp_path / "missing"), port=0)
    line = e.value.line()
    assert "\n" not in line and "no model directory" in line and "tackroom model init" in line
    (tmp_path / "empty").mkdir()
    with pytest.raises(PolicyError, match="no config.json"):
        ServerThread(tmp_path / "empty")
    with pytest.raises(ConfigError, match="cannot listen"):  # the port is taken
        ServerThread(policy=srv.policy, port=srv.port)
    with socket.socket() as s:  # and the failed start left the running server alone
        s.connect(("127.0.0.1", srv.port))


def test_serve_main_serves_until_interrupted(tiny_chat_dir):
    """The CLI's entry point, as a process: it blocks, serves, and stops cleanly on SIGTERM."""
    port = free_port()
    code = f"from tackroom.serve import serve_main; serve_main({str(tiny_chat_dir)!r}, port={port})"
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 45
        while True:
            try:
                c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="EMPTY",
                                  max_retries=0, timeout=5)
                assert [m.id for m in c.models.list().data] == ["tiny-chat"]
                break
            except openai.APIConnectionError:
                assert proc.poll() is None and time.monotonic() < deadline, "did not start"
                time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read()
    assert f"tiny-chat at http://127.0.0.1:{port}/v1" in err and "stopped" in err
    assert "Traceback" not in err


# ------------------------------------------------------- through the runner
def _short(tmp_path, base: str):
    # No wall-clock budget: its "N s left" in every prompt would make the two runs'
    # prompts, and so their log-probs, depend on how loaded the machine is.
    path = tmp_path / f"{base}-short.toml"
    path.write_text(f'extends = "{base}"\n[budget]\nturns = 3\nwall_seconds = 0\n')
    return load_harness(str(path))


@pytest.mark.parametrize("sampling", [
    Sampling(max_tokens=16, logprobs=True),  # greedy
    Sampling(max_tokens=16, temperature=1.0, seed=5, logprobs=True),  # seeded: varied text
], ids=["greedy", "seeded"])
def test_served_episodes_equal_in_process_episodes(tiny_chat_dir, tmp_path, sampling):
    suite = get_suite("toy")
    tasks = [t for t in suite.tasks() if t.id in ("click-button", "enter-text")]
    harnesses = [_short(tmp_path, "som-tools"), _short(tmp_path, "html-commands")]
    seeds = [0, 1]

    async def run(policy):
        plan = plan_grid(tasks, harnesses, [policy], seeds, sampling)
        # One episode at a time, so both sides generate every turn alone: the hf
        # backend's log-probs depend on its batch's padding by up to ~1e-3 on
        # 800-token prompts, and that is not what this test is about (batching
        # across HTTP threads is test_concurrent_requests_share_one_batch's).
        eps = await run_cells(plan.cells, suite, "run", concurrency=1)
        return {(e.task, e.harness, e.seed): e for e in eps}

    with ServerThread(tiny_chat_dir, batch_wait_ms=5) as s:
        async def served():
            policy = OpenAIPolicy(s.model_name, base_url=s.base_url)
            try:
                await policy.check()
                return await run(policy)
            finally:
                await policy.aclose()

        over_http = asyncio.run(served())
    # A fresh in-process policy, like the fresh server: both start with no cached system
    # blocks. (The module's shared policy holds blocks cached by earlier tests' batches,
    # whose composition depends on timing; reusing them moves log-probs by ~1e-3.)
    direct = HFPolicy(tiny_chat_dir)

    async def in_process_run():
        try:
            return await run(direct)
        finally:
            await direct.aclose()

    in_process = asyncio.run(in_process_run())
    assert over_http.keys() == in_process.keys() and len(in_process) == 8
    for key, a in over_http.items():
        b = in_process[key]
        assert (a.outcome, a.reward, a.n_turns, a.error) == (b.outcome, b.reward, b.n_turns,
                                                             b.error), key
        for ta, tb in zip(a.turns, b.turns, strict=True):
            assert ta.messages == tb.messages, key
            assert (ta.raw_text, ta.tool_calls, ta.parse_error, ta.actions, ta.token_ids) == \
                   (tb.raw_text, tb.tool_calls, tb.parse_error, tb.actions, tb.token_ids), key
            assert (ta.prompt_tokens, ta.completion_tokens) == (tb.prompt_tokens,
                                                                tb.completion_tokens)
            assert max(abs(x - y) for x, y in zip(ta.logprobs, tb.logprobs, strict=True)) < 1e-4
