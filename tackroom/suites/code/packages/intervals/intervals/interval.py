"""A closed interval [start, end]."""


class Interval:
    def __init__(self, start, end):
        if end < start:
            raise ValueError(f"end {end} is before start {start}")
        self.start = start
        self.end = end

    def __eq__(self, other):
        return isinstance(other, Interval) and (self.start, self.end) == (other.start, other.end)

    def __repr__(self):
        return f"Interval({self.start}, {self.end})"

    @property
    def length(self):
        return self.end - self.start

    def contains(self, x):
        """Whether ``x`` lies in the interval, both ends included."""
        return self.start <= x <= self.end

    def overlaps(self, other):
        """Whether the two intervals share at least one point."""
        return self.start <= other.end and other.start <= self.end

    def intersection(self, other):
        """The common part, or ``None`` when the intervals do not overlap."""
        if not self.overlaps(other):
            return None
        return Interval(max(self.start, other.start), min(self.end, other.end))
