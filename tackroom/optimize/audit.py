"""The BiPA audit of a skill optimiser: selection effect, dev → test, read graphs, cost.

Everything here works on plain data, so the optimiser loop (or ``tackroom
audit``) can feed it from the records:

* **Acceptance rules** (:data:`ACCEPTANCE_RULES`) are functions over aligned
  per-candidate score vectors: ``rule(scores, baseline, *, units=None) ->
  accepted names``. ``scores[c][i]`` and ``baseline[i]`` measure the same unit
  ``i`` (a (task, seed) cell, success 0/1); ``units[i]`` optionally labels it
  (the Pareto rule groups units by task with it).
* **Acceptance replay** (:func:`acceptance_replay`) re-runs a rule on the same
  candidates scored on fresh seeds. The gain seen at selection minus the gain
  of the same selected candidates on fresh units is the *selection effect*
  (the winner's curse): how much of the reported gain was picked noise.
* **Dev → test** (:func:`dev_test`): each accepted candidate's gain on the dev
  split against its gain on the held-out test split, paired-bootstrap intervals.
* **Read graph** (:func:`read_graph`): the bipartite graph turns × text units
  of one episode, with an ``in_context`` edge when the unit was in the turn's
  messages and an ``acted_on`` edge when the turn's output followed it (the
  attribution rule is documented on :func:`read_graph`).
  :func:`unit_usage` sums graphs over episodes: which skill rules are ever
  acted on, and which never are.
* **Cost** (:func:`edit_cost`): input tokens and turns per episode added by an
  accepted edit, paired on shared (task, seed).

Every result is a frozen dataclass with ``to_dict()`` (JSON-able: NaN becomes
``None``); :func:`render_audit_tables` renders them as rich tables.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

import numpy as np

from tackroom.analysis.stats import bootstrap_means, paired_bootstrap, percentile_interval
from tackroom.core.episode import Episode, Outcome, Turn
from tackroom.harness.spec import HarnessSpec
from tackroom.optimize.edits import rules

__all__ = [
    "ACCEPTANCE_RULES", "accept_greedy", "accept_threshold", "accept_pareto", "pareto_rule",
    "get_rule", "unit_scores",
    "Interval", "SelectionEffect", "Agreement", "acceptance_replay", "replay_agreement",
    "DevTestRow", "dev_test",
    "Unit", "Edge", "ReadGraph", "UnitUsage", "read_graph", "unit_usage",
    "CostDelta", "Cost", "edit_cost", "edit_costs",
    "render_audit_tables",
]

Scores = Mapping[str, Sequence[float]]
#: An acceptance rule: ``rule(scores, baseline, *, units=None) -> accepted candidate names``.
Rule = Callable[..., list[str]]

#: The name the Pareto rule gives the baseline inside its pool.
BASELINE = "__baseline__"


# -- JSON ------------------------------------------------------------------------------------
def _plain(x: Any) -> Any:
    """``x`` as plain JSON: dataclasses to dicts, tuples to lists, NaN / inf to ``None``."""
    if is_dataclass(x) and not isinstance(x, type):
        return {f.name: _plain(getattr(x, f.name)) for f in fields(x)}
    if isinstance(x, Mapping):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


class _ToDict:
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (``json.dumps`` takes it; NaN is ``None``)."""
        return _plain(self)


NAN = float("nan")


# -- acceptance rules --------------------------------------------------------------------------
def _mean(x: Sequence[float] | np.ndarray) -> float:
    a = np.asarray(x, dtype=float)
    return float(a.mean()) if a.size else NAN


def accept_greedy(scores: Scores, baseline: Sequence[float], *,
                  units: Sequence[Any] | None = None) -> list[str]:
    """The candidate with the best mean, accepted if its mean beats the baseline's.

    Ties go to the first candidate in ``scores``' order. Returns ``[name]`` or ``[]``.
    """
    best, best_mean = None, -math.inf
    for name, s in scores.items():
        m = _mean(s)
        if m > best_mean:
            best, best_mean = name, m
    return [best] if best is not None and best_mean > _mean(baseline) else []


def accept_threshold(scores: Scores, baseline: Sequence[float], threshold: float = 0.0, *,
                     units: Sequence[Any] | None = None) -> list[str]:
    """Every candidate whose mean gain over the baseline exceeds ``threshold`` (strictly),
    best gain first (ties in ``scores``' order)."""
    b = _mean(baseline)
    gains = [(name, _mean(s) - b) for name, s in scores.items()]
    kept = [(name, g) for name, g in gains if g > threshold]
    return [name for name, _ in sorted(kept, key=lambda ng: -ng[1])]


def accept_pareto(scores_by_task: Mapping[str, Mapping[Any, float]]) -> list[str]:
    """The Pareto front over tasks (GEPA-style): the candidates no other candidate dominates.

    ``a`` dominates ``b`` when ``a`` scores at least as well on every task and
    strictly better on one. Candidates with identical scores do not dominate
    each other, so both stay. Returned in input order.

    Raises:
        ValueError: when candidates were scored on different task sets.
    """
    names = list(scores_by_task)
    if not names:
        return []
    tasks = sorted(scores_by_task[names[0]], key=str)
    for n in names:
        if set(scores_by_task[n]) != set(tasks):
            raise ValueError(f"accept_pareto needs every candidate scored on the same tasks; "
                             f"{n!r} differs from {names[0]!r}")
    m = np.array([[float(scores_by_task[n][t]) for t in tasks] for n in names], dtype=float)
    front = []
    for i, n in enumerate(names):
        ge = (m >= m[i]).all(axis=1)
        gt = (m > m[i]).any(axis=1)
        if not (ge & gt).any():
            front.append(n)
    return front


def _task_of(unit: Any, i: int) -> Any:
    if unit is None:
        return i
    return unit[0] if isinstance(unit, tuple | list) else unit


def _by_task(values: Sequence[float], units: Sequence[Any] | None) -> dict[Any, float]:
    sums: dict[Any, list[float]] = {}
    for i, v in enumerate(values):
        t = _task_of(units[i] if units is not None else None, i)
        sums.setdefault(t, []).append(float(v))
    return {t: sum(v) / len(v) for t, v in sums.items()}


def pareto_rule(scores: Scores, baseline: Sequence[float], *,
                units: Sequence[Any] | None = None) -> list[str]:
    """:func:`accept_pareto` as an acceptance rule over unit vectors.

    Units are grouped into tasks by ``units`` (a unit label is a task name or a
    ``(task, seed)`` tuple; without labels each unit is its own task) and
    scored by their per-task mean. The baseline joins the pool; accepted are
    the candidates on the front that beat the baseline on at least one task
    (a front member equal to the baseline everywhere adds nothing).
    """
    pool = {BASELINE: _by_task(baseline, units)}
    pool.update({name: _by_task(s, units) for name, s in scores.items()})
    base = pool[BASELINE]
    return [n for n in accept_pareto(pool)
            if n != BASELINE and any(pool[n][t] > base[t] for t in base)]


#: Acceptance rules by name (what the loop's config names); see :func:`get_rule`.
ACCEPTANCE_RULES: dict[str, Rule] = {
    "greedy": accept_greedy,
    "threshold": accept_threshold,
    "pareto": pareto_rule,
}


def get_rule(rule: str | Rule, **params: Any) -> Rule:
    """A rule by name from :data:`ACCEPTANCE_RULES` (``params`` bound, e.g. ``threshold``),
    or ``rule`` itself when it is already a function."""
    if callable(rule):
        return functools.partial(rule, **params) if params else rule
    try:
        fn = ACCEPTANCE_RULES[rule]
    except KeyError:
        raise ValueError(f"unknown acceptance rule {rule!r}; "
                         f"known: {', '.join(sorted(ACCEPTANCE_RULES))}") from None
    return functools.partial(fn, **params) if params else fn


# -- aligned scores from episodes ------------------------------------------------------------
def _get(ep: Episode | Mapping[str, Any], name: str) -> Any:
    return getattr(ep, name) if isinstance(ep, Episode) else ep[name]


def _cells(episodes: Iterable[Episode | Mapping[str, Any]], value: Callable[[Any], float]
           ) -> dict[tuple[str, Any], float]:
    """``(task, seed) -> mean value`` over the non-infra episodes, latest attempt per sampling."""
    latest: dict[tuple, Any] = {}
    for ep in episodes:
        if str(_get(ep, "outcome")) == Outcome.INFRA_ERROR.value:
            continue
        sampling = ep.sampling if isinstance(ep, Episode) else ep.get("sampling")
        attempt = ep.attempt if isinstance(ep, Episode) else ep.get("attempt", 0)
        key = (_get(ep, "task"), _get(ep, "seed"), json.dumps(sampling, sort_keys=True,
                                                               default=str))
        if key not in latest or attempt > latest[key][0]:
            latest[key] = (attempt, ep)
    sums: dict[tuple[str, Any], list[float]] = {}
    for (task, seed, _), (_, ep) in latest.items():
        sums.setdefault((task, seed), []).append(value(ep))
    return {k: sum(v) / len(v) for k, v in sums.items()}


def _success(ep: Any) -> float:
    return float(str(_get(ep, "outcome")) == Outcome.SUCCESS.value)


def _unit_sort(key: tuple[str, Any]) -> tuple[str, float, str]:
    task, seed = key
    return (str(task), float(seed) if isinstance(seed, int | float) else math.inf, str(seed))


def unit_scores(by_candidate: Mapping[str, Iterable[Episode | Mapping[str, Any]]]
                ) -> tuple[list[tuple[str, Any]], dict[str, list[float]]]:
    """Success of each candidate on the (task, seed) units every candidate ran, aligned.

    ``by_candidate`` maps a name (a candidate, or the baseline) to its episodes
    (:class:`Episode` objects or record rows). Infra errors are dropped, the
    latest attempt of a cell is kept, and several samplings on one (task,
    seed) are averaged. Returns the sorted units and ``name -> scores``, ready
    for the acceptance rules (pass the units as ``units=``).
    """
    cells = {name: _cells(eps, _success) for name, eps in by_candidate.items()}
    shared = set.intersection(*(set(c) for c in cells.values())) if cells else set()
    units = sorted(shared, key=_unit_sort)
    return units, {name: [c[u] for u in units] for name, c in cells.items()}


# -- acceptance replay -------------------------------------------------------------------------
@dataclass(frozen=True)
class Interval(_ToDict):
    """A point estimate with its bootstrap interval (``lo``/``hi`` NaN without one)."""

    value: float
    lo: float
    hi: float


@dataclass(frozen=True)
class Agreement(_ToDict):
    """Whether the rule picks the same candidates on fresh seeds as at selection.

    ``same``: the accepted sets are equal; ``jaccard``: |A ∩ B| / |A ∪ B| (1.0
    when both are empty); ``top_same``: the first accepted (the rule's best) agrees.
    """

    selected: tuple[str, ...]
    replayed: tuple[str, ...]
    same: bool
    jaccard: float
    top_same: bool


@dataclass(frozen=True)
class SelectionEffect(_ToDict):
    """What :func:`acceptance_replay` measured.

    Attributes:
        rule: the rule's name (or the function's).
        selected: the candidates the rule accepted on the selection units.
        gain_selection: mean over ``selected`` of (candidate − baseline) on the
            selection units, with the paired-bootstrap interval of that fixed set.
        gain_fresh: the same on the fresh units.
        effect: ``gain_selection − gain_fresh``, the selection effect, with the
            bootstrap interval of the selected set (both sides resampled).
        curse_bootstrap: the selection-only estimate of the same effect: the
            mean, over bootstrap replicates of the selection units that re-run
            the rule, of (gain of the re-pick on the replicate − its gain on the
            original selection units). Needs no fresh units; compare it with
            ``effect``.
        n_selection / n_fresh: units per side; n_boot: replicates drawn;
            n_boot_empty: re-selection replicates where the rule accepted nothing
            (left out of ``curse_bootstrap``).
        agreement: does the rule pick the same candidates on the fresh units.
    """

    rule: str
    selected: tuple[str, ...]
    gain_selection: Interval
    gain_fresh: Interval
    effect: Interval
    curse_bootstrap: float
    n_selection: int
    n_fresh: int
    n_boot: int
    n_boot_empty: int
    agreement: Agreement


def _matrix(scores: Scores, names: Sequence[str], what: str) -> np.ndarray:
    rows = [np.asarray(scores[n], dtype=float).ravel() for n in names]
    if rows and any(r.size != rows[0].size for r in rows):
        raise ValueError(f"{what}: every candidate needs the same number of units")
    return np.vstack(rows) if rows else np.empty((0, 0))


def _rule_name(rule: str | Rule) -> str:
    if isinstance(rule, str):
        return rule
    base = rule.func if isinstance(rule, functools.partial) else rule
    return getattr(base, "__name__", repr(base))


def _agreement(selected: Sequence[str], replayed: Sequence[str]) -> Agreement:
    a, b = set(selected), set(replayed)
    jac = len(a & b) / len(a | b) if a | b else 1.0
    top = (selected[0] if selected else None) == (replayed[0] if replayed else None)
    return Agreement(selected=tuple(selected), replayed=tuple(replayed), same=a == b,
                     jaccard=jac, top_same=top)


def replay_agreement(selection: Scores, fresh: Scores, baseline_sel: Sequence[float],
                     baseline_fresh: Sequence[float], rule: str | Rule = "greedy", *,
                     units_sel: Sequence[Any] | None = None,
                     units_fresh: Sequence[Any] | None = None) -> Agreement:
    """Run ``rule`` on the selection units and again on the fresh units; compare the picks."""
    fn = get_rule(rule)
    return _agreement(fn(selection, baseline_sel, units=units_sel),
                      fn(fresh, baseline_fresh, units=units_fresh))


def acceptance_replay(selection: Scores, fresh: Scores, baseline_sel: Sequence[float],
                      baseline_fresh: Sequence[float], rule: str | Rule = "greedy", *,
                      units_sel: Sequence[Any] | None = None,
                      units_fresh: Sequence[Any] | None = None,
                      n_boot: int = 2000, seed: int = 0,
                      confidence: float = 0.95) -> SelectionEffect:
    """The selection effect of ``rule``: gain at selection minus gain on fresh seeds.

    ``selection[c]`` / ``baseline_sel`` are aligned scores on the units the
    optimiser selected on; ``fresh[c]`` / ``baseline_fresh`` are the same
    candidates on fresh units (new seeds, same task distribution). The rule
    picks ``S`` on the selection units; then

        gain_selection = mean_{c∈S} (mean(selection[c]) − mean(baseline_sel))
        gain_fresh     = mean_{c∈S} (mean(fresh[c]) − mean(baseline_fresh))
        effect         = gain_selection − gain_fresh

    Fresh units are independent of the pick, so ``gain_fresh`` is unbiased
    for the true gain of the picked candidates and ``effect`` estimates the
    winner's curse of the procedure.

    The interval of ``effect`` holds the selected set ``S`` fixed and
    resamples the selection units and the fresh units independently (within
    a side the candidates' mean and the baseline are resampled as pairs):
    ``bootstrap_means(d_sel) − bootstrap_means(d_fresh)`` with ``d`` the
    per-unit gain of ``S``. It is centred on the observed effect and covers
    the sampling noise of both gains.

    Why not re-run the rule inside each replicate? Because then the
    replicate's pick is measured against the fresh units while its selection
    gain carries a *second* winner's curse (the resample's noise on top of the
    sample's), so the replicates centre near twice the effect: a bootstrap
    world in which the observed selection means are the truth must measure the
    re-pick against those means, not against fresh data. That correct version
    is ``curse_bootstrap``: the classic bootstrap estimate of the bias of a
    selected maximum, from the selection units alone; it tends to understate
    the curse when many candidates are near-tied, which is why the fresh-seed
    replay is the measurement and ``curse_bootstrap`` only a cross-check.

    The intervals of the two gains are ordinary paired bootstraps of the fixed
    set ``S`` (:func:`~tackroom.analysis.stats.paired_bootstrap`). Seeded: same
    inputs, same result. ``n_boot=0`` skips the bootstraps (intervals NaN).
    """
    fn = get_rule(rule)
    names = list(selection)
    if set(fresh) != set(names):
        raise ValueError("acceptance_replay needs the same candidates in selection and fresh")
    sel = _matrix(selection, names, "selection")
    fr = _matrix(fresh, names, "fresh")
    bs = np.asarray(baseline_sel, dtype=float).ravel()
    bf = np.asarray(baseline_fresh, dtype=float).ravel()
    if sel.size and sel.shape[1] != bs.size or fr.size and fr.shape[1] != bf.size:
        raise ValueError("acceptance_replay: baseline and candidates differ in units")
    index = {n: i for i, n in enumerate(names)}
    us = list(units_sel) if units_sel is not None else None
    uf = list(units_fresh) if units_fresh is not None else None

    chosen = fn({n: sel[index[n]] for n in names}, bs, units=us)
    replayed = fn({n: fr[index[n]] for n in names}, bf, units=uf)
    rows = [index[n] for n in chosen]

    def gains(rows: list[int], a: np.ndarray, b: np.ndarray) -> float:
        return float(a[rows].mean(axis=1).mean() - b.mean())

    if rows:
        g_sel = paired_bootstrap(sel[rows].mean(axis=0), bs, n_boot=max(n_boot, 1), seed=seed,
                                 confidence=confidence)
        g_fr = paired_bootstrap(fr[rows].mean(axis=0), bf, n_boot=max(n_boot, 1),
                                seed=seed + 1, confidence=confidence)
        point = g_sel.diff - g_fr.diff
        gain_sel = Interval(g_sel.diff, *((g_sel.lo, g_sel.hi) if n_boot else (NAN, NAN)))
        gain_fr = Interval(g_fr.diff, *((g_fr.lo, g_fr.hi) if n_boot else (NAN, NAN)))
    else:
        point = NAN
        gain_sel = gain_fr = Interval(NAN, NAN, NAN)

    if rows and n_boot:
        d_sel = sel[rows].mean(axis=0) - bs
        d_fr = fr[rows].mean(axis=0) - bf
        boots = (bootstrap_means(d_sel, n_boot=n_boot, seed=seed)
                 - bootstrap_means(d_fr, n_boot=n_boot, seed=seed + 1))
        lo, hi = percentile_interval(boots, confidence)
    else:
        lo = hi = NAN

    # The selection-only bootstrap estimate of the winner's curse: in each replicate the
    # observed selection means play the truth, the rule re-picks on resampled units.
    rng = np.random.default_rng(seed + 2)
    curses: list[float] = []
    empty = 0
    n_s, n_f = bs.size, bf.size
    observed = sel.mean(axis=1) if sel.size else np.empty(0)
    base_obs = float(bs.mean()) if n_s else NAN
    for _ in range(n_boot if n_s else 0):
        i = rng.integers(0, n_s, n_s)
        s_i, b_i = sel[:, i], bs[i]
        picked = fn({n: s_i[index[n]] for n in names}, b_i,
                    units=[us[k] for k in i] if us is not None else None)
        if not picked:
            empty += 1
            continue
        r = [index[n] for n in picked]
        curses.append(gains(r, s_i, b_i) - float(observed[r].mean() - base_obs))
    curse = float(np.mean(curses)) if curses else NAN
    return SelectionEffect(
        rule=_rule_name(rule), selected=tuple(chosen), gain_selection=gain_sel,
        gain_fresh=gain_fr, effect=Interval(point, lo, hi), curse_bootstrap=curse,
        n_selection=int(n_s), n_fresh=int(n_f), n_boot=int(n_boot), n_boot_empty=empty,
        agreement=_agreement(chosen, replayed))


# -- dev -> test -------------------------------------------------------------------------------
@dataclass(frozen=True)
class DevTestRow(_ToDict):
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


# -- the read graph ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Unit(_ToDict):
    """A text unit an agent can read.

    ``kind``: ``skill_section`` (a whole skill, ``id`` ``skill:NAME``, or one
    of its rules, ``skill:NAME/K`` with ``parent`` the skill's id),
    ``prompt_section`` (a paragraph of the system prompt outside the skills,
    ``prompt:K``), ``observation`` (``obs:0`` the first user message, ``obs:K``
    the observation after turn K−1), ``tool_output`` (a ``role: tool``
    message, ``tool:ID``) or ``file`` (a path named in an observation or tool
    output, ``file:PATH``).
    """

    kind: str
    id: str
    text: str
    parent: str | None = None


@dataclass(frozen=True)
class Edge(_ToDict):
    """Turn ``turn`` → unit ``unit``. ``evidence`` (``acted_on`` only): what matched."""

    turn: int
    unit: str
    evidence: str = ""


@dataclass(frozen=True)
class ReadGraph(_ToDict):
    """The bipartite read graph of one episode: turns × units, two edge sets.

    Every ``acted_on`` edge is also an ``in_context`` edge (a unit out of the
    window cannot be followed), so ``len(acted_on)`` is the number of
    read-then-act links.
    """

    episode_id: str
    n_turns: int
    units: tuple[Unit, ...]
    in_context: tuple[Edge, ...]
    acted_on: tuple[Edge, ...]

    def unit(self, uid: str) -> Unit:
        return next(u for u in self.units if u.id == uid)

    def counts(self) -> dict[str, dict[str, int]]:
        """``unit id -> {"in_context": turns, "acted_on": turns}``, every unit listed."""
        out = {u.id: {"in_context": 0, "acted_on": 0} for u in self.units}
        for e in self.in_context:
            out[e.unit]["in_context"] += 1
        for e in self.acted_on:
            out[e.unit]["acted_on"] += 1
        return out

    def acted(self, kind: str | None = "skill_section") -> list[str]:
        """Ids of the units (of ``kind``; ``None``: all) acted on at least once, in unit order."""
        hit = {e.unit for e in self.acted_on}
        return [u.id for u in self.units if (kind is None or u.kind == kind) and u.id in hit]

    def never_used(self, kind: str | None = "skill_section") -> list[str]:
        """Ids of the units (of ``kind``) that were in context but never acted on."""
        seen = {e.unit for e in self.in_context}
        hit = {e.unit for e in self.acted_on}
        return [u.id for u in self.units
                if (kind is None or u.kind == kind) and u.id in seen and u.id not in hit]

    @property
    def read_then_act(self) -> int:
        """The number of (turn, unit) read-then-act links."""
        return len(self.acted_on)

    def summary(self) -> dict[str, Any]:
        """What a report shows: sections acted on / never used, link counts, per-unit counts."""
        kinds = sorted({u.kind for u in self.units})
        return {
            "episode_id": self.episode_id, "n_turns": self.n_turns,
            "units": {k: sum(1 for u in self.units if u.kind == k) for k in kinds},
            "in_context_edges": len(self.in_context), "read_then_act": self.read_then_act,
            "skill_sections_acted": self.acted("skill_section"),
            "skill_sections_never_used": self.never_used("skill_section"),
            "counts": self.counts(),
        }


_SKILL_HEAD = re.compile(r"^## Skill: (.+)$", re.M)
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+(.*\S)\s*$")
_WORD = re.compile(r"\w+")
_STRIP = "\"'`.,;:!?()[]{}<>"
_SPECIAL = set("/._-#=:$@[]>")
_STOP_TOKENS = {"e.g", "i.e", "etc", "e.g.", "i.e.", "n/a", "and/or"}
_PATH = re.compile(r"(?<![\w/.-])((?:\.{0,2}/)?(?:[\w.-]+/)*[\w-]+\.[A-Za-z][\w]{0,7})(?![\w/])")
_FILE_EXT = {"py", "txt", "md", "json", "toml", "yaml", "yml", "cfg", "ini", "sh", "js", "ts",
             "html", "css", "c", "h", "cc", "cpp", "rs", "go", "java", "rb", "csv", "log", "sql",
             "xml", "lock", "conf"}
NGRAM = 4


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


def _content(msg: Mapping[str, Any]) -> str:
    c = msg.get("content")
    if isinstance(c, str):
        return c
    if isinstance(c, list):  # multimodal parts
        return "\n".join(p.get("text", "") for p in c if isinstance(p, Mapping))
    return ""


def _rules(text: str) -> list[str]:
    """A skill's rules as the edit grammar numbers them (:func:`tackroom.optimize.edits.rules`,
    from 0), each without its bullet, so ``skill:NAME/K`` is the rule ``delete_rule`` K edits."""
    return [m.group(1) if (m := _BULLET.match(line)) else line.strip() for line in rules(text)]


def _skills_of(spec: HarnessSpec | None, system: str) -> list[tuple[str, str]]:
    if spec is not None:
        return [(s.name, s.text.strip()) for s in spec.skills]
    heads = list(_SKILL_HEAD.finditer(system))
    return [(h.group(1).strip(), system[h.end():heads[k + 1].start() if k + 1 < len(heads)
             else len(system)].strip()) for k, h in enumerate(heads)]


def _ngrams(text: str, n: int = NGRAM) -> set[tuple[str, ...]]:
    w = _WORD.findall(text.lower())
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


def _distinctive(text: str) -> set[str]:
    """Backticked spans and command / selector / path-like tokens of ``text`` (lowercase)."""
    out = {s.strip().lower() for s in re.findall(r"`([^`\n]+)`", text) if len(s.strip()) >= 2}
    for raw in text.split():
        tok = raw.strip(_STRIP).lower()
        if (len(tok) >= 3 and tok not in _STOP_TOKENS and any(ch.isalpha() for ch in tok)
                and any(ch in _SPECIAL for ch in tok)):
            out.add(tok)
    return out


def _tails(path: str) -> set[str]:
    """A path and each tail after a ``/``: ``/repo/pkg/a.py``, ``repo/pkg/a.py``, ``pkg/a.py``,
    ``a.py`` (a model names repository files relative to where it stands)."""
    parts = path.split("/")
    return {path} | {"/".join(parts[k:]) for k in range(1, len(parts)) if parts[k]}


def _quotes(output: str, out_grams: set[tuple[str, ...]], refs: Sequence[int], unit: Unit,
            cache: dict[str, tuple[set, set]]) -> str:
    """Why ``output`` (lowercase) follows ``unit``: the matched n-gram or token, else ``""``."""
    if unit.id not in cache:
        toks = _tails(unit.text.lower()) if unit.kind == "file" else _distinctive(unit.text)
        cache[unit.id] = (_ngrams(unit.text), toks)
    grams, toks = cache[unit.id]
    common = grams & out_grams
    if common:
        return " ".join(min(common))
    for tok in sorted(toks):
        if re.search(r"(?<!\w)" + re.escape(tok) + r"(?!\w)", output):
            return tok
    if unit.kind in ("observation", "tool_output"):
        for ref in refs:
            if f"[{ref}]" in unit.text:
                return f"ref [{ref}]"
    return ""


def _refs(turn: Turn) -> list[int]:
    """The element references the turn's actions name (``ref`` fields), sorted."""
    out = set()
    for a in turn.actions:
        ref = a.get("ref") if isinstance(a, Mapping) else None
        if isinstance(ref, int) and not isinstance(ref, bool):
            out.add(ref)
    return sorted(out)


def _output(turn: Turn) -> str:
    """What the turn did, as text: its reply, its tool calls' names and arguments, its actions."""
    parts = [turn.raw_text or ""]
    for tc in turn.tool_calls:
        fn = tc.get("function", tc)
        parts.append(str(fn.get("name", "")))
        args = fn.get("arguments", "")
        try:
            parsed = json.loads(args) if isinstance(args, str) else args
        except (ValueError, TypeError):
            parsed = args
        parts.append(_flatten(parsed))
    for a in turn.actions:
        parts.append(_flatten(a))
    return "\n".join(p for p in parts if p)


def _flatten(x: Any) -> str:
    if isinstance(x, Mapping):
        return " ".join(_flatten(v) for v in x.values())
    if isinstance(x, list | tuple):
        return " ".join(_flatten(v) for v in x)
    return "" if x is None else str(x)


def _files(text: str) -> list[str]:
    return [p for p in _PATH.findall(text) if p.rsplit(".", 1)[-1].lower() in _FILE_EXT]


def read_graph(episode: Episode, spec: HarnessSpec | None = None) -> ReadGraph:
    """The bipartite read graph of ``episode``: turns × the text units they had in context.

    **Units.** The system message of each turn is split into skills and prompt
    sections: each skill (from ``spec.skills``, or, without a spec, the
    ``## Skill: NAME`` blocks :mod:`tackroom.harness.session` writes) is one
    ``skill_section`` unit, and each of its rule lines (bullets ``-``, ``*``,
    ``+``, ``1.``; a skill without bullets: each non-empty line) is another,
    so a rule an optimiser added and no one follows shows up on its own. The
    rest of the system prompt gives one ``prompt_section`` per paragraph.
    ``role: tool`` messages are ``tool_output`` units (one per distinct
    text); the first user message (task and first observation) and each
    turn's ``observation`` are ``observation`` units (a text already a tool
    output is not repeated); file paths (known source/text extensions) named
    in observations and tool outputs are ``file`` units.

    **in_context** (turn t, unit v): v's text (whitespace-normalised,
    case-folded) is a substring of one of the messages turn t was sent; for a
    file, its path is.

    **acted_on** (turn t, unit v) — the attribution: v is in context at t and
    the turn's *output* — its ``raw_text``, its tool calls' names and
    (JSON-decoded) argument values, and its actions' field values — either

    1. quotes v: shares a run of ``NGRAM`` (4) consecutive words with v's text
       (words are ``\\w+`` runs, case-folded), or
    2. uses a distinctive token of v: a backticked span of v, or a token of v
       with a letter and one of ``/ . _ - # = : $ @ [ ] >`` (a command flag, a
       selector, a path, a ``key=value``), found in the output with word
       boundaries; for a file, its path or a tail of it (``pkg/a.py`` for
       ``/repo/pkg/a.py``); or
    3. (observations and tool outputs) acts on an element it lists: an
       action's ``ref`` is ``N`` and the unit shows ``[N]`` (the element-list
       renderers' reference), e.g. ``click(9)`` after ``[9] button "frost"``.

    The rule is lexical and deterministic: it finds an action that follows a
    unit's wording or its concrete tokens, not one that follows its meaning
    in other words (those read as never used), and an output that matches
    several units in context links to each of them. The whole skill matches
    whenever one of its rules does (rule text is part of its text). The
    model's own earlier replies are not units.
    """
    units: dict[str, Unit] = {}
    by_text: dict[str, str] = {}  # normalised text -> unit id (dedupe observation vs tool)

    def add(unit: Unit) -> None:
        key = _norm(unit.text)
        if not key or unit.id in units:
            return
        if unit.kind in ("observation", "tool_output") and key in by_text:
            return
        units[unit.id] = unit
        if unit.kind in ("observation", "tool_output"):
            by_text[key] = unit.id

    system = ""
    for turn in episode.turns:
        for m in turn.messages:
            if m.get("role") == "system":
                system = _content(m)
                break
        if system:
            break
    skills = _skills_of(spec, system)
    for name, text in skills:
        sid = f"skill:{name}"
        add(Unit("skill_section", sid, text))
        for k, rule in enumerate(_rules(text)):
            add(Unit("skill_section", f"{sid}/{k}", rule, parent=sid))
    head = _SKILL_HEAD.search(system)
    prose = system[:head.start()] if head else system
    if spec is not None and not head:
        for _, text in skills:  # skills rendered without the header: cut them out
            prose = prose.replace(text, "")
    for k, para in enumerate(p for p in re.split(r"\n\s*\n", prose) if p.strip()):
        add(Unit("prompt_section", f"prompt:{k}", para.strip()))

    # Tool outputs first, so an observation equal to a tool result stays a tool output.
    for t, turn in enumerate(episode.turns):
        for i, m in enumerate(turn.messages):
            if m.get("role") == "tool":
                tid = m.get("tool_call_id") or f"{t}.{i}"
                add(Unit("tool_output", f"tool:{tid}", _content(m)))
    first_user = next((_content(m) for m in (episode.turns[0].messages if episode.turns else [])
                       if m.get("role") == "user"), "")
    add(Unit("observation", "obs:0", first_user))
    for t, turn in enumerate(episode.turns):
        if turn.observation:
            add(Unit("observation", f"obs:{t + 1}", turn.observation))
    for u in [u for u in units.values() if u.kind in ("observation", "tool_output")]:
        for path in _files(u.text):
            add(Unit("file", f"file:{path}", path))

    in_context: list[Edge] = []
    acted_on: list[Edge] = []
    cache: dict[str, tuple[set, set]] = {}
    normed = {uid: _norm(u.text) for uid, u in units.items()}
    for t, turn in enumerate(episode.turns):
        window = "\n".join(_norm(_content(m)) for m in turn.messages)
        output = _output(turn).lower()
        out_grams = _ngrams(output)
        refs = _refs(turn)
        for uid, u in units.items():
            if normed[uid] not in window:
                continue
            in_context.append(Edge(t, uid))
            why = _quotes(output, out_grams, refs, u, cache)
            if why:
                acted_on.append(Edge(t, uid, why))
    return ReadGraph(episode_id=episode.episode_id, n_turns=len(episode.turns),
                     units=tuple(units.values()), in_context=tuple(in_context),
                     acted_on=tuple(acted_on))


@dataclass(frozen=True)
class UnitUsage(_ToDict):
    """One unit summed over episodes: in how many it was in context, acted on, and the links."""

    id: str
    kind: str
    text: str
    episodes_in_context: int
    episodes_acted: int
    turns_in_context: int
    turns_acted: int

    @property
    def never_used(self) -> bool:
        """In context in some episode, acted on in none."""
        return self.episodes_in_context > 0 and self.episodes_acted == 0

    def to_dict(self) -> dict[str, Any]:
        return {**_plain(self), "never_used": self.never_used}


def unit_usage(graphs: Iterable[ReadGraph], kind: str | None = "skill_section"
               ) -> list[UnitUsage]:
    """Units (of ``kind``; ``None``: all) summed over episodes' read graphs, by unit id,
    in first-seen order. ``never_used`` marks the rules no episode acted on."""
    acc: dict[str, dict[str, Any]] = {}
    for g in graphs:
        counts = g.counts()
        for u in g.units:
            if kind is not None and u.kind != kind:
                continue
            a = acc.setdefault(u.id, {"id": u.id, "kind": u.kind, "text": u.text,
                                      "episodes_in_context": 0, "episodes_acted": 0,
                                      "turns_in_context": 0, "turns_acted": 0})
            c = counts[u.id]
            a["episodes_in_context"] += c["in_context"] > 0
            a["episodes_acted"] += c["acted_on"] > 0
            a["turns_in_context"] += c["in_context"]
            a["turns_acted"] += c["acted_on"]
    return [UnitUsage(**a) for a in acc.values()]


# -- cost --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CostDelta(_ToDict):
    """One per-episode quantity before and after an edit, on shared (task, seed) units.

    ``diff`` is ``after − before`` (mean over units) with its paired-bootstrap
    interval (``lo``, ``hi``) and p-value.
    """

    before: float
    after: float
    diff: float
    lo: float
    hi: float
    p_value: float


@dataclass(frozen=True)
class Cost(_ToDict):
    """What an accepted edit costs: input tokens and turns per episode, after − before."""

    label: str
    input_tokens: CostDelta
    turns: CostDelta
    n: int


def _prompt_tokens(ep: Any) -> float:
    if isinstance(ep, Episode):
        return float(ep.prompt_tokens)
    return float(ep["prompt_tokens"])


def _n_turns(ep: Any) -> float:
    if isinstance(ep, Episode):
        return float(ep.n_turns)
    return float(ep["n_turns"])


def _delta(a: np.ndarray, b: np.ndarray, n_boot: int, seed: int) -> CostDelta:
    r = paired_bootstrap(b, a, n_boot=n_boot, seed=seed)
    return CostDelta(before=_mean(a), after=_mean(b), diff=r.diff, lo=r.lo, hi=r.hi,
                     p_value=r.p_value)


def edit_cost(before_episodes: Iterable[Episode | Mapping[str, Any]],
              after_episodes: Iterable[Episode | Mapping[str, Any]], *, label: str = "",
              n_boot: int = 2000, seed: int = 0) -> Cost:
    """Input tokens (sum of the turns' ``prompt_tokens``) and turns per episode, after − before.

    Episodes (or record rows with ``prompt_tokens`` and ``n_turns``) are paired
    on the (task, seed) both sides ran; infra errors are dropped, the latest
    attempt kept, samplings averaged. Successes and failures both count: a
    rule that makes episodes longer costs whatever they end in.
    """
    before, after = list(before_episodes), list(after_episodes)
    tb, ta = _cells(before, _prompt_tokens), _cells(after, _prompt_tokens)
    nb, na = _cells(before, _n_turns), _cells(after, _n_turns)
    keys = sorted(tb.keys() & ta.keys(), key=_unit_sort)
    arr = lambda d: np.array([d[k] for k in keys], dtype=float)  # noqa: E731
    return Cost(label=label, input_tokens=_delta(arr(tb), arr(ta), n_boot, seed),
                turns=_delta(arr(nb), arr(na), n_boot, seed + 1), n=len(keys))


def edit_costs(versions: Sequence[tuple[str, Iterable[Episode | Mapping[str, Any]]]], *,
               n_boot: int = 2000, seed: int = 0) -> list[Cost]:
    """:func:`edit_cost` of each accepted edit in a chain ``[(name, episodes), ...]``
    (the seed skill first): one :class:`Cost` per consecutive pair, labelled ``a → b``."""
    eps = [(name, list(e)) for name, e in versions]
    return [edit_cost(a, b, label=f"{na} → {nb}", n_boot=n_boot, seed=seed)
            for (na, a), (nb, b) in zip(eps, eps[1:], strict=False)]


# -- tables ------------------------------------------------------------------------------------
def _pp(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{100 * x:+.1f}"


def _ivl(i: Interval) -> str:
    if not math.isfinite(i.value):
        return "–"
    if not (math.isfinite(i.lo) and math.isfinite(i.hi)):
        return _pp(i.value)
    return f"{_pp(i.value)} [{_pp(i.lo)}, {_pp(i.hi)}]"


def render_audit_tables(effect: SelectionEffect | None = None,
                        devtest: Sequence[DevTestRow] = (),
                        usage: Sequence[UnitUsage] = (),
                        costs: Sequence[Cost] = ()) -> list[Any]:
    """Rich tables of the audit's parts that are given (gains in percentage points)."""
    from rich.markup import escape
    from rich.table import Table

    out: list[Any] = []
    if effect is not None:
        t = Table(title=f"Acceptance replay ({escape(effect.rule)}): selection effect, pp",
                  title_justify="left")
        for col in ("selected", "gain at selection", "gain on fresh", "selection effect",
                    "same pick on fresh"):
            t.add_column(col)
        t.add_row(escape(", ".join(effect.selected) or "(none)"), _ivl(effect.gain_selection),
                  _ivl(effect.gain_fresh), _ivl(effect.effect),
                  "yes" if effect.agreement.same else
                  f"no ({escape(', '.join(effect.agreement.replayed) or 'none')})")
        out.append(t)
    if devtest:
        t = Table(title="Dev → test: gain over the baseline, pp", title_justify="left")
        for col in ("candidate", "dev", "test", "drop", "n dev/test"):
            t.add_column(col)
        for r in devtest:
            t.add_row(escape(r.candidate), _ivl(r.dev), _ivl(r.test), _ivl(r.drop),
                      f"{r.n_dev}/{r.n_test}")
        out.append(t)
    if usage:
        t = Table(title="Skill sections: read (in context) and acted on", title_justify="left")
        for col in ("section", "text", "episodes in context", "episodes acted", "links"):
            t.add_column(col)
        for u in usage:
            text = u.text if len(u.text) <= 60 else u.text[:57] + "…"
            t.add_row(escape(u.id), escape(text), str(u.episodes_in_context),
                      str(u.episodes_acted) + (" (never used)" if u.never_used else ""),
                      str(u.turns_acted))
        out.append(t)
    if costs:
        t = Table(title="Cost per accepted edit (after − before, per episode)",
                  title_justify="left")
        for col in ("edit", "input tokens", "turns", "n"):
            t.add_column(col)
        for c in costs:
            it, tu = c.input_tokens, c.turns
            t.add_row(escape(c.label or "edit"),
                      f"{it.diff:+.0f} [{it.lo:+.0f}, {it.hi:+.0f}]" if c.n else "–",
                      f"{tu.diff:+.2f} [{tu.lo:+.2f}, {tu.hi:+.2f}]" if c.n else "–", str(c.n))
        out.append(t)
    return out
