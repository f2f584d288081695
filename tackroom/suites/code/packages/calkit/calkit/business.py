"""Business days: Monday to Friday, minus the given holidays."""

import datetime


def is_business_day(day, holidays=()):
    return day.weekday() < 5 and day not in holidays


def add_business_days(day, n, holidays=()):
    """The date ``n`` business days after ``day`` (before it for negative ``n``).

    ``day`` itself need not be a business day; ``n = 0`` returns ``day``.
    """
    step = datetime.timedelta(days=1 if n >= 0 else -1)
    remaining = abs(n)
    while remaining:
        day += step
        if is_business_day(day, holidays):
            remaining -= 1
    return day
