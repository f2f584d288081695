"""Model calls per second at 64 / 256 / 1024 episodes in flight (a benchmark, not a test).

A fixed-latency OpenAI-compatible server runs on 127.0.0.1 in its own process:
every chat completion is answered after ``--latency`` seconds (0.5) with a text
reply without a tool call, so each ``som-tools`` episode of the toy suite runs
exactly ``max_consecutive_errors`` (5) turns of malformed output and fails —
five model calls, and the harness, parser, feedback and record store all work
every turn. The server is a bare :class:`asyncio.Protocol` that reads only the
request line and ``Content-Length`` (no JSON, no HTTP library), so it is not
the bottleneck of what it measures.

For each client (``lean``, the default, and ``sdk``, the official ``openai``
SDK) and each ``-n``, a fresh process runs ``tackroom.evaluate`` with
``concurrency = max_concurrency = n`` over ``n × --rounds`` episodes, so that
``n`` episodes are in flight from first call to last. Printed per row:

* calls/s and its fraction of the ideal ``n / latency`` (wall time from the
  run's start, after planning and the server check, to its end);
* client CPU per call: the process's user + system CPU over the run / calls
  (everything: runner, harness, environments, record store, the client, and the
  record converter process);
* peak memory: the process's ``ru_maxrss``, and per episode in flight (``KiB/ep``):
  (peak − the resident memory when the run started) / ``n``. At small ``n`` that is
  mostly the run's fixed costs, so the lines under the table give the slope between
  rows, what one more episode in flight costs: it stays the same with more
  ``--rounds`` when finished episodes are let go;
* threads: the most threads the process had while episodes finished (no thread per
  episode: it stays flat as ``n`` grows);
* conv MiB: the peak memory of the record converter process, which makes the rows from
  ``OFFLOAD_AT`` (256) episodes in flight on (``tackroom.records.converter``; 0 below,
  where the writer thread does it). CPU per call counts its CPU too.

Usage: .venv/bin/python bench/concurrency.py [--n 64,256,1024] [--clients lean,sdk]
       [--latency 0.5] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

MODEL = "M"
TURNS_PER_EPISODE = 5  # som-tools' max_consecutive_errors: five malformed turns, then failure


# ------------------------------------------------------------------ the server
def _reply(status: bytes, body: bytes) -> bytes:
    return (b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def _completion(model: str) -> bytes:
    body: dict[str, Any] = {
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                     "message": {"role": "assistant", "content": "Let me look at the page."}}],
        "usage": {"prompt_tokens": 200, "completion_tokens": 7, "total_tokens": 207},
    }
    return json.dumps(body).encode()


class _Conn(asyncio.Protocol):
    """One keep-alive connection; requests are answered in order (pipelining works)."""

    def __init__(self, server: LatencyServer) -> None:
        self.server = server
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.tail: asyncio.Future[None] | None = None  # the last scheduled reply, for order

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end]
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length:]
            target = head.split(b" ", 2)[1] if b" " in head else b""
            self._answer(head[:4] == b"POST", target)

    def _answer(self, post: bool, target: bytes) -> None:
        srv = self.server
        if post and target.endswith(b"/chat/completions"):
            srv.calls += 1
            srv.arrivals.append(time.monotonic())
            out, delay = srv.completion, srv.latency
        elif target == b"/bench/arrivals":  # for the table's steady-state rate; then reset
            times, srv.arrivals = srv.arrivals, []
            out, delay = _reply(b"200 OK", json.dumps(times).encode()), 0.0
        elif target.rstrip(b"/").endswith(b"/models"):
            out, delay = srv.models, 0.0
        else:
            out, delay = _reply(b"404 Not Found", b'{"error": {"message": "no route"}}'), 0.0
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        prev = self.tail
        self.tail = done

        def write() -> None:
            # A reply written before the one ahead of it would break HTTP/1.1's order.
            if prev is not None and not prev.done():
                prev.add_done_callback(lambda _f: write())
                return
            if self.transport is not None and not self.transport.is_closing():
                self.transport.write(out)
            done.set_result(None)

        loop.call_later(delay, write) if delay else write()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


class LatencyServer:
    """``latency`` seconds per chat completion, on ``host:port`` (0: a free port)."""

    def __init__(self, latency: float = 0.5, model: str = "M") -> None:
        self.latency = latency
        self.completion = _reply(b"200 OK", _completion(model))
        self.models = _reply(b"200 OK", json.dumps(
            {"object": "list", "data": [{"id": model, "object": "model"}]}).encode())
        self.calls = 0
        self.arrivals: list[float] = []  # when each chat completion arrived (monotonic)

    async def serve(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Conn(self), sock=sock, backlog=4096)
        async with server:
            await server.serve_forever()


def _run(sock: socket.socket, latency: float, model: str) -> None:
    asyncio.run(LatencyServer(latency, model).serve(sock))


def serve_in_process(latency: float = 0.5, model: str = "M") -> tuple[mp.Process, str]:
    """Start the server in a child process; ``(process, base_url)`` (terminate it when done)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4096)
    port = sock.getsockname()[1]
    proc = mp.get_context("fork").Process(target=_run, args=(sock, latency, model),
                                          daemon=True)
    proc.start()
    sock.close()  # the child holds its own copy
    return proc, f"http://127.0.0.1:{port}/v1"



# ------------------------------------------------------------------ one cell
def _cpu() -> float:
    """CPU seconds of this process and of its children that ended (the record converter)."""
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))


def _rss_mib() -> float:
    """Resident memory of this process now (Linux ``/proc``; 0 elsewhere)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except OSError:
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def one(client: str, n: int, base_url: str, rounds: int) -> dict[str, Any]:
    """Run the grid for one client and ``n`` in this process; what the table shows."""
    import threading

    import tackroom

    calls = 0
    threads = 0
    outcomes: dict[str, int] = {}
    started: list[tuple[float, float, float]] = []

    # The converter's own peak (VmHWM), read just before it is ended: RUSAGE_CHILDREN's
    # ru_maxrss would also count any short-lived fork at this process's size.
    from tackroom.records.converter import RowConverter
    converter_peak = [0.0]
    close = RowConverter.close

    def closing(self: Any) -> None:
        proc = getattr(self, "_proc", None)
        if proc is not None:
            try:
                for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        converter_peak[0] = max(converter_peak[0], int(line.split()[1]) / 1024)
            except OSError:
                pass
        close(self)

    RowConverter.close = closing  # type: ignore[method-assign]

    def on_start(_start: Any) -> None:
        started.append((time.perf_counter(), _cpu(), _rss_mib()))

    def on_episode(ep: Any) -> None:
        nonlocal calls, threads
        calls += ep.n_turns
        threads = max(threads, threading.active_count())
        outcomes[ep.outcome.value] = outcomes.get(ep.outcome.value, 0) + 1

    with tempfile.TemporaryDirectory() as tmp:
        tackroom.evaluate(
            suite="toy", tasks=["click-button"], harnesses=["som-tools"],
            policies=[f"openai:{MODEL}"], seeds=range(n * rounds), base_url=base_url,
            concurrency=n, timeout=60.0, store=Path(tmp) / "bench.duckdb",
            policy_options={"max_concurrency": n, "client": client},
            on_start=on_start, on_episode=on_episode)
        wall, cpu = time.perf_counter() - started[0][0], _cpu() - started[0][1]
    return {"client": client, "n": n, "calls": calls, "wall_s": wall, "cpu_s": cpu,
            "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "child_mib": converter_peak[0],
            "start_rss_mib": started[0][2], "threads": threads, "outcomes": outcomes}


def _steady_rate(times: list[float], n: int) -> float:
    """Calls per second between the first call of the second turn and that of the last.

    The first ``n`` calls (the run starting: connections opened, environments
    reset) and the last ``n`` (the last turn, then the records flushed) are left
    out, so that this is the rate the run sustains while every slot is busy.
    """
    if len(times) <= 2 * n or times[-n] <= times[n]:
        return float("nan")
    return (len(times) - 2 * n) / (times[-n] - times[n])


def _proc_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", default="64,256,1024", help="episodes in flight, comma-separated")
    ap.add_argument("--clients", default="lean,sdk")
    ap.add_argument("--latency", type=float, default=0.5, help="seconds per model call")
    ap.add_argument("--rounds", type=int, default=2, help="episodes per slot of -n")
    ap.add_argument("--one", nargs=2, metavar=("CLIENT", "BASE_URL"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    ns = [int(x) for x in a.n.split(",")]
    if a.one:  # a child: one cell, its result as JSON on the last line
        print(json.dumps(one(a.one[0], ns[0], a.one[1], a.rounds)))
        return
    server, base_url = serve_in_process(a.latency, MODEL)
    try:
        time.sleep(0.3)
        rows = []
        for n in ns:
            for client in a.clients.split(","):
                server_cpu = _proc_cpu(server.pid or 0)
                proc = subprocess.run(
                    [sys.executable, __file__, "--one", client, base_url, "--n", str(n),
                     "--rounds", str(a.rounds)], capture_output=True, text=True,
                    env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
                if proc.returncode != 0:
                    sys.exit(f"{client} n={n} failed:\n{proc.stderr[-3000:]}")
                row = json.loads(proc.stdout.strip().splitlines()[-1])
                row["server_cpu_s"] = _proc_cpu(server.pid or 0) - server_cpu
                origin = base_url.removesuffix("/v1")
                with urllib.request.urlopen(f"{origin}/bench/arrivals", timeout=30) as resp:
                    row["steady_rate"] = _steady_rate(sorted(json.load(resp)), n)
                rows.append(row)
                print(f"  done: {client} n={n} ({row['calls']} calls in {row['wall_s']:.1f} s)",
                      file=sys.stderr, flush=True)
    finally:
        server.terminate()
    print(f"toy suite, som-tools, {TURNS_PER_EPISODE} calls/episode, {a.rounds} episodes per slot, "
          f"server latency {a.latency:g} s, {os.cpu_count()} cores")
    print("run: calls / wall time of the whole run; steady: the rate while every slot is busy "
          "(first and last turn left out)")
    print(f"{'client':<7}{'n':>6}{'calls':>7}{'wall s':>8}{'ideal/s':>8}{'run/s':>8}"
          f"{'of ideal':>9}{'steady/s':>9}{'of ideal':>9}{'CPU ms/call':>12}{'peak MiB':>9}"
          f"{'KiB/ep':>7}{'threads':>8}{'conv MiB':>9}{'server ms/call':>15}")
    for r in rows:
        ideal = r["n"] / a.latency
        rate = r["calls"] / r["wall_s"]
        steady = r["steady_rate"]
        per_ep = 1024 * (r["maxrss_mib"] - r["start_rss_mib"]) / r["n"]
        print(f"{r['client']:<7}{r['n']:>6}{r['calls']:>7}{r['wall_s']:>8.2f}{ideal:>8.0f}"
              f"{rate:>8.1f}{rate / ideal:>9.2f}{steady:>9.1f}{steady / ideal:>9.2f}"
              f"{1000 * r['cpu_s'] / r['calls']:>12.3f}{r['maxrss_mib']:>9.0f}"
              f"{per_ep:>7.0f}{r['threads']:>8}{r['child_mib']:>9.0f}"
              f"{1000 * r['server_cpu_s'] / r['calls']:>15.3f}")
    by = {(r["client"], r["n"]): r for r in rows}
    for client in a.clients.split(","):
        mine = sorted((r for r in rows if r["client"] == client), key=lambda r: r["n"])
        for lo, hi in zip(mine, mine[1:], strict=False):
            # The run's fixed costs cancel out: what each extra episode in flight costs.
            extra = 1024 * (hi["maxrss_mib"] - lo["maxrss_mib"]) / (hi["n"] - lo["n"])
            print(f"{client} n={lo['n']}→{hi['n']}: {extra:.0f} KiB per extra episode in flight")
    for n in ns:
        if ("lean", n) in by and ("sdk", n) in by:
            lean, sdk = by[("lean", n)], by[("sdk", n)]
            ratio = (sdk["cpu_s"] / sdk["calls"]) / (lean["cpu_s"] / lean["calls"])
            print(f"n={n}: the SDK uses {ratio:.1f}x the CPU per call of the lean client")


if __name__ == "__main__":
    main()
