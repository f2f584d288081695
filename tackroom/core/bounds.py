"""One check for a number a user gave: finite, of the right kind, within its limits."""

from __future__ import annotations

import math
from typing import Any

from tackroom.core.errors import ConfigError

__all__ = ["check_number"]


def check_number(value: Any, lo: float, hi: float, what: str, where: str, *,
                 integer: bool = False, example: str = "") -> None:
    """Raise :class:`ConfigError` unless ``value`` is a finite number in ``[lo, hi]``."""
    # An int is finite at any size (float() of a long one overflows: compare it as an int).
    number = isinstance(value, (int, float)) and not isinstance(value, bool) \
        and (isinstance(value, int) or math.isfinite(value))
    if not number or (integer and isinstance(value, float) and not value.is_integer()) \
            or not lo <= value <= hi:
        kind = "an integer" if integer else "a number"
        fix = f"give {kind} from {_plain(lo)} to {_plain(hi)}" + (
            f", e.g. {example}" if example else "")
        raise ConfigError(f"{what} = {value!r} is out of range", where, fix)


def _plain(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"
