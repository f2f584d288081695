"""The console everything printed to a terminal goes through (the CLI's, the examples').

Text printed with :func:`terminal_console` has its control characters escaped
(:func:`tackroom.core.text.printable`), so a model's ``ESC [31m`` in a replayed episode,
a table cell or a progress line is shown as ``\\x1b[31m``, never obeyed. Apart from
:mod:`tackroom.report.terminal` (the tables) so that a console costs only rich's import.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.style import Style
from rich.text import Text

from tackroom.core.text import printable

__all__ = ["TerminalConsole", "terminal_console"]

#: Kept as they are in printed text: rich lays out lines and tabs itself.
_LAYOUT = "\n\t"


class TerminalConsole(Console):
    """A rich console whose printed strings have their control characters escaped.

    Every string rich prints — ``print``'s arguments, table cells, titles, captions, panel
    bodies, rules — goes through :meth:`render_str`, where it is escaped before markup is
    read; rich's own colours (its control segments) are unaffected. ``Text`` objects built
    elsewhere are escaped in :meth:`print` too.
    """

    def render_str(self, text: str, *args: Any, **kwargs: Any) -> Text:
        """``text`` (markup, when on, read after escaping) as rich ``Text``."""
        return super().render_str(printable(text, _LAYOUT), *args, **kwargs)

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """As :meth:`rich.console.Console.print`, each ``Text`` argument escaped first."""
        super().print(*(_escaped_text(o) if isinstance(o, Text) else o for o in objects),
                      **kwargs)


def _escaped_text(text: Text) -> Text:
    safe = printable(text.plain, _LAYOUT)
    if safe == text.plain:
        return text
    return Text(safe, style=text.style if isinstance(text.style, (str, Style)) else "",
                justify=text.justify, overflow=text.overflow, no_wrap=text.no_wrap,
                end=text.end)


def terminal_console(*, stderr: bool = False, width: int | None = None) -> TerminalConsole:
    """The console for terminal output: control characters escaped, no emoji codes (in
    ``openai:x:`` the ``:x:`` is part of a model name, not ❌)."""
    return TerminalConsole(stderr=stderr, width=width, emoji=False)
