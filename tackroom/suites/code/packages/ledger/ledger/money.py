"""An amount of money in one currency, held as integer cents."""

SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£"}


class Money:
    def __init__(self, cents, currency="USD"):
        if not isinstance(cents, int):
            raise TypeError("cents must be an int")
        self.cents = cents
        self.currency = currency

    def _check(self, other):
        if not isinstance(other, Money):
            return NotImplemented
        if other.currency != self.currency:
            raise ValueError(f"cannot combine {self.currency} and {other.currency}")
        return None

    def __add__(self, other):
        bad = self._check(other)
        if bad is NotImplemented:
            return bad
        return Money(self.cents + other.cents, self.currency)

    def __sub__(self, other):
        bad = self._check(other)
        if bad is NotImplemented:
            return bad
        return Money(self.cents - other.cents, self.currency)

    def __eq__(self, other):
        return (isinstance(other, Money) and self.cents == other.cents
                and self.currency == other.currency)

    def __hash__(self):
        return hash((self.cents, self.currency))

    def __repr__(self):
        return f"Money({self.cents}, {self.currency!r})"

    def format(self):
        """``$1,234.05``; negative amounts put the sign first: ``-$0.05``."""
        sign = "-" if self.cents < 0 else ""
        whole, cents = divmod(abs(self.cents), 100)
        symbol = SYMBOLS.get(self.currency, self.currency + " ")
        return f"{sign}{symbol}{whole:,}.{cents:02d}"
