"""Limits on what a run may ask for, checked before anything runs or is built.

Seeds, sampling, concurrency, timeouts and the grid's size: a careless
``--seeds 0-99999999999`` must be one line, not a process the kernel kills. Every
number is checked here, for the CLI and the Python API alike.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from typing import Any

from tackroom.core.errors import ConfigError
from tackroom.core.policy import Sampling

__all__ = ["MAX_CONCURRENCY", "MAX_EPISODES", "MAX_SEED", "MAX_SEEDS", "check_grid_size",
           "check_run_options", "check_sampling", "parse_seeds", "seed_list"]


#: At most this many seeds in a run, each in ``0 … MAX_SEED``.
MAX_SEEDS = 1_000_000
MAX_SEED = 2**31 - 1
#: Grids larger than this need an explicit ``max_episodes`` (``--max-episodes``).
MAX_EPISODES = 1_000_000
#: Most episodes at a time.
MAX_CONCURRENCY = 4096


def _too_many_seeds(n: int | str) -> ConfigError:
    return ConfigError(f"too many seeds ({n})", "--seeds",
                       f"give at most {MAX_SEEDS} seeds, each from 0 to {MAX_SEED}")


def _check_seed(seed: int) -> int:
    if not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"seed {seed} is out of range", "--seeds",
                          f"each seed must be from 0 to {MAX_SEED}")
    return seed


def seed_list(seeds: Iterable[int] | str) -> list[int]:
    """Seeds as a sorted list: any iterable of ints, or text such as ``0-9`` / ``0,3,7``.

    Raises:
        ConfigError: no seeds, more than :data:`MAX_SEEDS`, or one outside ``0 … 2**31-1``.
    """
    if isinstance(seeds, str):
        return parse_seeds(seeds)
    if isinstance(seeds, range) and len(seeds) > MAX_SEEDS:
        raise _too_many_seeds(len(seeds))
    try:
        taken = list(itertools.islice(iter(seeds), MAX_SEEDS + 1))
        out = sorted({_check_seed(_int(s)) for s in taken})
    except (TypeError, ValueError):
        raise ConfigError(f"cannot read seeds {seeds!r}", "seeds",
                          "give integers, e.g. range(10)") from None
    if len(taken) > MAX_SEEDS:
        raise _too_many_seeds(f"more than {MAX_SEEDS}")
    if not out:
        raise ConfigError("no seeds given", "--seeds", "e.g. --seeds 0-9")
    return out


def _int(value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(value)
    return int(value)


def parse_seeds(text: str) -> list[int]:
    """``0-9``, ``0,3,7`` or ``0-4,10`` → sorted unique seeds (at most :data:`MAX_SEEDS`)."""
    seeds: set[int] = set()
    ranges: list[tuple[int, int]] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            if "-" in part:
                a, b = part.split("-", 1)
                lo, hi = int(a), int(b)
                if hi < lo:
                    raise ValueError
                ranges.append((lo, hi))
            else:
                seeds.add(int(part))
    except ValueError:
        raise ConfigError(f"cannot read seeds {text!r}", "--seeds",
                          "write a range or list, e.g. 0-9 or 0,3,7") from None
    # Bounded before a range is expanded: 0-99999999999 must not fill the memory.
    if len(seeds) + sum(hi - lo + 1 for lo, hi in ranges) > MAX_SEEDS:
        raise _too_many_seeds(len(seeds) + sum(hi - lo + 1 for lo, hi in ranges))
    for lo, hi in ranges:
        _check_seed(lo)
        _check_seed(hi)
        seeds.update(range(lo, hi + 1))
    for s in seeds:
        _check_seed(s)
    if not seeds:
        raise ConfigError("no seeds given", "--seeds", "e.g. --seeds 0-9")
    return sorted(seeds)


def check_sampling(sampling: Sampling) -> Sampling:
    """``sampling`` if every parameter is in range, else a ConfigError naming the option."""
    t, p, m = sampling.temperature, sampling.top_p, sampling.max_tokens
    if not _number(t) or not 0.0 <= t <= 2.0:
        raise ConfigError(f"temperature {t!r} is out of range", "--temperature",
                          "allowed: 0 to 2")
    if not _number(p) or not 0.0 < p <= 1.0:
        raise ConfigError(f"top_p {p!r} is out of range", "--top-p", "allowed: (0, 1]")
    if not isinstance(m, int) or isinstance(m, bool) or not 1 <= m <= 10_000_000:
        raise ConfigError(f"max_tokens {m!r} is out of range", "--max-tokens",
                          "allowed: an integer, at least 1 (at most 10000000)")
    k = sampling.top_k
    if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= 10_000_000:
        raise ConfigError(f"top_k {k!r} is out of range", "sampling.top_k",
                          "allowed: an integer, 0 (off) or the number of tokens to keep")
    if sampling.seed is not None and (not isinstance(sampling.seed, int)
                                      or not 0 <= sampling.seed <= MAX_SEED):
        raise ConfigError(f"sampling seed {sampling.seed!r} is out of range", "sampling.seed",
                          f"allowed: 0 to {MAX_SEED}")
    return sampling


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_run_options(concurrency: int, timeout: float) -> None:
    """Concurrency in ``0 … 4096`` (0 = the default) and a finite timeout above 0."""
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) \
            or not 0 <= concurrency <= MAX_CONCURRENCY:
        raise ConfigError(f"concurrency {concurrency!r} is out of range", "--concurrency",
                          f"allowed: 0 to {MAX_CONCURRENCY} (0 = the suite's default)")
    if not _number(timeout) or not 0 < timeout <= 7 * 86400:
        raise ConfigError(f"timeout {timeout!r} is out of range", "--timeout",
                          "allowed: seconds per model call, more than 0 (at most 604800)")


def check_grid_size(n: int, max_episodes: int | None) -> None:
    """``n`` episodes fit under ``max_episodes`` (default :data:`MAX_EPISODES`)."""
    if max_episodes is not None and (not isinstance(max_episodes, int)
                                     or isinstance(max_episodes, bool) or max_episodes < 1):
        raise ConfigError(f"max_episodes {max_episodes!r} is out of range", "--max-episodes",
                          "allowed: an integer, at least 1")
    limit = MAX_EPISODES if max_episodes is None else max_episodes
    if n > limit:
        raise ConfigError(
            f"the grid has {n} episodes, more than the limit of {limit}",
            "--max-episodes / max_episodes",
            f"choose fewer tasks, harnesses, policies or seeds, or raise the limit with "
            f"--max-episodes {n} (max_episodes={n})")
