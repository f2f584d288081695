"""An immutable 2-D vector."""

import math


class Vec2:
    __slots__ = ("x", "y")

    def __init__(self, x, y):
        object.__setattr__(self, "x", x)
        object.__setattr__(self, "y", y)

    def __setattr__(self, name, value):
        raise AttributeError("Vec2 is immutable")

    def __eq__(self, other):
        return isinstance(other, Vec2) and (self.x, self.y) == (other.x, other.y)

    def __hash__(self):
        return hash((self.x, self.y))

    def __repr__(self):
        return f"Vec2({self.x}, {self.y})"

    def __add__(self, other):
        return Vec2(self.x + other.x, self.y + other.y)

    def __sub__(self, other):
        return Vec2(self.x - other.x, self.y - other.y)

    def scale(self, k):
        return Vec2(self.x * k, self.y * k)

    def dot(self, other):
        return self.x * other.x + self.y * other.y

    def norm(self):
        return math.hypot(self.x, self.y)

    def normalized(self):
        """The unit vector in this direction; the zero vector has none (ValueError)."""
        n = self.norm()
        if n == 0:
            raise ValueError("cannot normalise the zero vector")
        return Vec2(self.x / n, self.y / n)
