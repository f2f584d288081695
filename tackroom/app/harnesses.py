"""Harness files from Python: the catalogue on the search path, one harness resolved, files
checked, and how two harnesses differ slot by slot (``tackroom harness list|show|validate|diff``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tackroom.core.errors import TackroomError
from tackroom.harness.session import HarnessSession
from tackroom.harness.spec import AgentHarness, HarnessSpec, list_harnesses, load_harness


@dataclass(frozen=True)
class HarnessEntry:
    """One harness file on the search path: its spec, or why it does not load."""

    name: str
    path: Path
    spec: HarnessSpec | None
    error: TackroomError | None = None

    @property
    def summary(self) -> dict[str, str]:
        """The slots a listing shows (renderer, interface, parser, loop), as text."""
        h = self.spec
        if h is None:
            return {}
        if isinstance(h, AgentHarness):  # a third-party CLI: its own renderer, parser and loop
            return {"renderer": "(agent CLI)",
                    "interface": f"{h.agent['cli']} {h.agent['version']}",
                    "parser": "(its own)", "per turn": "", "on error": ""}
        return {"renderer": str(h.observation["renderer"]),
                "interface": str(h.actions["interface"]), "parser": str(h.actions["parser"]),
                "per turn": str(h.loop["actions_per_turn"]),
                "on error": str(h.loop["on_action_error"])}


def harness_catalogue() -> list[HarnessEntry]:
    """Every harness on the search path ($TACKROOM_HARNESS_PATH, ./harnesses, built-in).

    A file that does not load is listed with its error rather than hiding the others.
    """
    out: list[HarnessEntry] = []
    for name, path in list_harnesses().items():
        try:
            out.append(HarnessEntry(name, Path(path), load_harness(str(path))))
        except TackroomError as e:
            out.append(HarnessEntry(name, Path(path), None, e))
    return out


@dataclass(frozen=True)
class HarnessView:
    """A harness resolved (after ``extends``) and the system prompt its model sees.

    ``system_prompt`` is ``None`` for an agent harness: the CLI brings its own.
    """

    spec: HarnessSpec
    system_prompt: str | None


def describe_harness(name: str | HarnessSpec) -> HarnessView:
    """``name`` (a harness name or ``.toml`` path) resolved, with its system prompt."""
    h = name if isinstance(name, HarnessSpec) else load_harness(name)
    if isinstance(h, AgentHarness):
        return HarnessView(h, None)
    return HarnessView(h, HarnessSession.open(h, "").preamble)


@dataclass(frozen=True)
class HarnessCheck:
    """One file checked: its spec when valid, else the error."""

    path: str
    spec: HarnessSpec | None
    error: TackroomError | None


def validate_harnesses(paths: Sequence[str]) -> list[HarnessCheck]:
    """Load each harness file or name; one result per path, invalid ones with their error."""
    out: list[HarnessCheck] = []
    for p in paths:
        try:
            out.append(HarnessCheck(p, load_harness(p), None))
        except TackroomError as e:
            out.append(HarnessCheck(p, None, e))
    return out


@dataclass(frozen=True)
class SlotDiff:
    """One setting that differs: ``slot`` (``loop.on_action_error``) and its two values
    (``None`` where a harness does not set it)."""

    slot: str
    a: Any
    b: Any


@dataclass(frozen=True)
class HarnessDiff:
    """Two harnesses, resolved (after ``extends``), and the settings in which they differ.

    No ``slots`` means the same content, hence the same hash.
    """

    a: HarnessSpec
    b: HarnessSpec
    slots: list[SlotDiff]

    @property
    def identical(self) -> bool:
        """Whether the two have the same content (and so the same hash)."""
        return not self.slots


def diff_harnesses(a: str | HarnessSpec, b: str | HarnessSpec) -> HarnessDiff:
    """Which slots differ between harnesses ``a`` and ``b`` (names, ``.toml`` paths or specs).

    A slot that is a table is compared key by key (``observation.renderer``); others as
    a whole. Slots come in ``a``'s order, then those only ``b`` has.

    ::

        d = tackroom.diff_harnesses("som-tools", "som-tools-reflect")
        for s in d.slots:
            print(s.slot, s.a, "->", s.b)
    """
    ha = a if isinstance(a, HarnessSpec) else load_harness(a)
    hb = b if isinstance(b, HarnessSpec) else load_harness(b)
    ca, cb = ha.content(), hb.content()
    slots: list[SlotDiff] = []
    for slot in list(ca) + [s for s in cb if s not in ca]:
        va, vb = ca.get(slot), cb.get(slot)
        if isinstance(vb, dict) and va is None:
            va = {}
        if isinstance(va, dict):
            vb = vb if isinstance(vb, dict) else {}
            slots.extend(SlotDiff(f"{slot}.{k}", va.get(k), vb.get(k))
                         for k in sorted(set(va) | set(vb)) if va.get(k) != vb.get(k))
        elif va != vb:
            slots.append(SlotDiff(slot, va, vb))
    return HarnessDiff(ha, hb, slots)


__all__ = ["HarnessCheck", "HarnessDiff", "HarnessEntry", "HarnessView", "SlotDiff",
           "describe_harness", "diff_harnesses", "harness_catalogue", "validate_harnesses"]
