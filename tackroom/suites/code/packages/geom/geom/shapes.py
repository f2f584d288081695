"""Polygons given as lists of Vec2 corners, in order (either direction)."""


def polygon_area(points):
    """Area of a simple polygon (shoelace formula); never negative."""
    if len(points) < 3:
        return 0.0
    twice = 0.0
    for i, p in enumerate(points):
        q = points[(i + 1) % len(points)]
        twice += p.x * q.y - q.x * p.y
    return abs(twice) / 2.0


def perimeter(points):
    """Length of the closed outline through ``points`` (last corner back to the first)."""
    if len(points) < 2:
        return 0.0
    total = 0.0
    for i in range(len(points)):
        total += (points[(i + 1) % len(points)] - points[i]).norm()
    return total


def centroid(points):
    """The average of the corners."""
    if not points:
        raise ValueError("no points")
    n = len(points)
    return type(points[0])(sum(p.x for p in points) / n, sum(p.y for p in points) / n)
