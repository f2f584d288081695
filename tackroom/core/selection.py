"""Choosing a suite's tasks by id, glob or tag: the one rule every command and the trainer use.

It needs only the :class:`~tackroom.core.task.Suite` contract, so every layer may use it
(the trainer picks ``data.tasks`` with it without importing the suites).
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Sequence

from tackroom.core.errors import TaskNotFound
from tackroom.core.task import Suite, Task

__all__ = ["select_tasks"]


def select_tasks(suite: Suite, patterns: Sequence[str], where: str = "--tasks") -> list[Task]:
    """The tasks of ``suite`` that ``patterns`` name, in suite order of first match.

    A pattern is a task id, a glob (``click-*``), ``suite/id``, ``@expert``
    (every task with a scripted expert) or ``@all``; no patterns means every
    task. A pattern that matches nothing is :class:`TaskNotFound`, naming close
    matches; ``where`` says which option or config key it came from.
    """
    tasks = suite.tasks()
    if not patterns:
        return tasks
    by_id = {t.id: t for t in tasks}
    chosen: dict[str, Task] = {}
    for pat in patterns:
        if pat == "@expert":
            matched = [t for t in tasks if t.has_expert]
        elif pat == "@all":
            matched = tasks
        else:
            name = pat.split("/", 1)[1] if pat.startswith(suite.name + "/") else pat
            matched = [t for t in tasks if fnmatch.fnmatchcase(t.id, name)]
            if not matched:
                close = difflib.get_close_matches(name, list(by_id), n=3)
                hint = f"did you mean {', '.join(close)}?" if close else \
                    f"see `tackroom tasks --suite {suite.name}`"
                raise TaskNotFound(f"no task matches {pat!r} in suite {suite.name!r}",
                                   where, hint)
        for t in matched:
            chosen.setdefault(t.id, t)
    return list(chosen.values())
