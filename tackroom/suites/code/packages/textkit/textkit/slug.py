"""URL slugs."""

import re
import unicodedata


def slugify(text, sep="-"):
    """Lower-case ASCII words of ``text`` joined by ``sep``.

    Accented letters lose their accents ("Crème" -> "creme"); everything that
    is not a letter or a digit separates words.
    """
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    words = re.findall(r"[a-z0-9]+", text.lower())
    return sep.join(words)
