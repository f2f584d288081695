"""Records: the DuckDB store every stage reads and writes, and its exports.

Names are loaded on first use: ``tackroom.records.paths`` (the default store's path, which
every command line needs) must not import DuckDB and Arrow with the package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tackroom.core.lazy import lazy_attribute

if TYPE_CHECKING:  # for type checkers; at run time see __getattr__
    from tackroom.core.secrets import REDACTED, scrub
    from tackroom.records.export import (
        episode_to_atif,
        export_atif,
        export_jsonl,
        export_parquet,
    )
    from tackroom.records.paths import DEFAULT_PATH, default_db
    from tackroom.records.schema import SCHEMA_VERSION
    from tackroom.records.store import RecordStore

__all__ = [
    "RecordStore", "scrub", "REDACTED", "SCHEMA_VERSION", "DEFAULT_PATH", "default_db",
    "export_jsonl", "export_parquet", "export_atif", "episode_to_atif",
]

#: Name → the module it comes from.
_LAZY = {"REDACTED": "tackroom.core.secrets", "scrub": "tackroom.core.secrets",
         "episode_to_atif": "tackroom.records.export", "export_atif": "tackroom.records.export",
         "export_jsonl": "tackroom.records.export",
         "export_parquet": "tackroom.records.export",
         "DEFAULT_PATH": "tackroom.records.paths", "default_db": "tackroom.records.paths",
         "SCHEMA_VERSION": "tackroom.records.schema", "RecordStore": "tackroom.records.store"}


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, _LAZY, name)
