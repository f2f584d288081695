"""Scripted MiniWoB++ solvers.

Each expert maps ``(observation, state)`` to the next action(s) using only
``Click(ref)``, ``Type(ref, text)`` and ``Press(key)``, never coordinates: a
harness may turn ``Click(ref)`` into a click at the element's centre, so the
experts only click elements that are visible where the observation says.

Experts re-plan from the observation on every call. They may return a whole
plan, but they stay correct when the caller executes only the *first* action
and calls again: wherever progress cannot be read off the page, the plan is a
single action and ``state`` remembers what was done.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from tackroom.core.actions import Action, Click, ClickAt, Press, Type, TypeText
from tackroom.core.errors import ActionError
from tackroom.core.observation import Element, Observation
from tackroom.core.task import Expert

ExpertFn = Callable[[Observation, dict[str, Any]], list[Action]]

#: task id -> expert; filled by the ``@expert`` decorator below.
EXPERTS: dict[str, Expert] = {}


def expert(*task_ids: str) -> Callable[[ExpertFn], ExpertFn]:
    """Register ``fn`` as the expert of ``task_ids``.

    The registered expert never raises: on a page it cannot read (say, after
    a harness mangled an action) it returns ``[]`` and leaves the reason in
    ``state["expert_error"]``.
    """

    def register(fn: ExpertFn) -> ExpertFn:
        @functools.wraps(fn)
        def safe(obs: Observation, state: dict[str, Any]) -> list[Action]:
            try:
                return fn(obs, state)
            except (LookupError, ValueError, AttributeError, TypeError) as exc:
                state["expert_error"] = f"{type(exc).__name__}: {exc}"
                return []

        for task_id in task_ids:
            EXPERTS[task_id] = safe
        return fn

    return register


# -- helpers ------------------------------------------------------------------


def quoted(text: str) -> list[str]:
    """The double-quoted strings in ``text``."""
    return re.findall(r'"([^"]*)"', text)


def buttons(obs: Observation, text: str | None = None) -> list[Element]:
    return [e for e in obs.elements if e.tag == "button" and (text is None or e.text == text)]


def first(elements: list[Element], what: str) -> Element:
    if not elements:
        raise LookupError(f"expert: no {what} on the page")
    return elements[0]


def matched(m: re.Match[str] | None, what: str) -> re.Match[str]:
    """``m``, or a LookupError (which the registered expert turns into ``[]``) if no match."""
    if m is None:
        raise LookupError(f"expert: no {what} in the text")
    return m


def submit_button(obs: Observation) -> Element:
    found = [e for e in obs.elements if e.tag == "button" and e.text.lower() == "submit"]
    return first(found, "Submit button")


def inputs(obs: Observation, *tags: str) -> list[Element]:
    tags = tags or ("input_text",)
    return [e for e in obs.elements if e.tag in tags]


def fill(obs: Observation, state: dict[str, Any], field: Element, text: str) -> list[Action]:
    """Actions that make ``field`` hold exactly ``text``; ``[]`` when it already does.

    An empty field gets one ``Type``. A field with the wrong text is cleared
    one observable step at a time (focus, then Backspace), so the plan stays
    right when only its first action runs.
    """
    value = str(field.value or "")
    if value == text:
        return []
    if not value:
        return [Type(field.ref, text)]
    if not field.focused:
        return [Click(field.ref)]
    return [Press("<Backspace>")]


def label_of(obs: Observation, box: Element) -> str:
    """Text of the label around a checkbox or radio button."""
    parent = obs.element(box.parent)
    if parent is None:
        return ""
    parts = [e.text for e in obs.children(parent.ref) if e.ref != box.ref and e.text]
    return " ".join(parts) or parent.text


def words_in(text: str) -> list[str]:
    return text.split()


# -- click tasks ------------------------------------------------------------------


@expert("click-test")
def click_test(obs: Observation, state: dict[str, Any]) -> list[Action]:
    return [Click(first(buttons(obs), "button").ref)]


@expert("click-test-2", "click-test-transfer")
def click_test_2(obs: Observation, state: dict[str, Any]) -> list[Action]:
    name = matched(re.search(r"Click button (\w+)", obs.instruction), "button name").group(1)
    return [Click(first(buttons(obs, name), f"button {name}").ref)]


@expert("click-button", "unicode-test")
def click_button(obs: Observation, state: dict[str, Any]) -> list[Action]:
    name = quoted(obs.instruction)[0]
    return [Click(first(buttons(obs, name), f"button {name!r}").ref)]


@expert("click-button-sequence")
def click_button_sequence(obs: Observation, state: dict[str, Any]) -> list[Action]:
    # The page does not show which buttons were pressed, so state counts calls:
    # the caller always runs at least the first action of a plan.
    one = first(buttons(obs, "ONE"), "button ONE")
    two = first(buttons(obs, "TWO"), "button TWO")
    done = state.get("pressed", 0)
    state["pressed"] = done + 1
    return [Click(one.ref), Click(two.ref)] if done == 0 else [Click(two.ref)]


def _links(obs: Observation, text: str) -> list[Element]:
    return [e for e in obs.elements if "alink" in e.classes.split() and e.text == text]


@expert("click-link")
def click_link(obs: Observation, state: dict[str, Any]) -> list[Action]:
    return [Click(first(_links(obs, quoted(obs.instruction)[0]), "link").ref)]


@expert("click-dialog")
def click_dialog(obs: Observation, state: dict[str, Any]) -> list[Action]:
    close = [e for e in obs.elements
             if e.tag == "button" and "ui-dialog-titlebar-close" in e.classes.split()]
    return [Click(first(close, "dialog close button").ref)]


@expert("click-dialog-2")
def click_dialog_2(obs: Observation, state: dict[str, Any]) -> list[Action]:
    name = quoted(obs.instruction)[0]
    if name == "x":
        return click_dialog(obs, state)
    return [Click(first(buttons(obs, name), f"button {name!r}").ref)]


def _check_boxes(obs: Observation, wanted: set[str], tag: str) -> list[Action]:
    plan: list[Action] = []
    for box in (e for e in obs.elements if e.tag == tag):
        if (label_of(obs, box) in wanted) != bool(box.value):
            plan.append(Click(box.ref))
    return plan + [Click(submit_button(obs).ref)]


@expert("click-checkboxes", "click-checkboxes-large", "click-checkboxes-transfer")
def click_checkboxes(obs: Observation, state: dict[str, Any]) -> list[Action]:
    m = re.match(r"Select (.*) and click Submit\.", obs.instruction)
    items = m.group(1) if m else ""
    wanted = set() if items == "nothing" else {w.strip() for w in items.split(",") if w.strip()}
    return _check_boxes(obs, wanted, "input_checkbox")


@expert("click-option")
def click_option(obs: Observation, state: dict[str, Any]) -> list[Action]:
    m = re.match(r"Select (.*) and click Submit\.", obs.instruction)
    item = matched(m, "option to select").group(1)
    return _check_boxes(obs, {item}, "input_radio")


@expert("click-tab")
def click_tab(obs: Observation, state: dict[str, Any]) -> list[Action]:
    n = matched(re.search(r"Tab #(\d+)", obs.instruction), "tab number").group(1)
    tabs = [e for e in obs.elements if e.tag == "a" and e.text == f"Tab #{n}"]
    return [Click(first(tabs, f"Tab #{n}").ref)]


@expert("click-tab-2", "click-tab-2-easy", "click-tab-2-medium", "click-tab-2-hard")
def click_tab_2(obs: Observation, state: dict[str, Any]) -> list[Action]:
    target = quoted(obs.instruction)[0]
    links = _links(obs, target)
    if links:
        return [Click(links[0].ref)]
    tabs = [e for e in obs.elements if "ui-tabs-anchor" in e.classes.split()]
    seen = state.setdefault("seen", set())
    active = [t for t in tabs if "ui-tabs-active" in _classes(obs, t.parent)]
    seen.update(t.text for t in active)
    for tab in tabs:
        if tab.text not in seen:
            seen.add(tab.text)
            return [Click(tab.ref)]
    raise LookupError(f"expert: link {target!r} is in no tab")


def _classes(obs: Observation, ref: int) -> list[str]:
    el = obs.element(ref)
    return el.classes.split() if el is not None else []


@expert("click-collapsible", "click-collapsible-nodelay")
def click_collapsible(obs: Observation, state: dict[str, Any]) -> list[Action]:
    if any("ui-accordion-content" in e.classes.split() for e in obs.elements):
        return [Click(submit_button(obs).ref)]
    header = [e for e in obs.elements if e.tag == "h3"]
    return [Click(first(header, "section header").ref)]


# Not click-collapsible-2: its sections animate open, so the link may not be
# visible yet in the observation that follows the click, and an expert that
# cannot wait would move on to the next section.
@expert("click-collapsible-2-nodelay")
def click_collapsible_2(obs: Observation, state: dict[str, Any]) -> list[Action]:
    target = quoted(obs.instruction)[0]
    links = _links(obs, target)
    if links:
        return [Click(links[0].ref)]
    seen = state.setdefault("seen", set())
    for header in (e for e in obs.elements if e.tag == "h3"):
        if "ui-state-active" in header.classes.split():
            seen.add(header.text)
        elif header.text not in seen:
            seen.add(header.text)
            return [Click(header.ref)]
    raise LookupError(f"expert: link {target!r} is in no section")


_WIDGET_TAGS = {"radio": "input_radio", "checkbox": "input_checkbox", "text": "input_text",
                "textarea": "textarea", "button": "button"}


@expert("click-widget")
def click_widget(obs: Observation, state: dict[str, Any]) -> list[Action]:
    tag = _WIDGET_TAGS[quoted(obs.instruction)[0]]
    return [Click(first([e for e in obs.elements if e.tag == tag], tag).ref)]


@expert("focus-text")
def focus_text(obs: Observation, state: dict[str, Any]) -> list[Action]:
    return [Click(first(inputs(obs), "text box").ref)]


def _ordinal(text: str) -> int:
    m = matched(re.search(r"\b(\d+)(?:st|nd|rd|th)\b", text), "ordinal")
    return int(m.group(1)) - 1


@expert("focus-text-2")
def focus_text_2(obs: Observation, state: dict[str, Any]) -> list[Action]:
    boxes = inputs(obs)
    return [Click(boxes[_ordinal(obs.instruction)].ref)]


@expert("odd-or-even")
def odd_or_even(obs: Observation, state: dict[str, Any]) -> list[Action]:
    plan: list[Action] = []
    for row in (e for e in obs.elements if "row" in e.classes.split()):
        number: int | None = None
        choice: dict[str, Element] = {}
        for el in _descendants(obs, row.ref):
            if "display-number" in el.classes.split():
                number = int(el.text)
            if el.tag == "button":
                choice[el.text] = el
        if number is None:
            raise LookupError("expert: no number in a row")
        want = choice["Odd" if number % 2 else "Even"]
        if "selected" not in want.classes.split():
            plan.append(Click(want.ref))
    return plan + [Click(first(buttons(obs, "Submit"), "Submit").ref)]


def _descendants(obs: Observation, ref: int) -> list[Element]:
    out: list[Element] = []
    frontier = [ref]
    while frontier:
        kids = [e for e in obs.elements if e.parent in frontier]
        out.extend(kids)
        frontier = [k.ref for k in kids if k.ref > 0]
    return out


@expert("identify-shape")
def identify_shape(obs: Observation, state: dict[str, Any]) -> list[Action]:
    svg = first([e for e in obs.elements if e.tag == "svg"], "figure")
    shape = first(_descendants(obs, svg.ref), "shape")
    if shape.tag == "text":
        label = "Number" if shape.text.strip().isdigit() else "Letter"
    else:
        label = {"circle": "Circle", "rect": "Rectangle", "polygon": "Triangle"}[shape.tag]
    return [Click(first(buttons(obs, label), label).ref)]


@expert("navigate-tree")
def navigate_tree(obs: Observation, state: dict[str, Any]) -> list[Action]:
    target = quoted(obs.instruction)[0]
    names = [e for e in obs.elements if e.tag == "span" and e.text == target]
    if names:
        return [Click(names[0].ref)]
    # Open the first closed folder not opened yet; its hit area (the +/- box)
    # toggles it, a click on the folder's name would not.
    opened = state.setdefault("opened", set())
    for hit in (e for e in obs.elements if "expandable-hitarea" in e.classes.split()):
        folder = [e for e in obs.children(hit.parent) if e.tag == "span"]
        key = folder[0].text if folder else hit.ref
        if key not in opened:
            opened.add(key)
            return [Click(hit.ref)]
    raise LookupError(f"expert: {target!r} is in no folder")


@expert("choose-list")
def choose_list(obs: Observation, state: dict[str, Any]) -> list[Action]:
    # A closed <select> shows none of its options; typing an option's name
    # into the focused list selects it (the browser's type-ahead).
    item = matched(re.match(r"Select (.*) from the list", obs.instruction), "item").group(1)
    select = first([e for e in obs.elements if e.tag == "select"], "list")
    if not state.get("typed"):
        state["typed"] = True
        return [Type(select.ref, item), Click(submit_button(obs).ref)]
    return [Click(submit_button(obs).ref)]


# -- typing tasks ---------------------------------------------------------------


def _fill_and_submit(obs: Observation, state: dict[str, Any], pairs: list[tuple[Element, str]],
                     submit: Element) -> list[Action]:
    """Fill every field, then submit.

    Typing into an empty field is observable, so several ``Type`` actions and
    the submit go in one plan; clearing a wrong field is planned alone, one
    key at a time, after any typing already planned has happened.
    """
    plan: list[Action] = []
    for field, text in pairs:
        steps = fill(obs, state, field, text)
        if not steps:
            continue
        if not isinstance(steps[0], Type):
            return plan or steps
        plan += steps
    return plan + [Click(submit.ref)]


@expert("enter-text", "enter-text-dynamic")
def enter_text(obs: Observation, state: dict[str, Any]) -> list[Action]:
    text = quoted(obs.instruction)[0]
    return _fill_and_submit(obs, state, [(first(inputs(obs), "text field"), text)],
                            submit_button(obs))


@expert("enter-text-2")
def enter_text_2(obs: Observation, state: dict[str, Any]) -> list[Action]:
    text = quoted(obs.instruction)[0]
    text = text.upper() if "upper case" in obs.instruction else text.lower()
    return _fill_and_submit(obs, state, [(first(inputs(obs), "text field"), text)],
                            submit_button(obs))


@expert("enter-password")
def enter_password(obs: Observation, state: dict[str, Any]) -> list[Action]:
    password = quoted(obs.instruction)[0]
    fields = inputs(obs, "input_password")
    return _fill_and_submit(obs, state, [(f, password) for f in fields], submit_button(obs))


@expert("login-user")
def login_user(obs: Observation, state: dict[str, Any]) -> list[Action]:
    user, password = quoted(obs.instruction)[:2]
    name = first([e for e in obs.elements if e.id == "username"], "username field")
    word = first([e for e in obs.elements if e.id == "password"], "password field")
    login = first([e for e in obs.elements if e.id == "subbtn"], "login button")
    return _fill_and_submit(obs, state, [(name, user), (word, password)], login)


@expert("login-user-popup")
def login_user_popup(obs: Observation, state: dict[str, Any]) -> list[Action]:
    # Focusing a field may open a "session expiring" popup that disables the
    # form and may cover the Login button; Cancel keeps the session. Since the
    # popup can appear after any action, plan one action at a time.
    cancel = [e for e in obs.elements if e.id == "popup-cancel"]
    if cancel:
        return [Click(cancel[0].ref)]
    return login_user(obs, state)[:1]


@expert("copy-paste")
def copy_paste(obs: Observation, state: dict[str, Any]) -> list[Action]:
    source = first([e for e in obs.elements if e.tag == "textarea"], "text area")
    return _fill_and_submit(obs, state, [(first(inputs(obs), "text box"), str(source.value))],
                            submit_button(obs))


@expert("copy-paste-2")
def copy_paste_2(obs: Observation, state: dict[str, Any]) -> list[Action]:
    areas = [e for e in obs.elements if e.tag == "textarea"]
    source = areas[_ordinal(obs.instruction)]
    return _fill_and_submit(obs, state, [(first(inputs(obs), "text box"), str(source.value))],
                            submit_button(obs))


@expert("simple-arithmetic")
def simple_arithmetic(obs: Observation, state: dict[str, Any]) -> list[Action]:
    problem = first([e for e in obs.elements if e.id == "math-problem"], "problem").text
    m = re.match(r"\s*(-?\d+)\s*([-+x])\s*(-?\d+)", problem)
    a, op, b = matched(m, "arithmetic problem").groups()
    x, y = int(a), int(b)
    answer = {"+": x + y, "-": x - y, "x": x * y}[op]
    box = first([e for e in obs.elements if e.id == "math-answer"], "answer box")
    return _fill_and_submit(obs, state, [(box, str(answer))], submit_button(obs))


@expert("simple-algebra")
def simple_algebra(obs: Observation, state: dict[str, Any]) -> list[Action]:
    problem = first([e for e in obs.elements if e.id == "math-problem"], "problem").text
    lhs, rhs = (s.strip() for s in problem.split("="))
    total = int(rhs)
    m = re.match(r"x\s*([-+])\s*(\d+)$", lhs)
    if m:  # x + d = t, x - d = t
        d = int(m.group(2))
        answer = total - d if m.group(1) == "+" else total + d
    else:  # d + x = t, d - x = t
        n, op = matched(re.match(r"(\d+)\s*([-+])\s*x$", lhs), "equation").groups()
        answer = total - int(n) if op == "+" else int(n) - total
    box = first([e for e in obs.elements if e.id == "math-answer"], "answer box")
    return _fill_and_submit(obs, state, [(box, str(answer))], submit_button(obs))


@expert("find-word")
def find_word(obs: Observation, state: dict[str, Any]) -> list[Action]:
    para = first([e for e in obs.elements if e.tag == "p"], "paragraph")
    word = words_in(para.text)[_ordinal(obs.instruction)]
    word = re.sub(r"[^a-zA-Z]", "", word)
    return _fill_and_submit(obs, state, [(first(inputs(obs), "text box"), word)],
                            submit_button(obs))


def _table(obs: Observation) -> dict[str, str]:
    table: dict[str, str] = {}
    for row in (e for e in obs.elements if e.tag == "tr"):
        cells = [c.text for c in obs.children(row.ref) if c.tag == "td"]
        if len(cells) == 2:
            table[cells[0]] = cells[1]
    return table


@expert("read-table")
def read_table(obs: Observation, state: dict[str, Any]) -> list[Action]:
    m = re.match(r"Enter the value of (.*) into the text field", obs.instruction)
    key = matched(m, "key to look up").group(1)
    return _fill_and_submit(obs, state, [(first(inputs(obs), "text field"), _table(obs)[key])],
                            submit_button(obs))


@expert("read-table-2")
def read_table_2(obs: Observation, state: dict[str, Any]) -> list[Action]:
    table = _table(obs)
    pairs = []
    for label in (e for e in obs.elements if e.tag == "label"):
        field = [e for e in obs.children(label.parent) if e.tag == "input_text"]
        if field:
            pairs.append((field[0], table[label.text.rstrip(":").strip()]))
    return _fill_and_submit(obs, state, pairs, submit_button(obs))


def script(state: dict[str, Any], make: Callable[[], list[Action]]) -> list[Action]:
    """A fixed action sequence whose progress the page does not show.

    Returns what is left of it; the caller runs at least the first action,
    so the next call starts one further on.
    """
    if "script" not in state:
        state["script"] = make()
    plan = state["script"]
    state["script"] = plan[1:]
    return plan


@expert("enter-date")
def enter_date(obs: Observation, state: dict[str, Any]) -> list[Action]:
    found = re.search(r"(\d\d)/(\d\d)/(\d{4})", obs.instruction)
    mm, dd, yyyy = matched(found, "date").groups()
    box = first(inputs(obs, "input_date"), "date field")
    submit = submit_button(obs)
    if box.value == f"{yyyy}-{mm}-{dd}":
        return [Click(submit.ref)]
    if not state.get("typed"):
        # Chrome's date field is three segments (mm/dd/yyyy) that take the
        # digits in turn, starting from the focused one.
        state["typed"] = True
        return [Type(box.ref, mm + dd + yyyy)]
    # Typing did not give the date: the click focused a later segment (as a
    # click at the field's centre does). Go to the first segment with the
    # arrow key and type the digits one key at a time.
    plan = script(state, lambda: [Click(box.ref), Press("<ArrowLeft>"), Press("<ArrowLeft>"),
                                  *(Press(c) for c in mm + dd + yyyy), Click(submit.ref)])
    return plan or [Click(submit.ref)]


@expert("enter-time")
def enter_time(obs: Observation, state: dict[str, Any]) -> list[Action]:
    h, m, ampm = matched(re.search(r"(\d+):(\d\d) (AM|PM)", obs.instruction), "time").groups()
    box = first(inputs(obs, "input_time"), "time field")
    hour24 = int(h) % 12 + (12 if ampm == "PM" else 0)
    if box.value == f"{hour24:02d}:{m}":
        return [Click(submit_button(obs).ref)]
    if not state.get("typed"):
        state["typed"] = True
        return [Type(box.ref, f"{int(h):02d}{m}{ampm[0]}"), Click(submit_button(obs).ref)]
    return [Click(submit_button(obs).ref)]


@expert("use-autocomplete", "use-autocomplete-nodelay")
def use_autocomplete(obs: Observation, state: dict[str, Any]) -> list[Action]:
    parts = quoted(obs.instruction)
    start, end = parts[0], (parts[1] if len(parts) > 1 else "")
    box = first([e for e in obs.elements if e.id == "tags"], "text field")
    value = str(box.value or "")
    if value and value.startswith(start) and value.endswith(end):
        return [Click(submit_button(obs).ref)]
    menu = [e for e in obs.elements if e.tag in ("li", "div") and e.text
            and _in_autocomplete_menu(obs, e) and e.text.startswith(start)
            and e.text.endswith(end)]
    if menu:
        return [Click(menu[0].ref)]
    if value != start:
        return fill(obs, state, box, start) or [Click(box.ref)]
    # The suggestions have not shown up yet: type nothing new, just look again.
    return [Click(box.ref)]


def _in_autocomplete_menu(obs: Observation, el: Element) -> bool:
    ref = el.parent
    while ref:
        parent = obs.element(ref)
        if parent is None:
            return False
        if "ui-autocomplete" in parent.classes.split():
            return True
        ref = parent.parent
    return False


@expert("guess-number")
def guess_number(obs: Observation, state: dict[str, Any]) -> list[Action]:
    # Binary search; the page shows only the last hint, so state keeps the bounds.
    lo, hi = state.setdefault("lo", 0), state.setdefault("hi", 9)
    for hint in (e for e in obs.elements if e.id in ("higher", "lower")):
        numbers = [d.text for d in _descendants(obs, hint.ref)
                   if d.text.strip().lstrip("-").isdigit()]
        if numbers:
            n = int(numbers[0])
            if hint.id == "higher":
                lo = max(lo, n + 1)
            else:
                hi = min(hi, n - 1)
    state["lo"], state["hi"] = lo, hi
    guess = str((lo + hi) // 2)
    box = first(inputs(obs, "input_number"), "number field")
    submit = submit_button(obs)
    if box.value == guess:
        return [Click(submit.ref)]
    if not box.focused:
        return [Click(box.ref)]
    # Select whatever the field holds and replace it by the guess (one key:
    # guesses are single digits). Selecting is not visible, so remember it.
    if state.get("selected") != (lo, hi):
        state["selected"] = (lo, hi)
        return [Press("C-a"), Press(guess), Click(submit.ref)]
    return [Press(guess), Click(submit.ref)]


# -- driving an expert directly (tests, benchmarks) ------------------------------


def as_coordinates(action: Action, obs: Observation) -> list[Action]:
    """What a coordinate-only harness makes of an expert action: clicks at centres."""
    if isinstance(action, Click):
        el = obs.element(action.ref)
        return [ClickAt(*el.center)] if el is not None else [action]
    if isinstance(action, Type):
        el = obs.element(action.ref)
        return [ClickAt(*el.center), TypeText(action.text)] if el is not None else [action]
    return [action]


def run_expert(env: Any, fn: ExpertFn, seed: int, *, first_only: bool = True,
               coords: bool = False, max_steps: int = 40) -> dict[str, Any]:
    """Run one episode of ``fn`` on ``env`` (already targeted at the task).

    ``first_only`` executes only the first action of each plan, as a harness
    with one action per turn does; ``coords`` clicks at element centres
    instead of by ref. Returns ``{"success", "reward", "steps", "error"}``.
    """
    obs = env.reset(seed)
    state: dict[str, Any] = {}
    steps = 0
    while steps < max_steps:
        plan = fn(obs, state)
        if not plan:
            return {"success": False, "reward": 0.0, "steps": steps,
                    "error": f"expert gave up: {state.get('expert_error', 'empty plan')}"}
        for action in plan[:1] if first_only else plan:
            for concrete in as_coordinates(action, obs) if coords else [action]:
                try:
                    result = env.step(concrete)
                except ActionError as exc:
                    return {"success": False, "reward": 0.0, "steps": steps,
                            "error": f"action {concrete}: {exc}"}
                steps += 1
                if result.terminated:
                    return {"success": bool(result.success), "reward": result.reward,
                            "steps": steps, "error": None}
            obs = result.observation
    return {"success": False, "reward": 0.0, "steps": steps, "error": "step limit"}
