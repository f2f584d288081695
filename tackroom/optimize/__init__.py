"""Optimising harnesses and skills: candidate edits, the leakage guard, proposers, the loop
and its audit (see docs/optimize.md)."""
