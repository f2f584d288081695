import unittest

from ledger import Money, allocate


class AllocateTests(unittest.TestCase):
    def test_exact(self):
        self.assertEqual(allocate(Money(100), [1, 1]), [Money(50), Money(50)])

    def test_ratios(self):
        self.assertEqual(allocate(Money(100), [3, 1]), [Money(75), Money(25)])

    def test_leftover_cents(self):
        self.assertEqual(allocate(Money(100), [1, 1, 1]), [Money(34), Money(33), Money(33)])

    def test_sum_is_kept(self):
        parts = allocate(Money(1001), [2, 3, 5, 7])
        self.assertEqual(sum(p.cents for p in parts), 1001)

    def test_bad_ratios(self):
        with self.assertRaises(ValueError):
            allocate(Money(1), [0, 0])

    def test_currency_kept(self):
        self.assertEqual(allocate(Money(10, "EUR"), [1])[0].currency, "EUR")


if __name__ == "__main__":
    unittest.main()
