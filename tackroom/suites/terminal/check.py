"""Check a terminal task: its tests fail before the solution and pass after it.

    check_task(load_task(Path("my-task")))  # -> TaskCheck(unsolved=0.0, solved=1.0, ...)

Each half runs in its own freshly laid-out sandbox, exactly as an episode would.
"""

from __future__ import annotations

from dataclasses import dataclass

from tackroom.core.task import Task
from tackroom.sandbox import DEFAULT
from tackroom.suites.terminal.env import TerminalEnv
from tackroom.suites.terminal.taskdir import TaskDir
from tackroom.suites.terminal.verdict import missing_command


@dataclass
class TaskCheck:
    """Rewards without and with the reference solution, and what the scripts printed."""

    id: str
    unsolved: float
    solved: float | None  # None: the task has no solution/solve.sh
    solve_output: str = ""
    tests_output: str = ""
    #: Exit codes of the scripts (``None``: not run, or timed out).
    untouched_tests_exit: int | None = None
    solve_exit: int | None = None
    tests_exit: int | None = None
    #: What the sandbox lacks that a script calls (``"pytest not found"``), if anything.
    lacks: str | None = None

    @property
    def ok(self) -> bool:
        """The tests reject the untouched task and accept the solved one."""
        return self.lacks is None and self.unsolved < 1.0 and (
            self.solved is None or self.solved >= 1.0)

    def problem(self) -> str | None:
        """Why the task cannot be used as it is, in one line (``None`` when :attr:`ok`)."""
        if self.lacks is not None:
            return (f"the sandbox lacks what the task's scripts run ({self.lacks}): add it to "
                    "the sandbox's system, or give the task a set-up that provides it")
        if self.unsolved >= 1.0:
            return ("its tests pass on the untouched task (reward "
                    f"{self.unsolved:g}): they would score every agent a success")
        if self.solved is not None and self.solved < 1.0:
            tail = " ".join(self.tests_output.split())[-300:]
            return (f"its reference solution does not pass its tests (reward {self.solved:g}, "
                    f"exit {self.tests_exit}): {tail or '(no output)'}")
        return None


def check_task(td: TaskDir, *, unsafe_local: bool = False,
               sandbox: str = DEFAULT) -> TaskCheck:
    """Run the tests on the untouched task, then the solution and the tests again."""
    task = Task(td.id, "terminal", frozenset({"shell", "submit"}))
    env = TerminalEnv(task, td, unsafe_local=unsafe_local, sandbox=sandbox)
    try:
        env.reset(0)
        env.sandbox.close()  # type: ignore[union-attr]
        before = env.verify()
        unsolved, untouched, untouched_lacks = before.reward, before.result, before.missing
        if td.solution is None or untouched_lacks:
            return TaskCheck(td.id, unsolved, None, tests_output=untouched.output(2000),
                             untouched_tests_exit=untouched.exit_code,
                             lacks=untouched_lacks and f"{untouched_lacks}, in the tests")
        env.reset(0)
        solve = env.run_solution()
        env.sandbox.close()  # type: ignore[union-attr]
        after = env.verify()
        solved, tests = after.reward, after.result
        # which script lacked it: a reference solution that fetches its tools (curl …
        # | sh, pip install) cannot run in an episode, which has no network
        solve_lacks = missing_command(solve.exit_code, solve.output(2000))
        lacks = (f"{solve_lacks}, in the reference solution" if solve_lacks else
                 after.missing and f"{after.missing}, in the tests")
        return TaskCheck(td.id, unsolved, solved, solve.output(2000), tests.output(2000),
                         untouched_tests_exit=untouched.exit_code, solve_exit=solve.exit_code,
                         tests_exit=tests.exit_code, lacks=lacks)
    finally:
        env.close()
