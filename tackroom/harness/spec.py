"""Harness specs: TOML files with named slots, ``extends``, validation and identity.

A harness file looks like::

    name = "som-tools-reflect"
    extends = "som-tools"          # inherit every slot, override some
    [loop]
    on_action_error = "reflect"

Slots: ``[prompt]`` (system prompt and turn templates), ``[observation]``
(renderer and its options), ``[actions]`` (interface and parser), ``[loop]``
(control logic), ``[budget]`` (turns, tokens, wall seconds) and
``[[skills]]`` (procedural text), ``[delegation]`` (choices a decision model may take
over: :mod:`tackroom.harness.delegation`); or ``[agent]``, a third-party agent CLI that is
the harness (:mod:`tackroom.harness.agent`). Everything is checked at load time: an
unknown slot or key, an unknown renderer, a value out of range raises
:class:`HarnessError` naming the file, the slot and what is allowed.

Identity is ``(name, hash)``: the hash covers the resolved content (after
``extends``), not the name, so two files with the same content share a hash.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import functools
import hashlib
import json
import math
import os
import string
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tackroom.core.errors import HarnessError
from tackroom.core.registry import get
from tackroom.harness.agent import check_agent
from tackroom.harness.delegation import check_delegation
from tackroom.harness.slots import check_slot, check_value, slot_defaults

BUILTIN_DIR = Path(__file__).parent / "harnesses"
#: Shipped agent harnesses (third-party CLIs; see tackroom.harness.agent).
AGENTS_DIR = Path(__file__).parent / "agents"
#: How many files an ``extends`` chain may span, the harness itself included.
MAX_EXTENDS = 64

DEFAULT_SYSTEM = (
    "You are an agent that operates a web page to complete a task. "
    "Each turn you see the page and act on it."
)

#: Defaults for every slot; a harness file overrides what it names. The typed keys' defaults
#: are their declarations in :mod:`tackroom.harness.slots` (with their docs and limits).
DEFAULTS: dict[str, Any] = {
    "prompt": {
        "system": DEFAULT_SYSTEM,
        "first_turn": "Task: {instruction}\n\nPage:\n{observation}{budget}",
        "next_turn": "{feedback}Page:\n{observation}{budget}",
    },
    "observation": {**slot_defaults("observation"), "options": {}},
    "actions": slot_defaults("actions"),
    "loop": slot_defaults("loop"),
    "budget": slot_defaults("budget"),
    "skills": [],
}

#: Keys a slot may have that have no default; left out of the spec (and its hash) when
#: absent or empty. ``[actions] descriptions``: the tools' descriptions, by action name,
#: replacing the interface's own wherever the model reads them (tool schemas, the action
#: format in the system prompt).
OPTIONAL: dict[str, set[str]] = {"actions": {"descriptions"}}

_TOP = {"name", "description", "extends", "version", "prompt", "observation", "actions",
        "loop", "budget", "skills", "agent", "delegation"}
_PLACEHOLDERS = {
    "first_turn": {"instruction", "observation", "budget"},
    "next_turn": {"feedback", "observation", "budget", "instruction"},
}


@dataclass(frozen=True)
class Skill:
    """A named piece of procedural text the harness shows the model."""

    name: str
    text: str


@dataclass(frozen=True)
class HarnessSpec:
    """A fully resolved, validated harness. Build with :func:`load_harness` or :func:`parse_harness`."""

    name: str
    description: str
    prompt: dict[str, str]
    observation: dict[str, Any]
    actions: dict[str, Any]
    loop: dict[str, Any]
    budget: dict[str, Any]
    skills: tuple[Skill, ...] = ()
    #: The decision points a decision model may take over (``None``: the LLM makes every
    #: choice); see harness.delegation.
    delegation: dict[str, Any] | None = None
    source: str = ""
    extends: tuple[str, ...] = field(default=(), compare=False)

    def content(self) -> dict[str, Any]:
        """The resolved slots (what the hash covers)."""
        content = {
            "prompt": self.prompt,
            "observation": self.observation,
            "actions": self.actions,
            "loop": self.loop,
            "budget": self.budget,
            "skills": [{"name": s.name, "text": s.text} for s in self.skills],
        }
        if self.delegation is not None:
            # The model is pinned by its content hash, not by where its files lie: the same
            # fitted model copied elsewhere is the same harness.
            content["delegation"] = {k: v for k, v in self.delegation.items() if k != "model"}
        return content

    @property
    def kind(self) -> str:
        """``"loop"``: tackroom's own turn loop (``"agent"`` for an :class:`AgentHarness`)."""
        return "loop"

    @functools.cached_property
    def hash(self) -> str:
        """Content hash of the resolved harness (12 hex digits)."""
        blob = json.dumps(self.content(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    @property
    def ident(self) -> str:
        """``name@hash``, how runs and reports name a harness."""
        return f"{self.name}@{self.hash}"

    def can_express(self, requires: frozenset[str]) -> bool:
        """Whether this harness can do everything a task requires."""
        return self.interface.can_express(requires)

    @property
    def interface(self) -> Any:
        """The action interface, with this harness's tool descriptions when it has some."""
        iface = get("interface", self.actions["interface"])
        described = self.actions.get("descriptions")
        if not described:
            return iface
        # A shallow copy with its own specs: the shared registry entry stays as it is.
        view = copy.copy(iface)
        view.specs = tuple(dataclasses.replace(sp, description=described.get(sp.name,
                                                                              sp.description))
                           for sp in iface.specs)
        return view

    @property
    def parser(self) -> Any:
        return get("parser", self.actions["parser"])

    @functools.cached_property
    def tools(self) -> list[dict[str, Any]] | None:
        """The tool schemas the model is sent (``None`` for text formats), built once.

        Every episode of the harness shares this list (a client may key its encoding
        on it): read it, never change it.
        """
        return self.parser.tools(self.interface)


@dataclass(frozen=True, kw_only=True)
class AgentHarness(HarnessSpec):
    """A harness that is a third-party agent CLI (an ``[agent]`` slot; see harness.agent).

    The CLI brings its own prompt, observations, tools and loop: the runner runs it
    (:mod:`tackroom.runner.agent`) instead of tackroom's turn loop. Ask
    ``isinstance(h, AgentHarness)``; a loop harness has no ``agent``.
    """

    #: The checked ``[agent]`` slot: the CLI, its pinned install, what it can do.
    agent: dict[str, Any]

    def content(self) -> dict[str, Any]:
        # The agent slot is in the hash only here: the hashes of loop harnesses stay as they were.
        return {**super().content(), "agent": self.agent}

    @property
    def kind(self) -> str:
        """``"agent"``: a third-party CLI."""
        return "agent"

    def can_express(self, requires: frozenset[str]) -> bool:
        """Whether the CLI can do everything a task requires (the slot's ``can``)."""
        return requires <= frozenset(self.agent["can"])

    @functools.cached_property
    def tools(self) -> list[dict[str, Any]] | None:
        """``None``: the CLI's tools are its own, recorded with each episode
        (``meta.agent.tools``), never in a harness file."""
        return None


def search_path() -> list[Path]:
    """Where harness names are looked up: ``$TACKROOM_HARNESS_PATH``, ``./harnesses``, built-ins
    (tackroom's own, then the shipped agent CLIs)."""
    dirs = [Path(p) for p in os.environ.get("TACKROOM_HARNESS_PATH", "").split(os.pathsep) if p]
    dirs.append(Path.cwd() / "harnesses")
    dirs += [BUILTIN_DIR, AGENTS_DIR]
    return dirs


def list_harnesses() -> dict[str, Path]:
    """Every harness name findable on the search path (first one wins) → its file."""
    found: dict[str, Path] = {}
    for d in search_path():
        if d.is_dir():
            for p in sorted(d.glob("*.toml")):
                found.setdefault(p.stem, p)
    return found


def find_harness(ref: str, relative_to: Path | None = None, where: str = "--harness") -> Path:
    """Resolve a harness name or path to a file, or raise a HarnessError that lists names."""
    try:
        return _find_harness(ref, relative_to, where)
    except OSError as e:  # a name too long for the file system, a loop of symlinks, EACCES …
        shown = relative_to / ref if relative_to is not None else Path(ref)
        raise HarnessError(f"cannot use harness path {str(shown)!r} ({e.strerror or e})", where,
                           "give the path of a harness .toml file, or a name from "
                           "`tackroom harness list`") from None


def _find_harness(ref: str, relative_to: Path | None, where: str) -> Path:
    p = Path(ref)
    candidates = []
    if relative_to is not None:
        candidates += [relative_to / ref, relative_to / f"{ref}.toml"]
    candidates += [p] if p.suffix == ".toml" else []
    for c in candidates:
        if c.is_file():
            return c
    if p.suffix == ".toml" or os.sep in ref or (os.altsep and os.altsep in ref):
        # A path, not a name: say what is wrong with that path.
        shown = relative_to / ref if relative_to is not None and not p.is_absolute() else p
        # From an ``extends``: name the file that refers to it too ("a.toml extends b.toml").
        at = str(shown) if relative_to is None else f"{where} {shown}"
        if shown.is_file():
            raise HarnessError("not a .toml file", at,
                               "harness files end in .toml: rename it, or give the path of one")
        if shown.exists():
            raise HarnessError("not a file", at, "give the path of a harness .toml file")
        raise HarnessError("harness file not found", at,
                           "check the path, or use `tackroom harness list` for harness names")
    for d in search_path():
        c = d / f"{ref}.toml"
        if c.is_file():
            return c
    names = ", ".join(sorted(list_harnesses()))
    raise HarnessError(f"no harness named {ref!r}", where,
                       f"use a .toml path or one of: {names}")


def load_harness(ref: str) -> HarnessSpec:
    """Load a harness by name (search path) or by file path, resolving ``extends``."""
    path = find_harness(ref)
    raw, chain = _resolve(path)
    return parse_harness(raw, source=str(path), chain=tuple(chain))


def _read(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise HarnessError(f"not valid TOML: {e}", str(path),
                           "fix the syntax (see https://toml.io)") from None
    except UnicodeDecodeError:
        raise HarnessError("not a text file (harness files are UTF-8 TOML)", str(path),
                           "give the path of a harness .toml file, saved as UTF-8") from None
    except ValueError as e:  # tomllib lets int()'s digit limit through (a 5000-digit number)
        reason = str(e).split(";")[0]  # not int()'s advice to call sys.set_int_max_str_digits
        raise HarnessError(f"not valid TOML: {reason}", str(path),
                           "use numbers that fit in 64 bits, as TOML requires") from None
    except OSError as e:
        raise HarnessError(f"cannot read harness file: {e.strerror}", str(path)) from None


def _resolve(path: Path) -> tuple[dict[str, Any], list[str]]:
    """``path`` with its ``extends`` chain merged in: (resolved dict, chain from the base).

    Iterative, and at most :data:`MAX_EXTENDS` files deep: a chain of thousands of files is
    one clear error, not a ``RecursionError``.
    """
    files: list[tuple[Path, dict[str, Any]]] = []  # the harness first, its base last
    seen: list[str] = []
    current = path
    while True:
        key = str(current.resolve())
        if key in seen:
            raise HarnessError("circular 'extends'", str(current),
                               "chain: " + " -> ".join(Path(s).stem for s in seen + [key]))
        if len(seen) >= MAX_EXTENDS:
            raise HarnessError(f"the 'extends' chain is more than {MAX_EXTENDS} files deep",
                               str(path), "extend a harness nearer the base of the chain "
                               "(or copy its slots in) to make the chain shorter")
        raw = _read(current)
        _anchor_model(raw, current)
        seen.append(key)
        files.append((current, raw))
        parent_ref = raw.get("extends")
        if parent_ref is None:
            break
        if not isinstance(parent_ref, str):
            raise HarnessError("'extends' must be a harness name or path", f"{current} extends")
        current = find_harness(parent_ref, relative_to=current.parent,
                               where=f"{current} extends")
    base_path, merged = files[-1]
    chain = [str(base_path)]
    for child_path, raw in reversed(files[:-1]):
        base = merged
        merged = _merge(base, raw)
        merged["name"] = raw.get("name", child_path.stem)
        if "description" not in raw:
            merged["description"] = base.get("description", "")
        chain.append(str(child_path))
    return merged, chain


def _anchor_model(raw: dict[str, Any], path: Path) -> None:
    """A decision model's relative path is relative to the harness file that names it, also
    when another harness ``extends`` that file from elsewhere."""
    slot = raw.get("delegation")
    if isinstance(slot, dict) and isinstance(slot.get("model"), str) and slot["model"].strip():
        model = Path(slot["model"]).expanduser()
        if not model.is_absolute():
            slot["model"] = str((path.parent / model).resolve())


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if k == "extends":
            continue
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def parse_harness(raw: dict[str, Any], source: str = "<memory>",
                  chain: tuple[str, ...] = ()) -> HarnessSpec:
    """Validate a resolved harness dict (no ``extends``) and build the spec."""
    where = source
    unknown = set(raw) - _TOP
    if unknown:
        raise HarnessError(f"unknown slot(s) {sorted(unknown)}", where,
                           f"allowed top-level keys: {', '.join(sorted(_TOP))}")
    name = raw.get("name") or Path(source).stem
    if not isinstance(name, str) or not name.replace("-", "").replace("_", "").isalnum():
        raise HarnessError(f"invalid name {name!r}", f"{where} name",
                           "use letters, digits, '-' and '_'")
    slots: dict[str, Any] = {}
    for slot in ("prompt", "observation", "actions", "loop", "budget"):
        value = raw.get(slot, {})
        if not isinstance(value, dict):
            raise HarnessError(f"[{slot}] must be a table", f"{where} [{slot}]")
        allowed = set(DEFAULTS[slot]) | OPTIONAL.get(slot, set())
        bad = set(value) - allowed
        if bad:
            raise HarnessError(f"unknown key(s) {sorted(bad)} in [{slot}]", f"{where} [{slot}]",
                               f"allowed: {', '.join(sorted(allowed))}")
        merged = {**copy.deepcopy(DEFAULTS[slot]), **value}
        for key in OPTIONAL.get(slot, ()):  # absent when empty: older hashes stay as they were
            if not merged.get(key, True):
                del merged[key]
        slots[slot] = merged
    _check_prompt(slots["prompt"], where)
    _check_observation(slots["observation"], where)
    _check_actions(slots["actions"], where)
    check_slot("loop", slots["loop"], where)
    check_slot("budget", slots["budget"], where)
    skills = _check_skills(raw.get("skills", []), where)
    agent = check_agent(raw["agent"], where) if "agent" in raw else {}
    delegation = check_delegation(raw["delegation"], where) if "delegation" in raw else None
    if "agent" in raw and delegation is not None:
        raise HarnessError("an [agent] harness cannot delegate: the CLI makes its own choices",
                           f"{where} [delegation]", "remove [delegation], or use a loop harness")
    parts: dict[str, Any] = dict(
        name=name,
        description=str(raw.get("description", "")),
        prompt=slots["prompt"],
        observation=slots["observation"],
        actions=slots["actions"],
        loop=slots["loop"],
        budget=slots["budget"],
        skills=skills,
        delegation=delegation,
        source=source,
        extends=chain,
    )
    if "agent" in raw:  # an agent CLI brings its own prompt, observations and parser
        return AgentHarness(**parts, agent=agent)
    _check_required(raw, where)
    return HarnessSpec(**parts)


#: What a harness must name itself (or inherit with ``extends``): the slots that make one
#: harness differ from another. Everything else has a default.
REQUIRED: dict[str, tuple[str, ...]] = {
    "observation": ("renderer",),
    "actions": ("interface", "parser"),
}


def _check_required(raw: dict[str, Any], where: str) -> None:
    missing = [f"[{slot}].{key}" for slot, keys in REQUIRED.items() for key in keys
               if key not in (raw.get(slot) or {})]
    if missing:
        raise HarnessError(
            f"missing required slot(s) {', '.join(missing)}", where,
            "name them (e.g. [observation] renderer = \"element_list\", [actions] interface = "
            "\"element_refs\", parser = \"tool_calls\"), or inherit them with "
            "extends = \"som-tools\"")


def _type(value: Any, kind: type | tuple[type, ...], where: str, what: str) -> None:
    if isinstance(value, bool) and kind is not bool and bool not in (
        kind if isinstance(kind, tuple) else (kind,)
    ):
        raise HarnessError(f"{what} must be {_kind_name(kind)}, got {value!r}", where)
    if not isinstance(value, kind):
        raise HarnessError(f"{what} must be {_kind_name(kind)}, got {value!r}", where)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({"str": "a string", "int": "an integer", "float": "a number",
                        "bool": "true/false", "dict": "a table"}.get(k.__name__, k.__name__)
                       for k in kinds)


def _check_prompt(p: dict[str, Any], where: str) -> None:
    for key, value in p.items():
        _type(value, str, f"{where} [prompt].{key}", key)
        allowed = _PLACEHOLDERS.get(key)
        if allowed is not None:
            _check_template(value, allowed, f"{where} [prompt].{key}")


def _check_template(value: str, allowed: set[str], where: str) -> None:
    """A turn template names only ``allowed`` placeholders, each plainly (``{observation}``:
    no ``{observation.attr}``, ``{observation[0]}`` or positional ``{}``), and formats."""
    names = ", ".join("{" + a + "}" for a in sorted(allowed))
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(value) if f is not None]
        for f in fields:
            if f not in allowed:
                raise KeyError(f)
        value.format(**{k: "" for k in allowed})
    except KeyError as e:
        raise HarnessError(f"unknown placeholder {{{e.args[0]}}}", where,
                           f"allowed: {names}; write literal braces as {{{{ and }}}}") from None
    except (ValueError, IndexError, AttributeError, TypeError) as e:
        raise HarnessError(f"bad template: {e}", where,
                           "write literal braces as {{ and }}") from None


def _check_observation(o: dict[str, Any], where: str) -> None:
    check_slot("observation", o, where)
    _type(o["options"], dict, f"{where} [observation].options", "options")
    if "max_chars" in o["options"]:  # the renderers read it there, over the slot's own
        check_value("observation", "max_chars", o["options"]["max_chars"],
                    f"{where} [observation].options.max_chars")
    _check_plain(o["options"], f"{where} [observation].options")


def _check_plain(value: Any, where: str) -> None:
    """Free-form values (renderer options) are JSON's kinds: the hash and the records hold
    them. TOML dates and times, NaN and infinities are refused."""
    if isinstance(value, dict):
        for k, v in value.items():
            _check_plain(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_plain(v, f"{where}[{i}]")
    elif isinstance(value, (datetime.date, datetime.time)):
        raise HarnessError(f"a date or time ({value.isoformat()}) is not an option value", where,
                           "use a string, number, boolean, array or table")
    elif isinstance(value, float) and not math.isfinite(value):
        raise HarnessError(f"{value} is not an option value", where, "use a finite number")


def _check_actions(a: dict[str, Any], where: str) -> None:
    check_slot("actions", a, where)
    described = a.get("descriptions")
    if described is None:
        return
    w = f"{where} [actions].descriptions"
    if not isinstance(described, dict):
        raise HarnessError("descriptions must be a table of action name = text", w,
                           'e.g. [actions.descriptions] click = "Click an element by its number."')
    actions = [sp.name for sp in get("interface", a["interface"]).specs]
    for name, text in described.items():
        if name not in actions:
            raise HarnessError(f"no action {name!r} in interface {a['interface']!r}", w,
                               f"describe one of: {', '.join(actions)}")
        if not isinstance(text, str) or not text.strip() or len(text) > 2000:
            raise HarnessError(f"the description of {name!r} must be text of 1 to 2000 "
                               "characters", w, "write what the tool does, in one line")


def _check_skills(skills: Any, where: str) -> tuple[Skill, ...]:
    if not isinstance(skills, list):
        raise HarnessError("skills must be an array of tables ([[skills]])", f"{where} skills")
    out = []
    for i, s in enumerate(skills):
        w = f"{where} [[skills]] #{i + 1}"
        if not isinstance(s, dict):
            raise HarnessError("each skill must be a table with name and text", w)
        bad = set(s) - {"name", "text"}
        if bad:
            raise HarnessError(f"unknown key(s) {sorted(bad)}", w, "allowed: name, text")
        if not isinstance(s.get("name"), str) or not isinstance(s.get("text"), str):
            raise HarnessError("a skill needs a string name and a string text", w)
        out.append(Skill(s["name"], s["text"]))
    return tuple(out)
