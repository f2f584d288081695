"""The ``robot`` suite: a simulated gantry arm (MuJoCo) that reaches, pushes, picks and opens.

Tasks (``robot/reach``, ``robot/push``, ``robot/pick-place``, ``robot/open-drawer``)
are verified on the simulator state; seeds vary positions, colours and distractors, and
instructions name the target by colour, so acting on the wrong object can happen and is
its own failure mode (``wrong_object``). See docs/robot.md.

    suite = make_suite(screenshots=False)
    env = suite.make_env(suite.task("pick-place"))
    obs = env.reset(seed=0)          # obs.extra["state"]: poses of every object
    env.step(RobotCommand("move_ee", {"x": 0.1, "y": 0.0, "z": 0.2}))

Agent harnesses (an unmodified coding CLI, ``robot-mini-swe-agent``) run with the robot's
HTTP command API forwarded into their sandbox (:meth:`RobotEnv._run_agent`).

Options (``make_suite`` keywords, recorded with a run): ``screenshots`` (default on) gives
observations a lazy browser screenshot (only the ``robot_screenshot`` renderer asks for
one, so other harnesses never start a browser); ``unsafe_local`` runs controller scripts
without the bubblewrap sandbox.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import AsyncIterator
from typing import Any

from tackroom.core.errors import ConfigError, TaskNotFound
from tackroom.core.registry import register
from tackroom.core.task import Expert, Task, call_env
from tackroom.suites.robot.tasks import TASKS


class _WithShellForm:
    """A plan expert whose offer ends with the plan as a shell script of ``./robot`` calls:
    what an agent CLI's expert runs (:mod:`tackroom.agents.experts` takes the forms a shell
    can say); the loop harnesses stop at it, as at any action their interface cannot say."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __call__(self, obs: Any, state: dict[str, Any]) -> list[Any]:
        from tackroom.core.actions import Shell
        from tackroom.suites.robot.env import agent_script

        actions = self.inner(obs, state)
        return [*actions, Shell(agent_script(state["plan"]))]


class RobotPool:
    """A fresh :class:`RobotEnv` per episode; browser screenshotters are kept and reused.

    A Chromium takes a second or two to start, so the pool keeps the screenshotters of
    finished episodes for the next ones (at most one per concurrent episode) and closes
    them in :meth:`aclose`.
    """

    def __init__(self, suite: RobotSuite, size: int) -> None:
        self.suite = suite
        self.size = size
        self._free: list[Any] = []
        self._all: list[Any] = []

    @contextlib.asynccontextmanager
    async def acquire(self, task: Task) -> AsyncIterator[Any]:
        shooter = None
        if self.suite.screenshots:
            if self._free:
                shooter = self._free.pop()
            else:
                shooter = self.suite.make_screenshotter()
                self._all.append(shooter)
        env = self.suite.make_env(task, screenshotter=shooter)
        try:
            yield env
        finally:
            await call_env(env, env.close)
            if shooter is not None:
                self._free.append(shooter)

    async def aclose(self) -> None:
        for shooter in self._all:
            with contextlib.suppress(Exception):
                shooter.close()
        self._all.clear()
        self._free.clear()


class RobotSuite:
    """The robot tasks, their experts, and a pool of simulator environments."""

    name = "robot"
    default_harnesses = ("robot-screenshot", "robot-state", "robot-code")
    #: Physics runs on the CPU, a browser per episode for screenshots: a few at a time.
    default_concurrency = 2

    def __init__(self, screenshots: bool = True, unsafe_local: bool = False) -> None:
        self.screenshots = bool(screenshots)
        self.unsafe_local = bool(unsafe_local)

    def tasks(self) -> list[Task]:
        return list(TASKS.values())

    def task(self, task_id: str) -> Task:
        tid = task_id.split("/", 1)[1] if task_id.startswith("robot/") else task_id
        task = TASKS.get(tid)
        if task is None:
            raise TaskNotFound(f"no robot task {task_id!r}", "robot",
                               f"choose one of: {', '.join(TASKS)}")
        return task

    def expert(self, task: Task) -> Expert | None:
        from tackroom.suites.robot.experts import PlanExpert

        if task.suite != self.name or task.id not in TASKS:
            return None
        return _WithShellForm(PlanExpert(task.key))

    def preflight(self) -> None:
        """Refuse to start without MuJoCo, in one line."""
        if importlib.util.find_spec("mujoco") is None:
            raise ConfigError("the robot suite needs MuJoCo, which is not installed", "robot",
                              "pip install 'tackroom[robot]' (or pip install mujoco)")

    def make_screenshotter(self) -> Any:
        """A browser screenshotter (:mod:`tackroom.suites.robot.browser`); starts on first use."""
        from tackroom.suites.robot.browser import Screenshotter

        return Screenshotter()

    def make_env(self, task: Task, screenshotter: Any = None) -> Any:
        """A fresh environment for ``task`` (call ``reset(seed)`` on it)."""
        from tackroom.suites.robot.env import RobotEnv

        if task.suite != self.name or task.id not in TASKS:
            raise TaskNotFound(f"{task.key} is not a robot task", "robot",
                               f"choose one of: {', '.join(TASKS)}")
        return RobotEnv(task, screenshotter=screenshotter, unsafe_local=self.unsafe_local)

    def pool(self, size: int | None = None) -> RobotPool:
        self.preflight()
        return RobotPool(self, size or self.default_concurrency)


@register("suite", "robot")
def make_suite(screenshots: bool = True, unsafe_local: bool = False) -> RobotSuite:
    """The robot suite; ``screenshots=False`` never starts a browser, ``unsafe_local`` runs
    controller scripts without the sandbox."""
    return RobotSuite(screenshots=screenshots, unsafe_local=unsafe_local)


__all__ = ["RobotPool", "RobotSuite", "make_suite"]
