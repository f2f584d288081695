"""The contract of a *proxy* reward: a learned or scripted r̂(episode) and the outcomes it is judged by.

Suites register their proxies with the registry under kind ``reward`` and the name a
config writes, ``proxy:NAME`` (``data.reward = "proxy:near-miss"``); the trainer and the
tilt model (:mod:`tackroom.analysis.tilt`) look them up there. This class lives in core so
that a suite can build one without importing the trainer, and the trainer can use one
without importing the suite.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tackroom.core.episode import Episode, Outcome

__all__ = ["PREFIX", "ProxyReward"]

#: The prefix of ``data.reward`` values (and of registry names) that name a proxy.
PREFIX = "proxy:"


def _verified(ep: Episode) -> bool:
    return ep.outcome is Outcome.SUCCESS


@dataclass(frozen=True)
class ProxyReward:
    """A learned / scripted reward r̂(episode) and the outcome labels it is judged by.

    Attributes:
        name: its name without the prefix (``data.reward = "proxy:<name>"``).
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
        """``ep``'s outcome label (one of :attr:`labels`)."""
        return self.classify(ep)

    def gated(self, ep: Episode) -> float:
        """r = v(o)·r̂: the proxy's reward where the verifier accepts the outcome, else 0."""
        return self(ep) if self.verifier(ep) else 0.0
