"""The toy tasks: seeded page builders shaped like MiniWoB++'s click / type / form tasks.

Each builder gets an empty :class:`~.page.Page` and a ``random.Random(seed)``,
adds nodes under ``page.area``, wires the task logic as hooks (``on_click``,
``on_enter``, ``on_focus`` returning ``True`` = solved, ``False`` = failed,
``None`` = go on) and returns the instruction. Everything a solver needs is
in the instruction and the visible page; nothing is hidden in ids.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

from tackroom.core.task import Task
from tackroom.suites.toy.env import Builder
from tackroom.suites.toy.page import Node, Page

SUITE = "toy"

WORDS = (
    "apple", "amber", "anchor", "arrow", "bacon", "badge", "basil", "bench", "berry", "blaze",
    "bloom", "brick", "cabin", "cable", "candy", "cargo", "cedar", "chalk", "cider", "cliff",
    "cloud", "coral", "crane", "delta", "denim", "dingo", "drift", "eagle", "ember", "fable",
    "fern", "fiber", "flint", "frost", "gecko", "ginger", "glade", "grape", "gravel", "harbor",
    "hazel", "heron", "honey", "iris", "ivory", "jade", "jelly", "juniper", "kayak", "kettle",
    "koala", "lemon", "lilac", "linen", "lotus", "mango", "maple", "marble", "melon", "mint",
    "moss", "nectar", "noble", "nutmeg", "oasis", "olive", "onyx", "orbit", "otter", "panda",
    "pearl", "pepper", "pixel", "plum", "quartz", "quill", "raven", "ridge", "river", "robin",
    "saddle", "sage", "salmon", "scarf", "shadow", "silk", "slate", "spruce", "tango", "thistle",
    "tiger", "topaz", "tulip", "umber", "velvet", "violet", "walnut", "willow", "yarrow", "zebra",
)
FIRST_NAMES = ("alice", "bruno", "carla", "dmitri", "elena", "farid", "greta", "hiro", "ines",
               "jonas", "kira", "liam", "mara", "nico", "olga", "pablo", "rosa", "sven")
LAST_NAMES = ("adams", "baker", "costa", "dubois", "evans", "fischer", "garcia", "hansen",
              "ito", "jensen", "kowal", "lopez", "moreau", "novak", "olsen", "petrov")
ORDINALS = ("1st", "2nd", "3rd", "4th", "5th")


@dataclass(frozen=True)
class ToyTaskSpec:
    """A task and the builder that makes its pages."""

    task: Task
    build: Builder


def _verdict(ok: bool):
    """A hook that ends the episode with this verdict."""
    return lambda _node: ok


def _row(page: Page, parent: Node | None = None, classes: str = "row") -> Node:
    return page.add("div", parent=parent or page.area, classes=classes)


def _submit(page: Page, check, text: str = "Submit", parent: Node | None = None) -> Node:
    """A button that ends the episode with ``check()``'s verdict."""
    btn = page.add("button", text, _row(page, parent), id="subbtn")
    btn.on_click = lambda _node: bool(check())
    return btn


def _labelled_input(page: Page, label: str, tag: str = "input_text",
                    parent: Node | None = None) -> Node:
    row = _row(page, parent)
    page.add("label", label, row)
    return page.add("input_text" if tag == "input_text" else tag, parent=row, value="")


def _choice_rows(page: Page, tag: str, words: list[str]) -> list[Node]:
    """``div.row > (input, label)`` per word; the label clicks its input."""
    box = page.add("div", parent=page.area, id="boxes")
    inputs = []
    for w in words:
        row = _row(page, box)
        inp = page.add(tag, parent=row, value=False)
        lab = page.add("label", w, row)
        lab.label_for = inp
        inp.name = w
        inputs.append(inp)
    return inputs


# -- click tasks -----------------------------------------------------------------------------


def click_button(page: Page, rng: random.Random) -> str:
    words = rng.sample(WORDS, rng.randint(3, 6))
    target = rng.choice(words)
    box = page.add("div", parent=page.area, id="buttons")
    for w in words:
        page.add("button", w, box).on_click = _verdict(w == target)
    return f'Click on the "{target}" button.'


def click_link(page: Page, rng: random.Random) -> str:
    words = rng.sample(WORDS, rng.randint(6, 10))
    links = rng.sample(words, rng.randint(2, 4))
    target = rng.choice(links)
    p = page.add("p", parent=page.area)
    for w in words:
        if w in links:
            page.add("a", w, p).on_click = _verdict(w == target)
        else:
            page.add("span", w, p)
    return f'Click on the link "{target}".'


def click_checkboxes(page: Page, rng: random.Random) -> str:
    words = rng.sample(WORDS, rng.randint(3, 6))
    targets = set(rng.sample(words, rng.randint(1, min(3, len(words) - 1))))
    boxes = _choice_rows(page, "input_checkbox", words)
    _submit(page, lambda: {b.name for b in boxes if b.value} == targets)
    wanted = ", ".join(w for w in words if w in targets)
    return f"Select {wanted} and nothing else, then click Submit."


def click_option(page: Page, rng: random.Random) -> str:
    words = rng.sample(WORDS, rng.randint(2, 5))
    target = rng.choice(words)
    radios = _choice_rows(page, "input_radio", words)
    for r in radios:
        r.group = radios
    _submit(page, lambda: any(r.value and r.name == target for r in radios))
    return f'Select "{target}" and click Submit.'


def click_tab(page: Page, rng: random.Random) -> str:
    n = rng.randint(2, 4)
    per = rng.randint(2, 3)
    words = rng.sample(WORDS, n * per)
    target = rng.choice(words)
    bar = page.add("ul", parent=page.area, id="tabs")
    tabs: list[Node] = []
    panels: list[Node] = []
    for i in range(n):
        li = page.add("li", parent=bar)
        tabs.append(page.add("a", f"Tab #{i + 1}", li, classes="tab active" if i == 0 else "tab"))
    for i in range(n):
        panel = page.add("div", parent=page.area, id=f"tab-{i + 1}", classes="panel",
                         hidden=i != 0)
        p = page.add("p", parent=panel)
        for w in words[i * per:(i + 1) * per]:
            page.add("a", w, p).on_click = _verdict(w == target)
        panels.append(panel)

    def switch(node: Node) -> None:
        for tab, panel in zip(tabs, panels, strict=True):
            on = tab is node
            page.set_hidden(panel, not on)
            cls = "tab active" if on else "tab"
            if tab.classes != cls:
                tab.classes = cls
                page.changed(tab)

    for tab in tabs:
        tab.on_click = switch
    return f'Switch between the tabs to find and click on the link "{target}".'


def click_collapsible(page: Page, rng: random.Random) -> str:
    n = rng.randint(2, 3)
    per = rng.randint(1, 3)
    words = rng.sample(WORDS, n * per)
    target = rng.choice(words)
    for i in range(n):
        sec = page.add("div", parent=page.area, classes="section")
        head = page.add("h2", f"Section #{i + 1}", sec, classes="header")
        body = page.add("div", parent=sec, classes="content", hidden=True)
        for w in words[i * per:(i + 1) * per]:
            page.add("button", w, body).on_click = _verdict(w == target)

        def toggle(_node: Node, body: Node = body) -> None:
            page.set_hidden(body, not body.hidden)

        head.on_click = toggle
    return f'Expand the sections to find and click the "{target}" button.'


def click_button_sequence(page: Page, rng: random.Random) -> str:
    labels = ["ONE", "TWO", rng.choice(["ZERO", "THREE", "FOUR"])]
    rng.shuffle(labels)
    clicked: list[str] = []
    box = page.add("div", parent=page.area, id="buttons")

    def press(node: Node) -> bool | None:
        if node.text == "ONE":
            if not clicked:
                clicked.append("ONE")
            return None
        return node.text == "TWO" and bool(clicked)

    for lab in labels:
        page.add("button", lab, box).on_click = press
    return "Click button ONE, then click button TWO."


def click_dialog(page: Page, rng: random.Random) -> str:
    dialog = page.add("div", parent=page.area, id="dialog", classes="dialog")
    bar = page.add("div", parent=dialog, classes="titlebar")
    page.add("span", "Dialog", bar)
    close = page.add("button", parent=bar, classes="close")
    page.add("span", "x", close)
    page.add("p", " ".join(rng.sample(WORDS, 4)).capitalize() + ".", dialog)
    buttons = page.add("div", parent=dialog, classes="buttons")
    ok = page.add("button", "OK", buttons)
    cancel = page.add("button", "Cancel", buttons)
    target = rng.choice([close, ok, cancel])
    for b in (close, ok, cancel):
        b.on_click = _verdict(b is target)
    if target is close:
        return 'Close the dialog box by clicking the "x".'
    return f'Click the button in the dialog box labeled "{target.text}".'


_WIDGETS = {
    "button": "button", "link": "a", "checkbox": "input_checkbox", "radio": "input_radio",
    "textbox": "input_text",
}


def click_widget(page: Page, rng: random.Random) -> str:
    kinds = rng.sample(sorted(_WIDGETS), rng.randint(3, 5))
    target = rng.choice(kinds)
    box = page.add("div", parent=page.area, id="widgets")
    for k in kinds:
        tag = _WIDGETS[k]
        row = _row(page, box)
        if tag in ("button", "a"):
            node = page.add(tag, rng.choice(WORDS), row)
        else:
            node = page.add(tag, parent=row, value="" if tag == "input_text" else False)
        if tag == "input_text":
            node.on_focus = _verdict(k == target)
        else:
            node.on_click = _verdict(k == target)
    return f'Click on a "{target}" widget.'


def focus_text(page: Page, rng: random.Random) -> str:
    n = rng.randint(2, 4)
    k = rng.randrange(n)
    for i in range(n):
        inp = page.add("input_text", parent=_row(page), value="")
        inp.on_focus = _verdict(i == k)
    return f"Focus into the {ORDINALS[k]} input."


def choose_list(page: Page, rng: random.Random) -> str:
    words = rng.sample(WORDS, rng.randint(3, 7))
    target = rng.choice(words)
    sel = page.add("select", parent=page.area, value="", id="options")
    for w in words:
        page.add("option", w, sel, value=False)
    _submit(page, lambda: sel.value == target)
    return f'Select "{target}" from the list and click Submit.'


# -- typing tasks ----------------------------------------------------------------------------


def enter_text(page: Page, rng: random.Random) -> str:
    target = rng.choice(WORDS)
    inp = page.add("input_text", parent=_row(page), value="", id="tt")
    _submit(page, lambda: inp.value == target)
    return f'Enter "{target}" into the text field and press Submit.'


def enter_password(page: Page, rng: random.Random) -> str:
    target = rng.choice(WORDS) + "".join(rng.choices(string.digits, k=2))
    a = _labelled_input(page, "Password", "input_password")
    b = _labelled_input(page, "Verify password", "input_password")
    _submit(page, lambda: a.value == target and b.value == target)
    return f'Enter the password "{target}" into both text fields and press Submit.'


def login_user(page: Page, rng: random.Random) -> str:
    user = rng.choice(FIRST_NAMES)
    pwd = rng.choice(WORDS) + "".join(rng.choices(string.digits, k=2))
    u = _labelled_input(page, "Username")
    p = _labelled_input(page, "Password", "input_password")
    _submit(page, lambda: u.value == user and p.value == pwd, text="Login")
    return (f'Enter the username "{user}" and the password "{pwd}" into the text fields '
            "and press Login.")


def fill_form(page: Page, rng: random.Random) -> str:
    first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
    values = {"First name": first, "Last name": last,
              "Email": f"{first}.{last}@{rng.choice(WORDS)}.com"}
    order = list(values)
    rng.shuffle(order)
    form = page.add("form", parent=page.area, id="form")
    fields = {label: _labelled_input(page, label, parent=form) for label in order}
    _submit(page, lambda: all(fields[k].value == v for k, v in values.items()), parent=form)
    return (f'Fill in the form with first name "{first}", last name "{last}" and email '
            f'"{values["Email"]}", then click Submit.')


def press_enter(page: Page, rng: random.Random) -> str:
    target = rng.choice(WORDS)
    inp = page.add("input_text", parent=_row(page), value="", id="tt")
    inp.on_enter = lambda node: node.value == target
    return f'Type "{target}" into the text field and press Enter.'


def copy_text(page: Page, rng: random.Random) -> str:
    alphabet = string.ascii_uppercase + string.digits
    code, old = ("".join(rng.choices(alphabet, k=5)) for _ in range(2))
    page.add("p", f"Your code is {code}. Do not use the old code {old}.", page.area, id="text")
    inp = page.add("input_text", parent=_row(page), value="")
    _submit(page, lambda: inp.value == code)
    return "Copy your code from the paragraph into the text field and press Submit."


def simple_math(page: Page, rng: random.Random) -> str:
    a, b = rng.randint(1, 20), rng.randint(1, 20)
    op = rng.choice("+-x")
    answer = a + b if op == "+" else a - b if op == "-" else a * b
    page.add("p", f"{a} {op} {b} =", page.area, id="math-problem")
    inp = page.add("input_text", parent=_row(page), value="", id="math-answer")
    _submit(page, lambda: inp.value.strip() == str(answer))
    return "Solve the math problem and type your answer into the text field, then press Submit."


# -- the registry ----------------------------------------------------------------------------

_CLICK = frozenset({"click"})
_CLICK_TYPE = frozenset({"click", "type"})

_DEFS: tuple[tuple[str, Builder, frozenset[str], str, str], ...] = (
    ("click-button", click_button, _CLICK, "1", "Click the button with the given label."),
    ("click-link", click_link, _CLICK, "1", "Click the named link in a paragraph."),
    ("click-checkboxes", click_checkboxes, _CLICK, "2-4",
     "Tick exactly the named checkboxes, then Submit."),
    ("click-option", click_option, _CLICK, "2", "Pick the named radio button, then Submit."),
    ("click-tab", click_tab, _CLICK, "1-4", "Search tabs for a link and click it."),
    ("click-collapsible", click_collapsible, _CLICK, "2-4",
     "Expand sections to find a button and click it."),
    ("click-button-sequence", click_button_sequence, _CLICK, "2",
     "Click ONE, then TWO, avoiding the distractor."),
    ("click-dialog", click_dialog, _CLICK, "1", "Click the named control of a dialog."),
    ("click-widget", click_widget, _CLICK, "1", "Click the widget of the named kind."),
    ("focus-text", focus_text, _CLICK, "1", "Focus the n-th text input."),
    ("choose-list", choose_list, _CLICK, "2", "Pick an option from a list box, then Submit."),
    ("enter-text", enter_text, _CLICK_TYPE, "2", "Type a word into the field, then Submit."),
    ("enter-password", enter_password, _CLICK_TYPE, "3",
     "Type a password into both fields, then Submit."),
    ("login-user", login_user, _CLICK_TYPE, "3", "Type username and password, then Login."),
    ("fill-form", fill_form, _CLICK_TYPE, "4", "Fill three labelled fields, then Submit."),
    ("press-enter", press_enter, frozenset({"type", "press"}), "2",
     "Type a word into the field and press Enter (no button)."),
    ("copy-text", copy_text, _CLICK_TYPE, "2", "Copy a code from a paragraph into the field."),
    ("simple-math", simple_math, _CLICK_TYPE, "2", "Type the result of a small sum."),
)

SPECS: dict[str, ToyTaskSpec] = {
    tid: ToyTaskSpec(
        Task(id=tid, suite=SUITE, requires=req, description=desc, has_expert=True,
             meta={"steps": steps}),
        build,
    )
    for tid, build, req, steps, desc in _DEFS
}
