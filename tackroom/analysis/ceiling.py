"""The ceiling C(h) = sup_π J_h(π): the best success any policy can reach under a harness.

The supremum is never observed; each estimator here gives a *lower bound* of
it, from a different kind of evidence (docs/research.md §1):

``"expert"``
    A scripted expert that acts only through h's own interface: its mean
    per-task success is the success of one particular policy under h.
``"pass@k union"``
    The fraction of tasks solved at least once by any policy recorded under
    h, over all seeds and samples. A task solved once through h's interface
    is solvable through it, and the supremum ranges over every policy,
    including one that reproduces that success. (With stochastic tasks and
    few seeds this is the most optimistic of the three.)
``"retrained"``
    The best success under h among policies trained under h.

Since all three bound C(h) from below, the best available estimate is the
largest of them (:func:`best_ceiling`). Each estimate is a mean over a task
set of per-task values in [0, 1] (kept in ``per_task``) so that mismatch and
gain can be measured on exactly the same tasks. Intervals are Wilson over
tasks (:func:`~tackroom.analysis.stats.wilson_mean`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tackroom.analysis.stats import TaskTable, pass_at_k, wilson_mean

__all__ = [
    "EXPERT", "CeilingEstimate", "PassAtK", "ceilings", "ceilings_from_table",
    "best_ceiling", "best_ceilings", "pass_at_k_table",
]

#: The policy id of the scripted expert (``tackroom.policies.expert``).
EXPERT = "expert"

TaskSets = Iterable[str] | Mapping[str, Iterable[str]] | None
CeilingsArg = Mapping[str, "CeilingEstimate | Sequence[CeilingEstimate]"]


@dataclass
class PassAtK:
    """Mean over tasks of one policy's unbiased per-task pass@k under one harness.

    Tasks with fewer than ``k`` scored samples have no unbiased estimate; they
    are left out and counted in ``n_skipped``. Interval: Wilson over tasks.
    """

    policy: str
    harness: str
    k: int
    value: float
    lo: float
    hi: float
    n_tasks: int
    n_skipped: int = 0


@dataclass
class CeilingEstimate:
    """One lower-bound estimate of C(h).

    Attributes:
        harness: the harness h.
        estimator: ``"expert"``, ``"pass@k union"`` or ``"retrained"``.
        value: the estimate, a mean over ``tasks`` of ``per_task``.
        lo / hi: 95% interval (how, is said in ``detail``).
        n_tasks: size of the task set.
        detail: how the number was made, in words.
        tasks: the task set, sorted.
        per_task: task -> value in [0, 1] (expert or retrained policy success
            rate; 1.0/0.0 solved-at-least-once for the union). A task never
            run counts 0, which keeps the estimate a lower bound.
        source: the policies behind the number (the expert, the chosen
            retrained policy, or every policy in the union).
        pass_at_k: per-policy pass@k under h (union estimator only), at k = 1
            and at the largest k every task of that policy allows.
    """

    harness: str
    estimator: str
    value: float
    lo: float
    hi: float
    n_tasks: int
    detail: str
    tasks: tuple[str, ...] = ()
    per_task: dict[str, float] = field(default_factory=dict)
    source: tuple[str, ...] = ()
    pass_at_k: list[PassAtK] = field(default_factory=list)


def _task_set(table: TaskTable, harness: str, tasks: TaskSets) -> list[str]:
    if tasks is None:
        return table.tasks(harness)
    if isinstance(tasks, Mapping):
        chosen = tasks.get(harness)
        return table.tasks(harness) if chosen is None else sorted(set(chosen))
    return sorted(set(tasks))


def _policy_pass_at_k(table: TaskTable, harness: str, policy: str, tasks: Sequence[str],
                      k: int) -> PassAtK:
    vals: list[float] = []
    skipped = 0
    for t in tasks:
        n, c = table.counts(harness, policy, t)
        if n < k:
            skipped += 1
            continue
        vals.append(pass_at_k(n, c, k))
    value = sum(vals) / len(vals) if vals else float("nan")
    lo, hi = wilson_mean(value, len(vals)) if vals else (0.0, 1.0)
    return PassAtK(policy=policy, harness=harness, k=k, value=value, lo=lo, hi=hi,
                   n_tasks=len(vals), n_skipped=skipped)


def pass_at_k_table(rows: Iterable[Mapping[str, Any]], ks: Iterable[int] = (1,), *,
                    tasks: TaskSets = None) -> list[PassAtK]:
    """Per (harness, policy) pass@k for each ``k``, the unbiased estimator averaged over tasks.

    ``tasks`` restricts the task set (one set for all harnesses, or a
    harness -> tasks mapping); tasks a policy ran fewer than ``k`` times are
    skipped (``n_skipped``).
    """
    table = TaskTable(rows)
    out = []
    for h in table.harnesses():
        task_set = _task_set(table, h, tasks)
        for p in table.policies(h):
            for k in ks:
                out.append(_policy_pass_at_k(table, h, p, task_set, k))
    return out


def _mean(per_task: Mapping[str, float]) -> float:
    return sum(per_task.values()) / len(per_task)


def _estimate(harness: str, estimator: str, per_task: dict[str, float], detail: str,
              source: tuple[str, ...], **extra: Any) -> CeilingEstimate:
    value = _mean(per_task)
    lo, hi = wilson_mean(value, len(per_task))
    return CeilingEstimate(harness=harness, estimator=estimator, value=value, lo=lo, hi=hi,
                           n_tasks=len(per_task), tasks=tuple(per_task), per_task=per_task,
                           source=source,
                           detail=detail + f"; Wilson 95% over {len(per_task)} tasks", **extra)


def _per_task_rates(table: TaskTable, harness: str, policy: str, tasks: Sequence[str]
                    ) -> tuple[dict[str, float], int]:
    """Per-task success (0 where never run) and how many tasks were run."""
    per_task: dict[str, float] = {}
    ran = 0
    for t in tasks:
        r = table.rate(harness, policy, t)
        ran += r is not None
        per_task[t] = r or 0.0
    return per_task, ran


def _unrun_note(ran: int, n: int) -> str:
    return "" if ran == n else f"; ran {ran} of {n} tasks, the rest count 0"


def ceilings_from_table(table: TaskTable, *, train_harness: Mapping[str, str] | None = None,
                        tasks: TaskSets = None, expert: str = EXPERT
                        ) -> dict[str, list[CeilingEstimate]]:
    """:func:`ceilings` on an already-built :class:`~tackroom.analysis.stats.TaskTable`."""
    train_harness = train_harness or {}
    out: dict[str, list[CeilingEstimate]] = {}
    for h in table.harnesses():
        task_set = _task_set(table, h, tasks)
        if not task_set:
            out[h] = []
            continue
        policies = table.policies(h)
        estimates: list[CeilingEstimate] = []

        if expert in policies:
            per_task, ran = _per_task_rates(table, h, expert, task_set)
            estimates.append(_estimate(
                h, "expert", per_task,
                f"mean per-task success of {expert!r} acting through {h}{_unrun_note(ran, len(task_set))}",
                (expert,)))

        solved = {t: 0.0 for t in task_set}
        episodes = 0
        for p in policies:
            for t in task_set:
                n, c = table.counts(h, p, t)
                episodes += n
                if c:
                    solved[t] = 1.0
        pak = []
        for p in policies:
            counts = [table.counts(h, p, t)[0] for t in task_set]
            run_counts = [n for n in counts if n]
            if not run_counts:
                continue
            pak.append(_policy_pass_at_k(table, h, p, task_set, 1))
            if min(run_counts) > 1:
                pak.append(_policy_pass_at_k(table, h, p, task_set, min(run_counts)))
        estimates.append(_estimate(
            h, "pass@k union", solved,
            f"tasks solved at least once by any of {len(policies)} policies "
            f"({episodes} scored episodes, all seeds and samples)",
            tuple(policies), pass_at_k=pak))

        trained = [p for p in policies if p != expert and train_harness.get(p) == h]
        if trained:
            scored = []
            for p in trained:
                per_task, ran = _per_task_rates(table, h, p, task_set)
                scored.append((_mean(per_task), p, per_task, ran))
            # Highest success; on a tie the alphabetically first policy.
            _, best, per_task, ran = min(scored, key=lambda s: (-s[0], s[1]))
            others = ", ".join(f"{p}={v:.3f}" for v, p, _, _ in scored if p != best)
            noun = "policy" if len(trained) == 1 else "policies"
            detail = (f"best of {len(trained)} {noun} trained under {h}: {best!r}"
                      + (f" (others: {others}; the max of several is biased up)" if others else "")
                      + _unrun_note(ran, len(task_set)))
            estimates.append(_estimate(h, "retrained", per_task, detail, (best,)))
        out[h] = estimates
    return out


def ceilings(rows: Iterable[Mapping[str, Any]], *, train_harness: Mapping[str, str] | None = None,
             tasks: TaskSets = None, expert: str = EXPERT) -> dict[str, list[CeilingEstimate]]:
    """Every available lower-bound estimate of C(h), for every harness in ``rows``.

    Args:
        rows: episode rows (final attempts are kept, infra errors dropped here).
        train_harness: policy id -> harness it was trained under; enables the
            ``"retrained"`` estimator. The expert is never counted as trained.
        tasks: the task set: ``None`` for the tasks run under each harness,
            one iterable for all harnesses (makes ceilings comparable across
            harnesses), or a harness -> tasks mapping.
        expert: the expert's policy id.

    Returns:
        harness -> estimates in the order expert, pass@k union, retrained
        (those that apply; empty when the task set is empty). All are lower
        bounds of the true C(h); take the largest with :func:`best_ceiling`.
    """
    return ceilings_from_table(TaskTable(rows), train_harness=train_harness, tasks=tasks,
                               expert=expert)


def best_ceiling(estimates: Sequence[CeilingEstimate]) -> CeilingEstimate:
    """The largest of several lower bounds of the same C(h), hence the tightest.

    Every estimator in this module bounds the supremum from below, so the
    maximum is still a lower bound and the best one available. Ties go to the
    earlier estimate (expert, then union, then retrained).

    Raises:
        ValueError: on an empty list.
    """
    if not estimates:
        raise ValueError("best_ceiling needs at least one estimate")
    best = estimates[0]
    for e in estimates[1:]:
        if e.value > best.value:
            best = e
    return best


def best_ceilings(ceilings: CeilingsArg) -> dict[str, CeilingEstimate]:
    """harness -> one estimate: the best of a list, or the estimate itself if one was given."""
    out: dict[str, CeilingEstimate] = {}
    for h, est in ceilings.items():
        if isinstance(est, CeilingEstimate):
            out[h] = est
        elif est:
            out[h] = best_ceiling(est)
    return out
