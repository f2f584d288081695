"""Operations on lists of intervals."""

from intervals.interval import Interval


def merge(intervals):
    """Merge overlapping or touching intervals; the result is sorted by start."""
    result = []
    for iv in sorted(intervals, key=lambda iv: iv.start):
        if result and iv.start <= result[-1].end:
            last = result[-1]
            result[-1] = Interval(last.start, max(last.end, iv.end))
        else:
            result.append(Interval(iv.start, iv.end))
    return result


def total_length(intervals):
    """Length covered by the union of the intervals."""
    return sum(iv.length for iv in merge(intervals))


def gaps(intervals, lo, hi):
    """The parts of [lo, hi] not covered by any interval."""
    out = []
    cursor = lo
    for iv in merge(intervals):
        if iv.end < lo or iv.start > hi:
            continue
        if iv.start > cursor:
            out.append(Interval(cursor, iv.start))
        cursor = max(cursor, iv.end)
    if cursor < hi:
        out.append(Interval(cursor, hi))
    return out
