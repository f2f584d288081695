"""The code suite: task data, hidden tests in the sandbox, experts through every harness,
and each failure mode produced by a crafted episode against a real OpenAI-style server."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import tackroom.suites.code
from tackroom.core import ActionError, Outcome, Sampling
from tackroom.core.actions import Edit, Shell, Submit, ViewFile, WriteFile
from tackroom.harness.spec import load_harness
from tackroom.policies.expert import ExpertPolicy
from tackroom.policies.openai_policy import OpenAIPolicy
from tackroom.records import RecordStore
from tackroom.runner.grid import plan_grid, run_cells
from tackroom.sandbox import sandbox_available
from tackroom.suites import get_suite
from tackroom.suites.code import FAILURE_MODES, run_hidden_tests
from tackroom.suites.code.tasks import load_tasks
from tackroom.testing import ScriptedOpenAIServer, text, tool_call

needs_sandbox = pytest.mark.skipif(not sandbox_available(), reason="needs the bubblewrap sandbox")

SUITE = get_suite("code")
TASKS = load_tasks()
FAMILIES = "edit-blocks,aci-viewer,codeact,json-tools"


def test_at_least_30_tasks_over_several_packages_with_split_tests():
    assert len(TASKS) >= 30
    assert len({t.package for t in TASKS.values()}) >= 8
    for t in TASKS.values():
        assert t.requirement and t.regression and not set(t.requirement) & set(t.regression)
        assert t.task.requires == {"edit", "submit"} and t.task.has_expert
        assert t.files != t.fixed_files and not any("tests" in p for p in t.files)
    assert sum(len({e.path for e in t.fix}) > 1 for t in TASKS.values()) >= 2  # multi-file fixes


@needs_sandbox
def test_reference_fix_passes_and_the_unfixed_repo_fails_only_the_requirement_tests():
    def both(t):
        return t, run_hidden_tests(t, t.files), run_hidden_tests(t, t.fixed_files)

    with ThreadPoolExecutor(4) as pool:  # sandboxes are processes: run a few at once
        for t, before, after in pool.map(both, TASKS.values()):
            assert not any(before.requirement.values()), (t.id, before.summary())
            assert all(before.regression.values()), (t.id, before.summary(), before.messages)
            assert after.passed, (t.id, after.summary(), after.messages)


@needs_sandbox
def test_every_harness_expert_solves_every_task_through_the_cli(tmp_path):
    db = tmp_path / "r.duckdb"
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    p = subprocess.run([sys.executable, "-m", "tackroom.cli", "eval", "--suite", "code",
                        "--harness", FAMILIES, "--policy", "expert", "--seeds", "0", "-n", "8",
                        "--db", str(db)], cwd=tmp_path, capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    with RecordStore(str(db)) as store:
        (run,) = store.runs()
        rows = store.episodes(run_id=run["run_id"])
    assert len(rows) == len(TASKS) * 4
    assert Counter((r["harness"], r["outcome"]) for r in rows) == {
        (h, "success"): len(TASKS) for h in FAMILIES.split(",")}
    assert all(r["failure_mode"] is None for r in rows)


@needs_sandbox
def test_every_variant_expert_solves_a_sample_of_tasks():
    variants = ["edit-blocks-oneshot", "aci-viewer-nolint", "codeact-context", "json-tools-text"]
    sample = [SUITE.code_task(i).task for i in ("allocate-ratios", "args-equals-form",
                                                 "ttl-expiry-boundary", "csv-bool-column")]
    plan = plan_grid(sample, [load_harness(v) for v in variants], [ExpertPolicy()], [0],
                     Sampling())
    eps = asyncio.run(run_cells(plan.cells, SUITE, "variants", concurrency=4))
    assert [e.outcome for e in eps] == [Outcome.SUCCESS] * len(sample) * len(variants)


# -- failure modes, from crafted model output -------------------------------------------

def run_scripted(task_id: str, harness: str, script: list, store=None):
    task = SUITE.code_task(task_id).task

    async def go():
        policy = OpenAIPolicy("scripted-model", base_url=srv.base_url, api_key="sk-test",
                              backoff_base=0.01, backoff_max=0.05)
        try:
            plan = plan_grid([task], [load_harness(harness)], [policy], [0], Sampling())
            return await run_cells(plan.cells, SUITE, "modes", store=store, concurrency=1)
        finally:
            await policy.aclose()

    with ScriptedOpenAIServer(script) as srv:
        (ep,) = asyncio.run(go())
    return ep


def line_of(task_id: str, path: str, needle: str) -> int:
    return SUITE.code_task(task_id).files[path].splitlines().index(needle) + 1


def block(path: str, old: str, new: str) -> str:
    return f"{path}\n```python\n<<<<<<< SEARCH\n{old}=======\n{new}>>>>>>> REPLACE\n```"


@needs_sandbox
def test_each_failure_mode_comes_from_a_crafted_episode_and_is_recorded(tmp_path):
    store = RecordStore(tmp_path / "r.duckdb")
    store.start_run("modes", "test", {}, 6)
    seen = {}
    # no_edit: the model declares victory without touching anything.
    seen["no_edit"] = run_scripted("slugify-accents", "edit-blocks", [text("DONE")], store)
    # dropped_requirement: a harmless edit that does not address the issue.
    seen["dropped_requirement"] = run_scripted("parse-thousands", "edit-blocks", [text(
        block("ledger/parse.py", '"""Reading amounts written by people."""\n',
              '"""Reading amounts as people write them."""\n') + "\nDONE")], store)
    # broke_existing: "fixing" contains() by making it always false breaks other points.
    seen["broke_existing"] = run_scripted("interval-contains-end", "json-tools", [
        tool_call("replace", {"path": "intervals/interval.py",
                              "old_string": "return self.start <= x < self.end",
                              "new_string": "return False"}),
        tool_call("submit", {})], store)
    # malformed_edits: an edit that leaves the file unable to compile (no lint guard).
    line = line_of("interval-contains-end", "intervals/interval.py",
                   "        return self.start <= x < self.end")
    seen["malformed_edits"] = run_scripted("interval-contains-end", "aci-viewer-nolint", [
        text("```\nopen intervals/interval.py\n```"),
        text(f"```\nedit {line}:{line}\n        return self.start <= x <= self.end:\n"
             "end_of_edit\n```"),
        text("```\nsubmit\n```")], store)
    # budget_exhausted: edits, but never DONE, in a one-turn harness.
    seen["budget_exhausted"] = run_scripted("memo-kwargs", "edit-blocks-oneshot", [text(
        block("cachekit/memo.py", "        key = args\n",
              "        key = (args, tuple(sorted(kwargs.items())))\n"))], store)
    store.close()
    assert len({ep.episode_id for ep in seen.values()}) == len(seen)
    for mode, ep in seen.items():
        assert ep.outcome is not Outcome.SUCCESS and ep.failure_mode == mode, (mode, ep.error)
    assert seen["budget_exhausted"].outcome is Outcome.BUDGET_EXHAUSTED
    assert set(seen) == set(FAILURE_MODES)
    with RecordStore(tmp_path / "r.duckdb") as store:
        recorded = {r["episode_id"]: r["failure_mode"] for r in store.episodes(run_id="modes")}
    assert sorted(recorded.values()) == sorted(FAILURE_MODES)


@needs_sandbox
def test_rejected_edits_are_malformed_and_the_lint_guard_shows_the_error():
    line = line_of("interval-contains-end", "intervals/interval.py",
                   "        return self.start <= x < self.end")
    ep = run_scripted("interval-contains-end", "aci-viewer", [
        text("```\nopen intervals/interval.py\n```"),
        text(f"```\nedit {line}:{line}\n        return self.start <= x <= self.end:\n"
             "end_of_edit\n```"),
        text("```\nsubmit\n```")])
    assert ep.failure_mode == "malformed_edits" and ep.n_turns == 3
    rejected = ep.turns[1]
    assert "would introduce a syntax error" in rejected.action_error
    assert "self.end:" in rejected.action_error and "file is unchanged" in rejected.action_error
    # Replies that never parse end the episode by the harness's error limit: malformed too.
    ep = run_scripted("memo-kwargs", "codeact", [text("```\nls\n```")] * 5)
    assert ep.outcome is Outcome.FAILURE and ep.failure_mode == "malformed_edits"
    assert ep.parse_errors == 5


@needs_sandbox
def test_a_stale_search_block_is_rejected_with_a_hint_and_nothing_changes():
    ep = run_scripted("memo-kwargs", "edit-blocks", [
        text(block("cachekit/memo.py", "          key = args\n", "        key = (args, kwargs)\n")),
        text("DONE")])
    assert "only if whitespace is ignored" in ep.turns[0].action_error
    assert ep.failure_mode == "malformed_edits"


# -- the environment's guard rails ----------------------------------------------------------

@needs_sandbox
def test_paths_cannot_leave_the_repository_and_the_hidden_tests_are_not_there():
    env = SUITE.make_env(SUITE.code_task("memo-kwargs").task)
    try:
        env.reset(0)
        for bad in ("../escape.py", "/etc/passwd", "/task/../x.py", "a\0b"):
            with pytest.raises(ActionError, match="outside the repository|not a usable"):
                env.step(Edit(bad, "", "x"))
        env.step(Shell("ln -s /tmp outside"))
        with pytest.raises(ActionError, match="outside the repository"):
            env.step(Edit("outside/x.py", "", "x = 1\n"))
        packages = Path(tackroom.suites.code.__file__).parent / "packages" / "cachekit"
        listing = env.step(Shell(f"ls {packages}/tests; ls -a /task")).observation.text
        assert "test_cachekit" not in listing and "No such file" in listing
        assert "cachekit" in listing.splitlines()
        # A file created by the host-side edit stays writable for the sandboxed shell.
        env.step(Edit("cachekit/extra/new.py", "", "X = 1\n"))
        out = env.step(Shell("echo 'Y = 2' >> cachekit/extra/new.py && cat cachekit/extra/new.py"))
        assert out.observation.text == "X = 1\nY = 2"
        for bad in (Shell("echo \x00"), Shell("echo \ud800"), WriteFile("a.py", "\ud800")):
            with pytest.raises(ActionError, match="NUL|not valid Unicode"):
                env.step(bad)
        shown = env.step(ViewFile("cachekit/memo.py", 12, 6)).observation.text
        assert shown.startswith("[File: /task/cachekit/memo.py") and "12:" in shown
        result = env.step(Submit())
        assert result.terminated and result.info["failure_mode"] == "dropped_requirement"
        with pytest.raises(ActionError, match="episode is over"):
            env.step(Submit())
    finally:
        env.close()


@needs_sandbox
def test_hidden_test_verdicts_cannot_be_forged_by_printing():
    t = SUITE.code_task("memo-kwargs")
    files = dict(t.files)
    forged = json.dumps({tid: [True, ""] for tid in t.requirement + t.regression})
    files["cachekit/__init__.py"] += f"\nprint('xxxxxxxxxxxxxxxx {forged}')\n"
    report = run_hidden_tests(t, files)
    assert not any(report.requirement.values()) and all(report.regression.values())


@needs_sandbox
def test_a_hanging_fix_times_out_as_failed_tests(tmp_path):
    t = SUITE.code_task("memo-kwargs")
    files = {**t.fixed_files, "cachekit/__init__.py": "while True:\n    pass\n"}
    report = run_hidden_tests(t, files, timeout_s=2)
    assert report.timed_out and not report.passed
    assert "did not report" in next(iter(report.messages.values()))


def test_task_files_are_package_data():
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert '"tackroom.suites.code" = ["tasks/*.toml", "packages/**/*.py"]' in pyproject
