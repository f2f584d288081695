"""Converting fields to typed values by a schema of column types."""

_TRUE = {"true", "yes", "1", "y"}
_FALSE = {"false", "no", "0", "n"}


def to_bool(text):
    """``"yes"`` / ``"no"`` and friends, in any case; anything else is an error."""
    t = text.strip().lower()
    if t in _TRUE:
        return True
    if t in _FALSE:
        return False
    raise ValueError(f"not a boolean: {text!r}")


CONVERTERS = {"str": str, "int": int, "float": float, "bool": to_bool}


def convert_row(row, types):
    """Convert each field with the converter named in ``types``; empty fields become None."""
    if len(row) != len(types):
        raise ValueError(f"row has {len(row)} fields, schema has {len(types)}")
    out = []
    for field, name in zip(row, types, strict=True):
        if name not in CONVERTERS:
            raise ValueError(f"unknown column type {name!r}")
        out.append(None if field == "" else CONVERTERS[name](field))
    return out
