"""``tackroom delegate fit``: a decision model and its thresholds, written as a harness.

From recorded decision points (a run under a harness whose ``[delegation]`` slot
records them), :func:`fit_decision_model` trains a decision model on one split of the
episodes, fits τ_c per choice type on the other (or one τ for all types), saves the
model beside the output harness and writes the harness: the base harness extended by
a ``[delegation]`` slot that names the model, pins its hash and holds the thresholds.
A delegating harness is an ordinary harness with its own hash.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tackroom.core.errors import ConfigError
from tackroom.core.registry import entry
from tackroom.delegation.data import RecordedPoint, labelled, recorded_points, split_by_episode
from tackroom.delegation.thresholds import Scored, ThresholdFit, fit_thresholds
from tackroom.delegation.training import train_model
from tackroom.harness.spec import BUILTIN_DIR, find_harness, load_harness
from tackroom.policies.delegation.models import model_hash

#: What a decision model is trained on: every labelled state, only the states right
#: after a mistake, or every state with those weighted up (``post_mistake_weight``).
TRAIN_ON = ("all", "post-mistake", "weighted")


@dataclass
class TypeReport:
    """One choice type of a fit: data, isolated accuracy on validation, the τ fitted."""

    type: str
    n_train: int
    n_val: int
    accuracy: float | None        # argmax p_D == expert on the validation points
    threshold: ThresholdFit | None


@dataclass
class FitResult:
    """What :func:`fit_decision_model` wrote and measured."""

    harness: Path
    model_dir: Path
    model_hash: str
    kind: str
    train_on: str
    thresholds: dict[str, float]
    types: list[TypeReport] = field(default_factory=list)
    n_train: int = 0
    n_val: int = 0


def fit_decision_model(store: str | Path, base: str, out: str | Path, *, kind: str = "logistic",
                   train_on: str = "all", target_precision: float = 0.9,
                   per_type: bool = True, points: Sequence[str] = (), runs: Sequence[str] = (),
                   validation: float = 0.25, min_support: int = 5,
                   post_mistake_weight: float = 4.0, seed: int = 0,
                   options: dict[str, Any] | None = None, name: str | None = None) -> FitResult:
    """Train a decision model on ``store``'s recorded points and write the delegating harness.

    Args:
        store: the record store holding runs under a harness that records decision points.
        base: the harness the output extends (a name or ``.toml`` path); its
            ``[delegation] points`` are used unless ``points`` names them.
        out: the harness file to write; the model goes to ``<out stem>.decision/`` beside it.
        kind: a registered decision model kind (``logistic``, ``gbm``, ``lm``, …).
        train_on: ``all``, ``post-mistake`` (only states right after a mistake) or
            ``weighted`` (those weighted by ``post_mistake_weight``).
        target_precision: the precision each type's τ must reach on validation.
        per_type: one τ per choice type (``False``: one τ shared by every type).
        runs: the runs to read (default every run in ``store``).
        validation: the share of episodes held out for thresholds and accuracy.
        options: the model kind's own options (e.g. ``{"epochs": 3}`` for ``lm``).
    """
    entry("decision_model", kind, where="--model")  # the registered kinds, named if not one
    if train_on not in TRAIN_ON:
        raise ConfigError(f"unknown training set {train_on!r}", "--train-on",
                          f"choose one of: {', '.join(TRAIN_ON)}")
    base_spec = load_harness(base)
    if base_spec.delegation is not None and "model" in base_spec.delegation:
        raise ConfigError(f"harness {base_spec.name!r} already has a decision model", "--harness",
                          "extend the harness that recorded the points (no model)")
    declared = list(points) or list((base_spec.delegation or {}).get("points", []))
    if not declared:
        raise ConfigError(f"harness {base_spec.name!r} declares no decision points",
                          "--harness", "give --points click,submit, or a base harness with "
                          "[delegation] points")
    if not Path(store).is_file():
        raise ConfigError(f"no record store at {store}", "--db",
                          "record decision points first: tackroom eval --harness H where H "
                          "has [delegation] points = [...]")
    recorded = [p for p in labelled(recorded_points(store, runs)) if p.type in declared]
    if not recorded:
        raise ConfigError("no labelled decision points recorded in these runs", str(store),
                          "run tackroom eval under a harness with [delegation] points on "
                          "tasks that have a scripted expert (it labels each point)")
    train, val = split_by_episode(recorded, validation)
    if not train or not val:
        raise ConfigError(f"{len(recorded)} labelled points from too few episodes to split",
                          str(store), "record more episodes (more seeds)")
    examples = _examples(train, train_on, post_mistake_weight)
    if not examples:
        raise ConfigError("no training points after a mistake in these runs", "--train-on",
                          "record episodes of a policy that makes mistakes, or use --train-on "
                          "all")
    model = train_model(kind, examples, seed=seed, **(options or {}))
    out = Path(out)
    model_dir = out.with_name(out.stem + ".decision")
    if model_dir.exists():
        shutil.rmtree(model_dir)
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    model.save(model_dir)
    digest = model_hash(model_dir)
    scored = [_score(model, p) for p in val]
    fits = fit_thresholds(scored, target_precision, min_support=min_support,
                          per_type=per_type)
    by_type = {f.type: f for f in fits}
    thresholds: dict[str, float] = {}
    for t in declared:
        fit = by_type.get(t if per_type else "*")
        if fit is not None and fit.tau is not None:
            thresholds[t] = fit.tau
    types = []
    for t in declared:
        v = [s for s, p in zip(scored, val, strict=True) if p.type == t]
        acc = sum(s.best == s.label for s in v) / len(v) if v else None
        types.append(TypeReport(t, sum(p.type == t for p in train), len(v), acc,
                                by_type.get(t if per_type else "*")))
    _write_harness(out, base, base_spec.name, name, declared, model_dir, digest, thresholds,
                   kind, train_on, per_type, target_precision)
    return FitResult(out, model_dir, digest, kind, train_on, thresholds, types, len(train),
                     len(val))


def _examples(train: list[RecordedPoint], train_on: str, weight: float) -> list[Any]:
    if train_on == "post-mistake":
        return [p.example() for p in train if p.after_mistake]
    if train_on == "weighted":
        return [p.example(weight if p.after_mistake else 1.0) for p in train]
    return [p.example() for p in train]


def _score(model: Any, p: RecordedPoint) -> Scored:
    probs = model.predict(p.point)
    assert p.expert is not None
    return Scored(p.type, probs, p.expert, [c["action"] is not None for c in p.point["choices"]])


def _write_harness(out: Path, base: str, base_name: str, name: str | None,
                   points: list[str], model_dir: Path, digest: str,
                   thresholds: dict[str, float], kind: str, train_on: str, per_type: bool,
                   target: float) -> None:
    base_path = find_harness(base)
    # A shipped harness is extended by name; a file by its path relative to the output.
    builtin = base_path.parent.resolve() == BUILTIN_DIR.resolve()
    ref = base_name if builtin else os.path.relpath(base_path.resolve(), out.parent.resolve())
    name = name or out.stem
    fitted = "per choice type" if per_type else "one for every type"
    lines = [
        f"# Written by `tackroom delegate fit`: a {kind} decision model trained on {train_on} "
        "states;",
        f"# thresholds {fitted}, fitted for precision {target:g} on held-out episodes.",
        f"name = {_q(name)}",
        f"extends = {_q(ref)}",
        f"description = {_q(f'{base_name} with a {kind} decision model taking over choices')}",
        "",
        "[delegation]",
        "points = [" + ", ".join(_q(p) for p in points) + "]",
        f"model = {_q(os.path.relpath(model_dir.resolve(), out.parent.resolve()))}",
        f"model_hash = {_q(digest)}",
        'mode = "threshold"',
        "max_takeovers = 0",
        "",
        "[delegation.thresholds]",
        *[f"{t} = {tau!r}" for t, tau in thresholds.items()],
        "",
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    load_harness(str(out))  # what was written loads, or this is a bug to see now


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
