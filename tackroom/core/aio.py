"""Running a coroutine from synchronous code (the API's blocking calls)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from tackroom.core import cancel

__all__ = ["run_sync"]

T = TypeVar("T")


def run_sync(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion from synchronous code, also inside a running loop.

    In a notebook (whose event loop is running) the coroutine runs on a
    fresh loop in a worker thread, so ``tackroom.evaluate(...)`` works there too.
    The coroutine runs as a task registered with :mod:`tackroom.core.cancel`: a stop
    requested there (SIGTERM, SIGHUP, SIGINT in the ``tackroom`` command) cancels it,
    and it ends in :class:`~tackroom.core.cancel.Cancelled`, as Ctrl-C would.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_cancellable(make))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(_cancellable(make))).result()


async def _cancellable(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    task = asyncio.ensure_future(make())
    with cancel.registered(task):
        try:
            return await task
        except asyncio.CancelledError:
            signum = cancel.requested()
            if signum is None or not task.cancelled():
                raise
            raise cancel.Cancelled(signum) from None
