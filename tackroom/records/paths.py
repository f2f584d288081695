"""Where the record store lives unless told otherwise."""

from __future__ import annotations

import os

__all__ = ["DEFAULT_PATH", "ENV_VAR", "default_db"]

#: Where ``tackroom`` keeps its records unless told otherwise.
DEFAULT_PATH = "./tackroom-runs/tackroom.duckdb"

#: The environment variable that overrides :data:`DEFAULT_PATH`.
ENV_VAR = "TACKROOM_DB"


def default_db() -> str:
    """The record store to use when none is given: ``$TACKROOM_DB`` if set (and not
    empty), else :data:`DEFAULT_PATH`. Read at each call, not at import."""
    return os.environ.get(ENV_VAR) or DEFAULT_PATH
