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
trusts, so a seed in two splits is refused. Every key is declared once, on the
settings base (:mod:`tackroom.core.settings`): its section, meaning and limits;
``OptimizeConfig.key_table()`` is the table in docs/optimize.md.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

from tackroom.app.limits import seed_list
from tackroom.core.errors import ConfigError
from tackroom.core.registry import names
from tackroom.core.settings import Settings, setting
from tackroom.optimize.proposers import check_proposer

__all__ = ["OptimizeConfig", "SPLITS", "REPLAY_SEED_BASE", "LoopSettings", "read_sections"]

SPLITS = ("train", "dev", "test")
#: The audit's fresh seeds start here unless ``replay`` names them: no split uses them.
REPLAY_SEED_BASE = 2_000_000


class LoopSettings(Settings):
    """A loop's settings (optimiser, Self-HPO): the settings base, plus ``source`` (where
    they came from, for messages and for settings built in Python by another loop) and
    seed splits that a file may write as lists (``train = [0, 1, 2]``)."""

    #: The keys that hold seeds (a list in a file is read as ``"0,1,2"``).
    SEED_KEYS: ClassVar[tuple[str, ...]] = ()

    source: str

    def __post_init__(self) -> None:
        if not hasattr(self, "_sources") and self.source != "defaults":
            # Built in Python by a caller that says where the values came from.
            self._sources = {name: self.source for name in self.specs()}
        super().__post_init__()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "config") -> Self:
        """From sectioned (``{"splits": {"dev": "100-119"}}``) and/or flat keys, as a file
        or a run's recorded settings hold them; errors name ``where``."""
        values, sources = cls._collect(cls._seeds_as_text(data), where)
        values["source"] = where
        return cls._build(values, sources)

    @classmethod
    def _seeds_as_text(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        def text(key: str, value: Any) -> Any:
            if key in cls.SEED_KEYS and isinstance(value, list):
                return ",".join(str(v) for v in value)
            return value

        return {k: {kk: text(kk, vv) for kk, vv in v.items()} if isinstance(v, Mapping)
                else text(k, v) for k, v in data.items()}

    def seeds(self, split: str) -> list[int]:
        """The seeds of ``split``."""
        return seed_list(getattr(self, split))

    @classmethod
    def _read(cls, path: str | Path | None, overrides: Sequence[str], what: str) -> Self:
        """The file's sections (each problem with the file one clear line), then overrides."""
        data: dict[str, Any] = {}
        where = cls.LABEL
        if path is not None:
            where = str(path)
            data = read_sections(Path(path), cls.SECTIONS, what)
        values, sources = cls._collect(cls._seeds_as_text(data), where)
        for item in overrides:
            name, value = cls.parse_override(item)
            values[name], sources[name] = value, f"override {item!r}"
        values["source"] = where
        return cls._build(values, sources)


@dataclass
class OptimizeConfig(LoopSettings):
    """One optimiser run's settings (see the module docstring for the file)."""

    SECTIONS = ("optimize", "splits", "sampling")
    LABEL = "OptimizeConfig"
    DOCS = "docs/optimize.md"
    SEED_KEYS = (*SPLITS, "replay")

    suite: str = setting("toy", "optimize", "the suite")
    harness: str = setting("som-tools", "optimize", "the parent: a harness name or .toml path")
    policy: str = setting("expert", "optimize",
                          "the agent whose harness is optimised (a policy spec)")
    tasks: list[str] = setting(None, "optimize", "task patterns, as for `tackroom eval --tasks`",
                               factory=list)
    proposer: str = setting("scripted", "optimize", "scripted, seeds, or a policy spec (the "
                            "llm proposer)")
    acceptance: str = setting("greedy", "optimize", "the acceptance rule",
                              choices=lambda: names("acceptance"))
    threshold: float = setting(0.0, "optimize", "(threshold) the dev gain a candidate must "
                               "show", bounds="[-1, 1]", example="0.05")
    rounds: int = setting(3, "optimize", "propose → evaluate on dev → accept, this many times",
                          bounds="[1, 1000]", example="3")
    candidates: int = setting(4, "optimize", "candidates proposed per round",
                              bounds="[1, 100]", example="4")
    budget: int = setting(12, "optimize", "dev evaluations of candidates, at most",
                          bounds="[1, 100000]", example="12")
    seed: int = setting(0, "optimize", "the proposer's seed (same seed, same scripted edits)")
    concurrency: int = setting(0, "optimize", "episodes at once (0: the suite's default)",
                               bounds="[0, 4096]", example="8")
    base_url: str | None = setting(None, "optimize", "the server of openai: policies")
    train: str = setting("0-9", "splits", "seeds where failures are mined")
    dev: str = setting("100-119", "splits", "seeds where candidates are accepted")
    test: str = setting("1000000-1000039", "splits",
                        "seeds never seen by the loop: only the final table")
    replay: str = setting("", "splits", "the audit's fresh seeds (default: as many as dev, "
                          "from 2000000)")
    train_tasks: list[str] = setting(None, "splits", "the train split's tasks (default: "
                                     "[optimize] tasks)", factory=list)
    dev_tasks: list[str] = setting(None, "splits", "the dev split's tasks", factory=list)
    test_tasks: list[str] = setting(None, "splits", "the test split's tasks", factory=list)
    temperature: float = setting(0.0, "sampling", "sampling temperature of the evaluations",
                                 bounds=">= 0")
    max_tokens: int = setting(256, "sampling", "completion tokens per turn",
                              bounds="[1, 1000000]", example="256")
    source: str = "defaults"

    def check_together(self) -> None:
        check_proposer(self.proposer, f"{self.where('proposer')} [optimize] proposer")
        # Seeds: readable now, and no (task, seed) in two splits.
        every = (*SPLITS, "replay")
        split_seeds = {s: self.seeds(s) for s in every}
        for i, a in enumerate(every):
            for b in every[i + 1:]:
                shared = set(split_seeds[a]) & set(split_seeds[b])
                tasks_a, tasks_b = self.split_tasks(a), self.split_tasks(b)
                overlap = not tasks_a or not tasks_b or set(tasks_a) & set(tasks_b)
                if shared and overlap:
                    where = next((self._sources[k] for k in (b, a) if k in self._sources),
                                 self.where(a))
                    raise ConfigError(
                        f"splits {a} and {b} share seeds {sorted(shared)[:5]} on the same tasks",
                        f"{where} [splits]", "give each split its own seeds (e.g. "
                        "test = \"1000000-1000039\"): the test split must stay unseen")

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
    def from_toml(cls, path: str | Path | None = None, overrides: Sequence[str] = ()) -> Self:
        """Read ``optimize.toml`` (sections ``[optimize]``, ``[splits]``, ``[sampling]``),
        then ``section.key=value`` overrides."""
        return cls._read(path, overrides, "an optimize.toml")


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
