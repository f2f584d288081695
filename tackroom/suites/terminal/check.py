"""Check a terminal task: its tests fail before the solution and pass after it.

    check_task(load_task(Path("my-task")))  # -> TaskCheck(unsolved=0.0, solved=1.0, ...)

Each half runs in its own freshly laid-out sandbox, exactly as an episode would.
"""

from __future__ import annotations

from dataclasses import dataclass

from tackroom.core.task import Task
from tackroom.suites.terminal.env import TerminalEnv
from tackroom.suites.terminal.taskdir import TaskDir


@dataclass
class TaskCheck:
    """Rewards without and with the reference solution, and what the scripts printed."""

    id: str
    unsolved: float
    solved: float | None  # None: the task has no solution/solve.sh
    solve_output: str = ""
    tests_output: str = ""

    @property
    def ok(self) -> bool:
        """The tests reject the untouched task and accept the solved one."""
        return self.unsolved < 1.0 and (self.solved is None or self.solved >= 1.0)


def check_task(td: TaskDir, *, unsafe_local: bool = False) -> TaskCheck:
    """Run the tests on the untouched task, then the solution and the tests again."""
    task = Task(td.id, "terminal", frozenset({"shell", "submit"}))
    env = TerminalEnv(task, td, unsafe_local=unsafe_local)
    try:
        env.reset(0)
        env.sandbox.close()  # type: ignore[union-attr]
        unsolved, _ = env.verify()
        if td.solution is None:
            return TaskCheck(td.id, unsolved, None)
        env.reset(0)
        solve = env.run_solution()
        env.sandbox.close()  # type: ignore[union-attr]
        solved, tests = env.verify()
        return TaskCheck(td.id, unsolved, solved, solve.output(2000), tests.output(2000))
    finally:
        env.close()
