"""Ranges of dates."""

import datetime


def date_range(start, end, step=1, inclusive=True):
    """Dates from ``start`` to ``end`` every ``step`` days; ``end`` included by default."""
    if step < 1:
        raise ValueError("step must be at least 1")
    out = []
    day = start
    delta = datetime.timedelta(days=step)
    while day < end or (inclusive and day == end):
        out.append(day)
        day += delta
    return out
