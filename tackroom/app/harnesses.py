"""Harness files from Python: how two harnesses differ, slot by slot (``tackroom harness diff``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tackroom.harness.spec import HarnessSpec, load_harness


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


__all__ = ["HarnessDiff", "SlotDiff", "diff_harnesses"]
