import unittest

from cachekit import LRUCache, TTLCache, memoize


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class LRUTests(unittest.TestCase):
    def test_put_get(self):
        c = LRUCache(2)
        c.put("a", 1)
        self.assertEqual(c.get("a"), 1)
        self.assertIsNone(c.get("zz"))

    def test_evicts_oldest(self):
        c = LRUCache(2)
        c.put("a", 1)
        c.put("b", 2)
        c.put("c", 3)
        self.assertNotIn("a", c)
        self.assertEqual(len(c), 2)

    def test_get_refreshes(self):
        c = LRUCache(2)
        c.put("a", 1)
        c.put("b", 2)
        c.get("a")
        c.put("c", 3)
        self.assertIn("a", c)
        self.assertNotIn("b", c)

    def test_capacity_zero_stores_nothing(self):
        c = LRUCache(0)
        c.put("a", 1)
        self.assertEqual(len(c), 0)
        self.assertIsNone(c.get("a"))

    def test_negative_capacity(self):
        with self.assertRaises(ValueError):
            LRUCache(-1)


class TTLTests(unittest.TestCase):
    def test_fresh(self):
        clock = FakeClock()
        c = TTLCache(10, clock)
        c.put("a", 1)
        clock.now = 9.5
        self.assertEqual(c.get("a"), 1)

    def test_expires_at_ttl(self):
        clock = FakeClock()
        c = TTLCache(10, clock)
        c.put("a", 1)
        clock.now = 10
        self.assertIsNone(c.get("a"))

    def test_purge(self):
        clock = FakeClock()
        c = TTLCache(5, clock)
        c.put("a", 1)
        clock.now = 3
        c.put("b", 2)
        clock.now = 6
        self.assertEqual(c.purge(), 1)
        self.assertEqual(c.get("b"), 2)


class MemoTests(unittest.TestCase):
    def test_caches_positional(self):
        @memoize
        def square(x):
            return x * x

        self.assertEqual(square(3), 9)
        self.assertEqual(square(3), 9)
        self.assertEqual(square.calls, 1)

    def test_keyword_arguments_are_part_of_the_key(self):
        @memoize
        def power(x, exp=2):
            return x ** exp

        self.assertEqual(power(2, exp=3), 8)
        self.assertEqual(power(2, exp=4), 16)

    def test_clear(self):
        @memoize
        def one():
            return 1

        one()
        one.clear()
        one()
        self.assertEqual(one.calls, 2)


if __name__ == "__main__":
    unittest.main()
