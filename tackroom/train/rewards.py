"""An episode's training reward, named by ``data.reward`` and looked up in the registry.

Built in here: ``success`` (1 if the episode succeeded, else 0: the solve rate) and
``recorded`` (the environment's own reward). Suites register *proxy* rewards —
learned or scripted stand-ins for a reward model, which may pay for wrong outcomes —
under ``proxy:NAME`` (a :class:`~tackroom.core.rewards.ProxyReward`; the toy suite's
``proxy:near-miss`` and ``proxy:press-enter``, registered by the toy suite's ``rewards``
module).
``data.verifier = true`` gates any of them with the environment's verifier,
r = v(o)·r̂ with v(o) = 1 iff the episode succeeded, so a wrong outcome earns nothing
however the proxy scores it (docs/research.md §6, docs/lab.md).

Each proxy also labels an episode's *outcome* (``success``, ``near-miss``, ``other`` …),
which training logs per step (``outcome/<label>``) so that the shares a policy reaches
can be read from records and compared with what the tilt model
(:mod:`tackroom.analysis.tilt`) predicted.

A plug-in adds a reward with ``register("reward", "proxy:mine", proxy=True)(ProxyReward(…))``
(or a plain ``fn(episode) -> float`` under any name) and an entry point ``reward.mine``.
"""

from __future__ import annotations

from tackroom.core.episode import Episode, Outcome
from tackroom.core.errors import ConfigError
from tackroom.core.registry import entry, names, register
from tackroom.core.rewards import PREFIX, ProxyReward

__all__ = ["PREFIX", "ProxyReward", "is_proxy", "get_proxy", "reward_names", "episode_return"]


@register("reward", "success", summary="1 if the episode succeeded, else 0 (the solve rate)")
def _success(ep: Episode) -> float:
    return 1.0 if ep.outcome is Outcome.SUCCESS else 0.0


@register("reward", "recorded", summary="the environment's own reward (per turn for a critic)",
          per_turn=True)
def _recorded(ep: Episode) -> float:
    return float(ep.reward)


def reward_names() -> list[str]:
    """Every ``data.reward`` value: the built-in rewards first, then the proxies."""
    every = names("reward")
    return [n for n in every if not is_proxy(n)] + [n for n in every if is_proxy(n)]


def is_proxy(mode: str) -> bool:
    """Whether a ``data.reward`` value names a proxy (``proxy:NAME``)."""
    return isinstance(mode, str) and mode.startswith(PREFIX)


def get_proxy(name: str) -> ProxyReward:
    """The registered proxy ``name`` (with or without the ``proxy:`` prefix).

    Raises:
        ConfigError: no proxy of that name; the message lists the registered ones.
    """
    key = name if is_proxy(name) else PREFIX + name
    proxies = [n for n in names("reward") if is_proxy(n)]
    if key not in proxies:
        raise ConfigError(f"unknown proxy reward {key[len(PREFIX):]!r}", "data.reward",
                          "use one of: " + ", ".join(proxies))
    return entry("reward", key).obj


def episode_return(ep: Episode, mode: str, verifier: bool = False) -> float:
    """``ep``'s return under the reward ``mode`` names, gated by the verifier if asked."""
    reward = entry("reward", mode, where="data.reward").obj
    if isinstance(reward, ProxyReward):
        return reward.gated(ep) if verifier else reward(ep)
    r = float(reward(ep))
    return r if not verifier or ep.outcome is Outcome.SUCCESS else 0.0
