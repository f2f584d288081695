"""Batching an ``hf`` policy's calls: concurrent ``act`` calls share one ``generate``.

Calls that arrive within ``batch_wait_ms`` of each other share one left-padded
``generate`` call (at most ``max_batch`` rows), run in a worker thread so the event
loop goes on; a batch never mixes adapters. Rows may differ in sampling settings:
:class:`RowSampler` samples each row with its own temperature, top-k, top-p and
generator, so a seeded call gives the same tokens alone or in any batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from tackroom.core.errors import InfraError, PolicyError
from tackroom.core.policy import PolicyResponse, Sampling
from tackroom.policies.hf_loading import first_line

__all__ = ["Batcher", "Job", "RowSampler", "shared_prefix"]


@dataclass
class Job:
    """One ``act`` call waiting for a batch."""

    prompt: list[int]
    sampling: Sampling
    max_new: int
    parse_tools: bool
    adapter: str | None
    future: asyncio.Future
    queued_at: float = field(default_factory=time.monotonic)
    #: What the response records as its adapter: the adapter's name, or the weight
    #: version of an in-memory model being trained (:meth:`HFPolicy.set_version`).
    label: str | None = None
    #: Tokens of the prompt's system block (system prompt + tool schemas): the part
    #: every turn of every episode under one harness begins with (0: none known).
    stem: int = 0


class Batcher:
    """The queue of calls waiting for a batch, and the worker thread that serves them.

    ``generate`` answers one batch (in the worker thread); it is called through the
    attribute, so a caller may wrap it. ``policy_id`` names the policy in errors.
    """

    def __init__(self, generate: Callable[[list[Job]], list[PolicyResponse]], policy_id: str,
                 max_batch: int, batch_wait_ms: float) -> None:
        self.generate = generate
        self.policy_id = policy_id
        self.max_batch = max_batch
        self.batch_wait_ms = batch_wait_ms
        self.executor: ThreadPoolExecutor | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pending: list[Job] = []
        self.wake: asyncio.Event | None = None
        self.drainer: asyncio.Task | None = None

    def submit(self, job: Job) -> asyncio.Future:
        """Queue ``job`` for the next batch; its future gets the response (or the error)."""
        loop = asyncio.get_running_loop()
        if self.loop is not loop:  # first call, or a new event loop (another asyncio.run)
            self.loop, self.pending, self.drainer = loop, [], None
            self.wake = asyncio.Event()
        self.pending.append(job)
        if len(self.pending) >= self.max_batch:
            assert self.wake is not None  # made with self.loop, above or on an earlier call
            self.wake.set()
        if self.drainer is None or self.drainer.done():
            self.drainer = loop.create_task(self._drain())
        return job.future

    async def _drain(self) -> None:
        """Serve pending calls, one batch at a time, until none is left."""
        loop = asyncio.get_running_loop()
        assert self.wake is not None
        while self.pending:
            oldest = min(j.queued_at for j in self.pending)
            wait = oldest + self.batch_wait_ms / 1000 - time.monotonic()
            if wait > 0 and len(self.pending) < self.max_batch:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), wait)
            self.wake.clear()
            live = [j for j in self.pending if not j.future.done()]  # drop cancelled calls
            if not live:
                self.pending = []
                break
            adapter = live[0].adapter
            batch = [j for j in live if j.adapter == adapter][: self.max_batch]
            self.pending = [j for j in live if all(j is not b for b in batch)]
            try:
                results = await loop.run_in_executor(self._worker(), self.generate, batch)
            except Exception as e:  # noqa: BLE001 - a failed batch fails its calls, not the loop
                error = e if isinstance(e, (PolicyError, InfraError)) else InfraError(
                    f"local generation failed ({type(e).__name__}: {first_line(e)})", self.policy_id,
                    "check memory and the model directory; --resume retries the episode")
                for j in batch:
                    if not j.future.done():
                        j.future.set_exception(error)
                continue
            except BaseException:  # cancelled: the calls cannot be answered
                for j in batch:
                    if not j.future.done():
                        j.future.cancel()
                raise
            for j, r in zip(batch, results, strict=True):
                if not j.future.done():
                    j.future.set_result(r)

    def _worker(self) -> ThreadPoolExecutor:
        if self.executor is None:
            self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tackroom-hf")
        return self.executor

    def close(self) -> None:
        """Stop the worker thread (calls in flight finish, queued ones are cancelled)."""
        if self.executor is not None:
            self.executor.shutdown(wait=True, cancel_futures=True)
            self.executor = None


class RowSampler:
    """Samples each row with its own temperature, top-k, top-p and generator, inside ``generate``.

    ``generate`` runs greedy; for a sampling row this processor draws the
    token itself and leaves only that token finite, so the argmax is the draw.
    Greedy rows (temperature 0) pass through untouched. Per-row generators
    make a seeded call independent of whatever else shares its batch.

    The filters apply in transformers' order (``TemperatureLogitsWarper``,
    ``TopKLogitsWarper``, ``TopPLogitsWarper``), which vLLM's sampler follows too:
    the logits are divided by the temperature, tokens below the ``top_k``-th
    largest are removed (ties with it are kept, as both do), and top-p is taken
    over the renormalised distribution of what is left.
    """

    def __init__(self, samplings: list[Sampling], device: str, rng: random.Random) -> None:
        import torch

        self.samplings = samplings
        self.generators = []
        for s in samplings:
            g = torch.Generator(device=device)
            g.manual_seed(int(s.seed) if s.seed is not None else rng.getrandbits(63))
            self.generators.append(g)

    def __call__(self, input_ids, scores):
        import torch

        scores = scores.clone()  # generate keeps the tensor it passed us as the raw logits
        for i, s in enumerate(self.samplings):
            if s.temperature <= 0:
                continue
            logits = scores[i].float() / s.temperature
            if 0 < s.top_k < logits.numel():
                kth = torch.topk(logits, s.top_k).values[-1]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            probs = torch.softmax(logits, dim=-1)
            if s.top_p < 1.0:
                sorted_p, order = torch.sort(probs, descending=True)
                drop = torch.cumsum(sorted_p, dim=-1) - sorted_p >= s.top_p
                drop[0] = False  # always keep the most likely token
                probs = probs.clone()
                probs[order[drop]] = 0.0
            token = torch.multinomial(probs, 1, generator=self.generators[i])
            row = torch.full_like(scores[i], float("-inf"))
            row[token] = 0.0
            scores[i] = row
        return scores


def shared_prefix(prompts: list[list[int]]) -> int:
    """Length of the longest common prefix, leaving every prompt at least one own token.

    For a single prompt: all of it but its last token.

    ``generate`` must feed at least one uncached token per row to produce the
    first new token's logits.
    """
    first, n = prompts[0], min(len(p) for p in prompts) - 1
    k = 0
    while k < n and all(p[k] == first[k] for p in prompts):
        k += 1
    return k
