"""Money amounts in integer cents: arithmetic, parsing, formatting, splitting."""

from ledger.money import Money
from ledger.parse import parse_amount
from ledger.split import allocate, split_evenly

__all__ = ["Money", "allocate", "parse_amount", "split_evenly"]
