"""Each message stored once: a turn's messages as a delta of the turn before.

Turn ``t`` of an episode shows the model the conversation so far, which is
turn ``t-1``'s messages plus a reply and an observation (or, under a history
window, most of them). Storing every turn's whole list costs O(T²) messages
for T turns; a delta costs what is new.

A delta is a list whose items are either a message (a JSON object, kept as
it is) or ``[start, stop]``: the messages ``start:stop`` of the turn it is a
delta of (its *base*). JSON objects and arrays never look alike, so the two
kinds of item cannot be confused. :func:`encode` finds the runs the two lists
share (a common prefix, and after a message that changed — a window's
rewritten first user message — the rest of the base where it lines up again);
:func:`decode` rebuilds the list exactly. A list holding anything but dicts is
stored whole (:func:`encode` answers ``None``).

Decoded turns of one episode share their message objects (as the turns of a
live episode do): copy a message before changing it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["encode", "decode"]

Message = dict[str, Any]

#: How far past the last shared run :func:`encode` looks for a message again.
LOOKAHEAD = 32


def encode(base: Sequence[Any], messages: Sequence[Any]) -> list[Any] | None:
    """``messages`` as a delta of ``base`` (``None``: store them whole).

    Linear in the two lists: a message that does not continue the last run
    is looked for in the next :data:`LOOKAHEAD` messages of the base only
    (a history window drops a few messages at a time), so new messages —
    two or so a turn — never cost a scan of the whole conversation.
    """
    if not all(isinstance(m, dict) for m in messages):
        return None
    out: list[Any] = []
    i, j, n, m = 0, 0, len(messages), len(base)
    while i < n:
        # Where does messages[i] continue in the base? First where the last run ended.
        k = j if j < m and base[j] == messages[i] else _find(base, messages[i], j)
        if k is None:
            out.append(messages[i])
            i += 1
            continue
        start = k
        while i < n and k < m and base[k] == messages[i]:
            i += 1
            k += 1
        out.append([start, k])
        j = k
    return out


def _find(base: Sequence[Any], message: Message, after: int) -> int | None:
    """The first index in ``after : after + LOOKAHEAD`` where ``base`` holds ``message``."""
    for k in range(after, min(after + LOOKAHEAD, len(base))):
        if base[k] == message:
            return k
    return None


def decode(delta: Sequence[Any], base: Sequence[Any]) -> list[Any]:
    """The messages ``delta`` stands for, given its base's (decoded) messages.

    Raises:
        ValueError: an item is neither a message nor a range of ``base``.
    """
    out: list[Any] = []
    for item in delta:
        if isinstance(item, dict):
            out.append(item)
        elif (isinstance(item, list) and len(item) == 2 and all(isinstance(x, int) for x in item)
              and 0 <= item[0] <= item[1] <= len(base)):
            out.extend(base[item[0]:item[1]])
        else:
            raise ValueError(f"bad message delta item {item!r} (base has {len(base)} messages)")
    return out
