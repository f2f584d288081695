"""Identifier case conversion."""

import re

_BOUNDARY = re.compile(r"([A-Z]+)([A-Z][a-z])|([a-z0-9])([A-Z])")


def camel_to_snake(name):
    """``parseHTTPResponse`` -> ``parse_http_response``; acronyms stay one word."""
    spaced = _BOUNDARY.sub(lambda m: _join(m), name)
    return spaced.replace("-", "_").lower()


def _join(m):
    if m.group(1):
        return m.group(1) + "_" + m.group(2)
    return m.group(3) + "_" + m.group(4)


def snake_to_camel(name, upper_first=False):
    """``parse_http_response`` -> ``parseHttpResponse`` (``ParseHttpResponse`` with upper_first)."""
    parts = [p for p in name.split("_") if p]
    if not parts:
        return ""
    head = parts[0].capitalize() if upper_first else parts[0].lower()
    return head + "".join(p.capitalize() for p in parts[1:])
