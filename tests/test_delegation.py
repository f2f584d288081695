"""Delegation: the [delegation] slot, thresholds, the runtime record, and the CLI (issue 17).

Real parts throughout: the toy suite and its scripted experts label the decision points,
``tackroom delegate fit`` trains a real logistic decision model, and the LLM is a real
OpenAI-compatible HTTP server on 127.0.0.1 answering from a script.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from conftest import one_line_error, run_cli

from tackroom import evaluate
from tackroom.core.episode import Outcome
from tackroom.core.errors import ConfigError, HarnessError
from tackroom.core.policy import Sampling
from tackroom.delegation.data import recorded_points
from tackroom.delegation.thresholds import Scored, fit_thresholds, precision_at
from tackroom.harness.spec import load_harness
from tackroom.policies.delegation import runtime
from tackroom.policies.openai_policy import OpenAIPolicy
from tackroom.records import RecordStore
from tackroom.runner.grid import plan_grid, run_cells
from tackroom.suites import get_suite
from tackroom.testing import ScriptedOpenAIServer, text

TASKS = ["click-button", "click-link", "click-option", "enter-text"]

RECORD = """name = "toy-record"
extends = "som-tools"

[delegation]
points = ["submit", "type", "click"]
"""


# -- thresholds ---------------------------------------------------------------------------
def _crafted(kind: str, n: int, wrong_every: int, start: float = 0.99, step: float = 0.005
             ) -> list[Scored]:
    """``n`` points of one type, confidence falling from ``start``; every ``wrong_every``-th
    point (counting from the most confident) is wrong, so precision falls with τ."""
    out = []
    for i in range(n):
        conf = start - step * i
        wrong = wrong_every and i % wrong_every == wrong_every - 1 and i > 10
        label = 2 if wrong else 1
        out.append(Scored(kind, [0.0, conf, 1.0 - conf], label, [False, True, True]))
    return out


def test_thresholds_reach_the_target_precision_per_type_and_a_global_one_does_not():
    easy = _crafted("click", 100, wrong_every=20)   # ~95% precise down to the bottom
    hard = _crafted("submit", 100, wrong_every=3)   # only its top is precise enough
    fits = {f.type: f for f in fit_thresholds(easy + hard, 0.9, min_support=5)}
    for kind, pts in (("click", easy), ("submit", hard)):
        fit = fits[kind]
        assert fit.tau is not None and fit.precision >= 0.9
        prec, cov, k = precision_at(pts, fit.tau)
        assert prec is not None and prec >= 0.9 and k == fit.takeovers
        # The lowest such τ: one step lower would take over a point that breaks the target
        # (or there is none left).
        lower = [s.confidence for s in pts if s.confidence < fit.tau]
        if lower:
            p2, _, _ = precision_at(pts, max(lower))
            assert p2 < 0.9 or max(lower) == fit.tau
    assert fits["click"].coverage > fits["submit"].coverage
    # One τ for both types: reaches the target on the pool, but not on the hard type alone.
    (shared,) = fit_thresholds(easy + hard, 0.9, min_support=5, per_type=False)
    assert shared.type == "*" and shared.precision >= 0.9
    # A type that never reaches the target is never delegated.
    hopeless = [Scored("type", [0.1, 0.9], 0, [False, True]) for _ in range(20)]
    (never,) = fit_thresholds(hopeless, 0.9)
    assert never.tau is None and never.takeovers == 0
    # A confident "continue" is not a take-over candidate.
    cont = [Scored("click", [0.95, 0.05], 0, [False, True]) for _ in range(10)]
    (none,) = fit_thresholds(cont, 0.5)
    assert none.tau is None
    with pytest.raises(ConfigError, match="target precision"):
        fit_thresholds(easy, 1.5)


# -- the slot -----------------------------------------------------------------------------
def _write(path: Path, body: str) -> Path:
    path.write_text(body)
    return path


@pytest.mark.parametrize("body, msg", [
    ('[delegation]\npoints = ["pick"]\n', "unknown decision point type 'pick'"),
    ('[delegation]\npoints = []\n', "needs points"),
    ('[delegation]\npoints = ["click"]\nmodel = "m"\nmodel_hash = "abc"\n', "12-hex"),
    ('[delegation]\npoints = ["click"]\n[delegation.thresholds]\nclick = 0.5\n',
     "thresholds without a decision model"),
    ('[delegation]\npoints = ["click"]\nmodel = "m"\nmodel_hash = "0123456789ab"\n'
     '[delegation.thresholds]\nclick = 1.5\n', "from 0 to 1"),
    ('[delegation]\npoints = ["click"]\nmodel = "m"\nmodel_hash = "0123456789ab"\n'
     '[delegation.thresholds]\ntype = 0.5\n', "not a declared point"),
    ('[delegation]\npoints = ["command"]\n', "short list of commands"),
    ('[delegation]\npoints = ["click"]\nmode = "sometimes"\n', "unknown delegation mode"),
    ('[delegation]\npoints = ["click"]\nwho = 1\n', "unknown key"),
])
def test_a_bad_delegation_slot_is_one_clear_error(tmp_path, body, msg):
    path = _write(tmp_path / "bad.toml", 'extends = "som-tools"\n' + body)
    with pytest.raises(HarnessError, match=msg) as e:
        load_harness(str(path))
    assert "[delegation]" in str(e.value)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory) -> dict[str, Path]:
    """Expert episodes under a recording harness, and a logistic model fitted on them by
    ``tackroom delegate fit``."""
    work = tmp_path_factory.mktemp("delegation")
    record = _write(work / "toy-record.toml", RECORD)
    db = work / "train.duckdb"
    evaluate("toy", tasks=TASKS, harnesses=[str(record)], policies=["expert"],
             seeds=range(40), store=db)
    out = work / "harnesses" / "toy-delegate.toml"
    proc = run_cli("delegate", "fit", "--db", str(db), "--harness", str(record), "--out",
                   str(out), "--model", "logistic", "--target-precision", "0.9", cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert "isolated accuracy" in proc.stdout and "wrote" in proc.stdout
    return {"work": work, "record": record, "db": db, "delegating": out}


def test_recording_harness_records_choice_sets_with_the_experts_choice(fitted):
    points = recorded_points(fitted["db"])
    assert {p.type for p in points} == {"submit", "type", "click"}
    for p in points:
        assert p.point["choices"][0]["label"] == "continue"
        assert p.expert is not None and p.acted == "llm"
        # The expert *policy* acted, so what the turn took is what the expert chose.
        assert p.taken == p.expert
    clicks = [p for p in points if p.type == "click" and p.expert]
    assert clicks and all(p.point["choices"][p.expert]["action"]["kind"] == "click"
                          for p in clicks)


def test_a_delegating_harness_is_an_ordinary_harness_with_its_own_hash(fitted, tmp_path):
    base = load_harness(str(fitted["record"]))
    dele = load_harness(str(fitted["delegating"]))
    assert dele.hash != base.hash and dele.hash != load_harness("som-tools").hash
    assert dele.delegation["model_hash"] and set(dele.delegation["thresholds"]) <= \
        {"submit", "type", "click"}
    # Copied elsewhere, model and all: the same harness (the hash pins the model's content).
    copy = tmp_path / "elsewhere"
    shutil.copytree(fitted["delegating"].parent, copy)
    shutil.copy(fitted["record"], tmp_path / "toy-record.toml")
    moved = load_harness(str(copy / "toy-delegate.toml"))
    assert moved.hash == dele.hash and moved.delegation["model"] != dele.delegation["model"]
    # Another threshold is another harness.
    other = _write(tmp_path / "other.toml", f'extends = "{copy / "toy-delegate.toml"}"\n'
                   "[delegation.thresholds]\nclick = 0.5\n")
    assert load_harness(str(other)).hash != dele.hash
    proc = run_cli("harness", "validate", str(fitted["delegating"]), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_a_tampered_decision_model_is_refused_before_anything_runs(fitted, tmp_path):
    copy = tmp_path / "c"
    shutil.copytree(fitted["delegating"].parent, copy)
    shutil.copy(fitted["record"], tmp_path / "toy-record.toml")
    model_dir = copy / "toy-delegate.decision"
    meta = json.loads((model_dir / "decision.json").read_text())
    meta["tampered"] = True
    (model_dir / "decision.json").write_text(json.dumps(meta))
    runtime._MODELS.clear()
    proc = run_cli("eval", "--suite", "toy", "--tasks", "click-button", "--harness",
                   str(copy / "toy-delegate.toml"), "--policy", "expert", "--seeds", "0",
                   "--db", str(tmp_path / "r.duckdb"), cwd=tmp_path)
    assert "hash" in one_line_error(proc)


def _episodes(harness: str, script, seeds, tasks=TASKS):
    suite = get_suite("toy")
    chosen = [t for t in suite.tasks() if t.id in tasks]

    async def go(srv):
        policy = OpenAIPolicy("scripted-llm", base_url=srv.base_url, api_key="k",
                              backoff_base=0.01, backoff_max=0.05)
        try:
            plan = plan_grid(chosen, [load_harness(harness)], [policy], list(seeds),
                             Sampling(max_tokens=32))
            return await run_cells(plan.cells, suite, "r", concurrency=1)
        finally:
            await policy.aclose()

    with ScriptedOpenAIServer(script) as srv:
        eps = asyncio.run(go(srv))
        return eps, len(srv.requests)


def test_a_run_records_who_acted_and_what_the_llm_would_have_spent(fitted, tmp_path):
    # The LLM here only ever writes something unreadable: whatever succeeds is the
    # decision model's doing, and every LLM turn is a real HTTP call. One take-over per
    # episode, so that the two-step tasks have LLM turns whatever the fitted τ.
    once = _write(tmp_path / "once.toml", f'extends = "{fitted["delegating"]}"\n'
                  "[delegation]\nmax_takeovers = 1\n")
    eps, calls = _episodes(str(once), lambda req: text("I am not sure."),
                           seeds=range(100, 106))
    turns = [t for e in eps for t in e.turns]
    assert turns and all(t.delegation is not None for t in turns)
    by_decision = [t for t in turns if t.delegation["acted"] == "decision"]
    by_llm = [t for t in turns if t.delegation["acted"] == "llm"]
    assert by_decision and by_llm
    assert calls == len(by_llm)  # the decision model's turns made no model call
    for t in by_decision:
        rec = t.delegation
        point = rec["points"][rec["point"]]
        assert point["p"][rec["choice"]] >= point["tau"]
        assert t.actions == [point["choices"][rec["choice"]]["action"]]
        assert t.prompt_tokens == 0 and t.completion_tokens == 0
        saved = rec["saved"]
        assert saved["prompt_tokens"] > 0 and saved["basis"]
    for t in by_llm:
        assert t.prompt_tokens > 0
        # Asked and not confident, or not asked once the episode's one take-over was used.
        asked = all(p.get("p") is not None for p in t.delegation["points"])
        assert asked or "max_takeovers = 1 reached" in t.delegation.get("note", "")
    # The LLM alone fails every episode; the decision model solved some of them.
    assert any(e.outcome is Outcome.SUCCESS for e in eps)


class _Garbage:
    """A decision model that crashes on some points and answers nonsense on others."""

    kind = "garbage"

    def __init__(self) -> None:
        self.calls = 0

    def predict(self, point):
        self.calls += 1
        if self.calls % 2:
            raise RuntimeError("segfault in the decision model")
        return [float("nan")] * len(point["choices"])

    def save(self, path):
        raise NotImplementedError


def test_a_crashing_or_garbage_decision_model_falls_back_to_the_llm(fitted, tmp_path):
    spec = load_harness(str(fitted["delegating"]))
    key = (spec.delegation["model"], spec.delegation["model_hash"])
    saved, garbage = runtime._MODELS.get(key), _Garbage()
    runtime._MODELS[key] = garbage
    suite = get_suite("toy")
    env = suite.make_env(suite.task("click-button"))
    obs = env.reset(3)
    label = obs.instruction.split('"')[1]
    ref = next(e.ref for e in obs.elements if e.tag == "button" and e.text == label)
    try:
        from tackroom.testing import tool_call
        eps, calls = _episodes(str(fitted["delegating"]),
                               [text("hmm"), tool_call("click", {"ref": ref})],
                               seeds=[3], tasks=["click-button"])
    finally:
        if saved is None:
            runtime._MODELS.pop(key, None)
        else:
            runtime._MODELS[key] = saved
    (ep,) = eps
    assert garbage.calls >= 2 and calls == 2
    assert ep.outcome is Outcome.SUCCESS and ep.n_turns == 2
    first, second = ep.turns
    assert "segfault" in first.delegation["fallback"]
    assert "probabilit" in second.delegation["fallback"]
    assert all(t.delegation["acted"] == "llm" for t in ep.turns)


def test_fit_on_a_store_without_points_says_what_to_do(tmp_path):
    db = tmp_path / "plain.duckdb"
    with RecordStore(db):
        pass
    proc = run_cli("delegate", "fit", "--db", str(db), "--harness", "som-tools", "--out",
                   str(tmp_path / "d.toml"), cwd=tmp_path)
    assert "declares no decision points" in one_line_error(proc)
    rec = _write(tmp_path / "rec.toml", RECORD)
    proc = run_cli("delegate", "fit", "--db", str(db), "--harness", str(rec), "--out",
                   str(tmp_path / "d.toml"), cwd=tmp_path)
    assert "no labelled decision points" in one_line_error(proc)
    proc = run_cli("delegate", "fit", "--db", str(db), "--harness", str(rec), "--out",
                   str(tmp_path / "d.toml"), "--model", "forest", cwd=tmp_path)
    assert "unknown decision model 'forest'" in one_line_error(proc)


def test_bench_prints_the_ladder(fitted):
    work = fitted["work"] / "bench"
    proc = run_cli("delegate", "bench", "-D", str(fitted["delegating"]), "--suite", "toy",
                   "--tasks", "click-button,enter-text", "--policy", "expert", "--seeds",
                   "200-203", "--workdir", str(work), cwd=fitted["work"])
    assert proc.returncode == 0, proc.stderr
    for word in ("llm", "isolated", "one", "confident", "alone", "take-over rate"):
        assert word in proc.stdout
    ladder = json.loads((work / "ladder.json").read_text())
    rows = {(r["rung"], r["model"]): r for r in ladder["rows"]}
    assert rows[("llm", "")]["success"] == 1.0 and rows[("llm", "")]["episodes"] == 8
    # The expert's own choices are the labels: its isolated accuracy is 100%.
    assert rows[("isolated", "")]["accuracy"] == 1.0
    alone = rows[("alone", "toy-delegate")]
    assert alone["episodes"] == 8 and alone["takeover_rate"] > 0.5
    assert alone["success_ci"][0] <= alone["success"] <= alone["success_ci"][1]
