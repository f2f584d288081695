"""Memoising decorator."""

import functools


def memoize(fn):
    """Cache ``fn``'s results by its positional and keyword arguments.

    The wrapper has ``calls`` (how often ``fn`` really ran) and ``clear()``.
    """
    cache = {}

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        key = (args, tuple(sorted(kwargs.items())))
        if key not in cache:
            wrapper.calls += 1
            cache[key] = fn(*args, **kwargs)
        return cache[key]

    wrapper.calls = 0
    wrapper.clear = cache.clear
    return wrapper
