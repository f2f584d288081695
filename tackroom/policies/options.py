"""Building a policy from a spec string and loose options (as the CLI passes them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from tackroom.core.errors import PolicyError

P = TypeVar("P")


def construct(cls: type[P], first: Any, opts: dict[str, Any], *, spec: str,
              ints: set[str], floats: set[str]) -> P:
    """``cls(first, **opts)`` with numeric options given as strings converted first.

    Every failure is a :class:`PolicyError` naming the spec: a non-numeric value
    for a numeric option, or an option the backend does not take.
    """
    for name in ints | floats:
        if isinstance(opts.get(name), str):
            try:
                opts[name] = (int if name in ints else float)(opts[name])
            except ValueError:
                raise PolicyError(f"{name}={opts[name]!r} is not a number", spec,
                                  f"give {name} as a number") from None
    make: Callable[..., P] = cls  # which options it takes shows only when called
    try:
        return make(first, **opts)
    except TypeError as e:
        raise PolicyError(f"unknown option for {cls.__name__}: {e}", spec,
                          f"see {cls.__module__}.{cls.__name__}") from None
