"""What a terminal task's tests said: the reward they wrote, and what they could not run.

Two rules decide whether a verifier judged at all (docs/terminal.md, docs/security.md):

* **A program it could not run** — a command name the shell looked up on ``PATH`` and did
  not find (``pytest: command not found``) — means the environment lacks the verifier's
  own tool. The verifier's bash gets a ``command_not_found_handle`` (passed as an exported
  function, so every ``bash`` the script starts has it too) that records each such name in
  a file of tackroom's, whatever the script does next: ``pytest …; if [ $? -eq 0 ] …`` or
  ``pytest > log 2>&1 || echo 0 > reward`` judged nothing either. A missing *path*
  (``./built-by-the-agent``) is what the agent had to make: judged, a failure.
* **A reward that is not a finite number** (``nan``, ``inf``, ``{"reward": NaN}``) scores
  nothing: it is refused where it is read, as the task's error.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from tackroom.core.errors import InfraError
from tackroom.sandbox import CommandResult

#: Where the verifier's shell records what it could not find (inside its ``/logs``, beside
#: Harbor's ``/logs/verifier``).
MISSING_LOG = ".tackroom-not-found"

#: Characters of the verifier's output kept with an episode.
VERIFIER_OUTPUT_LIMIT = 4000


@dataclass(frozen=True)
class Verdict:
    """One run of a task's ``tests/test.sh``.

    Attributes:
        reward: what it wrote (a finite number; see :func:`read_reward`).
        result: how the script ran (exit code, output).
        missing: what it could not run at all (``"pytest not found"``), or ``None``.
        ctrf: its CTRF report (``/logs/verifier/ctrf.json``) as kept with the episode
            (:func:`read_ctrf`), or ``None``.
    """

    reward: float
    result: CommandResult
    missing: str | None
    ctrf: dict[str, object] | None = None


def not_found_env(log: str) -> dict[str, str]:
    """The environment that makes every ``bash`` of the verifier record, in ``log`` (a
    path as the verifier sees it), each command name it cannot find, then fail as usual."""
    handler = ("() { printf '%s\\n' \"$1\" >> " + _quote(log) + " 2>/dev/null; "
               "printf 'bash: %s: command not found\\n' \"$1\" >&2; return 127; }")
    return {"BASH_FUNC_command_not_found_handle%%": handler}


def _quote(path: str) -> str:
    return "'" + path.replace("'", "'\\''") + "'"


def not_found(logs: Path, result: CommandResult) -> str | None:
    """What the verifier could not run: from its shell's record in ``logs``, else from its
    exit code and output (a shell the handler did not reach, ``sh`` say)."""
    try:
        names = (logs / MISSING_LOG).read_text(errors="replace").split()
    except OSError:
        names = []
    if names:
        seen = list(dict.fromkeys(names))
        shown = ", ".join(seen[:5]) + (f" and {len(seen) - 5} more" if len(seen) > 5 else "")
        return f"{shown} not found"
    return missing_command(result.exit_code, result.output(VERIFIER_OUTPUT_LIMIT))


_NOT_FOUND = re.compile(r"(?:^|\n)(?:[^\n:]*: )?(?:line \d+: )?([A-Za-z0-9_.+-]+): "
                        r"(?:command not found|not found|No such file or directory)")


def missing_command(exit_code: int | None, output: str) -> str | None:
    """What a script could not run at all (``"pytest not found"``), or ``None``.

    Exit 126/127 from a *command name* the script calls (``pytest: command not
    found``) means the environment lacks the script's tool: a verifier that
    exits so judged nothing. A *path* that is missing (``./solution-binary: No
    such file``) is what the agent had to make: a task failure, judged as such.
    """
    if exit_code not in (126, 127):
        return None
    for m in _NOT_FOUND.finditer(output):
        name = m.group(1)
        if "/" not in name:
            return f"{name} not found"
    if exit_code == 126 and "cannot execute" in output and "/" not in output.split(":")[0]:
        return "cannot execute"
    return None


#: Tests of a CTRF report kept with an episode (each its name and status).
CTRF_TESTS_KEPT = 200


def read_ctrf(verifier: Path) -> dict[str, object] | None:
    """The verifier's CTRF report (``ctrf.json``, as ``pytest --ctrf`` writes it in Harbor's
    tasks), as an episode keeps it: its summary's counts and each test's name and status (at
    most :data:`CTRF_TESTS_KEPT`). ``None`` when there is none or it is not CTRF."""
    try:
        data = json.loads((verifier / "ctrf.json").read_text(errors="replace"))
    except (OSError, ValueError):
        return None
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, dict):
        return None
    summary = results.get("summary")
    tests = results.get("tests")
    counts = {str(k): v for k, v in (summary.items() if isinstance(summary, dict) else ())
              if isinstance(v, int) and not isinstance(v, bool)}
    rows = [{"name": str(t.get("name", ""))[:300], "status": str(t.get("status", ""))[:40]}
            for t in (tests if isinstance(tests, list) else [])[:CTRF_TESTS_KEPT]
            if isinstance(t, dict)]
    return {"summary": counts, "tests": rows}


def read_reward(verifier: Path, where: str) -> float:
    """Harbor's reward: ``reward.txt`` (a number) or ``reward.json`` (``reward`` or the mean).

    What is not a number reads as 0 (a failed verifier wrote nothing usable); a number that
    is not finite raises :class:`InfraError` naming ``where`` (the test script).
    """
    reward = _reward(verifier)
    if not math.isfinite(reward):
        raise InfraError(f"the task's verifier wrote a reward that is not a finite number "
                         f"({reward}); the episode is not scored", where,
                         "make tests/test.sh write 0 or 1 (or a finite score) to "
                         "/logs/verifier/reward.txt")
    return reward


def _reward(verifier: Path) -> float:
    txt, js = verifier / "reward.txt", verifier / "reward.json"
    try:
        if txt.is_file():
            return float(txt.read_text().strip().split()[0])
        if js.is_file():
            data = json.loads(js.read_text())
            if isinstance(data, (int, float)):
                return float(data)
            if "reward" in data:
                return float(data["reward"])
            values = [float(v) for v in data.values() if isinstance(v, (int, float))]
            return sum(values) / len(values) if values else 0.0
    except (ValueError, IndexError, TypeError, AttributeError, OverflowError,
            json.JSONDecodeError):
        return 0.0
    return 0.0
