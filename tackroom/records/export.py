"""Exports of recorded episodes: JSONL, Parquet and ATIF trajectories.

* :func:`export_jsonl` — one JSON object per line per episode, turns nested;
  the same fields as :meth:`Episode.to_dict` plus the derived counts.
* :func:`export_parquet` — one row per episode; ``turns`` is a list of
  structs (JSON-valued fields such as ``messages`` are JSON strings), readable
  by ``datasets.load_dataset("parquet", data_files=path)``, pandas, DuckDB.
* :func:`export_atif` — ``<out_dir>/<episode_id>/trajectory.json`` per
  episode in Harbor's Agent Trajectory Interchange Format, ATIF-v1.4
  (``<out_dir>/<run_id>/<episode_id>/trajectory.json`` when exporting every
  run).

Every export reads the (already scrubbed) record store and returns the
number of episodes written. ``run_id=None`` exports every run; an episode id
recorded in several runs (the same grid cell run again) is then exported once
per run, each record carrying its ``run_id``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tackroom.core.episode import Episode, Turn
from tackroom.core.errors import ConfigError
from tackroom.records.blobs import REF_SCHEME, BlobStore
from tackroom.records.rows import full_messages, to_json
from tackroom.records.store import RecordStore

__all__ = ["export_jsonl", "export_parquet", "export_atif", "episode_to_atif", "episode_dict",
           "ATIF_VERSION"]

ATIF_VERSION = "ATIF-v1.4"


def _check_file_target(path: Path) -> None:
    """Refuse an output path that is a directory or any non-regular file (symlink, FIFO,
    device): an export replaces only regular files. A missing path is fine."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ConfigError(f"cannot use this output path ({exc.strerror})", str(path),
                          "pass a writable file path with --out") from None
    if stat.S_ISDIR(mode):
        raise ConfigError("is a directory, not a file", str(path), "pass a file path with --out")
    if not stat.S_ISREG(mode):
        raise ConfigError(f"exists and is not a regular file ({_kind(mode)}); not replacing it",
                          str(path), "pass the path of a new or regular file with --out")


#: For other writers of output files (the HTML report): the same refusals as an export.
check_output_file = _check_file_target


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


def _write_error(exc: OSError, path: Path) -> ConfigError:
    reason = exc.strerror or str(exc)
    return ConfigError(f"cannot write the export ({reason})", str(path),
                       "pass a writable path with --out")


def _atomic_target(path: Path) -> Path:
    _check_file_target(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _write_error(exc, path) from None
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()  # our own leftover (or anything else there): never write through it
    return tmp


# ---------------------------------------------------------------------------
# JSONL
# ---------------------------------------------------------------------------

_EPISODE_FIELDS = tuple(f.name for f in dataclasses.fields(Episode))
_TURN_FIELDS = tuple(f.name for f in dataclasses.fields(Turn))


def episode_dict(ep: Episode) -> dict[str, Any]:
    """The export form of an episode: ``Episode.to_dict()`` plus derived counts.

    Built field by field instead of with ``to_dict()``: ``dataclasses.asdict``
    deep-copies every message and was 3/4 of the export time.
    """
    d = {name: getattr(ep, name) for name in _EPISODE_FIELDS}
    d["outcome"] = ep.outcome.value
    d["turns"] = [{name: getattr(t, name) for name in _TURN_FIELDS} for t in ep.turns]
    d.update(n_turns=ep.n_turns, prompt_tokens=ep.prompt_tokens,
             completion_tokens=ep.completion_tokens, parse_errors=ep.parse_errors)
    return d


def export_jsonl(store: RecordStore, run_id: str | None, path: str | Path) -> int:
    """Write one JSON object per episode (turns nested) to ``path``.

    Non-finite floats (NaN, ±inf) are written as strings so every line is
    strict JSON. The file is written to a temporary name and renamed, so a
    reader never sees half a file. Returns the number of episodes written.
    """
    path = Path(path)
    tmp = _atomic_target(path)
    n = 0
    try:
        with tmp.open("w", encoding="utf-8") as f:
            for ep in store.iter_episodes(run_id):
                f.write(to_json(episode_dict(ep)))
                f.write("\n")
                n += 1
        _check_file_target(path)  # still not something else, just before replacing it
        tmp.replace(path)
    except OSError as exc:
        raise _write_error(exc, path) from None
    finally:
        tmp.unlink(missing_ok=True)
    return n


# ---------------------------------------------------------------------------
# Parquet
# ---------------------------------------------------------------------------

_TURN_STRUCT = """struct_pack(
    "index" := t.idx,
    messages := CAST(t.messages AS VARCHAR),
    raw_text := t.raw_text,
    tool_calls := CAST(t.tool_calls AS VARCHAR),
    parse_error := t.parse_error,
    feedback := t.feedback,
    actions := CAST(t.actions AS VARCHAR),
    action_error := t.action_error,
    observation := t.observation,
    reward := t.reward,
    prompt_tokens := t.prompt_tokens,
    completion_tokens := t.completion_tokens,
    token_ids := t.token_ids,
    logprobs := t.logprobs,
    adapter := t.adapter,
    t_policy := t.t_policy,
    t_env := t.t_env,
    t_harness := t.t_harness,
    messages_from := t.messages_from,
    delegation := CAST(t.delegation AS VARCHAR),
    notes := CAST(t.notes AS VARCHAR),
    side := t.side,
    thread := t.thread,
    prompt_token_ids := t.prompt_token_ids)"""

# ``k``: the (run_id, episode_id) records of one batch, from two parallel lists.
_PARQUET_SQL = f"""
WITH k AS (SELECT unnest(?::VARCHAR[]) AS run_id, unnest(?::VARCHAR[]) AS episode_id)
SELECT e.episode_id, e.run_id, e.task, e.suite, e.harness, e.harness_hash, e.policy,
       e.seed, e.attempt, CAST(e.sampling AS VARCHAR) AS sampling, e.outcome,
       e.outcome = 'success' AS success, e.reward, e.instruction, e.error, e.n_turns,
       e.prompt_tokens, e.completion_tokens, e.parse_errors, e.started_at, e.ended_at,
       e.t_policy, e.t_env, e.t_harness, CAST(e.meta AS VARCHAR) AS meta,
       coalesce(t.turns, []) AS turns
FROM episodes e
JOIN k USING (run_id, episode_id)
LEFT JOIN (
    SELECT t.run_id, t.episode_id, list({_TURN_STRUCT} ORDER BY t.idx) AS turns
    FROM turns t
    JOIN k USING (run_id, episode_id)
    GROUP BY t.run_id, t.episode_id
) t USING (run_id, episode_id)
ORDER BY e.started_at, e.episode_id, e.run_id
"""


def export_parquet(store: RecordStore, run_id: str | None, path: str | Path, *,
                   batch_size: int = 512) -> int:
    """Write one row per episode to a Parquet file at ``path``.

    Columns: the episode's scalar fields (``sampling`` and ``meta`` as JSON
    strings), ``success`` (bool) and ``turns``, a list of structs with every
    :class:`Turn` field (``messages``, ``tool_calls`` and ``actions`` as JSON
    strings; ``token_ids`` / ``logprobs`` as lists). Episodes are read
    ``batch_size`` at a time, so memory stays bounded on big runs. Returns the
    number of episodes written.
    """
    path = Path(path)
    keys = [(r["run_id"], r["episode_id"]) for r in store.episodes(run_id)]
    tmp = _atomic_target(path)
    writer: pq.ParquetWriter | None = None
    schema: pa.Schema | None = None
    n = 0
    try:
        # One pass even when there are no episodes, to write a typed empty file.
        for start in range(0, max(len(keys), 1), batch_size):
            chunk = keys[start:start + batch_size]
            table = _whole_messages(
                store.arrow(_PARQUET_SQL, [[k[0] for k in chunk], [k[1] for k in chunk]]),
                store.blobs)
            if schema is None:
                schema = _parquet_schema(table.schema)
                writer = pq.ParquetWriter(tmp, schema)
            assert writer is not None  # opened with the schema, on the first chunk
            writer.write_table(table.cast(schema))
            n += table.num_rows
        assert writer is not None
        writer.close()
        writer = None
        _check_file_target(path)
        tmp.replace(path)
    except OSError as exc:
        raise _write_error(exc, path) from None
    finally:
        if writer is not None:
            writer.close()
        tmp.unlink(missing_ok=True)
    return n


def _whole_messages(table: pa.Table, blobs: BlobStore | None = None) -> pa.Table:
    """Each turn's ``messages`` as the whole list it saw, not the stored delta.

    The stored text is kept as it is where it is the whole list (and names no
    stored image); a rebuilt list is written by the same JSON encoder that wrote
    the stored text, so the export reads exactly as it did when every turn
    stored its list. Images come back as the ``data:`` URLs the model was sent.
    """
    column = table.schema.field("turns").type.value_type
    turn_type = pa.struct([f for f in column if f.name != "messages_from"])
    episodes = table.column("turns").to_pylist()
    for episode_id, turns in zip(table.column("episode_id").to_pylist(), episodes, strict=True):
        rows = [{"idx": t["index"], "messages": t["messages"],
                 "messages_from": t.pop("messages_from"), "episode_id": episode_id}
                for t in turns]
        for t, row, full in zip(turns, rows, full_messages(rows, blobs), strict=True):
            if row["messages_from"] is not None or REF_SCHEME in (t["messages"] or ""):
                t["messages"] = to_json(full)
    return table.set_column(table.schema.get_field_index("turns"), "turns",
                            pa.array(episodes, type=pa.list_(turn_type)))


def _parquet_schema(schema: pa.Schema) -> pa.Schema:
    """Plain ``string`` instead of ``large_string`` / ``string_view``, for every reader."""
    def plain(t: pa.DataType) -> pa.DataType:
        if pa.types.is_large_string(t) or pa.types.is_string_view(t):
            return pa.string()
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return pa.list_(pa.field(t.value_field.name, plain(t.value_type)))
        if pa.types.is_struct(t):
            return pa.struct([pa.field(f.name, plain(f.type)) for f in t])
        return t

    return pa.schema([pa.field(f.name, plain(f.type)) for f in schema])


# ---------------------------------------------------------------------------
# ATIF
# ---------------------------------------------------------------------------

def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat().replace("+00:00", "Z")


def _text(content: Any) -> str:
    """A chat message's ``content`` as one string (ATIF-v1.4 messages are text)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                if part.get("type") == "text" or "text" in part:
                    parts.append(str(part.get("text", "")))
                else:
                    parts.append(f"[{part.get('type', 'content')}]")
            else:
                parts.append(str(part))
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False)


def _atif_tool_call(call: dict[str, Any], fallback_id: str) -> dict[str, Any]:
    """An OpenAI tool call ``{id, function: {name, arguments: "<json>"}}`` → ATIF."""
    fn = call.get("function")
    if not isinstance(fn, dict):
        fn = call
    raw = fn.get("arguments", {})
    if isinstance(raw, str):
        try:
            args: Any = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            args = {"_raw": raw}  # the model wrote arguments that are not JSON
    else:
        args = raw
    if not isinstance(args, dict):
        args = {"_value": args}
    return {
        "tool_call_id": str(call.get("id") or fallback_id),
        "function_name": str(fn.get("name", "")),
        "arguments": args,
    }


def _followups(turns: list[Turn], i: int) -> list[dict[str, Any]] | None:
    """The messages shown to the model after turn ``i`` answered, if the next
    turn's prompt contains them: everything after its last assistant message."""
    if i + 1 >= len(turns):
        return None
    messages = turns[i + 1].messages
    last = max((k for k, m in enumerate(messages) if m.get("role") == "assistant"),
               default=None)
    if last is None:
        return None
    return messages[last + 1:]


def _observation(turns: list[Turn], i: int, call_ids: list[str]) -> dict[str, Any] | None:
    results: list[dict[str, Any]] = []
    followups = _followups(turns, i)
    if followups is not None:
        for m in followups:
            result: dict[str, Any] = {"content": _text(m.get("content"))}
            if m.get("role") == "tool" and m.get("tool_call_id") in call_ids:
                result["source_call_id"] = m["tool_call_id"]
            results.append(result)
    else:
        # Last turn (or a harness that re-renders a fresh prompt each turn):
        # use what the turn recorded.
        turn = turns[i]
        texts = [turn.feedback, turn.observation]
        if turn.action_error and not (turn.feedback and turn.action_error in turn.feedback):
            texts.insert(0, turn.action_error)
        results = [{"content": t} for t in texts if t]
        if results and len(call_ids) == 1:
            results[0]["source_call_id"] = call_ids[0]
    return {"results": results} if results else None


def _clean(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def episode_to_atif(ep: Episode) -> dict[str, Any]:
    """One episode as an ATIF-v1.4 trajectory (a JSON-ready dict).

    Mapping:

    * ``session_id`` is the episode id; ``agent`` is ``tackroom/<harness>``
      at version ``<harness_hash>`` with the policy as ``model_name``.
    * The first turn's prompt becomes ``system`` / ``user`` steps (one per
      message; a few-shot ``assistant`` message there becomes an ``agent``
      step marked ``extra.prompt_context``).
    * Each turn becomes an ``agent`` step: ``message`` is the raw model text,
      ``tool_calls`` its tool calls (``arguments`` parsed from the JSON
      string), ``metrics`` its token counts, completion token ids and
      log-probs, and ``observation`` what the model was shown next (the next
      turn's messages after its last assistant message, or for the last turn
      the recorded feedback and observation).
    * tackroom specifics (parsed actions, parse / action errors, turn reward,
      timings) go in each step's ``extra``; outcome, reward, seed, harness,
      harness_hash and the rest in the root ``extra``.

    Step timestamps are derived: episode start plus the recorded phase times.
    """
    steps: list[dict[str, Any]] = []

    def add(step: dict[str, Any]) -> None:
        steps.append(_clean({"step_id": len(steps) + 1, **step}))

    start = ep.started_at if ep.started_at > 0 else None
    prompt = ep.turns[0].messages if ep.turns else []
    sources: dict[object, str] = {"system": "system", "user": "user", "assistant": "agent"}
    for m in prompt:
        role = m.get("role")
        source = sources.get(role, "system")
        extra: dict[str, Any] = {"role": role}
        if role == "assistant":
            extra["prompt_context"] = True
        step: dict[str, Any] = {"timestamp": _iso(start) if start else None, "source": source,
                                "message": _text(m.get("content")), "extra": extra}
        if role == "assistant" and m.get("tool_calls"):
            step["tool_calls"] = [_atif_tool_call(c, f"prompt-{len(steps)}-{k}")
                                  for k, c in enumerate(m["tool_calls"])]
        add(step)
    if not steps:
        add({"timestamp": _iso(start) if start else None, "source": "user",
             "message": ep.instruction or ""})

    elapsed = 0.0
    for i, turn in enumerate(ep.turns):
        calls = [_atif_tool_call(c, f"turn-{turn.index}-call-{k}")
                 for k, c in enumerate(turn.tool_calls)]
        call_ids = [c["tool_call_id"] for c in calls]
        elapsed += turn.t_policy
        metrics = _clean({
            "prompt_tokens": turn.prompt_tokens,
            "completion_tokens": turn.completion_tokens,
            "completion_token_ids": turn.token_ids,
            "logprobs": turn.logprobs,
        })
        step_extra = _clean({
            "turn_index": turn.index,
            "actions": turn.actions or None,
            "parse_error": turn.parse_error,
            "action_error": turn.action_error,
            "feedback": turn.feedback,
            "reward": turn.reward,
            "adapter": turn.adapter,
            "t_policy": turn.t_policy,
            "t_env": turn.t_env,
            "t_harness": turn.t_harness,
            "delegation": turn.delegation,
            "notes": turn.notes or None,
            "side": turn.side,
            "thread": turn.thread or None,
        })
        add({
            "timestamp": _iso(start + elapsed) if start else None,
            "source": "agent",
            "message": turn.raw_text or "",
            "tool_calls": calls or None,
            "observation": _observation(ep.turns, i, call_ids),
            "metrics": metrics,
            "extra": step_extra,
        })
        elapsed += turn.t_env + turn.t_harness

    return {
        "schema_version": ATIF_VERSION,
        "session_id": ep.episode_id,
        "agent": {
            "name": f"tackroom/{ep.harness}",
            "version": ep.harness_hash,
            "model_name": ep.policy,
            "extra": {"framework": "tackroom", "framework_version": _tackroom_version()},
        },
        "steps": steps,
        "notes": ("Exported by tackroom: one model call per agent step; observation is "
                  "what the model was shown next; step timestamps are derived from "
                  "recorded phase times."),
        "final_metrics": {
            "total_prompt_tokens": ep.prompt_tokens,
            "total_completion_tokens": ep.completion_tokens,
            "total_steps": len(steps),
            "extra": {"n_turns": ep.n_turns, "parse_errors": ep.parse_errors},
        },
        "extra": {
            "run_id": ep.run_id,
            "task": ep.task,
            "suite": ep.suite,
            "harness": ep.harness,
            "harness_hash": ep.harness_hash,
            "policy": ep.policy,
            "seed": ep.seed,
            "attempt": ep.attempt,
            "sampling": ep.sampling,
            "outcome": ep.outcome.value,
            "success": ep.success,
            "reward": ep.reward,
            "instruction": ep.instruction,
            "error": ep.error,
            "started_at": ep.started_at,
            "ended_at": ep.ended_at,
            "t_policy": ep.t_policy,
            "t_env": ep.t_env,
            "t_harness": ep.t_harness,
            "meta": ep.meta,
        },
    }


def _tackroom_version() -> str:
    from tackroom.core.version import __version__

    return __version__


def _dir_name(id_: str) -> str:
    """An id as one safe path component (tackroom episode ids are hex already)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", id_)
    return name if name.strip(".") else f"_{name}"


def export_atif(store: RecordStore, run_id: str | None, out_dir: str | Path) -> int:
    """Write one ATIF-v1.4 ``trajectory.json`` per episode under ``out_dir``.

    One run (``run_id`` given): ``<out_dir>/<episode_id>/trajectory.json``.
    Every run (``run_id=None``): ``<out_dir>/<run_id>/<episode_id>/trajectory.json``,
    because the same episode id recurs in each run of the same grid. The
    trajectory's ``session_id`` is the episode id either way (its run is in
    the root ``extra.run_id``). See :func:`episode_to_atif` for the mapping.
    Returns the number of episodes written.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError("exists and is not a directory", str(out),
                          "ATIF writes a directory of trajectory.json files: pass a new or "
                          "existing directory with --out")
    n = 0
    for ep in store.iter_episodes(run_id):
        base = out if run_id is not None else out / _dir_name(ep.run_id)
        folder = base / _dir_name(ep.episode_id)
        target = folder / "trajectory.json"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp = _atomic_target(target)
            # Compact JSON: an indented dump uses the pure-Python encoder, ~10x slower.
            try:
                tmp.write_text(to_json(episode_to_atif(ep)) + "\n", encoding="utf-8")
                tmp.replace(target)
            finally:
                tmp.unlink(missing_ok=True)
        except OSError as exc:
            raise _write_error(exc, target) from None
        n += 1
    return n
