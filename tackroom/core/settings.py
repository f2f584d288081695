"""One base for every settings object: each key declared once, with its home, doc and limits.

A settings class is a dataclass that derives from :class:`Settings` and declares
each field with :func:`setting`::

    from dataclasses import dataclass
    from tackroom.core.settings import Settings, setting

    @dataclass
    class MySettings(Settings):
        SECTIONS = ("optim", "run")          # TOML sections, in the order they are written
        LABEL = "MySettings"                 # `where` of values given in Python
        DOCS = "docs/mine.md"                # where the key table lives (for messages)

        lr: float = setting(1e-5, "optim", "AdamW learning rate",
                            bounds="(0, 1]", example="1e-5", why="above 1 only diverges")
        steps: int = setting(100, "optim", "optimiser steps", bounds="[1, 1e7]")
        schedule: str = setting("constant", "optim", "learning-rate schedule",
                                choices=("constant", "cosine"))
        loss: str = setting("grpo", "optim", "the loss", choices=lambda: names("algorithm"))
        clip: float | None = setting(None, "optim", "clip range (none: unclipped)")
        out: str = setting("runs/x", "run", "where checkpoints go", key="out_dir")

        def check_together(self) -> None:    # optional: rules that span several keys
            if self.steps < 10 and self.schedule == "cosine":
                raise self.fail("steps", "is too short for a cosine schedule", "...")

What the base gives every such class:

* **Types from the annotations** (resolved with :func:`typing.get_type_hints`, so
  ``float | None`` is optional because its type says so): ``bool``, ``int``,
  ``float`` (ints accepted, made floats; non-finite refused), ``str``,
  ``list[str]``, ``str | list[str]``; any other type (a nested dataclass) is
  left to :meth:`Settings.check_together`.
* **Parsing**: :meth:`Settings.from_dict` (sectioned ``{"optim": {"lr": 1e-4}}``
  and/or flat field names), :meth:`Settings.from_toml` (a file, then
  ``section.key=value`` overrides whose values are TOML or a bare string;
  ``none`` unsets an optional key; a comma list fills a list).
* **Validation** (on construction, too): :meth:`Settings.validate` raises one
  :class:`~tackroom.core.errors.ConfigError` naming the dotted key, where the
  value came from (the file, the override, or ``LABEL`` / the field's ``flag``),
  and what is allowed — the type, then ``choices`` (with a close match), then
  ``bounds`` (``KEY = V is out of range — give a number from LO to HI, e.g. EX``,
  through :func:`~tackroom.core.bounds.check_number`), then
  :meth:`Settings.check_together`.
* **Writing**: :meth:`Settings.to_dict` (sectioned) and :meth:`Settings.to_toml`,
  which :meth:`Settings.from_toml` reads back to an equal object.
* **Docs**: :meth:`Settings.key_table` is the Markdown table of every key, its
  default and meaning, which docs embed and a test compares with the docs.

``bounds`` is an interval written as in mathematics — ``"[0, 1)"``, ``"(0, 2]"``,
``"[1, 4096]"``, ``">= 0"``, ``"> 0"`` — and applies to ints and floats alike
(an optional key's ``None`` is not checked).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import tomllib
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from tackroom.core.bounds import check_number
from tackroom.core.errors import ConfigError

__all__ = ["Settings", "setting", "REQUIRED", "Interval", "SettingSpec", "parse_toml_value",
           "toml_value"]

S = TypeVar("S", bound="Settings")

#: The default of a key that has none: the caller must give it (declare such keys first).
REQUIRED: Any = dataclasses.MISSING

#: What ``choices=`` may be: the names, or a function returning them (a registry lookup).
Choices = Sequence[str] | Callable[[], Sequence[str]]


@dataclass(frozen=True)
class Interval:
    """The numbers a key accepts: ``lo``..``hi``, each end open or closed (``None``: unbounded)."""

    lo: float | None
    hi: float | None
    lo_open: bool = False
    hi_open: bool = False

    @classmethod
    def parse(cls, text: str) -> Interval:
        """``"[0, 1)"``, ``"(0, 2]"``, ``"[1, 4096]"``, ``">= 0"``, ``"> 0"``, ``"<= 1"``."""
        t = text.strip()
        one = re.fullmatch(r"(>=|>|<=|<)\s*(\S+)", t)
        if one:
            op, x = one.group(1), float(one.group(2))
            if op.startswith(">"):
                return cls(x, None, lo_open=op == ">")
            return cls(None, x, hi_open=op == "<")
        two = re.fullmatch(r"([\[(])\s*([^,\s]+)\s*,\s*([^\])\s]+)\s*([\])])", t)
        if not two:
            raise ValueError(f"not an interval: {text!r} (write e.g. '[0, 1)' or '>= 0')")
        return cls(float(two.group(2)), float(two.group(3)), two.group(1) == "(",
                   two.group(4) == ")")

    def __contains__(self, x: float) -> bool:
        if self.lo is not None and (x < self.lo or (self.lo_open and x == self.lo)):
            return False
        return not (self.hi is not None and (x > self.hi or (self.hi_open and x == self.hi)))

    def rule(self, integer: bool) -> str:
        """The words for the message: ``in [0, 1)``, ``from 1 to 4096``, ``>= 0``."""
        if self.lo is None and self.hi is not None:
            return f"{'<' if self.hi_open else '<='} {_num(self.hi)}"
        if self.hi is None and self.lo is not None:
            return f"{'>' if self.lo_open else '>='} {_num(self.lo)}"
        if integer and not self.lo_open and not self.hi_open:
            return f"from {_num(self.lo)} to {_num(self.hi)}"
        return (f"in {'(' if self.lo_open else '['}{_num(self.lo)}, {_num(self.hi)}"
                f"{')' if self.hi_open else ']'}")


def _num(x: float | None) -> str:
    assert x is not None
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


@dataclass(frozen=True)
class SettingSpec:
    """One key of a settings class, as :func:`setting` declared it and its type says."""

    name: str            # the Python field name (also accepted as a flat key)
    section: str         # the TOML section
    key: str             # the key inside the section
    doc: str             # one line: what it sets
    type: str            # bool | int | float | str | list | str_or_list | other
    optional: bool       # None is allowed (``none`` in an override unsets it)
    default: Any         # the default value (a fresh copy for list fields)
    choices: Choices | None = None
    bounds: Interval | None = None
    example: str = ""    # a good value, for messages ("e.g. algo.epsilon = 0.2")
    why: str = ""        # why the bounds are what they are, for messages
    flag: str = ""       # the command-line option that sets it, for messages

    @property
    def dotted(self) -> str:
        """``section.key``."""
        return f"{self.section}.{self.key}"

    def allowed(self) -> list[str] | None:
        """The allowed values, reading the registry now if ``choices`` is a function."""
        if self.choices is None:
            return None
        return list(self.choices() if callable(self.choices) else self.choices)


def setting(default: Any, section: str, doc: str, *, key: str | None = None,
            choices: Choices | None = None, bounds: str | None = None, example: str = "",
            why: str = "", flag: str = "", factory: Callable[[], Any] | None = None) -> Any:
    """Declare a settings field (use as the dataclass field's default).

    Args:
        default: the default value (ignored when ``factory`` is given).
        section: the TOML section it lives in.
        doc: one line for the docs' key table.
        key: its key in the section (default: the field name).
        choices: the allowed values, or a function returning them (e.g.
            ``lambda: names("algorithm")`` to read the registry at validation time).
        bounds: an interval for numbers (see :class:`Interval`).
        example: a good value, shown in messages.
        why: the reason for the bounds, shown after them in messages.
        flag: the command-line option that sets it (the message's ``where`` when the
            value was given in Python rather than read from a file).
        factory: a default factory (for lists).

    ``default=REQUIRED`` makes a key the caller must give (declare such keys first, as
    dataclasses require).
    """
    if isinstance(choices, (list, tuple)):
        choices = tuple(choices)
    meta = {"section": section, "key": key, "doc": doc, "choices": choices,
            "bounds": Interval.parse(bounds) if bounds else None, "example": example,
            "why": why, "flag": flag}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    if default is REQUIRED:
        return field(metadata=meta)
    return field(default=default, metadata=meta)


def _type_of(hint: Any) -> tuple[str, bool]:
    """(type name, optional) of a resolved annotation."""
    args = typing.get_args(hint) if isinstance(hint, types.UnionType) \
        or typing.get_origin(hint) is typing.Union else (hint,)
    optional = type(None) in args
    rest = [a for a in args if a is not type(None)]
    is_list = [typing.get_origin(a) is list or a is list for a in rest]
    if len(rest) == 2 and str in rest and any(is_list):
        return "str_or_list", optional
    if len(rest) != 1:
        return "other", optional
    t = rest[0]
    if is_list[0]:
        return "list", optional
    for simple in (bool, int, float, str):
        if t is simple:
            return simple.__name__, optional
    return "other", optional


class Settings:
    """The base of a settings dataclass (see the module docstring for the whole contract)."""

    #: TOML sections in writing order; every field's section must be one of them.
    SECTIONS: ClassVar[tuple[str, ...]] = ()
    #: Other spellings accepted for a section name.
    SECTION_ALIASES: ClassVar[Mapping[str, str]] = {}
    #: Where values given in Python come from, in messages (default: the class name).
    LABEL: ClassVar[str] = ""
    #: The page whose key table lists every key, named in "unknown setting" messages.
    DOCS: ClassVar[str] = "the docs"

    #: An override shown in messages (default: the first key with its example or default).
    EXAMPLE_OVERRIDE: ClassVar[str] = ""

    #: Where each field's value came from ("train.toml", "override 'algo.beta=…'").
    _sources: dict[str, str]

    def __post_init__(self) -> None:
        if not hasattr(self, "_sources"):
            self._sources = {}
        self.validate()

    # ------------------------------------------------------------------ the schema
    @classmethod
    def specs(cls) -> dict[str, SettingSpec]:
        """Every key of the class, by field name, in declaration order."""
        cached = cls.__dict__.get("_specs_cache")
        if cached is not None:
            return cached
        hints = typing.get_type_hints(cls)
        out: dict[str, SettingSpec] = {}
        for f in fields(cls):  # type: ignore[arg-type]
            if f.name.startswith("_") or "section" not in f.metadata:
                continue
            kind, optional = _type_of(hints[f.name])
            m = f.metadata
            if m["section"] not in cls.SECTIONS:
                raise TypeError(f"{cls.__name__}.{f.name}: section {m['section']!r} is not in "
                                f"SECTIONS {cls.SECTIONS}")
            default = f.default if f.default is not dataclasses.MISSING \
                else f.default_factory() \
                if f.default_factory is not dataclasses.MISSING else REQUIRED
            out[f.name] = SettingSpec(f.name, m["section"], m["key"] or f.name, m["doc"], kind,
                                      optional, default, m["choices"], m["bounds"],
                                      m["example"], m["why"], m["flag"])
        cls._specs_cache = out  # type: ignore[attr-defined]
        cls._dotted_cache = {s.dotted: n for n, s in out.items()}  # type: ignore[attr-defined]
        return out

    @classmethod
    def key_of(cls, name: str) -> str:
        """The dotted ``section.key`` of field ``name``."""
        return cls.specs()[name].dotted

    @classmethod
    def _dotted(cls) -> dict[str, str]:
        cls.specs()
        return cls.__dict__["_dotted_cache"]

    @classmethod
    def _example(cls) -> str:
        if cls.EXAMPLE_OVERRIDE:
            return cls.EXAMPLE_OVERRIDE
        first = next(iter(cls.specs().values()))
        return f"{first.dotted}={first.example or toml_value(first.default)}"

    @classmethod
    def _label(cls) -> str:
        return cls.LABEL or cls.__name__

    def where(self, name: str) -> str:
        """Where field ``name``'s value came from: a file, an override, its flag, or LABEL."""
        return self._sources.get(name) or self.specs()[name].flag or self._label()

    def fail(self, name: str, what: str, fix: str) -> ConfigError:
        """A ConfigError ``<key> = <value> <what>`` at the value's source."""
        return ConfigError(f"{self.key_of(name)} = {getattr(self, name)!r} {what}",
                           self.where(name), fix)

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first bad key, its source and what is allowed."""
        for name, spec in self.specs().items():
            # Direct construction (``Cls(beta="x")``) gets the same type errors as TOML.
            value = _coerce(spec, getattr(self, name), self.where(name))
            setattr(self, name, value)
            if value is None:
                continue
            allowed = spec.allowed()
            if allowed is not None:
                items = value if isinstance(value, list) else [value]
                for item in items:
                    if item in allowed:
                        continue
                    close = difflib.get_close_matches(str(item), allowed, n=1)
                    hint = f" (did you mean {close[0]!r}?)" if close else ""
                    what = "is not allowed" if item is value else f"names an unknown {item!r}"
                    raise self.fail(name, what + hint, f"use one of: {', '.join(allowed)}")
            if spec.bounds is not None and spec.type in ("int", "float"):
                _check_bounds(spec, value, self.where(name))
        self.check_together()

    def check_together(self) -> None:
        """Rules that span several keys; raise :meth:`fail` errors. Override as needed."""

    # ------------------------------------------------------------------ reading
    @classmethod
    def from_dict(cls: type[S], data: Mapping[str, Any], where: str = "config") -> S:
        """An object from sectioned (``{"algo": {"beta": 0.1}}``) and/or flat keys."""
        values, sources = cls._collect(data, where)
        return cls._build(values, sources)

    @classmethod
    def from_toml(cls: type[S], path: str | Path | None = None,
                  overrides: Sequence[str] = ()) -> S:
        """Read ``path`` (``None``: the defaults), then apply ``key=value`` overrides in order.

        Validation runs once, on the result, so an override may repair a file's value.
        """
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        if path is not None:
            p = Path(path)
            try:
                data = tomllib.loads(p.read_text(encoding="utf-8"))
            except FileNotFoundError:
                raise ConfigError("config file not found", str(p),
                                  "check the path, or drop it to use the defaults") from None
            except tomllib.TOMLDecodeError as e:
                raise ConfigError(f"not valid TOML: {e}", str(p), "fix the syntax") from None
            values, sources = cls._collect(data, str(p))
        for item in overrides:
            name, value = cls.parse_override(item)
            values[name], sources[name] = value, f"override {item!r}"
        return cls._build(values, sources)

    @classmethod
    def parse_override(cls, item: str) -> tuple[str, Any]:
        """``"algo.epsilon=0.3"`` → ``("epsilon", 0.3)``; the value is TOML, else a bare string."""
        where = f"override {item!r}"
        key, sep, raw = item.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or not key:
            raise ConfigError("an override is key=value", where, f"e.g. {cls._example()}")
        name = cls.field_for(key, where)
        spec = cls.specs()[name]
        if raw.lower() in ("none", "null") and spec.optional:
            return name, None
        value = parse_toml_value(raw)
        if spec.type == "list" and isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        return name, value

    @classmethod
    def field_for(cls, key: str, where: str) -> str:
        """The field a ``section.key`` or flat name refers to; ConfigError if none."""
        specs, dotted_map = cls.specs(), cls._dotted()
        if "." in key:
            section, _, rest = key.partition(".")
            section = cls._section(section, where)
            dotted = f"{section}.{rest}"
            if dotted in dotted_map:
                return dotted_map[dotted]
            # ``algo.algorithm`` style: a flat field name under its own section is fine too.
            if rest in specs and specs[rest].section == section:
                return rest
            known = sorted(k for k in dotted_map if k.startswith(section + "."))
            close = difflib.get_close_matches(dotted, list(dotted_map), n=1)
            raise ConfigError(f"unknown setting {key!r}" + (
                f" (did you mean {close[0]!r}?)" if close else ""), where,
                f"keys in this section: {', '.join(known)}")
        if key in specs:
            return key
        close = difflib.get_close_matches(key, [*specs, *dotted_map], n=1)
        raise ConfigError(f"unknown setting {key!r}" + (
            f" (did you mean {close[0]!r}?)" if close else ""), where,
            f"see {cls.DOCS} for every key, or use section.key")

    @classmethod
    def _section(cls, name: str, where: str) -> str:
        section = cls.SECTION_ALIASES.get(name, name)
        if section not in cls.SECTIONS:
            close = difflib.get_close_matches(name, cls.SECTIONS, n=1)
            raise ConfigError(f"unknown section [{name}]" + (
                f" (did you mean [{close[0]}]?)" if close else ""), where,
                f"sections are: {', '.join(cls.SECTIONS)}")
        return section

    @classmethod
    def _collect(cls, data: Mapping[str, Any], where: str
                 ) -> tuple[dict[str, Any], dict[str, str]]:
        """Field values from sectioned and/or flat keys, and where each came from."""
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for top, value in data.items():
            if isinstance(value, Mapping):
                section = cls._section(top, where)
                for key, v in value.items():
                    name = cls.field_for(f"{section}.{key}", where)
                    values[name], sources[name] = v, where
            else:
                name = cls.field_for(top, where)
                values[name], sources[name] = value, where
        return values, sources

    @classmethod
    def _build(cls: type[S], values: dict[str, Any], sources: dict[str, str]) -> S:
        specs = cls.specs()
        obj = cls.__new__(cls)
        # Sources first, so validation can say where a bad value came from.
        obj._sources = dict(sources)
        for f in fields(cls):  # type: ignore[arg-type]
            if f.name == "_sources":
                continue
            if f.name in values:
                value = values[f.name]
                if f.name in specs:
                    value = _coerce(specs[f.name], value, sources.get(f.name, "config"))
                setattr(obj, f.name, value)
            elif f.default is not dataclasses.MISSING:
                setattr(obj, f.name, f.default)
            elif f.default_factory is not dataclasses.MISSING:
                setattr(obj, f.name, f.default_factory())
            else:
                raise ConfigError(f"{f.name} is required", cls._label(),
                                  f"give {cls.__name__} a {f.name}")
        obj.__post_init__()
        return obj

    # ------------------------------------------------------------------ writing
    def to_dict(self) -> dict[str, Any]:
        """Sectioned plain values (``None`` left out), e.g. for a run's config snapshot."""
        out: dict[str, dict[str, Any]] = {s: {} for s in self.SECTIONS}
        for name, spec in self.specs().items():
            value = getattr(self, name)
            if value is not None and spec.type != "other":
                out[spec.section][spec.key] = list(value) if isinstance(value, list) else value
        return {s: v for s, v in out.items() if v}

    def to_toml(self) -> str:
        """The settings as TOML that :meth:`from_toml` reads back to an equal object."""
        lines: list[str] = []
        for section, items in self.to_dict().items():
            lines.append(f"[{section}]")
            lines.extend(f"{k} = {toml_value(v)}" for k, v in items.items())
            lines.append("")
        return "\n".join(lines)

    @classmethod
    def key_table(cls, sections: Sequence[str] | None = None) -> str:
        """The Markdown table of every key (of ``sections``): key, default, meaning.

        A key whose field name differs from its key shows the flat name too
        (``lora.rank`` (``lora_rank``)); choices follow the meaning.
        """
        rows = ["| key | default | meaning |", "|---|---|---|"]
        for name, spec in cls.specs().items():
            if spec.type == "other" or (sections is not None and spec.section not in sections):
                continue
            key = f"`{spec.dotted}`" + (f" (`{name}`)" if name != spec.key else "")
            default = "required" if spec.default is REQUIRED else "unset" \
                if spec.default is None else toml_value(spec.default)
            meaning = spec.doc.replace("|", "\\|")
            allowed = spec.allowed()
            if allowed:
                meaning += f" — {', '.join(allowed)}"
            if spec.bounds is not None:
                meaning += f" ({spec.bounds.rule(spec.type == 'int')})"
            rows.append(f"| {key} | {default} | {meaning} |")
        return "\n".join(rows) + "\n"


def _check_bounds(spec: SettingSpec, value: float, where: str) -> None:
    """One message for every number out of its bounds: ``KEY = V is out of range — give …``.

    A closed interval is :func:`~tackroom.core.bounds.check_number`'s own check; open or
    one-sided ones (which it cannot express) are worded the same way.
    """
    b = spec.bounds
    assert b is not None
    integer = spec.type == "int"
    example = spec.example or ("" if spec.default in (None, REQUIRED)
                               else toml_value(spec.default))
    if spec.why:
        example = f"{example} ({spec.why})" if example else spec.why
    if b.lo is not None and b.hi is not None and not (b.lo_open or b.hi_open):
        check_number(value, b.lo, b.hi, spec.dotted, where, integer=integer, example=example)
    elif value not in b:
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"{spec.dotted} = {value!r} is out of range", where,
                          f"give {kind} {b.rule(integer)}" + (f", e.g. {example}"
                                                             if example else ""))


def parse_toml_value(raw: str) -> Any:
    """``raw`` read as a TOML value (``0.3``, ``true``, ``["a"]``), else the bare string."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw  # a bare word or expression: algo.algorithm=gspo, grouping.group=task


def _coerce(spec: SettingSpec, value: Any, where: str) -> Any:
    """``value`` as ``spec``'s type, or a ConfigError saying which type it needs."""

    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{spec.dotted} = {value!r} is not {expected}", where,
                           f"give {spec.dotted} {expected}")

    kind = spec.type
    if value is None:
        if spec.optional:
            return None
        raise bad("optional (it needs a value)")
    if kind == "bool":
        if not isinstance(value, bool):
            raise bad("a boolean (true or false)")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("a number")
        try:
            number = float(value)
        except OverflowError:  # an int past a float's range (TOML allows any length)
            raise bad("a finite number") from None
        if not math.isfinite(number):
            raise bad("a finite number")
        return number
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise bad("an integer")
        return value
    if kind == "list":
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise bad("a list of strings")
        return list(value)
    if kind == "str_or_list":
        if isinstance(value, str):
            return value
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
            return list(value)
        raise bad("a string or a non-empty list of strings")
    if kind == "str":
        if not isinstance(value, str):
            raise bad("a string")
        return value
    return value  # "other": a nested object, checked by check_together()


def toml_value(v: Any) -> str:
    """``v`` written as a TOML value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {v!r} as TOML")
