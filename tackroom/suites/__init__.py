"""Suites by name, and choosing their tasks. Each suite module exposes ``make_suite() -> Suite``.

Imports are lazy so that ``tackroom`` works without the optional extras of a
suite that is not used (the ``web`` extra for MiniWoB++, for example).
"""

from __future__ import annotations

import difflib
import fnmatch
import importlib
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from tackroom.core.errors import ConfigError, TaskNotFound
from tackroom.core.task import Suite, Task

SUITES: dict[str, str] = {
    "toy": "tackroom.suites.toy",
    "miniwob": "tackroom.suites.miniwob",
    "terminal": "tackroom.suites.terminal",
    "code": "tackroom.suites.code",
    "robot": "tackroom.suites.robot",
}


def get_suite(name: str, options: Mapping[str, Any] | None = None) -> Suite:
    """Load the suite called ``name``, built with ``options`` (e.g. ``{"unsafe_local": True}``).

    An unknown suite, or an option the suite does not take, is one clear error.
    """
    module = SUITES.get(name)
    if module is None:
        raise ConfigError(f"unknown suite {name!r}", "--suite",
                          f"choose one of: {', '.join(sorted(SUITES))}")
    make = importlib.import_module(module).make_suite
    opts = dict(options or {})
    takes = set(inspect.signature(make).parameters)
    unknown = sorted(set(opts) - takes)
    if unknown:
        raise ConfigError(f"suite {name!r} takes no option {unknown[0]!r}", "suite options",
                          f"it takes: {', '.join(sorted(takes)) or 'none'}")
    return make(**opts)


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
