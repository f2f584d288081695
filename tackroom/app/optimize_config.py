"""``optimize.toml``: what ``tackroom optimize`` optimises, on which splits, and how it accepts.

::

    [optimize]
    suite = "toy"
    harness = "som-tools"          # the parent: a harness name or .toml path
    policy = "bundled"             # the agent whose harness is optimised (any policy spec)
    tasks = ["click-*"]            # task patterns, as for `tackroom eval --tasks`
    proposer = "scripted"          # scripted | seeds | a policy spec (openai:M, hf:DIR)
    acceptance = "greedy"          # greedy | threshold | pareto (`tackroom list acceptance`)
    threshold = 0.05               # (threshold) the dev gain a candidate must show
    rounds = 3                     # propose → evaluate on dev → accept, this many times
    candidates = 4                 # candidates proposed per round
    budget = 12                    # dev evaluations of candidates, at most
    seed = 0                       # the proposer's seed (same seed, same scripted edits)

    [splits]                       # seeds of each split; tasks default to [optimize] tasks
    train = "0-9"                  # failures mined here
    dev = "100-119"                # candidates accepted here
    test = "1000000-1000039"       # never seen by the loop: only the final table
    # replay = "2000000-2000019"   # the audit's fresh seeds (default: as many as dev, from 2000000)
    # train_tasks / dev_tasks / test_tasks = [...]  to split by task as well

    [sampling]
    temperature = 0.0
    max_tokens = 256

The splits must not share a (task, seed): the test split is what the audit
trusts, so a seed in two splits is refused.
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Self

from tackroom.app.limits import seed_list
from tackroom.core.errors import ConfigError
from tackroom.core.registry import entry
from tackroom.optimize.proposers import check_proposer

__all__ = ["OptimizeConfig", "SPLITS", "REPLAY_SEED_BASE"]

SPLITS = ("train", "dev", "test")
#: The audit's fresh seeds start here unless ``replay`` names them: no split uses them.
REPLAY_SEED_BASE = 2_000_000


class FlatSettings:
    """A dataclass of flat settings with a ``source`` (where they came from, for errors):
    recorded as a dict (``to_dict``), read back from one with unknown keys refused."""

    source: str

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)  # type: ignore[call-overload]
        d.pop("source")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "config") -> Self:
        known = {f for f in cls.__dataclass_fields__ if f != "source"}  # type: ignore[attr-defined]
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown setting(s) {unknown}", source,
                              f"known: {', '.join(sorted(known))}")
        return cls(**d, source=source)


@dataclass
class OptimizeConfig(FlatSettings):
    """One optimiser run's settings (see the module docstring for the file)."""

    suite: str = "toy"
    harness: str = "som-tools"
    policy: str = "expert"
    tasks: list[str] = field(default_factory=list)
    proposer: str = "scripted"
    acceptance: str = "greedy"
    threshold: float = 0.0
    rounds: int = 3
    candidates: int = 4
    budget: int = 12
    seed: int = 0
    concurrency: int = 0
    base_url: str | None = None
    train: str = "0-9"
    dev: str = "100-119"
    test: str = "1000000-1000039"
    replay: str = ""
    train_tasks: list[str] = field(default_factory=list)
    dev_tasks: list[str] = field(default_factory=list)
    test_tasks: list[str] = field(default_factory=list)
    temperature: float = 0.0
    max_tokens: int = 256
    source: str = "defaults"

    def __post_init__(self) -> None:
        w = self.source
        # The names come from the registry (tackroom.optimize.acceptance, plug-ins).
        entry("acceptance", self.acceptance, where=f"{w} [optimize] acceptance")
        check_proposer(self.proposer, f"{w} [optimize] proposer")
        for name, lo, hi in (("rounds", 1, 1000), ("candidates", 1, 100),
                             ("budget", 1, 100_000), ("concurrency", 0, 4096),
                             ("max_tokens", 1, 1_000_000)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
                raise ConfigError(f"{name} must be an integer from {lo} to {hi}, got {value!r}",
                                  f"{w} {name}", f"e.g. {name} = {max(lo, 1) * 3}")
        if not isinstance(self.threshold, int | float) or not -1 <= self.threshold <= 1:
            raise ConfigError(f"threshold must be a number in [-1, 1], got {self.threshold!r}",
                              f"{w} [optimize] threshold", "e.g. threshold = 0.05")
        # Seeds: readable now, and no (task, seed) in two splits.
        every = (*SPLITS, "replay")
        split_seeds = {s: self.seeds(s) for s in every}
        for i, a in enumerate(every):
            for b in every[i + 1:]:
                shared = set(split_seeds[a]) & set(split_seeds[b])
                tasks_a, tasks_b = self.split_tasks(a), self.split_tasks(b)
                overlap = not tasks_a or not tasks_b or set(tasks_a) & set(tasks_b)
                if shared and overlap:
                    raise ConfigError(
                        f"splits {a} and {b} share seeds {sorted(shared)[:5]} on the same tasks",
                        f"{w} [splits]", "give each split its own seeds (e.g. test = "
                        "\"1000000-1000039\"): the test split must stay unseen")

    def split_tasks(self, split: str) -> list[str]:
        """The task patterns of ``split`` (the ``[optimize]`` tasks unless split by task;
        the audit's ``replay`` split re-runs the dev tasks)."""
        if split == "replay":
            split = "dev"
        return list(getattr(self, f"{split}_tasks") or self.tasks)

    def seeds(self, split: str) -> list[int]:
        """The seeds of ``split`` (``train``, ``dev``, ``test``, or the audit's ``replay``)."""
        if split == "replay" and not self.replay:
            return [REPLAY_SEED_BASE + i for i in range(len(seed_list(self.dev)))]
        return seed_list(getattr(self, split))

    @classmethod
    def from_toml(cls, path: str | Path) -> OptimizeConfig:
        """Read ``optimize.toml`` (sections ``[optimize]``, ``[splits]``, ``[sampling]``)."""
        p = Path(path)
        tables = read_sections(p, ("optimize", "splits", "sampling"), "an optimize.toml")
        flat: dict[str, Any] = {}
        for section, table in tables.items():
            for key, value in table.items():
                if section == "splits" and key in (*SPLITS, "replay") and isinstance(value, list):
                    value = ",".join(str(v) for v in value)
                flat[key] = value
        return cls.from_dict(flat, str(p))


def read_sections(path: Path, sections: tuple[str, ...], what: str) -> dict[str, dict[str, Any]]:
    """The tables of a config file that may hold only ``sections`` (each a TOML table);
    every problem with the file is one :class:`ConfigError` naming it."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError("config file not found", str(path), "check the path") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"not valid TOML: {e}", str(path), "fix the syntax") from None
    except UnicodeDecodeError:
        raise ConfigError("not a UTF-8 text file", str(path), f"give {what}") from None
    unknown = sorted(set(data) - set(sections))
    if unknown:
        raise ConfigError(f"unknown section(s) {unknown}", str(path),
                          "use " + ", ".join(f"[{s}]" for s in sections))
    out: dict[str, dict[str, Any]] = {}
    for section in sections:
        table = data.get(section, {})
        if not isinstance(table, dict):
            raise ConfigError(f"[{section}] must be a table", str(path), f"write [{section}]")
        out[section] = table
    return out
