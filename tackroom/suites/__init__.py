"""Suites by name, and choosing their tasks.

Each suite package registers its factory, ``@register("suite", NAME)`` on
``make_suite(**options) -> Suite``, and is named in the ``tackroom`` entry-point group
(``suite.toy = "tackroom.suites.toy"``), so a third-party package adds a suite the same
way; ``--suite`` also takes any importable ``module:factory``. A suite package imports
its optional extras (the ``web`` extra for MiniWoB++, say) only when a suite is made, so
``tackroom`` works without the extras of the suites it does not use.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from tackroom.core.errors import ConfigError
from tackroom.core.registry import entry
from tackroom.core.selection import select_tasks as select_tasks  # the one rule, in core
from tackroom.core.task import Suite


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


