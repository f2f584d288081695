import unittest

from ledger import Money, parse_amount, split_evenly


class MoneyTests(unittest.TestCase):
    def test_add(self):
        self.assertEqual(Money(150) + Money(75), Money(225))

    def test_sub(self):
        self.assertEqual(Money(150) - Money(200), Money(-50))

    def test_currency_mismatch_add(self):
        with self.assertRaises(ValueError):
            Money(1, "USD") + Money(1, "EUR")

    def test_currency_mismatch_sub(self):
        with self.assertRaises(ValueError):
            Money(1, "USD") - Money(1, "EUR")

    def test_format(self):
        self.assertEqual(Money(123405).format(), "$1,234.05")

    def test_format_euro(self):
        self.assertEqual(Money(99, "EUR").format(), "€0.99")

    def test_format_negative(self):
        self.assertEqual(Money(-5).format(), "-$0.05")

    def test_format_negative_large(self):
        self.assertEqual(Money(-123456).format(), "-$1,234.56")


class ParseTests(unittest.TestCase):
    def test_plain(self):
        self.assertEqual(parse_amount("12.5"), Money(1250))

    def test_symbol(self):
        self.assertEqual(parse_amount("$3"), Money(300))

    def test_negative(self):
        self.assertEqual(parse_amount("-$0.07"), Money(-7))

    def test_thousands(self):
        self.assertEqual(parse_amount("$1,234.50"), Money(123450))

    def test_rejects_garbage(self):
        with self.assertRaises(ValueError):
            parse_amount("twelve")

    def test_rejects_three_decimals(self):
        with self.assertRaises(ValueError):
            parse_amount("1.234")


class SplitTests(unittest.TestCase):
    def test_even(self):
        self.assertEqual(split_evenly(Money(90), 3), [Money(30)] * 3)

    def test_remainder_goes_first(self):
        self.assertEqual(split_evenly(Money(100), 3), [Money(34), Money(33), Money(33)])

    def test_sum_is_kept(self):
        parts = split_evenly(Money(1000), 7)
        self.assertEqual(sum(p.cents for p in parts), 1000)

    def test_bad_parts(self):
        with self.assertRaises(ValueError):
            split_evenly(Money(1), 0)


if __name__ == "__main__":
    unittest.main()
