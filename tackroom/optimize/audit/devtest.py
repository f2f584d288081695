"""Dev → test: does an accepted candidate's dev gain hold on the held-out test split?

:func:`dev_test` sets each accepted candidate's gain on the dev split against its
gain on the test split, with paired-bootstrap intervals.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tackroom.analysis.stats import bootstrap_means, paired_bootstrap, percentile_interval
from tackroom.optimize.acceptance import Scores
from tackroom.optimize.audit.results import NAN, Interval, JsonResult

__all__ = ["DevTestRow", "dev_test"]


@dataclass(frozen=True)
class DevTestRow(JsonResult):
    """One candidate's gain over the baseline on dev and on test.

    ``dev`` / ``test``: paired-bootstrap gains (point, interval); ``drop``:
    ``dev − test`` with an interval from independent bootstraps of the two
    splits (they share no units); ``p_dev`` / ``p_test``: bootstrap p-values
    for "no gain"; ``n_dev`` / ``n_test``: units.
    """

    candidate: str
    dev: Interval
    test: Interval
    drop: Interval
    p_dev: float
    p_test: float
    n_dev: int
    n_test: int


def dev_test(dev: Scores, test: Scores, baseline_dev: Sequence[float],
             baseline_test: Sequence[float], accepted: Sequence[str] | None = None, *,
             n_boot: int = 2000, seed: int = 0, confidence: float = 0.95) -> list[DevTestRow]:
    """Each accepted candidate's gain on the dev split against its gain on held-out test.

    ``dev[c]`` is aligned with ``baseline_dev`` (and ``test[c]`` with
    ``baseline_test``) unit by unit; ``accepted`` defaults to every candidate
    in ``dev``. A gain that holds on test shows ``drop`` near 0; dev gains that
    were fitted noise show a test gain near 0 and a positive drop.
    """
    bd = np.asarray(baseline_dev, dtype=float).ravel()
    bt = np.asarray(baseline_test, dtype=float).ravel()
    out = []
    for k, c in enumerate(accepted if accepted is not None else list(dev)):
        d = np.asarray(dev[c], dtype=float).ravel()
        t = np.asarray(test[c], dtype=float).ravel()
        rd = paired_bootstrap(d, bd, n_boot=n_boot, seed=seed + 2 * k, confidence=confidence)
        rt = paired_bootstrap(t, bt, n_boot=n_boot, seed=seed + 2 * k + 1,
                              confidence=confidence)
        boots = (bootstrap_means(d - bd, n_boot=n_boot, seed=seed + 2 * k)
                 - bootstrap_means(t - bt, n_boot=n_boot, seed=seed + 2 * k + 1))
        lo, hi = (percentile_interval(boots, confidence) if d.size and t.size
                  else (NAN, NAN))
        out.append(DevTestRow(candidate=c, dev=Interval(rd.diff, rd.lo, rd.hi),
                              test=Interval(rt.diff, rt.lo, rt.hi),
                              drop=Interval(rd.diff - rt.diff, lo, hi), p_dev=rd.p_value,
                              p_test=rt.p_value, n_dev=rd.n, n_test=rt.n))
    return out
