"""Errors a user can cause or fix, each rendered as one clear line.

Every error says *what* went wrong, *where* (file, slot, task, URL), and
*what to do*. The CLI prints ``error.line()`` and exits non-zero; it never
shows a traceback for these.
"""

from __future__ import annotations

from tackroom.core.text import printable


class TackroomError(Exception):
    """Base class: ``what`` happened at ``where``; ``fix`` says what to do."""

    def __init__(self, what: str, where: str = "", fix: str = "") -> None:
        self.what = what
        self.where = where
        self.fix = fix
        super().__init__(self.line())

    def line(self) -> str:
        """The single line the CLI prints.

        Characters that are not printable (newlines, carriage returns, escapes, NUL, the
        Unicode line separators) are shown escaped, as ``repr`` writes them: a path or value
        the user gave can never break the line in two or drive the terminal.
        """
        parts = [self.what]
        if self.where:
            parts[0] = f"{self.where}: {self.what}"
        if self.fix:
            parts.append(self.fix)
        return printable(" — ".join(parts))


class HarnessError(TackroomError):
    """A harness file or spec is invalid (raised at load time)."""


class ConfigError(TackroomError):
    """A command-line option or config value is invalid."""


class TaskNotFound(TackroomError):
    """A task id or glob matched nothing in the suite."""


class PolicyError(TackroomError):
    """A policy spec is invalid or its backend refuses us (bad key, unknown model).

    It stops a run: every later episode would hit it. ``episode`` is the episode
    it interrupted, set by the runner so that the episode is still recorded.
    """

    episode: object | None = None


class ContextLengthExceeded(TackroomError):
    """The prompt does not fit the model's context window.

    Retrying cannot help, but it concerns one episode only: the runner ends
    that episode as ``budget_exhausted`` (the context is a budget) and goes on.
    """


class RecordStoreError(TackroomError):
    """The record store cannot be opened or is of an unknown schema."""


class InfraError(TackroomError):
    """The infrastructure failed (browser crash, server down, sandbox error).

    Episodes that end in an ``InfraError`` get the ``infra_error`` outcome and
    are never scored as task failures; ``--resume`` retries them.
    """


class ActionError(Exception):
    """The environment rejected an action (e.g. no element with that ref).

    Not an infrastructure failure: the harness shows the message to the model
    as feedback, as its control loop says.
    """
