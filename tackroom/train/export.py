"""Groups with advantages, exported to Parquet in the shapes verl and TRL read.

For training at scale elsewhere: tackroom groups the recorded episodes and
computes their advantages (grouping, normalisation and std scaling exactly
as ``tackroom train`` would), and writes one row per *turn* — the prompt the
policy saw, the reply it gave, and the episode's group, reward and advantage.

``verl.parquet`` — verl's RL dataset (``data.train_files``): ``data_source``,
``prompt`` (chat messages, ``{role, content}``), ``ability``,
``reward_model`` ``{style, ground_truth}`` and ``extra_info`` (a struct with
``index``, ``split`` and everything tackroom knows about the row: run,
episode, task, harness and its hash, seed, turn, group, reward, advantage,
the recorded response and the tool schemas). ``ground_truth`` is the task
instance as JSON (suite, task, seed), since the verifier is the environment.

``trl.parquet`` — TRL's conversational prompt-completion format: ``prompt``
(messages) and ``completion`` (the assistant message), plus ``tools`` (JSON
schemas) and the columns ``advantage``, ``reward``, ``group``, ``task``,
``harness``, ``seed``, ``episode_id``, ``run_id``, ``turn`` — which TRL's
``GRPOTrainer`` hands to reward functions as keyword arguments.

Assistant tool calls appear in ``content`` as the Hermes ``<tool_call>``
blocks the chat template renders, so both files are plain ``{role, content}``
conversations. Both read with ``datasets.load_dataset("parquet", data_files=...)``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tackroom.core.episode import Episode, Turn
from tackroom.core.errors import ConfigError
from tackroom.harness.content import text_of
from tackroom.policies.chat_format import format_tool_call
from tackroom.records.store import RecordStore
from tackroom.train.config import RLConfig
from tackroom.train.samples import episode_reward, episode_sample, scored
from tackroom.train.sft import Selection

FORMATS = ("verl", "trl")

_MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])
_EXTRA = pa.struct([
    ("index", pa.int64()), ("split", pa.string()), ("run_id", pa.string()),
    ("episode_id", pa.string()), ("suite", pa.string()), ("task", pa.string()),
    ("harness", pa.string()), ("harness_hash", pa.string()), ("seed", pa.int64()),
    ("turn", pa.int64()), ("group", pa.string()), ("reward", pa.float64()),
    ("advantage", pa.float64()), ("outcome", pa.string()), ("response", pa.string()),
    ("tools", pa.string()), ("policy", pa.string()), ("adapter", pa.string()),
])
VERL_SCHEMA = pa.schema([
    ("data_source", pa.string()), ("prompt", pa.list_(_MESSAGE)), ("ability", pa.string()),
    ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
    ("extra_info", _EXTRA),
])
TRL_SCHEMA = pa.schema([
    ("prompt", pa.list_(_MESSAGE)), ("completion", pa.list_(_MESSAGE)), ("tools", pa.string()),
    ("advantage", pa.float64()), ("reward", pa.float64()), ("group", pa.string()),
    ("task", pa.string()), ("harness", pa.string()), ("seed", pa.int64()),
    ("episode_id", pa.string()), ("run_id", pa.string()), ("turn", pa.int64()),
])


@dataclass
class ExportResult:
    """What was written."""

    files: dict[str, Path]
    rows: int
    episodes: int
    groups: int


def _text_message(msg: dict[str, Any]) -> dict[str, str]:
    """An OpenAI message as ``{role, content}``: tool calls rendered as the template does."""
    content = msg.get("content")
    if isinstance(content, list):  # content parts: the text ones, an image as "[image]"
        content = text_of(content)
    text = content or ""
    calls = msg.get("tool_calls") or []
    blocks = []
    for call in calls:
        fn = call.get("function", call)
        args = fn.get("arguments", "{}")
        try:
            args = json.loads(args) if isinstance(args, str) else args
        except ValueError:
            pass  # a malformed call stays as the raw text the model wrote
        blocks.append(format_tool_call(str(fn.get("name", "")), args))
    if blocks:
        text = "\n".join([text, *blocks]) if text else "\n".join(blocks)
    return {"role": str(msg.get("role", "user")), "content": text}


def reply_text(turn: Turn) -> str:
    """The reply of a turn as one assistant message's content."""
    msg: dict[str, Any] = {"role": "assistant", "content": turn.raw_text or ""}
    if turn.tool_calls:
        msg["tool_calls"] = turn.tool_calls
    return _text_message(msg)["content"]


def export_groups(store: RecordStore, out_dir: str | Path, cfg: RLConfig | None = None, *,
                  runs: Sequence[str] = (), suite: str = "", harnesses: Sequence[str] = (),
                  tasks: Sequence[str] = (), formats: Sequence[str] = FORMATS) -> ExportResult:
    """Group the selected episodes, compute advantages per ``cfg``, write Parquet files.

    ``cfg`` supplies ``grouping.*`` (group, normalise, scale_std, std_eps) and the
    algorithm whose defaults apply; ``None`` uses the defaults (within, GRPO).
    Infra-error episodes are left out (never scored).
    """
    from tackroom.train.advantages import advantages_from_config
    from tackroom.train.sft import episode_tools, harness_tools

    cfg = cfg or RLConfig()
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise ConfigError(f"unknown export format {bad[0] if bad else ''!r}", "--format",
                          f"use {', '.join(FORMATS)}")
    selection = Selection(suite=suite or None, harnesses=tuple(harnesses), tasks=tuple(tasks),
                          outcomes=(), runs=tuple(runs))
    rows = selection.episodes(store)
    episodes: list[Episode] = scored(store.load_episode(r["episode_id"], run_id=r["run_id"])
                                     for r in rows)
    if not episodes:
        raise ConfigError("no scored episodes match the selection", "export-groups",
                          "check the run ids (`tackroom runs`) and the filters")
    adv = advantages_from_config([episode_sample(e, cfg.reward, cfg.verifier) for e in episodes], cfg)
    tools: dict[tuple[str, str], Any] = {}
    verl_rows: list[dict[str, Any]] = []
    trl_rows: list[dict[str, Any]] = []
    for k, ep in enumerate(episodes):
        key = (ep.harness, ep.harness_hash)
        if key not in tools:
            tools[key] = harness_tools(*key)
        group = str(adv.groups[adv.group_index[k]])
        for turn in ep.turns:
            if not (turn.raw_text or turn.tool_calls) or turn.side is not None:
                continue  # no reply, or a side call (a title, a summary): not agent steps
            prompt = [_text_message(m) for m in turn.messages]
            response = reply_text(turn)
            offered = json.dumps(episode_tools(ep, tools[key], turn.index) or [])
            common = {"run_id": ep.run_id, "episode_id": ep.episode_id, "task": ep.task,
                      "harness": ep.harness, "seed": int(ep.seed), "turn": int(turn.index),
                      "group": group, "reward": episode_reward(ep, cfg.reward, cfg.verifier),
                      "advantage": float(adv.values[k])}
            verl_rows.append({
                "data_source": f"tackroom/{ep.suite}", "prompt": prompt, "ability": "agent",
                "reward_model": {"style": "rule", "ground_truth": json.dumps(
                    {"suite": ep.suite, "task": ep.task, "seed": int(ep.seed)})},
                "extra_info": {**common, "index": len(verl_rows), "split": "train",
                               "suite": ep.suite, "harness_hash": ep.harness_hash,
                               "outcome": ep.outcome.value, "response": response,
                               "tools": offered, "policy": ep.policy,
                               "adapter": turn.adapter}})
            trl_rows.append({**common, "prompt": prompt,
                             "completion": [{"role": "assistant", "content": response}],
                             "tools": offered})
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    for fmt, data, schema in (("verl", verl_rows, VERL_SCHEMA), ("trl", trl_rows, TRL_SCHEMA)):
        if fmt not in formats:
            continue
        path = out / f"{fmt}.parquet"
        tmp = out / f".{fmt}.parquet.tmp"
        pq.write_table(pa.Table.from_pylist(data, schema=schema), tmp)
        tmp.replace(path)
        files[fmt] = path
    return ExportResult(files, len(trl_rows), len(episodes), len(adv.groups))
