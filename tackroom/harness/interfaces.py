"""Action interfaces: the vocabulary of actions a harness offers the model.

An interface is independent of the *format* the model writes in (that is the
parser's job). It lists named actions with typed parameters, turns a parsed
call ``(name, args)`` into environment actions, and — for experts — says how
to express an abstract action (``Click(ref)``) in its own vocabulary, or that
it cannot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tackroom.core.actions import Action, Click, ClickAt, Press, Type, TypeText
from tackroom.core.observation import Observation
from tackroom.core.registry import register


@dataclass(frozen=True)
class Param:
    """One parameter of an action: JSON-schema type and a short description."""

    name: str
    type: str  # "integer" | "number" | "string"
    description: str


@dataclass(frozen=True)
class ActionSpec:
    """One named action of an interface, e.g. ``click(ref)``."""

    name: str
    description: str
    params: tuple[Param, ...] = ()


@dataclass(frozen=True)
class Call:
    """A parsed call: action name and arguments, before validation."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)


class CallError(ValueError):
    """A call names an unknown action or has bad arguments (shown to the model)."""


class ActionInterface:
    """Base class: subclasses set ``name``, ``specs``, ``supports`` and implement the maps."""

    name: str = ""
    specs: tuple[ActionSpec, ...] = ()
    #: capabilities (see ``core.task.CAPABILITIES``) this interface can express
    supports: frozenset[str] = frozenset()

    def spec(self, name: str) -> ActionSpec | None:
        for s in self.specs:
            if s.name == name:
                return s
        return None

    def validate(self, call: Call) -> dict[str, Any]:
        """Check a call against its spec; returns coerced arguments or raises CallError."""
        spec = self.spec(call.name)
        if spec is None:
            allowed = ", ".join(s.name for s in self.specs)
            raise CallError(f"unknown action {call.name!r}; allowed actions: {allowed}")
        out: dict[str, Any] = {}
        for p in spec.params:
            if p.name not in call.args:
                raise CallError(f"{call.name}: missing argument {p.name!r} ({p.description})")
            value = call.args[p.name]
            try:
                if p.type == "integer":
                    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                        raise ValueError
                    value = int(value)
                elif p.type == "number":
                    if isinstance(value, bool):
                        raise ValueError
                    value = float(value)
                    if not math.isfinite(value):
                        raise ValueError
                else:
                    if isinstance(value, (dict, list)):
                        raise ValueError
                    value = str(value)
            except (TypeError, ValueError):
                raise CallError(
                    f"{call.name}: argument {p.name!r} must be {p.type}, got {value!r}"
                ) from None
            out[p.name] = value
        extra = set(call.args) - {p.name for p in spec.params}
        if extra:
            raise CallError(f"{call.name}: unexpected argument(s) {sorted(extra)}")
        return out

    def to_actions(self, call: Call) -> list[Action]:
        """Environment actions for one validated call."""
        raise NotImplementedError

    def resolve(self, call: Call, obs: Observation | None) -> list[Action]:
        """Environment actions for a call the model made while it was shown ``obs``.

        Most vocabularies name their target outright (a reference number, a
        position), so this is :meth:`to_actions`; one that names elements by
        what they say (:class:`ElementTextInterface`) looks them up in ``obs``.
        """
        return self.to_actions(call)

    def express(self, action: Action, obs: Observation) -> list[Call] | None:
        """Calls that perform ``action`` in this vocabulary, or ``None`` if impossible."""
        raise NotImplementedError

    def can_express(self, requires: frozenset[str]) -> bool:
        """Whether every capability a task requires is offered here."""
        return requires <= self.supports


_REF = Param("ref", "integer", "the [number] of the element, as shown in the observation")
_KEY = Param("key", "string", "key name such as Enter, Tab, Backspace, or a combination like C-a")


class ElementRefInterface(ActionInterface):
    """Act on elements by reference number: ``click(ref)``, ``type(ref, text)``, ``press(key)``."""

    name = "element_refs"
    supports = frozenset({"click", "type", "press"})
    specs = (
        ActionSpec("click", "Click the element with this reference number.", (_REF,)),
        ActionSpec("type", "Focus the element and type the text into it.",
                   (_REF, Param("text", "string", "the text to type"))),
        ActionSpec("press", "Press a key on the keyboard.", (_KEY,)),
    )

    def to_actions(self, call: Call) -> list[Action]:
        a = self.validate(call)
        if call.name == "click":
            return [Click(a["ref"])]
        if call.name == "type":
            return [Type(a["ref"], a["text"])]
        return [Press(a["key"])]

    def express(self, action: Action, obs: Observation) -> list[Call] | None:
        if isinstance(action, Click):
            return [Call("click", {"ref": action.ref})]
        if isinstance(action, Type):
            return [Call("type", {"ref": action.ref, "text": action.text})]
        if isinstance(action, Press):
            return [Call("press", {"key": action.key})]
        return None


register("interface")(ElementRefInterface())


class CoordinateInterface(ActionInterface):
    """Act by screen position: ``click(x, y)``, ``type(x, y, text)``, ``press(key)``.

    The model has to locate elements from their coordinates; an expert's
    ``Click(ref)`` becomes a click at the element's centre.
    """

    name = "coordinates"
    supports = frozenset({"click", "type", "press"})
    _X = Param("x", "number", "horizontal position in pixels from the left")
    _Y = Param("y", "number", "vertical position in pixels from the top")
    specs = (
        ActionSpec("click", "Click at the position (x, y).", (_X, _Y)),
        ActionSpec("type", "Click at (x, y) to focus what is there, then type the text.",
                   (_X, _Y, Param("text", "string", "the text to type"))),
        ActionSpec("press", "Press a key on the keyboard.", (_KEY,)),
    )

    def to_actions(self, call: Call) -> list[Action]:
        a = self.validate(call)
        if call.name == "click":
            return [ClickAt(a["x"], a["y"])]
        if call.name == "type":
            return [ClickAt(a["x"], a["y"]), TypeText(a["text"])]
        return [Press(a["key"])]

    def express(self, action: Action, obs: Observation) -> list[Call] | None:
        if isinstance(action, (Click, Type)):
            el = obs.element(action.ref)
            if el is None:
                return None
            x, y = (round(v, 1) for v in el.center)
            if isinstance(action, Click):
                return [Call("click", {"x": x, "y": y})]
            # To type, click near the field's left edge, as a person does: the
            # centre of a date or number field is a later segment or a spin button.
            x = round(el.left + min(10.0, el.width / 2), 1)
            return [Call("type", {"x": x, "y": y, "text": action.text})]
        if isinstance(action, Press):
            return [Call("press", {"key": action.key})]
        return None


register("interface")(CoordinateInterface())


class ElementTextInterface(ActionInterface):
    """Act on elements by the text they show: ``click(text)``, ``press(key)``.

    The way a person names a control ("click Submit"), and Playwright's
    ``text=`` selectors. The model copies a label instead of looking up its
    reference number, which is a different skill: with the same page, this
    harness's ceiling and a policy's fit to it differ from ``element_refs``'s.

    A click goes to the element whose text equals the argument (surrounding
    white space and case ignored when no exact match exists). When several
    elements match, the innermost wins (a ``<button>`` over the ``<div>`` that
    only holds it), then the first in document order. No typing: a text field
    has no text of its own to be named by, so tasks that need ``type`` are
    out of this interface's reach (:meth:`can_express`).
    """

    name = "element_text"
    supports = frozenset({"click", "press"})
    specs = (
        ActionSpec("click", "Click the element that shows this text.",
                   (Param("text", "string", "the element's text, as shown in the observation"),)),
        ActionSpec("press", "Press a key on the keyboard.", (_KEY,)),
    )

    def to_actions(self, call: Call) -> list[Action]:
        return self.resolve(call, None)

    def resolve(self, call: Call, obs: Observation | None) -> list[Action]:
        a = self.validate(call)
        if call.name == "press":
            return [Press(a["key"])]
        if obs is None:
            raise CallError("click: there is no page to find the text on yet")
        ref = self.find(a["text"], obs)
        if ref is None:
            raise CallError(f"click: no element shows the text {a['text']!r}")
        return [Click(ref)]

    @staticmethod
    def find(text: str, obs: Observation) -> int | None:
        """The reference of the element a click on ``text`` reaches, or ``None``."""
        matches = [el for el in obs.elements if el.text == text]
        if not matches:
            wanted = text.strip().casefold()
            matches = [el for el in obs.elements if el.text.strip().casefold() == wanted]
        if not matches:
            return None
        refs = {el.ref for el in matches}
        # Innermost: a match none of whose descendants also matches.
        parents = {el.ref: el.parent for el in obs.elements}
        holders: set[int] = set()
        for el in matches:
            anc, seen = el.parent, set()
            while anc and anc not in seen:  # ``seen``: a malformed tree must not loop
                seen.add(anc)
                if anc in refs:
                    holders.add(anc)
                anc = parents.get(anc, 0)
        inner = [el for el in matches if el.ref not in holders]
        return inner[0].ref

    def express(self, action: Action, obs: Observation) -> list[Call] | None:
        if isinstance(action, Click):
            el = obs.element(action.ref)
            # Only when the text reaches exactly this element back.
            if el is None or not el.text or self.find(el.text, obs) != action.ref:
                return None
            return [Call("click", {"text": el.text})]
        if isinstance(action, Press):
            return [Call("press", {"key": action.key})]
        return None


register("interface")(ElementTextInterface())


__all__ = [
    "ActionInterface", "ActionSpec", "Call", "CallError", "CoordinateInterface",
    "ElementRefInterface", "ElementTextInterface", "Param",
]
