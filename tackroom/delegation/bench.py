"""``tackroom delegate bench``: decision models graded from isolated decisions to full control.

The ladder (docs/delegation.md), for each delegating harness D (``tackroom delegate
fit`` wrote it) against the LLM alone under the harness it extends:

- ``llm``: the LLM makes every choice (the points are recorded, with the expert's
  choice: the isolated questions of rung (i) come from these very states);
- (i) ``isolated``: D's accuracy on those recorded states, per choice type, beside the
  LLM's own accuracy there — no episode is run for it;
- (ii) ``one``: D takes exactly one decision per episode (its first point, whatever its
  confidence), the LLM the rest;
- (iii) ``confident``: D acts wherever it is confident (p ≥ τ_c), the LLM elsewhere;
- (iv) ``alone``: D acts at every point it can (its best action choice), the LLM only
  where no point applies.

Every rung runs the same tasks × seeds in one recorded run, through the evaluation
function the caller passes (this layer sits below the API that runs evaluations:
:func:`tackroom.app.delegation.bench_delegation` passes :func:`tackroom.evaluate`). Metrics: task success
(Wilson interval) and its paired difference to ``llm`` (paired bootstrap over
task × seed), decision accuracy at D's take-overs (its precision), take-over rate per
turn, LLM calls and tokens per episode, tokens saved, wall seconds per episode.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tackroom.analysis.stats import paired_bootstrap, wilson
from tackroom.core.errors import ConfigError
from tackroom.core.policy import Sampling
from tackroom.delegation.data import labelled, recorded_points
from tackroom.harness.spec import HarnessSpec, load_harness
from tackroom.policies.delegation.runtime import load_decision_model

RUNGS = ("llm", "isolated", "one", "confident", "alone")

#: ``evaluate(suite, *, tasks, harnesses, policies, seeds, sampling, concurrency, store,
#: suite_options, policy_options, on_start, on_episode) -> run`` (with ``run.id``): the
#: signature of :func:`tackroom.evaluate`, which the API layer passes in.
Evaluate = Callable[..., Any]


@dataclass
class RungRow:
    """One row of the ladder table."""

    rung: str
    model: str                          # the delegating harness ("" for the LLM alone)
    harness: str = ""                   # name@hash of the harness the rung ran
    episodes: int = 0
    success: float | None = None
    success_ci: tuple[float, float] | None = None
    delta: float | None = None          # success − the LLM alone's, paired by task × seed
    delta_ci: tuple[float, float] | None = None
    accuracy: float | None = None       # isolated: argmax == expert; else precision of take-overs
    accuracy_ci: tuple[float, float] | None = None
    accuracy_n: int = 0
    by_type: dict[str, dict[str, Any]] = field(default_factory=dict)
    takeover_rate: float | None = None  # take-overs / turns
    llm_calls: float | None = None      # per episode
    llm_tokens: float | None = None     # per episode
    tokens_saved: float | None = None   # per episode (estimated: see runtime.saved_cost)
    wall_s: float | None = None         # per episode


@dataclass
class BenchResult:
    """The ladder: one row per rung and decision model, and the run that holds them."""

    run_id: str
    db: str
    rows: list[RungRow]

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "db": self.db, "rows": [asdict(r) for r in self.rows]}


def run_ladder(evaluate: Evaluate, suite: str, *, tasks: Sequence[str],
               seeds: Sequence[int] | str, policy: str, delegating: Sequence[str],
               workdir: str | Path, db: str | Path | None = None,
               sampling: Sampling | None = None, concurrency: int = 0,
               rungs: Sequence[str] = RUNGS, suite_options: Mapping[str, Any] | None = None,
               policy_options: Mapping[str, Any] | None = None,
               every_rung_for_each: bool = False,
               on_start: Callable[[Any], None] | None = None,
               on_episode: Callable[[Any], None] | None = None) -> BenchResult:
    """Run the ladder with ``evaluate``; one recorded run holds every rung.

    The first delegating harness runs every rung of ``rungs``; the others (decision
    models to compare: naive thresholds, other training sets) run ``isolated`` and
    ``confident`` only, unless ``every_rung_for_each``.
    """
    bad = [r for r in rungs if r not in RUNGS]
    if bad:
        raise ConfigError(f"unknown rung(s) {bad}", "--rungs", f"choose from: {', '.join(RUNGS)}")
    if not delegating:
        raise ConfigError("no delegating harness to grade", "--delegating",
                          "fit one first: tackroom delegate fit --db R --harness H --out D.toml")
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    specs = [load_harness(d) for d in delegating]
    for d, spec in zip(delegating, specs, strict=True):
        if spec.delegation is None or "model" not in spec.delegation:
            raise ConfigError(f"harness {spec.name!r} has no decision model", f"--delegating {d}",
                              "give a harness written by tackroom delegate fit")
    base = _llm_harness(specs[0], work)
    plan: list[tuple[str, str, str]] = [("llm", "", str(base))]  # (rung, model, file)
    for i, (d, spec) in enumerate(zip(delegating, specs, strict=True)):
        path = str(Path(d).resolve()) if Path(d).suffix == ".toml" else d
        full = i == 0 or every_rung_for_each
        if "one" in rungs and full:
            plan.append(("one", spec.name, str(_variant(spec, path, work, "one"))))
        if "confident" in rungs:
            plan.append(("confident", spec.name, path))
        if "alone" in rungs and full:
            plan.append(("alone", spec.name, str(_variant(spec, path, work, "alone"))))
    harness_files = list(dict.fromkeys(f for _, _, f in plan))
    db = Path(db) if db else work / "bench.duckdb"
    run = evaluate(suite, tasks=list(tasks), harnesses=harness_files, policies=[policy],
                   seeds=seeds, sampling=sampling, concurrency=concurrency, store=db,
                   suite_options=suite_options, policy_options=policy_options,
                   on_start=on_start, on_episode=on_episode)
    loaded = {f: load_harness(f) for f in harness_files}
    episodes = _episodes(db, run.id)
    by_harness: dict[str, list[dict[str, Any]]] = {}
    for e in episodes:
        by_harness.setdefault(e["harness_hash"], []).append(e)
    llm_spec = loaded[str(base)]
    llm_eps = by_harness.get(llm_spec.hash, [])
    rows: list[RungRow] = []
    for rung, model, f in plan:
        spec = loaded[f]
        rows.append(_rung_row(rung, model, spec, by_harness.get(spec.hash, []), llm_eps))
    if "isolated" in rungs:
        points = [p for p in labelled(recorded_points(db, [run.id]))
                  if p.episode_id in {e["episode_id"] for e in llm_eps}]
        rows.insert(1, _isolated_llm(points))
        for i, spec in enumerate(specs):
            rows.insert(2 + i, _isolated(spec, points))
    result = BenchResult(run.id, str(db), rows)
    (work / "ladder.json").write_text(json.dumps(result.to_dict(), indent=1))
    return result


def _llm_harness(spec: HarnessSpec, work: Path) -> Path:
    """The LLM-alone harness: what D extends, recording D's points, with no model."""
    base = spec.extends[-2] if len(spec.extends) >= 2 else None
    if base is None:
        raise ConfigError(f"harness {spec.name!r} extends no harness", spec.source,
                          "grade a harness written by tackroom delegate fit (it extends the "
                          "harness that recorded the points)")
    points = spec.delegation["points"]  # type: ignore[index]
    commands = spec.delegation.get("commands")  # type: ignore[union-attr]
    parent = load_harness(base)
    out = work / f"{parent.name}-llm.toml"
    lines = [f"name = \"{parent.name}-llm\"", f"extends = {json.dumps(str(Path(base).resolve()))}",
             "", "[delegation]", "points = " + json.dumps(points)]
    if commands:
        lines.append("commands = " + json.dumps(commands))
    # The parent may itself be a recording harness: its own points are replaced, not added.
    out.write_text("\n".join(lines) + "\n")
    return out


def _variant(spec: HarnessSpec, path: str, work: Path, rung: str) -> Path:
    out = work / f"{spec.name}-{rung}.toml"
    extra = "max_takeovers = 1" if rung == "one" else "max_takeovers = 0"
    out.write_text(f"name = \"{spec.name}-{rung}\"\nextends = {json.dumps(path)}\n\n"
                   f"[delegation]\nmode = \"always\"\n{extra}\n")
    return out


_EPISODES_SQL = """
SELECT e.episode_id, e.task, e.seed, e.harness, e.harness_hash, e.policy, e.outcome, e.attempt,
       CAST(e.sampling AS VARCHAR) AS sampling,
       e.started_at, e.ended_at,
       count(t.idx) AS turns,
       coalesce(sum(t.prompt_tokens + t.completion_tokens), 0) AS llm_tokens,
       list(CAST(t.delegation AS VARCHAR) ORDER BY t.idx) AS delegation
FROM episodes e LEFT JOIN turns t USING (run_id, episode_id)
WHERE e.run_id = ? GROUP BY ALL
"""


def _episodes(db: Path, run_id: str) -> list[dict[str, Any]]:
    from tackroom.analysis.stats import final_attempts
    from tackroom.records import RecordStore

    with RecordStore(db, read_only=True) as store:
        rows = store.query(_EPISODES_SQL, [run_id])
    return [r for r in final_attempts(rows) if r["outcome"] != "infra_error"]


def _rung_row(rung: str, model: str, spec: HarnessSpec, eps: list[dict[str, Any]],
              llm_eps: list[dict[str, Any]]) -> RungRow:
    row = RungRow(rung, model, spec.ident, len(eps))
    if not eps:
        return row
    wins = sum(e["outcome"] == "success" for e in eps)
    row.success, row.success_ci = wins / len(eps), wilson(wins, len(eps))
    if rung != "llm":
        base = {(e["task"], e["seed"]): float(e["outcome"] == "success") for e in llm_eps}
        pairs = [(float(e["outcome"] == "success"), base[(e["task"], e["seed"])])
                 for e in eps if (e["task"], e["seed"]) in base]
        if pairs:
            bs = paired_bootstrap([a for a, _ in pairs], [b for _, b in pairs])
            row.delta, row.delta_ci = bs.diff, (bs.lo, bs.hi)
    turns = llm_calls = takeovers = right = labelled_takeovers = 0
    saved = 0.0
    by_type: dict[str, list[int]] = {}
    for e in eps:
        turns += e["turns"]
        for text in e["delegation"] or []:
            rec = json.loads(text) if text else None
            if rec is None or rec.get("acted") != "decision":
                llm_calls += 1
                continue
            takeovers += 1
            s = rec.get("saved") or {}
            saved += float(s.get("prompt_tokens", 0)) + float(s.get("completion_tokens", 0))
            point = rec["points"][rec["point"]]
            counts = by_type.setdefault(point["type"], [0, 0, 0])
            counts[0] += 1
            if point.get("expert") is not None:
                labelled_takeovers += 1
                counts[1] += 1
                if point["expert"] == rec["choice"]:
                    right += 1
                    counts[2] += 1
    n = len(eps)
    row.takeover_rate = takeovers / turns if turns else 0.0
    row.llm_calls = llm_calls / n
    row.llm_tokens = sum(e["llm_tokens"] for e in eps) / n
    row.tokens_saved = saved / n
    row.wall_s = sum((e["ended_at"] or 0) - (e["started_at"] or 0) for e in eps) / n
    if labelled_takeovers:
        row.accuracy = right / labelled_takeovers
        row.accuracy_ci = wilson(right, labelled_takeovers)
        row.accuracy_n = labelled_takeovers
    row.by_type = {t: {"takeovers": c[0], "labelled": c[1],
                       "precision": c[2] / c[1] if c[1] else None} for t, c in by_type.items()}
    return row


def _isolated_llm(points: list[Any]) -> RungRow:
    """The LLM's own isolated accuracy: how often its choice was the expert's (a reply that
    could not be read chose nothing, and counts as wrong)."""
    row = RungRow("isolated", "")
    scored = [(p.type, p.taken == p.expert) for p in points]
    _accuracy(row, scored)
    return row


def _isolated(spec: HarnessSpec, points: list[Any]) -> RungRow:
    row = RungRow("isolated", spec.name, spec.ident)
    model = load_decision_model(spec.delegation)  # type: ignore[arg-type]
    scored = []
    for p in points:
        probs = model.predict(p.point)
        best = max(range(len(probs)), key=lambda i: (probs[i], -i))
        scored.append((p.type, best == p.expert))
    _accuracy(row, scored)
    return row


def _accuracy(row: RungRow, scored: list[tuple[str, bool]]) -> None:
    if not scored:
        return
    right = sum(ok for _, ok in scored)
    row.accuracy, row.accuracy_ci = right / len(scored), wilson(right, len(scored))
    row.accuracy_n = len(scored)
    types: dict[str, list[int]] = {}
    for t, ok in scored:
        c = types.setdefault(t, [0, 0])
        c[0] += 1
        c[1] += ok
    row.by_type = {t: {"n": c[0], "accuracy": c[1] / c[0], "ci": wilson(c[1], c[0])}
                   for t, c in types.items()}
