"""The gateway under load and under one hostile client, on 127.0.0.1 only.

A run with N agent episodes in flight has N routes, each with a call waiting on
the model. One client that opens hundreds of connections and never authenticates
must not take their places: the gateway limits unauthenticated connections (per
peer and in all) and closes idle ones long before they can crowd out a route,
sizes its capacity to the routes open, and makes a legitimate call wait (for
request-body memory, for a connection slot) instead of answering 503.

Bounded in count (1,024 routes, 500 idle connections) and in time (every wait has
a bound; the test stops by itself); it asserts outcomes, never a duration.
"""

from __future__ import annotations

import asyncio
import json
import resource

from tackroom.core.policy import PolicyResponse, Sampling
from tackroom.gateway import ModelGateway

ROUTES = 1024
IDLE = 500
WAIT = 90.0  # seconds: the bound on the whole exchange, never a timing assertion


class Barrier:
    """A policy that holds every call until ``n`` are in flight at once, then answers them.

    ``peak`` is the most calls it held at once: ``n`` proves that every route had
    its call in flight together. (After ``WAIT`` it answers anyway, so a lost call
    fails the test's assertions instead of hanging it.)
    """

    id = "barrier"

    def __init__(self, n: int) -> None:
        self.n, self.held, self.peak, self.lost = n, 0, 0, 0
        self.full = asyncio.Event()

    def check(self) -> None:
        if self.held + self.lost >= self.n:  # every call is here, or will never come
            self.full.set()

    def call_lost(self) -> None:
        """A call the client saw fail: do not wait for it."""
        self.lost += 1
        self.check()

    async def act(self, request):
        self.held += 1
        self.peak = max(self.peak, self.held)
        self.check()
        try:
            await asyncio.wait_for(self.full.wait(), WAIT)
        except TimeoutError:
            pass
        finally:
            self.held -= 1
        said = request.messages[-1]["content"]
        return PolicyResponse(text=f"answer to {said}", prompt_tokens=3, completion_tokens=3)

    async def aclose(self):
        return None


def enough_file_descriptors(needed: int) -> None:
    """Raise this process's soft ``RLIMIT_NOFILE`` to ``needed`` (within the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        top = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (top, hard))


async def idle_client(port: int, k: int, opened: list) -> None:
    """One hostile connection: half ask ``GET /v1/models`` without a token, then all go idle."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    opened.append(writer)
    if k % 2:
        writer.write(b"GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n")
        await writer.drain()


async def call(port: int, token: str, k: int, policy: Barrier) -> tuple[int, bytes]:
    """One legitimate chat call; the policy is told when it failed (it need not wait)."""
    status, body = await _call(port, token, k)
    if status != 200:
        policy.call_lost()
    return status, body


async def _call(port: int, token: str, k: int) -> tuple[int, bytes]:
    """One legitimate chat call on a fresh connection: ``(status, body)``; 0 if cut off."""
    body = json.dumps({"model": "tackroom",
                       "messages": [{"role": "user", "content": f"route {k}"}]}).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {token}"
            f"\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as e:
        return 0, f"connect: {e}".encode()
    try:
        writer.write(head.encode() + body)
        await writer.drain()
        status_line = await reader.readline()
        headers = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if not status_line:
            return 0, b"closed without an answer"
        got = await reader.readexactly(int(headers.get("content-length", "0")))
        return int(status_line.split()[1]), got
    except (OSError, asyncio.IncompleteReadError) as e:
        return 0, f"{type(e).__name__}: {e}".encode()
    finally:
        writer.close()


async def test_1024_routes_in_flight_beside_500_idle_unauthenticated_connections():
    enough_file_descriptors(4 * (ROUTES + IDLE) + 256)  # both ends of each, plus slack
    policy = Barrier(ROUTES)
    async with ModelGateway(policy) as gw:
        routes = [gw.open_episode(Sampling(), label=f"ep{k}") for k in range(ROUTES)]
        opened: list[asyncio.StreamWriter] = []
        try:
            async with asyncio.timeout(WAIT):
                # One client floods the gateway with connections that never authenticate.
                await asyncio.gather(*(idle_client(gw.port, k, opened) for k in range(IDLE)))
                results = await asyncio.gather(*(call(gw.port, r.token, k, policy)
                                                 for k, r in enumerate(routes)))
        finally:
            for w in opened:
                w.close()
        bad = [(k, status, body[:200]) for k, (status, body) in enumerate(results)
               if status != 200]
        assert not bad, f"{len(bad)} of {ROUTES} legitimate calls failed, e.g. {bad[:5]}"
        assert policy.peak == ROUTES  # every route had its call in flight at once
        for k, (route, (_, body)) in enumerate(zip(routes, results, strict=True)):
            assert json.loads(body)["choices"][0]["message"]["content"] == f"answer to route {k}"
            assert [t.raw_text for t in route.turns] == [f"answer to route {k}"]
