"""The code environment: a repository in a sandbox, file actions, and hidden-test judging.

Actions and what the observation's ``text`` then says:

* ``Shell(cmd)`` runs ``bash -c cmd`` in the sandbox (cwd ``/task``): the output,
  and the exit code when it is not 0.
* ``Edit(path, old, new)`` replaces the one occurrence of ``old``; an empty
  ``old`` creates a new file. ``WriteFile(path, content)`` creates or
  overwrites. ``EditLines`` replaces a line range (of the viewer's file when
  ``path`` is empty), optionally refusing edits that break compilation.
* ``ViewFile`` shows a file whole (``window = 0``) or through the windowed
  viewer, whose state (open file, first line) lives here.
* ``Submit()`` runs the hidden tests and ends the episode; ``info`` carries
  ``failure_mode`` (see :func:`~tackroom.suites.code.evaluate.failure_mode`)
  and the per-test verdicts.

Rejected actions raise :class:`ActionError` (shown to the model). The
observation's ``extra`` holds ``files`` (every text file, for renderers and
experts) and ``viewer`` (the open file, or ``None``). Each observation shows
the outcome of the last action only; harnesses that allow several actions
per turn see the last one's.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from tackroom.core.actions import (
    Action,
    Edit,
    EditLines,
    RunAgent,
    Shell,
    Submit,
    ViewFile,
    WriteFile,
)
from tackroom.core.errors import ActionError
from tackroom.core.observation import Observation
from tackroom.core.task import StepResult
from tackroom.sandbox import BubblewrapSandbox, Limits, run_agent
from tackroom.suites.code.evaluate import failure_mode, run_hidden_tests
from tackroom.suites.code.tasks import REPO_PATH, CodeTask
from tackroom.suites.code.workspace import (
    Viewer,
    Workspace,
    clamp_top,
    numbered,
    replace_once,
    window_text,
)

#: Characters of command output shown to the model per action.
OUTPUT_CHARS = 6000
DEFAULT_WINDOW = 100
DEFAULT_LIMITS = Limits(wall_s=20.0, episode_wall_s=900.0)


def compile_error(text: str, rel: str) -> str | None:
    """Why ``text`` does not compile as Python (one line), or ``None`` if it does."""
    try:
        compile(text, rel, "exec", dont_inherit=True)
    except SyntaxError as e:
        return f"{type(e).__name__}: {e.msg} (line {e.lineno})"
    except (ValueError, RecursionError, MemoryError, OverflowError) as e:
        return f"{type(e).__name__}: {e}"
    return None


class CodeEnv:
    """One live code episode; ``reset`` checks the task's repository out into a sandbox."""

    blocking = True

    def __init__(self, task: CodeTask, *, limits: Limits = DEFAULT_LIMITS,
                 unsafe_local: bool = False) -> None:
        self.task = task
        self.limits = limits
        self.unsafe_local = unsafe_local
        self._dir: Path | None = None
        self.box: BubblewrapSandbox | None = None
        self.ws: Workspace | None = None
        self.viewer: Viewer | None = None
        self.rejected_edits = 0
        self.done = False
        self.started = 0.0

    # -- Gymnasium-shaped API --------------------------------------------------------------
    def reset(self, seed: int) -> Observation:
        """Check out a fresh copy of the repository (the tasks are not randomised by seed)."""
        self.close()
        self._dir = Path(tempfile.mkdtemp(prefix=f"tackroom-code-{self.task.id}-"))
        for rel, text in self.task.files.items():
            (self._dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (self._dir / rel).write_text(text)
        self.box = BubblewrapSandbox(self._dir, self.limits, unsafe_local=self.unsafe_local)
        owner = self.box.uid if self.box.uid != os.getuid() else None
        self.ws = Workspace(self._dir, owner)
        self.viewer = None
        self.rejected_edits = 0
        self.done = False
        self.started = time.monotonic()
        return self._obs(f"The repository is checked out at {REPO_PATH} "
                         f"({len(self.task.files)} files).")

    def step(self, action: Action) -> StepResult:
        if self.ws is None or self.box is None:
            raise ActionError(f"{self.task.id}: step() before reset(); call reset(seed) first")
        if self.done:
            raise ActionError(f"{self.task.id}: the episode is over; call reset(seed) again")
        if time.monotonic() - self.started > self.limits.episode_wall_s:
            self.done = True
            return StepResult(self._obs("The episode's time is up."), 0.0, False, True, False,
                              {"failure_mode": "budget_exhausted"})
        if isinstance(action, Submit):
            return self._submit()
        if isinstance(action, Shell):
            return StepResult(self._obs(self._shell(action.cmd)), 0.0, False)
        if isinstance(action, RunAgent):
            return self._run_agent(action)
        # Each handler takes the action type it is keyed by.
        handlers: dict[type[Action], Callable[[Any], str]] = {
            Edit: self._edit, WriteFile: self._write, EditLines: self._edit_lines,
            ViewFile: self._view}
        handler = handlers.get(type(action))
        if handler is None:
            raise ActionError(f"the code suite does not support {action.kind!r} actions; use "
                              "shell, edit, write_file, edit_lines, view_file or submit")
        try:
            text = handler(action)
        except ActionError:
            if not isinstance(action, ViewFile):
                self.rejected_edits += 1
            raise
        return StepResult(self._obs(text), 0.0, False)

    def close(self) -> None:
        if self.box is not None:
            self.box.close()
            self.box = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        self.ws = None

    # -- actions ---------------------------------------------------------------------------
    def _obs(self, text: str) -> Observation:
        assert self.ws is not None
        return Observation(
            instruction=self.task.instruction, text=text,
            extra={"files": self.ws.snapshot(), "repo": REPO_PATH, "package": self.task.package,
                   "viewer": asdict(self.viewer) if self.viewer else None},
        )

    def _run_agent(self, action: RunAgent) -> StepResult:
        """An agent CLI in a sandbox of its own over the repository, then this one again."""
        assert self.box is not None and self._dir is not None
        self.box.close()
        left = self.limits.episode_wall_s - (time.monotonic() - self.started)
        res = run_agent(replace(action, timeout_s=max(1.0, min(action.timeout_s, left))),
                        self._dir, self.limits, unsafe_local=self.unsafe_local)
        self.box = BubblewrapSandbox(self._dir, self.limits, unsafe_local=self.unsafe_local)
        self.ws = Workspace(self._dir, self.box.uid if self.box.uid != os.getuid() else None)
        return StepResult(self._obs(res.output(OUTPUT_CHARS)), 0.0, False,
                          info={"agent": res.record()})

    def _shell(self, cmd: str) -> str:
        assert self.box is not None
        if "\x00" in cmd:
            raise ActionError("the command contains a NUL character; remove it")
        try:
            cmd.encode()
        except UnicodeEncodeError:
            raise ActionError("the command is not valid Unicode text (a lone surrogate)") from None
        result = self.box.run(cmd)
        out = result.output(OUTPUT_CHARS).strip("\n") or "(no output)"
        if result.exit_code != 0 and not result.timed_out:
            out += f"\n[exit code {result.exit_code}]"
        return out

    def _edit(self, a: Edit) -> str:
        assert self.ws is not None
        if a.old == "":
            host, rel = self.ws.resolve(a.path)
            if host.exists():
                raise ActionError(f"{rel} already exists; to change it, give the exact lines "
                                  "to replace (an empty search only creates new files)")
            self.ws.write(rel, a.new)
            return f"Created {rel} ({len(a.new.splitlines())} lines)."
        text, rel = self.ws.read(a.path)
        new_text = replace_once(text, a.old, a.new, rel)
        self.ws.write(rel, new_text)
        line = text[: text.index(a.old)].count("\n") + 1
        return (f"Edited {rel}: replaced {len(a.old.splitlines()) or 1} line(s) from line "
                f"{line} with {len(a.new.splitlines())} line(s).")

    def _write(self, a: WriteFile) -> str:
        assert self.ws is not None
        rel = self.ws.write(a.path, a.content)
        return f"Wrote {rel} ({len(a.content.splitlines())} lines)."

    def _edit_lines(self, a: EditLines) -> str:
        assert self.ws is not None
        path = a.path or (self.viewer.path if self.viewer else "")
        if not path:
            raise ActionError("no file is open; open one first (open <path>), then edit it")
        text, rel = self.ws.read(path)
        lines = text.splitlines(keepends=True)
        n = len(lines)
        if not (1 <= a.start <= n + 1 and a.start - 1 <= a.end <= n):
            raise ActionError(f"lines {a.start}:{a.end} are out of range for {rel} ({n} lines); "
                              f"use start:end with 1 <= start <= end <= {n}, or end = start - 1 "
                              "to insert before start")
        block = a.text if not a.text or a.text.endswith("\n") else a.text + "\n"
        head = "".join(lines[: a.start - 1])
        if head and not head.endswith("\n"):
            head += "\n"
        new_text = head + block + "".join(lines[a.end:])
        window = self.viewer.window if self.viewer else DEFAULT_WINDOW
        top = clamp_top(a.start - window // 4, len(new_text.splitlines()), window)
        if a.lint and rel.endswith(".py") and compile_error(text, rel) is None:
            error = compile_error(new_text, rel)
            if error is not None:
                shown = new_text.splitlines()[top - 1: top - 1 + min(window, 30)]
                raise ActionError(
                    f"your edit was not applied: it would introduce a syntax error "
                    f"({error}). This is how {rel} would have looked:\n"
                    f"{numbered(shown, top)}\n"
                    "The file is unchanged; fix the edit (mind the indentation) and try again")
        self.ws.write(rel, new_text)
        self.viewer = Viewer(rel, top, window)
        return "File updated.\n" + window_text(rel, new_text, self.viewer)

    def _view(self, a: ViewFile) -> str:
        assert self.ws is not None
        if a.path:
            text, rel = self.ws.read(a.path)
        elif self.viewer is not None:
            text, rel = self.ws.read(self.viewer.path)
        else:
            raise ActionError("no file is open; open one first (open <path>)")
        n = len(text.splitlines())
        if a.window <= 0:
            return f"{rel} ({n} lines):\n{text}"
        if a.line > max(n, 1):
            raise ActionError(f"line {a.line} is past the end of {rel} ({n} lines)")
        if a.line > 0:
            top = a.line - a.window // 2
        elif a.path or self.viewer is None or self.viewer.path != rel:
            top = 1
        else:
            top = self.viewer.top
        before = top
        top = clamp_top(top + a.scroll * a.window, n, a.window)
        self.viewer = Viewer(rel, top, a.window)
        note = ""
        if a.scroll and top == clamp_top(before, n, a.window):
            note = "\n(already at the " + ("end" if a.scroll > 0 else "start") + " of the file)"
        return window_text(rel, text, self.viewer) + note

    def _submit(self) -> StepResult:
        assert self.ws is not None
        self.done = True
        prefix = self.task.package + "/"
        now = {k: v for k, v in self.ws.snapshot().items() if k.startswith(prefix)}
        before = {k: v for k, v in self.task.files.items() if k.startswith(prefix)}
        uncompilable = [k for k, v in now.items() if k.endswith(".py") and before.get(k) != v
                        and compile_error(v, k) is not None]
        report = run_hidden_tests(self.task, self.ws.root, unsafe_local=self.unsafe_local)
        mode = failure_mode(report, edited=now != before, rejected_edits=self.rejected_edits,
                            uncompilable=uncompilable)
        info = {"failure_mode": mode, "tests": report.to_dict(), "uncompilable": uncompilable}
        text = f"Submitted: {report.summary()}."
        return StepResult(self._obs(text), 1.0 if report.passed else 0.0, True, False,
                          report.passed, info)
