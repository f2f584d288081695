"""One registry for every extension point of tackroom.

Every implementation — a suite, a policy backend, a renderer, a loss, a sandbox
provider … — registers itself with one decorator, under a *kind* and a name::

    from tackroom.core.registry import register

    @register("suite", "mine")
    def make_suite() -> Suite:
        ...

    register("parser")(MyParser())        # an instance registers under its ``.name``

Config validation, ``--help`` choices, error messages, ``tackroom list`` and the
docs tables all read this one table, so they cannot disagree.

**Where entries come from.** The registry imports nothing from the rest of tackroom
(it lives in :mod:`tackroom.core`, so every layer may use it). Modules that register things are found
through the ``tackroom`` entry-point group — tackroom's own built-ins and third-party
packages alike::

    # a plug-in's pyproject.toml
    [project.entry-points.tackroom]
    suite = "mypkg.suites"              # imported the first time a suite is looked up
    "algorithm.fast" = "mypkg.losses"   # ``KIND`` or ``KIND.ANYTHING``; ``all`` = every kind

An entry point's name says which kind it provides, so that looking up a renderer
does not import the trainer (and torch). Its value is a module, imported for its
``@register`` side effects, or ``module:function``, which is called once.
"""

from __future__ import annotations

import difflib
import importlib
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, TypeVar

from tackroom.core.errors import ConfigError

__all__ = ["KINDS", "Entry", "register", "unregister", "get", "entry", "names", "entries",
           "choices", "has", "missing", "load_kind", "PluginLoadError", "ENTRY_POINT_GROUP"]

T = TypeVar("T")

#: The entry-point group that names modules which register extensions.
ENTRY_POINT_GROUP = "tackroom"

#: Every extension point: kind -> what an entry of that kind is.
KINDS: dict[str, str] = {
    "suite": "a task suite: make_suite(**options) -> Suite",
    "policy": "a policy backend: build(spec, argument, options, db) -> Policy",
    "renderer": "an observation renderer: fn(observation, options) -> str",
    "interface": "an action interface (tool schemas / commands <-> typed actions)",
    "parser": "an output parser (model text -> tool calls)",
    "action": "an environment action type (a dataclass with a `type` name)",
    "algorithm": "a policy-gradient loss (GRPO, Dr.GRPO, GSPO …)",
    "advantage": "an advantage estimator / grouping rule",
    "reward": "a reward read from an episode (verifier, proxies, gates)",
    "decision_model": "a decision model that may take a choice from the LLM",
    "proposer": "a harness-edit proposer for the optimiser",
    "acceptance": "an optimiser's acceptance rule for a candidate harness",
    "sandbox": "a sandbox provider (bubblewrap, docker)",
    "tracker": "an experiment tracker for training metrics",
    "agent_expert": "a scripted expert that answers an agent CLI in its own tool format",
    "dialect": "a vendor API dialect (chat completions, responses, messages, gemini) on the wire",
}


class PluginLoadError(ConfigError):
    """An entry point of the ``tackroom`` group could not be loaded."""


@dataclass(frozen=True)
class Entry:
    """One registered implementation.

    Attributes:
        kind: the extension point (a key of :data:`KINDS`).
        name: the name users write (``--suite toy``, ``algorithm = "gspo"``).
        obj: what was registered: a function, class or instance.
        summary: one line for ``tackroom list`` and the docs tables.
        origin: the module that registered it.
        meta: kind-specific facts (a policy's spec form and options, …).
    """

    kind: str
    name: str
    obj: Any
    summary: str
    origin: str
    meta: Mapping[str, Any] = field(default_factory=dict)


_lock = threading.RLock()
_table: dict[str, dict[str, Entry]] = {k: {} for k in KINDS}
_loaded: set[str] = set()
_loading: set[str] = set()


def _check_kind(kind: str, where: str = "tackroom.registry") -> None:
    if kind not in KINDS:
        close = difflib.get_close_matches(kind, list(KINDS), n=2)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise ConfigError(f"unknown extension kind {kind!r}", where,
                          f"{hint}use one of: {', '.join(KINDS)}")


def _summary_of(obj: Any) -> str:
    doc = getattr(obj, "__doc__", None) or type(obj).__doc__ or ""
    if obj is not None and doc == type(obj).__doc__ and callable(obj) and not isinstance(obj, type):
        doc = getattr(obj, "__doc__", None) or ""
    # The first paragraph, on one line: a summary wrapped in the source is still whole.
    return " ".join(doc.strip().split("\n\n", 1)[0].split())


def register(kind: str, name: str | None = None, *, summary: str | None = None,
             replace: bool = False, **meta: Any) -> Callable[[T], T]:
    """Register the decorated object (or the object passed to the result) as ``kind``/``name``.

    Args:
        kind: one of :data:`KINDS`.
        name: the name users write; default ``obj.name``, else ``obj.__name__``.
        summary: one line for listings; default the first line of the docstring.
        replace: allow a second registration of the same name (a plug-in that
            overrides a built-in must say so); otherwise a clash is an error.
        meta: kind-specific facts, read back from :attr:`Entry.meta`.

    Returns the object unchanged, so it works as a decorator and as a call.
    """
    _check_kind(kind)

    def deco(obj: T) -> T:
        key = name or getattr(obj, "name", None) or getattr(obj, "__name__", None)
        if not isinstance(key, str) or not key:
            raise ConfigError(f"a {kind} registered without a name", _origin(obj),
                              "pass name= to register()")
        new = Entry(kind, key, obj, summary if summary is not None else _summary_of(obj),
                    _origin(obj), dict(meta))
        with _lock:
            old = _table[kind].get(key)
            if old is not None and not replace and old.origin != new.origin:
                raise ConfigError(f"{kind} {key!r} is registered twice", new.origin,
                                  f"it is already registered by {old.origin}; "
                                  "pass replace=True to override it")
            _table[kind][key] = new
        return obj

    return deco


def unregister(kind: str, name: str) -> None:
    """Remove ``kind``/``name`` if registered: for a test that registers a part for itself."""
    _check_kind(kind)
    with _lock:
        _table[kind].pop(name, None)


def _origin(obj: Any) -> str:
    module = getattr(obj, "__module__", None) or type(obj).__module__
    return str(module)


def _entry_points() -> list[metadata.EntryPoint]:
    return sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)


def _provides(ep_name: str, kind: str) -> bool:
    head = ep_name.split(".", 1)[0]
    return head == kind or head == "all"


def load_kind(kind: str) -> None:
    """Import every entry point that provides ``kind`` (once per process)."""
    _check_kind(kind)
    with _lock:
        if kind in _loaded or kind in _loading:
            return
        _loading.add(kind)
    try:
        for ep in _entry_points():
            if _provides(ep.name, kind):
                _load(ep)
        with _lock:
            _loaded.add(kind)
    finally:
        with _lock:
            _loading.discard(kind)


def _load(ep: metadata.EntryPoint) -> None:
    where = f"entry point {ep.name} = {ep.value!r} (group {ENTRY_POINT_GROUP!r})"
    try:
        if ":" in ep.value:
            target = ep.load()
            if callable(target):
                target()
        else:
            importlib.import_module(ep.value)
    except ConfigError:
        raise
    except ModuleNotFoundError as e:
        # An optional extra that is not installed leaves its entries out; the rest works.
        _missing[ep.value] = (ep.name.split(".", 1)[0], f"{e.name} is not installed")
    except Exception as e:  # a broken plug-in is one clear line, not a traceback
        raise PluginLoadError(f"could not load {ep.value}: {type(e).__name__}: {e}", where,
                              "fix or uninstall the package that declares it") from e


#: module -> why its entries are missing (an optional dependency not installed).
_missing: dict[str, tuple[str, str]] = {}


def missing(kind: str | None = None) -> dict[str, str]:
    """Modules whose entries are absent because an optional dependency is missing: module ->
    why, for the modules that provide ``kind`` (every kind if None) and were looked for."""
    return {module: why for module, (head, why) in _missing.items()
            if kind is None or head in (kind, "all")}


def _resolve_dotted(kind: str, name: str) -> Entry | None:
    """``module:attr`` names any importable object (a suite's factory, say)."""
    if ":" not in name or name.count(":") != 1:
        return None
    module, _, attr = name.partition(":")
    if not module or not attr.isidentifier():
        return None
    try:
        obj = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"cannot import {kind} {name!r}: {e}", name,
                          "give an importable module:attribute") from e
    return Entry(kind, name, obj, _summary_of(obj), module, {})


def entry(kind: str, name: str, *, where: str | None = None, dotted: bool = False) -> Entry:
    """The entry ``kind``/``name``; :class:`ConfigError` naming close matches if none.

    Args:
        where: the option or config key the name came from, for the message.
        dotted: also accept ``module:attr`` for an importable object not registered.
    """
    load_kind(kind)
    found = _table[kind].get(name)
    if found is not None:
        return found
    if dotted:
        resolved = _resolve_dotted(kind, name)
        if resolved is not None:
            return resolved
    known = sorted(_table[kind])
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise ConfigError(f"unknown {kind.replace('_', ' ')} {name!r}", where or kind,
                      f"{hint}choose one of: {', '.join(known) or '(none registered)'}"
                      + (" — or module:attribute" if dotted else ""))


def get(kind: str, name: str, *, where: str | None = None, dotted: bool = False) -> Any:
    """The object registered as ``kind``/``name`` (see :func:`entry`)."""
    return entry(kind, name, where=where, dotted=dotted).obj


def names(kind: str) -> list[str]:
    """The registered names of ``kind``, sorted."""
    load_kind(kind)
    return sorted(_table[kind])


def choices(kind: str) -> str:
    """``a, b, c``: the names of ``kind`` for ``--help`` texts and messages."""
    return ", ".join(names(kind))


def entries(kind: str | None = None, *, where: str = "tackroom.registry") -> list[Entry]:
    """Every entry of ``kind`` (or of every kind), in kind then name order.

    ``where`` names the option an unknown ``kind`` came from, for the message.
    """
    if kind is not None:
        _check_kind(kind, where)
    kinds: Iterable[str] = [kind] if kind is not None else KINDS
    out: list[Entry] = []
    for k in kinds:
        load_kind(k)
        out.extend(_table[k][n] for n in sorted(_table[k]))
    return out


def has(kind: str, name: str) -> bool:
    """Whether ``kind``/``name`` is registered."""
    load_kind(kind)
    return name in _table[kind]
