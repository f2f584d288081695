"""Sealed evaluation: `tackroom seal` → `tackroom eval --sealed` → every cell in the report.

Real components throughout: the toy suite, real harness files, a real record
store, the CLI (real processes, one with a custom action interface installed as a plug-in;
in process with typer's runner for quick refusals and dry runs), and a real HTTP model
server whose answers are not chat completions, so that one policy's episodes
end in infrastructure errors.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import one_line_error, run_cli
from typer.testing import CliRunner

from tackroom.cli import app
from tackroom.core.errors import TackroomError
from tackroom.records import RecordStore
from tackroom.report.html import build_report, report_data
from tackroom.testing import ScriptedOpenAIServer
from tackroom.testing.openai_server import Reply


def invoke(*args: str) -> str:
    """Run the CLI in this process (the test's registered interface is visible to it)."""
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def refused(*args: str) -> str:
    """The error line of a CLI call run in this process (a subprocess prints it alone)."""
    result = CliRunner().invoke(app, list(args))
    assert isinstance(result.exception, TackroomError), (result.output, result.exception)
    return result.exception.line()


CLICKS_ONLY = '''
"""An action interface that can only click: a harness using it cannot express typing."""
from tackroom.core.registry import register
from tackroom.harness.interfaces import ElementRefInterface


class ClicksOnly(ElementRefInterface):
    name = "clicks_only"
    supports = frozenset({"click"})
    specs = ElementRefInterface.specs[:1]


register("interface")(ClicksOnly())
'''


@pytest.fixture
def clicks_only_plugin(tmp_path) -> tuple[Path, dict[str, str]]:
    """The clicks-only interface as an installed plug-in (a package and its dist-info on
    ``PYTHONPATH``), so that real ``tackroom`` processes see it; its harness file."""
    site = tmp_path / "site"
    (site / "clicks_plug").mkdir(parents=True)
    (site / "clicks_plug" / "__init__.py").write_text(CLICKS_ONLY)
    info = site / "clicks_plug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: clicks_plug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[tackroom]\ninterface.clicks = clicks_plug\n")
    harness = tmp_path / "clicks.toml"
    harness.write_text('extends = "som-tools"\n[actions]\ninterface = "clicks_only"\n')
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    return harness, {"PYTHONPATH": path, "COLUMNS": "200", "NO_COLOR": "1"}


def test_sealed_eval_reports_every_cell_with_the_manifest_hash(tmp_path, clicks_only_plugin):
    clicks_only_harness, env = clicks_only_plugin

    def cli(*args: str) -> str:  # a real `tackroom` process, which sees the plug-in
        p = run_cli(*args, cwd=tmp_path, env_extra=env)
        assert p.returncode == 0, p.stdout + p.stderr
        return p.stdout + p.stderr

    db, manifest = str(tmp_path / "r.duckdb"), tmp_path / "manifest.json"
    # Answers that are not chat completions: every episode of this policy is an infra error.
    with ScriptedOpenAIServer(default=Reply(body="this is not a chat completion"),
                              models=["broken"]) as srv:
        broken = f"openai:broken@{srv.base_url}"
        out = cli("seal", "--suite", "toy", "--tasks", "click-button,enter-text",
                     "--harness", f"som-tools,{clicks_only_harness}",
                     "--held-out", "html-commands", "--policy", f"expert,{broken}",
                     "--seeds", "0-1", "--out", str(manifest))
        sealed = json.loads(manifest.read_text())
        digest = sealed["manifest_hash"]
        assert f"sha256:{digest}" in out and "24 cells" in out
        assert "1 (task, harness) pairs cannot be expressed" in out

        out = cli("eval", "--sealed", str(manifest), "--db", db)
    assert f"manifest sha256:{digest}" in out and "Sealed evaluation" in out
    assert "cannot express" in out and "html-commands (held out)" in out

    with RecordStore(db) as store:
        (run,) = store.runs()
        assert run["manifest_hash"] == digest and run["status"] == "finished"
        data = report_data(store, [run["run_id"]])
        html = build_report(store, [run["run_id"]], tmp_path / "report.html").read_text()

    (section,) = data["sealed"]
    assert section["manifest_hash"] == digest and section["verified"]
    assert section["held_out"] == ["html-commands"]
    cells = {(c["policy"], c["harness"], c["task"]): c for c in section["cells"]}
    # Every (policy, harness, task) of the manifest has a row: 2 × 3 × 2.
    assert len(cells) == 12
    for policy in ("expert", broken):
        cannot = cells[(policy, "clicks", "toy/enter-text")]
        assert not cannot["expressible"] and cannot["seeds"] == 2
        assert cannot["success"] == cannot["failure"] == cannot["infra"] == 0
    for (policy, harness, _task), c in cells.items():
        assert c["held_out"] == (harness == "html-commands")
        if not c["expressible"]:
            continue
        assert c["missing"] == 0
        if policy == "expert":
            assert (c["success"], c["failure"], c["infra"]) == (2, 0, 0)
        else:  # infra errors are counted apart, never as failures
            assert (c["success"], c["failure"], c["infra"]) == (0, 0, 2)
    assert section["totals"] == {
        "cells": 12, "episodes": 24, "success": 10, "failure": 0, "infra": 10, "missing": 0,
        "inexpressible_cells": 2, "inexpressible_episodes": 4}
    assert data["counts"]["infra_errors"] == 10 and data["counts"]["scored"] == 10

    assert '<section id="sealed">' in html and f"sha256:{digest}" in html
    assert "held out</span>" in html and "cannot express" in html

    report = cli("report", run["run_id"], "--db", db, "--out", str(tmp_path / "r2.html"))
    assert f"manifest sha256:{digest}" in report and "held out" in report

    # An ordinary run has no sealed section.
    cli("eval", "--suite", "toy", "--tasks", "click-button", "--harness", "som-tools",
           "--seeds", "0", "--db", db)
    with RecordStore(db) as store:
        plain = store.latest_run_id()
        assert report_data(store, [plain])["sealed"] == []
        page = build_report(store, [plain], tmp_path / "plain.html").read_text()
    assert 'id="sealed"' not in page


def test_tampered_manifest_and_filters_are_refused_in_one_line(tmp_path):
    manifest = tmp_path / "m.json"
    invoke("seal", "--suite", "toy", "--tasks", "click-button", "--harness", "som-tools",
           "--seeds", "0-1", "--out", str(manifest))
    sealed = json.loads(manifest.read_text())

    # Re-indented, keys reordered: the same manifest (the hash is over canonical JSON).
    manifest.write_text(json.dumps(sealed, indent=4, sort_keys=True))
    assert "2 episodes" in invoke("eval", "--sealed", str(manifest), "--dry-run")

    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps({**sealed, "seeds": [0, 1, 2]}, indent=2))
    line = one_line_error(run_cli("eval", "--sealed", str(tampered), "--db",
                                  str(tmp_path / "r.duckdb"), cwd=tmp_path))
    assert str(tampered) in line and "changed after sealing" in line
    assert not (tmp_path / "r.duckdb").exists()

    line = refused("eval", "--sealed", str(manifest), "--tasks", "enter-text")
    assert line.startswith("--tasks: cannot be combined with --sealed")
    line = refused("eval", "--sealed", str(manifest), "--temperature", "0.7")
    assert line.startswith("--temperature: cannot be combined with --sealed")
    line = refused("seal", "--suite", "toy", "--out", str(manifest))
    assert "exists already" in line and "--force" in line
    # Every policy spec `eval` takes can be sealed (checked by form, nothing loaded) ...
    other = tmp_path / "specs.json"
    invoke("seal", "--suite", "toy", "--tasks", "click-button", "--harness", "som-tools",
           "--policy", "bundled,hf:bundled,expert,replay:r1,openai:m@http://127.0.0.1:9/v1",
           "--seeds", "0", "--out", str(other))
    assert json.loads(other.read_text())["policies"][0] == "bundled"
    # ... and anything else is refused in one line.
    line = refused("seal", "--suite", "toy", "--policy", "gpt-4", "--out", str(other), "--force")
    assert "unknown policy 'gpt-4'" in line and "bundled" in line


def test_changed_harness_is_refused_and_a_sealed_run_resumes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # ./harnesses is on the harness search path
    db = str(tmp_path / "r.duckdb")
    (tmp_path / "harnesses").mkdir()
    mine = tmp_path / "harnesses" / "mine.toml"
    mine.write_text('extends = "som-tools"\nloop.history = 1\n')
    out = invoke("seal", "--suite", "toy", "--tasks", "click-button,enter-text",
                 "--harness", "mine,html-commands", "--train-harness", "mine", "--seeds", "0-2",
                 "--out", "m.json")
    assert "1 held out: html-commands" in out
    digest = json.loads((tmp_path / "m.json").read_text())["manifest_hash"]
    invoke("eval", "--sealed", "m.json", "--db", db)

    # Lose some episodes, as a crash would: the report shows them as not run ...
    with RecordStore(db) as store:
        (run,) = store.runs()
        run_id = run["run_id"]
        lost = [r["episode_id"] for r in store.episodes(run_id=run_id, harness="mine")][:3]
        assert store.delete_episodes(lost, run_id=run_id) == 3
        (section,) = report_data(store, [run_id])["sealed"]
    assert section["totals"]["missing"] == 3 and section["totals"]["success"] == 9

    # ... and --resume runs exactly those, still under the manifest's hash.
    out = invoke("eval", "--resume", run_id, "--db", db)
    assert "9 already recorded, 3 to run" in out and f"sha256:{digest}" in out
    with RecordStore(db) as store:
        assert store.run(run_id)["manifest_hash"] == digest
        assert store.count(run_id) == 12
        (section,) = report_data(store, [run_id])["sealed"]
    assert section["totals"]["missing"] == 0 and section["totals"]["success"] == 12

    # A harness edited after sealing: both a new sealed run and the resume refuse it.
    mine.write_text('extends = "som-tools"\nloop.history = 2\n')
    line = one_line_error(run_cli("eval", "--sealed", "m.json", "--db", db, cwd=tmp_path))
    assert "harness 'mine' changed since the manifest was sealed" in line and str(mine) in line
    assert "'mine' changed" in refused("eval", "--resume", run_id, "--db", db)
