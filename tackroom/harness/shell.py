"""Harness parts for shell suites: a terminal renderer, two interfaces, two parsers.

* ``shell_commands`` + ``bash_blocks``: the model writes ```` ```bash ````
  blocks; each runs as one script; a line ``submit`` (outside any block) ends.
* ``terminal_keys`` + ``terminal_tools``: native tool calls
  ``send_keys(keystrokes, wait_s)`` into a persistent interactive shell, whose
  screen the model reads back (Terminus-style), and ``submit()``.

Both interfaces express the abstract ``Shell(cmd)`` and ``Submit()`` that
experts use, so an expert's score under each harness is that harness's floor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tackroom.core.actions import Action, Press, Shell, Submit, TypeText
from tackroom.core.observation import Observation
from tackroom.core.policy import PolicyResponse
from tackroom.core.registry import register
from tackroom.harness.interfaces import ActionInterface, ActionSpec, Call, CallError, Param
from tackroom.harness.parsers import OutputParser, ParseError, ToolCallParser

#: The longest command or keystroke string accepted in one action.
MAX_INPUT = 100_000
#: Key names ``send_keys`` turns into a key press when sent on their own.
KEY_NAMES = ("Enter", "Tab", "Escape", "Backspace", "C-c", "C-d", "C-z", "C-l", "C-u", "C-a",
             "C-e", "C-k", "C-w", "C-r", "C-\\")
_HEREDOC = "__TACKROOM_EOF__"


@dataclass(frozen=True)
class TypeKeys(TypeText):
    """Type ``text`` into the live shell, then wait up to ``wait_s`` for its prompt.

    Still a ``type_text`` action in the records; environments without a notion
    of waiting just type.
    """

    wait_s: float = 10.0


# -- renderer --------------------------------------------------------------------------------
@register("renderer", "terminal")
def render_terminal(obs: Observation, options: dict[str, Any]) -> str:
    """The terminal text, then the sandbox's limits (``limits = false`` drops that line).

    The time the episode has *left* is not stated here: the budget line says it, once,
    as the smaller of the harness's and the task's clocks (see the runner).
    """
    text = obs.text or ""
    limit = int(options.get("max_chars", 0) or 0)
    if limit and len(text) > limit:
        # Keep the end: the latest output and the prompt matter most on a terminal.
        text = f"… ({len(text) - limit} earlier characters cut)\n" + text[-limit:]
    x = obs.extra
    if options.get("limits", True) and "command_timeout_s" in x:
        text += (f"\n[sandbox: no network; each command may run {x['command_timeout_s']:g} s; "
                 f"the episode {x['episode_timeout_s']:g} s; "
                 f"memory {x['memory_mb']} MB; disk {x['disk_mb']} MB]")
    return text


# -- interfaces ------------------------------------------------------------------------------
def _text_ok(value: str, what: str) -> str:
    if "\x00" in value:
        raise CallError(f"{what} cannot contain NUL characters")
    if len(value) > MAX_INPUT:
        raise CallError(f"{what} is {len(value)} characters long; the limit is {MAX_INPUT}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise CallError(f"{what} is not valid UTF-8 text") from None
    return value


class ShellCommandInterface(ActionInterface):
    """``bash(command)`` runs a script to completion; ``submit()`` ends the episode."""

    name = "shell_commands"
    supports = frozenset({"shell", "submit"})
    specs = (
        ActionSpec("bash", "Run a bash script in the task directory and show its output.",
                   (Param("command", "string", "the bash commands to run"),)),
        ActionSpec("submit", "Declare the task done; the task's tests then run."),
    )

    def to_actions(self, call: Call) -> list[Action]:
        a = self.validate(call)
        if call.name == "submit":
            return [Submit()]
        cmd = _text_ok(a["command"], "a command")
        if not cmd.strip():
            raise CallError("bash: the command is empty")
        return [Shell(cmd)]

    def express(self, action: Action, obs: Observation) -> list[Call] | None:
        if isinstance(action, Shell):
            return [Call("bash", {"command": action.cmd})]
        if isinstance(action, Submit):
            return [Call("submit")]
        return None


register("interface")(ShellCommandInterface())


class TerminalKeysInterface(ActionInterface):
    """``send_keys(keystrokes, wait_s)`` types into a live shell; ``submit()`` ends."""

    name = "terminal_keys"
    supports = frozenset({"shell", "submit"})
    specs = (
        ActionSpec("send_keys", "Type keystrokes into the terminal (\\n is Enter) and read "
                   "the screen. Send a key name alone (C-c, C-d, Enter, Tab, Escape) to press it.",
                   (Param("keystrokes", "string", "the text to type, e.g. \"ls -la\\n\", or a "
                          "key name such as C-c"),
                    Param("wait_s", "number", "seconds to wait for the command to finish "
                          "(optional; the wait ends early when the prompt returns)"))),
        ActionSpec("submit", "Declare the task done; the task's tests then run."),
    )
    #: Parameters a call may leave out, with their defaults.
    optional = {"send_keys": {"wait_s": 10.0}}

    def validate(self, call: Call) -> dict[str, Any]:
        defaults = self.optional.get(call.name, {})
        args = {**defaults, **call.args} if isinstance(call.args, dict) else call.args
        return super().validate(Call(call.name, args))

    def to_actions(self, call: Call) -> list[Action]:
        a = self.validate(call)
        if call.name == "submit":
            return [Submit()]
        keys = _text_ok(a["keystrokes"], "keystrokes")
        if not keys:
            raise CallError("send_keys: keystrokes is empty")
        if not 0 <= a["wait_s"] <= 3600:
            raise CallError(f"send_keys: wait_s must be between 0 and 3600, got {a['wait_s']}")
        if keys in KEY_NAMES:
            return [Press(keys)]
        return [TypeKeys(keys, float(a["wait_s"]))]

    def express(self, action: Action, obs: Observation) -> list[Call] | None:
        if isinstance(action, Submit):
            return [Call("submit")]
        if not isinstance(action, Shell):
            return None
        cmd = action.cmd.strip("\n")
        if "\n" in cmd and _HEREDOC not in cmd:
            # A script typed line by line into an interactive shell is not the same as
            # running it (one `exit` or `set -e` failure ends the shell): run it with bash.
            keys = f"bash <<'{_HEREDOC}'\n{cmd}\n{_HEREDOC}\n"
        else:
            keys = cmd + "\n"
        wait = float(obs.extra.get("command_timeout_s", 10.0))
        return [Call("send_keys", {"keystrokes": keys, "wait_s": wait})]


register("interface")(TerminalKeysInterface())


# -- parsers ---------------------------------------------------------------------------------
_SHELL_LANGS = {"", "bash", "sh", "shell", "console", "zsh", "terminal"}
_SUBMIT = re.compile(r"^\s*[`*]*submit[`*]*\s*\.?\s*$", re.IGNORECASE)
_OPEN = re.compile(r"^\s*(`{3,})\s*([\w+-]*)[^`]*$")


def _blocks(text: str) -> tuple[list[tuple[str, str]], list[str]]:
    """(language, body) of each fenced block, and the lines outside every block."""
    blocks: list[tuple[str, str]] = []
    outside: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if m is None:
            outside.append(lines[i])
            i += 1
            continue
        fence, lang = m.group(1), m.group(2).lower()
        body: list[str] = []
        i += 1
        while i < len(lines) and not re.fullmatch(rf"\s*`{{{len(fence)},}}\s*", lines[i]):
            body.append(lines[i])
            i += 1
        if i >= len(lines):
            raise ParseError(f"a {fence} block is not closed; end it with {fence} on a line "
                             "of its own")
        blocks.append((lang, "\n".join(body)))
        i += 1
    return blocks, outside


class BashBlockParser(OutputParser):
    """Shell commands in ```` ```bash ```` blocks, one script per block; ``submit`` ends."""

    name = "bash_blocks"

    def describe(self, interface: ActionInterface) -> str:
        return (
            "Run shell commands by writing them in a ```bash block. Each block runs as one "
            "bash script in the task directory, in a fresh shell: files persist between "
            "blocks, but `cd` and variables do not. You see each block's output and exit "
            "code. Several blocks in one reply run in order. When the task is done, write "
            "`submit` on a line of its own, outside any block; the task's tests then run. "
            "Example:\n```bash\nls -la\n```")

    def parse(self, response: PolicyResponse, interface: ActionInterface) -> list[Call]:
        text = response.text or ""
        blocks, outside = _blocks(text)
        calls: list[Call] = []
        submit = any(_SUBMIT.match(line) for line in outside)
        other = 0
        for lang, body in blocks:
            if lang not in _SHELL_LANGS:
                other += 1
                continue
            if _SUBMIT.match(body.strip() or "-"):
                submit = True
            elif body.strip():
                calls.append(Call("bash", {"command": body}))
        if submit:
            calls.append(Call("submit"))
        if not calls:
            if other:
                raise ParseError("only ```bash blocks run, and this reply has none (write "
                                 "other languages through bash, e.g. python3 - <<'EOF' … EOF)")
            if response.tool_calls:
                raise ParseError("tool calls are not read here; write commands in a ```bash "
                                 "block, or `submit` on its own line")
            raise ParseError("no ```bash block and no `submit` line found; write commands as "
                             "```bash\nls\n``` or `submit` on its own line when done")
        return calls

    def encode(self, calls: list[Call], interface: ActionInterface) -> PolicyResponse:
        parts = []
        for c in calls:
            if c.name == "submit":
                parts.append("submit")
                continue
            cmd = str(c.args.get("command", ""))
            runs = [len(r) for r in re.findall(r"`{3,}", cmd)]
            fence = "`" * max([3] + [n + 1 for n in runs])
            parts.append(f"{fence}bash\n{cmd.strip(chr(10))}\n{fence}")
        return PolicyResponse(text="\n\n".join(parts))


register("parser")(BashBlockParser())


class TerminalToolParser(ToolCallParser):
    """Native tool calls for the terminal: optional parameters stay optional in the schema."""

    name = "terminal_tools"
    no_call_hint = ' (for example send_keys with keystrokes "ls\\n")'

    def describe(self, interface: ActionInterface) -> str:
        return (
            "Act by calling the provided tools. send_keys types into a live bash shell in the "
            "task directory (it keeps `cd`, variables and running programs between calls) and "
            "returns the screen; end a command with \\n to run it, send C-c alone to "
            "interrupt. Call submit when the task is done; the task's tests then run.")

    def required(self, spec: ActionSpec, interface: ActionInterface) -> list[str]:
        """All parameters but those the interface lists as ``optional`` (with defaults)."""
        optional = getattr(interface, "optional", {}).get(spec.name, {})
        return [p.name for p in spec.params if p.name not in optional]


register("parser")(TerminalToolParser())
