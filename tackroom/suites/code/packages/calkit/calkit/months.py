"""Years and months of the Gregorian calendar."""

import datetime

_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def is_leap_year(year):
    """Divisible by 4, except centuries, except every fourth century (2000 is, 1900 is not)."""
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year, month):
    """Number of days in ``month`` (1-12) of ``year``."""
    if not 1 <= month <= 12:
        raise ValueError(f"month must be 1-12, got {month}")
    if month == 2 and is_leap_year(year):
        return 29
    return _DAYS[month - 1]


def month_end(day):
    """The last day of the month ``day`` falls in."""
    return datetime.date(day.year, day.month, days_in_month(day.year, day.month))
