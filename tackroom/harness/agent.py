"""The ``[agent]`` slot: a third-party agent CLI, run unmodified, as a harness.

A harness with an ``[agent]`` table is an *agent harness*: instead of
tackroom's own prompt, renderer, parser and loop, an installed program (Aider,
mini-swe-agent, Qwen Code, ...) is the harness. It runs in the task's sandbox
with the task's files and reaches only tackroom's model gateway, which records
each of its model calls as a turn::

    name = "mini-swe-agent"
    [agent]
    cli = "mini-swe-agent"
    version = "2.4.6"
    install = { pip = ["mini-swe-agent==2.4.6"] }
    command = ["{tool}/bin/mini", "--task", "{instruction}", "--yolo"]
    expert = "shell-tool"
    expert_submit = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
    [agent.env]
    MSWEA_COST_TRACKING = "ignore_errors"
    [agent.files]
    ".config/mini-swe-agent/.env" = "MSWEA_CONFIGURED=true\\n"

Everything in the table — the version, the install, the command line, the
environment and the content of every config file — is part of the harness's
hash, so a changed config is a different harness.

Placeholders in ``command``, ``env`` and ``files``: ``{instruction}`` (the
task), ``{model}`` (the model name the CLI is given), ``{base_url}`` (the
gateway as the CLI sees it, ending in ``/v1``), ``{origin}`` (the same without
the path, for SDKs that add their API's version path themselves: Anthropic's,
Google's), ``{api_key}`` (the episode's token), ``{tool}``
(where the installed program is mounted), ``{workdir}`` (the task directory)
``{home}`` (the CLI's own writable home), ``{turns}`` (the harness's turn budget,
for a CLI's own step limit; the gateway enforces it in any case, refusing the
model call past it) and ``{files}`` (alone in a command-line element: one
element per file of the task, for a CLI that is told which files to edit).
"""

from __future__ import annotations

import re
import string
from typing import Any

from tackroom.core.errors import HarnessError
from tackroom.core.registry import names

#: Defaults of the ``[agent]`` slot.
AGENT_DEFAULTS: dict[str, Any] = {
    "cli": "",
    "version": "",
    "install": {},
    "command": [],
    "env": {},
    "files": {},
    "model": "tackroom",
    "expert": "",
    "expert_submit": "",
    "expert_fence": "bash",
    "memory_mb": 4096,
    "processes": 256,
    "can": [],  # what the CLI can do to a task (default: CAPABILITIES; OPT_IN if named)
}
#: Keys with no default, in the slot (and its hash) only when given: ``side_calls``, the
#: harness's hints for telling a CLI's side calls (tackroom.gateway.calls.read_rules: a
#: list of tables ``{label, system?, user?, model?}``, checked when an episode starts).
OPTIONAL_AGENT_KEYS = frozenset({"side_calls"})
#: What an agent CLI in a sandbox can do to a task: run commands and change files (no
#: browser: a web task cannot be expressed by one).
CAPABILITIES = frozenset({"shell", "submit", "edit", "write_file", "edit_lines", "view_file"})
#: What a CLI can do only where the environment forwards an interface into its sandbox (the
#: robot suite's command API): never by default, a harness names it in ``can``.
OPT_IN = frozenset({"robot"})
#: Placeholders the command line, the environment and config files may use.
PLACEHOLDERS = ("instruction", "model", "base_url", "origin", "api_key", "tool", "workdir",
                "home", "turns", "files")
#: ``{files}``, alone in a command-line element, becomes one element per file of the task
#: (what a CLI like Aider is told to work on); elsewhere it is not allowed.
FILES = "{files}"
_INSTALLERS = ("pip", "npm")
_PACKAGE = re.compile(r"^[A-Za-z0-9@/._\-\[\],]+(==|@)[A-Za-z0-9._\-+]+$")


def check_agent(raw: Any, where: str) -> dict[str, Any]:
    """The validated ``[agent]`` slot with its defaults, or a :class:`HarnessError`."""
    w = f"{where} [agent]"
    if not isinstance(raw, dict):
        raise HarnessError("[agent] must be a table", w)
    bad = set(raw) - set(AGENT_DEFAULTS) - OPTIONAL_AGENT_KEYS
    if bad:
        raise HarnessError(f"unknown key(s) {sorted(bad)} in [agent]", w,
                           f"allowed: {', '.join(sorted({*AGENT_DEFAULTS, *OPTIONAL_AGENT_KEYS}))}")
    a = {**AGENT_DEFAULTS, **raw}
    hints = a.get("side_calls")
    if hints is not None and not (isinstance(hints, list) and all(
            isinstance(h, dict) and all(isinstance(v, str) for v in h.values()) for h in hints)):
        raise HarnessError("side_calls must be an array of tables of strings",
                           f"{w}.side_calls",
                           'e.g. side_calls = [{ label = "title", system = "title generator" }]')
    for key in ("expert_submit", "expert_fence"):
        if not isinstance(a[key], str):
            raise HarnessError(f"{key} must be a string", f"{w}.{key}",
                               "the command the CLI's expert runs to say it is done, and the "
                               "fence of its bash blocks")
    for key in ("cli", "version", "model"):
        if not isinstance(a[key], str) or not a[key].strip():
            raise HarnessError(f"{key} must be a non-empty string", f"{w}.{key}",
                               'e.g. cli = "aider", version = "0.86.1"')
    install = dict(a["install"]) if isinstance(a["install"], dict) else None
    python = install.pop("python", None) if install is not None else None
    if install is None or len(install) != 1 or next(iter(install)) not in _INSTALLERS:
        raise HarnessError("install must name one installer and its pinned packages",
                           f"{w}.install",
                           'e.g. install = { pip = ["aider-chat==0.86.1"] } or '
                           '{ npm = ["@qwen-code/qwen-code@0.24.4"] }')
    (installer, packages), = install.items()
    if python is not None and (installer != "pip" or not isinstance(python, str)
                               or not re.fullmatch(r"3\.\d+", python)):
        raise HarnessError(f"python = {python!r}: a pip install may name the Python it needs",
                           f"{w}.install.python", 'e.g. python = "3.12"')
    if isinstance(packages, str):
        packages = [packages]
    if not isinstance(packages, list) or not packages or not all(
            isinstance(p, str) and _PACKAGE.match(p) for p in packages):
        raise HarnessError(f"{installer} packages must be pinned (name==version for pip, "
                           "name@version for npm)", f"{w}.install.{installer}",
                           "pin every package: the version is part of the harness")
    a["install"] = {installer: list(packages), **({"python": python} if python else {})}
    command = a["command"]
    if not isinstance(command, list) or not command or not all(
            isinstance(c, str) for c in command):
        raise HarnessError("command must be a non-empty array of strings", f"{w}.command",
                           'e.g. command = ["{tool}/bin/mini", "--task", "{instruction}"]')
    for i, part in enumerate(command):
        if part != FILES:
            _check_template(part, f"{w}.command[{i}]", files=False)
    for key in ("env", "files"):
        table = a[key]
        if not isinstance(table, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in table.items()):
            raise HarnessError(f"[agent.{key}] must map strings to strings", f"{w}.{key}")
        for k, v in table.items():
            _check_template(v, f"{w}.{key}.{k}", files=False)
    for name in a["env"]:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise HarnessError(f"{name!r} is not an environment variable name", f"{w}.env")
    for path in a["files"]:
        parts = path.split("/")
        if not path or path.startswith("/") or ".." in parts or "" in parts:
            raise HarnessError(f"config file path {path!r} must be relative to the CLI's home",
                               f"{w}.files", 'e.g. ".qwen/settings.json"')
    # How the scripted expert answers: a registered agent expert (tackroom.agents.experts).
    if a["expert"] and a["expert"] not in (formats := names("agent_expert")):
        raise HarnessError(f"unknown expert format {a['expert']!r}", f"{w}.expert",
                           f"allowed: {', '.join(formats)}")
    can = a["can"]
    if not isinstance(can, list) or not all(isinstance(c, str) for c in can) or \
            not set(can) <= CAPABILITIES | OPT_IN:
        raise HarnessError(f"can = {can!r} names what an agent CLI cannot do", f"{w}.can",
                           f"allowed: {', '.join(sorted(CAPABILITIES | OPT_IN))}")
    a["can"] = sorted(set(can)) or sorted(CAPABILITIES)
    for key, lo, hi in (("memory_mb", 256, 65536), ("processes", 16, 4096)):
        v = a[key]
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise HarnessError(f"{key} = {v!r} is out of range", f"{w}.{key}",
                               f"allowed: an integer from {lo} to {hi}")
    return a


def _check_template(value: str, where: str, *, files: bool) -> None:
    names = ", ".join("{" + p + "}" for p in PLACEHOLDERS if files or p != "files")
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(value) if f is not None]
    except ValueError as e:
        raise HarnessError(f"bad template: {e}", where,
                           "write literal braces as {{ and }}") from None
    for f in fields:
        if f == "files" and not files:
            raise HarnessError("{files} must be a command-line element of its own", where,
                               'e.g. command = ["aider", "--message", "{instruction}", '
                               '"{files}"]')
        if f not in PLACEHOLDERS:
            raise HarnessError(f"unknown placeholder {{{f}}}", where,
                               f"allowed: {names}; write literal braces as {{{{ and }}}}")


def fill(template: str, values: dict[str, str]) -> str:
    """``template`` with its placeholders filled (checked by :func:`check_agent`)."""
    return template.format(**values)


def fill_command(command: list[str], values: dict[str, str], files: list[str]) -> list[str]:
    """The command line: each element filled, ``{files}`` expanded to ``files``."""
    out: list[str] = []
    for part in command:
        out.extend(files if part == FILES else [fill(part, values)])
    return out
