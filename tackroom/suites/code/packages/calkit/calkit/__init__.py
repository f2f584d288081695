"""Calendar helpers on datetime.date: leap years, month lengths, ranges, business days."""

from calkit.business import add_business_days, is_business_day
from calkit.months import days_in_month, is_leap_year, month_end
from calkit.ranges import date_range

__all__ = ["add_business_days", "date_range", "days_in_month", "is_business_day",
           "is_leap_year", "month_end"]
