"""Caches: least-recently-used, time-to-live, and a memoising decorator."""

from cachekit.lru import LRUCache
from cachekit.memo import memoize
from cachekit.ttl import TTLCache

__all__ = ["LRUCache", "TTLCache", "memoize"]
