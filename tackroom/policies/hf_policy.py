"""The ``hf`` policy: a local transformers model, batched, with token ids and log-probs.

``hf:PATH`` loads a causal LM and its tokenizer from a directory written by
``save_pretrained`` (``tackroom model init DIR`` makes one), from local files
only. Each call renders the chat with the tokenizer's own chat template
(tools included), generates, and returns the sampled token ids with their
log-probabilities — what training needs, and what lets the records compare
a model with itself later.

Choices, and why:

* **Log-probs are of the model's own distribution** — ``log_softmax`` of the
  unmodified logits, as if at temperature 1 without top-k or top-p — whatever
  the sampling settings. That is the quantity policy-gradient losses and
  importance ratios use, it is the same for greedy and sampled calls, and
  :meth:`HFPolicy.score` recomputes it from the tokens alone (one forward
  pass), so generation and training can be checked against each other.
* **Token ids include the stop token** (``<|im_end|>``) when the model
  stopped, and ``completion_tokens`` counts it: the model chose to stop, and
  training must teach that too. The text never shows it.
* **Batching**: concurrent ``act`` calls that arrive within ``batch_wait_ms``
  of each other share one left-padded ``generate`` call (at most
  ``max_batch`` rows), run in a worker thread so the event loop goes on.
  Log-probs that are not finite (a broken checkpoint) are recorded as missing,
  with a note.
  Rows may differ in sampling settings (temperature, top-k, top-p): sampling is
  done per row by a logits processor with the row's own ``torch.Generator`` (seeded by
  ``Sampling.seed``), so a seeded call gives the same tokens alone or in any
  batch, and greedy rows are plain argmax.
* **Tool calls** are read from ``<tool_call>{...}</tool_call>`` blocks only
  when the request offers tools (as vLLM's ``hermes`` parser does); a block
  that is not valid JSON is kept as the call's raw ``arguments`` string, so
  the harness records the model's parse error instead of the policy raising.
* **LoRA adapters** (peft) are loaded by name; each call is served by the
  adapter active when it was made (``PolicyResponse.adapter``), and a batch
  never mixes adapters.

Where each part lives: loading the checkpoint and naming adapters in
:mod:`tackroom.policies.hf_loading`; the batch queue, its worker thread and the
per-row sampler in :mod:`tackroom.policies.hf_batching`; here the policy itself —
the adapters' lifecycle, prompts, :meth:`HFPolicy.score`, one batch's ``generate``
with its shared-prefix key/value cache, and the responses.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import random
import threading
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any

from tackroom.core.errors import ContextLengthExceeded, PolicyError
from tackroom.core.finite import NON_FINITE_LOGPROBS, finite_logprobs
from tackroom.core.policy import PolicyRequest, PolicyResponse, ToolCall
from tackroom.policies.chat_format import PAD, parse_tool_calls, read_model_card, text_only
from tackroom.policies.hf_batching import Batcher, Job, RowSampler, shared_prefix
from tackroom.policies.hf_loading import (
    ADAPTER_NAME,
    ADAPTER_VERSION_FILE,
    INIT_HINT,
    adapter_name,
    first_line,
    load_pretrained,
    stop_ids,
)
from tackroom.policies.kv import cache_kwarg, cache_of
from tackroom.policies.options import construct

__all__ = ["ADAPTER_VERSION_FILE", "INIT_HINT", "HFPolicy", "make_hf_policy"]

# The old private names, for callers (tests, benchmarks) that patch or build them.
_Job, _RowSampler, _shared_prefix = Job, RowSampler, shared_prefix


class HFPolicy:
    """A :class:`~tackroom.core.policy.Policy` backed by a local transformers model.

    Args:
        model_dir: a directory with ``config.json``, weights and a tokenizer
            that has a chat template (``tackroom model init DIR`` writes one).
        adapter: a peft LoRA adapter directory to load and serve from the start.
        device: ``cpu``, ``cuda``, ``cuda:1``, ...
        dtype: ``float32`` (default), ``bfloat16`` or ``float16``.
        max_batch: at most this many calls share one ``generate``.
        batch_wait_ms: how long the first call of a batch waits for company.
        threads: CPU threads for torch (``torch.set_num_threads``: process-wide).
            ``None`` leaves torch's default. Small models decode fastest with 1:
            their matrix products are too small to split, and on a busy machine
            OpenMP threads that wait for each other make every token ~20x slower.
    """

    def __init__(self, model_dir: str | Path, *, adapter: str | None = None,
                 device: str = "cpu", dtype: str | None = None, max_batch: int = 8,
                 batch_wait_ms: float = 5.0, threads: int | None = None,
                 _preloaded: tuple[Any, Any] | None = None) -> None:
        self.model_dir = str(model_dir)
        self.id = f"hf:{self.model_dir}" + (f":{adapter}" if adapter else "")
        if int(max_batch) < 1 or float(batch_wait_ms) < 0:
            raise PolicyError(f"bad settings (max_batch={max_batch}, "
                              f"batch_wait_ms={batch_wait_ms})", self.id,
                              "use max_batch >= 1 and batch_wait_ms >= 0")
        self.device = str(device)
        self.threads = int(threads) if threads is not None else None
        if self.threads is not None and self.threads < 1:
            raise PolicyError(f"threads={threads} must be at least 1", self.id,
                              "give threads >= 1, or leave it unset")
        self.max_batch = int(max_batch)
        self.batch_wait_ms = float(batch_wait_ms)
        if _preloaded is not None:  # see from_model
            self.tokenizer, self.model = _preloaded
            self.dtype = str(next(self.model.parameters()).dtype).removeprefix("torch.")
        else:
            self.tokenizer, self.model, self.dtype = load_pretrained(
                self.model_dir, self.id, self.device, dtype, self.threads)
        config = self.model.config
        self.max_positions = int(getattr(config, "max_position_embeddings", 0) or 0) or None
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = self.tokenizer.convert_tokens_to_ids(PAD) \
                if PAD in self.tokenizer.get_vocab() else self.tokenizer.eos_token_id
        self.stop_ids = stop_ids(self.model, self.tokenizer, self.pad_id)
        # Sampling is exactly the request's: a checkpoint's own generation defaults
        # (temperature, top_k, repetition_penalty, ...) would otherwise fill every
        # setting we leave unset and change greedy answers and log-probs.
        from transformers import GenerationConfig

        self.model.generation_config = GenerationConfig(
            eos_token_id=self.stop_ids, pad_token_id=self.pad_id, do_sample=False)
        self._lock = threading.RLock()  # one user of the model at a time
        self._adapters: dict[str, str] = {}
        #: An unloaded adapter peft still holds: peft cannot drop a model's last adapter,
        #: so it stays (never served, switched off for base-model calls) until another loads.
        self._dormant: str | None = None
        self._active: str | None = None
        self._version: str | None = None
        self._rng = random.Random()
        # Keys/values of recent system blocks, reused across batches (see _prefix_kv);
        # off for an in-memory model that a trainer updates in place (from_model).
        self.prefix_cache = _preloaded is None
        self._stems: dict[str, tuple[int, ...]] = {}
        self._stem_kv: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        # Called through the attribute, so that ``self._generate`` may be wrapped later.
        self._batcher = Batcher(lambda batch: self._generate(batch), self.id, self.max_batch,
                                self.batch_wait_ms)
        if adapter:
            name = adapter_name(adapter)
            self.load_adapter(name, adapter)
            self.set_adapter(name)

    # ------------------------------------------------------------ identity
    def __repr__(self) -> str:
        return f"HFPolicy(model_dir={self.model_dir!r}, device={self.device!r})"

    def describe(self) -> dict[str, Any]:
        """Settings for the run config snapshot."""
        card = read_model_card(self.model_dir) or {}
        return {
            "backend": "hf",
            "id": self.id,
            "model_dir": self.model_dir,
            "arch": getattr(self.model.config, "model_type", None),
            "params": int(self._base_model().num_parameters()),
            "weights_sha256": card.get("weights_sha256"),
            "device": self.device,
            "dtype": self.dtype,
            "adapters": dict(self._adapters),
            "active_adapter": self._active,
            "max_batch": self.max_batch,
            "batch_wait_ms": self.batch_wait_ms,
            "threads": self.threads,
            "logprobs": "log_softmax of unmodified logits (temperature 1)",
        }

    @classmethod
    def from_model(cls, model: Any, tokenizer: Any, *, model_dir: str | Path,
                   policy_id: str | None = None, device: str = "cpu", max_batch: int = 8,
                   batch_wait_ms: float = 5.0) -> HFPolicy:
        """A policy serving ``model`` as it is in memory — e.g. weights being trained.

        Nothing is loaded or copied: rollouts see the current weights (a peft
        model serves with its active adapter), so a trainer needs no reload
        between steps. The caller owns train/eval mode and must not update the
        weights while a call is being served. ``model_dir`` names the base
        checkpoint in :meth:`describe`; ``policy_id`` is the id in records.
        Label the weights with :meth:`set_version`.
        """
        policy = cls(model_dir, device=device, max_batch=max_batch,
                     batch_wait_ms=batch_wait_ms, _preloaded=(tokenizer, model))
        if policy_id is not None:
            policy.id = policy_id
        return policy

    def set_version(self, version: str | None) -> None:
        """Record ``version`` as the adapter of later turns served without a named adapter.

        A trainer calls this after each update, so every turn says which weights
        wrote it (``Turn.adapter``) even though the model never left memory.
        """
        self._version = version
        self._stem_kv.clear()

    # ------------------------------------------------------------- adapters
    @property
    def adapter(self) -> str | None:
        """The adapter that serves new calls (``None``: the base model)."""
        return self._active

    @property
    def adapters(self) -> dict[str, str]:
        """Loaded adapters: name → directory."""
        return dict(self._adapters)

    def load_adapter(self, name: str, path: str | Path) -> None:
        """Load a peft (LoRA) adapter from ``path`` under ``name``; does not activate it."""
        if not ADAPTER_NAME.match(name or ""):
            raise PolicyError(f"bad adapter name {name!r}", self.id,
                              "use letters, digits, '_' and '-' only")
        if not (Path(path) / "adapter_config.json").is_file():
            raise PolicyError(f"no peft adapter at {path} (no adapter_config.json)", self.id,
                              "give a directory written by a peft model's save_pretrained")
        try:
            from peft import PeftModel
        except ImportError:
            raise PolicyError("LoRA adapters need peft", self.id,
                              "pip install 'tackroom[train]'") from None
        # peft calls transformers APIs that transformers 5 deprecates; not ours to fix.
        with self._lock, warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            try:
                if isinstance(self.model, PeftModel):
                    if name in self.model.peft_config:
                        self.model.delete_adapter(name)  # reload: the newer weights win
                    self.model.load_adapter(str(path), adapter_name=name)
                else:
                    self.model = PeftModel.from_pretrained(self.model, str(path),
                                                           adapter_name=name)
            except Exception as e:  # noqa: BLE001 - a bad adapter is one clear line
                raise PolicyError(f"cannot load adapter {name!r} from {path} "
                                  f"({type(e).__name__}: {first_line(e)})", self.id,
                                  "check that it was trained on this base model") from None
            if self._dormant is not None and self._dormant != name:
                warnings.simplefilter("ignore", UserWarning)  # "... was active, now deleted"
                self.model.delete_adapter(self._dormant)  # no longer the last one
            self._dormant = None
            self.model.eval()
            self._adapters[name] = str(path)
            self._stem_kv.clear()  # an adapter reloaded under its name has new weights

    def unload_adapter(self, name: str) -> None:
        """Drop adapter ``name`` (loaded by :meth:`load_adapter`); later calls cannot use it.

        Calls already queued with it must have finished (``tackroom serve`` waits
        for them). If it was active, the base model serves later calls.
        """
        if name not in self._adapters:
            known = ", ".join(sorted(self._adapters)) or "none loaded"
            raise PolicyError(f"no adapter named {name!r} ({known})", self.id,
                              "unload an adapter that load_adapter loaded")
        with self._lock, warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", UserWarning)  # "... was active, now deleted"
            if any(n != name for n in self.model.peft_config):
                self.model.delete_adapter(name)
            else:
                self._dormant = name
            del self._adapters[name]
            if self._active == name:
                self._active = None
            self._stem_kv.clear()

    def set_adapter(self, name: str | None) -> None:
        """Serve later calls with adapter ``name`` (``None``: the base model)."""
        if name is not None and name not in self._adapters:
            known = ", ".join(sorted(self._adapters)) or "none loaded"
            raise PolicyError(f"no adapter named {name!r} ({known})", self.id,
                              "load it first with load_adapter(name, path)")
        self._active = name

    def _base_model(self):
        get_base = getattr(self.model, "get_base_model", None)
        return get_base() if get_base is not None else self.model

    @contextlib.contextmanager
    def _using(self, adapter: str | None):
        """Hold the model with ``adapter`` active (or every adapter off)."""
        with self._lock:
            if not self._adapters and self._dormant is None:
                yield self.model
            elif adapter is None:
                with self.model.disable_adapter():
                    yield self.model
            else:
                self.model.set_adapter(adapter)
                yield self.model

    # --------------------------------------------------------------- tokens
    def prompt_ids(self, messages: list[dict[str, Any]],
                   tools: list[dict[str, Any]] | None = None, *,
                   add_generation_prompt: bool = True) -> list[int]:
        """The token ids the model sees for ``messages`` (chat template, generation prompt)."""
        ids = self.tokenizer.apply_chat_template(
            text_only(messages), tools=tools or None,
            add_generation_prompt=add_generation_prompt,
            tokenize=True, return_dict=False)
        if ids and isinstance(ids[0], list):  # a batch of one
            ids = ids[0]
        return [int(i) for i in ids]

    def _stem(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
              prompt: list[int]) -> int:
        """How many leading tokens of ``prompt`` are its system block (0 if none)."""
        if not self.prefix_cache or not messages or messages[0].get("role") != "system":
            return 0
        key = json.dumps([messages[0], tools], sort_keys=True, default=str)
        stem = self._stems.get(key)
        if stem is None:
            stem = tuple(self.prompt_ids(messages[:1], tools, add_generation_prompt=False))
            if len(self._stems) >= 64:
                self._stems.clear()
            self._stems[key] = stem
        # Only a true token prefix (a template could tokenize across the boundary).
        return len(stem) if len(stem) < len(prompt) and tuple(prompt[:len(stem)]) == stem else 0

    def score(self, messages: list[dict[str, Any]], completion_ids: list[int],
              tools: list[dict[str, Any]] | None = None, *,
              adapter: Any = ...) -> list[float]:
        """Log-probs of ``completion_ids`` after the prompt of ``messages``, in one forward pass.

        The same quantity ``act`` returns (``log_softmax`` of unmodified logits),
        under the active adapter unless ``adapter`` names another (``None``: base).
        """
        import torch

        if not completion_ids:
            return []
        prompt = self.prompt_ids(messages, tools)
        ids = torch.tensor([prompt + [int(t) for t in completion_ids]], device=self.device)
        with self._using(self._active if adapter is ... else adapter) as model, \
                torch.inference_mode():
            logits = model(input_ids=ids).logits[0, len(prompt) - 1: -1].float()
        logp = torch.log_softmax(logits, dim=-1)
        target = ids[0, len(prompt):].unsqueeze(-1)
        return logp.gather(-1, target).squeeze(-1).tolist()

    # ------------------------------------------------------------------ act
    async def act(self, request: PolicyRequest) -> PolicyResponse:
        s = request.sampling
        prompt = self.prompt_ids(request.messages, request.tools)
        room = (self.max_positions - len(prompt)) if self.max_positions else s.max_tokens
        if room < 1:
            raise ContextLengthExceeded(
                f"prompt of {len(prompt)} tokens does not fit the model's "
                f"{self.max_positions}-token context", self.id,
                "shorten the harness's observations or history")
        job = Job(prompt=prompt, sampling=s, max_new=max(1, min(int(s.max_tokens), room)),
                   parse_tools=bool(request.tools), adapter=self._active,
                   future=asyncio.get_running_loop().create_future(),
                   label=self._active if self._active is not None else self._version,
                   stem=self._stem(request.messages, request.tools, prompt))
        return await self._batcher.submit(job)

    def _generate(self, batch: list[Job]) -> list[PolicyResponse]:
        """One ``generate`` for the batch (runs in the worker thread).

        Prompts of one batch usually share a long prefix — the system prompt
        and tool schemas of one harness, or the whole prompt for the G samples
        of a training group. That prefix is run once and its keys/values
        repeated to every row; each row's rest is left-padded *after* it
        (``[shared | pad | own]``, pads masked: positions come from the mask,
        so every row sees exactly its own prompt). Without a shared prefix
        worth it, rows are plainly left-padded.
        """
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        prompts = [j.prompt for j in batch]
        shared = _shared_prefix(prompts)
        stem = batch[0].stem if all(j.stem == batch[0].stem for j in batch) else 0
        stem = stem if MIN_SHARED_PREFIX <= stem <= shared else 0
        if shared < MIN_SHARED_PREFIX or (len(batch) == 1 and not stem):
            shared = 0  # nothing to share, nothing cached: a plain batch
        width = max(len(p) for p in prompts) - shared
        input_ids = torch.full((len(batch), shared + width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), shared + width), dtype=torch.long)
        for i, p in enumerate(prompts):
            input_ids[i, :shared] = torch.tensor(p[:shared])
            input_ids[i, shared + width - (len(p) - shared):] = torch.tensor(p[shared:])
            mask[i, :shared] = 1
            mask[i, shared + width - (len(p) - shared):] = 1
        max_new = max(j.max_new for j in batch)
        config = GenerationConfig(
            max_new_tokens=max_new, do_sample=False, num_beams=1,
            eos_token_id=self.stop_ids, pad_token_id=self.pad_id, bos_token_id=None,
            return_dict_in_generate=True, output_logits=True)
        processors = LogitsProcessorList()
        if any(j.sampling.temperature > 0 for j in batch):
            processors.append(RowSampler([j.sampling for j in batch], self.device, self._rng))
        with self._using(batch[0].adapter) as model, torch.inference_mode():
            extra = {}
            if shared:
                cache = self._prefix_kv(model, batch[0].adapter, prompts[0][:shared], stem)
                cache.batch_repeat_interleave(len(batch))
                extra[cache_kwarg(model)] = cache
            out = model.generate(input_ids=input_ids.to(self.device),
                                 attention_mask=mask.to(self.device),
                                 generation_config=config, logits_processor=processors, **extra)
        new = out.sequences[:, shared + width:].cpu()
        logits = torch.stack(out.logits, dim=1).float()  # raw logits, before the sampler
        logp = torch.log_softmax(logits, dim=-1).gather(-1, new.to(logits.device).unsqueeze(-1))
        logp = logp.squeeze(-1).cpu()
        return [self._response(j, new[i].tolist(), logp[i].tolist())
                for i, j in enumerate(batch)]

    def _prefix_kv(self, model: Any, adapter: str | None, prefix: list[int], stem: int) -> Any:
        """Keys/values of ``prefix`` (batch of one), its first ``stem`` tokens from the cache.

        The system block is the same for every turn of every episode under a
        harness: its keys/values are kept (a few, least recently used out) per
        (adapter, weight version, tokens) and copied for each batch, which then
        runs only the rest of its shared prefix.
        """
        import torch

        def forward(ids: list[int], past: Any = None) -> Any:
            extra = {cache_kwarg(model): past} if past is not None else {}
            return cache_of(model(input_ids=torch.tensor([ids], device=self.device),
                                  use_cache=True, **extra))

        if not (stem and self.prefix_cache):
            return forward(prefix)
        key = (adapter, self._version, tuple(prefix[:stem]))
        kv = self._stem_kv.get(key)
        if kv is None:
            kv = forward(prefix[:stem])
            self._stem_kv[key] = kv
            while len(self._stem_kv) > MAX_CACHED_STEMS:
                self._stem_kv.popitem(last=False)
        else:
            self._stem_kv.move_to_end(key)
        kv = copy.deepcopy(kv)  # generate extends a cache in place
        return forward(prefix[stem:], kv) if len(prefix) > stem else kv

    def _response(self, job: Job, tokens: list[int], logprobs: list[float]) -> PolicyResponse:
        tokens, finish = tokens[: job.max_new], "length"
        for k, t in enumerate(tokens):
            if t in self.stop_ids:
                tokens, finish = tokens[: k + 1], "stop"
                break
        # A broken checkpoint can give NaN / inf: never records or training batches.
        checked, notes = finite_logprobs(logprobs[: len(tokens)]), []
        if checked is None:
            notes.append(NON_FINITE_LOGPROBS)
        visible = tokens[:-1] if finish == "stop" else tokens
        text: str | None = self.tokenizer.decode(visible, skip_special_tokens=True)
        calls: list[ToolCall] = []
        if job.parse_tools:
            text, calls = parse_tool_calls(text or "")
            if not text and calls:
                text = None
        return PolicyResponse(
            text=text, tool_calls=calls, prompt_tokens=len(job.prompt),
            completion_tokens=len(tokens), token_ids=tokens, logprobs=checked,
            model=self.model_dir, adapter=job.label, finish_reason=finish, notes=notes,
            prompt_token_ids=[int(t) for t in job.prompt])

    # ---------------------------------------------------------------- close
    async def aclose(self) -> None:
        self._batcher.close()

    async def __aenter__(self) -> HFPolicy:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


#: A shared prompt prefix shorter than this is not worth a separate forward pass.
MIN_SHARED_PREFIX = 32
#: System blocks whose keys/values an HFPolicy keeps (one per harness × adapter in use).
MAX_CACHED_STEMS = 8


_INT_OPTS = {"max_batch", "threads"}
_FLOAT_OPTS = {"batch_wait_ms"}


def make_hf_policy(spec: str, **opts: Any) -> HFPolicy:
    """Build a policy from ``hf:PATH`` or ``hf:PATH:ADAPTER`` (a peft adapter directory).

    ``opts`` are :class:`HFPolicy` keyword arguments (``device``, ``dtype``,
    ``max_batch``, ``batch_wait_ms``, ``threads``); numeric ones may come as strings.
    """
    prefix, sep, rest = spec.partition(":")
    if prefix != "hf" or not sep or not rest:
        raise PolicyError(f"not an hf policy spec: {spec!r}", "--policy",
                          "write hf:MODEL_DIR or hf:MODEL_DIR:ADAPTER_DIR")
    path, _, adapter = rest.partition(":")
    if not path:
        raise PolicyError(f"no model directory in {spec!r}", "--policy",
                          "write hf:MODEL_DIR or hf:MODEL_DIR:ADAPTER_DIR")
    if adapter and opts.get("adapter"):
        raise PolicyError(f"two adapters: {spec!r} and adapter={opts['adapter']!r}",
                          "--policy", "give the adapter once")
    if adapter:
        opts["adapter"] = adapter
    return construct(HFPolicy, path, opts, spec=spec, ints=_INT_OPTS, floats=_FLOAT_OPTS)
