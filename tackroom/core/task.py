"""Tasks, environments and suites: the Gymnasium-shaped contract every suite meets."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
from collections.abc import AsyncIterator
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tackroom.core.actions import Action
from tackroom.core.observation import Observation

#: Capabilities a task may require and a harness's action interface may offer.
CAPABILITIES = ("click", "type", "press", "drag", "scroll", "shell", "edit", "submit", "robot")


@dataclass(frozen=True)
class Task:
    """One unit of work.

    Attributes:
        id: unique within the suite, e.g. ``click-test-2``.
        suite: the suite name, e.g. ``miniwob``.
        requires: capabilities an action interface needs to solve it at all.
        description: one line for listings (the per-seed instruction comes
            from ``Environment.reset``).
        has_expert: whether the suite ships a scripted expert for it.
        meta: suite-specific details.
    """

    id: str
    suite: str
    requires: frozenset[str] = frozenset({"click"})
    description: str = ""
    has_expert: bool = False
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def key(self) -> str:
        """``suite/id``, the global task name used in records."""
        return f"{self.suite}/{self.id}"


@dataclass
class StepResult:
    """What ``Environment.step`` returns (Gymnasium's 5-tuple, named).

    ``success`` is the verifier's verdict, set when ``terminated`` is true.
    """

    observation: Observation
    reward: float
    terminated: bool
    truncated: bool = False
    success: bool | None = None
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Environment(Protocol):
    """A live episode of a task: ``reset(seed)`` then ``step(action)`` until terminated.

    ``step`` raises :class:`~tackroom.core.errors.ActionError` for an action
    the page rejects and :class:`~tackroom.core.errors.InfraError` when the
    infrastructure fails. ``blocking`` tells the runner to call the
    environment from a worker thread (browsers, sandboxes).
    """

    blocking: bool

    def reset(self, seed: int) -> Observation: ...

    def step(self, action: Action) -> StepResult: ...

    def close(self) -> None: ...


class Suite(Protocol):
    """A named collection of tasks with a pool of environments to run them.

    What a run asks of a suite, declared here rather than probed for:
    ``default_harnesses`` (used when a run names none), ``default_concurrency``
    (episodes at a time when a run does not say), ``preflight()`` (refuse to
    start, in one line, when something the suite needs is missing, e.g. the
    sandbox), and ``task(id)`` (one task, or :class:`~tackroom.core.errors.TaskNotFound`).
    Suite options (e.g. ``unsafe_local``) are keyword arguments of the suite's
    ``make_suite``; a run records them, and ``resume`` builds the suite with them.
    """

    name: str
    default_harnesses: tuple[str, ...]
    default_concurrency: int

    def tasks(self) -> list[Task]: ...

    def task(self, task_id: str) -> Task:
        """The task called ``task_id``; ``TaskNotFound`` if there is none."""
        ...

    def expert(self, task: Task) -> Expert | None:
        """The scripted solver for ``task``, if the suite has one."""
        ...

    def preflight(self) -> None:
        """Raise a :class:`~tackroom.core.errors.TackroomError` if a run cannot start."""
        ...

    def pool(self, size: int | None = None) -> EnvironmentPool:
        """Environments for up to ``size`` concurrent episodes (``None``: the suite's default)."""
        ...


class EnvironmentPool(Protocol):
    """Hands out environments; a browser pool reuses and restarts browsers."""

    size: int

    def acquire(self, task: Task) -> contextlib.AbstractAsyncContextManager[Environment]: ...

    async def aclose(self) -> None: ...


class Expert(Protocol):
    """A scripted solver: given the observation, the next action(s).

    ``state`` is a dict kept for the episode, for solvers that need memory.
    An expert never touches the environment: the harness encodes its
    actions in the harness's own format and parses them back, so an expert's
    success is a lower bound of what the harness allows.
    """

    def __call__(self, obs: Observation, state: dict[str, Any]) -> list[Action]: ...


class SimplePool:
    """A pool for environments made per episode: a new one for each ``acquire``.

    It bounds nothing (``size`` is only reported): in-process environments
    (toy) cost a few objects each, and sandboxes (terminal, code) start per
    episode, so as many may be live as episodes are in flight. What bounds the
    machine's work is :data:`ENV_EXECUTOR`, the run's threads for blocking
    environment calls. A blocking environment is closed there too, since
    tearing down a sandbox would otherwise hold the event loop.
    """

    def __init__(self, factory: Any, size: int) -> None:
        self._factory = factory
        self.size = size

    @contextlib.asynccontextmanager
    async def acquire(self, task: Task) -> AsyncIterator[Environment]:
        env = self._factory(task)
        try:
            yield env
        finally:
            await call_env(env, env.close)

    async def aclose(self) -> None:
        return None


#: Where :func:`call_env` runs blocking environment calls: the run's executor, bounded
#: to the machine (``LocalExecutor`` sets it for each episode), else asyncio's default.
ENV_EXECUTOR: contextvars.ContextVar[Executor | None] = contextvars.ContextVar(
    "tackroom_env_executor", default=None)


async def call_env(env: Environment, fn: Any, *args: Any) -> Any:
    """Call the environment; when it blocks (browsers, sandboxes), on a thread of
    :data:`ENV_EXECUTOR`, so that only that many calls run at once and the rest wait."""
    if not env.blocking:
        return fn(*args)
    # As asyncio.to_thread does: the call sees this task's context variables.
    call = functools.partial(contextvars.copy_context().run, fn, *args)
    return await asyncio.get_running_loop().run_in_executor(ENV_EXECUTOR.get(), call)
