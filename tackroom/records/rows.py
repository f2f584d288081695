"""Rows: how an :class:`Episode` and its turns become table rows, and back.

Writing scrubs every text and JSON value (:mod:`tackroom.core.secrets`)
and checks what the tables would refuse, so a bad episode fails the caller's
``append`` instead of a later batched commit. Reading turns rows back into
:class:`Episode` and :class:`Turn` objects. Also the small DuckDB cursor
helpers and the ``WHERE`` clause of the store's episode filters.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import duckdb
import pyarrow as pa

from tackroom.core.episode import Episode, Outcome, Turn
from tackroom.core.finite import NON_FINITE_LOGPROBS, finite_logprobs
from tackroom.core.secrets import may_hold_secret, scrub, scrub_text
from tackroom.harness.content import text_of
from tackroom.records.blobs import BlobStore, externalize, resolve
from tackroom.records.deltas import decode, encode
from tackroom.records.schema import (
    DERIVED_EPISODE_FIELDS,
    EPISODE_FIELDS,
    JSON_EPISODE_FIELDS,
)

__all__ = [
    "to_json", "scrubbed_json", "scrubbed_text", "episode_row", "turn_rows", "arrow_table",
    "loads", "full_messages", "turns_from_rows", "episode_from_row", "parse_episode_json", "one", "fetch_dicts",
    "where_clause",
]


def _json_default(obj: Any) -> Any:
    if isinstance(obj, enum.Enum):
        return obj.value
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, set | frozenset):
        return sorted(obj, key=repr)
    if isinstance(obj, bytes):
        return obj.decode("utf-8", errors="replace")
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    return str(obj)


def _finite(obj: Any) -> Any:
    """JSON has no NaN / Infinity: write them as strings."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def to_json(obj: Any) -> str:
    try:
        return json.dumps(obj, ensure_ascii=False, allow_nan=False, default=_json_default)
    except ValueError:
        return json.dumps(_finite(json.loads(json.dumps(obj, default=_json_default))),
                          ensure_ascii=False, allow_nan=False)


def scrubbed_json(obj: Any) -> str:
    """``obj`` as JSON with secrets scrubbed.

    Serialises first and scrubs only when the prefilter hits the document,
    which is much faster than walking every string of every message. The
    slow path scrubs the parsed JSON, so objects that only become dicts on
    serialisation (dataclasses, ``to_dict()``) are scrubbed too.
    """
    text = to_json(obj)
    if not may_hold_secret(text):
        return text
    return to_json(scrub(json.loads(text)))


def scrubbed_text(value: str | None) -> str | None:
    """``value`` as text with secrets scrubbed (``None`` stays ``None``)."""
    return None if value is None else scrub_text(str(value))


def _outcome(value: Outcome | str) -> Outcome:
    try:
        return Outcome(value)
    except ValueError:
        raise ValueError(
            f"unknown outcome {value!r}; expected one of {[o.value for o in Outcome]}"
        ) from None


def _validate(ep: Episode) -> None:
    """Reject what the tables would refuse, before it joins a batch of good episodes."""
    for name in ("episode_id", "run_id", "task"):
        value = getattr(ep, name)
        if not isinstance(value, str) or not value:
            raise ValueError(f"episode {ep.episode_id!r}: {name} must be a non-empty string, "
                             f"got {value!r}")
    indexes = [t.index for t in ep.turns]
    if len(set(indexes)) != len(indexes):
        raise ValueError(f"episode {ep.episode_id!r}: duplicate turn indexes {indexes}")


def episode_row(ep: Episode, now: float) -> dict[str, Any]:
    """The ``episodes`` row of ``ep`` (validated, scrubbed), recorded at ``now``."""
    _validate(ep)
    return {
        "episode_id": ep.episode_id,
        "run_id": ep.run_id,
        "task": ep.task,
        "suite": ep.suite,
        "harness": ep.harness,
        "harness_hash": ep.harness_hash,
        "policy": scrubbed_text(ep.policy),
        "seed": int(ep.seed),
        "attempt": int(ep.attempt),
        "sampling": scrubbed_json(ep.sampling),
        "outcome": _outcome(ep.outcome).value,
        "reward": float(ep.reward),
        "instruction": scrubbed_text(ep.instruction),
        "error": scrubbed_text(ep.error),
        "n_turns": ep.n_turns,
        "prompt_tokens": ep.prompt_tokens,
        "completion_tokens": ep.completion_tokens,
        "parse_errors": ep.parse_errors,
        "started_at": float(ep.started_at),
        "ended_at": float(ep.ended_at),
        "t_policy": float(ep.t_policy),
        "t_env": float(ep.t_env),
        "t_harness": float(ep.t_harness),
        "meta": scrubbed_json(ep.meta),
        "recorded_at": now,
        "failure_mode": scrubbed_text(ep.failure_mode),
    }


def turn_rows(ep: Episode, blobs: BlobStore | None = None) -> list[dict[str, Any]]:
    """The ``turns`` rows of ``ep`` (scrubbed), each turn's messages stored as a
    delta of the turn before (:mod:`tackroom.records.deltas`). With ``blobs``, images
    in the messages are written there and referenced (:mod:`tackroom.records.blobs`)."""
    rows: list[dict[str, Any]] = []
    # The base of a delta is the last turn of the same thread (call sequence): a CLI's
    # side calls and sub-agents interleave with its agent turns.
    bases: dict[int, tuple[int, list[Any]]] = {}
    memo: dict[int, Any] = {}
    for turn in sorted(ep.turns, key=lambda t: t.index):
        messages = turn.messages if blobs is None else externalize(turn.messages, blobs, memo)
        base = bases.get(turn.thread)
        delta = None if base is None else encode(base[1], messages)
        rows.append(_turn_row(ep.run_id, ep.episode_id, turn,
                              messages if delta is None else delta,
                              None if delta is None or base is None else base[0]))
        bases[turn.thread] = (turn.index, messages)
    return rows


def _turn_row(run_id: str, episode_id: str, turn: Turn, messages: list[Any],
              messages_from: int | None) -> dict[str, Any]:
    logprobs, notes = finite_logprobs(turn.logprobs), list(turn.notes)
    if logprobs is None and turn.logprobs is not None:
        # The policies check where log-probs enter; this keeps any other writer's
        # NaN / inf out of the file (and so out of every export and training batch).
        notes.append(NON_FINITE_LOGPROBS)
    return {
        "run_id": run_id,
        "episode_id": episode_id,
        "idx": int(turn.index),
        "messages": scrubbed_json(messages),
        "messages_from": messages_from,
        "raw_text": scrubbed_text(turn.raw_text),
        "tool_calls": scrubbed_json(turn.tool_calls),
        "parse_error": scrubbed_text(turn.parse_error),
        "feedback": scrubbed_text(turn.feedback),
        "actions": scrubbed_json(turn.actions),
        "action_error": scrubbed_text(turn.action_error),
        "observation": scrubbed_text(_observation_text(turn.observation)),
        "reward": float(turn.reward),
        "prompt_tokens": int(turn.prompt_tokens),
        "completion_tokens": int(turn.completion_tokens),
        "token_ids": _token_ids(turn.token_ids),
        "logprobs": logprobs,
        "adapter": turn.adapter,
        "t_policy": float(turn.t_policy),
        "t_env": float(turn.t_env),
        "t_harness": float(turn.t_harness),
        "delegation": None if turn.delegation is None else scrubbed_json(turn.delegation),
        "notes": scrubbed_json(notes) if notes else None,
        "side": turn.side,
        "thread": int(turn.thread),
        "prompt_token_ids": _token_ids(turn.prompt_token_ids),
    }


def _observation_text(obs: Any) -> str | None:
    """A turn's observation as text: content parts (images) as their text form."""
    return text_of(obs) if isinstance(obs, list) else obs


def _token_ids(ids: list[int] | None) -> list[int] | None:
    if ids is None:
        return None
    out = [int(t) for t in ids]
    if out and (min(out) < 0 or max(out) > 2**31 - 1):
        raise ValueError(f"token ids must be in [0, 2**31); got {min(out)}..{max(out)}")
    return out


def arrow_table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """Rows (dicts) as one Arrow table of ``schema``, for a bulk insert."""
    return pa.Table.from_pydict({name: [r[name] for r in rows] for name in schema.names},
                                schema=schema)


def loads(value: Any, default: Any) -> Any:
    """A JSON column's value parsed (``default`` for ``NULL``)."""
    if value is None:
        return default
    return json.loads(value) if isinstance(value, str) else value


def full_messages(rows: Iterable[Mapping[str, Any]],
                  blobs: BlobStore | None = None) -> Iterator[list[Any]]:
    """The whole message list of each of one episode's ``turns`` rows, in index order.

    A row's ``messages`` is the list itself when ``messages_from`` is ``NULL``
    (the first turn, and rows of stores before schema version 5), else a delta
    of turn ``messages_from``'s messages. With ``blobs``, stored image references
    come back as the ``data:`` URLs the model was sent.
    """
    seen: dict[int, list[Any]] = {}
    memo: dict[int, Any] = {}
    for row in rows:
        stored = loads(row["messages"], [])
        base = row.get("messages_from")
        if base is None:
            full = stored
        elif base in seen:
            full = decode(stored, seen[base])
        else:
            raise ValueError(f"turn {row['idx']} of episode {row['episode_id']!r} is stored "
                             f"as a delta of turn {base}, which is missing")
        seen[row["idx"]] = full
        yield full if blobs is None else resolve(full, blobs, memo)


def turns_from_rows(rows: Sequence[Mapping[str, Any]],
                    blobs: BlobStore | None = None) -> list[Turn]:
    """The :class:`Turn` objects of one episode's ``turns`` rows (in index order);
    ``blobs`` resolves stored image references (:func:`full_messages`)."""
    return [_turn_from_row(row, messages)
            for row, messages in zip(rows, full_messages(rows, blobs), strict=True)]


def _turn_from_row(row: Mapping[str, Any], messages: list[Any]) -> Turn:
    return Turn(
        index=row["idx"],
        messages=messages,
        raw_text=row["raw_text"],
        tool_calls=loads(row["tool_calls"], []),
        parse_error=row["parse_error"],
        feedback=row["feedback"],
        actions=loads(row["actions"], []),
        action_error=row["action_error"],
        observation=row["observation"],
        reward=row["reward"],
        prompt_tokens=row["prompt_tokens"],
        completion_tokens=row["completion_tokens"],
        token_ids=None if row["token_ids"] is None else list(row["token_ids"]),
        logprobs=None if row["logprobs"] is None else list(row["logprobs"]),
        adapter=row["adapter"],
        t_policy=row["t_policy"],
        t_env=row["t_env"],
        t_harness=row["t_harness"],
        delegation=loads(row.get("delegation"), None),
        notes=loads(row.get("notes"), None) or [],
        side=row.get("side"),
        thread=row.get("thread") or 0,
        prompt_token_ids=None if row.get("prompt_token_ids") is None
        else list(row["prompt_token_ids"]),
    )


def episode_from_row(row: Mapping[str, Any], turns: list[Turn]) -> Episode:
    """The :class:`Episode` of an ``episodes`` row, with ``turns``."""
    kwargs = {k: v for k, v in row.items()
              if k in EPISODE_FIELDS and k not in DERIVED_EPISODE_FIELDS}
    kwargs["sampling"] = loads(kwargs["sampling"], {})
    kwargs["meta"] = loads(kwargs["meta"], {})
    kwargs["outcome"] = Outcome(kwargs["outcome"])
    return Episode(**kwargs, turns=turns)


def parse_episode_json(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its JSON columns (``sampling``, ``meta``) parsed, in place."""
    for key in JSON_EPISODE_FIELDS:
        if key in row:
            row[key] = loads(row[key], {})
    return row


def one(cur: duckdb.DuckDBPyConnection) -> tuple[Any, ...] | None:
    """The first row, reading the result to the end (DuckDB 2 refuses new work on
    a connection while a result is unfinished)."""
    rows = cur.fetchall()
    return rows[0] if rows else None


def fetch_dicts(cur: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Every row of a result as a dict by column name."""
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def where_clause(run_id: str | None, filters: Mapping[str, Any]) -> tuple[str, list[Any]]:
    """The ``WHERE`` clause and parameters of :meth:`RecordStore.episodes` filters."""
    clauses: list[str] = []
    params: list[Any] = []
    if run_id is not None:
        clauses.append("run_id = ?")
        params.append(run_id)
    for key, value in filters.items():
        if key not in EPISODE_FIELDS:
            raise ValueError(f"unknown episode filter {key!r}; expected one of {EPISODE_FIELDS}")
        if value is None:
            clauses.append(f"{key} IS NULL")
            continue
        if isinstance(value, list | tuple | set | frozenset):
            values = [v.value if isinstance(v, enum.Enum) else v for v in value]
            clauses.append(f"list_contains(?, {key})")
            params.append(values)
        else:
            clauses.append(f"{key} = ?")
            params.append(value.value if isinstance(value, enum.Enum) else value)
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", params
