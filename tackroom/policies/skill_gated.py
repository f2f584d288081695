"""``skill-expert``: a scripted agent that can only do what its harness's skills tell it.

A stand-in for a model that reads skills, for optimiser tests and examples
where a real model is too small to read them: its success depends on the
skill text, and on nothing else the optimiser could change. Each turn it asks
the suite's expert for the next actions, and takes them only if a rule of a
skill in the system prompt *covers* every one of them; otherwise it answers
that no skill says what to do (a parse error under every harness).

A rule (one line of a skill's text) covers an action when it names the
action's verb and what it acts on: for ``click`` the word "click" (or
"press"/"select"/"choose") and the target element's kind as the page shows it
(button, link, checkbox, radio, tab, option, text box …); for ``type`` /
``type_text`` the word "type" (or "enter"/"fill") and "field"/"box"/"input";
for ``press`` a key word ("key", "enter", "press"). Words match whole, case
apart. So "Click the button whose label the task names." lets it solve button
tasks and nothing else; a redundant rule never changes what it does — exactly
what the audit's read graph should find unused. Under tool-call harnesses its
reply text names the rule it followed (``Following 'skill': rule``), which is
what the read graph's quote attribution links; under text-command harnesses the
reply is the bare command. It has no tokenizer: ``prompt_tokens`` is the number
of words of the messages it was sent (an approximation, so that the cost of a
rule in input "tokens" is still visible).

It is documented as scripted everywhere it is used: never a model result.
"""

from __future__ import annotations

import re
from typing import Any

from tackroom.core.policy import PolicyRequest, PolicyResponse
from tackroom.policies.expert import ExpertPolicy

__all__ = ["SkillGatedPolicy", "skill_rules", "covering_rule"]

_SKILL = re.compile(r"^## Skill: (?P<name>.+?)\n(?P<text>.*?)(?=\n## Skill: |\Z)", re.M | re.S)
_VERBS = {
    "click": {"click", "press", "select", "choose", "tick", "check", "open"},
    "click_at": {"click", "press", "select", "choose"},
    "type": {"type", "enter", "fill", "write"},
    "type_text": {"type", "enter", "fill", "write"},
    "press": {"press", "key", "hit"},
}
_FIELD_WORDS = {"field", "box", "input", "textbox", "password"}
# Element tags as the toy and MiniWoB pages name them → the words a rule may use.
_TARGETS = {
    "button": {"button", "buttons"}, "a": {"link", "links"},
    "input_checkbox": {"checkbox", "checkboxes"}, "input_radio": {"radio", "option", "options"},
    "input_text": _FIELD_WORDS, "input_password": _FIELD_WORDS, "textarea": _FIELD_WORDS,
    "select": {"list", "dropdown", "option", "options"}, "option": {"option", "options"},
    "tab": {"tab", "tabs"}, "li": {"tab", "tabs", "item", "items"},
    "span": {"text", "word", "words"}, "label": {"label", "option", "options"},
}
_WORD = re.compile(r"[a-z]+")


def skill_rules(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """``(skill name, rule line)`` of every skill in the system message."""
    system = next((m.get("content") for m in messages if m.get("role") == "system"), "")
    out = []
    for m in _SKILL.finditer(system if isinstance(system, str) else ""):
        for line in m.group("text").splitlines():
            line = line.strip().lstrip("-*• ").strip()
            if line:
                out.append((m.group("name").strip(), line))
    return out


def covering_rule(action: Any, view: Any, rules: list[tuple[str, str]]) -> tuple[str, str] | None:
    """The first rule that covers ``action`` (see the module docstring), or ``None``."""
    verbs = _VERBS.get(action.kind)
    if verbs is None:
        return None
    if action.kind in ("click", "click_at"):
        ref = getattr(action, "ref", None)
        tag = next((e.tag for e in view.observation.elements if e.ref == ref), "")
        targets = _TARGETS.get(tag, {tag})
    elif action.kind in ("type", "type_text"):
        targets = _FIELD_WORDS
    else:
        targets = {"key", "enter", "return", "keys"}
    for name, rule in rules:
        words = set(_WORD.findall(rule.lower()))
        if words & verbs and words & targets:
            return name, rule
    return None


def _words(messages: list[dict[str, Any]]) -> int:
    return sum(len(str(m.get("content") or "").split()) for m in messages)


class SkillGatedPolicy(ExpertPolicy):
    """The suite's expert, gated by the harness's skills; ``id = "skill-expert"``."""

    id = "skill-expert"

    def refuse(self, request: PolicyRequest, actions: list[Any]) -> PolicyResponse | None:
        rules = skill_rules(request.messages)
        if all(covering_rule(a, request.view, rules) is not None for a in actions):
            return None
        return PolicyResponse(text="(no skill says what to do here)",
                              prompt_tokens=_words(request.messages))

    def finish(self, request: PolicyRequest, actions: list[Any],
               response: PolicyResponse) -> PolicyResponse:
        # No tokenizer here: count the prompt's words, so the audit's input cost of an
        # added rule is visible (approximate, and documented as such).
        response.prompt_tokens = response.prompt_tokens or _words(request.messages)
        if response.tool_calls and not response.text:
            # Beside tool calls the text is free: say which rule was followed, as a model
            # that reads skills would, so the audit's read graph can link turn and rule.
            rules = skill_rules(request.messages)
            # refuse() let these actions through, so each has a covering rule
            covering = (covering_rule(a, request.view, rules) for a in actions)
            followed = dict.fromkeys(c for c in covering if c is not None)
            response.text = " ".join(f"Following {name!r}: {rule}"
                                     for name, rule in followed if name)
        return response
