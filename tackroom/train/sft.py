"""Supervised fine-tuning on recorded episodes (``tackroom sft``).

Every recorded turn is one training example: the exact messages the policy
saw that turn (the harness's system prompt, observation, history), the tool
schemas the harness offered, and the reply it gave. The loss covers only
the reply's tokens — everything the model did not write (system prompt,
observations, tool results, earlier replies already trained on as their own
examples, template tokens) is masked — so the model learns to *act* under
the harness, not to predict pages.

Which episodes: a :class:`Selection` over the record store (suite,
harnesses, task globs, outcomes, runs, policies). Turns whose reply failed
to parse are skipped: imitating a malformed reply teaches the malformation.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tackroom.core.episode import Episode, Outcome, Turn
from tackroom.core.errors import ConfigError
from tackroom.core.settings import REQUIRED, Settings, setting
from tackroom.policies.chat_format import model_dir_problem, text_only
from tackroom.records.store import RecordStore
from tackroom.train.engine import (
    MAX_BATCH,
    MAX_SEED,
    MAX_STEPS,
    LoraSettings,
    OptimSettings,
    TrainEngine,
    latest_checkpoint,
)

IGNORE = -100


@dataclass(frozen=True)
class Selection:
    """Which recorded episodes to learn from; empty fields select everything."""

    suite: str | None = None
    harnesses: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()  # ids or globs, with or without the ``suite/`` prefix
    outcomes: tuple[str, ...] = (Outcome.SUCCESS.value,)
    runs: tuple[str, ...] = ()
    policies: tuple[str, ...] = ()

    def episodes(self, store: RecordStore) -> list[dict[str, Any]]:
        """Episode rows (id, run, task, harness, hash) that match, in a stable order."""
        where: list[str] = []
        params: list[Any] = []
        for column, values in (("harness", self.harnesses), ("outcome", self.outcomes),
                               ("run_id", self.runs), ("policy", self.policies)):
            if values:
                where.append(f"{column} IN ({', '.join('?' * len(values))})")
                params.extend(values)
        if self.suite:
            where.append("suite = ?")
            params.append(self.suite)
        sql = ("SELECT run_id, episode_id, task, harness, harness_hash FROM episodes"
               + (f" WHERE {' AND '.join(where)}" if where else "")
               + " ORDER BY run_id, task, harness, seed, episode_id")
        rows = store.query(sql, params)
        if self.tasks:
            def wanted(task: str) -> bool:
                short = task.split("/", 1)[-1]
                return any(fnmatch.fnmatchcase(task, p) or fnmatch.fnmatchcase(short, p)
                           for p in self.tasks)
            rows = [r for r in rows if wanted(r["task"])]
        return rows


@dataclass
class Example:
    """One supervised turn: token ids and labels (``-100`` where the model did not write)."""

    input_ids: list[int]
    labels: list[int]
    episode_id: str
    turn: int

    @property
    def n_supervised(self) -> int:
        return sum(1 for t in self.labels if t != IGNORE)


@dataclass
class Dataset:
    """Examples built from a selection, with what was skipped and why."""

    examples: list[Example]
    episodes: int
    skipped: dict[str, int] = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        """A hash of every example's tokens: resuming checks it is the same data."""
        h = hashlib.sha256()
        for ex in self.examples:
            h.update(json.dumps([ex.input_ids, ex.labels]).encode())
        return h.hexdigest()[:16]


def reply_message(turn: Turn) -> dict[str, Any]:
    """The assistant message a recorded turn's reply was, in OpenAI form."""
    msg: dict[str, Any] = {"role": "assistant", "content": turn.raw_text or ""}
    if turn.tool_calls:
        msg["tool_calls"] = turn.tool_calls
    return msg


def encode_turn(tokenizer: Any, messages: list[dict[str, Any]], reply: dict[str, Any],
                tools: list[dict[str, Any]] | None) -> tuple[list[int], list[int]]:
    """Token ids of ``messages`` + ``reply`` and labels that keep only the reply's tokens.

    The prompt is the chat template with its generation prompt — exactly what
    the policy was given — so the labels start where the model started writing.
    Where the template marks assistant tokens (``{% generation %}``), tokens
    the template appends after the reply (a trailing newline) are masked too.
    """
    messages = text_only(messages)  # local models read text: images are "[image]"
    prompt = _ids(tokenizer.apply_chat_template(
        messages, tools=tools or None, add_generation_prompt=True, tokenize=True,
        return_dict=False))
    try:
        out = tokenizer.apply_chat_template(
            [*messages, reply], tools=tools or None, tokenize=True, return_dict=True,
            return_assistant_tokens_mask=True)
        ids, mask = _ids(out["input_ids"]), _ids(out.get("assistant_masks") or [])
    except Exception:  # noqa: BLE001 - templates without generation markers
        ids, mask = _ids(tokenizer.apply_chat_template(
            [*messages, reply], tools=tools or None, tokenize=True, return_dict=False)), []
    if ids[:len(prompt)] != prompt:
        raise ConfigError("the chat template renders the prompt differently with the "
                          "reply appended", "tokenizer",
                          "use a template whose prompt is a prefix of the full conversation")
    labels = [IGNORE] * len(prompt) + ids[len(prompt):]
    if len(mask) == len(ids) and any(mask[len(prompt):]):
        labels = [t if i >= len(prompt) and mask[i] else IGNORE for i, t in enumerate(ids)]
    return ids, labels


def _ids(value: Any) -> list[int]:
    if value and isinstance(value[0], list):  # a batch of one
        value = value[0]
    return [int(v) for v in value]


def harness_tools(name: str, recorded_hash: str) -> list[dict[str, Any]] | None:
    """The tool schemas harness ``name`` offered, from its current file if unchanged.

    Tools are not stored per turn; the harness that recorded the episode
    defines them. A changed harness file could offer different tools, so a
    hash mismatch is refused rather than silently training on the wrong prompt.
    """
    from tackroom.harness.spec import AgentHarness, load_harness

    spec = load_harness(name)
    if isinstance(spec, AgentHarness):  # a CLI's own tools: recorded with each episode instead
        return None
    if recorded_hash and spec.hash != recorded_hash:
        raise ConfigError(
            f"harness {name!r} changed since these episodes were recorded "
            f"(recorded {recorded_hash}, now {spec.hash})", "--harness",
            "restore the harness file that recorded them, or select other runs")
    return spec.parser.tools(spec.interface)


def episode_tools(ep: Episode, harness_level: list[dict[str, Any]] | None, turn: int = 0
                  ) -> list[dict[str, Any]] | None:
    """The tools the model was offered in ``ep``'s turn ``turn``: an agent CLI's own, as its
    episode recorded them (``meta.agent``), or the harness's (``harness_level``)."""
    agent = ep.meta.get("agent") if isinstance(ep.meta, dict) else None
    if isinstance(agent, dict) and "tools" in agent:
        per_call = agent.get("tools_per_call")
        if isinstance(per_call, list) and turn < len(per_call):
            return per_call[turn]
        return agent["tools"]
    return harness_level


def build_dataset(store: RecordStore, selection: Selection, tokenizer: Any, *,
                  max_length: int | None = None, side_calls: bool = False) -> Dataset:
    """Tokenise every parsed turn of the selected episodes (see the module docstring).

    A turn with the prompt's ids as served (``prompt_token_ids``) is those ids and its
    completion's, not the chat template again; side calls are left out unless
    ``side_calls``.
    """
    rows = selection.episodes(store)
    if not rows:
        raise ConfigError("no recorded episodes match the selection", "sft",
                          "record some first (e.g. `tackroom eval --policy expert ...`) "
                          "or loosen --suite/--harness/--tasks/--outcome")
    tools_by_harness: dict[tuple[str, str], Any] = {}
    examples: list[Example] = []
    skipped = {"parse_error": 0, "no_reply": 0, "too_long": 0, "side_call": 0}
    for row in rows:
        key = (row["harness"], row["harness_hash"])
        if key not in tools_by_harness:
            tools_by_harness[key] = harness_tools(*key)
    episodes = store.load_episodes((r["run_id"], r["episode_id"]) for r in rows)
    for ep in episodes:
        key = (ep.harness, ep.harness_hash)
        for turn in ep.turns:
            if turn.side is not None and not side_calls:
                skipped["side_call"] += 1
                continue
            if turn.parse_error:
                skipped["parse_error"] += 1
                continue
            if not (turn.raw_text or turn.tool_calls):
                skipped["no_reply"] += 1
                continue
            if turn.prompt_token_ids and turn.token_ids:  # token-exact: the ids as served
                prompt = [int(t) for t in turn.prompt_token_ids]
                ids = prompt + [int(t) for t in turn.token_ids]
                labels = [IGNORE] * len(prompt) + ids[len(prompt):]
            else:
                ids, labels = encode_turn(tokenizer, turn.messages, reply_message(turn),
                                          episode_tools(ep, tools_by_harness[key],
                                                        turn.index))
            if max_length and len(ids) > max_length:
                skipped["too_long"] += 1
                continue
            examples.append(Example(ids, labels, ep.episode_id, turn.index))
    return Dataset(examples, len(rows), {k: v for k, v in skipped.items() if v})


def batches(examples: Sequence[Example], batch_size: int, epoch: int, seed: int,
            ) -> list[list[int]]:
    """Index batches for one epoch: similar lengths together, batch order shuffled.

    Sorting by length before cutting batches keeps padding small; a seeded
    shuffle of examples first (and of batches after) keeps epochs different
    and the order reproducible, which resuming relies on.
    """
    rng = random.Random(f"{seed}:{epoch}")
    order = list(range(len(examples)))
    rng.shuffle(order)
    # Sort within windows of 50 batches: nearly length-sorted, still mixed across tasks.
    window = batch_size * 50
    out: list[list[int]] = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start:start + window], key=lambda i: len(examples[i].input_ids))
        out.extend(chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size))
    rng.shuffle(out)
    return out


def collate(examples: Sequence[Example], pad_id: int, device: str) -> dict[str, Any]:
    """Right-padded tensors ``input_ids``, ``attention_mask``, ``labels``."""
    import torch

    width = max(len(e.input_ids) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, ex in enumerate(examples):
        n = len(ex.input_ids)
        ids[row, :n] = torch.tensor(ex.input_ids)
        labels[row, :n] = torch.tensor(ex.labels)
        mask[row, :n] = 1
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device),
            "labels": labels.to(device)}


def reply_loss(model: Any, batch: dict[str, Any]) -> tuple[Any, dict[str, float]]:
    """Mean cross-entropy over the reply tokens of a batch, and token accuracy.

    Logits are computed only from the first reply token on, with the rows'
    shared prompt run once (:func:`~tackroom.train.forward.logits_from`):
    the same loss and gradients as a plain forward pass, several times faster.
    """
    import torch

    from tackroom.train.forward import logits_from

    labels = batch["labels"]
    supervised = (labels != IGNORE).any(dim=0).nonzero()
    start = max(0, int(supervised[0, 0]) - 1) if len(supervised) else 0
    logits = logits_from(model, batch["input_ids"], batch["attention_mask"], start)
    logits = logits[:, :-1].float()
    target = labels[:, start + 1:]
    keep = target != IGNORE
    loss = torch.nn.functional.cross_entropy(logits[keep], target[keep])
    with torch.no_grad():
        acc = (logits[keep].argmax(-1) == target[keep]).float().mean()
    return loss, {"loss": float(loss.detach()), "token_accuracy": float(acc),
                  "tokens": int(keep.sum())}


@dataclass
class SFTConfig(Settings):
    """Everything ``tackroom sft`` needs; recorded as the run's config.

    Its numbers are checked on construction (cheaply: before torch loads), each error
    naming the command-line option that sets it; the episode selection, the adapter and
    the optimiser are checked by their own classes (:meth:`check_together`).
    """

    SECTIONS = ("sft",)
    LABEL = "sft"
    DOCS = "docs/training.md"

    model: str = setting(REQUIRED, "sft", "the model to start from (a local directory)",
                         flag="MODEL")
    out: str = setting(REQUIRED, "sft", "directory for checkpoints and the final model",
                       flag="--out")
    selection: Selection = field(default_factory=Selection)
    lora: LoraSettings | None = None
    optim: OptimSettings = field(default_factory=lambda: OptimSettings(lr=1e-3))
    epochs: float = setting(3.0, "sft", "passes over the examples (fractions allowed)",
                            bounds="(0, 1e4]", example="3", flag="--epochs")
    batch_size: int = setting(8, "sft", "examples per micro-batch", bounds=f"[1, {MAX_BATCH}]",
                              example="8", flag="--batch-size")
    max_length: int | None = setting(2048, "sft", "skip examples longer than this (tokens)",
                                     bounds="[1, 1e7]", example="2048", flag="--max-length")
    checkpoint_every: int = setting(50, "sft", "optimiser steps between checkpoints",
                                    bounds=f"[1, {MAX_STEPS}]", example="50",
                                    flag="--checkpoint-every")
    seed: int = setting(0, "sft", "seed (data order, initialisation of adapters)",
                        bounds=f"[0, {MAX_SEED}]", example="0", flag="--seed")
    device: str = setting("cpu", "sft", "cpu or cuda[:N]", flag="--device")
    threads: int | None = setting(None, "sft", "torch CPU threads", bounds="[1, 4096]",
                                  example="2", flag="--threads")
    # float16 / bfloat16 halves a full model on disk
    save_dtype: str | None = setting(None, "sft", "store the final full model in this dtype",
                                     choices=("float16", "bfloat16", "float32"),
                                     flag="--save-dtype")
    init_adapter: str | None = setting(None, "sft", "continue training this LoRA adapter",
                                       flag="--adapter")

    def check_together(self) -> None:
        """The model directory, the adapter and the optimiser settings."""
        if (problem := model_dir_problem(self.model)) is not None:
            raise ConfigError(problem, "MODEL", "create one with `tackroom model init DIR`")
        if self.lora is not None:
            self.lora.check("sft", {"rank": "--lora-rank", "alpha": "--lora-alpha"})
        self.optim.check("sft", {"lr": "--lr", "warmup_steps": "--warmup",
                                 "grad_accum": "--grad-accum"})

    def to_dict(self) -> dict[str, Any]:  # type: ignore[override]
        """Every field as plain data (the nested settings too), for the run's record."""
        return asdict(self)


@dataclass
class SFTResult:
    """Where the model went and how training went."""

    run_id: str
    final: Path
    steps: int
    examples: int
    skipped: dict[str, int]
    resumed_from: int | None
    last: dict[str, float]


def run_sft(config: SFTConfig, store: RecordStore, run_id: str, *,
            resume: bool = False, on_step: Callable[[int, int, dict[str, float]], None]
            | None = None) -> SFTResult:
    """Train per ``config`` on the store's episodes; checkpoints every few steps.

    With ``resume``, continues from the newest checkpoint under ``config.out``
    (refusing if the data changed); ``on_step(step, total, metrics)`` reports
    progress. Metrics of every step go to the store under ``run_id``.
    """
    config.validate()
    if not resume and latest_checkpoint(config.out) is not None:
        raise ConfigError(f"{config.out} already holds checkpoints", "--out",
                          "pass --resume to continue that run, or choose another --out")
    probe_tokenizer = _tokenizer(config.model)
    data = build_dataset(store, config.selection, probe_tokenizer, max_length=config.max_length)
    if not data.examples:
        raise ConfigError("the selected episodes hold no trainable turns", "sft",
                          f"skipped: {data.skipped}; raise --max-length or select others")
    per_epoch = -(-len(data.examples) // config.batch_size)
    micro_total = int(round(per_epoch * config.epochs))
    total_steps = max(1, micro_total // config.optim.grad_accum)
    engine = TrainEngine(config.model, config.out, total_steps, lora=config.lora,
                         optim=config.optim, init_adapter=config.init_adapter,
                         seed=config.seed, device=config.device, threads=config.threads)
    pad = engine.tokenizer.pad_token_id
    pad = pad if pad is not None else engine.tokenizer.eos_token_id
    micro, resumed_from = 0, None
    if resume:
        state = engine.resume()
        if state is not None:
            if state.get("data") != data.fingerprint:
                raise ConfigError("the selected episodes changed since the checkpoint",
                                  "--resume", "select the same episodes, or start a new --out")
            micro, resumed_from = int(state["micro"]), engine.step
    store.start_run(run_id, "sft", {**config.to_dict(), "engine": engine.describe(),
                                    "examples": len(data.examples), "skipped": data.skipped,
                                    "data": data.fingerprint}, n_planned=0)
    last: dict[str, float] = {}
    acc: list[dict[str, float]] = []
    t0 = time.perf_counter()
    for epoch, batch_idx in _schedule(data.examples, config, micro, micro_total):
        batch = collate([data.examples[i] for i in batch_idx], pad, config.device)
        loss, metrics = reply_loss(engine.model, batch)
        engine.backward(loss)
        micro += 1
        acc.append(metrics)
        if not engine.ready and micro < micro_total:
            continue
        step_info = engine.optimizer_step()
        tokens = sum(m["tokens"] for m in acc)
        last = {"loss": sum(m["loss"] * m["tokens"] for m in acc) / max(1, tokens),
                "token_accuracy": sum(m["token_accuracy"] * m["tokens"] for m in acc)
                / max(1, tokens), "tokens": tokens, "epoch": epoch + 1, **step_info,
                "seconds": time.perf_counter() - t0}
        acc = []
        store.log_train_step(run_id, engine.step, last)
        if on_step:
            on_step(engine.step, total_steps, last)
        if engine.step % config.checkpoint_every == 0 and micro < micro_total:
            engine.save_checkpoint({"micro": micro, "data": data.fingerprint,
                                    "run_id": run_id})
    engine.save_checkpoint({"micro": micro, "data": data.fingerprint, "run_id": run_id})
    final = engine.save_final(Path(config.out) / "final", dtype=config.save_dtype,
                              card={"sft": {"run_id": run_id, "steps": engine.step,
                                            "examples": len(data.examples),
                                            "selection": asdict(config.selection),
                                            "final_loss": last.get("loss")}})
    store.finish_run(run_id)
    return SFTResult(run_id, final, engine.step, len(data.examples), data.skipped,
                     resumed_from, last)


def _schedule(examples: Sequence[Example], config: SFTConfig, start: int, total: int,
              ) -> Iterator[tuple[int, list[int]]]:
    """(epoch, batch) pairs from micro-batch ``start`` to ``total``, reproducibly."""
    micro, epoch = 0, 0
    while micro < total:
        for batch in batches(examples, config.batch_size, epoch, config.seed):
            if micro >= total:
                return
            if micro >= start:
                yield epoch, batch
            micro += 1
        epoch += 1


def _tokenizer(model_dir: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
