"""Scripted experts for agent harnesses: a task's reference actions in a CLI's own format.

A built-in harness's expert hands the harness actions, which the harness
encodes as a model would have to. An agent CLI's format is the CLI's own, so
its expert is a :class:`~tackroom.core.policy.Policy` behind the model gateway
that writes replies in that format: it is the agent harness's lower bound of
its ceiling, as the built-in experts are for theirs.

Formats (the harness's ``[agent] expert``; each registered as kind ``agent_expert``):

* ``shell-tool`` (mini-swe-agent, Qwen Code, OpenHands: CLIs that give the
  model a shell tool): the first reply calls the CLI's shell tool — the tool
  of the request whose parameters hold a ``command`` string — with every
  action as one script (an edit becomes a small Python program); the next
  reply runs the harness's ``expert_submit`` command with it (the CLI's own
  way of saying it is done), or, without one, answers in plain text, which
  ends a CLI's turn.
* ``exec-command`` (Codex): the same, through its ``exec_command`` tool, whose
  command line is a ``cmd`` string.
* ``shell-script`` (Gemini CLI): the same, with the script as it is, several
  lines, not wrapped in ``bash -c``.
* ``bash-block`` (text-based CLIs): the same script in a fenced block whose
  info string is the harness's ``expert_fence`` (``bash`` by default).
* ``search-replace`` (Aider's ``diff`` edit format): each edit as a
  ``<<<<<<< SEARCH`` / ``=======`` / ``>>>>>>> REPLACE`` block under its file's
  path (a new file: an empty SEARCH); then plain text. Aider runs no shell
  command unattended, so neither does its expert.
"""

from __future__ import annotations

import base64
import json
import shlex
from collections.abc import Sequence
from typing import Any

from tackroom.core.actions import Action, Edit, Shell, Submit, WriteFile
from tackroom.core.errors import ConfigError
from tackroom.core.policy import PolicyRequest, PolicyResponse, ToolCall
from tackroom.core.registry import get, register


def bash_script(actions: Sequence[Action]) -> str:
    """The actions as one bash script (stopping at the first that fails)."""
    parts = ["set -e"]
    for a in actions:
        if isinstance(a, Shell):
            parts.append(a.cmd.rstrip("\n"))
        elif isinstance(a, Edit):
            parts.append(_python(
                f"p = pathlib.Path({a.path!r}); s = p.read_text() if p.exists() else ''\n"
                f"old, new = {a.old!r}, {a.new!r}\n"
                "if old and old not in s: raise SystemExit(f'{p}: the text to replace is "
                "not there')\n"
                "p.parent.mkdir(parents=True, exist_ok=True)\n"
                "p.write_text(s.replace(old, new, 1) if old else new)"))
        elif isinstance(a, WriteFile):
            parts.append(_python(
                f"p = pathlib.Path({a.path!r}); p.parent.mkdir(parents=True, exist_ok=True)\n"
                f"p.write_text({a.content!r})"))
        elif not isinstance(a, Submit):
            raise ConfigError(f"a bash-block expert cannot write a {a.kind!r} action",
                              "agent expert", "give the task shell or file actions")
    return "\n".join(parts)


def search_replace(actions: Sequence[Action]) -> str:
    """Edits (and new files) as Aider's SEARCH/REPLACE blocks."""
    parts = ["I will make these changes."]
    for a in actions:
        if isinstance(a, WriteFile):
            a = Edit(a.path, "", a.content)
        if isinstance(a, Edit):
            parts.append(f"{a.path}\n```\n<<<<<<< SEARCH\n{_line_end(a.old)}=======\n"
                         f"{_line_end(a.new)}>>>>>>> REPLACE\n```")
        elif not isinstance(a, Submit):
            raise ConfigError(f"a search-replace expert cannot write a {a.kind!r} action",
                              "agent expert", "this harness only edits files")
    return "\n\n".join(parts)


def _line_end(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"


def _python(body: str) -> str:
    return f"python3 - <<'TACKROOM_EDIT'\nimport pathlib\n{body}\nTACKROOM_EDIT"


class AgentExpert:
    """Answers an agent CLI's calls with one episode's reference actions, then its submit.

    One instance per episode (it counts the calls it answered). ``actions`` are
    what the task's expert does from the task's first observation. Each format is a
    subclass, registered as kind ``agent_expert`` under the name a harness's
    ``[agent] expert`` gives; :func:`make_agent_expert` picks one by that name.
    """

    id = "expert"

    def __init__(self, actions: Sequence[Action], submit: str = "", fence: str = "bash") -> None:
        self.submit, self.fence = submit, fence
        # A suite's expert may offer one plan in several forms (the robot suite's: commands,
        # a controller script, then the same plan as a shell script): a CLI says the forms
        # a shell or an editor can, when there are any.
        said = [a for a in actions if isinstance(a, (Shell, Edit, WriteFile, Submit))]
        self.script = self.write(said or list(actions))
        self.calls = 0

    def write(self, actions: Sequence[Action]) -> str:
        """The reference actions as the one script this format sends."""
        return bash_script(actions)

    async def act(self, request: PolicyRequest) -> PolicyResponse:
        if self.uses_tools and not request.tools:  # a side call the gateway did not tell
            return self.side_reply(request, "side")
        self.calls += 1
        return self.reply(request, self.script if self.calls == 1 else self.submit)

    #: Whether this format answers by calling one of the CLI's tools: a call that offers
    #: none (a session title, a summary) is then a side call, not a step of the script.
    uses_tools = False

    def side_reply(self, request: PolicyRequest, label: str | None) -> PolicyResponse:
        """A side call's neutral answer (a short title, a one-line summary): the script is
        not consumed, so the agent turns still get it whole (see tackroom.gateway.calls)."""
        asked = " ".join(str(m.get("content")) for m in request.messages
                         if isinstance(m, dict) and m.get("role") == "system").lower()
        title = label == "title" or "title" in asked  # told, or a call the gateway could not
        return PolicyResponse(text="Solving the task" if title else "Working on the task.",
                              model="expert")

    def reply(self, request: PolicyRequest, command: str) -> PolicyResponse:
        """This call's answer: ``command`` (the script, then the submit command) in the
        format's own form; an empty command ends the CLI's turn in plain text."""
        raise NotImplementedError

    async def aclose(self) -> None:
        return None


@register("agent_expert", "shell-tool")
class ShellToolExpert(AgentExpert):
    """Calls the CLI's shell tool (mini-swe-agent, Qwen Code, OpenHands) with the script."""

    #: A script of several lines goes as one ``bash -c`` command line.
    one_line = True
    uses_tools = True

    def reply(self, request: PolicyRequest, command: str) -> PolicyResponse:
        tool = shell_tool(request.tools or [])
        if tool is None:
            raise ConfigError("the CLI offered no shell tool (one with a 'command' "
                              "parameter)", "agent expert", "use expert = \"bash-block\"")
        if not command:
            return PolicyResponse(text="The task is done.", model="expert")
        name, extra = tool
        if "\n" in command and self.one_line:  # OpenHands' terminal runs one line at a time
            command = f"bash -c {shlex.quote(command)}"
        call = ToolCall(id=f"call_expert_{self.calls}", name=name,
                        arguments=json.dumps({"command": command, **extra}))
        return PolicyResponse(text=None, tool_calls=[call], model="expert")


@register("agent_expert", "shell-script")
class ShellScriptExpert(ShellToolExpert):
    """Calls the CLI's shell tool with the script as it is, its lines and all: Gemini CLI's
    ``run_shell_command`` runs its command with ``bash -c`` itself, and strips a leading
    ``bash -c '...'`` without undoing the quoting inside, which breaks the script.

    Gemini CLI also refuses any command with command substitution in it — ``$(…)``,
    backticks, ``<(…)``, ``>(…)`` — wherever they are, a comment or a quoted heredoc
    included. Such a script goes base64-encoded and decoded into ``bash`` (coreutils'
    ``base64``, in every image), as a model would have to send it.
    """

    one_line = False

    def write(self, actions: Sequence[Action]) -> str:
        script = super().write(actions)
        if not any(mark in script for mark in ("$(", "`", "<(", ">(")):
            return script
        encoded = base64.b64encode(script.encode()).decode()
        return f"echo {encoded} | base64 -d | bash"


@register("agent_expert", "exec-command")
class ExecCommandExpert(AgentExpert):
    """Calls Codex's ``exec_command`` tool (the tool whose parameters hold a ``cmd`` string)
    with the script, waiting up to the 30 s it allows for the script's output."""

    uses_tools = True

    def reply(self, request: PolicyRequest, command: str) -> PolicyResponse:
        tool = shell_tool(request.tools or [], param="cmd")
        if tool is None:
            raise ConfigError("the CLI offered no exec tool (one with a 'cmd' parameter)",
                              "agent expert", "use expert = \"shell-tool\"")
        if not command:
            return PolicyResponse(text="The task is done.", model="expert")
        call = ToolCall(id=f"call_expert_{self.calls}", name=tool[0], arguments=json.dumps(
            {"cmd": command, **tool[1], "yield_time_ms": 30000}))
        return PolicyResponse(text=None, tool_calls=[call], model="expert")


@register("agent_expert", "bash-block")
class BashBlockExpert(AgentExpert):
    """Writes the script in a fenced block (text-based CLIs)."""

    def reply(self, request: PolicyRequest, command: str) -> PolicyResponse:
        if not command:
            return PolicyResponse(text="The task is done.", model="expert")
        return PolicyResponse(text=f"Running the reference solution.\n\n"
                                   f"```{self.fence}\n{command}\n```", model="expert")


@register("agent_expert", "search-replace")
class SearchReplaceExpert(AgentExpert):
    """Writes each edit as an Aider SEARCH/REPLACE block; runs no shell command."""

    def write(self, actions: Sequence[Action]) -> str:
        return search_replace(actions)

    def reply(self, request: PolicyRequest, command: str) -> PolicyResponse:
        text = self.script if self.calls == 1 else "The changes are made."
        return PolicyResponse(text=text, model="expert")


def make_agent_expert(actions: Sequence[Action], fmt: str, submit: str = "",
                      fence: str = "bash") -> AgentExpert:
    """The scripted expert registered as ``fmt`` (a harness's ``[agent] expert``) for one
    episode's reference ``actions``; :class:`ConfigError` naming the formats if none."""
    cls = get("agent_expert", fmt, where="[agent] expert")
    expert: AgentExpert = cls(actions, submit=submit, fence=fence)
    return expert


def shell_tool(tools: Sequence[dict[str, Any]],
               param: str = "command") -> tuple[str, dict[str, Any]] | None:
    """The tool that runs a shell command (a ``param`` string parameter: ``command``, Codex's
    ``cmd``), and values for its other required parameters (OpenHands' ``security_risk``: the
    lowest it offers)."""
    found: list[tuple[str, dict[str, Any]]] = []
    for t in tools:
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict):
            continue
        params = fn.get("parameters") or {}
        props = params.get("properties") if isinstance(params, dict) else None
        if not (isinstance(props, dict) and isinstance(props.get(param), dict)):
            continue
        if props[param].get("enum"):  # a sub-command (file_editor's "create"), not a shell
            continue
        extra = {}
        for key in params.get("required") or []:
            if key == param or not isinstance(props.get(key), dict):
                continue
            extra[key] = _placeholder(props[key])
        found.append((str(fn.get("name", "")), extra))
    words = ("bash", "shell", "terminal", "exec")
    preferred = [f for f in found if any(w in f[0].lower() for w in words)]
    chosen = preferred or found
    return chosen[0] if chosen else None


def _placeholder(schema: dict[str, Any]) -> Any:
    """A harmless value for a required parameter the expert has no use for."""
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return "LOW" if "LOW" in enum else enum[0]
    return {"boolean": False, "integer": 0, "number": 0}.get(str(schema.get("type")), "")
