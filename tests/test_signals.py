"""Signals a run gets from the outside world: SIGTERM from `timeout`, `docker stop`, Slurm."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest
from conftest import CLI_ENV, TACKROOM, run_cli

from tackroom.records import RecordStore


def test_sigterm_stops_a_run_like_ctrl_c_then_resume_finishes_it(tmp_path):
    db = str(tmp_path / "r.duckdb")
    # 3,600 episodes: stopped at the first 5% line, with 95% still to run; the resume runs
    # those (the run's size is what the resume costs).
    args = ["eval", "--suite", "toy", "--harness", "som-tools,html-commands", "--seeds",
            "0-99", "--db", db, "-n", "4"]
    proc = subprocess.Popen([*TACKROOM, *args], cwd=tmp_path, env={**os.environ, **CLI_ENV},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Piped, the progress bar prints a line every 5%: stop the run after the first one.
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("episodes ") and not line.startswith("episodes 0/"):
            break
    assert proc.poll() is None, "the run finished before it could be stopped: " + "".join(seen)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    out = "".join(seen) + out
    assert proc.returncode == 143, (out[-2000:], err[-2000:])
    assert "Traceback" not in out + err
    assert "tackroom eval --resume" in err  # says how to finish it
    with RecordStore(db) as store:
        (run,) = store.runs()
        assert run["status"] == "interrupted"  # not left "running"
        recorded = len(store.episodes(run_id=run["run_id"]))
    assert 0 < recorded < 18 * 2 * 100

    p = run_cli("eval", "--resume", run["run_id"], "--db", db, cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stderr
    assert f"{recorded} already recorded" in p.stdout
    with RecordStore(db) as store:
        assert store.run(run["run_id"])["status"] == "finished"
        assert len(store.episodes(run_id=run["run_id"])) == 18 * 2 * 100


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_background_run_with_sigint_ignored_stops_on_sigterm_and_sighup(tmp_path, signum,
                                                                         code):
    """`tackroom eval … &` from a script inherits SIGINT ignored: SIGTERM and SIGHUP still
    stop the run, recorded as interrupted with its finished episodes kept."""
    db = str(tmp_path / "r.duckdb")
    args = ["eval", "--suite", "toy", "--harness", "som-tools,html-commands", "--seeds",
            "0-199", "--policy", "expert", "-n", "2", "--db", db]
    proc = subprocess.Popen([*TACKROOM, *args], cwd=tmp_path, env={**os.environ, **CLI_ENV},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:  # piped, the bar prints a line every 5%: stop after the first
        seen.append(line)
        if line.startswith("episodes ") and not line.startswith("episodes 0/"):
            break
    assert proc.poll() is None, "the run finished before it could be stopped: " + "".join(seen)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == code, (out[-2000:], err[-2000:])
    assert "Traceback" not in out + err
    assert "tackroom eval --resume" in err
    with RecordStore(db) as store:
        (run,) = store.runs()
        assert run["status"] == "interrupted"
        recorded = len(store.episodes(run_id=run["run_id"]))
    assert 0 < recorded < 18 * 2 * 200
