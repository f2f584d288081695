"""A compact text-command harness, for tests, benchmarks and examples with tiny models.

One numbered (or otherwise rendered) element list, one ``click N`` / ``type N "…"``
command per turn, a short system prompt: prompts and replies short enough for SFT
and RL on a 1M-parameter model to take seconds. Tests, ``bench/train.py`` and the
examples write it with their own name, renderer and limits.
"""

from __future__ import annotations

__all__ = ["command_harness"]

SYSTEM = "You are a web agent. Act on an element by its [number]."


def command_harness(name: str, *, description: str = "Numbered element list; one text "
                    "command; one turn.", renderer: str = "element_list", turns: int = 1,
                    history: int = 1, wall_seconds: int = 60, max_chars: int | None = None,
                    system: str = SYSTEM, interface: str = "element_refs") -> str:
    """The TOML text of the harness (write it to ``<dir>/<name>.toml``)."""
    chars = f"max_chars = {max_chars}\n" if max_chars is not None else ""
    return f'''name = "{name}"
description = "{description}"
[prompt]
system = "{system}"
[observation]
renderer = "{renderer}"
{chars}[actions]
interface = "{interface}"
parser = "commands"
[loop]
actions_per_turn = 1
history = {history}
on_malformed = "feedback"
on_action_error = "feedback"
[budget]
turns = {turns}
wall_seconds = {wall_seconds}
state_to_model = false
'''
