"""Delegation: decision models that share control with the LLM (docs/delegation.md).

- :mod:`tackroom.harness.delegation` — the ``[delegation]`` harness slot and the decision
  points (choice sets built from the observation);
- :mod:`.features`, :mod:`.models` — what a decision model sees, the three kinds
  (logistic, gbm, lm), loading and the content hash a harness pins; :mod:`.training`;
- :mod:`.runtime` — asking the decision model first at run time, recording who acted;
- :mod:`.data` — recorded points read back, labelled by the scripted expert;
- :mod:`.thresholds` — τ per choice type for a target precision;
- :mod:`.fit` — ``tackroom delegate fit``; :mod:`.bench` — ``tackroom delegate bench``.
"""
