"""Learned ("proxy") rewards as a training reward, and the outcome verifier that gates them.

``data.reward = "proxy:NAME"`` trains on a registered :class:`ProxyReward`
instead of the environment's verdict: a reward model or a scripted stand-in
for one, which — like every learned reward — may pay for wrong outcomes.
``data.verifier = true`` gates it with the environment's verifier,
r = v(o)·r̂ with v(o) = 1 iff the episode succeeded, so a wrong outcome
earns nothing however the proxy scores it (docs/research.md §6,
docs/lab.md).

Each proxy also labels an episode's *outcome* (``success``, ``near-miss``,
``other`` …), which training logs per step (``outcome/<label>``) so that the
shares a policy reaches can be read from records and compared with what the
tilt model (:mod:`tackroom.analysis.tilt`) predicted.

Built in:

* ``near-miss`` — the toy suite's click tasks: 1 for a success and 1 for a
  click on the element adjacent to the right one (a wrong outcome the proxy
  cannot tell from a success); see :mod:`tackroom.suites.toy.outcomes`.
* ``press-enter`` — the toy suite: 1 for a success and 1 for pressing Enter
  instead of choosing an element (a plausible but wrong answer, labelled
  ``pressed-enter``).

Register another with :func:`register` (in-process; the name then passes
``RLConfig`` validation).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tackroom.core.episode import Episode, Outcome
from tackroom.core.errors import ConfigError
from tackroom.suites.toy import outcomes as toy_outcomes

#: The prefix of ``data.reward`` values that name a proxy.
PREFIX = "proxy:"


def _verified(ep: Episode) -> bool:
    return ep.outcome is Outcome.SUCCESS


@dataclass(frozen=True)
class ProxyReward:
    """A learned / scripted reward r̂(episode) and the outcome labels it is judged by.

    Attributes:
        name: the registry name (``data.reward = "proxy:<name>"``).
        reward: r̂: an episode → a float (finite).
        classify: an episode → its outcome label, one of ``labels``.
        labels: every label, in table order.
        verifier: v(o): whether the outcome is correct (default: the environment's verdict).
        doc: one line on what it pays for.
    """

    name: str
    reward: Callable[[Episode], float]
    classify: Callable[[Episode], str]
    labels: tuple[str, ...]
    verifier: Callable[[Episode], bool] = _verified
    doc: str = ""

    def __call__(self, ep: Episode) -> float:
        return float(self.reward(ep))

    def outcome(self, ep: Episode) -> str:
        return self.classify(ep)

    def gated(self, ep: Episode) -> float:
        """r = v(o)·r̂: the proxy's reward where the verifier accepts the outcome, else 0."""
        return self(ep) if self.verifier(ep) else 0.0


PROXIES: dict[str, ProxyReward] = {}


def register(proxy: ProxyReward) -> ProxyReward:
    """Add ``proxy`` to the registry (replacing one of the same name) and return it."""
    PROXIES[proxy.name] = proxy
    return proxy


register(ProxyReward(
    "near-miss", toy_outcomes.near_miss_proxy, toy_outcomes.outcome, toy_outcomes.LABELS,
    toy_outcomes.verified,
    doc="toy click tasks: 1 for a success, 1 for clicking the element next to the right one"))


register(ProxyReward(
    "press-enter", toy_outcomes.enter_proxy, toy_outcomes.enter_outcome,
    toy_outcomes.ENTER_LABELS, toy_outcomes.verified,
    doc="toy tasks: 1 for a success, 1 for pressing Enter instead of choosing an element"))


def is_proxy(mode: str) -> bool:
    """Whether a ``data.reward`` value names a proxy (``proxy:NAME``)."""
    return isinstance(mode, str) and mode.startswith(PREFIX)


def get_proxy(name: str) -> ProxyReward:
    """The registered proxy ``name`` (with or without the ``proxy:`` prefix).

    Raises:
        ConfigError: no proxy of that name; the message lists the registered ones.
    """
    key = name[len(PREFIX):] if is_proxy(name) else name
    proxy = PROXIES.get(key)
    if proxy is None:
        raise ConfigError(f"unknown proxy reward {key!r}", "data.reward",
                          "use one of: " + ", ".join(f"{PREFIX}{n}" for n in sorted(PROXIES)))
    return proxy
