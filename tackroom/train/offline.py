"""Offline training data: frozen task-harness records from the store (docs/research.md §2).

The research's multi-harness runs train on *frozen* records: episodes of
several harnesses, recorded once, grouped and weighted afterwards. Here they
are episodes of the record store chosen by ``[data]`` (runs, suite,
harnesses, tasks) — every outcome but ``infra_error``, since failures carry
half the signal.

Each step takes ``tasks_per_step`` tasks with *all* their selected episodes
(every harness, every sample), so ``within`` and ``cross`` groups are whole;
tasks are visited in a seeded order, epoch after epoch. The recorded
log-probs are π_old (the behaviour policy that wrote the records); turns
without them are recomputed with the current policy before each update,
and :attr:`RecordSource.logprob_note` says how many.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tackroom.core.episode import Episode, Outcome
from tackroom.core.errors import ConfigError
from tackroom.records.store import RecordStore
from tackroom.train.samples import usable_logprobs
from tackroom.train.sft import Selection, episode_tools, harness_tools


@dataclass
class RecordSource:
    """The selected episodes of a store, served ``tasks_per_step`` tasks at a time.

    Build with :meth:`open`.
    """

    store: RecordStore
    rows_by_task: dict[str, list[dict[str, Any]]]
    tools: dict[tuple[str, str], list[dict[str, Any]] | None]
    tasks_per_step: int
    seed: int
    fingerprint: str
    n_episodes: int
    harnesses: list[str]
    turns_with_logprobs: int = 0
    turns_total: int = 0
    _cache: dict[tuple[str, str], Episode] = field(default_factory=dict, repr=False)

    @classmethod
    def open(cls, store: RecordStore, *, runs: Sequence[str] = (), suite: str = "",
             harnesses: Sequence[str] = (), tasks: Sequence[str] = (), tasks_per_step: int = 8,
             seed: int = 0) -> RecordSource:
        """Select the episodes; refuse an empty selection or a changed harness file."""
        selection = Selection(suite=suite or None, harnesses=tuple(harnesses),
                              tasks=tuple(tasks), outcomes=(), runs=tuple(runs))
        rows = [r for r in selection.episodes(store)]
        outcomes = _outcomes(store, rows)
        rows = [r for r in rows if outcomes[(r["run_id"], r["episode_id"])]
                != Outcome.INFRA_ERROR.value]
        if not rows:
            where = ", ".join(f"{k}={v}" for k, v in (("runs", list(runs)), ("suite", suite),
                                                       ("harnesses", list(harnesses)),
                                                       ("tasks", list(tasks))) if v)
            raise ConfigError(f"no recorded episodes match data.source = \"records\" "
                              f"({where or 'the whole store'})", "[data]",
                              "record some first (tackroom eval ...), or loosen data.runs / "
                              "data.harnesses / data.tasks")
        by_task: dict[str, list[dict[str, Any]]] = {}
        tools: dict[tuple[str, str], Any] = {}
        for r in rows:
            by_task.setdefault(r["task"], []).append(r)
            key = (r["harness"], r["harness_hash"])
            if key not in tools:
                tools[key] = harness_tools(*key)
        digest = hashlib.sha256("\n".join(f"{r['run_id']}/{r['episode_id']}"
                                          for r in rows).encode()).hexdigest()[:16]
        src = cls(store, by_task, tools, tasks_per_step, seed, digest, len(rows),
                  sorted({r["harness"] for r in rows}))
        src._count_logprobs()
        return src

    def _count_logprobs(self) -> None:
        rows = self.store.query(
            "SELECT t.token_ids, t.logprobs FROM turns t JOIN episodes e "
            "ON t.run_id = e.run_id AND t.episode_id = e.episode_id "
            "WHERE list_contains(?, e.run_id || '/' || e.episode_id)",
            [[f"{r['run_id']}/{r['episode_id']}" for rs in self.rows_by_task.values()
              for r in rs]])
        total = with_lp = 0
        for row in rows:
            ids = row["token_ids"]
            total += 1
            with_lp += bool(ids) and usable_logprobs(_LP(row["logprobs"]), len(ids))
        self.turns_total, self.turns_with_logprobs = total, with_lp

    @property
    def logprob_note(self) -> str:
        """One line: whether the records' log-probs are used as π_old, or recomputed."""
        n, k = self.turns_total, self.turns_with_logprobs
        if k == n:
            return f"records: all {n} turns carry log-probs; used as π_old"
        if k == 0:
            return (f"records: none of the {n} turns carry log-probs; recomputing π_old with "
                    "the current policy before each update")
        return (f"records: {n - k} of {n} turns carry no log-probs; recomputing those with "
                "the current policy before each update (the other turns use the recorded "
                "ones)")

    @property
    def tasks(self) -> list[str]:
        return sorted(self.rows_by_task)

    def batch(self, index: int) -> list[Episode]:
        """The episodes of rollout batch ``index`` (0-based, over the whole run)."""
        tasks = self.tasks
        per = min(self.tasks_per_step, len(tasks))
        epoch, start = divmod(index * per, len(tasks))
        chosen: list[str] = []
        while len(chosen) < per:
            # Batches tile a stream of seeded shuffles, one per epoch; a batch that
            # straddles two epochs never takes a task twice.
            order = list(tasks)
            random.Random(f"tackroom-records:{self.seed}:{epoch}").shuffle(order)
            chosen.extend(t for t in order[start:] if t not in chosen)
            chosen = chosen[:per]
            epoch, start = epoch + 1, 0
        episodes = []
        for task in chosen:
            for r in self.rows_by_task[task]:
                key = (r["run_id"], r["episode_id"])
                if key not in self._cache:
                    self._cache[key] = self.store.load_episode(r["episode_id"],
                                                               run_id=r["run_id"])
                episodes.append(self._cache[key])
        if len(self._cache) > 20_000:  # a bounded cache: big stores are read batch by batch
            self._cache.clear()
        return episodes

    def tools_for(self, ep: Episode, turn: int = 0) -> list[dict[str, Any]] | None:
        return episode_tools(ep, self.tools[(ep.harness, ep.harness_hash)], turn)


@dataclass
class _LP:
    logprobs: Any


def _outcomes(store: RecordStore, rows: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    if not rows:
        return {}
    got = store.query("SELECT run_id, episode_id, outcome FROM episodes WHERE "
                      "list_contains(?, run_id || '/' || episode_id)",
                      [[f"{r['run_id']}/{r['episode_id']}" for r in rows]])
    return {(g["run_id"], g["episode_id"]): g["outcome"] for g in got}
