"""Writing CSV text."""


def _quote(field):
    field = str(field)
    if any(c in field for c in ',"\n'):
        return '"' + field.replace('"', '""') + '"'
    return field


def format_line(fields):
    """One CSV line (no newline) for ``fields``."""
    return ",".join(_quote(f) for f in fields)


def write_rows(rows):
    """CSV text for ``rows``, each line ending in a newline."""
    return "".join(format_line(r) + "\n" for r in rows)
