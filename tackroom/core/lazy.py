"""Names a package exports but imports only on first use (PEP 562 ``__getattr__``).

``import tackroom`` (and ``tackroom.app``, ``tackroom.records``) must stay cheap: the CLI
and every test subprocess pay for whatever the package imports eagerly, and most commands
need few of its names.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from typing import Any


def lazy_attribute(package: str, table: Mapping[str, str], name: str) -> Any:
    """``package.name`` from the module ``table[name]``, kept in ``package`` once imported.

    For a package's ``__getattr__``; an unknown ``name`` raises :class:`AttributeError`
    as a missing attribute does.
    """
    if name not in table:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(table[name]), name)
    setattr(sys.modules[package], name, value)
    return value
