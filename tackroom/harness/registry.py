"""Registries of renderers, action interfaces and output parsers.

A harness file names its parts by registry key. The tables start with the
built-in parts (:mod:`tackroom.harness.builtin_parts`); a user adds a new
part in Python with a decorator and uses it from TOML::

    from tackroom.harness.registry import renderer

    @renderer("my_list")
    def my_list(obs, options):
        return "\\n".join(e.text for e in obs.elements)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from tackroom.core.observation import Observation
from tackroom.harness import builtin_parts
from tackroom.harness.interfaces import ActionInterface
from tackroom.harness.parsers import OutputParser

T = TypeVar("T")

#: ``name -> fn(observation, options) -> str``
RENDERERS: dict[str, Callable[[Observation, dict[str, Any]], str]] = dict(builtin_parts.RENDERERS)
#: ``name -> ActionInterface`` instances
INTERFACES: dict[str, ActionInterface] = {i.name: i for i in builtin_parts.INTERFACES}
#: ``name -> OutputParser`` instances
PARSERS: dict[str, OutputParser] = {p.name: p for p in builtin_parts.PARSERS}


def renderer(name: str) -> Callable[[T], T]:
    """Register an observation renderer ``fn(obs, options) -> str`` under ``name``."""

    def deco(fn: T) -> T:
        RENDERERS[name] = fn  # type: ignore[assignment]
        return fn

    return deco


def register_interface(interface: ActionInterface) -> ActionInterface:
    """Register an action interface under ``interface.name``."""
    INTERFACES[interface.name] = interface
    return interface


def register_parser(parser: OutputParser) -> OutputParser:
    """Register an output parser under ``parser.name``."""
    PARSERS[parser.name] = parser
    return parser
