import unittest

from geom import Vec2, bounding_box, centroid, perimeter, polygon_area

SQUARE = [Vec2(0, 0), Vec2(2, 0), Vec2(2, 2), Vec2(0, 2)]


class VectorTests(unittest.TestCase):
    def test_add_sub(self):
        self.assertEqual(Vec2(1, 2) + Vec2(3, 4) - Vec2(1, 1), Vec2(3, 5))

    def test_dot_norm(self):
        self.assertEqual(Vec2(1, 2).dot(Vec2(3, 4)), 11)
        self.assertEqual(Vec2(3, 4).norm(), 5)

    def test_normalized(self):
        self.assertEqual(Vec2(0, 5).normalized(), Vec2(0, 1))

    def test_normalized_zero_raises_value_error(self):
        with self.assertRaises(ValueError):
            Vec2(0, 0).normalized()

    def test_immutable(self):
        with self.assertRaises(AttributeError):
            Vec2(1, 1).x = 3


class ShapeTests(unittest.TestCase):
    def test_area_counter_clockwise(self):
        self.assertEqual(polygon_area(SQUARE), 4.0)

    def test_area_clockwise(self):
        self.assertEqual(polygon_area(list(reversed(SQUARE))), 4.0)

    def test_area_degenerate(self):
        self.assertEqual(polygon_area(SQUARE[:2]), 0.0)

    def test_perimeter_closes(self):
        self.assertEqual(perimeter(SQUARE), 8.0)

    def test_perimeter_triangle(self):
        self.assertEqual(perimeter([Vec2(0, 0), Vec2(3, 0), Vec2(3, 4)]), 12.0)

    def test_centroid(self):
        self.assertEqual(centroid(SQUARE), Vec2(1, 1))


class BoxTests(unittest.TestCase):
    def test_box(self):
        self.assertEqual(bounding_box([Vec2(1, 5), Vec2(-2, 3)]), (-2, 3, 1, 5))

    def test_empty_box(self):
        self.assertIsNone(bounding_box([]))


if __name__ == "__main__":
    unittest.main()
