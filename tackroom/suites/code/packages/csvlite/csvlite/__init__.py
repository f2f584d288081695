"""A tiny CSV reader and writer with typed columns."""

from csvlite.reader import parse_line, read_rows
from csvlite.schema import convert_row
from csvlite.writer import format_line, write_rows

__all__ = ["convert_row", "format_line", "parse_line", "read_rows", "write_rows"]
