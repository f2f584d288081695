"""What a decision model sees of a (state, choice) pair: numeric features and a text.

A *decision point* is the JSON-able dict that :func:`tackroom.harness.delegation.decision_points`
builds and the store records (``type``, ``context``, ``choices``). Two views of it:

- :func:`features` / :func:`point_features`: a fixed-length vector per choice
  (:data:`FEATURE_NAMES`), for the ``logistic`` and ``gbm`` decision models;
- :func:`choice_text` (= :func:`context_text` + the choice's label): what the ``lm``
  decision model reads.

The features are generic — nothing is specific to one suite or task: the choice's
kind and element tag, how well its text matches the instruction and its quoted
spans, where the element sits, whether the episode already took this choice, and
the context (turn fraction, last error, how much of the instruction's quoted text
is already typed).

The ``continue`` choice (``action`` is ``None``: leave the turn to the LLM) has no
element and no text: every element/text feature is 0 for it and ``is_continue`` is 1.
Because a decision model compares the choices *of one point*, a context feature
that is the same for every choice (turn fraction, last error) cannot move the
comparison by itself; such features therefore also appear multiplied by
``is_continue`` (``cont_x_*``), which lets a model learn e.g. "submit once every
quoted text is typed, continue before".

Every function is total: missing keys, ``None`` values, odd types give zeros,
never an exception, so that a model can score any recorded point.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

#: The decision point types (as :data:`tackroom.harness.delegation.POINT_TYPES`).
POINT_TYPES = ("click", "type", "submit", "command")

#: Action kinds with a one-hot feature; any other kind counts as ``other``.
_ACTION_KINDS = ("click", "type", "shell")

#: Element tag groups with a one-hot feature (MiniWoB++ and the toy suite flatten
#: inputs to ``input_<type>``); an unlisted tag counts as ``other``.
_TAG_GROUPS: dict[str, tuple[str, ...]] = {
    "button": ("button", "input_button", "input_submit", "input_reset"),
    "link": ("a",),
    "label": ("label",),
    "option": ("option", "select"),
    "text_input": ("input_text", "input_password", "input_email", "input_search",
                   "input_tel", "input_url", "input_number", "input", "textarea"),
    "checkbox": ("input_checkbox",),
    "radio": ("input_radio",),
    "list_item": ("li",),
    "cell": ("td", "th"),
    "inline": ("span", "p", "div", "b", "i", "em", "strong", "h1", "h2", "h3", "summary"),
    "shape": ("svg", "circle", "rect", "polygon", "canvas"),
}
_TAG_OF = {tag: group for group, tags in _TAG_GROUPS.items() for tag in tags}

_QUOTED = re.compile(r'"([^"]+)"|“([^”]+)”')
_TOKEN = re.compile(r"[a-z0-9]+")
#: Words that instructions use to *frame* a goal ("click the button ..."): they say
#: nothing about *which* choice is meant, so the overlap ratios leave them out.
_FRAME_WORDS = frozenset(
    "a an the on in into to of and or then click select choose press enter type "
    "field box button link item please from with for as it is this that".split())
#: Tokens either side of a quoted span that count as its surroundings ("the
#: *username* field" next to ``"alice"``).
_WINDOW = 4


def _names() -> tuple[str, ...]:
    names = [f"point_{t}" for t in POINT_TYPES]
    names += ["is_continue"] + [f"kind_{k}" for k in _ACTION_KINDS] + ["kind_other"]
    names += [f"tag_{g}" for g in _TAG_GROUPS] + ["tag_other", "tag_none"]
    names += [
        # the choice's main text: the text to type / command to run, else the element's text
        "text_empty", "text_len", "text_in_instruction", "instruction_in_text",
        "text_equals_quoted", "text_in_quoted", "quoted_in_text", "text_jaccard",
        "text_overlap", "text_overlap_best", "text_overlap_gap", "text_unique_match",
        # the element's own text (for a type choice: the field's label)
        "el_text_in_instruction", "el_text_overlap", "el_near_quoted", "el_attr_overlap",
        # the element itself
        "el_value_empty", "el_value_set", "el_focused", "el_checked", "pos_top", "pos_left",
        "el_area",
        # the choice among the others
        "rank", "is_first", "is_last", "n_choices_log",
        # the episode so far
        "done_before", "done_count_log", "done_last", "el_touched_before", "text_typed_before",
        # the context, and the context times is_continue
        "last_error", "turn_frac", "turns_left_log", "n_previous_log", "n_elements_log",
        "quoted_done_frac", "n_quoted_log", "prev_type_frac",
        "cont_x_last_error", "cont_x_turn_frac", "cont_x_n_previous_log",
        "cont_x_quoted_done_frac", "cont_x_all_quoted_done", "cont_x_prev_type_frac",
        "cont_x_turns_left_log",
    ]
    return tuple(names)


#: The name of each entry of :func:`features`' vector, in order.
FEATURE_NAMES: tuple[str, ...] = _names()
_INDEX = {n: i for i, n in enumerate(FEATURE_NAMES)}


# -- small total helpers ------------------------------------------------------------------
def _str(x: Any) -> str:
    return x if isinstance(x, str) else ""


def _num(x: Any, default: float = 0.0) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return default
    x = float(x)
    return x if math.isfinite(x) else default


def _dict(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _norm(text: str) -> str:
    return " ".join(_TOKEN.findall(text.lower()))


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def _content(tokens: Sequence[str]) -> set[str]:
    return {t for t in tokens if t not in _FRAME_WORDS}


def _contains(haystack: str, needle: str) -> bool:
    """``needle`` occurs in ``haystack`` as whole tokens (both normalised; empty: no)."""
    return bool(needle) and f" {needle} " in f" {haystack} "


def _quoted(instruction: str) -> list[str]:
    return [a or b for a, b in _QUOTED.findall(instruction) if (a or b).strip()]


def _log(x: float) -> float:
    return math.log1p(max(x, 0.0))


def _previous(context: dict[str, Any]) -> list[str]:
    prev = context.get("previous")
    return [p for p in prev if isinstance(p, str)] if isinstance(prev, list) else []


def _same_action(prev: str, label: str) -> bool:
    """Whether a ``previous`` label names the action of a choice label.

    Choice labels may say more than the action label the episode recorded
    (``type 'bob' into [5] input_text 'Name'`` vs ``type 'bob' into [5]``; a submit
    choice is ``submit: click [3] ...``), so one being the other plus a suffix counts.
    """
    label = label.removeprefix("submit: ")
    return bool(prev) and (prev == label or label.startswith(prev + " ")
                           or prev.startswith(label + " "))


# -- the features -------------------------------------------------------------------------
def point_features(point: dict[str, Any]) -> list[list[float]]:
    """One feature vector per choice of ``point`` (see :data:`FEATURE_NAMES`)."""
    point = _dict(point)
    raw = point.get("choices")
    choices = [_dict(c) for c in raw] if isinstance(raw, list) else []
    context = _dict(point.get("context"))
    ptype = _str(point.get("type"))
    instruction = _str(context.get("instruction"))
    instr_norm = _norm(instruction)
    instr_tokens = _tokens(instruction)
    instr_content = _content(instr_tokens)
    quoted = _quoted(instruction)
    quoted_norm = [_norm(q) for q in quoted]
    previous = _previous(context)
    prev_norm = " | ".join(_norm(p) for p in previous)
    n = len(choices)

    # context features: the same for every choice of the point
    turn = _num(context.get("turn"))
    left = _num(context.get("turns_left"))
    turn_frac = turn / (turn + left) if turn + left > 0 else 0.0
    done_quoted = sum(1 for q in quoted_norm if q and _contains(prev_norm, q))
    quoted_done_frac = done_quoted / len(quoted_norm) if quoted_norm else 0.0
    n_prev_type = sum(1 for p in previous if p.startswith("type"))
    prev_type_frac = n_prev_type / len(previous) if previous else 0.0
    last_error = 1.0 if context.get("last_error") is True else 0.0

    # main text of each choice, and its overlap with the instruction: the best overlap
    # over the choice set makes the features relative ("the best match of these"),
    # which a per-choice classifier (gbm) cannot work out from one row alone.
    texts, overlaps = [], []
    for c in choices:
        el = _dict(c.get("el"))
        text = _str(c.get("text")) if c.get("text") is not None else _str(el.get("text"))
        if c.get("action") is None:
            text = ""
        texts.append(text)
        content = _content(_tokens(text))
        overlaps.append(len(content & instr_content) / len(content) if content else 0.0)
    best = max(overlaps, default=0.0)
    n_best = sum(1 for o in overlaps if o == best and best > 0)

    # element positions, normalised by the extent of the choices' elements
    els = [_dict(c.get("el")) for c in choices]
    max_bottom = max((_num(e.get("top")) + _num(e.get("height")) for e in els), default=0.0)
    max_right = max((_num(e.get("left")) + _num(e.get("width")) for e in els), default=0.0)
    max_area = max((_num(e.get("width")) * _num(e.get("height")) for e in els), default=0.0)

    rows = []
    for i, c in enumerate(choices):
        f = [0.0] * len(FEATURE_NAMES)

        def put(name: str, value: float, f: list[float] = f) -> None:
            f[_INDEX[name]] = float(value)

        if ptype in POINT_TYPES:
            put(f"point_{ptype}", 1)
        action = c.get("action")
        is_cont = action is None
        el = els[i]
        text = texts[i]
        label = _str(c.get("label"))
        put("rank", i / (n - 1) if n > 1 else 0.0)
        put("is_first", i == 0)
        put("is_last", i == n - 1)
        put("n_choices_log", _log(n))
        if is_cont:
            put("is_continue", 1)
        else:
            kind = _str(_dict(action).get("kind"))
            put(f"kind_{kind}" if kind in _ACTION_KINDS else "kind_other", 1)
            tag = _str(el.get("tag"))
            put("tag_none" if not el else f"tag_{_TAG_OF.get(tag, 'other')}", 1)

            tnorm = _norm(text)
            ttokens = _tokens(text)
            tset = set(ttokens)
            put("text_empty", not tnorm)
            put("text_len", _log(len(ttokens)))
            put("text_in_instruction", _contains(instr_norm, tnorm))
            put("instruction_in_text", _contains(tnorm, instr_norm))
            put("text_equals_quoted", bool(tnorm) and tnorm in quoted_norm)
            put("text_in_quoted", any(_contains(q, tnorm) for q in quoted_norm))
            put("quoted_in_text", any(_contains(tnorm, q) for q in quoted_norm))
            union = tset | set(instr_tokens)
            put("text_jaccard", len(tset & set(instr_tokens)) / len(union) if union else 0.0)
            put("text_overlap", overlaps[i])
            put("text_overlap_best", overlaps[i] == best and best > 0)
            put("text_overlap_gap", best - overlaps[i])
            put("text_unique_match", overlaps[i] == best and n_best == 1)

            el_text = _str(el.get("text"))
            el_norm = _norm(el_text)
            el_content = _content(_tokens(el_text))
            put("el_text_in_instruction", _contains(instr_norm, el_norm))
            put("el_text_overlap",
                len(el_content & instr_content) / len(el_content) if el_content else 0.0)
            put("el_near_quoted", _near(instr_tokens, _tokens(text), el_content)
                if c.get("text") is not None else 0.0)
            attrs = _content(_tokens(f"{_str(el.get('id'))} {_str(el.get('classes'))}"
                                     .replace("_", " ").replace("-", " ")))
            put("el_attr_overlap", len(attrs & instr_content) / len(attrs) if attrs else 0.0)
            value = el.get("value")
            put("el_value_empty", isinstance(value, str) and not value)
            put("el_value_set", isinstance(value, str) and bool(value))
            put("el_checked", value is True)
            put("el_focused", el.get("focused") is True)
            if max_bottom > 0:
                put("pos_top", _num(el.get("top")) / max_bottom)
            if max_right > 0:
                put("pos_left", _num(el.get("left")) / max_right)
            if max_area > 0:
                put("el_area", _num(el.get("width")) * _num(el.get("height")) / max_area)

            count = sum(1 for p in previous if _same_action(p, label))
            put("done_before", count > 0)
            put("done_count_log", _log(count))
            put("done_last", bool(previous) and _same_action(previous[-1], label))
            ref = el.get("ref", _dict(action).get("ref"))
            if isinstance(ref, (int, str)) and not isinstance(ref, bool):
                put("el_touched_before", any(f"[{ref}]" in p for p in previous))
            if c.get("text") is not None and tnorm:
                put("text_typed_before", any(p.startswith("type") and _contains(_norm(p), tnorm)
                                             for p in previous))

        put("last_error", last_error)
        put("turn_frac", turn_frac)
        put("turns_left_log", _log(left))
        put("n_previous_log", _log(len(previous)))
        put("n_elements_log", _log(_num(context.get("n_elements"))))
        put("quoted_done_frac", quoted_done_frac)
        put("n_quoted_log", _log(len(quoted_norm)))
        put("prev_type_frac", prev_type_frac)
        if is_cont:
            put("cont_x_last_error", last_error)
            put("cont_x_turn_frac", turn_frac)
            put("cont_x_n_previous_log", _log(len(previous)))
            put("cont_x_quoted_done_frac", quoted_done_frac)
            put("cont_x_all_quoted_done", bool(quoted_norm) and done_quoted == len(quoted_norm))
            put("cont_x_prev_type_frac", prev_type_frac)
            put("cont_x_turns_left_log", _log(left))
        rows.append(f)
    return rows


def _near(instr_tokens: list[str], text_tokens: list[str], el_content: set[str]) -> float:
    """Share of the element's label words found within a few tokens of ``text`` in the
    instruction: which field a quoted value belongs to (``"alice" as the username``)."""
    if not text_tokens or not el_content:
        return 0.0
    k = len(text_tokens)
    best = 0.0
    for s in range(len(instr_tokens) - k + 1):
        if instr_tokens[s:s + k] == text_tokens:
            window = set(instr_tokens[max(0, s - _WINDOW):s]) | set(
                instr_tokens[s + k:s + k + _WINDOW])
            best = max(best, len(el_content & window) / len(el_content))
    return best


def features(point: dict[str, Any], choice: dict[str, Any]) -> list[float]:
    """The feature vector of one ``choice`` of ``point`` (see :data:`FEATURE_NAMES`).

    ``choice`` is one of ``point["choices"]`` (matched by identity, else by
    equality); a choice that is not in the point is scored as an extra last choice.
    Scoring a whole point? :func:`point_features` computes every row at once.
    """
    raw = _dict(point).get("choices")
    choices = list(raw) if isinstance(raw, list) else []
    idx = next((i for i, c in enumerate(choices) if c is choice), None)
    if idx is None:
        idx = next((i for i, c in enumerate(choices) if c == choice), None)
    if idx is None:
        choices.append(choice)
        idx = len(choices) - 1
    return point_features({**_dict(point), "choices": choices})[idx]


# -- the text view ------------------------------------------------------------------------
def context_text(point: dict[str, Any], max_previous: int = 8) -> str:
    """The state as the ``lm`` decision model reads it, ending where a choice's label goes.

    The earlier actions come first and the instruction last, so that cutting a long
    text from the left (to fit the model) drops the oldest actions before the goal.
    """
    point = _dict(point)
    context = _dict(point.get("context"))
    previous = _previous(context)[-max_previous:] if max_previous > 0 else []
    lines = [f"done: {p}" for p in previous]
    if context.get("last_error") is True:
        lines.append("the last action failed")
    lines.append(f"goal: {_str(context.get('instruction')).strip()}")
    lines.append(f"{_str(point.get('type')) or 'decision'}:")
    return "\n".join(lines) + "\n"


def choice_text(point: dict[str, Any], choice: dict[str, Any]) -> str:
    """What an LM classifier reads for ``choice``: :func:`context_text` + the choice label."""
    return context_text(point) + label_text(choice)


def label_text(choice: dict[str, Any]) -> str:
    """The choice's label (``continue`` for the choice that leaves the turn to the LLM)."""
    choice = _dict(choice)
    label = _str(choice.get("label")).strip()
    if not label:
        label = "continue" if choice.get("action") is None else "action"
    return label
