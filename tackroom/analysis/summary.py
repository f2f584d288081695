"""Per-(harness, policy) and per-task summaries of a run's episodes.

Input rows are the scalar episode rows of the record store (dicts). Only the
final attempt of each cell counts; infra errors are counted apart and never
enter a success rate.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tackroom.analysis.stats import final_attempts, wilson
from tackroom.core.episode import Outcome

__all__ = ["INFRA", "CellSummary", "by_harness_policy", "by_task", "final_attempts"]

#: The outcome never counted in a rate (read by tackroom/report/html.py).
INFRA = Outcome.INFRA_ERROR


@dataclass
class CellSummary:
    """Success of one group of episodes, infra errors excluded from the rate."""

    harness: str
    policy: str
    n: int  # scored episodes (infra errors excluded)
    successes: int
    infra_errors: int
    mean_turns: float
    mean_tokens: float
    parse_errors: int
    outcomes: dict[str, int]

    @property
    def rate(self) -> float:
        return self.successes / self.n if self.n else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.successes, self.n)


def _summarise(harness: str, policy: str, rows: list[dict[str, Any]]) -> CellSummary:
    scored = [r for r in rows if r["outcome"] != INFRA]
    outcomes: dict[str, int] = defaultdict(int)
    for r in rows:
        outcomes[r["outcome"]] += 1
    n = len(scored)
    return CellSummary(
        harness=harness, policy=policy, n=n,
        successes=sum(1 for r in scored if r["outcome"] == Outcome.SUCCESS),
        infra_errors=len(rows) - n,
        mean_turns=sum(r["n_turns"] for r in scored) / n if n else 0.0,
        mean_tokens=(sum(r["prompt_tokens"] + r["completion_tokens"] for r in scored) / n
                     if n else 0.0),
        parse_errors=sum(r.get("parse_errors", 0) or 0 for r in scored),
        outcomes=dict(outcomes),
    )


def by_harness_policy(rows: Iterable[dict[str, Any]]) -> list[CellSummary]:
    """One summary per (harness, policy), in first-seen order."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in final_attempts(rows):
        groups[(r["harness"], r["policy"])].append(r)
    return [_summarise(h, p, rs) for (h, p), rs in groups.items()]


def by_task(rows: Iterable[dict[str, Any]]) -> dict[tuple[str, str, str], CellSummary]:
    """``(task, harness, policy) -> summary`` for the per-task matrix."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in final_attempts(rows):
        groups[(r["task"], r["harness"], r["policy"])].append(r)
    return {k: _summarise(k[1], k[2], rs) for k, rs in groups.items()}
