"""Coding-agent harness parts: a repository renderer, four action interfaces, three parsers.

The four families of shipped coding harnesses are built from these parts:

| family        | interface     | parser        | in the style of                        |
|---------------|---------------|---------------|----------------------------------------|
| `edit-blocks` | `edit_blocks` | `edit_blocks` | Aider's SEARCH/REPLACE edit blocks     |
| `aci-viewer`  | `aci`         | `aci_commands`| SWE-agent's windowed viewer + lint     |
| `codeact`     | `codeact`     | `code_blocks` | OpenHands CodeAct (```bash / ```python)|
| `json-tools`  | `code_tools`  | `tool_calls`  | Qwen Code's JSON function tools        |

As everywhere in tackroom, an interface is the vocabulary (what can be done)
and a parser the format (how it is written); experts go through both, so
each interface says how to ``express`` the code suite's abstract actions
(``Edit``, ``Shell``, ``Submit``) in its own vocabulary, using the
observation (current files, the viewer's open file) where the vocabulary
needs it — line numbers, an open file.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from tackroom.core.actions import (
    Action,
    Edit,
    EditLines,
    Shell,
    Submit,
    ViewFile,
    WriteFile,
)
from tackroom.core.observation import Observation
from tackroom.core.policy import PolicyResponse
from tackroom.core.registry import register
from tackroom.harness.interfaces import ActionInterface, ActionSpec, Call, Param
from tackroom.harness.parsers import OutputParser, ParseError

REPO = "/task"
_PATH = Param("path", "string", "file path relative to the repository root, e.g. pkg/module.py")

# -- shared helpers ----------------------------------------------------------------------

_FENCE_OPEN = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+#.-]*)")


def fenced_blocks(text: str) -> tuple[list[tuple[str, str]], str]:
    """``([(language, body), ...], text outside the blocks)`` of a Markdown reply.

    A block opens with a line of three or more backticks (or tildes) and an
    optional language, and closes with a line of only that character, at
    least as long; an unclosed last block runs to the end (models often stop
    before the closing fence).
    """
    lines = text.split("\n")
    blocks: list[tuple[str, str]] = []
    outside: list[str] = []
    i = 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        if not m:
            outside.append(lines[i])
            i += 1
            continue
        fence = m.group(1)
        j = i + 1
        while j < len(lines):
            s = lines[j].strip()
            if len(s) >= len(fence) and set(s) == {fence[0]}:
                break
            j += 1
        blocks.append((m.group(2).lower(), "\n".join(lines[i + 1:j])))
        i = j + 1
    return blocks, "\n".join(outside)


def repo_path(path: str) -> str:
    """``/task/pkg/a.py`` -> ``pkg/a.py``; relative paths as they are."""
    p = path.strip()
    return p[len(REPO):].lstrip("/") if p.startswith(REPO + "/") else p


def line_span(content: str, old: str, new: str) -> tuple[int, int, str, str] | None:
    """The whole lines an ``old -> new`` replacement touches, as ``(start, end, old, new)``.

    ``start``/``end`` are 1-based and inclusive; the texts are whole lines.
    ``None`` unless ``old`` occurs exactly once.
    """
    if not old or content.count(old) != 1:
        return None
    i = content.index(old)
    j = i + len(old)
    first = content.rfind("\n", 0, i) + 1
    if content[j - 1] == "\n":
        last = j
    else:
        nl = content.find("\n", j)
        last = len(content) if nl < 0 else nl + 1
    block = content[first:last]
    start = content.count("\n", 0, first) + 1
    end = start + len(block.splitlines()) - 1
    return start, end, block, content[first:i] + new + content[j:last]


def _files(obs: Observation) -> dict[str, str]:
    files = obs.extra.get("files")
    return files if isinstance(files, dict) else {}


# -- the renderer --------------------------------------------------------------------------

@register("renderer", "code")
def render_code(obs: Observation, options: dict[str, Any]) -> str:
    """The last action's result, then the repository as ``files`` says.

    Options: ``files`` = ``"none"`` (default), ``"tree"`` (the file list) or
    ``"contents"`` (every file in full, as Aider puts files in the chat);
    ``status = true`` adds SWE-agent's ``(Open file: …) (Current directory: …)``.
    """
    parts = [obs.text.rstrip()] if obs.text else []
    files = _files(obs)
    mode = options.get("files", "none")
    if mode == "tree" and files:
        parts.append(f"Files in {REPO}:\n" + "\n".join(sorted(files)))
    elif mode == "contents" and files:
        shown = []
        for path in sorted(files):
            text = files[path]
            fence = "`" * max(3, 1 + max((len(r) for r in re.findall(r"`+", text)), default=0))
            lang = "python" if path.endswith(".py") else ""
            body = text if text.endswith("\n") or not text else text + "\n"
            shown.append(f"{path}\n{fence}{lang}\n{body}{fence}")
        parts.append(f"Files in {REPO}:\n\n" + "\n\n".join(shown))
    if options.get("status"):
        viewer = obs.extra.get("viewer")
        open_file = f"{REPO}/{viewer['path']}" if isinstance(viewer, dict) else "n/a"
        parts.append(f"(Open file: {open_file}) (Current directory: {REPO})")
    text = "\n\n".join(parts)
    limit = int(options.get("max_chars", 0) or 0)
    if limit and len(text) > limit:
        text = text[:limit] + f"\n… (truncated, {len(text) - limit} more characters)"
    return text


# -- interfaces ----------------------------------------------------------------------------

class EditBlockInterface(ActionInterface):
    """Search/replace edits and ``submit``: nothing runs, every change is an edit block."""

    name = "edit_blocks"
    supports = frozenset({"edit", "submit"})
    specs = (
        ActionSpec("edit", "Replace the exact text old (whole lines) by new in the file.",
                   (_PATH, Param("old", "string", "the exact lines to find (empty: new file)"),
                    Param("new", "string", "the lines to put in their place"))),
        ActionSpec("submit", "Finish: your changes are tested."),
    )

    def to_actions(self, call: Call) -> list[Action]:
        a = self.validate(call)
        if call.name == "edit":
            return [Edit(a["path"], a["old"], a["new"])]
        return [Submit()]

    def express(self, action: Action, obs: Observation) -> list[Call] | None:
        if isinstance(action, Submit):
            return [Call("submit")]
        if not isinstance(action, Edit):
            return None
        path = repo_path(action.path)
        content = _files(obs).get(path, "")
        old, new = action.old, action.new
        whole_lines = (old.endswith("\n") and (not new or new.endswith("\n"))
                       and (content.startswith(old) or "\n" + old in content))
        if not old or whole_lines:
            return [Call("edit", {"path": path, "old": old, "new": new})]
        # The format is line-based: widen a part-of-a-line edit to the lines it touches.
        span = line_span(content, old, new)
        if span is None:
            return None
        return [Call("edit", {"path": path, "old": span[2], "new": span[3]})]


register("interface")(EditBlockInterface())


class ACIInterface(ActionInterface):
    """A windowed file viewer with line-range edits, and bash for the rest (SWE-agent's ACI).

    ``window`` lines are shown at a time; with ``lint``, an edit that would
    leave a Python file unable to compile is refused and the error shown.
    """

    supports = frozenset({"edit", "shell", "submit"})
    _LINE = Param("line", "integer", "a line number (0: the top of the file)")
    specs = (
        ActionSpec("open", "Open a file in the viewer, around a line.", (_PATH, _LINE)),
        ActionSpec("goto", "Move the viewer to a line of the open file.", (_LINE,)),
        ActionSpec("scroll_down", "Show the next window of the open file."),
        ActionSpec("scroll_up", "Show the previous window of the open file."),
        ActionSpec("edit", "Replace lines start..end (inclusive) of the open file by text.",
                   (Param("start", "integer", "first line to replace"),
                    Param("end", "integer", "last line to replace (start - 1: insert)"),
                    Param("text", "string", "the new lines"))),
        ActionSpec("create", "Create a new empty file and open it.", (_PATH,)),
        ActionSpec("bash", "Run a shell command in the repository.",
                   (Param("command", "string", "the command"),)),
        ActionSpec("submit", "Finish: your changes are tested."),
    )

    def __init__(self, name: str, window: int = 100, lint: bool = True) -> None:
        self.name = name
        self.window = window
        self.lint = lint

    def to_actions(self, call: Call) -> list[Action]:
        a = self.validate(call)
        w = self.window
        match call.name:
            case "open":
                return [ViewFile(a["path"], a["line"], w)]
            case "goto":
                return [ViewFile("", a["line"], w)]
            case "scroll_down" | "scroll_up":
                return [ViewFile("", 0, w, 1 if call.name == "scroll_down" else -1)]
            case "edit":
                return [EditLines("", a["start"], a["end"], a["text"], self.lint)]
            case "create":
                return [Edit(a["path"], "", ""), ViewFile(a["path"], 0, w)]
            case "bash":
                return [Shell(a["command"])]
        return [Submit()]

    def express(self, action: Action, obs: Observation) -> list[Call] | None:
        if isinstance(action, Submit):
            return [Call("submit")]
        if isinstance(action, Shell):
            return [Call("bash", {"command": action.cmd})]
        if not isinstance(action, Edit):
            return None
        path = repo_path(action.path)
        files = _files(obs)
        if path not in files:
            return [Call("create", {"path": path})] if not action.old else None
        viewer = obs.extra.get("viewer")
        content = files[path]
        if action.old == "" and content == "":
            start, end, new = 1, 0, action.new
        else:
            span = line_span(content, action.old, action.new)
            if span is None:
                return None
            start, end, _, new = span
        if not isinstance(viewer, dict) or viewer.get("path") != path:
            return [Call("open", {"path": path, "line": start})]  # the edit follows next turn
        return [Call("edit", {"start": start, "end": end, "text": new})]


register("interface")(ACIInterface("aci", window=100, lint=True))
register("interface")(ACIInterface("aci_nolint", window=100, lint=False))


class CodeActInterface(ActionInterface):
    """Code as the action: bash commands and Python programs run in the sandbox (CodeAct)."""

    name = "codeact"
    supports = frozenset({"edit", "shell", "submit"})
    specs = (
        ActionSpec("bash", "Run bash commands in the repository.",
                   (Param("command", "string", "the commands"),)),
        ActionSpec("python", "Run a Python program (a fresh python3 process) in the repository.",
                   (Param("code", "string", "the program"),)),
        ActionSpec("finish", "Finish: your changes are tested."),
    )

    def to_actions(self, call: Call) -> list[Action]:
        a = self.validate(call)
        if call.name == "bash":
            return [Shell(a["command"])]
        if call.name == "python":
            return [Shell("python3 -c " + shlex.quote(a["code"]))]
        return [Submit()]

    def express(self, action: Action, obs: Observation) -> list[Call] | None:
        if isinstance(action, Submit):
            return [Call("finish")]
        if isinstance(action, Shell):
            return [Call("bash", {"command": action.cmd})]
        if isinstance(action, Edit):
            code = (
                "from pathlib import Path\n\n"
                f"path = Path({repo_path(action.path)!r})\n"
                f"old = {action.old!r}\n"
                f"new = {action.new!r}\n"
                "text = path.read_text() if path.exists() else ''\n"
                "assert old == '' or text.count(old) == 1, 'the text to replace must occur once'\n"
                "path.parent.mkdir(parents=True, exist_ok=True)\n"
                "path.write_text(text.replace(old, new) if old else new)\n"
                "print('edited', path)"
            )
            return [Call("python", {"code": code})]
        if isinstance(action, WriteFile):
            code = (f"from pathlib import Path\n\nPath({repo_path(action.path)!r})"
                    f".write_text({action.content!r})")
            return [Call("python", {"code": code})]
        return None


register("interface")(CodeActInterface())


class CodeToolsInterface(ActionInterface):
    """File and shell tools, as JSON function calls (Qwen Code's read/write/replace/shell)."""

    name = "code_tools"
    supports = frozenset({"edit", "shell", "submit"})
    specs = (
        ActionSpec("read_file", "Read a file of the repository; returns its full text.",
                   (_PATH,)),
        ActionSpec("write_file", "Create or overwrite a file with the given content.",
                   (_PATH, Param("content", "string", "the complete new file content"))),
        ActionSpec("replace", "Replace old_string, which must occur exactly once in the file, "
                   "by new_string. Copy old_string exactly, indentation included.",
                   (_PATH, Param("old_string", "string", "the exact text to replace"),
                    Param("new_string", "string", "the text to put in its place"))),
        ActionSpec("run_shell", "Run a bash command in the repository root; returns its output.",
                   (Param("command", "string", "the command"),)),
        ActionSpec("submit", "Finish when the issue is resolved: your changes are tested."),
    )

    def to_actions(self, call: Call) -> list[Action]:
        a = self.validate(call)
        match call.name:
            case "read_file":
                return [ViewFile(a["path"])]
            case "write_file":
                return [WriteFile(a["path"], a["content"])]
            case "replace":
                return [Edit(a["path"], a["old_string"], a["new_string"])]
            case "run_shell":
                return [Shell(a["command"])]
        return [Submit()]

    def express(self, action: Action, obs: Observation) -> list[Call] | None:
        if isinstance(action, Submit):
            return [Call("submit")]
        if isinstance(action, Shell):
            return [Call("run_shell", {"command": action.cmd})]
        if isinstance(action, Edit):
            return [Call("replace", {"path": repo_path(action.path), "old_string": action.old,
                                     "new_string": action.new})]
        if isinstance(action, WriteFile):
            return [Call("write_file", {"path": repo_path(action.path),
                                        "content": action.content})]
        if isinstance(action, ViewFile) and action.window == 0 and action.path:
            return [Call("read_file", {"path": repo_path(action.path)})]
        return None


register("interface")(CodeToolsInterface())


# -- parsers -------------------------------------------------------------------------------

_HEAD = re.compile(r"^\s*<{5,9} ?SEARCH\s*$")
_DIVIDER = re.compile(r"^\s*={5,9}\s*$")
_TAIL = re.compile(r"^\s*>{5,9} ?REPLACE\s*$")
_EXAMPLE_BLOCK = ("pkg/module.py\n```python\n<<<<<<< SEARCH\n    return a - b\n=======\n"
                  "    return a + b\n>>>>>>> REPLACE\n```")


def _as_lines(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"


class EditBlockParser(OutputParser):
    """Aider-style SEARCH/REPLACE blocks, each after a line with the file path; ``DONE`` submits."""

    name = "edit_blocks"

    def describe(self, interface: ActionInterface) -> str:
        return (
            "Change files with SEARCH/REPLACE blocks. Each block is the file path alone on a "
            "line, then a fenced block holding the exact lines to find and the lines to put in "
            f"their place:\n\n{_EXAMPLE_BLOCK}\n\n"
            "Rules: the SEARCH part must match the file exactly once, character for character, "
            "indentation included; keep blocks small (the lines that change, plus a few around "
            "them to make the match unique). Give several blocks for several changes. To create "
            "a file, give its new path and an empty SEARCH part. When the issue is resolved, "
            "write DONE on a line of its own (after your last blocks, or alone)."
        )

    def parse(self, response: PolicyResponse, interface: ActionInterface) -> list[Call]:
        lines = (response.text or "").split("\n")
        calls: list[Call] = []
        last_path: str | None = None
        done = False
        i = 0
        while i < len(lines):
            if _HEAD.match(lines[i]):
                path = self._path_before(lines, i, last_path)
                search, j = self._section(lines, i + 1, _DIVIDER, path, "=======")
                replace, k = self._section(lines, j + 1, _TAIL, path, ">>>>>>> REPLACE")
                calls.append(Call("edit", {"path": path, "old": "".join(s + "\n" for s in search),
                                           "new": "".join(r + "\n" for r in replace)}))
                last_path = path
                i = k + 1
                continue
            if _TAIL.match(lines[i]):
                raise ParseError("found a >>>>>>> REPLACE line without a <<<<<<< SEARCH line "
                                 "before it; write each block as:\n" + _EXAMPLE_BLOCK)
            if lines[i].strip() in ("DONE", "DONE."):
                done = True
            i += 1
        if done:
            calls.append(Call("submit"))
        if not calls:
            raise ParseError("no SEARCH/REPLACE block and no DONE found; change files with "
                             "blocks like:\n" + _EXAMPLE_BLOCK + "\nor write DONE when finished")
        return calls

    @staticmethod
    def _section(lines: list[str], start: int, end_marker: re.Pattern[str], path: str,
                 expected: str) -> tuple[list[str], int]:
        """Lines from ``start`` up to the ``end_marker`` line, and that line's index."""
        out: list[str] = []
        for j in range(start, len(lines)):
            if end_marker.match(lines[j]):
                return out, j
            if _HEAD.match(lines[j]) or _TAIL.match(lines[j]) or (
                    end_marker is _TAIL and _DIVIDER.match(lines[j])):
                break
            out.append(lines[j])
        raise ParseError(f"the SEARCH/REPLACE block for {path} lacks its {expected} line; "
                         "write each block as:\n" + _EXAMPLE_BLOCK)

    @staticmethod
    def _path_before(lines: list[str], i: int, last_path: str | None) -> str:
        """The file path written on the nearest line before the block (fences skipped)."""
        j = i - 1
        while j >= 0 and (not lines[j].strip() or _FENCE_OPEN.match(lines[j])):
            j -= 1
        if j < 0 or _TAIL.match(lines[j]):
            if last_path:
                return last_path  # a block right after another: the same file
            raise ParseError("a SEARCH/REPLACE block has no file path; put the path alone on "
                             "the line before the block:\n" + _EXAMPLE_BLOCK)
        cand = lines[j].strip().strip("`*").strip().rstrip(":").strip()
        if not cand or any(c.isspace() for c in cand):
            raise ParseError(f"the line before <<<<<<< SEARCH must be the file path alone (e.g. "
                             f"pkg/module.py), not {cand[:80]!r}")
        return cand

    def encode(self, calls: list[Call], interface: ActionInterface) -> PolicyResponse:
        parts = []
        done = False
        for c in calls:
            if c.name == "submit":
                done = True
                continue
            path = c.args["path"]
            lang = "python" if path.endswith(".py") else ""
            parts.append(f"{path}\n```{lang}\n<<<<<<< SEARCH\n{_as_lines(c.args['old'])}"
                         f"=======\n{_as_lines(c.args['new'])}>>>>>>> REPLACE\n```")
        if done:
            parts.append("DONE")
        return PolicyResponse(text="\n\n".join(parts))


register("parser")(EditBlockParser())


_ACI_SIMPLE = {"goto": ("line",), "scroll_down": (), "scroll_up": (), "create": ("path",),
               "submit": ()}
_EDIT_LINE = re.compile(r"^edit\s+([0-9]+)\s*:\s*([0-9]+)\s*$")
_NUMBER = re.compile(r"[0-9]+")


class ACIParser(OutputParser):
    """One command per reply in a ``` block, SWE-agent style; ``edit`` ends at ``end_of_edit``."""

    name = "aci_commands"

    def describe(self, interface: ActionInterface) -> str:
        window = getattr(interface, "window", 100)
        lint = getattr(interface, "lint", False)
        guard = (" An edit that would leave a Python file with a syntax error is not applied; "
                 "you are shown the error and the file as it would have been." if lint else "")
        return (
            "Think first, then give exactly one command in a ``` block at the end of your "
            "reply. Commands:\n"
            f"  open <path> [<line>]   open a file in the viewer ({window} lines at a time), "
            "around <line>\n"
            "  goto <line>            move the viewer to <line> of the open file\n"
            "  scroll_down            show the next lines of the open file\n"
            "  scroll_up              show the previous lines\n"
            "  edit <start>:<end>     replace lines <start> to <end> (inclusive) of the open "
            "file by the lines that follow, up to a line end_of_edit\n"
            "  create <path>          create a new empty file and open it\n"
            "  submit                 finish: your changes are tested\n"
            "Anything else is run as a bash command in /task (ls, grep -n, python3 -c …). "
            "Example:\n```\nedit 12:13\n    if total is None:\n        return 0\nend_of_edit\n```\n"
            "The replacement lines must carry their full indentation." + guard
        )

    def parse(self, response: PolicyResponse, interface: ActionInterface) -> list[Call]:
        blocks, _ = fenced_blocks(response.text or "")
        if not blocks:
            raise ParseError("no command found; end your reply with exactly one command in a "
                             "``` block, e.g.\n```\nopen pkg/module.py\n```")
        lines = blocks[-1][1].split("\n")
        while lines and not lines[0].strip():
            lines.pop(0)
        while lines and not lines[-1].strip():
            lines.pop()
        if not lines:
            raise ParseError("the ``` block is empty; put one command in it")
        first = lines[0].strip()
        verb = first.split()[0]
        if verb == "edit":
            return [self._edit(first, lines)]
        if verb in _ACI_SIMPLE or verb == "open":
            if len(lines) > 1:
                raise ParseError(f"give one command per reply; {verb} takes a single line")
            return [self._simple(verb, first)]
        return [Call("bash", {"command": "\n".join(lines)})]

    @staticmethod
    def _edit(first: str, lines: list[str]) -> Call:
        m = _EDIT_LINE.match(first)
        if not m:
            raise ParseError("edit needs a line range: edit <start>:<end>, then the new lines, "
                             "then a line end_of_edit")
        try:
            stop = next(k for k in range(1, len(lines)) if lines[k].strip() == "end_of_edit")
        except StopIteration:
            raise ParseError("the edit is not closed: end the new lines with a line "
                             "end_of_edit") from None
        if any(ln.strip() for ln in lines[stop + 1:]):
            raise ParseError("give one command per reply; there is more after end_of_edit")
        text = "".join(ln + "\n" for ln in lines[1:stop])
        return Call("edit", {"start": int(m.group(1)), "end": int(m.group(2)), "text": text})

    @staticmethod
    def _simple(verb: str, line: str) -> Call:
        try:
            words = shlex.split(line)
        except ValueError as e:
            raise ParseError(f"cannot read the command {line[:80]!r}: {e}") from None
        args = words[1:]
        if verb == "open":
            if len(args) not in (1, 2) or (len(args) == 2 and not _NUMBER.fullmatch(args[1])):
                raise ParseError("usage: open <path> [<line>]")
            return Call("open", {"path": args[0], "line": int(args[1]) if len(args) == 2 else 0})
        names = _ACI_SIMPLE[verb]
        if len(args) != len(names) or (names == ("line",) and not _NUMBER.fullmatch(args[0])):
            usage = " ".join(f"<{n}>" for n in names)
            raise ParseError(f"usage: {verb} {usage}".rstrip())
        if names == ("line",):
            return Call(verb, {"line": int(args[0])})
        return Call(verb, dict(zip(names, args, strict=True)))

    def encode(self, calls: list[Call], interface: ActionInterface) -> PolicyResponse:
        c = calls[0]  # one command per reply
        a = c.args
        match c.name:
            case "open":
                cmd = f"open {shlex.quote(a['path'])}" + (f" {a['line']}" if a["line"] else "")
            case "goto":
                cmd = f"goto {a['line']}"
            case "edit":
                cmd = f"edit {a['start']}:{a['end']}\n{_as_lines(a['text'])}end_of_edit"
            case "create":
                cmd = f"create {shlex.quote(a['path'])}"
            case "bash":
                cmd = a["command"]
            case _:
                cmd = c.name
        return PolicyResponse(text=f"```\n{cmd}\n```")


register("parser")(ACIParser())


_BASH = {"bash", "sh", "shell", "console", "zsh"}
_PYTHON = {"python", "py", "python3"}
_FINISH = re.compile(r"<finish\s*/?>", re.IGNORECASE)


class CodeBlockParser(OutputParser):
    """```bash and ```python blocks, run in order (CodeAct); ``<finish></finish>`` submits."""

    name = "code_blocks"

    def describe(self, interface: ActionInterface) -> str:
        return (
            "Act by writing code in fenced blocks; each block runs in the sandbox (working "
            "directory /task) and you see its output. Tag every block:\n"
            "```bash\ngrep -n \"def \" pkg/module.py\n```\n"
            "```python\nfrom pathlib import Path\np = Path(\"pkg/module.py\")\n"
            "p.write_text(p.read_text().replace(\"a - b\", \"a + b\"))\n```\n"
            "Each Python block runs in a fresh python3 process; edit files with Python or with "
            "shell tools. When the issue is resolved, write <finish></finish> outside any "
            "block."
        )

    def parse(self, response: PolicyResponse, interface: ActionInterface) -> list[Call]:
        blocks, outside = fenced_blocks(response.text or "")
        calls = []
        for lang, body in blocks:
            if lang in _BASH:
                name, key = "bash", "command"
            elif lang in _PYTHON:
                name, key = "python", "code"
            else:
                raise ParseError(f"a code block tagged {lang or 'with no language'!r}: tag each "
                                 "block ```bash or ```python")
            if not body.strip():
                raise ParseError(f"the ```{lang} block is empty")
            calls.append(Call(name, {key: body}))
        if _FINISH.search(outside):
            calls.append(Call("finish"))
        if not calls:
            raise ParseError("no code block found; write a ```bash or ```python block, or "
                             "<finish></finish> when the issue is resolved")
        return calls

    def encode(self, calls: list[Call], interface: ActionInterface) -> PolicyResponse:
        parts = []
        for c in calls:
            if c.name == "bash":
                parts.append(f"```bash\n{c.args['command']}\n```")
            elif c.name == "python":
                parts.append(f"```python\n{c.args['code']}\n```")
            else:
                parts.append("<finish></finish>")
        return PolicyResponse(text="\n\n".join(parts))


register("parser")(CodeBlockParser())


__all__ = ["ACIInterface", "ACIParser", "CodeActInterface", "CodeBlockParser",
           "CodeToolsInterface", "EditBlockInterface", "EditBlockParser", "fenced_blocks",
           "line_span", "render_code", "repo_path"]
