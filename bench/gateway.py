"""Per-call overhead of the recording model gateway (a benchmark, not a test).

Everything runs side by side in one process and one event loop, on the same
requests, interleaved round by round (medians reported), so machine load hits
every variant alike:

1. **Fixed policy** (an in-process Policy that returns the same reply at once):
   (a) ``policy.act`` called directly; (b) through the gateway by a raw HTTP/1.1
   keep-alive client (pre-built request bytes, one ``json.loads`` of the reply)
   over TCP and (c) over the Unix socket; (d) through the gateway by the
   ``openai`` SDK (``AsyncOpenAI``), non-streaming and (e) streaming.
   Gateway overhead per call = (b) − (a): HTTP parsing, auth, request reading,
   recording the turn, the reply's JSON, the socket round trip — and the raw
   client's own few microseconds, so it is an upper bound. (d) − (b) is the SDK's
   own cost, which a CLI pays against any server. Target: (b) − (a) < 2 ms.
2. **OpenAIPolicy over HTTP**: the same calls directly and through the gateway
   (raw client), against a :class:`ScriptedOpenAIServer` (a real HTTP backend in
   a thread, ~40 ms a request of its own) and against a second gateway over the
   fixed policy (an OpenAI-compatible server with next to no latency).
3. **Concurrency**: ``--clients`` raw clients at once, each on its own route;
   calls/s through the gateway vs ``asyncio.gather`` of direct calls.
4. **API dialects**: the same conversation (system prompt, a tool call and its
   result, one tool) sent in every registered dialect's own request shape
   (chat completions, Anthropic Messages, OpenAI Responses, Gemini, ...), by raw
   keep-alive clients in a child process, at 1 and at 256 concurrent routes (one
   client each), the dialects taking turns in short bursts. Per call: the
   gateway's CPU time (``time.process_time`` of its process: the clients are
   elsewhere) and the added latency (a call's median wall time as its client
   saw it, minus a direct ``policy.act``'s), each also as a ratio to chat
   completions; then each dialect's translation alone (request to chat body,
   reply shaped), in-process. Targets: <= 1 ms CPU per call, <= 1.3x chat.

Usage: .venv/bin/python bench/gateway.py [--calls 500] [--rounds 5] [--clients 8]
       [--only dialects]

The start-up of each agent CLI in the sandbox behind the gateway is bench/agents.py's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import openai

from tackroom.core.policy import PolicyRequest, PolicyResponse, Sampling, ToolCall
from tackroom.gateway import ModelGateway

MESSAGES = [
    {"role": "system", "content": "You are a coding agent. Use the bash tool. " * 20},
    {"role": "user", "content": "The tests in tests/test_parser.py fail; fix the bug."},
    {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "bash", "arguments": '{"cmd": "pytest -q tests/test_parser.py"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "FAILED test_parser.py::test_x\n" * 30},
]
TOOLS = [{"type": "function", "function": {
    "name": "bash", "description": "Run a shell command.",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}},
                   "required": ["cmd"]}}}]
SAMPLING = Sampling(temperature=0.0, max_tokens=256, seed=0)


class FixedPolicy:
    """Answers every request at once with the same text and tool call."""

    id = "fixed"

    def __init__(self) -> None:
        self.response = PolicyResponse(
            text="Let me look at the parser.",
            tool_calls=[ToolCall("call_2", "bash", '{"cmd": "sed -n 1,80p parser.py"}')],
            prompt_tokens=900, completion_tokens=24, token_ids=list(range(24)),
            logprobs=[-0.5] * 24)

    async def act(self, request: PolicyRequest) -> PolicyResponse:
        return self.response

    async def aclose(self) -> None:
        pass


class RawClient:
    """A minimal keep-alive HTTP/1.1 client: pre-built request bytes, Content-Length replies."""

    def __init__(self, token: str, body: dict, path: str = "/v1/chat/completions") -> None:
        data = json.dumps(body).encode()
        self.request = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(data)}\r\n\r\n").encode() + data
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def connect(self, port: int | None = None, path: str | None = None) -> RawClient:
        if path is not None:
            self.reader, self.writer = await asyncio.open_unix_connection(path)
        else:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", port)
        return self

    async def call(self) -> dict:
        assert self.reader is not None and self.writer is not None
        self.writer.write(self.request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(head.decode(errors="replace"))
        i = head.lower().index(b"content-length:") + len(b"content-length:")
        n = int(head[i:head.index(b"\r\n", i)])
        return json.loads(await self.reader.readexactly(n))

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def per_call(fn, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        await fn()
    return (time.perf_counter() - t0) / n


async def fixed_section(calls: int, rounds: int) -> None:
    policy = FixedPolicy()
    request = PolicyRequest(messages=MESSAGES, tools=TOOLS, sampling=SAMPLING)
    body = {"model": "tackroom", "messages": MESSAGES, "tools": TOOLS, "temperature": 0.7}
    print(f"\n== fixed in-process policy: {calls} calls x {rounds} rounds, one client ==")
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="gwb") as d:
        sock = str(Path(d) / "gw.sock")
        async with ModelGateway(policy, unix_socket=sock) as gw:
            route = gw.open_episode(SAMPLING)
            tcp = await RawClient(route.token, body).connect(port=gw.port)
            uds = await RawClient(route.token, body).connect(path=sock)
            sdk = openai.AsyncOpenAI(base_url=route.base_url, api_key=route.token,
                                     max_retries=0)

            async def direct():
                await policy.act(request)

            async def sdk_call():
                await sdk.chat.completions.create(**body)

            async def sdk_stream():
                async for _ in await sdk.chat.completions.create(**body, stream=True):
                    pass

            variants = {"direct policy.act": direct, "gateway, raw client, TCP": tcp.call,
                        "gateway, raw client, Unix": uds.call,
                        "gateway, openai SDK": sdk_call,
                        "gateway, openai SDK, stream": sdk_stream}
            for fn in variants.values():  # warm up
                await per_call(fn, 20)
            times: dict[str, list[float]] = {k: [] for k in variants}
            for _ in range(rounds):
                for name, fn in variants.items():
                    times[name].append(await per_call(fn, calls))
            await tcp.close()
            await uds.close()
            await sdk.close()
            assert len(route.turns) == (len(variants) - 1) * (calls * rounds + 20)
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["direct policy.act"]
    raw_tcp = med["gateway, raw client, TCP"]
    for name, t in med.items():
        extra = "" if name.startswith("direct") else f"   +{1e3 * (t - base):6.3f} ms vs direct"
        print(f"{name:<30} {1e3 * t:8.3f} ms/call{extra}")
    print(f"gateway overhead per call (raw TCP - direct): {1e3 * (raw_tcp - base):.3f} ms "
          "(target < 2 ms)")
    print(f"openai SDK's own cost (SDK - raw TCP):        "
          f"{1e3 * (med['gateway, openai SDK'] - raw_tcp):.3f} ms")


async def openai_section(calls: int, rounds: int) -> None:
    """OpenAIPolicy over HTTP: directly vs through the gateway, for two backends."""
    import contextlib

    from tackroom.policies.openai_policy import OpenAIPolicy
    from tackroom.testing import ScriptedOpenAIServer, tool_call

    request = PolicyRequest(messages=MESSAGES, tools=TOOLS, sampling=SAMPLING)
    body = {"model": "tackroom", "messages": MESSAGES, "tools": TOOLS}
    reply = tool_call("bash", {"cmd": "sed -n 1,80p parser.py"})
    print(f"\n== OpenAIPolicy over HTTP: {calls} calls x {rounds} rounds ==")
    async with contextlib.AsyncExitStack() as stack:
        scripted = stack.enter_context(ScriptedOpenAIServer([], default=reply))
        # A second gateway over the fixed policy: an OpenAI server with no latency of its own.
        fast = await stack.enter_async_context(ModelGateway(FixedPolicy()))
        fast_route = fast.open_episode(SAMPLING)
        backends = {"ScriptedOpenAIServer": (scripted.base_url, "EMPTY"),
                    "a gateway over the fixed policy": (fast_route.base_url, fast_route.token)}
        for name, (url, key) in backends.items():
            policy = OpenAIPolicy("scripted", base_url=url, api_key=key, max_retries=0)
            async with ModelGateway(policy) as gw:
                route = gw.open_episode(SAMPLING)
                raw = await RawClient(route.token, body).connect(port=gw.port)

                async def direct(policy=policy):
                    await policy.act(request)

                variants = {"direct": direct, "gateway": raw.call}
                for fn in variants.values():
                    await per_call(fn, 10)
                times: dict[str, list[float]] = {k: [] for k in variants}
                for _ in range(rounds):
                    for k, fn in variants.items():
                        times[k].append(await per_call(fn, calls))
                await raw.close()
            await policy.aclose()
            a, b = (statistics.median(times[k]) for k in variants)
            print(f"backend: {name}")
            print(f"  direct policy.act            {1e3 * a:8.3f} ms/call")
            print(f"  gateway, raw client, TCP     {1e3 * b:8.3f} ms/call   +{1e3 * (b - a):6.3f} "
                  f"ms vs direct  (ratio {b / a:.2f})")
    print("  (the scripted server takes ~40 ms a request of its own, with any HTTP client; "
          "the second backend shows the gateway's cost in front of OpenAIPolicy)")


async def concurrency_section(clients: int, calls: int, rounds: int) -> None:
    policy = FixedPolicy()
    request = PolicyRequest(messages=MESSAGES, tools=TOOLS, sampling=SAMPLING)
    body = {"model": "tackroom", "messages": MESSAGES, "tools": TOOLS}
    print(f"\n== {clients} concurrent clients (own route each), {calls} calls each ==")
    async with ModelGateway(policy) as gw:
        routes = [gw.open_episode(SAMPLING, label=str(k)) for k in range(clients)]
        raws = [await RawClient(r.token, body).connect(port=gw.port) for r in routes]

        async def direct_all():
            async def one():
                for _ in range(calls):
                    await policy.act(request)
            await asyncio.gather(*(one() for _ in range(clients)))

        async def gateway_all():
            async def one(c):
                for _ in range(calls):
                    await c.call()
            await asyncio.gather(*(one(c) for c in raws))

        d, g = [], []
        for _ in range(rounds):
            t0 = time.perf_counter()
            await direct_all()
            d.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await gateway_all()
            g.append(time.perf_counter() - t0)
        for c in raws:
            await c.close()
        assert all(len(r.turns) == calls * rounds for r in routes)
    total = clients * calls
    rd, rg = total / statistics.median(d), total / statistics.median(g)
    print(f"direct gather                  {rd:10.0f} calls/s")
    print(f"gateway, raw clients           {rg:10.0f} calls/s   "
          f"({1e3 / rg:.3f} ms of gateway time per call)")


def dialect_requests() -> dict[str, tuple[str, dict]]:
    """MESSAGES and TOOLS in each dialect's own request shape: ``name -> (path, body)``."""
    system, user, _call, result = MESSAGES
    cmd = {"cmd": "pytest -q tests/test_parser.py"}
    fn = TOOLS[0]["function"]
    return {
        "chat": ("/v1/chat/completions", {"model": "tackroom", "messages": MESSAGES,
                                          "tools": TOOLS, "temperature": 0.7}),
        "anthropic": ("/v1/messages", {
            "model": "tackroom", "max_tokens": 256, "system": system["content"],
            "tools": [{"name": fn["name"], "description": fn["description"],
                       "input_schema": fn["parameters"]}],
            "messages": [
                {"role": "user", "content": user["content"]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": cmd}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                              "content": result["content"]}]}]}),
        "responses": ("/v1/responses", {
            "model": "tackroom", "instructions": system["content"],
            "tools": [{"type": "function", "name": fn["name"],
                       "description": fn["description"], "parameters": fn["parameters"]}],
            "input": [
                {"type": "message", "role": "user",
                 "content": [{"type": "input_text", "text": user["content"]}]},
                {"type": "function_call", "call_id": "call_1", "name": "bash",
                 "arguments": json.dumps(cmd)},
                {"type": "function_call_output", "call_id": "call_1",
                 "output": result["content"]}]}),
        "gemini": ("/v1beta/models/tackroom:generateContent", {
            "systemInstruction": {"parts": [{"text": system["content"]}]},
            "tools": [{"functionDeclarations": [{
                "name": fn["name"], "description": fn["description"],
                "parametersJsonSchema": fn["parameters"]}]}],
            "contents": [
                {"role": "user", "parts": [{"text": user["content"]}]},
                {"role": "model", "parts": [{"functionCall": {"name": "bash", "args": cmd}}]},
                {"role": "user", "parts": [{"functionResponse": {
                    "name": "bash", "response": {"output": result["content"]}}}]}]}),
    }


async def dialect_section(calls: int, rounds: int, widths: tuple[int, ...] = (1, 256)) -> None:
    """Every registered dialect against chat completions, at each concurrency, side by side."""
    from tackroom.core.registry import names

    requests = {k: v for k, v in dialect_requests().items() if k in names("dialect")}
    policy = FixedPolicy()
    request = PolicyRequest(messages=MESSAGES, tools=TOOLS, sampling=SAMPLING)
    t0 = time.perf_counter()
    for _ in range(200):
        await policy.act(request)
    direct = (time.perf_counter() - t0) / 200
    print(f"\n== API dialects: the same call in each ({', '.join(requests)}), "
          f"{rounds} rounds ==")
    rows: list[tuple[int, str, float, float]] = []
    # The clients run in a child process, so this process's CPU time is the gateway's
    # alone. Kept-alive clients wait while the other dialects run: on a loaded machine,
    # longer than the default 30 s a connection may stay idle.
    child = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--dialect-clients", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE)

    async def ask(command: dict) -> dict:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(json.dumps(command).encode() + b"\n")
        await child.stdin.drain()
        return json.loads(await child.stdout.readline())

    async with ModelGateway(policy, read_timeout=3600) as gw:
        for width in widths:
            # Short bursts, the dialects taking turns, so drifting machine load hits all alike.
            n, segments = (max(1, calls // 8), 8 * rounds) if width == 1 else (2, 2 * rounds)
            for name, (path, body) in requests.items():
                tokens = [gw.open_episode(SAMPLING, label=f"{name}-{k}").token
                          for k in range(width)]
                await ask({"connect": name, "port": gw.port, "path": path, "body": body,
                           "tokens": tokens})
            for name in requests:  # warm up
                await ask({"burst": name, "n": n})
            cpu: dict[str, list[float]] = {k: [] for k in requests}
            lat: dict[str, list[float]] = {k: [] for k in requests}
            for _ in range(segments):
                for name in requests:
                    c0 = time.process_time()
                    got = await ask({"burst": name, "n": n})
                    cpu[name].append((time.process_time() - c0) / got["calls"])
                    lat[name].append(got["median"] - direct)
            await ask({"close": True})
            for r in gw.routes:
                gw.close_episode(r.token)
            for name in requests:
                rows.append((width, name, statistics.median(cpu[name]),
                             statistics.median(lat[name])))
    assert child.stdin is not None
    child.stdin.close()
    await child.wait()
    print(f"{'routes':>6}  {'dialect':<10} {'CPU/call':>10} {'x chat':>7} "
          f"{'added latency':>14} {'x chat':>7}")
    for width, name, c, lt in rows:
        chat = next(r for r in rows if r[0] == width and r[1] == "chat")
        print(f"{width:>6}  {name:<10} {1e3 * c:7.3f} ms {c / chat[2]:6.2f}x "
              f"{1e3 * lt:11.3f} ms {lt / chat[3]:6.2f}x")
    # The dialects' own work, alone (no HTTP, no event loop): what differs between them.
    from tackroom.wire import Shape, dumps, from_response, loads, parse_chat
    from tackroom.wire.dialect import find

    own: dict[str, float] = {}
    for name, (path, body) in requests.items():
        dialect, _route, match = find("POST", path) or (None, None, None)
        assert dialect is not None and match is not None
        raw = json.dumps(body).encode()
        laps = []
        for _ in range(rounds):
            c0 = time.process_time()
            for _ in range(calls):
                sent = loads(raw)
                parse_chat(dialect.to_chat(sent, match))
                dumps(dialect.reply(from_response(policy.response, logprobs=False),
                                    Shape("tackroom"), sent))
            laps.append((time.process_time() - c0) / calls)
        own[name] = statistics.median(laps)
    print("the translation alone (request -> chat body, reply shaped; CPU per call):")
    for name, t in own.items():
        print(f"        {name:<10} {1e6 * t:7.1f} us {t / own['chat']:6.2f}x")
    print("targets: <= 1 ms CPU per call per dialect; the other dialects <= 1.3x chat "
          "completions")


async def dialect_clients() -> None:
    """The child of :func:`dialect_section`: keep-alive clients per dialect, run on command."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    clients: dict[str, list[RawClient]] = {}
    while line := await reader.readline():
        command = json.loads(line)
        answer: dict = {}
        if "connect" in command:
            clients[command["connect"]] = mine = []
            for token in command["tokens"]:  # one call each at once: identified by its token
                c = await RawClient(token, command["body"], command["path"]).connect(
                    port=command["port"])
                await c.call()
                mine.append(c)
        elif "burst" in command:
            laps: list[float] = []

            async def one(c: RawClient, n: int = command["n"], laps: list = laps) -> None:
                for _ in range(n):
                    t = time.perf_counter()
                    await c.call()
                    laps.append(time.perf_counter() - t)

            await asyncio.gather(*(one(c) for c in clients[command["burst"]]))
            answer = {"median": statistics.median(laps), "calls": len(laps)}
        else:
            for raws in clients.values():
                for c in raws:
                    await c.close()
            clients.clear()
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


async def main(args: argparse.Namespace) -> None:
    if args.dialect_clients:
        await dialect_clients()
        return
    if args.only in (None, "fixed"):
        await fixed_section(args.calls, args.rounds)
    if args.only in (None, "openai"):
        await openai_section(max(10, args.calls // 5), args.rounds)
    if args.only in (None, "concurrency"):
        await concurrency_section(args.clients, max(10, args.calls // 5), args.rounds)
    if args.only in (None, "dialects"):
        await dialect_section(args.calls, args.rounds)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--only", choices=["fixed", "openai", "concurrency", "dialects"],
                   help="run one section only")
    p.add_argument("--dialect-clients", action="store_true", help=argparse.SUPPRESS)
    asyncio.run(main(p.parse_args()))
