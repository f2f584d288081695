"""The ``code`` suite: repository repair with hidden tests, SWE-bench style, in small.

Each task is a small stdlib-only Python package with a bug or a missing
feature, an issue text, and hidden unittest tests split into *requirement*
tests (fail before the fix, must pass: FAIL_TO_PASS) and *regression* tests
(pass before, must still pass: PASS_TO_PASS). The agent works in a bubblewrap
sandbox at ``/task``; ``Submit()`` runs the hidden tests. A failed episode
carries a failure mode: ``dropped_requirement``, ``broke_existing``,
``no_edit``, ``malformed_edits`` or ``budget_exhausted``.

    suite = make_suite()
    task = suite.tasks()[0]
    env = suite.make_env(task)
    obs = env.reset(seed=0)

See docs/code.md for the task format and the coding harnesses.
"""

from __future__ import annotations

from tackroom.core.errors import TaskNotFound
from tackroom.core.registry import register
from tackroom.core.task import Expert, SimplePool, Task
from tackroom.sandbox import Limits, require_sandbox
from tackroom.suites.code.env import DEFAULT_LIMITS, CodeEnv
from tackroom.suites.code.evaluate import TestReport, failure_mode, run_hidden_tests
from tackroom.suites.code.experts import FixExpert
from tackroom.suites.code.tasks import FAILURE_MODES, CodeTask, FixEdit, load_tasks


class CodeSuite:
    """All code tasks, their experts, and a pool of sandboxed environments.

    ``unsafe_local`` runs task commands directly on this machine, without
    bubblewrap (no isolation): only for machines where the sandbox cannot run.
    It is a suite option (``tackroom eval --unsafe-local``) that a run records.
    """

    name = "code"
    #: What `tackroom eval --suite code` runs without --harness: the four families.
    default_harnesses = ("edit-blocks", "aci-viewer", "codeact", "json-tools")
    #: Each episode runs hidden unit tests in its own sandbox: CPU-bound.
    default_concurrency = 16

    def __init__(self, limits: Limits = DEFAULT_LIMITS, unsafe_local: bool = False) -> None:
        self.limits = limits
        self.unsafe_local = bool(unsafe_local)
        self._tasks = load_tasks()

    def tasks(self) -> list[Task]:
        return [t.task for t in self._tasks.values()]

    def task(self, task_id: str) -> Task:
        return self.code_task(task_id).task

    def preflight(self) -> None:
        """Before a run: refuse without bubblewrap, saying why, unless unsafe-local."""
        if not self.unsafe_local:
            require_sandbox()

    def code_task(self, task: Task | str) -> CodeTask:
        """The full task data (files, tests, fix) for a task or task id."""
        tid = task if isinstance(task, str) else task.id
        found = self._tasks.get(tid)
        if found is None or (isinstance(task, Task) and task.suite != self.name):
            raise TaskNotFound(f"no code task {tid!r}", "code",
                               "list them with `tackroom tasks --suite code`")
        return found

    def expert(self, task: Task) -> Expert | None:
        if task.suite != self.name or task.id not in self._tasks:
            return None
        return FixExpert(self._tasks[task.id])

    def make_env(self, task: Task) -> CodeEnv:
        """A fresh environment for ``task`` (call ``reset(seed)`` on it)."""
        return CodeEnv(self.code_task(task), limits=self.limits, unsafe_local=self.unsafe_local)

    def pool(self, size: int | None = None) -> SimplePool:
        """A new sandboxed environment per episode, as many as are in flight (``size`` is
        not a bound); the run's environment threads bound how many run a command at once."""
        return SimplePool(self.make_env, size or 1)


@register("suite", "code")
def make_suite(*, unsafe_local: bool = False) -> CodeSuite:
    """The code suite; ``unsafe_local`` runs task commands without the sandbox."""
    return CodeSuite(unsafe_local=unsafe_local)


__all__ = ["FAILURE_MODES", "CodeEnv", "CodeSuite", "CodeTask", "FixEdit", "FixExpert",
           "TestReport", "failure_mode", "make_suite", "run_hidden_tests"]
