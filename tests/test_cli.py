"""The `tackroom` CLI as a user runs it: real processes, real record store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import TACKROOM, one_line_error, run_cli

from tackroom.records import RecordStore


def test_eval_prints_the_harness_policy_table_and_records_episodes(tmp_path):
    db = str(tmp_path / "r.duckdb")
    p = run_cli("eval", "--suite", "toy", "--harness", "som-tools,html-commands,outline-coords",
                "--policy", "expert", "--seeds", "0-1", "--db", db, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "Success by harness × policy" in out and "95% CI" in out
    for h in ("som-tools", "html-commands", "outline-coords"):
        assert h in out
    assert "100%" in out
    with RecordStore(db) as store:
        (run,) = store.runs()
        rows = store.episodes(run_id=run["run_id"])
    assert len(rows) == 18 * 3 * 2
    assert Counter(r["outcome"] for r in rows) == {"success": len(rows)}

    shown = run_cli("show", "latest", rows[0]["episode_id"][:8], "--db", db, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "turn 0" in shown.stdout and "outcome: success" in shown.stdout
    runs = run_cli("runs", "--db", db, cwd=tmp_path)
    assert run["run_id"] in runs.stdout and "finished" in runs.stdout

    for fmt, target in [("jsonl", "e.jsonl"), ("parquet", "e.parquet"), ("atif", "atif")]:
        ex = run_cli("export", "latest", "--format", fmt, "--out", str(tmp_path / target),
                     "--db", db, cwd=tmp_path)
        assert ex.returncode == 0, ex.stderr
        assert f"wrote {len(rows)} episodes" in ex.stdout
    first = json.loads((tmp_path / "e.jsonl").read_text().splitlines()[0])
    assert first["turns"] and first["harness_hash"]


def test_dry_run_prints_the_grid_and_runs_nothing(tmp_path):
    p = run_cli("eval", "--suite", "toy", "--tasks", "click-*", "--harness", "som-tools,html-commands",
                "--seeds", "0-9", "--dry-run", "--db", str(tmp_path / "r.duckdb"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "Dry run" in p.stdout and "som-tools" in p.stdout and "html-commands" in p.stdout
    assert not (tmp_path / "r.duckdb").exists()


def test_malformed_harness_file_is_one_clear_line(tmp_path):
    bad = tmp_path / "broken.toml"
    bad.write_text('extends = "som-tools"\n[loop]\nactions_per_turn = 0\n')
    line = one_line_error(run_cli("eval", "--suite", "toy", "--harness", str(bad), cwd=tmp_path))
    assert str(bad) in line and "[loop].actions_per_turn" in line and "1 to 50" in line
    v = run_cli("harness", "validate", str(bad), "som-tools", cwd=tmp_path)
    assert v.returncode == 2 and "ok som-tools" in v.stdout and "actions_per_turn" in v.stderr


def test_unknown_task_and_suite_and_policy_are_one_clear_line(tmp_path):
    line = one_line_error(run_cli("eval", "--suite", "toy", "--tasks", "click-buton", cwd=tmp_path))
    assert "click-buton" in line and "did you mean" in line and "click-button" in line
    line = one_line_error(run_cli("eval", "--suite", "nosuch", cwd=tmp_path))
    assert "unknown suite" in line and "miniwob" in line
    line = one_line_error(run_cli("eval", "--suite", "toy", "--policy", "gpt", cwd=tmp_path))
    assert "unknown policy" in line and "openai:MODEL" in line
    line = one_line_error(run_cli("eval", "--suite", "toy", "--seeds", "9-1", cwd=tmp_path))
    assert "--seeds" in line


def test_unreachable_model_server_is_one_clear_line(tmp_path):
    line = one_line_error(run_cli("eval", "--suite", "toy", "--policy", "openai:m",
                                  "--base-url", "http://127.0.0.1:9/v1",
                                  "--db", str(tmp_path / "r.duckdb"), cwd=tmp_path))
    assert "http://127.0.0.1:9/v1 unreachable" in line and "--base-url" in line


def test_harness_list_show_diff(tmp_path):
    listed = run_cli("harness", "list", cwd=tmp_path)
    assert listed.returncode == 0
    for h in ("som-tools", "html-commands", "outline-coords", "som-tools-reflect"):
        assert h in listed.stdout
    shown = run_cli("harness", "show", "som-tools-reflect", cwd=tmp_path)
    assert "som-tools -> som-tools-reflect" in shown.stdout and "reflect" in shown.stdout
    diff = run_cli("harness", "diff", "som-tools", "som-tools-reflect", cwd=tmp_path)
    assert "loop.on_action_error" in diff.stdout and "'feedback'" in diff.stdout


def test_help_shows_examples(tmp_path):
    p = run_cli("eval", "--help", cwd=tmp_path)
    assert p.returncode == 0 and "Examples" in p.stdout and "--resume" in p.stdout


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_records_every_episode_exactly_once(tmp_path):
    db = str(tmp_path / "r.duckdb")
    args = ["eval", "--suite", "toy", "--harness", "som-tools,html-commands,outline-coords",
            "--seeds", "0-399", "--db", db, "-n", "4"]
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.Popen([*TACKROOM, *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # Wait until some episodes are committed, then kill without warning.
    deadline = time.monotonic() + 60
    wal = Path(db + ".wal")
    while time.monotonic() < deadline and proc.poll() is None:
        if wal.exists() and wal.stat().st_size > 200_000:
            break
        time.sleep(0.05)
    # Killed the moment the condition holds; a run of 21,600 episodes is far from its end then.
    assert proc.poll() is None, "the run ended before 200 kB of its write-ahead log was written"
    proc.send_signal(signal.SIGKILL)
    proc.wait()

    with RecordStore(db) as store:
        (run,) = store.runs()
        run_id = run["run_id"]
        before = len(store.episodes(run_id=run_id))
    planned = 18 * 3 * 400
    assert 0 < before < planned

    p = run_cli("eval", "--resume", run_id, "--db", db, cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"{before} already recorded" in p.stdout
    with RecordStore(db) as store:
        rows = store.episodes(run_id=run_id)
        assert store.run(run_id)["status"] == "finished"
    cells = Counter((r["task"], r["harness"], r["policy"], r["seed"]) for r in rows)
    assert len(cells) == planned
    assert set(cells.values()) == {1}
    assert len({r["episode_id"] for r in rows}) == len(rows)
    # Every recorded episode is whole: its turn rows are all there.
    with RecordStore(db) as store:
        sample = rows[:: max(1, len(rows) // 50)]
        for r in sample:
            assert len(store.turns(r["episode_id"], run_id=run_id)) == r["n_turns"]


def test_replay_re_emits_recorded_outputs(tmp_path):
    db = str(tmp_path / "r.duckdb")
    first = run_cli("eval", "--suite", "toy", "--tasks", "login-user,click-tab", "--harness",
                    "som-tools", "--seeds", "0-1", "--db", db, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    with RecordStore(db) as store:
        run_id = store.latest_run_id()
        original = {(r["task"], r["seed"]): r for r in store.episodes(run_id=run_id)}
    again = run_cli("eval", "--suite", "toy", "--tasks", "login-user,click-tab",
                    "--harness", "som-tools,html-commands", "--policy", f"replay:{run_id}",
                    "--seeds", "0-1", "--db", db, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    with RecordStore(db) as store:
        replayed = store.episodes(run_id=store.latest_run_id())
        same = [r for r in replayed if r["harness"] == "som-tools"]
        assert len(same) == 4
        for r in same:
            o = original[(r["task"], r["seed"])]
            assert (r["outcome"], r["n_turns"]) == (o["outcome"], o["n_turns"]) == \
                ("success", o["n_turns"])
            a = store.turns(r["episode_id"], run_id=r["run_id"])
            b = store.turns(o["episode_id"], run_id=run_id)
            assert [t.actions for t in a] == [t.actions for t in b]
        # Nothing was recorded under html-commands: the replay says so, and it is a parse error.
        other = [r for r in replayed if r["harness"] == "html-commands"]
        assert other and all(r["outcome"] != "success" for r in other)
        assert all(r["parse_errors"] >= 1 for r in other)


def test_resume_refuses_a_harness_that_changed_since_the_run(tmp_path):
    db = str(tmp_path / "r.duckdb")
    (tmp_path / "harnesses").mkdir()
    h = tmp_path / "harnesses" / "mine.toml"
    h.write_text('extends = "som-tools"\nloop.history = 2\n')
    first = run_cli("eval", "--suite", "toy", "--tasks", "click-link", "--harness", "mine",
                    "--seeds", "0-1", "--db", db, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    with RecordStore(db) as store:
        run_id = store.latest_run_id()
    again = run_cli("eval", "--resume", run_id, "--db", db, cwd=tmp_path)
    assert again.returncode == 0 and "2 already recorded, 0 to run" in again.stdout
    h.write_text('extends = "som-tools"\nloop.history = 3\n')
    line = one_line_error(run_cli("eval", "--resume", run_id, "--db", db, cwd=tmp_path))
    assert "'mine' changed since the run" in line and "new run" in line


def test_report_prints_ceiling_and_mismatch_and_writes_html(tmp_path):
    db = str(tmp_path / "r.duckdb")
    assert run_cli("eval", "--suite", "toy", "--tasks", "click-*", "--seeds", "0-1", "--db", db,
                   cwd=tmp_path).returncode == 0
    p = run_cli("report", "latest", "--db", db, "--out", str(tmp_path / "r.html"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "Ceiling and mismatch" in p.stdout and "expert" in p.stdout
    assert f"report: {tmp_path / 'r.html'}" in p.stdout
    html = (tmp_path / "r.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html
    line = one_line_error(run_cli("report", "nope", "--db", db, cwd=tmp_path))
    assert "no run 'nope'" in line


def test_report_options_trained_gain_compare(tmp_path):
    """A replay of som-tools episodes is 100% there and 0% elsewhere: the drop is all mismatch."""
    db = str(tmp_path / "r.duckdb")
    args = ("--suite", "toy", "--tasks", "click-*", "--seeds", "0-1", "--db", db)
    assert run_cli("eval", *args, "--harness", "som-tools", cwd=tmp_path).returncode == 0
    with RecordStore(db) as store:
        src = store.latest_run_id()
    rep = f"replay:{src}"
    p = run_cli("eval", *args, "--harness", "som-tools,html-commands", "--policy",
                f"expert,{rep}", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = tmp_path / "r.html"
    p = run_cli("report", "latest", "--db", db, "--out", str(out), "--trained", f"{rep}=som-tools",
                "--gain", f"{rep}=expert@html-commands", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    # Default pair: the one policy under its own harness vs the other. Both ceilings are
    # the expert's 100%: gap +100 pp = ceiling part 0 + mismatch part +100 pp.
    row = next(ln for ln in p.stdout.splitlines() if f"{rep} · som-tools" in ln)
    cols = [c.strip() for c in row.split("│") if c.strip()]
    assert cols == [f"{rep} · som-tools", "100%", f"{rep} · html-commands", "0%", "+100 pp",
                    "0 pp", "+100 pp"], cols
    page = out.read_text()
    assert 'class="plot parts conflation"' in page and 'class="plot scatter' in page
    assert "No gain scatter" not in page and "No transfer matrix" not in page
    # Asked-for cells; names that are not in the runs are one line naming the ones that are.
    p = run_cli("report", "latest", "--db", db, "--out", str(out), "--compare",
                f"expert@html-commands,{rep}@html-commands", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "expert · html-commands" in p.stdout
    line = one_line_error(run_cli("report", "latest", "--db", db, "--compare",
                                  "nobody@som-tools,expert@som-tools", cwd=tmp_path))
    assert "no policy 'nobody'" in line and f"expert, {rep}" in line
    line = one_line_error(run_cli("report", "latest", "--db", db, "--gain", "expert@som-tools",
                                  cwd=tmp_path))
    assert "BEFORE=AFTER@HARNESS" in line


def test_model_init_builds_a_loadable_model(tmp_path):
    pytest.importorskip("transformers")
    p = run_cli("model", "init", str(tmp_path / "m"), "--size", "tiny", cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "1,0" in p.stdout and "parameters" in p.stdout
    assert (tmp_path / "m" / "tackroom_model.json").is_file()
    again = run_cli("model", "init", str(tmp_path / "m"), cwd=tmp_path, timeout=300)
    assert again.returncode == 2 and "--force" in again.stderr + again.stdout


def test_show_prints_model_text_verbatim_even_when_it_looks_like_markup(tmp_path):
    from tackroom.core.episode import Episode, Outcome, Turn

    db = tmp_path / "r.duckdb"
    text = "[/x] [bold]not bold[/bold] print(a[0])"
    ep = Episode(episode_id="e1", run_id="r1", task="code/t", suite="code", harness="codeact",
                 harness_hash="h", policy="p", seed=0, outcome=Outcome.FAILURE,
                 failure_mode="no_edit",
                 turns=[Turn(index=0, messages=[{"role": "user", "content": "[red]x"}],
                             raw_text=text, parse_error="bad [/y]")])
    with RecordStore(db) as store:
        store.start_run("r1", "eval", {}, n_planned=1)
        store.append(ep)
    p = run_cli("show", "r1", "e1", "--db", str(db), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert text in p.stdout and "bad [/y]" in p.stdout
    assert "failure mode: no_edit" in p.stdout
