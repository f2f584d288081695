"""The audit's results as plain JSON, and the interval every gain is reported with."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

import numpy as np

__all__ = ["Interval", "JsonResult", "NAN", "plain"]

NAN = float("nan")


def plain(x: Any) -> Any:
    """``x`` as plain JSON: dataclasses to dicts, tuples to lists, NaN / inf to ``None``."""
    if is_dataclass(x) and not isinstance(x, type):
        return {f.name: plain(getattr(x, f.name)) for f in fields(x)}
    if isinstance(x, Mapping):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [plain(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


class JsonResult:
    """A frozen dataclass of the audit that ``json.dumps`` takes through :meth:`to_dict`."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (``json.dumps`` takes it; NaN is ``None``)."""
        return plain(self)


@dataclass(frozen=True)
class Interval(JsonResult):
    """A point estimate with its bootstrap interval (``lo``/``hi`` NaN without one)."""

    value: float
    lo: float
    hi: float
