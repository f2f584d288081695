"""Text that reaches a terminal: every control character shown escaped, never obeyed.

The one escaping of untrusted text (a model's output, a task's file name, a path the
user gave) on its way to a terminal: :meth:`TackroomError.line` uses it for error lines,
and the CLI's consoles (:func:`tackroom.report.terminal.terminal_console`) for everything
they print — a model's ``ESC [31m`` is shown as ``\\x1b[31m``, not obeyed.
"""

from __future__ import annotations

__all__ = ["printable"]


def printable(text: str, keep: str = "") -> str:
    """``text`` with each non-printable character escaped as ``repr`` writes it (``\\x1b``).

    The space stays, and so does each character of ``keep`` (``"\\n\\t"`` for multi-line
    output); everything else that is not printable — escapes, carriage returns, NUL,
    backspace, bidirectional overrides, the Unicode line separators — is escaped, so text
    can neither drive the terminal nor rewrite what was printed before it.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == " " or c in keep else repr(c)[1:-1]
                   for c in text)
