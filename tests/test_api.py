"""The Python API as a user calls it: real suites, policies and record stores, no CLI."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

import tackroom
from tackroom.app import evaluation
from tackroom.core.errors import ConfigError, TackroomError
from tackroom.core.policy import Sampling
from tackroom.policies.expert import ExpertPolicy
from tackroom.records import RecordStore

TOY_TASKS = ["click-button", "focus-text", "enter-text"]


def test_evaluate_returns_a_run_that_reads_its_episodes_back(tmp_path):
    db = tmp_path / "r.duckdb"
    seen = []
    run = tackroom.evaluate(suite="toy", tasks=TOY_TASKS, harnesses=["som-tools", "html-commands"],
                            policies=["expert"], seeds=range(3), store=db,
                            on_episode=seen.append)
    assert run.status == "finished" and run.success_rate == 1.0
    assert len(seen) == len(run.episodes()) == 3 * 2 * 3
    assert {(s.harness, s.policy, s.n, s.successes) for s in run.summary()} == {
        ("som-tools", "expert", 9, 9), ("html-commands", "expert", 9, 9)}
    again = tackroom.Run.open("latest", store=db)
    assert again.id == run.id and again.config == run.config
    cfg = again.config
    assert cfg.suite == "toy" and cfg.tasks == TOY_TASKS and cfg.seeds == [0, 1, 2]
    assert set(cfg.harness_hashes) == {"som-tools", "html-commands"}
    assert cfg.policy_ids == {"expert": "expert"} and cfg.sampling == Sampling()
    eps = again.load_episodes()
    assert len(eps) == 18 and all(ep.turns for ep in eps)


def test_plan_records_nothing_and_describes_the_grid(tmp_path):
    p = tackroom.plan(suite="toy", tasks=["click-*"], harnesses=["som-tools"], seeds="0-4")
    assert p.n_episodes == len(p.tasks) * 5 and p.describe().startswith(f"{p.n_episodes} episodes")
    assert p.config.concurrency == p.suite.default_concurrency
    assert not (tmp_path / "tackroom-runs").exists()


def test_a_policy_is_built_once_and_checked_as_the_object_that_plays(tmp_path, monkeypatch):
    """The pre-flight check and the episodes use the one object built from the spec."""
    built: list[ExpertPolicy] = []
    checked: list[int] = []
    played: set[int] = set()

    class Watched(ExpertPolicy):
        async def check(self) -> None:
            checked.append(id(self))

        async def act(self, request):
            played.add(id(self))
            return await super().act(request)

    def make(spec, **opts):
        built.append(Watched())
        return built[-1]

    monkeypatch.setattr(evaluation, "make_policy", make)
    run = tackroom.evaluate(suite="toy", tasks=TOY_TASKS, harnesses=["som-tools"],
                            policies=["expert"], seeds=range(2), store=tmp_path / "r.duckdb")
    assert run.success_rate == 1.0
    assert len(built) == 1 and checked == [id(built[0])] and played == {id(built[0])}


def test_resume_runs_only_what_is_missing(tmp_path):
    db = tmp_path / "r.duckdb"
    run = tackroom.evaluate(suite="toy", tasks=TOY_TASKS, harnesses=["som-tools"],
                            policies=["expert"], seeds=range(4), store=db)
    with RecordStore(db) as store:
        ids = [r["episode_id"] for r in store.episodes(run_id=run.id)][:5]
        assert store.delete_episodes(ids, run_id=run.id) == 5
    starts = []
    again = tackroom.resume(run.id, store=db, on_start=starts.append)
    assert (starts[0].to_run, starts[0].already, starts[0].resumed) == (5, 7, True)
    assert again.id == run.id and len(again.episodes()) == 12 and again.success_rate == 1.0


def test_suite_options_are_recorded_and_resume_builds_the_suite_with_them(tmp_path):
    db = tmp_path / "r.duckdb"
    suite = tackroom.plan(suite="terminal", suite_options={"unsafe_local": True}).suite
    task = suite.tasks()[0].id
    run = tackroom.evaluate(suite="terminal", tasks=[task], harnesses=["terminal-bash"],
                            policies=["expert"], seeds=[0], store=db,
                            suite_options={"unsafe_local": True})
    assert run.config.suite_options == {"unsafe_local": True} and run.success_rate == 1.0
    with RecordStore(db) as store:
        resumed = evaluation.plan_resume(run.id, store)
    assert resumed.suite.unsafe_local is True and resumed.config.suite_options == {
        "unsafe_local": True}
    with pytest.raises(ConfigError, match="takes no option 'unsafe'"):
        tackroom.plan(suite="terminal", suite_options={"unsafe": True})


async def test_evaluate_works_inside_a_running_event_loop(tmp_path):
    """As in a notebook: the episodes run on a loop of their own in a worker thread."""
    asyncio.get_running_loop()
    run = tackroom.evaluate(suite="toy", tasks=TOY_TASKS[:1], harnesses=["som-tools"],
                            seeds=range(2), store=tmp_path / "r.duckdb")
    assert run.success_rate == 1.0 and len(run.episodes()) == 2


def test_seal_then_evaluate_sealed_then_report(tmp_path):
    db = tmp_path / "r.duckdb"
    m = tackroom.seal(tmp_path / "m.json", suite="toy", tasks=TOY_TASKS,
                      harnesses=["som-tools"], held_out=["outline-coords"], seeds=range(2))
    with pytest.raises(TackroomError, match="exists already"):
        tackroom.seal(tmp_path / "m.json", suite="toy")
    run = tackroom.evaluate_sealed(tmp_path / "m.json", store=db)
    assert run.manifest_hash == m.hash and run.config.sealed
    assert len(run.final_episodes()) == m.n_cells == 3 * 2 * 2
    rep = tackroom.report([run.id], store=db, out=tmp_path / "r.html")
    assert rep.path == (tmp_path / "r.html").resolve() and rep.run_ids == [run.id]
    page = rep.path.read_text()
    assert m.hash in page and page.startswith("<!DOCTYPE html>")
    titles = [getattr(t, "title", "") or "" for t in rep.tables()]
    assert any("Ceiling and mismatch" in t for t in titles)
    assert any(m.hash[:12] in t for t in titles)  # the sealed table names its manifest


def test_bad_input_through_the_api_is_a_tackroom_error(tmp_path):
    cases = [dict(suite="nope"), dict(tasks=["no-such-task"]), dict(policies=["gpt"]),
             dict(harnesses=[str(tmp_path / "missing.toml")]), dict(seeds="9-1")]
    for kwargs in cases:
        with pytest.raises(TackroomError) as e:
            tackroom.plan(**kwargs)
        assert e.value.fix, kwargs  # every error says what to do
    with pytest.raises(ConfigError, match="no run 'nope'"):
        tackroom.resume("nope", store=tmp_path / "r.duckdb")


def test_api_names_stay_functions_after_their_subpackages_are_imported():
    from tackroom.report.view import report_view  # noqa: F401 - imports tackroom.report
    from tackroom.train.config import RLConfig  # noqa: F401 - imports tackroom.train

    assert callable(tackroom.report) and tackroom.report.__module__ == "tackroom.app.reporting"
    assert callable(tackroom.train) and tackroom.train.__module__ == "tackroom.app.training"


def test_import_tackroom_is_cheap():
    """``import tackroom`` loads neither DuckDB nor the API until a name is used."""
    code = ("import sys, tackroom; assert 'duckdb' not in sys.modules, 'duckdb'; "
            "assert 'tackroom.app' not in sys.modules; tackroom.evaluate; "
            "assert 'tackroom.app' in sys.modules; print(tackroom.__version__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).parent)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == tackroom.__version__
