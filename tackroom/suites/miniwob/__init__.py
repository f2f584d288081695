"""The real MiniWoB++ benchmark in headless Chromium (needs the ``web`` extra).

``make_suite()`` returns a :class:`MiniWoBSuite`: 120+ tasks from the
``miniwob`` package (see :mod:`.tasks`), scripted experts for many of them
(:mod:`.experts`) and a browser pool (:mod:`.pool`) whose environments
(:mod:`.env`) drive miniwob's own gymnasium environment through Selenium.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tackroom.core.errors import TaskNotFound
from tackroom.core.registry import register
from tackroom.core.task import Expert, Task
from tackroom.suites.miniwob.experts import EXPERTS
from tackroom.suites.miniwob.tasks import TASKS

if TYPE_CHECKING:
    from tackroom.suites.miniwob.pool import MiniWoBPool, default_pool_size

__all__ = ["MiniWoBSuite", "MiniWoBPool", "default_pool_size", "make_suite", "TASKS", "EXPERTS"]


def __getattr__(name: str) -> Any:
    # The pool imports miniwob and Selenium: loaded when a browser is needed, not when the
    # registry lists the suites (``tackroom eval --suite toy`` never starts a browser).
    if name in ("MiniWoBPool", "default_pool_size"):
        from tackroom.suites.miniwob import pool
        return getattr(pool, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class MiniWoBSuite:
    """MiniWoB++ tasks, experts and browsers.

    Args:
        with_html: observations carry the task area's HTML (nearly free: it
            comes in the same browser call as the DOM). Renderers that only
            use the element list may turn it off.
        wait_ms: pause after every action, for pages that animate.
    """

    name = "miniwob"
    #: Harnesses a run uses when it names none.
    default_harnesses = ("som-tools", "html-commands", "outline-coords")
    #: One Chromium per episode in flight: a few at a time on a small machine.
    default_concurrency = 4

    def __init__(self, *, with_html: bool = True, wait_ms: float = 0.0) -> None:
        self.with_html = with_html
        self.wait_ms = wait_ms

    def tasks(self) -> list[Task]:
        return list(TASKS.values())

    def task(self, task_id: str) -> Task:
        found = TASKS.get(task_id)
        if found is None:
            raise TaskNotFound(f"no miniwob task {task_id!r}", "miniwob",
                               "list them with `tackroom tasks --suite miniwob`")
        return found

    def expert(self, task: Task) -> Expert | None:
        return EXPERTS.get(task.id)

    def preflight(self) -> None:
        """Browsers start (and fail, one line each) when the pool first needs them."""

    def pool(self, size: int | None = None) -> MiniWoBPool:
        """A browser pool of ``size`` Chromes (default: sized to this machine), never more
        than the memory holds (:func:`browsers_that_fit`): each is some 0.5 GB, so at
        ``-n 1000`` most episodes wait for a browser rather than the machine swapping."""
        from tackroom.suites.miniwob.pool import MiniWoBPool, browsers_that_fit

        if size is not None:
            size = min(size, browsers_that_fit())
        return MiniWoBPool(size, with_html=self.with_html, wait_ms=self.wait_ms)


@register("suite", "miniwob")
def make_suite() -> MiniWoBSuite:
    """The real MiniWoB++ benchmark in headless Chromium (the ``web`` extra)."""
    return MiniWoBSuite()
