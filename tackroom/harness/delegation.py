"""The ``[delegation]`` slot: which of an agent's choices a decision model may take over.

A harness declares its *decision points*, in the order they are asked::

    [delegation]
    points = ["submit", "click", "type"]
    model = "som-tools-d.decision"       # a fitted decision model (tackroom delegate fit)
    model_hash = "3f2a9c0d11be"           # pins that model: the harness hash covers it
    [delegation.thresholds]               # τ_c per point type; a type without one never acts
    click = 0.92
    submit = 0.8

At every turn each declared point builds its *choice set* from the observation
(:func:`decision_points`); the decision model gives p_D over it; if max p_D ≥ τ_c
the decision model acts, otherwise the next point is asked, and when none is
confident the LLM acts as usual. A harness with points and no model only records
the choice sets (with the scripted expert's choice where the task has an expert):
that is the training data of ``tackroom delegate fit``.

Point types:

- ``click``: which element to click (every element that can take a click);
- ``type``: which text to type into which field (the quoted strings of the
  instruction × the empty or wrong text fields);
- ``submit``: submit now or continue (a Submit/Login/OK-like button exists);
- ``command``: the shell's next command from the harness's short list
  (``commands = [...]``), or continue.

Every point's first choice is ``continue``: it never acts, and a confident
"continue" leaves the turn to the LLM. It is also the right answer at a point where
the expert does something no other choice names (types where only clicks are
offered), so a decision model learns when *not* to take over.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from tackroom.core.actions import Action, Click, Shell, Type, action_from_dict
from tackroom.core.errors import HarnessError
from tackroom.core.observation import Element, Observation

POINT_TYPES = ("click", "type", "submit", "command")

#: The keys a ``[delegation]`` slot may have.
SLOT_KEYS = {"points", "model", "model_hash", "thresholds", "max_takeovers", "commands",
             "record", "mode"}

#: ``threshold``: the decision model acts where max p_D ≥ τ_c (and its choice is not
#: ``continue``); ``always``: it acts at the first applicable point with its best action
#: choice, whatever its confidence (the benchmark's "decision model alone").
MODES = ("threshold", "always")

#: Tags that take a click whatever their text (MiniWoB++ and the toy suite flatten inputs
#: to ``input_<type>``).
_CLICKABLE = {"button", "a", "label", "option", "select", "textarea", "li", "summary", "td",
              "span", "svg", "circle", "rect", "polygon", "canvas"}
_TEXT_INPUTS = {"input_text", "input_password", "input_email", "input_search", "input_tel",
                "input_url", "input_number", "textarea", "input"}
_SUBMIT_WORDS = re.compile(r"^\s*(submit|login|log in|sign in|ok|done|search|send|next)\s*$",
                           re.IGNORECASE)
_QUOTED = re.compile(r'"([^"]+)"')


def check_delegation(raw: Any, where: str) -> dict[str, Any]:
    """Validate a ``[delegation]`` table; returns it with defaults filled in."""
    w = f"{where} [delegation]"
    if not isinstance(raw, dict):
        raise HarnessError("[delegation] must be a table", w,
                           'e.g. [delegation] points = ["click"]')
    bad = set(raw) - SLOT_KEYS
    if bad:
        raise HarnessError(f"unknown key(s) {sorted(bad)} in [delegation]", w,
                           f"allowed: {', '.join(sorted(SLOT_KEYS))}")
    points = raw.get("points")
    if not isinstance(points, list) or not points:
        raise HarnessError("[delegation] needs points: the decision point types, in the order "
                           "they are asked", f"{w}.points",
                           f"e.g. points = [\"click\"]; types: {', '.join(POINT_TYPES)}")
    for p in points:
        if p not in POINT_TYPES:
            raise HarnessError(f"unknown decision point type {p!r}", f"{w}.points",
                               f"allowed: {', '.join(POINT_TYPES)}")
    if len(set(points)) != len(points):
        raise HarnessError("a decision point type is listed twice", f"{w}.points",
                           "name each type once")
    out: dict[str, Any] = {"points": list(points)}
    model = raw.get("model")
    if model is not None:
        if not isinstance(model, str) or not model.strip():
            raise HarnessError("model must be the path of a decision model directory",
                               f"{w}.model", "write one with `tackroom delegate fit`")
        digest = raw.get("model_hash")
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{12}", digest):
            raise HarnessError("model_hash must be the model's 12-hex content hash",
                               f"{w}.model_hash",
                               "`tackroom delegate fit` writes it; or run "
                               "`tackroom delegate hash DIR`")
        out["model"], out["model_hash"] = model, digest
    elif "model_hash" in raw:
        raise HarnessError("model_hash without a model", f"{w}.model_hash",
                           "name the decision model with model = \"DIR\"")
    thresholds = raw.get("thresholds", {})
    if not isinstance(thresholds, dict):
        raise HarnessError("thresholds must be a table of point type = τ", f"{w}.thresholds",
                           "e.g. [delegation.thresholds] click = 0.9")
    for key, tau in thresholds.items():
        if key not in points:
            raise HarnessError(f"a threshold for {key!r}, which is not a declared point",
                               f"{w}.thresholds", f"declared: {', '.join(points)}")
        if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not math.isfinite(tau) \
                or not 0.0 <= tau <= 1.0:
            raise HarnessError(f"threshold {key} = {tau!r} must be a number from 0 to 1",
                               f"{w}.thresholds.{key}",
                               "0 = the decision model always acts; leave a type out to "
                               "never delegate it")
    if thresholds and model is None:
        raise HarnessError("thresholds without a decision model", f"{w}.thresholds",
                           "name the model with model = \"DIR\" (tackroom delegate fit)")
    out["thresholds"] = {k: float(v) for k, v in thresholds.items()}
    takeovers = raw.get("max_takeovers", 0)
    if isinstance(takeovers, bool) or not isinstance(takeovers, int) or takeovers < 0:
        raise HarnessError(f"max_takeovers = {takeovers!r} must be a whole number ≥ 0",
                           f"{w}.max_takeovers", "0 = no limit; 1 = one decision per episode")
    out["max_takeovers"] = takeovers
    commands = raw.get("commands", [])
    if not isinstance(commands, list) or not all(isinstance(c, str) and c.strip()
                                                  for c in commands):
        raise HarnessError("commands must be an array of shell commands", f"{w}.commands",
                           'e.g. commands = ["ls", "make test"]')
    if "command" in points and not commands:
        raise HarnessError("the command point needs a short list of commands",
                           f"{w}.commands", 'e.g. commands = ["ls", "cat README.md"]')
    if commands:
        out["commands"] = list(commands)
    mode = raw.get("mode", "threshold")
    if mode not in MODES:
        raise HarnessError(f"unknown delegation mode {mode!r}", f"{w}.mode",
                           f"allowed: {', '.join(MODES)}")
    if mode == "always" and model is None:
        raise HarnessError("mode = \"always\" needs a decision model", f"{w}.mode",
                           "name the model with model = \"DIR\" (tackroom delegate fit)")
    out["mode"] = mode
    record = raw.get("record", True)
    if not isinstance(record, bool):
        raise HarnessError("record must be true or false", f"{w}.record")
    out["record"] = record
    return out


# -- decision points ----------------------------------------------------------------------
def decision_points(obs: Observation, slot: dict[str, Any], context: dict[str, Any]
                    ) -> list[dict[str, Any]]:
    """The declared points that apply to ``obs``, each with its choice set (JSON-able).

    ``context`` is the state a decision model sees beside the choices (instruction,
    turn, turns left, previous action labels, last error, element count). A point
    type with no choices here (no text fields for ``type``) is left out.
    """
    out = []
    for kind in slot["points"]:
        choices = _CHOICES[kind](obs, slot)
        if choices and any(c["action"] is not None for c in choices):
            out.append({"type": kind, "context": dict(context), "choices": choices})
    return out


def choice_action(choice: dict[str, Any]) -> Action | None:
    """The environment action of a recorded choice (``None``: continue)."""
    a = choice.get("action")
    if a is None:
        return None
    return action_from_dict(a)


def action_label(action: dict[str, Any], obs: Observation | None = None) -> str:
    """A short human-readable label of an action dict, as choices and ``previous`` name them."""
    kind = action.get("kind")
    if kind == "click":
        el = obs.element(action["ref"]) if obs is not None else None
        return f"click [{action['ref']}]" + (f" {_describe(el, obs)}" if el else "")
    if kind == "type":
        return f"type {action.get('text', '')!r} into [{action.get('ref')}]"
    if kind == "shell":
        return f"run {action.get('cmd', '')!r}"
    return kind or "action"


def match_choice(point: dict[str, Any], actions: Sequence[dict[str, Any]]) -> int | None:
    """The index of the choice that ``actions`` (a turn's first action) took, if any.

    A ``continue`` choice matches any action that no other choice names.
    """
    if not actions:
        return None
    first = _key(actions[0])
    cont = None
    for i, c in enumerate(point["choices"]):
        if c["action"] is None:
            cont = i
        elif _key(c["action"]) == first:
            return i
    return cont


def _key(action: dict[str, Any]) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in action.items()))


def _el(el: Element, obs: Observation) -> dict[str, Any]:
    d = el.to_dict()
    d.pop("parent", None)
    if not d["text"]:  # an input or radio is named by its label, as a person reads the page
        d["text"] = _label_for(el, obs)
    return d


def _label_for(el: Element, obs: Observation) -> str:
    for other in obs.elements:
        if other.parent == el.parent and other.tag == "label" and other.text:
            return other.text
    return ""


def _describe(el: Element, obs: Observation | None) -> str:
    text = el.text or (_label_for(el, obs) if obs is not None else "")
    return f"{el.tag} {text[:40]!r}" if text else el.tag


_CONTINUE: dict[str, Any] = {"label": "continue", "action": None, "el": None, "text": None}


def _clicks(obs: Observation, slot: dict[str, Any]) -> list[dict[str, Any]]:
    out = [dict(_CONTINUE)]
    instruction = obs.instruction.strip()
    parents = {el.parent for el in obs.elements}
    for el in obs.elements:
        if el.tag in ("body", "html") or (el.text.strip() == instruction and instruction):
            continue
        leaf = el.ref not in parents
        if el.tag in _CLICKABLE or el.tag.startswith("input") or (leaf and el.text.strip()):
            action = Click(el.ref).to_dict()
            out.append({"label": action_label(action, obs), "action": action,
                        "el": _el(el, obs), "text": None})
    return out


def _types(obs: Observation, slot: dict[str, Any]) -> list[dict[str, Any]]:
    wanted = list(dict.fromkeys(_QUOTED.findall(obs.instruction)))
    out = [dict(_CONTINUE)]
    for el in obs.elements:
        if el.tag not in _TEXT_INPUTS:
            continue
        value = el.value if isinstance(el.value, str) else ""
        for text in wanted:
            if value == text:
                continue
            action = Type(el.ref, text).to_dict()
            out.append({"label": f"type {text!r} into [{el.ref}] {_describe(el, obs)}",
                        "action": action, "el": _el(el, obs), "text": text})
    return out


def _submits(obs: Observation, slot: dict[str, Any]) -> list[dict[str, Any]]:
    buttons = [el for el in obs.elements if el.tag in ("button", "input_submit")
               and _SUBMIT_WORDS.match(el.text or "")]
    if not buttons:
        return []
    out = [dict(_CONTINUE)]
    for el in buttons:
        action = Click(el.ref).to_dict()
        out.append({"label": f"submit: {action_label(action, obs)}", "action": action,
                    "el": _el(el, obs), "text": None})
    return out


def _commands(obs: Observation, slot: dict[str, Any]) -> list[dict[str, Any]]:
    out = [dict(_CONTINUE)]
    for cmd in slot.get("commands", []):
        action = Shell(cmd).to_dict()
        out.append({"label": f"run {cmd!r}", "action": action, "el": None, "text": cmd})
    return out


_CHOICES = {"click": _clicks, "type": _types, "submit": _submits, "command": _commands}
