"""Greedy line wrapping."""


def wrap(text, width=70):
    """Split ``text`` into lines of at most ``width`` characters.

    Words are kept whole when they fit; a word longer than ``width`` is cut
    into pieces of ``width`` characters.
    """
    if width < 1:
        raise ValueError("width must be at least 1")
    lines = []
    current = ""
    for word in text.split():
        while len(word) > width:
            if current:
                lines.append(current)
                current = ""
            lines.append(word[:width])
            word = word[width:]
        if not current:
            current = word
        elif len(current) + 1 + len(word) <= width:
            current += " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


def truncate(text, width, suffix="..."):
    """``text`` cut to at most ``width`` characters, ending in ``suffix`` when cut.

    Text that fits is returned unchanged; the cut prefers a word boundary.
    """
    if len(text) <= width:
        return text
    if width <= len(suffix):
        return suffix[:width]
    keep = width - len(suffix)
    cut = text[:keep]
    space = cut.rfind(" ")
    if text[keep] != " " and space > 0:  # the cut falls inside a word: drop that word
        cut = cut[:space]
    return cut.rstrip() + suffix
