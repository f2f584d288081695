"""The code suite's expert: the task's reference fix, applied through the harness.

The expert reads how far the fix has got from the repository's current files
(the observation's ``extra["files"]``), so it needs no memory and survives
harnesses that take one action per turn: it proposes the remaining fix edits,
then ``Submit()``. Each harness writes those edits in its own format (edit
blocks, a line-range ``edit``, a Python block, a ``replace`` tool call) and
parses them back, so the expert's success is that harness's expert ceiling.
"""

from __future__ import annotations

from typing import Any

from tackroom.core.actions import Action, Edit, Submit
from tackroom.core.observation import Observation
from tackroom.suites.code.tasks import CodeTask


class FixExpert:
    """Applies ``task.fix`` edit by edit, then submits."""

    def __init__(self, task: CodeTask) -> None:
        self.task = task
        paths = sorted({e.path for e in task.fix})
        # stages[k]: the fixed paths' contents after the first k edits.
        stage = {p: task.files[p] for p in paths}
        self.stages = [dict(stage)]
        for e in task.fix:
            stage[e.path] = stage[e.path].replace(e.old, e.new, 1)
            self.stages.append(dict(stage))

    def progress(self, files: dict[str, str]) -> int | None:
        """How many fix edits the repository already has, or ``None`` if it went astray."""
        for k in range(len(self.stages) - 1, -1, -1):
            if all(files.get(p) == text for p, text in self.stages[k].items()):
                return k
        return None

    def __call__(self, obs: Observation, state: dict[str, Any]) -> list[Action]:
        done = self.progress(obs.extra.get("files", {}))
        if done is None:  # not a state the reference fix passes through: hand in as is
            return [Submit()]
        return [Edit(e.path, e.old, e.new) for e in self.task.fix[done:]] + [Submit()]
