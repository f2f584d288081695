"""``tackroom optimize``: propose harness edits, evaluate them on dev, accept, report on test.

One optimiser run is a run of its own in the record store (command
``optimize``) whose ``train_steps`` rows are its *journal*: every proposal (the
candidates with their parent, edits, TOML and hash, and the edits the leakage
guard rejected), every evaluation (the run that holds its episodes and its
per-(task, seed) scores) and every acceptance decision, in order. Every
evaluation is an ordinary ``eval`` run (``<opt run>.<candidate>.<split>``,
``train_run`` = the optimiser run), so ``tackroom show`` / ``report`` read it.

The loop, for each round up to ``rounds`` or until ``budget`` dev evaluations
are spent::

    failures of the current harness on train  →  proposer  →  leakage guard
      →  candidates (harness TOML that extends their parent)  →  each on dev
      →  the acceptance rule  →  the current harness for the next round

then the parent (no optimisation), the hand-written seed skills and the
accepted harness are evaluated on the test split, which nothing in the loop
reads. A killed run resumes (``resume=True``) from its journal: recorded
proposals are replayed, not proposed again (an LLM would answer otherwise),
finished evaluations are read back, an unfinished one is resumed.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tackroom.app.evaluation import evaluate, resume
from tackroom.app.optimize_config import OptimizeConfig
from tackroom.app.runs import new_run_id, open_store
from tackroom.core.errors import ConfigError
from tackroom.core.policy import Sampling
from tackroom.harness.spec import HarnessSpec, load_harness
from tackroom.records import RecordStore

__all__ = ["AuditResult", "Journal", "OptimizeResult", "Scores", "audit", "choose", "journal", "optimize",
           "pareto_front"]

#: (task, seed) → success (0/1) of the final scored attempt there.
Scores = dict[tuple[str, int], float]
MAX_FAILURES = 8  # failed episodes shown to a proposer per round


@dataclass
class OptimizeResult:
    """What an optimiser run found, and the table of baselines on dev and test."""

    run_id: str
    best: str
    best_path: str
    accepted: list[str]
    table: dict[str, dict[str, float]]
    dev_evaluations: int
    rejected: int
    notes: list[str] = field(default_factory=list)


def journal(store: RecordStore, run_id: str) -> dict[str, dict[str, Any]]:
    """The recorded entries of optimiser run ``run_id``, by key, in order."""
    return {row["key"]: row for row in store.train_steps(run_id) if "key" in row}


def recorded_config(store: RecordStore, run_id: str, command: str, what: str
                    ) -> dict[str, Any]:
    """The config recorded by run ``run_id`` of ``command``, for resuming it; a ConfigError
    when the store has no such run."""
    info = store.run(run_id)
    if info is None or info.get("command") != command:
        raise ConfigError(f"no {what} {run_id!r} to resume", "--resume",
                          "list runs with `tackroom runs`")
    return dict(info.get("config") or {})


class Journal:
    """A loop's journal: keyed entries in its run's ``train_steps`` rows, one row per entry.

    A resumed loop reads it back (``load=True``) and skips every entry it finds: what was
    decided is replayed, not decided again.
    """

    def __init__(self, store: RecordStore, run_id: str, *, load: bool = False) -> None:
        self.store, self.run_id = store, run_id
        self.entries: dict[str, dict[str, Any]] = journal(store, run_id) if load else {}
        self.step = max((e["step"] for e in self.entries.values()), default=0)

    def log(self, key: str, entry: dict[str, Any]) -> dict[str, Any]:
        """Record ``entry`` under ``key`` (a later entry of the same key replaces it)."""
        row = {"key": key, **entry, "at": time.time()}
        self.step += 1
        self.store.log_train_step(self.run_id, self.step, row)
        self.entries[key] = {"step": self.step, **row}
        return self.entries[key]


def optimize(config: OptimizeConfig | str | Path | None = None, *, store: RecordStore | str | Path | None = None,
             run_id: str | None = None, resume_run: bool = False, out_dir: str | Path | None = None,
             on_note: Callable[[str], None] | None = None,
             on_progress: Callable[[int, int], None] | None = None,
             test_split: bool = True) -> OptimizeResult:
    """Run (or, with ``resume_run``, finish) an optimiser run; see the module docstring.

    ``on_note(line)`` gets a line per evaluation and decision; ``on_progress(done, budget)``
    the candidates' dev evaluations so far against the budget. ``test_split=False`` stops
    after the loop: nothing is evaluated on test (the final table has dev only), for a
    caller that keeps the test split sealed for later, as ``tackroom self-hpo`` does.

    ::

        result = tackroom.app.optimization.optimize("optimize.toml")
        print(result.table)     # {"none": {"dev": .., "test": ..}, "seed-skills": .., "optimized": ..}
    """
    if not resume_run:
        cfg = config if isinstance(config, OptimizeConfig) else OptimizeConfig.from_toml(config)
    with open_store(store) as st:
        rid = run_id or ("opt-" + new_run_id())
        if resume_run:
            recorded = recorded_config(st, rid, "optimize", "optimiser run")
            # The recorded settings, whatever ``config`` says: a resumed run is the same run.
            cfg = OptimizeConfig.from_dict(dict(recorded.get("optimize", {})), f"run {rid}")
            test_split = bool(recorded.get("test_split", True))
        out = Path(out_dir or Path(st.path).parent / "optimize" / rid)
        loop = _Loop(cfg, st, rid, out, on_note or (lambda _line: None))
        loop.test_split = test_split
        loop.progress = on_progress or (lambda _done, _budget: None)
        return loop.run(resume_run)


class _Loop:
    def __init__(self, cfg: OptimizeConfig, store: RecordStore, run_id: str, out: Path,
                 note: Callable[[str], None]) -> None:
        self.cfg, self.store, self.id, self.out, self.note = cfg, store, run_id, out, note
        self.journal = Journal(store, run_id)
        self.entries = self.journal.entries
        self.dev_evaluations = 0
        self.rejected = 0
        self.progress: Callable[[int, int], None] = lambda _done, _budget: None
        self.test_split = True  # False: the final table stops at dev (see optimize())

    def _log(self, key: str, entry: dict[str, Any]) -> dict[str, Any]:
        return self.journal.log(key, entry)

    # -------------------------------------------------------------------- run
    def run(self, resuming: bool) -> OptimizeResult:
        c = self.cfg
        if resuming:
            self.journal = Journal(self.store, self.id, load=True)
            self.entries = self.journal.entries
            self.note(f"resuming {self.id}: {len(self.entries)} journal entries")
        self.store.start_run(self.id, "optimize", {"optimize": c.to_dict(),
                                                   "test_split": self.test_split}, n_planned=0)
        status = "interrupted"
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            parent = load_harness(c.harness)
            refs = {"none": c.harness}
            current_name = "none"  # greedy / threshold: the one harness each round improves
            front = ["none"]       # pareto: the candidates no other beats on every task
            accepted: list[str] = []
            dev_scores = {"none": self._evaluate("none", c.harness, "dev")}
            for rnd in range(c.rounds):
                if self.dev_evaluations >= c.budget:
                    break
                # GEPA samples each round's parent from its Pareto front; the others
                # always improve the current harness.
                base = (front[random.Random(f"{c.seed}:{rnd}").randrange(len(front))]
                        if c.acceptance == "pareto" else current_name)
                failures = self._failures(base, refs[base])
                proposals = self._propose(rnd, base, refs[base], load_harness(refs[base]),
                                          failures)
                round_scores: dict[str, Scores] = {}
                for cand in proposals:
                    if self.dev_evaluations >= c.budget:
                        break
                    refs[cand["name"]] = str(self.out / "candidates" / f"{cand['name']}.toml")
                    round_scores[cand["name"]] = self._evaluate(cand["name"],
                                                                refs[cand["name"]], "dev")
                    dev_scores[cand["name"]] = round_scores[cand["name"]]
                admitted, front = self._accept(rnd, base, dev_scores, round_scores, front)
                accepted += admitted
                if admitted and c.acceptance != "pareto":
                    current_name = admitted[0]
            if c.acceptance == "pareto":  # the front's best on dev is the optimiser's output
                current_name = max(front, key=lambda n: _mean(dev_scores[n]))
            current_ref = refs[current_name]
            # The final table: no optimisation, hand-written seed skills, the optimiser's output.
            variants = {"none": c.harness}
            if self.test_split:
                variants["seed-skills"] = self._seed_baseline(parent)
            if current_name != "none":
                variants["optimized"] = current_ref
            table: dict[str, dict[str, float]] = {}
            for label, ref in variants.items():
                name = current_name if label == "optimized" else label
                dev = dev_scores.get(name) or self._evaluate(name, ref, "dev")
                test = self._evaluate(name, ref, "test") if self.test_split else {}
                table[label] = {"dev": _mean(dev), "test": _mean(test),
                                "n_dev": len(dev), "n_test": len(test)}
            self._log("final", {"kind": "final", "best": current_name, "accepted": accepted,
                                "table": table})
            status = "finished"
        finally:
            self.store.finish_run(self.id, status)
        return OptimizeResult(self.id, current_name, current_ref, accepted, table,
                              self.dev_evaluations, self.rejected)

    # ------------------------------------------------------------- evaluation
    def _evaluate(self, name: str, harness_ref: str, split: str) -> Scores:
        """``name``'s scores on ``split``: read back, resumed, or run now (and journaled)."""
        key = f"eval:{name}:{split}"
        if split == "dev" and name not in ("none", "seed-skills"):
            self.dev_evaluations += 1  # the budget counts replayed evaluations too
            self.progress(self.dev_evaluations, self.cfg.budget)
        if key in self.entries:
            return _scores_from(self.entries[key]["scores"])
        c = self.cfg
        run_id = f"{self.id}.{name}.{split}"
        scores = scores_of(self.store, run_id, suite=c.suite, tasks=c.split_tasks(split),
                           harness=harness_ref, policy=c.policy, seeds=c.seeds(split),
                           sampling=Sampling(temperature=c.temperature, max_tokens=c.max_tokens),
                           concurrency=c.concurrency, base_url=c.base_url, train_run=self.id,
                           note=self.note)
        self._log(key, {"kind": "evaluation", "name": name, "split": split, "run": run_id,
                        "harness": harness_ref, "rate": _mean(scores),
                        "scores": [[t, s, v] for (t, s), v in sorted(scores.items())]})
        self.note(f"{name} on {split}: {_mean(scores):.0%} of {len(scores)} ({run_id})")
        return scores

    def _failures(self, name: str, harness_ref: str) -> list[Any]:
        """Failed episodes of harness ``name`` on the train split (at most MAX_FAILURES)."""
        self._evaluate(name, harness_ref, "train")
        run_id = f"{self.id}.{name}.train"
        eps = [ep for ep in self.store.iter_episodes(run_id)
               if ep.outcome.value not in ("success", "infra_error")]
        return eps[:MAX_FAILURES]

    # -------------------------------------------------------------- proposals
    def _propose(self, rnd: int, parent_name: str, parent_ref: str, parent: HarnessSpec,
                 failures: list[Any]) -> list[dict[str, Any]]:
        """Round ``rnd``'s candidates (journaled; replayed on resume), written as TOML files."""
        from tackroom.optimize.edits import Edit, make_candidate

        key = f"proposal:{rnd}"
        if key in self.entries:
            cands = self.entries[key]["candidates"]
        else:
            proposer = self._proposer()
            edit_lists = proposer.propose(parent, failures, self.cfg.candidates,
                                          self.cfg.seed * 1000 + rnd)
            guard = self._guard()
            cands, rejected = [], []
            for i, edits in enumerate(edit_lists):
                reasons = guard.check(edits)
                name = f"r{rnd}c{i}"
                if reasons:
                    rejected.append({"name": name, "edits": [e.to_dict() for e in edits],
                                     "reasons": reasons})
                    continue
                cand = make_candidate(parent_ref, parent, edits, name)
                cands.append({"name": name, "parent": parent_name, "parent_hash": parent.hash,
                              "hash": cand.hash, "edits": [e.to_dict() for e in edits],
                              "toml": cand.toml})
            self.rejected += len(rejected)
            self._log(key, {"kind": "proposal", "round": rnd, "parent": parent_name,
                            "proposer": self.cfg.proposer, "candidates": cands,
                            "rejected": rejected, "proposer_log": list(proposer.log)})
            if rejected:
                self.note(f"round {rnd}: the leakage guard rejected {len(rejected)} candidate(s)")
        for cand in cands:
            path = self.out / "candidates" / f"{cand['name']}.toml"
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                made = make_candidate(parent_ref, parent, [Edit.from_dict(e) for e in cand["edits"]],
                                      cand["name"])
                made.write(path.parent)
        return cands

    def _proposer(self) -> Any:
        from tackroom.optimize.proposers import make_proposer

        return make_proposer(self.cfg.proposer, suite=self.cfg.suite, base_url=self.cfg.base_url)

    def _guard(self) -> Any:
        from tackroom.optimize.guard import LeakageGuard
        from tackroom.suites import get_suite

        suite = get_suite(self.cfg.suite)
        seeds = sorted({s for split in ("train", "dev", "test") for s in self.cfg.seeds(split)})
        return LeakageGuard.for_suite(suite, seeds)

    def _seed_baseline(self, parent: HarnessSpec) -> str:
        from tackroom.optimize.edits import make_candidate
        from tackroom.optimize.proposers import seed_edits

        cand = make_candidate(self.cfg.harness, parent, seed_edits(self.cfg.suite), "seed-skills")
        return str(cand.write(self.out / "candidates"))

    # ------------------------------------------------------------- acceptance
    def _accept(self, rnd: int, base: str, dev_scores: Mapping[str, Scores],
                round_scores: Mapping[str, Scores], front: list[str]
                ) -> tuple[list[str], list[str]]:
        """Round ``rnd``'s accepted candidates and the Pareto front after it (journaled)."""
        key = f"accept:{rnd}"
        if key not in self.entries:
            rule = self.cfg.acceptance
            if rule == "pareto":
                new_front = pareto_front({n: dev_scores[n] for n in [*front, *round_scores]})
                admitted = [n for n in new_front if n in round_scores]
            else:
                chosen = choose(rule, dev_scores[base], round_scores, self.cfg.threshold)
                admitted, new_front = ([chosen] if chosen else []), front
            self._log(key, {"kind": "acceptance", "round": rnd, "rule": rule, "current": base,
                            "chosen": admitted[0] if admitted else None, "admitted": admitted,
                            "front": new_front,
                            "dev": {n: _mean(sc) for n, sc in round_scores.items()}})
            self.note(f"round {rnd}: " + (f"accepted {', '.join(admitted)}" if admitted
                                          else "nothing accepted"))
        entry = self.entries[key]
        return list(entry["admitted"]), list(entry["front"])


def scores_of(store: RecordStore, run_id: str, *, suite: str, tasks: Sequence[str],
              harness: str, policy: str, seeds: Sequence[int], sampling: Sampling,
              concurrency: int = 0, base_url: str | None = None, train_run: str | None = None,
              note: Callable[[str], None] = lambda _line: None) -> Scores:
    """The scores of evaluation run ``run_id`` of ``policy`` under ``harness``: read back when
    it finished, resumed when it was cut short (a killed loop), else run now."""
    info = store.run(run_id)
    if info is not None and info.get("status") != "finished":
        note(f"resuming evaluation {run_id}")
        resume(run_id, store=store, concurrency=concurrency, base_url=base_url)
    elif info is None:
        evaluate(suite, tasks=list(tasks) or None, harnesses=[harness], policies=[policy],
                 seeds=list(seeds), sampling=sampling, concurrency=concurrency,
                 base_url=base_url, store=store, run_id=run_id, train_run=train_run)
    return run_scores(store, run_id)


def run_scores(store: RecordStore, run_id: str) -> Scores:
    """(task, seed) → success of the final scored attempt of each episode of ``run_id``."""
    from tackroom.analysis.stats import final_attempts, scored_rows

    rows = scored_rows(final_attempts(store.episodes(run_id)))
    return {(r["task"], int(r["seed"])): float(r["outcome"] == "success") for r in rows}


def pareto_front(scores: Mapping[str, Scores]) -> list[str]:
    """The harnesses no other beats on every task (dev success per task; GEPA's front)."""
    from tackroom.optimize.acceptance import accept_pareto

    by_task: dict[str, dict[str, list[float]]] = {}
    for name, sc in scores.items():
        for (task, _seed), v in sc.items():
            by_task.setdefault(name, {}).setdefault(task, []).append(v)
    tasks = set.intersection(*(set(t) for t in by_task.values())) if by_task else set()
    means = {n: {t: sum(v[t]) / len(v[t]) for t in sorted(tasks)} for n, v in by_task.items()}
    return accept_pareto(means)


def choose(rule: str, current: Scores, candidates: Mapping[str, Scores],
           threshold: float = 0.0) -> str | None:
    """The candidate ``rule`` accepts over ``current`` on dev, or ``None``."""
    units = sorted(current)
    base = [current[u] for u in units]
    # A unit a candidate did not score (an infra error there) counts as a failure.
    scores = {n: [s.get(u, 0.0) for u in units] for n, s in candidates.items()}
    picked = _rule(rule, threshold)(scores, base, units=units) if scores else []
    return picked[0] if picked else None


def _mean(scores: Scores | Sequence[float]) -> float:
    values = list(scores.values()) if isinstance(scores, dict) else list(scores)
    return sum(values) / len(values) if values else float("nan")


def _scores_from(rows: list[list[Any]]) -> Scores:
    return {(str(t), int(s)): float(v) for t, s, v in rows}


# ---------------------------------------------------------------------------- the audit
@dataclass
class AuditResult:
    """The BiPA audit of one optimiser run (each part JSON-able through ``to_dict``)."""

    run_id: str
    replay: list[Any]          # SelectionEffect per round that evaluated candidates
    dev_test: list[Any]        # DevTestRow per accepted candidate
    usage: list[Any]           # UnitUsage of the skill sections, on the final harness's test episodes
    costs: list[Any]           # Cost per accepted edit (parent → child, on dev)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "replay": [r.to_dict() for r in self.replay],
                "dev_test": [r.to_dict() for r in self.dev_test],
                "usage": [u.to_dict() for u in self.usage],
                "costs": [c.to_dict() for c in self.costs], "notes": self.notes}


def audit(run_id: str, *, store: RecordStore | str | Path | None = None,
          on_note: Callable[[str], None] | None = None) -> AuditResult:
    """Audit optimiser run ``run_id`` (docs/optimize.md, "What the audit measures").

    Runs what the audit needs and the loop did not (each candidate of each round on
    the fresh ``replay`` seeds, each accepted candidate on test), journaled like
    the loop's own evaluations, so a second audit reads them back.
    """
    note = on_note or (lambda _line: None)
    with open_store(store) as st:
        info = st.run(run_id)
        if info is None or info.get("command") != "optimize":
            raise ConfigError(f"no optimiser run {run_id!r}", "audit",
                              "give the id `tackroom optimize` printed (see `tackroom runs`)")
        entries = journal(st, run_id)
        if "final" not in entries:
            raise ConfigError(f"optimiser run {run_id!r} has not finished", "audit",
                              f"finish it first: tackroom optimize --resume {run_id}")
        cfg = OptimizeConfig.from_dict(dict((info.get("config") or {}).get("optimize", {})),
                                       f"run {run_id}")
        loop = _Loop(cfg, st, run_id, Path(st.path).parent / "optimize" / run_id, note)
        loop.journal = Journal(st, run_id, load=True)
        loop.entries = entries = loop.journal.entries
        st.start_run(run_id, "optimize", {"optimize": cfg.to_dict()}, n_planned=0)
        try:
            result = _audit(loop, entries)
            loop._log("audit", {"kind": "audit", **result.to_dict()})
        finally:
            st.finish_run(run_id, "finished")
        return result


def _audit(loop: _Loop, entries: dict[str, dict[str, Any]]) -> AuditResult:
    from tackroom.optimize.audit import (
        acceptance_replay,
        dev_test,
        edit_cost,
        read_graph,
        unit_usage,
    )

    cfg, st = loop.cfg, loop.store
    harness_of = {e["name"]: e["harness"] for e in entries.values()
                  if e.get("kind") == "evaluation"}
    replays = []
    for key, acc in list(entries.items()):  # the replays below add entries
        if not key.startswith("accept:") or not acc.get("dev"):
            continue
        current = acc["current"]
        names = list(acc["dev"])
        sel = {n: _scores_from(entries[f"eval:{n}:dev"]["scores"]) for n in names}
        base_sel = _scores_from(entries[f"eval:{current}:dev"]["scores"])
        fresh = {n: loop._evaluate(n, harness_of[n], "replay") for n in names}
        base_fresh = loop._evaluate(current, harness_of[current], "replay")
        units_sel, units_fresh = sorted(base_sel), sorted(base_fresh)
        replays.append(acceptance_replay(
            {n: [s.get(u, 0.0) for u in units_sel] for n, s in sel.items()},
            {n: [s.get(u, 0.0) for u in units_fresh] for n, s in fresh.items()},
            [base_sel[u] for u in units_sel], [base_fresh[u] for u in units_fresh],
            _rule(cfg.acceptance, cfg.threshold), units_sel=units_sel, units_fresh=units_fresh))
    final = entries["final"]
    accepted = list(final["accepted"])
    base_dev = _scores_from(entries["eval:none:dev"]["scores"])
    # Read back, or (a run that kept its test split sealed: test_split=False) run now.
    base_test = loop._evaluate("none", harness_of["none"], "test")
    dev_units, test_units = sorted(base_dev), sorted(base_test)
    dev = {n: _scores_from(entries[f"eval:{n}:dev"]["scores"]) for n in accepted}
    test = {n: loop._evaluate(n, harness_of[n], "test") for n in accepted}
    rows = dev_test({n: [s.get(u, 0.0) for u in dev_units] for n, s in dev.items()},
                    {n: [s.get(u, 0.0) for u in test_units] for n, s in test.items()},
                    [base_dev[u] for u in dev_units], [base_test[u] for u in test_units],
                    accepted) if accepted else []
    # Which skill sections the final harness's test episodes ever acted on.
    best = final["best"]
    loop._evaluate(best, harness_of[best], "test")
    test_run = loop.entries[f"eval:{best}:test"]["run"]
    spec = load_harness(harness_of[best])
    usage = unit_usage([read_graph(ep, spec) for ep in st.iter_episodes(test_run)])
    # What each accepted edit added: its dev episodes against its parent's.
    parents = {c["name"]: c["parent"] for e in entries.values() if e.get("kind") == "proposal"
               for c in e["candidates"]}
    costs = [edit_cost(st.episodes(entries[f"eval:{parents[n]}:dev"]["run"]),
                       st.episodes(entries[f"eval:{n}:dev"]["run"]), label=f"{parents[n]} → {n}")
             for n in accepted]
    return AuditResult(loop.id, replays, rows, usage, costs)


def _rule(name: str, threshold: float) -> Any:
    """The acceptance rule ``name`` (tackroom.optimize.acceptance), the config's threshold
    bound when the rule is registered as taking one."""
    from tackroom.core.registry import entry
    from tackroom.optimize.acceptance import get_rule

    where = "[optimize] acceptance"
    found = entry("acceptance", name, where=where)
    return get_rule(found.obj, threshold=threshold) if found.meta.get("takes_threshold") \
        else found.obj
