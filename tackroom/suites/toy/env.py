"""The toy environment: MiniWoB++-like page semantics over :mod:`.page`, in pure Python.

Semantics, as a browser would have them:

* ``Click(ref)`` clicks an element; ``ClickAt(x, y)`` clicks the topmost element
  at that point (nothing happens outside every element). A click goes to the
  nearest ancestor that reacts to it, so clicking the text inside a button
  clicks the button, and clicking a label clicks its checkbox or radio.
* Clicking a text field focuses it; clicking anything else takes the focus away.
* ``Type(ref, text)`` focuses the field and types, appending like a keyboard;
  ``TypeText(text)`` types into the focused field (nothing happens without one).
  A ``"\\n"`` in typed text presses Enter.
* ``Press`` knows ``Enter``, ``Tab`` (next field), ``Backspace`` and ``C-a``
  (select all, so the next typing or Backspace replaces the value); other keys
  do nothing.
* The task decides when the episode ends: reward ``1.0`` on success, ``-1.0``
  on a wrong final action (MiniWoB's raw reward), ``0.0`` otherwise. After
  ``max_steps`` steps the episode is truncated.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tackroom.core.actions import Action, Click, ClickAt, Press, Type, TypeText
from tackroom.core.errors import ActionError
from tackroom.core.observation import Observation
from tackroom.core.task import StepResult, Task
from tackroom.suites.toy.page import Node, Page

#: A task builder fills a fresh page from the seeded RNG and returns the instruction.
Builder = Callable[[Page, random.Random], str]

_KEYS = {
    "enter": "Enter", "return": "Enter", "\n": "Enter",
    "tab": "Tab",
    "backspace": "Backspace",
    "c-a": "C-a", "ctrl+a": "C-a", "control+a": "C-a", "ctrl-a": "C-a", "cmd+a": "C-a",
}


def key_name(key: str) -> str:
    """The key ``key`` names for the toy pages (``"return"`` → ``"Enter"``), else ``key``."""
    return _KEYS.get(key.strip().lower() if key.strip() else key, key)


class ToyEnv:
    """One live toy episode; cheap to create, ``reset(seed)`` builds the page."""

    blocking = False

    def __init__(self, task: Task, build: Builder, max_steps: int = 100) -> None:
        self.task = task
        self._build = build
        self.max_steps = max_steps
        self.page: Page | None = None
        self.steps = 0
        self.done = False

    # -- Gymnasium-shaped API --------------------------------------------------------------

    def reset(self, seed: int) -> Observation:
        page = Page()
        page.finish(self._build(page, random.Random(seed)))
        self.page = page
        self.steps = 0
        self.done = False
        return page.observation()

    def step(self, action: Action) -> StepResult:
        page = self.page
        if page is None:
            raise ActionError(f"{self.task.id}: step() before reset(); call reset(seed) first")
        if self.done:
            raise ActionError(f"{self.task.id}: the episode is over; call reset(seed) to start "
                              "a new one")
        self.steps += 1
        info: dict = {}
        cls = type(action)
        if cls is Click:
            verdict = self._click(self._target(action.ref))  # type: ignore[attr-defined]
        elif cls is ClickAt:
            node = page.hit(action.x, action.y)  # type: ignore[attr-defined]
            if node is None:
                info["note"] = "nothing at that point"
                verdict = None
            else:
                info["hit"] = node.ref
                verdict = self._click(node)
        elif cls is Type:
            node = self._target(action.ref)  # type: ignore[attr-defined]
            if not node.editable:
                raise ActionError(
                    f"element {node.ref} ({node.tag}) is not a text field; type into an "
                    "input_text or input_password element")
            verdict = self._focus(node)
            if verdict is None:
                verdict = self._type(node, action.text)  # type: ignore[attr-defined]
        elif cls is TypeText:
            if page.focus is None:
                info["note"] = "no element has the focus; the text went nowhere"
                verdict = None
            else:
                verdict = self._type(page.focus, action.text)  # type: ignore[attr-defined]
        elif cls is Press:
            verdict = self._press(action.key)  # type: ignore[attr-defined]
        else:
            raise ActionError(f"the toy suite does not support {action.kind!r} actions; use "
                              "click, type, click_at, type_text or press")
        obs = page.observation()
        if verdict is not None:
            self.done = True
            return StepResult(obs, 1.0 if verdict else -1.0, True, False, bool(verdict), info)
        if self.steps >= self.max_steps:
            self.done = True
            return StepResult(obs, 0.0, False, True, False, info)
        return StepResult(obs, 0.0, False, False, None, info)

    def close(self) -> None:
        self.page = None

    # -- semantics -------------------------------------------------------------------------

    def _target(self, ref: int) -> Node:
        page = self.page
        assert page is not None
        node = page.node(ref) if isinstance(ref, int) else None
        if node is None:
            raise ActionError(f"no element with ref {ref!r}; refs on this page run from 1 to "
                              f"{len(page.nodes)}, use one shown in the observation")
        if not page.is_visible(node):
            raise ActionError(f"element {ref} is not visible; act on an element shown in the "
                              "observation")
        return node

    def _click(self, node: Node) -> bool | None:
        page = self.page
        assert page is not None
        n: Node | None = node
        while n is not None and not _reacts(n):  # bubble to the element that reacts
            n = n.parent
        if n is None:
            page.set_focus(None)
            return None
        if n.label_for is not None:
            n = n.label_for
        if n.editable:
            n.select_all = False
            return self._focus(n)
        page.set_focus(None)
        if n.tag == "input_checkbox":
            page.set_value(n, not n.value)
        elif n.tag == "input_radio":
            for r in n.group or (n,):
                page.set_value(r, r is n)
        elif n.tag == "option" and n.parent is not None:
            for o in n.parent.children:
                page.set_value(o, o is n)
            page.set_value(n.parent, n.text)
        return n.on_click(n) if n.on_click is not None else None

    def _focus(self, node: Node) -> bool | None:
        page = self.page
        assert page is not None
        if page.focus is node:
            return None
        page.set_focus(node)
        return node.on_focus(node) if node.on_focus is not None else None

    def _type(self, node: Node, text: str) -> bool | None:
        if "\n" in text:
            first, _, rest = text.partition("\n")
            verdict = self._type(node, first)
            if verdict is None:
                verdict = self._press("Enter")
            if verdict is None and rest:
                verdict = self._type(node, rest)
            return verdict
        if not text:
            return None
        page = self.page
        assert page is not None
        if node.select_all:
            node.select_all = False
            page.set_value(node, text)
        else:
            page.set_value(node, (node.value or "") + text)
        return None

    def _press(self, key: str) -> bool | None:
        page = self.page
        assert page is not None
        k = key_name(key)
        focus = page.focus
        if k == "Enter":
            if focus is not None and focus.on_enter is not None:
                return focus.on_enter(focus)
        elif k == "Tab":
            fields = [n for n in page.visible() if n.editable]
            if fields:
                i = fields.index(focus) + 1 if focus in fields else 0
                return self._focus(fields[i % len(fields)])
        elif k == "Backspace":
            if focus is not None and focus.editable:
                value = "" if focus.select_all else (focus.value or "")[:-1]
                focus.select_all = False
                page.set_value(focus, value)
        elif k == "C-a":
            if focus is not None and focus.editable:
                focus.select_all = True
        return None


def _reacts(n: Node) -> bool:
    return (n.on_click is not None or n.label_for is not None or n.editable
            or n.tag in ("input_checkbox", "input_radio", "option"))
