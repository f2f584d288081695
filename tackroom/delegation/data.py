"""Training data for decision models, read from recorded episodes.

A run under a harness with a ``[delegation]`` slot records, at every turn, each
decision point's choice set, the scripted expert's choice (the label) and the choice
the turn actually took. :func:`recorded_points` reads them back; a point is *after a
mistake* when the turn before it went wrong: a reply that could not be parsed, an
action the environment rejected, or an action the expert would not have taken.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tackroom.core.errors import ConfigError
from tackroom.policies.delegation.models import Example


@dataclass(frozen=True)
class RecordedPoint:
    """One decision point of one recorded turn."""

    run_id: str
    episode_id: str
    task: str
    seed: int
    turn: int
    point: dict[str, Any]      # type, context, choices (as the decision model reads it)
    expert: int | None         # the expert's choice (the label), if the task has an expert
    taken: int | None          # the choice the turn's action took
    acted: str                 # "llm" or "decision": who took the turn
    p: list[float] | None      # p_D over the choices, when a decision model was asked
    tau: float | None
    after_mistake: bool
    success: bool              # the episode's outcome

    @property
    def type(self) -> str:
        return self.point["type"]

    def example(self, weight: float = 1.0) -> Example:
        """A training example labelled by the expert (requires ``expert``)."""
        assert self.expert is not None
        return Example(point=self.point, label=self.expert, weight=weight,
                       post_mistake=self.after_mistake)


_SQL = """
SELECT e.run_id, e.episode_id, e.task, e.seed, e.outcome, t.idx, t.parse_error,
       t.action_error, CAST(t.delegation AS VARCHAR) AS delegation
FROM turns t JOIN episodes e USING (run_id, episode_id)
WHERE t.delegation IS NOT NULL {where}
ORDER BY e.run_id, e.episode_id, t.idx
"""


def recorded_points(db: str | Path, runs: Sequence[str] = ()) -> list[RecordedPoint]:
    """Every recorded decision point in ``db`` (of ``runs``, or all runs), in turn order."""
    from tackroom.records import RecordStore

    where, params = "", []
    if runs:
        where = "AND e.run_id IN (SELECT unnest(?::VARCHAR[]))"
        params = [list(runs)]
    with RecordStore(db, read_only=True) as store:
        rows = store.query(_SQL.format(where=where), params)
    out: list[RecordedPoint] = []
    prev_key, prev_mistake = None, False
    for row in rows:
        key = (row["run_id"], row["episode_id"])
        if key != prev_key:
            prev_key, prev_mistake = key, False
        rec = json.loads(row["delegation"])
        mistake = bool(row["parse_error"] or row["action_error"])
        for p in rec.get("points", []):
            expert, taken = p.get("expert"), p.get("taken")
            if expert is not None and taken is not None and expert != taken:
                mistake = True
            out.append(RecordedPoint(
                run_id=row["run_id"], episode_id=row["episode_id"], task=row["task"],
                seed=int(row["seed"]), turn=int(row["idx"]),
                point={"type": p["type"], "context": p["context"], "choices": p["choices"]},
                expert=expert, taken=taken, acted=rec.get("acted", "llm"),
                p=p.get("p"), tau=p.get("tau"), after_mistake=prev_mistake,
                success=row["outcome"] == "success"))
        prev_mistake = mistake
    return out


def labelled(points: Sequence[RecordedPoint]) -> list[RecordedPoint]:
    """The points that carry the expert's choice (the only ones a model can learn from)."""
    return [p for p in points if p.expert is not None]


def split_by_episode(points: Sequence[RecordedPoint], validation: float = 0.25
                     ) -> tuple[list[RecordedPoint], list[RecordedPoint]]:
    """A train / validation split that keeps each episode's points together.

    The split is a hash of the episode id: the same records always split the same way.
    """
    if not 0.0 < validation < 1.0:
        raise ConfigError(f"validation share {validation} must be between 0 and 1",
                          "--validation", "e.g. 0.25")
    train: list[RecordedPoint] = []
    val: list[RecordedPoint] = []
    for p in points:
        h = int(hashlib.sha256(f"{p.run_id}/{p.episode_id}".encode()).hexdigest()[:8], 16)
        (val if h / 0xFFFFFFFF < validation else train).append(p)
    return train, val
