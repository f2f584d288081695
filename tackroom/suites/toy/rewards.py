"""The toy suite's deliberately flawed proxy rewards, registered for training and the tilt model.

* ``proxy:near-miss`` — the click tasks: 1 for a success and 1 for a click on the element
  adjacent to the right one (a wrong outcome the proxy cannot tell from a success).
* ``proxy:press-enter`` — 1 for a success and 1 for pressing Enter instead of choosing an
  element (a plausible but wrong answer, labelled ``pressed-enter``).

Both read an episode's outcome from its record (:mod:`tackroom.suites.toy.outcomes`).
"""

from __future__ import annotations

from tackroom.core.registry import register
from tackroom.core.rewards import PREFIX, ProxyReward
from tackroom.suites.toy import outcomes


def _registered(proxy: ProxyReward) -> ProxyReward:
    return register("reward", PREFIX + proxy.name, summary=proxy.doc, proxy=True)(proxy)


NEAR_MISS = _registered(ProxyReward(
    "near-miss", outcomes.near_miss_proxy, outcomes.outcome, outcomes.LABELS,
    outcomes.verified,
    doc="toy click tasks: 1 for a success, 1 for clicking the element next to the right one"))

PRESS_ENTER = _registered(ProxyReward(
    "press-enter", outcomes.enter_proxy, outcomes.enter_outcome, outcomes.ENTER_LABELS,
    outcomes.verified,
    doc="toy tasks: 1 for a success, 1 for pressing Enter instead of choosing an element"))
