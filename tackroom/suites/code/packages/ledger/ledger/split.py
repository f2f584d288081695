"""Splitting an amount into parts that add up exactly."""

from ledger.money import Money


def split_evenly(amount, parts):
    """Split ``amount`` into ``parts`` amounts that differ by at most one cent.

    The first parts get the extra cents, so the parts always sum to ``amount``.
    """
    if parts < 1:
        raise ValueError("parts must be at least 1")
    base, extra = divmod(amount.cents, parts)
    return [Money(base + (1 if i < extra else 0), amount.currency) for i in range(parts)]


def allocate(amount, ratios):
    """Split ``amount`` in proportion to ``ratios`` (non-negative, not all zero).

    Each part is rounded down to a cent; the cents left over go one each to
    the parts that lost the most in rounding, so the parts sum to ``amount``.
    """
    total = sum(ratios)
    if not ratios or total <= 0 or any(r < 0 for r in ratios):
        raise ValueError("ratios must be non-negative and not all zero")
    exact = [amount.cents * r / total for r in ratios]
    parts = [int(x // 1) for x in exact]
    left = amount.cents - sum(parts)
    order = sorted(range(len(ratios)), key=lambda i: (parts[i] - exact[i], i))
    for i in order[:left]:
        parts[i] += 1
    return [Money(c, amount.currency) for c in parts]
