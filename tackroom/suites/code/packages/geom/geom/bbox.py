"""Axis-aligned bounding boxes."""


def bounding_box(points):
    """``(min_x, min_y, max_x, max_y)`` of ``points``, or ``None`` for no points."""
    if not points:
        return None
    xs = [p.x for p in points]
    ys = [p.y for p in points]
    return (min(xs), min(ys), max(xs), max(ys))
