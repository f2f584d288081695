"""Suites by name. Each suite module exposes ``make_suite() -> Suite``.

Imports are lazy so that ``tackroom`` works without the optional extras of a
suite that is not used (the ``web`` extra for MiniWoB++, for example).
"""

from __future__ import annotations

import importlib

from tackroom.core.errors import ConfigError
from tackroom.core.task import Suite

SUITES: dict[str, str] = {
    "toy": "tackroom.suites.toy",
    "miniwob": "tackroom.suites.miniwob",
    "terminal": "tackroom.suites.terminal",
    "code": "tackroom.suites.code",
}


def get_suite(name: str) -> Suite:
    """Load the suite called ``name``; a clear error for an unknown one."""
    module = SUITES.get(name)
    if module is None:
        raise ConfigError(f"unknown suite {name!r}", "--suite",
                          f"choose one of: {', '.join(sorted(SUITES))}")
    return importlib.import_module(module).make_suite()
