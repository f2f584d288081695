"""Records: the DuckDB store every stage reads and writes, and its exports."""

from tackroom.core.secrets import REDACTED, scrub
from tackroom.records.export import episode_to_atif, export_atif, export_jsonl, export_parquet
from tackroom.records.paths import DEFAULT_PATH, default_db
from tackroom.records.schema import SCHEMA_VERSION
from tackroom.records.store import RecordStore

__all__ = [
    "RecordStore", "scrub", "REDACTED", "SCHEMA_VERSION", "DEFAULT_PATH", "default_db",
    "export_jsonl", "export_parquet", "export_atif", "episode_to_atif",
]
