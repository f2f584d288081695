"""The ``terminal`` suite: shell tasks in Harbor's task-directory format, run in a sandbox.

Built-in tasks live in ``tasks/<id>/`` next to this file; tasks brought in with
``tackroom tasks import DIR`` live in ``$TACKROOM_TASKS/terminal/`` (default
``./tackroom-tasks/terminal``). Every command runs in the bubblewrap sandbox of
:mod:`tackroom.sandbox`; without bubblewrap the suite refuses to run unless
``unsafe_local=True`` is given (``tackroom eval --unsafe-local``, the suite option
``unsafe_local``, which the run records so that ``--resume`` keeps it).

    suite = make_suite()
    env = suite.make_env(suite.task("csv-column-sum"))
    obs = env.reset(seed=0)
    env.step(Shell("ls")); env.step(Submit())   # the tests decide
"""

from __future__ import annotations

from pathlib import Path

from tackroom.core.actions import Action, Shell, Submit
from tackroom.core.errors import TaskNotFound
from tackroom.core.observation import Observation
from tackroom.core.registry import register
from tackroom.core.task import Expert, SimplePool, Task
from tackroom.sandbox import DEFAULT, provider, require_sandbox
from tackroom.suites.terminal.env import TerminalEnv
from tackroom.suites.terminal.importer import task_store
from tackroom.suites.terminal.taskdir import TaskDir, load_task

BUILTIN = Path(__file__).parent / "tasks"
#: What a terminal task needs of a harness's action interface.
REQUIRES = frozenset({"shell", "submit"})


class SolutionExpert:
    """Runs the task's ``solution/solve.sh`` as one command, then submits."""

    def __init__(self, script: str) -> None:
        self.script = script

    def __call__(self, obs: Observation, state: dict) -> list[Action]:
        if state.get("ran"):
            return [Submit()]
        state["ran"] = True
        return [Shell(self.script), Submit()]


class TerminalSuite:
    """Built-in and imported terminal tasks, their solution experts, sandboxed environments."""

    name = "terminal"
    #: Harnesses ``tackroom eval --suite terminal`` uses when none are named.
    default_harnesses = ("terminal-bash", "terminal-keys")
    #: Sandboxes are cheap to start.
    default_concurrency = 16

    def __init__(self, unsafe_local: bool = False, store: Path | None = None,
                 sandbox: str = DEFAULT) -> None:
        self.provider = provider(sandbox)  # an unknown name: one line naming the registered
        self.unsafe_local = bool(unsafe_local)
        self.sandbox = sandbox
        self.store = store or task_store()
        self._dirs: dict[str, TaskDir] | None = None

    def task_dirs(self) -> dict[str, TaskDir]:
        """Every task directory by id: built-ins first, then imported ones."""
        if self._dirs is None:
            dirs: dict[str, TaskDir] = {}
            for root in (BUILTIN, self.store):
                if root.is_dir():
                    for p in sorted(root.iterdir()):
                        if p.is_dir() and p.name not in dirs:
                            dirs[p.name] = load_task(p)
            self._dirs = dirs
        return self._dirs

    def _task(self, td: TaskDir) -> Task:
        return Task(td.id, self.name, REQUIRES, td.description, td.solution is not None,
                    meta={"path": str(td.path), "category": td.category,
                          "difficulty": td.difficulty,
                          "builtin": td.path.parent == BUILTIN.resolve()})

    def tasks(self) -> list[Task]:
        return [self._task(td) for td in self.task_dirs().values()]

    def task(self, task_id: str) -> Task:
        td = self.task_dirs().get(task_id)
        if td is None:
            raise TaskNotFound(f"no terminal task {task_id!r}", "terminal",
                               "list them with `tackroom tasks --suite terminal`")
        return self._task(td)

    def expert(self, task: Task) -> Expert | None:
        td = self.task_dirs().get(task.id)
        script = td.solution_script() if td is not None else None
        return SolutionExpert(script) if script is not None else None

    def make_env(self, task: Task) -> TerminalEnv:
        """A fresh environment for ``task``; refuses without bubblewrap unless unsafe-local."""
        td = self.task_dirs().get(task.id)
        if td is None or task.suite != self.name:
            raise TaskNotFound(f"{task.key} is not a terminal task", "terminal",
                               "list them with `tackroom tasks --suite terminal`")
        if not self.unsafe_local:
            require_sandbox()
        return TerminalEnv(task, td, unsafe_local=self.unsafe_local, sandbox=self.sandbox)

    def preflight(self) -> None:
        """Before a run: refuse without bubblewrap (or Docker, if asked), saying why."""
        if self.provider.runs_images:
            self.provider.require()
        if not self.unsafe_local:
            require_sandbox()

    def pool(self, size: int | None = None) -> SimplePool:
        """A new sandbox per episode, as many as are in flight (``size`` is not a bound):
        the run's environment threads (``tackroom.runner.grid.env_threads``) bound how
        many sandboxed commands run at once."""
        if not self.unsafe_local:
            require_sandbox()
        return SimplePool(self.make_env, size or 4)


@register("suite", "terminal")
def make_suite(*, unsafe_local: bool = False, sandbox: str = DEFAULT) -> TerminalSuite:
    """The terminal suite; ``unsafe_local`` runs task commands without the sandbox,
    ``sandbox="docker"`` runs tasks that have a Dockerfile with Docker."""
    return TerminalSuite(unsafe_local=unsafe_local, sandbox=sandbox)


__all__ = ["SolutionExpert", "TerminalEnv", "TerminalSuite", "make_suite"]
