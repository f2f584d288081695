"""``tackroom serve`` throughput vs in-process batched generation (a benchmark, not a test).

Both sides run in the same process, on the same model, the same prompts and the
same greedy settings, so they generate the same tokens:

* **direct**: ``CLIENTS`` asyncio workers call ``HFPolicy.act`` back to back;
  the policy batches concurrent calls (up to ``max_batch``).
* **serve**: ``CLIENTS`` threads, each with its own ``openai`` SDK client, send
  the same requests to a :class:`~tackroom.serve.ServerThread` serving that same
  ``HFPolicy`` object (so no second copy of the weights is counted).

Reported: completion tokens/s of each, the ratio serve/direct (target ≥ 0.8),
peak RSS (``ru_maxrss``) after each phase, and the Python heap peak
(``tracemalloc``) of one extra serving round, measured apart so that tracing
does not slow the timed rounds.

Usage: .venv/bin/python bench/serve.py [--size small] [--clients 8] [--requests 6]
       [--max-tokens 64] [--rounds 2] [--threads N] [--model-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import tempfile
import threading
import time
import tracemalloc

from tackroom.core.policy import PolicyRequest, Sampling

TOOLS = [{"type": "function", "function": {
    "name": name, "description": desc,
    "parameters": {"type": "object", "properties": props, "required": list(props)}}}
    for name, desc, props in [
        ("click", "Click an element by its number.", {"ref": {"type": "integer"}}),
        ("type", "Type text into an element.", {"ref": {"type": "integer"},
                                                "text": {"type": "string"}}),
        ("press", "Press a key.", {"key": {"type": "string"}}),
    ]]
WORDS = ["OK", "Submit", "Cancel", "Next", "Login", "Search", "Save", "Close"]


def prompts(n: int) -> list[list[dict]]:
    """``n`` distinct som-tools-like chats (lengths differ, as real batches do)."""
    out = []
    for i in range(n):
        page = "\n".join(f'[{j}] button "{WORDS[(i + j) % len(WORDS)]}"'
                         for j in range(3 + i % 5))
        out.append([
            {"role": "system", "content": "You are a web agent. Act with the tools."},
            {"role": "user", "content": f'Task: click the "{WORDS[i % len(WORDS)]}" '
                                        f"button.\n\nPage:\n{page}\n\nBudget: turn 1 of 8."},
        ])
    return out


def maxrss_mib() -> float:
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024 if sys.platform != "darwin" else kb / 2**20


def run_direct(policy, chats, requests: int, max_tokens: int) -> tuple[int, float]:
    sampling = Sampling(max_tokens=max_tokens)

    async def worker(messages) -> int:
        n = 0
        for _ in range(requests):
            r = await policy.act(PolicyRequest(messages, TOOLS, sampling))
            n += r.completion_tokens
        return n

    async def all_workers() -> int:
        return sum(await asyncio.gather(*(worker(m) for m in chats)))

    t0 = time.perf_counter()
    tokens = asyncio.run(all_workers())
    return tokens, time.perf_counter() - t0


def run_served(server, chats, requests: int, max_tokens: int) -> tuple[int, float]:
    import openai

    counts = [0] * len(chats)
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(chats) + 1)

    def client(i: int) -> None:
        c = openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0,
                          timeout=600)
        try:
            barrier.wait()
            for _ in range(requests):
                r = c.chat.completions.create(model=server.model_name, messages=chats[i],
                                              tools=TOOLS, temperature=0,
                                              max_tokens=max_tokens)
                counts[i] += r.usage.completion_tokens
        except BaseException as e:  # noqa: BLE001 - reported after the join
            errors.append(e)
        finally:
            c.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(chats))]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return sum(counts), dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="small")
    ap.add_argument("--model-dir", default=None, help="an existing model (else one is built)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=6, help="requests per client per round")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()

    from tackroom.models import init_model
    from tackroom.policies.hf_policy import HFPolicy
    from tackroom.serve import ServerThread

    rss0 = maxrss_mib()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model_dir or init_model(f"{tmp}/{args.size}", size=args.size, seed=0)
        policy = HFPolicy(model_dir, max_batch=args.clients, threads=args.threads,
                          device=args.device)
        params = policy.describe()["params"]
        rss_loaded = maxrss_mib()
        chats = prompts(args.clients)
        print(f"model: {args.size} ({params / 1e6:.1f}M params), {args.clients} clients x "
              f"{args.requests} requests x {args.max_tokens} max tokens, greedy, "
              f"device={args.device}, torch threads={args.threads or 'default'}")
        # Warm-up: first calls pay for lazy imports and allocator growth.
        run_direct(policy, chats, 1, 8)
        server = ServerThread(policy=policy, max_batch=args.clients).start()
        try:
            run_served(server, chats, 1, 8)
            totals = {"direct": [0, 0.0], "serve": [0, 0.0]}
            rss = {}
            for rnd in range(args.rounds):
                for name in ("direct", "serve"):
                    if name == "direct":
                        tokens, dt = run_direct(policy, chats, args.requests, args.max_tokens)
                    else:
                        tokens, dt = run_served(server, chats, args.requests, args.max_tokens)
                    totals[name][0] += tokens
                    totals[name][1] += dt
                    rss.setdefault(name, maxrss_mib())  # high-water marks, first round
                    print(f"  round {rnd + 1} {name:6s}: {tokens:6d} tokens in {dt:6.2f}s = "
                          f"{tokens / dt:8.1f} tok/s")
            tracemalloc.start()
            run_served(server, chats, 1, args.max_tokens)
            _, heap_peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
        finally:
            server.stop()
    d_tok, d_dt = totals["direct"]
    s_tok, s_dt = totals["serve"]
    ratio = (s_tok / s_dt) / (d_tok / d_dt)
    print(f"direct: {d_tok / d_dt:8.1f} tok/s   serve: {s_tok / s_dt:8.1f} tok/s   "
          f"ratio serve/direct = {ratio:.2f}  (target >= 0.8: "
          f"{'ok' if ratio >= 0.8 else 'MISSED'})")
    if d_tok != s_tok:
        print(f"note: the two sides generated different token counts ({d_tok} vs {s_tok})")
    print(f"peak RSS: start {rss0:.0f} MiB, model loaded {rss_loaded:.0f} MiB, after direct "
          f"{rss['direct']:.0f} MiB, after serve {rss['serve']:.0f} MiB "
          f"(+{rss['serve'] - rss['direct']:.0f} MiB for serving)")
    print(f"python heap peak during one serving round (tracemalloc): {heap_peak / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
