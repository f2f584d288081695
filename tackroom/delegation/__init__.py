"""Delegation, fitted and graded: decision models from recorded runs (docs/delegation.md).

This package sits at the analysis/training level; what the episode loop needs at run
time (features, the model kinds, the :class:`Delegator`) is
:mod:`tackroom.policies.delegation`, below the runner.

- :mod:`.data` — recorded points read back, labelled by the scripted expert;
- :mod:`.training` — :func:`~.training.train_model` for every registered kind;
- :mod:`.thresholds` — τ per choice type for a target precision;
- :mod:`.fit` — ``tackroom delegate fit``; :mod:`.bench` — the ladder of
  ``tackroom delegate bench``, its episodes run by an evaluation function the caller
  passes in (:func:`tackroom.app.delegation.bench_delegation` passes
  :func:`tackroom.evaluate`).
"""
