"""The ``toy`` suite: MiniWoB++-shaped click / type / form tasks in pure Python.

Pages are tiny in-memory element trees with MiniWoB's conventions (``div#query``
holds the instruction, ``div#area`` the task; inputs tagged ``input_<type>``;
deterministic, non-overlapping geometry), so every web harness renders and
acts on them exactly as on MiniWoB++, at thousands of episodes per second.

    suite = make_suite()
    task = suite.tasks()[0]
    env = suite.make_env(task)
    obs = env.reset(seed=0)
    result = env.step(suite.expert(task)(obs, {})[0])
"""

from __future__ import annotations

from tackroom.core.errors import TaskNotFound
from tackroom.core.registry import register
from tackroom.core.task import Expert, SimplePool, Task
from tackroom.suites.toy.env import ToyEnv
from tackroom.suites.toy.experts import EXPERTS
from tackroom.suites.toy.page import Page, ToyObservation, render_html
from tackroom.suites.toy.tasks import SPECS


class ToySuite:
    """All toy tasks, their experts and a pool of in-process environments."""

    name = "toy"
    #: Harnesses a run uses when it names none.
    default_harnesses: tuple[str, ...] = ("som-tools", "html-commands", "outline-coords")
    #: In-process environments: many episodes at a time cost nothing.
    default_concurrency = 16

    def __init__(self, max_steps: int = 100) -> None:
        self.max_steps = max_steps

    def tasks(self) -> list[Task]:
        return [spec.task for spec in SPECS.values()]

    def task(self, task_id: str) -> Task:
        spec = SPECS.get(task_id)
        if spec is None:
            raise TaskNotFound(f"no toy task {task_id!r}", "toy",
                               f"choose one of: {', '.join(SPECS)}")
        return spec.task

    def expert(self, task: Task) -> Expert | None:
        return EXPERTS.get(task.id) if task.suite == self.name else None

    def preflight(self) -> None:
        """Pure Python: nothing to check."""

    def make_env(self, task: Task) -> ToyEnv:
        """A fresh environment for ``task`` (call ``reset(seed)`` on it)."""
        spec = SPECS.get(task.id)
        if spec is None or task.suite != self.name:
            raise TaskNotFound(f"{task.key} is not a toy task", "toy",
                               f"choose one of: {', '.join(SPECS)}")
        return ToyEnv(spec.task, spec.build, self.max_steps)

    def pool(self, size: int | None = None) -> SimplePool:
        """In-process environments are cheap: a new one per episode, unbounded (``size`` is
        only reported), and their calls run on the event loop, never on a thread."""
        return SimplePool(self.make_env, size or 1)


@register("suite", "toy")
def make_suite() -> ToySuite:
    """MiniWoB++-shaped click, type and form tasks in pure Python (no browser)."""
    return ToySuite()


__all__ = ["Page", "ToyEnv", "ToyObservation", "ToySuite", "make_suite", "render_html"]
