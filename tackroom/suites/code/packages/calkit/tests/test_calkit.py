import datetime
import unittest

from calkit import (
    add_business_days,
    date_range,
    days_in_month,
    is_business_day,
    is_leap_year,
    month_end,
)

D = datetime.date


class MonthTests(unittest.TestCase):
    def test_leap_plain(self):
        self.assertTrue(is_leap_year(2024))
        self.assertFalse(is_leap_year(2023))

    def test_leap_centuries(self):
        self.assertFalse(is_leap_year(1900))
        self.assertTrue(is_leap_year(2000))

    def test_days_in_month(self):
        self.assertEqual([days_in_month(2023, m) for m in (1, 4, 12)], [31, 30, 31])

    def test_february(self):
        self.assertEqual((days_in_month(2024, 2), days_in_month(2023, 2)), (29, 28))

    def test_bad_month(self):
        with self.assertRaises(ValueError):
            days_in_month(2023, 13)

    def test_month_end(self):
        self.assertEqual(month_end(D(2023, 11, 5)), D(2023, 11, 30))


class RangeTests(unittest.TestCase):
    def test_inclusive_by_default(self):
        self.assertEqual(date_range(D(2024, 1, 1), D(2024, 1, 3)),
                         [D(2024, 1, 1), D(2024, 1, 2), D(2024, 1, 3)])

    def test_exclusive(self):
        self.assertEqual(len(date_range(D(2024, 1, 1), D(2024, 1, 3), inclusive=False)), 2)

    def test_step(self):
        self.assertEqual(date_range(D(2024, 1, 1), D(2024, 1, 7), step=3),
                         [D(2024, 1, 1), D(2024, 1, 4), D(2024, 1, 7)])

    def test_bad_step(self):
        with self.assertRaises(ValueError):
            date_range(D(2024, 1, 1), D(2024, 1, 2), step=0)


class BusinessTests(unittest.TestCase):
    def test_weekend_is_not_business(self):
        self.assertFalse(is_business_day(D(2024, 6, 1)))

    def test_add_over_weekend(self):
        self.assertEqual(add_business_days(D(2024, 5, 31), 1), D(2024, 6, 3))

    def test_add_with_holiday(self):
        self.assertEqual(add_business_days(D(2024, 12, 24), 1, holidays={D(2024, 12, 25)}),
                         D(2024, 12, 26))

    def test_subtract(self):
        self.assertEqual(add_business_days(D(2024, 6, 3), -1), D(2024, 5, 31))

    def test_zero(self):
        self.assertEqual(add_business_days(D(2024, 6, 1), 0), D(2024, 6, 1))


if __name__ == "__main__":
    unittest.main()
