"""``tackroom self-hpo``: the harness and the policy optimised in turn (docs/research.md §9).

Each round r of the **alternation** arm:

1. *harness phase* — one ``tackroom optimize`` round on H_r for π_r: π_r is evaluated on the
   train split and its failures mined; the proposer (``self``: π_r itself) proposes
   ``candidates`` edits through the optimiser's edit grammar and leakage guard; each is
   evaluated on dev; the acceptance rule keeps the best as H_{r+1} (or keeps H_r);
2. *policy phase* — ``tackroom train`` under H_{r+1} for ``steps_per_round`` updates,
   continuing π_r's weights (its LoRA adapter, or its full weights): π_{r+1};
3. *measure* — (π_{r+1}, H_{r+1}) on dev, the lineage's success per round.

The **harness** arm runs only phase 1 (π_0 throughout, the same proposer seeds), the
**policy** arm only phase 2 (H_0 throughout, the same steps): equal budgets by
construction (:func:`tackroom.app.selfhpo_config.arm_budget`, asserted at the start).
Then a **sealed evaluation** (``tackroom seal``) on the test split that no phase ran:
every arm's final policy under every arm's final harness and the held-out harnesses.

Every phase is an ordinary run in the store (optimiser runs ``<run>.<arm>.r<r>``,
training runs ``<run>.<arm>.r<r>.train``, evaluations ``<run>.<arm>.r<r>.dev``, the sealed
run ``<run>.sealed``); the Self-HPO run's ``train_steps`` rows are its journal. A killed
run resumes from it: a journaled phase is read back, a phase cut short is resumed (the
optimiser from its own journal, training from its newest checkpoint, an evaluation from
its recorded episodes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tackroom.app.optimization import Journal, journal, optimize, recorded_config, scores_of
from tackroom.app.runs import new_run_id, open_store
from tackroom.app.selfhpo_config import ARM_PHASES, ARMS, SelfHPOConfig
from tackroom.core.errors import ConfigError, TackroomError
from tackroom.core.policy import Sampling
from tackroom.harness.spec import load_harness
from tackroom.records import RecordStore

__all__ = ["SelfHPOResult", "cross_effects", "read_self_hpo", "self_hpo"]

#: What each arm's policy and harness are called in the sealed table.
START = "start"


@dataclass
class SelfHPOResult:
    """A Self-HPO run: the lineage of every arm, and the sealed evaluation of the finals."""

    run_id: str
    #: (π_0, H_0) on dev: where every arm starts.
    start_dev: float
    #: arm → its rounds: the harness accepted, the policy trained, dev success after.
    lineage: dict[str, list[dict[str, Any]]]
    #: arm → {"policy": spec, "harness": ref, "harness_name": name}; also "start".
    finals: dict[str, dict[str, str]]
    budgets: dict[str, dict[str, Any]]
    spent: dict[str, dict[str, int]]
    sealed_run: str
    manifest: str
    #: policy label (start, or an arm) → harness name → {rate, lo, hi, n}.
    table: dict[str, dict[str, dict[str, float]]]
    #: name → paired bootstrap over (task, seed): {diff, lo, hi, p, n}.
    effects: dict[str, dict[str, float]]
    #: label → the sealed cell of its final pair: [policy id, harness name] as its episodes
    #: carry them (arms that kept the same harness content share its name).
    cells: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: The finished run as ``tackroom report`` shows it (:func:`read_self_hpo`).
    report: dict[str, Any] = field(default_factory=dict)


def self_hpo(config: SelfHPOConfig | str | Path | None = None, *,
             store: RecordStore | str | Path | None = None, run_id: str | None = None,
             resume_run: bool = False, out_dir: str | Path | None = None,
             on_note: Callable[[str], None] | None = None,
             on_step: Callable[[int, int, dict[str, float]], None] | None = None,
             on_progress: Callable[[int, int], None] | None = None) -> SelfHPOResult:
    """Run (or, with ``resume_run``, finish) a Self-HPO run; see the module docstring.

    ``on_note(line)`` gets a line per phase and decision, ``on_step(step, total, metrics)``
    each training step, ``on_progress(done, total)`` the phases (harness, policy, the
    sealed evaluation) finished so far.

    ::

        result = tackroom.self_hpo("selfhpo.toml")
        print(result.effects["alternate - harness"], result.table["alternate"])
    """
    if not resume_run:
        cfg = config if isinstance(config, SelfHPOConfig) else SelfHPOConfig.from_toml(config)
    with open_store(store) as st:
        rid = run_id or ("shpo-" + new_run_id())
        if resume_run:
            # The recorded settings: a resumed run is the same run.
            recorded = recorded_config(st, rid, "self-hpo", "Self-HPO run")
            cfg = SelfHPOConfig.from_dict(dict(recorded.get("selfhpo", {})), f"run {rid}")
        out = Path(out_dir or Path(st.path).parent / "self-hpo" / rid).resolve()
        loop = _SelfHPO(cfg, st, rid, out, on_note or (lambda _line: None), on_step)
        loop.progress = on_progress or (lambda _done, _total: None)
        result = loop.run(resume_run)
        result.report = read_self_hpo(st, rid)
        return result


class _SelfHPO:
    def __init__(self, cfg: SelfHPOConfig, store: RecordStore, run_id: str, out: Path,
                 note: Callable[[str], None],
                 on_step: Callable[[int, int, dict[str, float]], None] | None) -> None:
        self.cfg, self.store, self.id, self.out, self.note = cfg, store, run_id, out, note
        self.on_step = on_step
        self.journal = Journal(store, run_id)
        self.progress: Callable[[int, int], None] = lambda _done, _total: None
        self.done = 0

    def _phase_done(self) -> None:
        c = self.cfg
        total = 1 + sum(c.budget(a).harness_phases + c.budget(a).policy_phases for a in c.arms)
        self.done += 1
        self.progress(self.done, total)

    def run(self, resuming: bool) -> SelfHPOResult:
        c = self.cfg
        if resuming:
            self.journal = Journal(self.store, self.id, load=True)
            self.note(f"resuming {self.id}: {len(self.journal.entries)} journal entries")
        self.store.start_run(self.id, "self-hpo", {"selfhpo": c.to_dict()}, n_planned=0)
        status = "interrupted"
        try:
            (self.out / "harnesses").mkdir(parents=True, exist_ok=True)
            budgets = self._budgets()
            start = {"policy": c.start_policy, "harness": c.harness,
                     "harness_name": load_harness(c.harness).name}
            start_dev = self._measure("start", -1, start["policy"], start["harness"])["rate"]
            lineage, finals = {}, {START: start}
            for arm in c.arms:
                lineage[arm], finals[arm] = self._arm(arm, start)
            spent = {arm: _spent(rounds) for arm, rounds in lineage.items()}
            for arm in c.arms:  # a budget is an upper bound; updates are spent exactly
                b = budgets[arm]
                if spent[arm]["updates"] != b["updates"] or \
                        spent[arm]["dev_evaluations"] > b["dev_evaluations"]:
                    raise TackroomError(f"arm {arm} spent {spent[arm]} against its budget {b}",
                                        "self-hpo", "report this: the budgets must hold")
            sealed, manifest = self._sealed(finals)
            self._phase_done()
            table, effects, cells = self._analyse(sealed, finals)
            self.journal.log("final", {"kind": "final", "finals": finals, "table": table,
                                       "effects": effects, "spent": spent, "cells": cells})
            status = "finished"
        finally:
            self.store.finish_run(self.id, status)
        return SelfHPOResult(self.id, start_dev, lineage, finals, budgets, spent, sealed, manifest,
                             table, effects, cells)

    # ------------------------------------------------------------------ budgets
    def _budgets(self) -> dict[str, dict[str, Any]]:
        c = self.cfg
        budgets = {arm: c.budget(arm).to_dict() for arm in c.arms}
        every = {arm: c.budget(arm) for arm in ARMS}
        alt, har, pol = every["alternate"], every["harness"], every["policy"]
        # The comparison is only fair if the alternation spends what each half spends alone.
        assert (alt.updates, alt.rollouts_per_update) == (pol.updates, pol.rollouts_per_update)
        assert (alt.proposals, alt.dev_evaluations) == (har.proposals, har.dev_evaluations)
        if "budget" not in self.journal.entries:
            self.journal.log("budget", {"kind": "budget", "arms": budgets})
        return budgets

    # --------------------------------------------------------------------- arms
    def _arm(self, arm: str, start: dict[str, str]) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """Run ``arm``'s rounds (or read them back); its lineage and final pair."""
        does_harness, does_policy = ARM_PHASES[arm]
        policy, harness = start["policy"], start["harness"]
        model, adapter = self.cfg.model, self.cfg.adapter
        rounds = []
        for r in range(self.cfg.rounds):
            row: dict[str, Any] = {"round": r, "policy_before": policy,
                                   "harness_before": harness}
            if does_harness:
                h = self._harness_phase(arm, r, harness, policy)
                harness = h["harness"]
                row["harness_phase"] = h
                self._phase_done()
            if does_policy:
                p = self._policy_phase(arm, r, harness, model, adapter)
                policy, model, adapter = p["policy"], p["model"], p["adapter"]
                row["policy_phase"] = p
                self._phase_done()
            row.update(policy=policy, harness=harness, harness_name=load_harness(harness).name,
                       dev=self._measure(arm, r, policy, harness)["rate"])
            rounds.append(row)
        return rounds, {"policy": policy, "harness": harness,
                        "harness_name": load_harness(harness).name}

    def _harness_phase(self, arm: str, r: int, harness: str, policy: str) -> dict[str, Any]:
        """One optimiser round on ``harness`` for ``policy``; the harness it leaves."""
        key = f"harness:{arm}:{r}"
        if key in self.journal.entries:
            return self.journal.entries[key]
        c = self.cfg
        sub = f"{self.id}.{arm}.r{r}"
        proposer = c.proposer_spec(policy)
        self.note(f"{arm} round {r}: harness phase ({sub}; proposer {proposer})")
        cfg = c.optimize_config(harness, policy, r)
        resumed = self.store.run(sub) is not None
        res = optimize(None if resumed else cfg, store=self.store, run_id=sub,
                       resume_run=resumed, out_dir=self.out / arm / f"r{r}",
                       on_note=lambda line: self.note(f"  {line}"), test_split=False)
        entries = journal(self.store, sub)
        proposal = entries.get("proposal:0", {})
        accepted = res.accepted[0] if res.accepted else None
        new = harness
        if accepted is not None:
            # A name of its own per arm and round, so the sealed table tells them apart
            # (the name is not in the hash: the alias is the accepted candidate exactly).
            name = f"{arm}-h{r + 1}"
            new = str(self.out / "harnesses" / f"{name}.toml")
            Path(new).write_text(f'name = "{name}"\ndescription = "Self-HPO {arm} arm, round '
                                 f'{r}: {accepted} of {sub}"\nextends = "{res.best_path}"\n')
        cand = next((x for x in proposal.get("candidates", []) if x["name"] == accepted), None)
        dev = {n: e["rate"] for n, e in entries.items()
               if e.get("kind") == "evaluation" and e.get("split") == "dev"}
        return self.journal.log(key, {
            "kind": "harness", "arm": arm, "round": r, "run": sub, "policy": policy,
            "proposer": proposer, "parent": harness, "parent_hash": load_harness(harness).hash,
            "accepted": accepted, "harness": new, "hash": load_harness(new).hash,
            "edits": cand["edits"] if cand else [],
            "proposed": [{"name": x["name"], "edits": x["edits"]}
                         for x in proposal.get("candidates", [])],
            "rejected": len(proposal.get("rejected", [])),
            "unusable": proposal.get("proposer_log", []),
            "dev": {k.split(":")[1]: v for k, v in dev.items()},
            "dev_evaluations": res.dev_evaluations})

    def _policy_phase(self, arm: str, r: int, harness: str, model: str,
                      adapter: str) -> dict[str, Any]:
        """``steps_per_round`` RL updates under ``harness``, from ``model`` (+ ``adapter``)."""
        from tackroom.train.engine import latest_checkpoint
        from tackroom.train.rl import run_rl

        key = f"policy:{arm}:{r}"
        if key in self.journal.entries:
            return self.journal.entries[key]
        c = self.cfg
        run = f"{self.id}.{arm}.r{r}.train"
        out = self.out / arm / f"r{r}" / "train"
        # Each round's seed: the same for every arm that trains, so the halves compare.
        rl = c.rl_config(model=model, adapter=adapter, harness=harness, out_dir=str(out),
                         seed=c.seed * 1000 + r)
        resuming = latest_checkpoint(out) is not None
        self.note(f"{arm} round {r}: policy phase ({run}, {c.steps_per_round} steps under "
                  f"{load_harness(harness).name}{', resumed' if resuming else ''})")
        res = run_rl(rl, self.store, run, resume=resuming, on_step=self.on_step,
                     on_note=lambda line: self.note(f"  {line}"))
        if rl.lora:
            model_next, adapter_next = res.base_model, str(res.final)
            policy = f"hf:{res.base_model}:{res.final}"
        else:
            model_next, adapter_next = str(res.final), ""
            policy = f"hf:{res.final}"
        steps = self.store.train_steps(run)
        success = [s["success"] for s in steps if isinstance(s.get("success"), int | float)]
        return self.journal.log(key, {
            "kind": "policy", "arm": arm, "round": r, "run": run, "harness": harness,
            "policy": policy, "model": model_next, "adapter": adapter_next,
            "updates": res.steps, "version": res.version,
            "train_success": sum(success) / len(success) if success else None})

    def _measure(self, arm: str, r: int, policy: str, harness: str) -> dict[str, Any]:
        """(``policy``, ``harness``) on dev after round ``r`` of ``arm`` (``start``: before)."""
        key = f"measure:{arm}:{r}"
        if key in self.journal.entries:
            return self.journal.entries[key]
        c = self.cfg
        run = f"{self.id}.start.dev" if arm == "start" else f"{self.id}.{arm}.r{r}.dev"
        scores = scores_of(self.store, run, suite=c.suite, tasks=c.tasks, harness=harness,
                           policy=policy, seeds=c.seeds("dev"),
                           sampling=self._sampling(), concurrency=c.concurrency,
                           base_url=c.base_url, train_run=self.id, note=self.note)
        rate = sum(scores.values()) / len(scores) if scores else float("nan")
        self.note(f"{arm}{'' if arm == 'start' else f' round {r}'}: {rate:.0%} on dev "
                  f"({run})")
        return self.journal.log(key, {"kind": "measure", "arm": arm, "round": r, "run": run,
                                      "policy": policy, "harness": harness, "rate": rate,
                                      "n": len(scores)})

    def _sampling(self) -> Sampling:
        return Sampling(temperature=self.cfg.temperature, max_tokens=self.cfg.max_tokens)

    # --------------------------------------------------------------- the seal
    def _sealed(self, finals: Mapping[str, Mapping[str, str]]) -> tuple[str, str]:
        """Every final policy × every final harness and the held-out ones, on test."""
        from tackroom.app.evaluation import evaluate_sealed, resume
        from tackroom.app.sealing import seal

        c = self.cfg
        run = f"{self.id}.sealed"
        path = self.out / "manifest.json"
        entry = self.journal.entries.get("sealed")
        if entry is None:
            policies = list(dict.fromkeys(f["policy"] for f in finals.values()))
            harnesses = list(_by_hash(finals).values())
            m = seal(path, suite=c.suite, tasks=c.tasks or None, harnesses=harnesses,
                     held_out=[h for h in c.held_out if h not in harnesses],
                     train_harnesses=harnesses, policies=policies,
                     seeds=c.seeds("test"),
                     sampling=self._sampling(), force=True)
            entry = self.journal.log("sealed", {"kind": "sealed", "manifest": str(path),
                                                "hash": m.hash, "run": run,
                                                "cells": m.n_cells})
            self.note(f"sealed {path}: sha256:{m.hash}, {m.n_cells} cells")
        info = self.store.run(run)
        if info is None:
            evaluate_sealed(path, store=self.store, run_id=run, concurrency=c.concurrency,
                            base_url=c.base_url)
        elif info.get("status") != "finished":
            self.note(f"resuming the sealed evaluation {run}")
            resume(run, store=self.store, concurrency=c.concurrency, base_url=c.base_url)
        return run, entry["manifest"]

    def _analyse(self, run: str, finals: Mapping[str, Mapping[str, str]]
                 ) -> tuple[dict[str, dict[str, dict[str, float]]], dict[str, dict[str, float]],
                            dict[str, list[str]]]:
        from tackroom.core.run import RunConfig

        ids = dict(RunConfig.from_dict((self.store.run(run) or {}).get("config")).policy_ids)
        rows = self.store.episodes(run)
        # Two arms that kept the same harness (same hash) share its sealed cells and name.
        sealed_name = {h: load_harness(ref).name for h, ref in _by_hash(finals).items()}
        pairs = {label: (ids.get(f["policy"], f["policy"]),
                         sealed_name[load_harness(f["harness"]).hash])
                 for label, f in finals.items()}
        harness_names = list(dict.fromkeys(
            [h for _p, h in pairs.values()] + [load_harness(h).name for h in self.cfg.held_out]))
        return (sealed_table(rows, {k: v[0] for k, v in pairs.items()}, harness_names),
                cross_effects(rows, pairs, [load_harness(h).name for h in self.cfg.held_out]),
                {k: list(v) for k, v in pairs.items()})


def read_self_hpo(store: RecordStore, run_id: str) -> dict[str, Any]:
    """A finished Self-HPO run as the report shows it: the lineage of every arm (per round:
    the harness accepted and its edits, who proposed them, the updates, dev success after),
    the sealed table and the effects; JSON-able. Raises ConfigError if it has not finished."""
    entries = journal(store, run_id)
    final = entries.get("final")
    if final is None:
        raise ConfigError(f"Self-HPO run {run_id!r} has not finished", "report",
                          f"finish it first: tackroom self-hpo --resume {run_id}")
    cfg = (store.run(run_id) or {}).get("config", {}).get("selfhpo", {})
    # Settings are recorded by section; runs recorded before kept them flat.
    rounds = int((cfg.get("selfhpo") or cfg).get("rounds", 0))
    lineage: dict[str, list[dict[str, Any]]] = {}
    for arm in [a for a in ARMS if a in final["finals"]]:
        rows = []
        for r in range(rounds):
            h, p = entries.get(f"harness:{arm}:{r}"), entries.get(f"policy:{arm}:{r}")
            m = entries[f"measure:{arm}:{r}"]
            rows.append({"round": r, "accepted": h["accepted"] if h else None,
                         "edits": h["edits"] if h else [], "proposer": h["proposer"] if h else "",
                         "harness_phase": h is not None, "updates": p["updates"] if p else 0,
                         "harness": load_harness(m["harness"]).name, "dev": m["rate"],
                         "n": m["n"]})
        lineage[arm] = rows
    return {"run_id": run_id, "start_dev": entries["measure:start:-1"]["rate"],
            "lineage": lineage, "table": final["table"], "effects": final["effects"],
            "spent": final["spent"], "sealed_run": entries["sealed"]["run"]}


def sealed_table(rows: list[dict[str, Any]], policies: Mapping[str, str],
                 harnesses: list[str]) -> dict[str, dict[str, dict[str, float]]]:
    """Success with Wilson 95% intervals: policy label → harness name → {rate, lo, hi, n}."""
    from tackroom.analysis.stats import final_attempts, scored_rows, wilson

    scored = scored_rows(final_attempts(rows))
    table: dict[str, dict[str, dict[str, float]]] = {}
    for label, pid in policies.items():
        table[label] = {}
        for h in harnesses:
            mine = [r for r in scored if r["policy"] == pid and r["harness"] == h]
            k = sum(r["outcome"] == "success" for r in mine)
            lo, hi = wilson(k, len(mine))
            table[label][h] = {"rate": k / len(mine) if mine else float("nan"), "lo": lo,
                               "hi": hi, "n": len(mine)}
    return table


def cross_effects(rows: list[dict[str, Any]], pairs: Mapping[str, tuple[str, str]],
                  held_out: list[str]) -> dict[str, dict[str, float]]:
    """The sealed evaluation's effects, each a paired bootstrap over (task, seed).

    ``pairs`` maps ``start`` and each arm to its final (policy id, harness name). The
    effects: each arm's gain over the start; the alternation against each half; and the
    *carry-over* of each trained policy — how much more its own harness helps it than it
    helps the start policy, [S(π, H) − S(π, H_0)] − [S(π_0, H) − S(π_0, H_0)], the
    mismatch story of docs/research.md §1 (positive: the policy now prefers its harness);
    and each final policy against the start (and the alternation's against the policy
    arm's) under each held-out harness.
    """
    import numpy as np

    from tackroom.analysis.stats import final_attempts, paired_bootstrap, paired_cells, scored_rows

    scored = scored_rows(final_attempts(rows))

    def boot(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
        r = paired_bootstrap(a, b)
        return {"diff": r.diff, "lo": r.lo, "hi": r.hi, "p": r.p_value, "n": r.n}

    def paired(a: tuple[str, str], b: tuple[str, str]) -> dict[str, float]:
        return boot(*paired_cells(rows, a, b))

    out: dict[str, dict[str, float]] = {}
    start = pairs[START]
    arms = [a for a in ARMS if a in pairs]
    for arm in arms:
        out[f"{arm} - start"] = paired(pairs[arm], start)
    for half in ("harness", "policy"):
        if "alternate" in pairs and half in pairs:
            out[f"alternate - {half}"] = paired(pairs["alternate"], pairs[half])
    pi0, h0 = start
    for arm in arms:
        pi, h = pairs[arm]
        if pi == pi0 or h == h0:
            continue  # no policy trained, or no harness of its own: nothing to carry
        cells = [_cells(scored, p, hh) for p, hh in ((pi, h), (pi, h0), (pi0, h), (pi0, h0))]
        units = sorted(set.intersection(*(set(c) for c in cells)), key=str)
        own = np.array([cells[0][u] - cells[1][u] for u in units])
        base = np.array([cells[2][u] - cells[3][u] for u in units])
        out[f"carry-over {arm}"] = boot(own, base)
    for h in held_out:
        for arm in arms:
            if pairs[arm][0] != pi0:
                out[f"{arm} - start under {h}"] = paired((pairs[arm][0], h), (pi0, h))
        if "alternate" in pairs and "policy" in pairs:
            # Does co-evolving with edited harnesses change how the policy transfers?
            out[f"alternate - policy under {h}"] = paired((pairs["alternate"][0], h),
                                                          (pairs["policy"][0], h))
    return out


def _by_hash(finals: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """Harness hash → the first final harness ref with that content (the sealed one)."""
    out: dict[str, str] = {}
    for f in finals.values():
        out.setdefault(load_harness(f["harness"]).hash, f["harness"])
    return out


def _cells(scored: list[dict[str, Any]], policy: str, harness: str
           ) -> dict[tuple[str, int], float]:
    """(task, seed) → success of ``policy`` under ``harness`` among scored final attempts."""
    return {(r["task"], int(r["seed"])): float(r["outcome"] == "success") for r in scored
            if r["policy"] == policy and r["harness"] == harness}


def _spent(rounds: list[dict[str, Any]]) -> dict[str, int]:
    """What an arm's recorded rounds spent: proposals, dev evaluations, updates."""
    h = [r["harness_phase"] for r in rounds if "harness_phase" in r]
    p = [r["policy_phase"] for r in rounds if "policy_phase" in r]
    return {"harness_phases": len(h), "proposals": sum(len(x["proposed"]) + x["rejected"]
                                                       for x in h),
            "dev_evaluations": sum(x["dev_evaluations"] for x in h),
            "policy_phases": len(p), "updates": sum(x["updates"] for x in p)}
