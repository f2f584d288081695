"""Records: the DuckDB store every stage reads and writes, and its exports."""

from tackroom.records.export import episode_to_atif, export_atif, export_jsonl, export_parquet
from tackroom.records.store import SCHEMA_VERSION, RecordStore, scrub

__all__ = [
    "RecordStore", "scrub", "SCHEMA_VERSION", "export_jsonl", "export_parquet", "export_atif",
    "episode_to_atif",
]
