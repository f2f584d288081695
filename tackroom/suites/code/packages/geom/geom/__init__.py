"""2-D vectors, polygons and bounding boxes."""

from geom.bbox import bounding_box
from geom.shapes import centroid, perimeter, polygon_area
from geom.vector import Vec2

__all__ = ["Vec2", "bounding_box", "centroid", "perimeter", "polygon_area"]
