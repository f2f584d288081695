"""Hidden tests and failure modes: how a code episode is judged.

The hidden tests run in a fresh sandbox over a *copy* of the repository (so
nothing the tests write leaks back), with the tests in a hidden folder and a
tiny stdlib runner — the sandbox's Python has no pytest. The runner loads each
test id with ``unittest`` and prints one line of JSON after a per-run nonce,
so whatever the repository's code prints cannot forge a verdict.
"""

from __future__ import annotations

import json
import secrets
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tackroom.sandbox import BubblewrapSandbox, Limits, special_files
from tackroom.suites.code.tasks import CodeTask

HIDDEN_DIR = ".tackroom_hidden"
#: Seconds for one run of all of a task's hidden tests.
TEST_TIMEOUT_S = 60.0

_RUNNER = '''\
import io, json, os, sys, unittest
nonce = sys.argv[1]
ids = json.loads(sys.stdin.read())
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [here, os.getcwd()]
results = {}
for test_id in ids:
    stream = io.StringIO()
    try:
        suite = unittest.defaultTestLoader.loadTestsFromName(test_id)
        result = unittest.TextTestRunner(stream=stream, verbosity=0).run(suite)
        ok = result.wasSuccessful() and result.testsRun > 0
        problems = result.failures + result.errors
        message = problems[0][1].strip().splitlines()[-1] if problems else ""
    except BaseException as e:  # the code under test may raise anything, SystemExit too
        ok, message = False, f"{type(e).__name__}: {e}"
    results[test_id] = [ok, message[-300:]]
sys.__stdout__.write(nonce + " " + json.dumps(results) + "\\n")
sys.__stdout__.flush()
'''


@dataclass
class TestReport:
    """Per-test verdicts of one hidden-test run.

    ``messages`` holds the last line of each failing test's error.
    """

    requirement: dict[str, bool]
    regression: dict[str, bool]
    messages: dict[str, str] = field(default_factory=dict)
    timed_out: bool = False

    @property
    def passed(self) -> bool:
        return all(self.requirement.values()) and all(self.regression.values())

    def summary(self) -> str:
        """``requirement 1/2, regression 14/14`` for records and messages."""
        r, g = self.requirement, self.regression
        note = " (the test run timed out)" if self.timed_out else ""
        return (f"requirement tests {sum(r.values())}/{len(r)} passed, regression tests "
                f"{sum(g.values())}/{len(g)} passed{note}")

    def to_dict(self) -> dict:
        return {"requirement": self.requirement, "regression": self.regression,
                "messages": self.messages, "timed_out": self.timed_out}


def run_hidden_tests(task: CodeTask, repo: Path | dict[str, str], *, unsafe_local: bool = False,
                     timeout_s: float = TEST_TIMEOUT_S) -> TestReport:
    """Run the task's hidden tests against ``repo`` (a directory, or path -> text).

    Raises :class:`~tackroom.sandbox.SandboxUnavailable` when there is no
    sandbox (and ``unsafe_local`` is not set).
    """
    ids = list(task.requirement) + list(task.regression)
    with tempfile.TemporaryDirectory(prefix="tackroom-code-eval-") as tmp:
        root = Path(tmp) / "repo"
        if isinstance(repo, dict):
            root.mkdir()
            for rel, text in repo.items():
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_text(text)
        else:
            skip = shutil.ignore_patterns("__pycache__", HIDDEN_DIR)
            shutil.copytree(repo, root, symlinks=True,  # a FIFO the agent left is no source
                            ignore=lambda d, names: skip(d, names) | special_files(d, names))
        hidden = root / HIDDEN_DIR
        hidden.mkdir()
        for name, text in task.tests.items():
            (hidden / Path(name).name).write_text(text)
        (hidden / "run.py").write_text(_RUNNER)
        nonce = secrets.token_hex(8)
        with BubblewrapSandbox(root, Limits(wall_s=timeout_s), unsafe_local=unsafe_local) as box:
            result = box.run(f"python3 -B {HIDDEN_DIR}/run.py {nonce}", stdin=json.dumps(ids))
    verdicts: dict[str, list] = {}
    for line in result.stdout.splitlines():
        if line.startswith(nonce + " "):
            try:
                verdicts = json.loads(line[len(nonce) + 1:])
            except ValueError:
                verdicts = {}
    messages = {}
    for tid in ids:
        ok, msg = verdicts.get(tid, [False, "the test did not report (crash or timeout)"])
        if not ok:
            messages[tid] = str(msg)
    return TestReport(
        requirement={t: bool(verdicts.get(t, [False])[0]) for t in task.requirement},
        regression={t: bool(verdicts.get(t, [False])[0]) for t in task.regression},
        messages=messages, timed_out=result.timed_out,
    )


def failure_mode(report: TestReport, *, edited: bool, rejected_edits: int,
                 uncompilable: list[str]) -> str | None:
    """Why a submission failed, or ``None`` if it passed.

    In order: nothing was changed (``no_edit``, or ``malformed_edits`` when
    the environment rejected every edit the agent tried); a changed Python
    file does not compile (``malformed_edits``); a regression test fails
    (``broke_existing``); otherwise a requirement test fails
    (``dropped_requirement``).
    """
    if report.passed:
        return None
    if not edited:
        return "malformed_edits" if rejected_edits else "no_edit"
    if uncompilable:
        return "malformed_edits"
    if not all(report.regression.values()):
        return "broke_existing"
    return "dropped_requirement"
