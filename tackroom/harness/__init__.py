"""Harnesses: specs, renderers, parsers, action interfaces, sessions."""
