"""Delegation at run time: decision models that may take a choice from the LLM.

What the episode loop needs, below the runner (docs/delegation.md):

- :mod:`.features` — what a decision model sees of a decision point;
- :mod:`.models` — the decision model kinds (``logistic``, ``gbm``, ``lm``, registered as
  the ``decision_model`` kind), loading, and the content hash a harness pins;
  :mod:`.lm_training` — the ``lm`` kind's training loop;
- :mod:`.runtime` — asking the decision model first at each turn, recording who acted.

The ``[delegation]`` harness slot and its decision points are
:mod:`tackroom.harness.delegation`; fitting a model on recorded runs and grading it
(``tackroom delegate fit|bench``) is :mod:`tackroom.delegation`.
"""
