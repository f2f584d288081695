"""Typed actions: what an agent can do to an environment.

An action is a small frozen dataclass. Harnesses parse model output into
actions; environments execute them. Every action round-trips through
``to_dict`` / ``action_from_dict`` so that records store them as plain JSON.

The action *kinds* (``Action.kind``) are also the capabilities that a task
requires and that a harness's action interface offers: a task that needs
``type`` cannot be expressed by a harness that can only ``click``.

Each action type registers itself (``@register("action", KIND)``, the same name as its
``kind``), and :func:`action_from_dict` reads the registry, so action types defined
above core (the robot's, in :mod:`tackroom.harness.robot`) decode as these do.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

from tackroom.core.registry import get, has, names, register


@dataclass(frozen=True)
class Action:
    """Base class of all actions; ``kind`` names the action in records."""

    kind: ClassVar[str] = "action"

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form: ``{"kind": ..., **fields}``."""
        return {"kind": self.kind, **asdict(self)}


@register("action", "click")
@dataclass(frozen=True)
class Click(Action):
    """Click the element with reference ``ref`` (as shown by the renderer)."""

    ref: int
    kind: ClassVar[str] = "click"


@register("action", "type")
@dataclass(frozen=True)
class Type(Action):
    """Focus the element ``ref`` and type ``text`` into it."""

    ref: int
    text: str
    kind: ClassVar[str] = "type"


@register("action", "click_at")
@dataclass(frozen=True)
class ClickAt(Action):
    """Click at page coordinates (``x``, ``y``) in CSS pixels."""

    x: float
    y: float
    kind: ClassVar[str] = "click_at"


@register("action", "type_text")
@dataclass(frozen=True)
class TypeText(Action):
    """Type ``text`` into whatever element has the keyboard focus."""

    text: str
    kind: ClassVar[str] = "type_text"


@register("action", "press")
@dataclass(frozen=True)
class Press(Action):
    """Press a key or key combination, e.g. ``Enter``, ``C-a``."""

    key: str
    kind: ClassVar[str] = "press"


@register("action", "shell")
@dataclass(frozen=True)
class Shell(Action):
    """Run a shell command (terminal and code suites)."""

    cmd: str
    kind: ClassVar[str] = "shell"


@register("action", "edit")
@dataclass(frozen=True)
class Edit(Action):
    """Replace ``old`` by ``new`` in ``path`` (code suite)."""

    path: str
    old: str
    new: str
    kind: ClassVar[str] = "edit"


@register("action", "write_file")
@dataclass(frozen=True)
class WriteFile(Action):
    """Create or overwrite ``path`` with ``content`` (code suite)."""

    path: str
    content: str
    kind: ClassVar[str] = "write_file"


@register("action", "edit_lines")
@dataclass(frozen=True)
class EditLines(Action):
    """Replace lines ``start``..``end`` (1-based, inclusive) of ``path`` by ``text``.

    ``path = ""`` means the file open in the environment's viewer; ``end =
    start - 1`` inserts before ``start``. With ``lint``, an edit that would
    turn a compiling Python file into one that does not is rejected.
    """

    path: str
    start: int
    end: int
    text: str
    lint: bool = False
    kind: ClassVar[str] = "edit_lines"


@register("action", "view_file")
@dataclass(frozen=True)
class ViewFile(Action):
    """Show ``path`` (``""``: the file already open in the viewer).

    ``window = 0`` shows the whole file as it is; otherwise ``window``
    numbered lines centred on ``line`` (when given), moved by ``scroll``
    windows (negative: up).
    """

    path: str = ""
    line: int = 0
    window: int = 0
    scroll: int = 0
    kind: ClassVar[str] = "view_file"


@register("action", "submit")
@dataclass(frozen=True)
class Submit(Action):
    """Declare the task finished, optionally with an answer."""

    answer: str = ""
    kind: ClassVar[str] = "submit"


@register("action", "run_agent")
@dataclass(frozen=True)
class RunAgent(Action):
    """Run an agent program in the task's sandbox until it exits (an agent harness's one step).

    ``argv`` runs in the task's working directory with ``env``; ``ro_binds``
    (sandbox path -> host path) mount the installed program and the model
    gateway's socket read-only; ``home`` is a fresh writable directory the
    program gets as ``$HOME`` (its config files, caches), so nothing of it lands in
    the task's files. ``timeout_s``, ``memory_mb`` and ``processes`` are the
    program's limits. The environment answers with the program's exit status
    and output in ``info["agent"]``; a ``Submit`` then scores the task.
    """

    argv: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    ro_binds: dict[str, str] = field(default_factory=dict)
    home: str = "/agent-home"
    files: dict[str, str] = field(default_factory=dict)  # home-relative path -> content
    timeout_s: float = 600.0
    memory_mb: int = 4096
    processes: int = 256
    kind: ClassVar[str] = "run_agent"


def action_from_dict(data: dict[str, Any]) -> Action:
    """Inverse of :meth:`Action.to_dict`; raises ``ValueError`` on an unknown kind.

    Kinds are read from the registry (kind ``action``), so the action types a harness
    module defines (the robot's) decode as these do.
    """
    kind = str(data.get("kind"))
    if not has("action", kind):
        raise ValueError(f"unknown action kind {kind!r}; known: {names('action')}")
    cls: type[Action] = get("action", kind)
    fieldnames = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in fieldnames})
