import unittest

from textkit import truncate


class TruncateTests(unittest.TestCase):
    def test_fits(self):
        self.assertEqual(truncate("short", 10), "short")

    def test_cut_at_word(self):
        self.assertEqual(truncate("the quick brown fox", 12), "the quick...")

    def test_cut_inside_long_word(self):
        self.assertEqual(truncate("abcdefghij", 6), "abc...")

    def test_custom_suffix(self):
        self.assertEqual(truncate("hello world", 8, suffix="~"), "hello~")

    def test_tiny_width(self):
        self.assertEqual(truncate("hello", 2), "..")


if __name__ == "__main__":
    unittest.main()
