"""``tackroom optimize`` / ``tackroom audit`` end to end on the toy suite, with real parts.

The agent is ``skill-expert``: the toy experts gated by the harness's skills (a
scripted stand-in for a model that reads skills, documented as such), so what a
candidate's skills say decides its score and the loop has something to find.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from conftest import CLI_ENV, TACKROOM
from inprocess_cli import run_here

import tackroom
from tackroom.app.optimization import audit, journal, optimize
from tackroom.app.optimize_config import OptimizeConfig
from tackroom.core.errors import ConfigError
from tackroom.harness.spec import load_harness
from tackroom.records import RecordStore
from tackroom.testing import ScriptedOpenAIServer, text

TASKS = ["click-button", "click-link", "click-checkboxes", "enter-text"]


def config(**kw) -> OptimizeConfig:
    base = dict(suite="toy", harness="som-tools", policy="skill-expert", tasks=TASKS,
                proposer="scripted", rounds=2, candidates=3, budget=6, seed=0,
                train="0-2", dev="100-104", test="1000000-1000005", max_tokens=64)
    return OptimizeConfig(**{**base, **kw})


def write_toml(path: Path, cfg: OptimizeConfig) -> Path:
    path.write_text(cfg.to_toml())
    assert OptimizeConfig.from_toml(path).to_dict() == cfg.to_dict()  # it reads back the same
    return path


def test_skill_expert_does_only_what_the_skills_say(tmp_path: Path) -> None:
    skilled = tmp_path / "skilled.toml"
    skilled.write_text('name = "skilled"\nextends = "som-tools"\n[[skills]]\nname = "buttons"\n'
                       'text = """- Click the button whose label the task names.\n'
                       '- Greet the user politely."""\n')
    run = tackroom.evaluate("toy", tasks=["click-button", "click-link"],
                            harnesses=["som-tools", str(skilled)], policies=["skill-expert"],
                            seeds=range(3), store=tmp_path / "r.duckdb")
    rate = {(r["task"].split("/")[-1], r["harness"]): r["outcome"] for r in run.episodes()}
    assert {k: v for k, v in rate.items() if k[1] == "som-tools"} == {
        ("click-button", "som-tools"): "failure", ("click-link", "som-tools"): "failure"}
    assert rate[("click-button", "skilled")] == "success"
    assert rate[("click-link", "skilled")] == "failure"  # no rule covers links
    # Its reply names the rule it followed, so the audit's read graph can link them.
    ep = next(e for e in run.load_episodes() if e.harness == "skilled" and e.reward > 0)
    assert "Click the button whose label the task names." in (ep.turns[0].raw_text or "")


def test_optimize_records_every_candidate_and_keeps_test_out_of_the_loop(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    result = optimize(config(), store=db, out_dir=tmp_path / "out")
    assert result.accepted and result.best == result.accepted[-1]
    assert result.table["none"]["dev"] == 0.0  # no skills: skill-expert does nothing
    assert result.table["optimized"]["dev"] > 0.0
    assert result.dev_evaluations <= 6
    with RecordStore(db) as store:
        entries = journal(store, result.run_id)
        order = list(entries)
        # Every candidate: a harness file that extends its parent, with the recorded hash.
        for prop in (e for e in entries.values() if e["kind"] == "proposal"):
            for cand in prop["candidates"]:
                spec = load_harness(str(tmp_path / "out" / "candidates" / f"{cand['name']}.toml"))
                assert spec.hash == cand["hash"] and cand["edits"]
                assert "extends" in cand["toml"]
        # The test split is evaluated only after the last acceptance decision.
        last_accept = max(i for i, k in enumerate(order) if k.startswith("accept:"))
        assert all(i > last_accept for i, k in enumerate(order) if k.endswith(":test"))
        # Every evaluation is an ordinary recorded run that belongs to the optimiser run.
        for e in (e for e in entries.values() if e["kind"] == "evaluation"):
            info = store.run(e["run"])
            assert info["status"] == "finished" and info["command"] == "eval"
            assert info["config"]["train_run"] == result.run_id
    # The audit runs the replays it needs and reads the rest back.
    report = audit(result.run_id, store=db)
    assert len(report.replay) == 2 and list(report.replay[0].selected) == [result.accepted[0]]
    assert [r.candidate for r in report.dev_test] == result.accepted
    assert any(u.episodes_acted > 0 for u in report.usage)
    assert len(report.costs) == len(result.accepted)
    with RecordStore(db) as store:
        assert "audit" in journal(store, result.run_id)


def test_leaking_proposals_are_rejected_and_recorded(tmp_path: Path) -> None:
    leaking = [{"op": "add_skill", "skill": "cheat",
                "text": "- On click-button, click the button whose label the task names."}]
    clean = [{"op": "add_skill", "skill": "buttons",
              "text": "- Click the button whose label the task names."}]
    answers = iter([json.dumps(leaking), json.dumps(clean)])
    with ScriptedOpenAIServer(lambda body: next(answers, None), default=text("[]")) as srv:
        result = optimize(config(proposer="openai:scripted-model", base_url=srv.base_url,
                                 rounds=1, candidates=2, budget=2),
                          store=tmp_path / "r.duckdb", out_dir=tmp_path / "out")
    assert result.rejected >= 1
    with RecordStore(tmp_path / "r.duckdb") as store:
        prop = journal(store, result.run_id)["proposal:0"]
    assert [c["name"] for c in prop["candidates"]] and prop["rejected"]
    assert "click-button" in json.dumps(prop["rejected"][0]["reasons"])
    assert all("click-button" not in c["toml"] for c in prop["candidates"])


def test_a_killed_optimize_resumes_without_rerunning_finished_evaluations(tmp_path: Path) -> None:
    # The agent is a model behind a scripted server in this process, which stops
    # answering at its 300th call (in the middle of the second candidate's dev run):
    # the optimiser is killed there, at a point of the run, never after a time.
    calls, release = [0], threading.Event()

    def reply(body: dict) -> object:
        calls[0] += 1
        if calls[0] == 300:
            release.wait(120)
        return text("I will look at the page first.")

    with ScriptedOpenAIServer(reply) as srv:
        cfg = config(policy="openai:scripted-model", base_url=srv.base_url, concurrency=4)
        toml = write_toml(tmp_path / "optimize.toml", cfg)
        db = tmp_path / "r.duckdb"
        env = {**os.environ, **CLI_ENV, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen([*TACKROOM, "optimize", "-c", str(toml), "--db", str(db)],
                                cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=env)
        try:
            deadline = time.monotonic() + 240
            while calls[0] < 300 and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            proc.send_signal(signal.SIGKILL)
            out = proc.communicate(timeout=60)[0]
        finally:
            if proc.poll() is None:
                proc.kill()
            release.set()
        assert proc.returncode == -signal.SIGKILL, out
        run_id = next(w.strip("()").split(".")[0] for w in out.split() if w.startswith("(opt-"))
        killed_at = time.time()
        with RecordStore(db) as store:
            before = {k: e for k, e in journal(store, run_id).items()
                      if e["kind"] == "evaluation"}
            interrupted = store.run(f"{run_id}.r0c1.dev")
        assert "eval:r0c0:dev" in before and "eval:r0c1:dev" not in before
        assert interrupted is not None and interrupted["status"] != "finished"
        # The resume in this process: the kill above is the process that matters.
        done = run_here("optimize", "--resume", run_id, "--db", str(db), cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"resuming evaluation {run_id}.r0c1.dev" in done.stdout
        with RecordStore(db) as store:
            after = journal(store, run_id)
            for key, e in before.items():
                assert after[key]["step"] == e["step"]  # journaled once, not again
                times = [r["recorded_at"] for r in store.episodes(e["run"])]
                assert times and max(times) < killed_at, key  # its episodes were not re-run
            assert store.run(f"{run_id}.r0c1.dev")["status"] == "finished"
        # The same run as one never killed: the journal replays what was decided.
        whole = optimize(cfg, store=tmp_path / "whole.duckdb", out_dir=tmp_path / "whole")
    assert after["final"]["table"] == whole.table
    assert after["final"]["accepted"] == whole.accepted


def test_bad_optimize_configs_are_one_clear_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[optimize]\nacceptance = "lucky"\n')
    with pytest.raises(ConfigError, match="acceptance = 'lucky' is not allowed"):
        OptimizeConfig.from_toml(bad)
    bad.write_text('[optimize]\nproposer = "scriptd"\n')
    with pytest.raises(ConfigError, match="unknown proposer 'scriptd'") as err:
        OptimizeConfig.from_toml(bad)
    assert "scripted, seeds" in err.value.fix  # the registered names, read from the registry
    overlap = tmp_path / "overlap.toml"
    overlap.write_text('[optimize]\ntasks = ["click-button"]\n[splits]\ndev = "0-9"\n'
                       'test = "5-20"\n')
    # The CLI in this process: what it says and returns, without a process start per call.
    proc = run_here("optimize", "-c", str(overlap), "--db", str(tmp_path / "r.duckdb"),
                    cwd=tmp_path)
    assert proc.returncode == 2 and "share seeds" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = run_here("audit", "opt-nope", "--db", str(tmp_path / "r.duckdb"), cwd=tmp_path)
    assert proc.returncode == 2 and "no optimiser run" in proc.stderr


def test_the_report_of_an_optimiser_run_has_its_table_and_audit(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    result = optimize(config(rounds=1), store=db, out_dir=tmp_path / "out")
    before = tackroom.report([result.run_id], store=db, out=tmp_path / "before.html")
    assert "Not audited yet" in before.path.read_text()
    audit(result.run_id, store=db)
    rep = tackroom.report([result.run_id], store=db, out=tmp_path / "after.html")
    page = rep.path.read_text()
    assert 'id="optimizer"' in page and "Acceptance replay" in page and "never used" in page
    # The rest of the report is the optimiser's test evaluations.
    assert set(rep.run_ids) == {f"{result.run_id}.{n}.test"
                                for n in ("none", "seed-skills", result.best)}


def test_pareto_acceptance_keeps_a_front_and_draws_parents_from_it(tmp_path: Path) -> None:
    result = optimize(config(acceptance="pareto", rounds=3, budget=9), store=tmp_path / "r.duckdb",
                      out_dir=tmp_path / "out")
    with RecordStore(tmp_path / "r.duckdb") as store:
        entries = journal(store, result.run_id)
    rounds = [entries[f"accept:{r}"] for r in range(3) if f"accept:{r}" in entries]
    front = ["none"]
    for acc in rounds:
        assert acc["current"] in front  # the round's parent came from the front before it
        assert set(acc["admitted"]) <= set(acc["front"])
        front = acc["front"]
    assert result.best in front
    assert result.accepted and "none" not in front  # the skills beat no skills somewhere


def test_the_docs_key_table_is_the_settings() -> None:
    """docs/optimize.md lists exactly OptimizeConfig's keys, with their defaults (generated)."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "optimize.md").read_text()
    start, end = "<!-- settings:OptimizeConfig -->\n", "<!-- /settings:OptimizeConfig -->"
    table = doc.split(start, 1)[1].split(end, 1)[0]
    assert table == OptimizeConfig.key_table(), (
        "docs/optimize.md's key table is stale: paste OptimizeConfig.key_table() between "
        "the markers")
    assert "| `optimize.acceptance` | \"greedy\" | the acceptance rule — greedy, pareto, " \
        "threshold |" in table

