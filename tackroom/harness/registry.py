"""Registries of renderers, action interfaces and output parsers.

A harness file names its parts by registry key, so a user adds a new part in
Python with a decorator and uses it from TOML::

    from tackroom.harness.registry import renderer

    @renderer("my_list")
    def my_list(obs, options):
        return "\\n".join(e.text for e in obs.elements)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from tackroom.core.observation import Observation
    from tackroom.harness.interfaces import ActionInterface
    from tackroom.harness.parsers import OutputParser

T = TypeVar("T")

#: ``name -> fn(observation, options) -> str``
RENDERERS: dict[str, Callable[[Observation, dict[str, Any]], str]] = {}
#: ``name -> ActionInterface`` instances
INTERFACES: dict[str, ActionInterface] = {}
#: ``name -> OutputParser`` instances
PARSERS: dict[str, OutputParser] = {}


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


def ensure_builtins() -> None:
    """Import the built-in parts so that their registrations run."""
    # Web parts (interfaces, parsers, renderers), terminal parts (shell), coding-agent parts.
    from tackroom.harness import coding, interfaces, parsers, renderers, shell  # noqa: F401
