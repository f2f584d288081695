"""The harness slots' typed keys, declared once on the settings base: default, doc, limits.

``[observation]`` (renderer, max_chars), ``[actions]`` (interface, parser), ``[loop]`` and
``[budget]`` are :class:`~tackroom.core.settings.Settings` classes. They are the slots'
defaults (:func:`slot_defaults`), their validation (:func:`check_slot`) and the key table in
docs/harnesses.md (:meth:`~tackroom.core.settings.Settings.key_table`). A
:class:`~tackroom.harness.spec.HarnessSpec` still holds each slot as a plain dict (its hash
is over those dicts); these classes only say what the dicts may hold.

The free-form keys stay with :mod:`tackroom.harness.spec`: ``[observation] options`` (the
renderer's own), ``[actions] descriptions`` and the ``[prompt]`` templates.

Numbers that the runner reads through ``int()``/``float()`` (``max_chars``, ``tokens``,
``wall_seconds``, ``max_consecutive_errors``) are typed ``float``: an integer or a number is
accepted, as harness files always could, and is kept as written, so ``wall_seconds = 300``
and ``wall_seconds = 300.0`` stay the different hashes they always were.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tackroom.core.errors import ConfigError, HarnessError
from tackroom.core.registry import names
from tackroom.core.settings import Settings, setting

__all__ = ["ObservationSettings", "ActionSettings", "LoopSettings", "BudgetSettings",
           "SLOT_SETTINGS", "slot_defaults", "check_slot", "check_value"]

_DOCS = "docs/harnesses.md"


@dataclass
class ObservationSettings(Settings):
    """``[observation]``'s typed keys (``options`` is the renderer's own table)."""

    SECTIONS = ("observation",)
    LABEL = "[observation]"
    DOCS = _DOCS

    renderer: str = setting("element_list", "observation", "how the page is shown to the model",
                            choices=lambda: names("renderer"))
    max_chars: float = setting(12000, "observation", "observation length cap; 0 = no limit "
                               "(longer ones are cut with a note)", bounds="[0, 1000000]")


@dataclass
class ActionSettings(Settings):
    """``[actions]``'s typed keys (``descriptions`` is checked against the interface)."""

    SECTIONS = ("actions",)
    LABEL = "[actions]"
    DOCS = _DOCS

    interface: str = setting("element_refs", "actions", "the actions the model may take",
                             choices=lambda: names("interface"))
    parser: str = setting("tool_calls", "actions", "how the model's reply becomes actions",
                          choices=lambda: names("parser"))


@dataclass
class LoopSettings(Settings):
    """``[loop]``: the turn loop's control logic."""

    SECTIONS = ("loop",)
    LABEL = "[loop]"
    DOCS = _DOCS

    actions_per_turn: int = setting(1, "loop", "actions taken per turn; extra ones are dropped "
                                    "and the model is told", bounds="[1, 50]")
    history: int = setting(4, "loop", "past turns kept in full (the task line always stays)",
                           bounds="[0, 1000]")
    on_malformed: str = setting("feedback", "loop", "after a reply that does not parse",
                                choices=("feedback", "end"))
    on_action_error: str = setting("feedback", "loop", "after an action that fails",
                                   choices=("feedback", "reflect", "end"))
    max_consecutive_errors: float = setting(5, "loop", "parse or action errors in a row that "
                                            "end the episode", bounds="[1, 1000]")
    reflect_prompt: str = setting(
        "Before acting again, reflect in one or two sentences on why the last "
        "action failed and what you will do differently.", "loop",
        "what the model is told after a failed action when on_action_error = \"reflect\"")


@dataclass
class BudgetSettings(Settings):
    """``[budget]``: when an episode stops."""

    SECTIONS = ("budget",)
    LABEL = "[budget]"
    DOCS = _DOCS

    turns: int = setting(12, "budget", "turns, then the episode ends as budget_exhausted",
                         bounds="[1, 10000]")
    tokens: float = setting(0, "budget", "prompt + completion tokens; 0 = no limit",
                            bounds="[0, 100000000]")
    wall_seconds: float = setting(300.0, "budget", "seconds, then the episode ends as timeout; "
                                  "0 = no limit", bounds="[0, 604800]", why="at most a week")
    state_to_model: bool = setting(True, "budget", "append \"Budget: turn 3 of 12; 41 s left.\" "
                                   "to each turn")


#: The settings class of each slot with typed keys.
SLOT_SETTINGS: dict[str, type[Settings]] = {
    "observation": ObservationSettings,
    "actions": ActionSettings,
    "loop": LoopSettings,
    "budget": BudgetSettings,
}


def slot_defaults(slot: str) -> dict[str, Any]:
    """``slot``'s typed keys and their declared defaults, in declaration order."""
    return {spec.key: spec.default for spec in SLOT_SETTINGS[slot].specs().values()}


def check_slot(slot: str, values: dict[str, Any], where: str) -> None:
    """Check the typed keys of ``values`` (a resolved slot: every key present) in place.

    An integer key given as a whole float (``history = 2.0``) is stored as the int the
    settings base makes of it; every other value is kept exactly as written (the hash).

    Raises:
        HarnessError: the first bad key, at ``FILE [slot].key``, saying what is allowed.
    """
    for spec in SLOT_SETTINGS[slot].specs().values():
        values[spec.key] = check_value(slot, spec.key, values[spec.key],
                                       f"{where} [{slot}].{spec.key}")


def check_value(slot: str, key: str, value: Any, where: str) -> Any:
    """``value`` checked as ``[slot].key`` (ints made ints, the rest as given).

    Each key is checked on its own, so that the error names where that one value is.

    Raises:
        HarnessError: at ``where``, with the settings base's words for what is allowed.
    """
    cls = SLOT_SETTINGS[slot]
    name = cls.field_for(f"{slot}.{key}", where)
    try:
        checked = cls.from_dict({slot: {key: value}}, where=where)
    except ConfigError as e:
        raise HarnessError(e.what, e.where, e.fix) from None
    return getattr(checked, name) if cls.specs()[name].type == "int" else value
