"""Numbers a model server reports, checked where they enter: counts are counts, log-probs finite.

A server is outside tackroom: its ``usage`` block may say ``"prompt_tokens": NaN`` or
``"lots"``, its log-probs ``NaN`` or ``-Infinity``. Such a value is never an error of the
episode (the model's answer is still good) and never a number in the records (a NaN
token count breaks every sum; a ``-inf`` log-prob poisons a training batch): it is
recorded as missing — ``0`` for a count, ``None`` for the log-probs — with a note that
says what the server sent (``Turn.notes``).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["MAX_TOKEN_COUNT", "NON_FINITE_LOGPROBS", "finite_logprobs", "token_count"]

#: More tokens than any one call can hold; a larger count is garbage, not a count.
MAX_TOKEN_COUNT = 2**31 - 1
#: The note of a turn whose log-probs were dropped.
NON_FINITE_LOGPROBS = "log-probs not recorded: the server sent values that are not finite"


def token_count(value: Any, name: str) -> tuple[int, str | None]:
    """``(count, note)``: ``value`` as a token count, or ``(0, note)`` if it is not one.

    ``None`` (the server sent no count) is ``0`` without a note, as before. A whole
    number held as a float (``12.0``) or as digits (``"12"``) is taken; anything else — NaN, infinities,
    fractions, negatives, strings, counts past :data:`MAX_TOKEN_COUNT` — is missing.
    """
    if value is None:
        return 0, None
    if isinstance(value, str) and value.strip().isdigit() and len(value) < 12:
        value = int(value)  # some servers quote their numbers
    ok = isinstance(value, int | float) and not isinstance(value, bool) \
        and math.isfinite(value) and float(value).is_integer() \
        and 0 <= value <= MAX_TOKEN_COUNT
    if ok:
        return int(value), None
    shown = repr(value)
    if len(shown) > 40:
        shown = shown[:40] + "…"
    return 0, f"usage {name} not recorded: the server sent {shown}, not a token count"


def finite_logprobs(values: Any) -> list[float] | None:
    """``values`` as a list of finite floats, or ``None`` if any is not one (or it is ``None``).

    All or nothing: a list with a hole would no longer line up with the token ids.
    """
    if values is None:
        return None
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            return None
        out.append(float(v))
    return out
