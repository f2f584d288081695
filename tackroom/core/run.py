"""A run's configuration: what ``runs.config`` holds, written and read through one class.

Every writer (``tackroom.evaluate``, resume, sealed runs, the trainer's
evaluations) builds a :class:`RunConfig`; every reader (resume, the report,
the sealed-cell table, ``replay``) parses one with :meth:`RunConfig.from_dict`,
which also reads the snapshots older tackroom versions wrote (missing keys
take their defaults; keys it does not know are kept in ``extra``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from tackroom.core.policy import Sampling


@dataclass
class RunConfig:
    """The snapshot of one run's settings, stored with the run.

    Attributes:
        suite: suite name, e.g. ``toy``.
        tasks: the task ids the run covers (patterns already expanded).
        harnesses: harness references as given (names or ``.toml`` paths).
        harness_hashes: harness name → content hash at the start of the run;
            ``resume`` refuses a harness whose hash changed.
        policies: policy specs as given (``expert``, ``hf:DIR``, ``openai:M``).
        policy_ids: spec → the id its episodes are recorded under.
        seeds: the seeds, sorted.
        sampling: sampling parameters shared by every policy.
        concurrency: episodes at a time.
        base_url: the OpenAI-compatible server for ``openai:`` policies.
        timeout: seconds per model call.
        suite_options: keyword options the suite was built with (e.g.
            ``{"unsafe_local": True}``); ``resume`` builds the suite with them.
        manifest / manifest_hash: the sealed manifest's body and hash (sealed runs).
        inexpressible: ``[task key, harness name]`` pairs not run because the
            harness cannot express the task (sealed runs list them).
        train_run: the training run an evaluation belongs to (trainer evaluations).
        extra: keys this version does not know, kept so a rewrite loses nothing.
    """

    suite: str = ""
    tasks: list[str] = field(default_factory=list)
    harnesses: list[str] = field(default_factory=list)
    harness_hashes: dict[str, str] = field(default_factory=dict)
    policies: list[str] = field(default_factory=list)
    policy_ids: dict[str, str] = field(default_factory=dict)
    seeds: list[int] = field(default_factory=list)
    sampling: Sampling = field(default_factory=Sampling)
    concurrency: int = 0
    base_url: str | None = None
    timeout: float = 60.0
    suite_options: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, Any] | None = None
    manifest_hash: str | None = None
    inexpressible: list[list[str]] = field(default_factory=list)
    train_run: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able snapshot (``extra`` merged back in at the top level)."""
        out: dict[str, Any] = dict(self.extra)
        for f in fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            out[f.name] = value.to_dict() if isinstance(value, Sampling) else value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | str | None) -> RunConfig:
        """Parse a stored snapshot (a dict, or its JSON text); ``None`` gives the defaults."""
        if data is None:
            return cls()
        if isinstance(data, str):
            data = json.loads(data) if data.strip() else {}
        known = {f.name for f in fields(cls)} - {"extra"}
        kwargs: dict[str, Any] = {k: v for k, v in data.items() if k in known and v is not None}
        if isinstance(kwargs.get("sampling"), Mapping):
            s = kwargs["sampling"]
            kwargs["sampling"] = Sampling(**{f.name: s[f.name] for f in fields(Sampling)
                                             if f.name in s})
        for name in ("tasks", "harnesses", "policies", "seeds", "inexpressible"):
            if name in kwargs:
                kwargs[name] = list(kwargs[name])
        for name in ("harness_hashes", "policy_ids", "suite_options"):
            if name in kwargs:
                kwargs[name] = dict(kwargs[name])
        extra = {k: v for k, v in data.items() if k not in known}
        return cls(**kwargs, extra=extra)

    @property
    def sealed(self) -> bool:
        """Whether the run runs the cells of a sealed manifest."""
        return bool(self.manifest_hash and self.manifest)
