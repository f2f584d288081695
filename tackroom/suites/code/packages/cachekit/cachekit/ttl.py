"""A cache whose entries expire ``ttl`` seconds after they were stored."""

import time


class TTLCache:
    def __init__(self, ttl, clock=time.monotonic):
        self.ttl = ttl
        self.clock = clock
        self._data = {}

    def put(self, key, value):
        self._data[key] = (value, self.clock())

    def get(self, key, default=None):
        """The value, unless it is missing or ``ttl`` seconds or more have passed."""
        item = self._data.get(key)
        if item is None:
            return default
        value, stored = item
        if self.clock() - stored >= self.ttl:
            del self._data[key]
            return default
        return value

    def purge(self):
        """Drop every expired entry; returns how many were dropped."""
        now = self.clock()
        dead = [k for k, (_, t) in self._data.items() if now - t >= self.ttl]
        for k in dead:
            del self._data[k]
        return len(dead)
