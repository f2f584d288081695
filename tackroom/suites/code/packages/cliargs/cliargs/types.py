"""Value conversion for option kinds."""


def convert(raw, kind):
    """Convert ``raw`` to ``kind``: str, int, float or a comma-separated list."""
    if kind == "str":
        return raw
    if kind == "int":
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"expected an integer, got {raw!r}") from None
    if kind == "float":
        try:
            return float(raw)
        except ValueError:
            raise ValueError(f"expected a number, got {raw!r}") from None
    if kind == "list":
        return [part.strip() for part in raw.split(",") if part.strip()]
    raise ValueError(f"unknown kind {kind!r}")
