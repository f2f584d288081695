"""Sealing an evaluation: a manifest of every cell, fixed and hashed before anything runs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from tackroom.app.limits import check_sampling, seed_list
from tackroom.core.errors import ConfigError
from tackroom.core.policy import Sampling
from tackroom.harness.spec import load_harness
from tackroom.policies import check_policy_spec
from tackroom.records.export import check_output_file
from tackroom.runner.sealed import Manifest
from tackroom.suites import get_suite, select_tasks


def seal(out: str | Path | None = None, *, suite: str = "toy", tasks: Sequence[str] | None = None,
         harnesses: Sequence[str] | None = None, policies: Sequence[str] = ("expert",),
         seeds: Iterable[int] | str = range(5), held_out: Sequence[str] = (),
         train_harnesses: Sequence[str] = (), sampling: Sampling | None = None,
         force: bool = False) -> Manifest:
    """Seal an evaluation: policies × harnesses × tasks × seeds, with its hash.

    Task patterns are expanded now; each harness is recorded with its content
    hash; policies are checked for form only (a checkpoint may not exist yet).
    ``held_out`` harnesses are evaluated too and marked; with ``train_harnesses``
    every other harness is marked held out. Written to ``out`` when given
    (refused if it exists, unless ``force``).
    :func:`tackroom.evaluate_sealed` then runs every cell.

    ::

        m = tackroom.seal("manifest.json", suite="toy", harnesses=["som-tools"],
                          held_out=["outline-coords"], policies=["hf:ckpt/a"], seeds=range(10))
        run = tackroom.evaluate_sealed("manifest.json")
    """
    target = Path(out) if out is not None else None
    if target is not None:
        check_output_file(target)  # a directory, symlink, FIFO or device is refused
        if target.exists() and not force:
            raise ConfigError("the manifest file exists already", str(target),
                              "choose another --out, or pass --force to replace it")
    the_suite = get_suite(suite)
    specs = list(policies) or ["expert"]
    for spec in specs:
        check_policy_spec(spec)
    patterns = list(tasks or []) or (["@expert"] if all(p == "expert" for p in specs)
                                     else ["@all"])
    task_list = select_tasks(the_suite, patterns)
    refs = list(harnesses or []) or list(the_suite.default_harnesses)
    refs += [h for h in held_out if h not in refs]
    manifest = Manifest.seal(
        suite=suite, tasks=[t.id for t in task_list],
        harnesses=[(ref, load_harness(ref)) for ref in refs], policies=specs,
        seeds=seed_list(seeds), held_out=list(held_out), train_harnesses=list(train_harnesses),
        sampling=check_sampling(sampling or Sampling()).to_dict())
    if target is not None:
        try:
            manifest.write(target)
        except OSError as e:
            raise ConfigError(f"cannot write the manifest ({e.strerror or e})", str(target),
                              "pass a writable file path with --out") from None
    return manifest


def inexpressible_pairs(manifest: Manifest) -> list[tuple[str, str]]:
    """The (task, harness) pairs of ``manifest`` whose harness cannot express the task
    (its action interface lacks a capability the task requires): reported as such by
    :func:`tackroom.evaluate_sealed`, never run, never failures."""
    the_suite = get_suite(manifest.suite)
    specs = manifest.load_harnesses()
    return [(tid, h.name) for tid in manifest.tasks for h in specs
            if not h.can_express(the_suite.task(tid).requires)]


__all__ = ["inexpressible_pairs", "seal"]
