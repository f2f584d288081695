"""Candidates are harness edits: slot-level changes of a harness, and the grammar for them.

An :class:`Edit` is one operation on a resolved :class:`~tackroom.harness.spec.HarnessSpec`:

* ``set`` a slot (``prompt.system``, ``observation.options.files``, ``loop.history`` …; the
  settable ones are :data:`SETTABLE`, plus any ``observation.options.<key>``);
* ``add_skill`` / ``delete_skill`` / ``replace_skill`` a whole ``[[skills]]`` entry;
* ``add_rule`` / ``delete_rule`` / ``replace_rule``: one rule of a skill, where a rule is one
  non-blank line of the skill's text (a bullet, usually), numbered from 0.

:func:`apply_edits` checks each edit against the harness it changes (an unknown slot, a
missing skill, a rule index out of range, a value the spec refuses) and raises
:class:`EditError` naming the edit, the slot and what to do. :func:`make_candidate` turns
edits into a :class:`Candidate`: a new harness file that ``extends`` its parent and writes
only the slots that changed, with its own hash, its parent's name and hash and the edits
recorded. :func:`parse_edits` reads the JSON edit list a proposer model answers with
(:data:`EDIT_GRAMMAR` is how the proposer is told to write it).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from tackroom.core.errors import HarnessError
from tackroom.harness.spec import AgentHarness, HarnessSpec, Skill, load_harness, parse_harness


class EditError(HarnessError):
    """An edit is malformed or does not apply to its parent harness (a :class:`HarnessError`)."""


#: The slots a ``set`` edit may change, besides ``observation.options.<key>``. Not the
#: renderer, the action interface or the parser: those make a different kind of harness
#: (the axes harnesses are compared along), not a better version of this one. Parser
#: leniency is the loop's ``on_malformed`` / ``max_consecutive_errors``; tool descriptions
#: are ``actions.descriptions.<action>`` (the spec's ``[actions.descriptions]``).
SETTABLE: tuple[str, ...] = (
    "prompt.system", "prompt.first_turn", "prompt.next_turn",
    "observation.max_chars",
    "loop.actions_per_turn", "loop.history", "loop.on_malformed", "loop.on_action_error",
    "loop.max_consecutive_errors", "loop.reflect_prompt",
    "budget.turns", "budget.tokens", "budget.wall_seconds", "budget.state_to_model",
)
OPTIONS_PREFIX = "observation.options."
DESCRIPTIONS_PREFIX = "actions.descriptions."

#: op -> the fields it needs (besides ``op``) and those it may have.
OPS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "set": (("slot", "value"), ("why",)),
    "add_skill": (("skill", "text"), ("why",)),
    "delete_skill": (("skill",), ("why",)),
    "replace_skill": (("skill", "text"), ("why",)),
    "add_rule": (("skill", "text"), ("index", "why")),
    "delete_rule": (("skill", "index"), ("why",)),
    "replace_rule": (("skill", "index", "text"), ("why",)),
}
#: The longest text one edit may carry (a prompt, a skill): a proposer cannot bloat the
#: harness by tens of kilobytes in one step.
MAX_TEXT = 8000
MAX_SKILL_NAME = 80

EDIT_GRAMMAR = """\
Answer with a JSON array of edit objects (you may put it in a ```json block). Each object
has an "op" and the fields that op needs; "why" (one sentence) is optional on every op.

  {"op": "add_rule", "skill": NAME, "text": RULE}            append a rule to a skill
  {"op": "add_rule", "skill": NAME, "text": RULE, "index": I} insert it before rule I
  {"op": "replace_rule", "skill": NAME, "index": I, "text": RULE}
  {"op": "delete_rule", "skill": NAME, "index": I}
  {"op": "add_skill", "skill": NAME, "text": TEXT}           a new skill (NAME must be new)
  {"op": "replace_skill", "skill": NAME, "text": TEXT}       rewrite a whole skill
  {"op": "delete_skill", "skill": NAME}
  {"op": "set", "slot": SLOT, "value": VALUE}                change one harness setting

A rule is one line of a skill's text; rules are numbered from 0 as shown in [i] above.
A skill's TEXT may have several lines, one rule per line ("- " bullets are customary).
SLOT is one of: prompt.system, prompt.first_turn, prompt.next_turn (keep their {placeholders}),
observation.max_chars, observation.options.KEY, actions.descriptions.ACTION (the description
of the tool ACTION the model is shown, e.g. actions.descriptions.click), loop.actions_per_turn,
loop.history,
loop.on_malformed ("feedback" or "end"), loop.on_action_error ("feedback", "reflect" or
"end"), loop.max_consecutive_errors, loop.reflect_prompt, budget.turns, budget.tokens,
budget.wall_seconds, budget.state_to_model.
Write general procedural advice that helps on any task of this kind: never name particular
tasks, seeds, files of the tasks or their answers (such edits are rejected). Give 1 to 3
edits; an empty array [] means no change."""


@dataclass(frozen=True)
class Edit:
    """One operation on a harness. Which fields an op uses is :data:`OPS`; ``why`` is the
    proposer's reason, recorded, never applied."""

    op: str
    slot: str | None = None
    value: Any = None
    skill: str | None = None
    text: str | None = None
    index: int | None = None
    why: str = ""

    def __post_init__(self) -> None:
        _check_shape(self, "edit")

    def to_dict(self) -> dict[str, Any]:
        """The edit as the grammar writes it: ``op`` and the fields it has."""
        d: dict[str, Any] = {"op": self.op}
        for key in ("slot", "value", "skill", "index", "text"):
            v = getattr(self, key)
            if v is not None:
                d[key] = copy.deepcopy(v)
        if self.why:
            d["why"] = self.why
        return d

    @classmethod
    def from_dict(cls, d: Any, where: str = "edit") -> Edit:
        """Read one edit object of the grammar; :class:`EditError` for anything else."""
        if not isinstance(d, dict):
            raise EditError(f"an edit must be a JSON object, got {_show(d)}", where,
                            'write {"op": ..., ...} (see the edit grammar)')
        d = dict(d)
        op = d.pop("op", None)
        if not isinstance(op, str) or op not in OPS:
            raise EditError(f"unknown op {_show(op)}", where, f"ops: {', '.join(OPS)}")
        if "skill" not in d and "name" in d and op != "set":
            d["skill"] = d.pop("name")  # models often say "name" for the skill's name
        needed, optional = OPS[op]
        bad = set(d) - set(needed) - set(optional)
        if bad:
            raise EditError(f"unknown field(s) {sorted(bad)} for op {op!r}", where,
                            f"{op} takes: {', '.join(needed + optional)}")
        missing = [k for k in needed if k not in d]
        if missing:
            raise EditError(f"op {op!r} needs {', '.join(missing)}", where,
                            f"{op} takes: {', '.join(needed + optional)}")
        why = d.pop("why", "")
        if not isinstance(why, str):
            raise EditError("why must be a string", where)
        _check_fields(op, d, where)
        try:
            return cls(op=op, why=why, **d)
        except EditError as e:  # say which object of the answer it was
            raise EditError(e.what, f"{where} ({op})", e.fix) from None


def _check_fields(op: str, d: dict[str, Any], where: str) -> None:
    for key in ("slot", "skill", "text"):
        if key in d and not isinstance(d[key], str):
            raise EditError(f"{key} must be a string, got {_show(d[key])}", f"{where} ({op})")
    if "index" in d and (isinstance(d["index"], bool) or not isinstance(d["index"], int)):
        raise EditError(f"index must be an integer, got {_show(d['index'])}", f"{where} ({op})",
                        "rules are numbered from 0")


def _check_shape(e: Edit, where: str) -> None:
    """What an op needs is there and of the right kind (not yet: whether it applies)."""
    if e.op not in OPS:
        raise EditError(f"unknown op {e.op!r}", where, f"ops: {', '.join(OPS)}")
    needed, optional = OPS[e.op]
    for key in ("slot", "value", "skill", "text", "index"):
        present = getattr(e, key) is not None
        if key in needed and not present:
            raise EditError(f"op {e.op!r} needs {key}", where)
        if present and key not in needed and key not in optional:
            raise EditError(f"op {e.op!r} takes no {key}", where,
                            f"{e.op} takes: {', '.join(needed + optional)}")
    if e.index is not None and (isinstance(e.index, bool) or not isinstance(e.index, int)):
        raise EditError(f"index must be an integer, got {e.index!r}", where)
    for key in ("text", "skill", "why", "slot"):
        v = getattr(e, key)
        if v is not None and not isinstance(v, str):
            raise EditError(f"{key} must be a string, got {_show(v)}", where)
        if isinstance(v, str):
            _check_utf8(v, where)
    if e.text is not None and len(e.text) > MAX_TEXT:
        raise EditError(f"text of {len(e.text)} characters is too long", where,
                        f"keep one edit's text under {MAX_TEXT} characters")
    if isinstance(e.value, str) and len(e.value) > MAX_TEXT:
        raise EditError(f"value of {len(e.value)} characters is too long", where,
                        f"keep one edit's text under {MAX_TEXT} characters")


def _check_utf8(v: str, where: str) -> None:
    """A harness file is UTF-8: a lone surrogate (from a JSON ``\\ud800``) cannot be written."""
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        raise EditError("text that is not valid Unicode (a lone surrogate)", where,
                        "write plain text") from None


def _show(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


# -- applying edits --------------------------------------------------------------------------


def _raw(spec: HarnessSpec) -> dict[str, Any]:
    """The spec as a resolved harness dict (what :func:`parse_harness` takes)."""
    raw = copy.deepcopy(spec.content())
    raw["name"], raw["description"] = spec.name, spec.description
    return raw


def _rule_lines(text: str) -> list[int]:
    """Positions, in ``text.splitlines()``, of the skill's rules (its non-blank lines)."""
    return [i for i, line in enumerate(text.splitlines()) if line.strip()]


def rules(text: str) -> list[str]:
    """A skill's rules: its non-blank lines, numbered from 0 by their position here."""
    lines = text.splitlines()
    return [lines[i] for i in _rule_lines(text)]


def _as_rule(text: str, lines: list[str]) -> str:
    """One rule is one line: inner newlines become spaces, and it gets the bullet its
    neighbours use when it has none."""
    one = " ".join(text.split())
    bullets = [ln.lstrip()[:2] for ln in lines if ln.lstrip()[:2] in ("- ", "* ")]
    if bullets and not re.match(r"([-*•]|\d+[.)])\s", one):
        one = bullets[0] + one
    return one


def _skill_index(skills: list[dict[str, str]], name: str, where: str) -> int:
    for i, s in enumerate(skills):
        if s["name"] == name:
            return i
    have = ", ".join(repr(s["name"]) for s in skills) or "none"
    raise EditError(f"no skill named {name!r}", where,
                    f"skills of this harness: {have}; add one with add_skill")


def _check_skill_name(name: str, where: str) -> None:
    if not name.strip() or "\n" in name or len(name) > MAX_SKILL_NAME:
        raise EditError(f"bad skill name {_show(name)}", where,
                        f"one line of 1 to {MAX_SKILL_NAME} characters")


def _rule_at(text: str, index: int, where: str, inserting: bool = False) -> int:
    """The line position of rule ``index`` (``inserting``: ``index`` may be one past the end)."""
    positions = _rule_lines(text)
    top = len(positions) if inserting else len(positions) - 1
    if not 0 <= index <= top:
        raise EditError(f"rule index {index} is out of range", where,
                        f"this skill has {len(positions)} rule(s), numbered from 0"
                        if positions else "this skill has no rules; use add_rule")
    return positions[index] if index < len(positions) else len(text.splitlines())


def _apply_one(raw: dict[str, Any], e: Edit, where: str) -> None:
    skills: list[dict[str, str]] = raw["skills"]
    if e.op == "set":
        _set(raw, str(e.slot), e.value, where)
    elif e.op == "add_skill":
        name = str(e.skill)
        _check_skill_name(name, where)
        if any(s["name"] == name for s in skills):
            raise EditError(f"there is already a skill named {name!r}", where,
                            "use replace_skill to rewrite it, or pick a new name")
        if not str(e.text).strip():
            raise EditError("a skill needs some text", where)
        skills.append({"name": name, "text": str(e.text)})
    elif e.op == "delete_skill":
        del skills[_skill_index(skills, str(e.skill), where)]
    elif e.op == "replace_skill":
        i = _skill_index(skills, str(e.skill), where)
        if not str(e.text).strip():
            raise EditError("a skill needs some text", where, "use delete_skill to remove it")
        skills[i] = {"name": skills[i]["name"], "text": str(e.text)}
    else:  # the rule ops
        s = skills[_skill_index(skills, str(e.skill), where)]
        lines = s["text"].splitlines()
        if e.op == "add_rule":
            rule = _as_rule(str(e.text), lines)
            if not rule.strip():
                raise EditError("a rule needs some text", where)
            at = len(lines) if e.index is None else _rule_at(s["text"], e.index, where, True)
            lines.insert(at, rule)
        elif e.op == "replace_rule":
            rule = _as_rule(str(e.text), lines)
            if not rule.strip():
                raise EditError("a rule needs some text", where, "use delete_rule to remove it")
            lines[_rule_at(s["text"], int(e.index or 0), where)] = rule
        else:  # delete_rule
            del lines[_rule_at(s["text"], int(e.index or 0), where)]
            if not any(ln.strip() for ln in lines):
                raise EditError("that would leave the skill empty", where,
                                "use delete_skill to remove the skill")
        s["text"] = "\n".join(lines)


def _set(raw: dict[str, Any], slot: str, value: Any, where: str) -> None:
    if slot.startswith(DESCRIPTIONS_PREFIX):  # the spec checks the action name and the text
        _check_value(value, where)
        raw["actions"].setdefault("descriptions", {})[slot[len(DESCRIPTIONS_PREFIX):]] = value
        return
    if slot.startswith(OPTIONS_PREFIX):
        key = slot[len(OPTIONS_PREFIX):]
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", key):
            raise EditError(f"bad option name {key!r}", where, "letters, digits, '-' and '_'")
        _check_value(value, where)
        raw["observation"]["options"][key] = copy.deepcopy(value)
        return
    if slot not in SETTABLE:
        raise EditError(f"unknown or fixed slot {slot!r}", where,
                        f"settable: {', '.join(SETTABLE)}, {OPTIONS_PREFIX}KEY, "
                        f"{DESCRIPTIONS_PREFIX}ACTION")
    table, key = slot.split(".")
    _check_value(value, where)
    raw[table][key] = copy.deepcopy(value)


def _check_value(value: Any, where: str) -> None:
    """TOML cannot write ``null``; the spec checks the rest (kinds, ranges, placeholders)."""
    if value is None:
        raise EditError("null is not a value", where, "give a string, number or true/false")
    if isinstance(value, str):
        _check_utf8(value, where)
    if isinstance(value, dict):
        for v in value.values():
            _check_value(v, where)
    elif isinstance(value, list):
        for v in value:
            _check_value(v, where)


def _target(e: Edit) -> str:
    if e.op == "set":
        return f"{e.op} {e.slot}"
    return f"{e.op} {e.skill!r}" + (f" [{e.index}]" if e.index is not None else "")


def apply_edits(parent: HarnessSpec, edits: Iterable[Edit], name: str | None = None,
                description: str | None = None) -> HarnessSpec:
    """The harness ``parent`` becomes after ``edits``, in order, validated as a harness file is.

    Raises :class:`EditError` at the first edit that does not apply, naming it (``edit #2
    (delete_rule 'forms' [7])``), what is wrong and what to do.
    """
    if isinstance(parent, AgentHarness):
        raise EditError("an agent-CLI harness cannot be edited", parent.name,
                        "agent CLIs bring their own prompt, tools and loop; edit a loop harness")
    raw = _raw(parent)
    if name is not None:
        raw["name"] = name
    if description is not None:
        raw["description"] = description
    spec = parse_harness(raw, source=f"<{raw['name']}>")
    for i, e in enumerate(edits):
        where = f"edit #{i + 1} ({_target(e)})"
        _check_shape(e, where)
        _apply_one(raw, e, where)
        try:
            spec = parse_harness(copy.deepcopy(raw), source=where)
        except HarnessError as err:
            raise EditError(err.what, err.where, err.fix) from None
    return spec


# -- candidates ------------------------------------------------------------------------------


@dataclass
class Candidate:
    """A harness made by editing another: what the optimiser proposes, evaluates and records.

    ``toml`` is the candidate's harness file: ``extends = parent_ref`` and only the slots that
    differ from the parent (skills, when they differ, as the whole ``[[skills]]`` list, since
    ``extends`` replaces lists). Written next to anything, it loads to ``spec``, hash and all.
    """

    name: str
    parent: str
    parent_hash: str
    parent_ref: str
    edits: tuple[Edit, ...]
    toml: str
    spec: HarnessSpec
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def hash(self) -> str:
        return self.spec.hash

    @property
    def ident(self) -> str:
        return self.spec.ident

    def to_dict(self) -> dict[str, Any]:
        """What a record of the candidate holds (the TOML text reproduces the spec)."""
        return {"name": self.name, "hash": self.hash, "parent": self.parent,
                "parent_hash": self.parent_hash, "parent_ref": self.parent_ref,
                "edits": [e.to_dict() for e in self.edits], "toml": self.toml,
                "meta": copy.deepcopy(self.meta)}

    def write(self, directory: str | Path) -> Path:
        """Write ``<directory>/<name>.toml`` and check it loads to this candidate's hash."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"{self.name}.toml"
        path.write_text(self.toml, encoding="utf-8")
        loaded = load_harness(str(path))
        if loaded.hash != self.hash:
            raise EditError(
                f"the written candidate loads with hash {loaded.hash}, not {self.hash}",
                str(path), f"its extends = {self.parent_ref!r} must name the harness the edits "
                f"were made on ({self.parent}@{self.parent_hash})")
        return path


def make_candidate(parent_ref: str, parent: HarnessSpec, edits: Sequence[Edit], name: str,
                   description: str | None = None) -> Candidate:
    """The candidate harness ``name``: ``parent`` (found as ``parent_ref``) with ``edits``.

    ``parent_ref`` is what the file's ``extends`` says: a harness name on the search path, or
    a path (made absolute here, so the candidate loads from wherever it is written). Raises
    :class:`EditError` when an edit does not apply, or when the edits change nothing.
    """
    if name in (parent.name, Path(parent_ref).stem):  # it would extend, or overwrite, itself
        raise EditError(f"a candidate cannot be named like its parent ({name!r})", name,
                        "give the candidate a name of its own")
    if Path(parent_ref).suffix == ".toml" and Path(parent_ref).is_file():
        parent_ref = str(Path(parent_ref).resolve())
    edits = tuple(edits)
    if description is None:
        description = f"{parent.name} with {len(edits)} optimiser edit(s)"
    spec = apply_edits(parent, edits, name=name, description=description)
    if spec.hash == parent.hash:
        raise EditError("the edits change nothing", name,
                        "propose edits that differ from the parent harness")
    toml = _child_toml(parent, spec, parent_ref, edits)
    spec = parse_harness(_raw(spec), source=f"<candidate {name}>")
    return Candidate(name=name, parent=parent.name, parent_hash=parent.hash,
                     parent_ref=parent_ref, edits=edits, toml=toml, spec=spec)


def _child_toml(parent: HarnessSpec, child: HarnessSpec, parent_ref: str,
                edits: Sequence[Edit]) -> str:
    out = [f"# Made by tackroom optimize from {parent.name}@{parent.hash} by {len(edits)} edit(s):"]
    out += [f"#   {json.dumps(e.to_dict(), ensure_ascii=True)}"[:200] for e in edits]
    out += [f"name = {_str(child.name)}", f"description = {_str(child.description)}",
            f"extends = {_str(parent_ref)}"]
    if child.skills != parent.skills and not child.skills:
        # A top-level key: written before any [table], or TOML would read it inside one.
        out.append("skills = []")
    for slot in ("prompt", "observation", "loop", "budget"):
        old, new = getattr(parent, slot), getattr(child, slot)
        keys = [k for k in new if k != "options" and new[k] != old.get(k)]
        if keys:
            out += ["", f"[{slot}]"] + [f"{k} = {_value(new[k])}" for k in keys]
        if slot == "observation":
            changed = {k: v for k, v in new["options"].items() if old["options"].get(k) != v}
            if changed:  # extends merges tables key by key: the changed keys are enough
                out += ["", "[observation.options]"]
                out += [f"{_key(k)} = {_value(v)}" for k, v in changed.items()]
    # ``[actions] descriptions`` is a table (HarnessSpec types ``actions`` loosely).
    old_d = cast(dict[str, Any], parent.actions.get("descriptions") or {})
    new_d = cast(dict[str, Any], child.actions.get("descriptions") or {})
    changed_d = {k: v for k, v in new_d.items() if old_d.get(k) != v}
    if changed_d:  # merged key by key too
        out += ["", "[actions.descriptions]"] + [f"{_key(k)} = {_value(v)}"
                                                 for k, v in changed_d.items()]
    if child.skills != parent.skills:  # extends replaces a list: write the child's in full
        for s in child.skills:
            out += ["", "[[skills]]", f"name = {_str(s.name)}", f"text = {_str(s.text)}"]
    return "\n".join(out) + "\n"


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _str(k)


def _str(s: str) -> str:
    """A TOML basic string (multi-line when ``s`` has newlines), exactly ``s`` when read."""
    def esc(c: str) -> str:
        if c == "\\":
            return "\\\\"
        if c == '"':
            return '\\"'
        if c == "\n" and multi:
            return "\n"
        if c == "\t":
            return "\\t"
        if ord(c) < 0x20 or c == "\x7f":
            return f"\\u{ord(c):04x}"
        return c

    multi = "\n" in s
    body = "".join(esc(c) for c in s)
    # The newline right after an opening """ is dropped by TOML: it only eases reading.
    return f'"""\n{body}"""' if multi else f'"{body}"'


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return _str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + " }"
    raise EditError(f"cannot write {v!r} in TOML", "candidate", "use JSON's kinds of value")


def describe_skills(skills: Iterable[Skill]) -> str:
    """The skills with their rules numbered, as a proposer sees them."""
    blocks = []
    for s in skills:
        lines = [f"skill {s.name!r}:"] + [f"  [{i}] {r.strip()}" for i, r in enumerate(rules(s.text))]
        blocks.append("\n".join(lines))
    return "\n".join(blocks) or "(no skills yet)"


# -- reading a proposer's answer -------------------------------------------------------------

#: How much of an answer is searched, and from how many brackets: a huge or bracket-heavy
#: answer costs at most this much parsing.
MAX_ANSWER = 100_000
MAX_STARTS = 200
_FENCE = re.compile(r"```[a-zA-Z]*\s*\n(.*?)```", re.S)


def parse_edits(text: str) -> list[Edit]:
    """The edits in a proposer's answer: a JSON array of edit objects (or ``{"edits": [...]}``),
    alone, in a fenced block, or among prose. :class:`EditError` (one line, never a
    traceback) when there is none or an object is not an edit of the grammar."""
    if not isinstance(text, str) or not text.strip():
        raise EditError("the answer is empty", "proposer answer",
                        "answer with a JSON array of edits")
    found = _find_json(text)
    if found is None:
        raise EditError("no JSON array of edits found", "proposer answer",
                        "answer with a JSON array of edit objects, e.g. "
                        '[{"op": "add_rule", "skill": "NAME", "text": "..."}]')
    if isinstance(found, dict):
        found = found["edits"]
    return [Edit.from_dict(d, f"proposer answer, edit #{i + 1}") for i, d in enumerate(found)]


def _find_json(text: str) -> list[Any] | dict[str, Any] | None:
    """The first JSON value in ``text`` that is a list of objects or ``{"edits": [...]}``:
    fenced blocks first, then the whole text, then from each ``[`` or ``{``."""
    decoder = json.JSONDecoder()
    text = text[:MAX_ANSWER]
    for piece in _FENCE.findall(text) + [text]:
        starts = [m.start() for m in re.finditer(r"[\[{]", piece)][:MAX_STARTS]
        for start in starts:
            try:
                value, _ = decoder.raw_decode(piece, start)
            except (ValueError, RecursionError):
                continue
            if isinstance(value, list) and all(isinstance(v, dict) for v in value):
                return value
            if isinstance(value, dict) and isinstance(value.get("edits"), list):
                return value
            # A lone edit object, unless it sits in an array that did not parse (a
            # trailing comma, say): taking its first element would drop the others silently.
            if isinstance(value, dict) and "op" in value and "[" not in piece[:start]:
                return [value]
    return None
