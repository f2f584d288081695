"""tackroom's content-addressed cache outside the clone, and the lock that guards it.

``$TACKROOM_CACHE`` (by default ``~/.cache/tackroom``) holds what is costly to
make and the same for every checkout: installed agent CLIs, Debian root file
systems, built task environments. Each entry is a directory named by a hash of
what went into it and counts only once a marker file is written last, so an
interrupted build is redone, never half-used.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


def cache_home() -> Path:
    """``$TACKROOM_CACHE``, by default ``~/.cache/tackroom``."""
    return Path(os.environ.get("TACKROOM_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "tackroom"))


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` (made if missing), across processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
