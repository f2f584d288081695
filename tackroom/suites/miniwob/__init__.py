"""The real MiniWoB++ benchmark in headless Chromium (needs the ``web`` extra).

``make_suite()`` returns a :class:`MiniWoBSuite`: 120+ tasks from the
``miniwob`` package (see :mod:`.tasks`), scripted experts for many of them
(:mod:`.experts`) and a browser pool (:mod:`.pool`) whose environments
(:mod:`.env`) drive miniwob's own gymnasium environment through Selenium.
"""

from __future__ import annotations

from tackroom.core.task import Expert, Task
from tackroom.suites.miniwob.experts import EXPERTS
from tackroom.suites.miniwob.pool import MiniWoBPool, default_pool_size
from tackroom.suites.miniwob.tasks import TASKS

__all__ = ["MiniWoBSuite", "MiniWoBPool", "default_pool_size", "make_suite", "TASKS", "EXPERTS"]


class MiniWoBSuite:
    """MiniWoB++ tasks, experts and browsers.

    Args:
        with_html: observations carry the task area's HTML (nearly free: it
            comes in the same browser call as the DOM). Renderers that only
            use the element list may turn it off.
        wait_ms: pause after every action, for pages that animate.
    """

    name = "miniwob"

    def __init__(self, *, with_html: bool = True, wait_ms: float = 0.0) -> None:
        self.with_html = with_html
        self.wait_ms = wait_ms

    def tasks(self) -> list[Task]:
        return list(TASKS.values())

    def expert(self, task: Task) -> Expert | None:
        return EXPERTS.get(task.id)

    def pool(self, size: int | None = None) -> MiniWoBPool:
        """A browser pool of ``size`` Chromes (default: sized to this machine)."""
        return MiniWoBPool(size, with_html=self.with_html, wait_ms=self.wait_ms)


def make_suite() -> MiniWoBSuite:
    return MiniWoBSuite()
