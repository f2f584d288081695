"""Reading amounts written by people."""

from ledger.money import SYMBOLS, Money


def parse_amount(text, currency="USD"):
    """``"$1,234.5"`` -> ``Money(123450)``; accepts a sign, a symbol and thousands commas."""
    s = text.strip()
    negative = s.startswith("-")
    if negative:
        s = s[1:].strip()
    symbol = SYMBOLS.get(currency, "")
    if symbol and s.startswith(symbol):
        s = s[len(symbol):]
    s = s.replace(",", "")
    if not s or s.count(".") > 1 or not s.replace(".", "").isdigit():
        raise ValueError(f"not an amount: {text!r}")
    whole, _, frac = s.partition(".")
    if len(frac) > 2:
        raise ValueError(f"more than two decimals: {text!r}")
    cents = int(whole or "0") * 100 + int(frac.ljust(2, "0") or "0")
    return Money(-cents if negative else cents, currency)
