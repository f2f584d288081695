"""Suites by name, and choosing their tasks.

Each suite package registers its factory, ``@register("suite", NAME)`` on
``make_suite(**options) -> Suite``, and is named in the ``tackroom`` entry-point group
(``suite.toy = "tackroom.suites.toy"``), so a third-party package adds a suite the same
way; ``--suite`` also takes any importable ``module:factory``. A suite package imports
its optional extras (the ``web`` extra for MiniWoB++, say) only when a suite is made, so
``tackroom`` works without the extras of the suites it does not use.
"""

from __future__ import annotations

import difflib
import fnmatch
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from tackroom.core.errors import ConfigError, TaskNotFound
from tackroom.core.registry import entry
from tackroom.core.task import Suite, Task


def get_suite(name: str, options: Mapping[str, Any] | None = None) -> Suite:
    """Make the suite called ``name`` (a registered name, or ``module:factory``), built with
    ``options`` (e.g. ``{"unsafe_local": True}``).

    An unknown suite, or an option the suite does not take, is one clear error.
    """
    make = entry("suite", name, where="--suite", dotted=True).obj
    if not callable(make):
        raise ConfigError(f"suite {name!r} is not a factory", "--suite",
                          "name a function that returns a Suite, as module:factory")
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
