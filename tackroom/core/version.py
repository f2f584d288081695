"""The package version, in the lowest layer so that any module may record it."""

__version__ = "0.1.0"
