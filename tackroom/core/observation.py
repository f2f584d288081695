"""What an environment shows: an instruction, a flat element list, optional HTML/text.

Web-like suites (``miniwob``, ``toy``) fill ``elements`` so that every
harness renderer (numbered list, HTML, outline) works on every such suite.
Shell-like suites fill ``text`` instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Element:
    """One page element, flattened; ``parent`` is the parent's ``ref`` (0 = root).

    ``ref`` is stable within an episode and is what ``Click(ref)`` targets.
    Geometry is in CSS pixels relative to the task area.
    """

    ref: int
    tag: str
    text: str = ""
    parent: int = 0
    value: str | bool | None = None
    id: str = ""
    classes: str = ""
    left: float = 0.0
    top: float = 0.0
    width: float = 0.0
    height: float = 0.0
    focused: bool = False

    @property
    def center(self) -> tuple[float, float]:
        """Centre point, where a coordinate click lands on this element."""
        return (self.left + self.width / 2.0, self.top + self.height / 2.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "tag": self.tag,
            "text": self.text,
            "parent": self.parent,
            "value": self.value,
            "id": self.id,
            "classes": self.classes,
            "left": self.left,
            "top": self.top,
            "width": self.width,
            "height": self.height,
            "focused": self.focused,
        }


@dataclass
class Observation:
    """A snapshot of the environment shown to the harness renderer.

    Attributes:
        instruction: the task's natural-language goal (MiniWoB's utterance).
        elements: flattened element tree, in document order.
        html: raw HTML of the task area, when the suite can provide it.
        text: free text (terminal output, file views) for non-web suites.
        extra: suite-specific data that renderers may use.
    """

    instruction: str
    elements: list[Element] = field(default_factory=list)
    html: str | None = None
    text: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def element(self, ref: int) -> Element | None:
        """The element with this ``ref``, or ``None``."""
        for el in self.elements:
            if el.ref == ref:
                return el
        return None

    def children(self, ref: int) -> list[Element]:
        """Direct children of ``ref`` in document order."""
        return [el for el in self.elements if el.parent == ref]

    def find(self, *, tag: str | None = None, text: str | None = None, id: str | None = None,
             classes: str | None = None) -> list[Element]:
        """Elements matching all given criteria (``classes`` matches one class)."""
        out = []
        for el in self.elements:
            if tag is not None and el.tag != tag:
                continue
            if text is not None and el.text != text:
                continue
            if id is not None and el.id != id:
                continue
            if classes is not None and classes not in el.classes.split():
                continue
            out.append(el)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "instruction": self.instruction,
            "elements": [e.to_dict() for e in self.elements],
            "html": self.html,
            "text": self.text,
        }
