"""The engine behind ``tackroom serve``: one asyncio loop in a thread where every request's ``act`` runs.

Requests that come back together are batched together (:class:`_Gate`), all
tokenizer work runs on the loop's thread (Hugging Face fast tokenizers are not
safe to share between threads), and a reply is turned from the ``hf`` policy's
tokens into the text, tool calls and log-prob entries the wire shapes
(:func:`build_completion`).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import threading
from typing import Any

from tackroom.core.errors import ContextLengthExceeded, TackroomError
from tackroom.core.policy import PolicyRequest, PolicyResponse
from tackroom.wire import ApiError, ChatRequest, Completion, first_line, split_reply

__all__ = ["build_completion"]


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: byte → the printable character that stands for it."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs), strict=True))


class _Vocab:
    """Per-token bytes and visible text for a tokenizer (cached; use from one thread)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.special = set(tokenizer.all_special_ids)
        self.added = {i: t.content for i, t in tokenizer.added_tokens_decoder.items()}
        self.byte_of = {c: b for b, c in _bytes_to_unicode().items()}
        self._cache: dict[int, bytes] = {}

    def token_bytes(self, tid: int) -> bytes:
        b = self._cache.get(tid)
        if b is None:
            if tid in self.added:
                b = self.added[tid].encode()
            else:
                piece = self.tokenizer.convert_ids_to_tokens(tid)
                if isinstance(piece, str) and all(c in self.byte_of for c in piece):
                    b = bytes(self.byte_of[c] for c in piece)
                else:  # not a byte-level vocabulary: the token's own decoding
                    b = self.tokenizer.decode([tid]).encode()
            self._cache[tid] = b
        return b

    def pieces(self, ids: list[int]) -> list[str]:
        """The visible text each token adds; joined, exactly ``decode(ids, skip_special)``."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        out = [("" if t in self.special else decoder.decode(self.token_bytes(t))) for t in ids]
        if out:
            out[-1] += decoder.decode(b"", final=True)
        full = self.tokenizer.decode(ids, skip_special_tokens=True)
        if "".join(out) == full:
            return out
        # A tokenizer whose decoding is not plain byte concatenation: slower, still exact.
        out, prev = [], ""
        for k in range(1, len(ids) + 1):
            text = self.tokenizer.decode(ids[:k], skip_special_tokens=True)
            if not text.startswith(prev) or not full.startswith(text):
                out.append("")
                continue
            out.append(text[len(prev):])
            prev = text
        if out:
            out[-1] += full[len(prev):]
        return out

    def logprob_entry(self, tid: int, logprob: float) -> dict[str, Any]:
        b = self.token_bytes(tid)
        return {"token": b.decode("utf-8", errors="replace"), "logprob": logprob,
                "bytes": list(b), "top_logprobs": []}


def _find_stop(text: str, stops: list[str]) -> tuple[int, int] | None:
    """(start, end) of the earliest stop string in ``text``."""
    best = None
    for s in stops:
        i = text.find(s)
        if i >= 0 and (best is None or i < best[0]):
            best = (i, i + len(s))
    return best


def build_completion(response: PolicyResponse, req: ChatRequest, vocab: _Vocab,
                     stop_ids: list[int] | set[int],
                     prompt_token_ids: list[int] | None = None) -> Completion:
    """Turn the hf policy's answer into the reply for ``req`` (stop strings, tool calls).

    ``pieces`` (each token's visible text) let the reply stream token by token.
    """
    ids = [int(t) for t in (response.token_ids or [])]
    lps = [float(x) for x in (response.logprobs or [])]
    finish = response.finish_reason or "stop"
    by_token = finish == "stop" and bool(ids) and ids[-1] in stop_ids
    visible = ids[:-1] if by_token else ids
    pieces = vocab.pieces(visible) + ([""] if by_token else [])
    raw = "".join(pieces)
    hit = _find_stop(raw, req.stop) if req.stop else None
    stop_sequence = None
    if hit is not None:
        start, end = hit
        stop_sequence = raw[start:end]
        k, seen = 0, 0
        while k < len(pieces) and seen < end:
            seen += len(pieces[k])
            k += 1
        ids, lps, pieces = ids[:k], lps[:k], pieces[:k]
        raw, finish = raw[:start], "stop"
    content, calls = split_reply(raw, req.parse_tools)
    if calls and finish == "stop":
        finish = "tool_calls"
    entries = [vocab.logprob_entry(t, lp) for t, lp in zip(ids, lps, strict=False)] \
        if req.logprobs else None
    return Completion(content=content, tool_calls=calls, finish_reason=finish,
                      prompt_tokens=response.prompt_tokens, completion_tokens=len(ids),
                      token_ids=ids, logprobs=lps, logprob_entries=entries, pieces=pieces,
                      prompt_token_ids=prompt_token_ids,
                      stop_sequence=stop_sequence)


class _Gate:
    """Admission to the policy, so that clients who come back together share a batch.

    ``HFPolicy`` batches the calls that reach it within ``batch_wait_ms`` of each
    other, then generates; calls that arrive meanwhile form the next batch, which
    starts the moment the current one ends. In-process workers all resubmit in
    the same event-loop tick, but HTTP clients come back a few milliseconds
    apart, so the late ones used to start a batch of their own and the server
    fell into a stable 7 + 1 rhythm (a 1-row batch costs ~40% of an 8-row one on
    CPU). So, while the policy is busy (past its batch-forming window), new
    requests wait here; when the last running request ends, the waiting ones
    are released together once as many are back as just finished (plus those
    already waiting), or after a quarter of the last batch's time, at most
    ``coalesce_s`` (HTTP clients on a busy CPU take tens of milliseconds to come
    back: Python threads share the GIL). A lone client never waits.
    Runs on the engine's event loop only.
    """

    def __init__(self, max_batch: int, forming_s: float, coalesce_s: float) -> None:
        self.max_batch = max(1, int(max_batch))
        self.forming_s = forming_s
        self.coalesce_s = coalesce_s
        self.busy = 0  # admitted and not finished
        self.group_started = float("-inf")
        self.group_size = 0
        self.finished = 0  # of the current group
        self.waiting: list[asyncio.Future[None]] = []
        self.target = 0
        self.coalescing = False
        self.timer: asyncio.TimerHandle | None = None

    async def enter(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        forming = now < self.group_started + self.forming_s and self.group_size < self.max_batch
        if not self.waiting and not self.coalescing and (self.busy == 0 or forming):
            self._admit(now)
            return
        fut: asyncio.Future[None] = loop.create_future()
        self.waiting.append(fut)
        if self.coalescing and len(self.waiting) >= self.target:
            self._flush()
        try:
            await fut
        except asyncio.CancelledError:
            if fut in self.waiting:
                self.waiting.remove(fut)
            elif fut.done() and not fut.cancelled():
                self.leave()  # admitted, then cancelled before it ran
            raise

    def _admit(self, now: float) -> None:
        if self.busy == 0:
            self.group_started, self.group_size, self.finished = now, 0, 0
        self.busy += 1
        self.group_size += 1

    def leave(self) -> None:
        self.busy -= 1
        self.finished += 1
        if self.busy:
            return
        self.target = min(self.max_batch, self.finished + len(self.waiting))
        self.coalescing = True
        if len(self.waiting) >= self.target:
            self._flush()
            return
        loop = asyncio.get_running_loop()
        # Wait at most a quarter of what the batch took: a client that does not
        # come back costs little next to a batch split in two.
        took = loop.time() - self.group_started
        window = min(self.coalesce_s, max(0.01, 0.25 * took))
        self.timer = loop.call_later(window, self._flush)

    def _flush(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.coalescing = False
        now = asyncio.get_running_loop().time()
        release, self.waiting = self.waiting[: self.max_batch], self.waiting[self.max_batch:]
        for fut in release:
            self._admit(now)
            fut.set_result(None)


class _Engine:
    """One asyncio loop in a thread: every request's ``act`` runs there, so they batch."""

    def __init__(self, policy: Any, coalesce_ms: float = 100.0) -> None:
        self.policy = policy
        self.vocab = _Vocab(policy.tokenizer)
        self.stop_ids = set(policy.stop_ids)
        self.gate = _Gate(getattr(policy, "max_batch", 8),
                          getattr(policy, "batch_wait_ms", 5.0) / 1000, coalesce_ms / 1000)
        self.loop = asyncio.new_event_loop()
        #: Whether a model name is served now (set by the server; read on the loop).
        self.is_served: Any = lambda name: True
        #: Requests admitted per adapter and not yet answered, and the adapters
        #: unloaded while some were (dropped when the last one is answered).
        self.inflight: dict[str, int] = {}
        self.retired: set[str] = set()
        self.thread = threading.Thread(target=self._run, name="tackroom-serve-loop",
                                       daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def complete(self, req: ChatRequest) -> Completion:
        """Blocking: the finished reply to ``req`` (called from an HTTP thread)."""
        return asyncio.run_coroutine_threadsafe(self._complete(req), self.loop).result()

    def run(self, coro: Any, timeout: float | None = None) -> Any:
        """Blocking: run a coroutine on the loop and return its result (from another thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def complete_on_loop(self, req: ChatRequest) -> Completion:
        """The finished reply to ``req``, awaited on the loop itself (the HTTP handlers')."""
        return await self._complete(req)

    def call(self, fn: Any, *args: Any) -> Any:
        """Blocking: ``fn(*args)`` run on the loop thread, between other requests' steps."""
        async def run() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result()

    def _release(self, adapter: str) -> None:
        left = self.inflight.get(adapter, 0) - 1
        if left > 0:
            self.inflight[adapter] = left
            return
        self.inflight.pop(adapter, None)
        if adapter in self.retired:
            self.retired.discard(adapter)
            with contextlib.suppress(TackroomError):
                self.policy.unload_adapter(adapter)

    async def _complete(self, req: ChatRequest) -> Completion:
        p = self.policy
        preq = PolicyRequest(messages=req.messages, tools=req.tools, sampling=req.sampling)
        try:
            prompt = p.prompt_ids(req.messages, req.tools)
        except Exception as e:  # noqa: BLE001 - rendering depends on the request alone
            raise ApiError(400, "the chat template cannot render these messages "
                                f"({type(e).__name__}: {first_line(e)})",
                           param="messages") from None
        # The gate admits while the policy's batch is forming: follow its window as it is now.
        self.gate.forming_s = getattr(p, "batch_wait_ms", 5.0) / 1000
        await self.gate.enter()
        counted = None
        try:
            if req.adapter is not None and not self.is_served(req.model):
                raise ApiError(404, f"The model `{req.model}` does not exist (its adapter "
                                    "was unloaded)", param="model", code="model_not_found")
            if req.adapter is not None:
                counted = req.adapter
                self.inflight[counted] = self.inflight.get(counted, 0) + 1
            # set_adapter and act's synchronous start (prompt, job with the active
            # adapter) run without a suspension in between: no other request can
            # switch the adapter under this one.
            p.set_adapter(req.adapter)
            response = await p.act(preq)
        except ContextLengthExceeded as e:
            limit = getattr(p, "max_positions", None)
            raise ApiError(400, f"{e.what}: this model's maximum context length is {limit} "
                                "tokens; shorten the messages", param="messages",
                           code="context_length_exceeded") from None
        except TackroomError as e:
            raise ApiError(500, e.line()) from None
        finally:
            self.gate.leave()
            if counted is not None:
                self._release(counted)
        out = build_completion(response, req, self.vocab, self.stop_ids,
                               prompt if req.return_token_ids else None)
        out.adapter = req.adapter
        return out

    def close(self, close_policy: bool) -> None:
        if self.loop.is_closed():
            return
        if close_policy:
            fut = asyncio.run_coroutine_threadsafe(self.policy.aclose(), self.loop)
            try:
                fut.result(timeout=30)
            except Exception:  # noqa: BLE001,S110 - closing; nothing to report to anyone
                pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        if not self.thread.is_alive():
            self.loop.close()
