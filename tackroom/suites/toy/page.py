"""A tiny in-memory page: a node tree, a deterministic layout, hit testing and HTML.

This is the toy suite's stand-in for a browser. It is deliberately small and
allocation-light: pages are built once per ``reset`` and mutated in place by
the environment; the flat :class:`~tackroom.core.observation.Element` list is
cached and rebuilt only after something visible changed.

Conventions follow MiniWoB++'s DOM extraction so that the same renderers work
on both suites: inputs are tagged ``input_<type>`` (``input_text``,
``input_password``, ``input_checkbox``, ``input_radio``); a checkbox's or
radio's ``value`` is whether it is checked; a text field's ``value`` is its
text; the instruction lives in ``div#query`` and the task in ``div#area``.
"""

from __future__ import annotations

import html as _html
from collections.abc import Callable
from typing import Any

from tackroom.core.observation import Element, Observation

#: MiniWoB++'s task area is 160 px wide; the instruction box is 50 px tall.
PAGE_WIDTH = 160
QUERY_HEIGHT = 50

#: A hook returns ``True`` (task solved), ``False`` (task failed) or ``None`` (go on).
Hook = Callable[["Node"], "bool | None"]

_CHAR_W = 6  # px per character of text
_TEXT_H = 16
_GAP = 4  # between inline siblings and between block rows
_SIZES: dict[str, tuple[int, int]] = {
    # fixed sizes for widgets; other leaves size to their text
    "input_text": (100, 20),
    "input_password": (100, 20),
    "input_checkbox": (13, 13),
    "input_radio": (13, 13),
}
_new_element = object.__new__
_BLOCK = frozenset({"body", "div", "form", "p", "ul", "li", "select", "option", "h2", "section"})
_VOID = frozenset({"input_text", "input_password", "input_checkbox", "input_radio", "br"})


class Node:
    """One mutable page node; :meth:`element` gives its frozen, cached snapshot."""

    __slots__ = (
        "ref", "tag", "text", "parent", "value", "id", "classes", "left", "top", "width",
        "height", "hidden", "children", "on_click", "on_enter", "on_focus", "label_for",
        "group", "name", "_el", "_focused", "select_all",
    )

    def __init__(self, ref: int, tag: str, text: str, parent: Node | None, value: Any,
                 id: str, classes: str) -> None:
        self.ref = ref
        self.tag = tag
        self.text = text
        self.parent = parent
        self.value = value
        self.id = id
        self.classes = classes
        self.left = self.top = self.width = self.height = 0
        self.hidden = False
        self.children: list[Node] = []
        self.on_click: Hook | None = None
        self.on_enter: Hook | None = None
        self.on_focus: Hook | None = None
        self.label_for: Node | None = None  # a <label for=...>: clicks go to this node
        self.group: list[Node] | None = None  # radio group
        self.name = ""  # a stable name task logic may use (never shown)
        self.select_all = False  # after Ctrl-A, typing replaces the value
        self._el: Element | None = None
        self._focused = False

    @property
    def editable(self) -> bool:
        return self.tag in ("input_text", "input_password", "textarea")

    def contains(self, x: float, y: float) -> bool:
        return self.left <= x < self.left + self.width and self.top <= y < self.top + self.height

    def element(self) -> Element:
        el = self._el
        if el is None:
            # Equivalent to Element(...), several times faster: a frozen dataclass's
            # __init__ sets each field through object.__setattr__; we fill __dict__ at once.
            el = self._el = _new_element(Element)
            el.__dict__.update(
                ref=self.ref, tag=self.tag, text=self.text,
                parent=self.parent.ref if self.parent is not None else 0, value=self.value,
                id=self.id, classes=self.classes, left=float(self.left), top=float(self.top),
                width=float(self.width), height=float(self.height), focused=self._focused,
            )
        return el

    def __repr__(self) -> str:
        return f"Node({self.ref}, {self.tag!r}, {self.text!r})"


class Page:
    """The node tree of one episode: ``body > div#wrap > (div#query, div#area)``."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []  # document order; ref = index + 1
        self.body = self.add("body", parent=None)
        self.wrap = self.add("div", parent=self.body, id="wrap")
        self.query = self.add("div", parent=self.wrap, id="query")
        self.area = self.add("div", parent=self.wrap, id="area")
        self.focus: Node | None = None
        self._visible: list[Node] | None = None
        self._elements: list[Element] | None = None

    # -- building --------------------------------------------------------------------------

    def add(self, tag: str, text: str = "", parent: Node | None = None, *, value: Any = None,
            id: str = "", classes: str = "", hidden: bool = False) -> Node:
        """Append a node (document order = creation order within each parent)."""
        node = Node(0, tag, text, parent, value, id, classes)
        node.hidden = hidden
        if parent is not None:
            parent.children.append(node)
        self.nodes.append(node)
        return node

    def finish(self, instruction: str) -> None:
        """Set the instruction, number the nodes in document order and lay them out."""
        self.query.text = instruction
        ordered: list[Node] = []
        stack = [self.body]
        while stack:
            n = stack.pop()
            ordered.append(n)
            stack.extend(reversed(n.children))
        for i, n in enumerate(ordered, 1):
            n.ref = i
        self.nodes = ordered
        self.query.left, self.query.top, self.query.width = 0, 0, PAGE_WIDTH
        self.query.height = QUERY_HEIGHT
        _, h = _layout_block(self.area, 0, QUERY_HEIGHT, PAGE_WIDTH)
        self.area.left, self.area.top, self.area.width = 0, QUERY_HEIGHT, PAGE_WIDTH
        self.area.height = max(h, 210 - QUERY_HEIGHT)
        for n in (self.wrap, self.body):
            n.left, n.top, n.width = 0, 0, PAGE_WIDTH
            n.height = QUERY_HEIGHT + self.area.height

    # -- queries ---------------------------------------------------------------------------

    def node(self, ref: int) -> Node | None:
        if 1 <= ref <= len(self.nodes):
            return self.nodes[ref - 1]
        return None

    def visible(self) -> list[Node]:
        """Visible nodes in document order (a hidden node hides its subtree)."""
        vis = self._visible
        if vis is None:
            vis = []
            hidden: set[int] = set()
            for n in self.nodes:
                if n.hidden or (n.parent is not None and id(n.parent) in hidden):
                    hidden.add(id(n))
                else:
                    vis.append(n)
            self._visible = vis
        return vis

    def is_visible(self, node: Node) -> bool:
        n: Node | None = node
        while n is not None:
            if n.hidden:
                return False
            n = n.parent
        return True

    def hit(self, x: float, y: float) -> Node | None:
        """The topmost visible node at (x, y): the last in document order that contains it."""
        for n in reversed(self.visible()):
            if n.contains(x, y):
                return n
        return None

    def elements(self) -> list[Element]:
        els = self._elements
        if els is None:
            els = self._elements = [n.element() for n in self.visible()]
        return els

    def observation(self) -> Observation:
        return ToyObservation(self.query.text, list(self.elements()))

    # -- mutation (every change goes through here, to keep the caches right) ------------------

    def changed(self, node: Node) -> None:
        """``node``'s text, value or focus changed."""
        node._el = None
        self._elements = None

    def set_hidden(self, node: Node, hidden: bool) -> None:
        if node.hidden != hidden:
            node.hidden = hidden
            self._visible = None
            self._elements = None

    def set_value(self, node: Node, value: Any) -> None:
        if node.value != value or type(node.value) is not type(value):
            node.value = value
            self.changed(node)

    def set_focus(self, node: Node | None) -> None:
        old = self.focus
        if old is node:
            return
        if old is not None:
            old._focused = False
            old.select_all = False
            self.changed(old)
        self.focus = node
        if node is not None:
            node._focused = True
            self.changed(node)


# -- layout ----------------------------------------------------------------------------------


def _leaf_size(n: Node) -> tuple[int, int]:
    size = _SIZES.get(n.tag)
    if size is not None:
        return size
    w = max(len(n.text), 1) * _CHAR_W
    if n.tag == "button":
        return w + 12, 22
    if n.tag in ("a", "label", "span"):
        return w + 4, _TEXT_H + 2
    return w, _TEXT_H


def _layout_block(n: Node, x: int, y: int, width: int) -> tuple[int, int]:
    """Lay out ``n``'s children inside (x, y, width); returns the content size.

    Block children stack; runs of inline children flow left to right and wrap.
    Hidden children are laid out too (tab panels share one place), so showing a
    node never moves another.
    """
    cy = y + (_GAP if n.children else 0)
    row_x, row_h = x + _GAP, 0
    text_h = 0
    if n.text and n.children:  # a block with its own text above its children
        text_h = _TEXT_H
        cy += text_h
    panel_top = panel_end = -1  # a run of sibling panels shares one place
    for c in n.children:
        if c.tag in _BLOCK:
            if row_h:
                cy += row_h + _GAP
                row_x, row_h = x + _GAP, 0
            panel = "panel" in c.classes.split()
            if not panel:
                panel_top = -1
            elif panel_top < 0:
                panel_top, panel_end = cy, cy
            c.left, c.top = x + _GAP, (panel_top if panel else cy)
            c.width = width - 2 * _GAP
            if c.children:
                _, h = _layout_block(c, c.left, c.top, c.width)
            else:
                h = _TEXT_H * max(1, -(-len(c.text) * _CHAR_W // max(c.width, 1)))
            c.height = h
            if panel:
                panel_end = max(panel_end, c.top + h + _GAP)
                cy = panel_end
            else:
                cy += h + _GAP
        else:
            w, h = _leaf_size(c)
            w = min(w, width - 2 * _GAP)
            if row_x + w > x + width - _GAP and row_x > x + _GAP:
                cy += row_h + _GAP
                row_x, row_h = x + _GAP, 0
            c.left, c.top, c.width, c.height = row_x, cy, w, h
            if c.children:  # inline with children (a button holding a span)
                for gc in c.children:
                    gw, gh = _leaf_size(gc)
                    gc.width, gc.height = min(gw, w - 4), min(gh, h - 4)
                    gc.left = c.left + (w - gc.width) // 2
                    gc.top = c.top + (h - gc.height) // 2
            row_x += w + _GAP
            row_h = max(row_h, h)
    if row_h:
        cy += row_h + _GAP
    return width, max(cy - y, text_h)


# -- HTML ------------------------------------------------------------------------------------

_INPUT_TYPES = {
    "input_text": "text", "input_password": "password", "input_checkbox": "checkbox",
    "input_radio": "radio",
}


def render_html(elements: list[Element]) -> str:
    """HTML of the visible page, each element carrying ``data-ref`` (cheap, on demand)."""
    kids: dict[int, list[Element]] = {}
    for el in elements:
        kids.setdefault(el.parent, []).append(el)
    out: list[str] = []
    esc = _html.escape

    def emit(el: Element) -> None:
        attrs = f' data-ref="{el.ref}"'
        if el.id:
            attrs += f' id="{esc(el.id)}"'
        if el.classes:
            attrs += f' class="{esc(el.classes)}"'
        itype = _INPUT_TYPES.get(el.tag)
        if itype is not None:
            attrs = f' type="{itype}"' + attrs
            if isinstance(el.value, bool):
                if el.value:
                    attrs += " checked"
            elif el.value:
                attrs += f' value="{esc(str(el.value))}"'
            if el.focused:
                attrs += " autofocus"
            out.append(f"<input{attrs}>")
            if el.text:
                out.append(esc(el.text))
            return
        if el.tag == "option" and el.value is True:
            attrs += " selected"
        out.append(f"<{el.tag}{attrs}>{esc(el.text)}")
        for c in kids.get(el.ref, ()):
            emit(c)
        out.append(f"</{el.tag}>")

    for root in kids.get(0, ()):
        emit(root)
    return "".join(out)


class ToyObservation(Observation):
    """An :class:`Observation` whose ``html`` is rendered from the elements on first access.

    Most harnesses never read the HTML; rendering it lazily keeps a step cheap.
    Setting ``html`` explicitly overrides the rendering.
    """

    def __init__(self, instruction: str, elements: list[Element] | None = None,
                 html: str | None = None, text: str | None = None,
                 extra: dict[str, Any] | None = None) -> None:
        # same signature as Observation, so dataclasses.replace() works
        self.instruction = instruction
        self.elements = elements if elements is not None else []
        self._html = html
        self.text = text
        self.extra = extra if extra is not None else {}

    @property  # type: ignore[override]
    def html(self) -> str | None:
        if self._html is None:
            self._html = render_html(self.elements)
        return self._html

    @html.setter
    def html(self, value: str | None) -> None:
        self._html = value
