import unittest

from intervals import Interval, gaps, merge, total_length


class IntervalTests(unittest.TestCase):
    def test_rejects_reversed(self):
        with self.assertRaises(ValueError):
            Interval(3, 1)

    def test_contains_inside(self):
        self.assertTrue(Interval(1, 5).contains(3))

    def test_contains_ends(self):
        self.assertTrue(Interval(1, 5).contains(1))
        self.assertTrue(Interval(1, 5).contains(5))

    def test_contains_outside(self):
        self.assertFalse(Interval(1, 5).contains(6))

    def test_overlaps(self):
        self.assertTrue(Interval(1, 3).overlaps(Interval(2, 4)))
        self.assertFalse(Interval(1, 2).overlaps(Interval(3, 4)))

    def test_intersection(self):
        self.assertEqual(Interval(1, 5).intersection(Interval(3, 9)), Interval(3, 5))

    def test_intersection_disjoint_is_none(self):
        self.assertIsNone(Interval(1, 2).intersection(Interval(5, 6)))


class MergeTests(unittest.TestCase):
    def test_overlapping(self):
        self.assertEqual(merge([Interval(1, 3), Interval(2, 6)]), [Interval(1, 6)])

    def test_touching(self):
        self.assertEqual(merge([Interval(1, 2), Interval(2, 3)]), [Interval(1, 3)])

    def test_unsorted_input(self):
        got = merge([Interval(8, 9), Interval(1, 3), Interval(2, 4)])
        self.assertEqual(got, [Interval(1, 4), Interval(8, 9)])

    def test_contained(self):
        self.assertEqual(merge([Interval(1, 10), Interval(2, 3)]), [Interval(1, 10)])

    def test_total_length(self):
        self.assertEqual(total_length([Interval(0, 2), Interval(1, 4), Interval(10, 11)]), 5)

    def test_gaps(self):
        self.assertEqual(gaps([Interval(2, 3), Interval(5, 6)], 0, 8),
                         [Interval(0, 2), Interval(3, 5), Interval(6, 8)])


if __name__ == "__main__":
    unittest.main()
