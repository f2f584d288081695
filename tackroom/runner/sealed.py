"""Sealed evaluation: a manifest fixed in advance, run whole, reported whole.

``tackroom seal`` writes a :class:`Manifest` — policies (checkpoints) ×
evaluation harnesses (each with its content hash; those held out of training
marked) × tasks × seeds, plus sampling, suite, creation time and tackroom
version — as JSON with the SHA-256 of its canonical form stored inside.
``tackroom eval --sealed MANIFEST`` refuses a manifest whose content no
longer matches its hash, or whose harness files changed since sealing; it
runs every cell (no filters), records the run with the manifest hash, and the
report shows every cell of the manifest: cells a harness cannot express and
cells lost to infrastructure errors are shown apart, none is dropped.

Why a hash of the *canonical* JSON: the file may be re-indented or its keys
reordered by an editor or a VCS and still be the same manifest; any change of
content — one seed, one task, one harness hash — is a different manifest.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tackroom.core.episode import Outcome
from tackroom.core.errors import ConfigError
from tackroom.core.run import RunConfig
from tackroom.harness.spec import HarnessSpec, load_harness

__all__ = ["FORMAT", "Manifest", "ManifestHarness", "SealedCell", "canonical_hash",
           "sealed_config", "sealed_report"]

#: Written into every manifest, so a future layout can be told apart.
FORMAT = "tackroom-sealed-manifest/1"


def canonical_hash(body: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of ``body`` as canonical JSON: sorted keys, no spaces, UTF-8."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ManifestHarness:
    """An evaluation harness: how to load it (``ref``), its name and its hash at sealing."""

    ref: str
    name: str
    hash: str
    held_out: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"ref": self.ref, "name": self.name, "hash": self.hash,
                "held_out": self.held_out}


@dataclass(frozen=True)
class Manifest:
    """What a sealed evaluation runs: policies × harnesses × tasks × seeds.

    Attributes:
        suite: the suite name.
        tasks: task ids in the suite (globs are expanded at sealing).
        harnesses: evaluation harnesses with their hashes; ``held_out`` marks
            those not trained under.
        policies: policy specs (``expert``, ``hf:CHECKPOINT``, ``openai:MODEL`` …).
        seeds: the seeds of every (policy, harness, task).
        sampling: sampling parameters (part of every episode id).
        train_harnesses: the harnesses the checkpoints were trained under, when given.
        created_at: ISO time of sealing; tackroom_version: the version that sealed it.
    """

    suite: str
    tasks: tuple[str, ...]
    harnesses: tuple[ManifestHarness, ...]
    policies: tuple[str, ...]
    seeds: tuple[int, ...]
    sampling: dict[str, Any] = field(default_factory=dict)
    train_harnesses: tuple[str, ...] = ()
    created_at: str = ""
    tackroom_version: str = ""

    # -- identity ------------------------------------------------------------------------
    def body(self) -> dict[str, Any]:
        """The content the hash covers (everything in the file but the hash)."""
        return {
            "format": FORMAT, "suite": self.suite, "tasks": list(self.tasks),
            "harnesses": [h.to_dict() for h in self.harnesses],
            "policies": list(self.policies), "seeds": list(self.seeds),
            "sampling": dict(self.sampling), "train_harnesses": list(self.train_harnesses),
            "created_at": self.created_at, "tackroom_version": self.tackroom_version,
        }

    @property
    def hash(self) -> str:
        """SHA-256 of the canonical JSON of :meth:`body` (64 hex digits)."""
        return canonical_hash(self.body())

    @property
    def n_cells(self) -> int:
        """Episodes the manifest names: policies × harnesses × tasks × seeds."""
        return len(self.policies) * len(self.harnesses) * len(self.tasks) * len(self.seeds)

    @property
    def held_out(self) -> list[str]:
        return [h.name for h in self.harnesses if h.held_out]

    # -- files ---------------------------------------------------------------------------
    def to_json(self) -> str:
        """The file's text: the body plus ``manifest_hash``, indented for people."""
        return json.dumps({**self.body(), "manifest_hash": self.hash}, indent=2,
                          ensure_ascii=False) + "\n"

    def write(self, path: str | Path) -> Path:
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(self.to_json(), encoding="utf-8")
        return out

    @classmethod
    def load(cls, path: str | Path) -> Manifest:
        """Read a manifest file and check its content against its stored hash.

        Raises:
            ConfigError: unreadable, not a manifest, or tampered with (the content
                no longer has the hash written in it).
        """
        where = str(path)
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as e:
            raise ConfigError(f"cannot read the manifest: {e.strerror}", where,
                              "write one with `tackroom seal … --out FILE`") from None
        except ValueError as e:
            raise ConfigError(f"the manifest is not valid JSON ({e})", where,
                              "restore it, or seal a new one with `tackroom seal`") from None
        if not isinstance(raw, dict) or "manifest_hash" not in raw:
            raise ConfigError("not a sealed manifest (no manifest_hash)", where,
                              "write one with `tackroom seal … --out FILE`")
        stored = raw.pop("manifest_hash")
        actual = canonical_hash(raw)
        if stored != actual:
            raise ConfigError(f"the manifest was changed after sealing (its content hashes to "
                              f"{actual[:12]}…, the file says {str(stored)[:12]}…)", where,
                              "restore the sealed file, or seal a new manifest")
        return cls.from_dict(raw, where)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "manifest") -> Manifest:
        """A manifest from its body (as in a file or a run's config snapshot)."""
        if d.get("format") != FORMAT:
            raise ConfigError(f"unknown manifest format {d.get('format')!r}", where,
                              f"this tackroom reads {FORMAT}")
        try:
            return cls(
                suite=str(d["suite"]), tasks=tuple(str(t) for t in d["tasks"]),
                harnesses=tuple(ManifestHarness(str(h["ref"]), str(h["name"]), str(h["hash"]),
                                                bool(h.get("held_out", False)))
                                for h in d["harnesses"]),
                policies=tuple(str(p) for p in d["policies"]),
                seeds=tuple(int(s) for s in d["seeds"]), sampling=dict(d["sampling"]),
                train_harnesses=tuple(str(h) for h in d.get("train_harnesses") or ()),
                created_at=str(d.get("created_at", "")),
                tackroom_version=str(d.get("tackroom_version", "")))
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"malformed manifest ({type(e).__name__}: {e})", where,
                              "seal a new one with `tackroom seal`") from None

    # -- building and checking -------------------------------------------------------------
    @classmethod
    def seal(cls, *, suite: str, tasks: Sequence[str], harnesses: Sequence[tuple[str, HarnessSpec]],
             policies: Sequence[str], seeds: Sequence[int], sampling: Mapping[str, Any],
             held_out: Iterable[str] = (), train_harnesses: Sequence[str] = ()) -> Manifest:
        """A new manifest, stamped with the time and tackroom version.

        ``harnesses`` are ``(ref, loaded spec)`` pairs. A harness is held out when
        its name (or ref) is in ``held_out``, or — when ``train_harnesses`` is given
        — when it is not among them.
        """
        from tackroom.core.version import __version__

        explicit = set(held_out)
        trained = set(train_harnesses)
        hs = []
        for ref, spec in harnesses:
            named = {ref, spec.name}
            out = bool(named & explicit) or (bool(trained) and not named & trained)
            hs.append(ManifestHarness(ref, spec.name, spec.hash, out))
        both = sorted(explicit & trained)
        if both:
            raise ConfigError(f"harness {both[0]!r} is both held out and trained under",
                              "--held-out", "drop it from --held-out or from --train-harness")
        unknown = sorted(explicit - {n for ref, s in harnesses for n in (ref, s.name)})
        if unknown:
            raise ConfigError(f"held-out harness {unknown[0]!r} is not an evaluation harness",
                              "--held-out", "name one of the --harness harnesses")
        if not tasks or not hs or not policies or not seeds:
            raise ConfigError("a manifest needs at least one task, harness, policy and seed",
                              "tackroom seal", "give --tasks, --harness, --policy and --seeds")
        return cls(suite=suite, tasks=tuple(dict.fromkeys(tasks)), harnesses=tuple(hs),
                   policies=tuple(dict.fromkeys(policies)),
                   seeds=tuple(sorted(set(int(s) for s in seeds))), sampling=dict(sampling),
                   train_harnesses=tuple(train_harnesses),
                   created_at=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                   tackroom_version=__version__)

    def load_harnesses(self) -> list[HarnessSpec]:
        """The evaluation harnesses as they are now; each must still have its sealed hash.

        Raises:
            ConfigError: a harness file changed since sealing (names the harness).
        """
        specs = []
        for h in self.harnesses:
            spec = load_harness(h.ref)
            if spec.hash != h.hash:
                raise ConfigError(
                    f"harness {h.name!r} changed since the manifest was sealed (was {h.hash}, "
                    f"now {spec.hash})", spec.source,
                    "restore the harness file, or seal a new manifest")
            specs.append(spec)
        return specs


# ---------------------------------------------------------------------------
# What a sealed run records, and the per-cell table its report shows
# ---------------------------------------------------------------------------

def sealed_config(manifest: Manifest, policy_ids: Mapping[str, str],
                  inexpressible: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """The keys a sealed run adds to its config snapshot.

    ``policy_ids`` maps each manifest policy spec to the id its episodes carry;
    ``inexpressible`` lists ``(task key, harness name)`` pairs that are not run.
    """
    return {"manifest": manifest.body(), "manifest_hash": manifest.hash,
            "policy_ids": dict(policy_ids),
            "inexpressible": sorted([t, h] for t, h in set(inexpressible))}


@dataclass
class SealedCell:
    """One (policy, harness, task) of a manifest: its seeds' final outcomes, counted."""

    policy: str
    harness: str
    task: str
    held_out: bool
    seeds: int
    expressible: bool = True
    success: int = 0
    failure: int = 0
    infra: int = 0
    missing: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def sealed_report(run_id: str, manifest_hash: str | None, config: RunConfig,
                  rows: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Every cell of a sealed run's manifest with its outcome counts, as plain data.

    ``rows`` are the run's episode rows; only each seed's latest attempt counts.
    A cell's seeds are split into success, failure (also budget and timeout),
    infra (an ``infra_error`` final attempt: not scored) and missing (not
    recorded, e.g. an interrupted run); a pair the harness cannot express is
    flagged, never counted as a failure. ``None`` for a run that is not sealed.
    """
    body = config.manifest
    if not manifest_hash or not isinstance(body, Mapping):
        return None
    manifest = Manifest.from_dict(body, f"run {run_id}")
    policy_ids = config.policy_ids
    cannot = {(t, h) for t, h in config.inexpressible}
    final: dict[tuple[str, str, str, int], tuple[int, str]] = {}
    for r in rows:
        key = (r["policy"], r["harness"], r["task"], int(r["seed"]))
        attempt = int(r.get("attempt") or 0)
        if key not in final or attempt > final[key][0]:
            final[key] = (attempt, r["outcome"])
    cells: list[SealedCell] = []
    for spec in manifest.policies:
        pid = policy_ids.get(spec, spec)
        for h in manifest.harnesses:
            for task_id in manifest.tasks:
                task = f"{manifest.suite}/{task_id}"
                cell = SealedCell(spec, h.name, task, h.held_out, len(manifest.seeds))
                if (task, h.name) in cannot:
                    cell.expressible = False
                    cells.append(cell)
                    continue
                for seed in manifest.seeds:
                    outcome = final.get((pid, h.name, task, seed), (0, None))[1]
                    if outcome is None:
                        cell.missing += 1
                    elif outcome == Outcome.SUCCESS:
                        cell.success += 1
                    elif outcome == Outcome.INFRA_ERROR:
                        cell.infra += 1
                    else:
                        cell.failure += 1
                cells.append(cell)
    expressible = [c for c in cells if c.expressible]
    totals = {
        "cells": len(cells), "episodes": manifest.n_cells,
        "success": sum(c.success for c in expressible),
        "failure": sum(c.failure for c in expressible),
        "infra": sum(c.infra for c in expressible),
        "missing": sum(c.missing for c in expressible),
        "inexpressible_cells": len(cells) - len(expressible),
        "inexpressible_episodes": sum(c.seeds for c in cells if not c.expressible),
    }
    return {
        "run_id": run_id, "manifest_hash": manifest_hash,
        "verified": manifest.hash == manifest_hash,
        "suite": manifest.suite, "policies": list(manifest.policies),
        "harnesses": [h.to_dict() for h in manifest.harnesses],
        "held_out": manifest.held_out, "train_harnesses": list(manifest.train_harnesses),
        "n_tasks": len(manifest.tasks), "seeds": list(manifest.seeds),
        "created_at": manifest.created_at, "tackroom_version": manifest.tackroom_version,
        "totals": totals, "cells": [c.to_dict() for c in cells],
    }
