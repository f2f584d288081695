"""Observation renderers: how a page is shown to the model.

Three built-in views differ along the axis the research varies:
``element_list`` (numbered interactive elements), ``html`` (raw markup) and
``outline`` (an accessibility-tree-like indented outline, optionally with
coordinates for coordinate-acting harnesses). Options come from the
harness's ``[observation]`` table.
"""

from __future__ import annotations

from typing import Any

from tackroom.core.observation import Element, Observation
from tackroom.core.registry import register

_ROLES = {
    "button": "button", "a": "link", "input_text": "textbox", "input_password": "textbox",
    "input_number": "spinbutton", "input_checkbox": "checkbox", "input_radio": "radio",
    "input_submit": "button", "input_button": "button", "textarea": "textbox",
    "select": "combobox", "option": "option", "label": "label", "h1": "heading",
    "h2": "heading", "h3": "heading", "li": "listitem", "ul": "list", "ol": "list",
    "table": "table", "tr": "row", "td": "cell", "th": "columnheader", "img": "img",
    "span": "text", "t": "text", "p": "paragraph", "div": "group", "form": "form",
    "svg": "graphics", "input_date": "textbox", "input_range": "slider",
}
_INTERACTIVE = {"button", "a", "select", "option", "textarea", "label", "li", "span", "td",
                "svg", "circle", "rect", "polygon", "h3"}


def _value(el: Element) -> str:
    if isinstance(el.value, bool):
        return " (checked)" if el.value else " (unchecked)"
    if el.value:
        return f" value={el.value!r}"
    return ""


def _shown(el: Element) -> bool:
    """Whether an element carries something for the model: text, a value, or interactivity."""
    return bool(el.text) or el.tag.startswith("input") or el.tag in _INTERACTIVE


def _truncate(text: str, options: dict[str, Any]) -> str:
    limit = int(options.get("max_chars", 0) or 0)
    if limit and len(text) > limit:
        return text[:limit] + f"\n… (truncated, {len(text) - limit} more characters)"
    return text


@register("renderer", "element_list")
def render_element_list(obs: Observation, options: dict[str, Any]) -> str:
    """``[12] button "Submit"`` per element that has text or can be acted on."""
    lines = []
    for el in obs.elements:
        if el.tag in ("body", "html") or not _shown(el):
            continue
        text = f' "{el.text}"' if el.text else ""
        ident = f" #{el.id}" if el.id and options.get("show_ids", True) else ""
        focus = " (focused)" if el.focused else ""
        lines.append(f"[{el.ref}] {el.tag}{ident}{text}{_value(el)}{focus}")
    return _truncate("\n".join(lines), options)


@register("renderer", "html")
def render_html(obs: Observation, options: dict[str, Any]) -> str:
    """The page's HTML as the browser has it; elements carry ``data-wob_ref`` / ``data-ref``."""
    if obs.html is None:
        return render_element_list(obs, options)
    return _truncate(obs.html.strip(), options)


@register("renderer", "outline")
def render_outline(obs: Observation, options: dict[str, Any]) -> str:
    """Indented ``role "name"`` outline; ``coords = true`` adds each element's centre."""
    coords = bool(options.get("coords", False))
    refs = bool(options.get("refs", not coords))
    depth: dict[int, int] = {0: -1}
    lines = []
    for el in obs.elements:
        d = depth.get(el.parent, -1) + 1
        depth[el.ref] = d
        if el.tag in ("body", "html"):
            depth[el.ref] = d - 1
            continue
        if not _shown(el):
            # Structural containers are kept only as indentation.
            depth[el.ref] = d - 1
            continue
        role = _ROLES.get(el.tag, el.tag)
        name = f' "{el.text}"' if el.text else ""
        extra = ""
        if refs:
            extra += f" [{el.ref}]"
        if coords:
            x, y = el.center
            extra += f" at ({x:.0f}, {y:.0f})"
        focus = " focused" if el.focused else ""
        lines.append("  " * max(d, 0) + f"- {role}{name}{_value(el)}{focus}{extra}")
    return _truncate("\n".join(lines), options)
