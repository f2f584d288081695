"""Word frequencies."""

import re
from collections import Counter

_WORD = re.compile(r"[A-Za-z0-9']+")


def word_counts(text, ignore_case=True):
    """How often each word occurs; ``ignore_case`` folds "The" and "the" together."""
    words = _WORD.findall(text)
    if ignore_case:
        words = [w.lower() for w in words]
    return Counter(words)


def top_words(text, n=3, ignore_case=True):
    """The ``n`` most frequent words, most frequent first; ties in alphabetical order."""
    counts = word_counts(text, ignore_case=ignore_case)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [w for w, _ in ranked[:n]]
