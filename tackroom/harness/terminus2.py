"""Terminus-2, Terminal-Bench's reference agent, as a harness: its prompt, its JSON, its loop.

Reproduced from the published ``terminal-bench`` package (version :data:`REFERENCE`,
``terminal_bench/agents/terminus_2``), written here in tackroom's own terms:

* the prompt template is shipped unchanged as package data
  (``templates/terminus-2/terminus-json-plain.txt``; ``tests/test_terminus2.py``
  compares it byte for byte with the wheel's);
* :func:`read_reply` accepts and refuses what terminus-2's JSON parser does, with
  the same errors, warnings and auto-corrections (the same test runs theirs on a
  table of replies and compares);
* :class:`Terminus2Session` holds the conversation as terminus-2 does: no system
  message, the template with the task and the terminal as the first user turn, then
  only the new terminal output (cut to 10 000 bytes as theirs is), the warnings or
  parse errors in their words, and ``task_complete`` confirmed twice in a row before
  the task's tests run.

Parts registered here: the parser ``terminus_json`` (whose ``conversation`` is
:class:`Terminus2Session`) and the interface ``terminus_keys`` (keystrokes with a
``duration``, and ``task_complete``), on the live shell ``terminal_keys`` types into.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tackroom.core.actions import Action, Press, Shell, Submit
from tackroom.core.observation import Observation
from tackroom.core.policy import PolicyResponse
from tackroom.core.registry import get, register
from tackroom.harness.content import parts_of
from tackroom.harness.interfaces import ActionInterface, ActionSpec, Call, CallError, Param
from tackroom.harness.parsers import OutputParser, ParseError
from tackroom.harness.session import HarnessSession, Parsed
from tackroom.harness.shell import KEY_NAMES, TypeKeys, _text_ok
from tackroom.harness.spec import HarnessSpec

#: The published package the templates and the parser reproduce.
REFERENCE = "terminal-bench==0.2.18"
#: Where the prompt templates are shipped (package data, compared with the wheel's files).
TEMPLATES = Path(__file__).parent / "templates" / "terminus-2"
#: The prompt template of terminus-2's JSON format: ``{instruction}``, ``{terminal_state}``.
JSON_TEMPLATE = "terminus-json-plain.txt"
#: The longest wait a command may ask for (terminus-2 caps ``duration`` at 60 s).
MAX_DURATION = 60.0
#: Terminal output shown per turn, in UTF-8 bytes (terminus-2's ``_limit_output_length``).
OUTPUT_LIMIT = 10_000
_FIELDS = ("analysis", "plan", "commands")
#: The fixes tried, in order, on a reply that does not parse, with the names the model is told.
_FIX_BRACES = "Fixed incomplete JSON by adding missing closing brace"
_FIX_EXTRACT = "Extracted JSON from mixed content"
#: An object with at most one level of nested objects (the "mixed content" fix).
_FLAT_OBJECT = re.compile(r"\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}", re.DOTALL)
#: What terminus-2 answers a reply cut at the output limit (its 4096 is fixed text).
OUTPUT_CUT = ("ERROR!! NONE of the actions you just requested were performed because you "
              "exceeded the maximum output length of 4096 tokens. Your outputs must be less "
              "than 4096 tokens. Re-issue this request, breaking it into chunks each of which "
              "is less than 4096 tokens.")


def template(name: str = JSON_TEMPLATE) -> str:
    """A shipped prompt template, exactly as published."""
    return (TEMPLATES / name).read_text(encoding="utf-8")


# -- the reply format ------------------------------------------------------------------------
@dataclass
class TerminusReply:
    """One reply as terminus-2 reads it: commands ``(keystrokes, duration)``, whether the
    task is complete, and the error (``""`` when it parsed) and warnings it is answered with."""

    commands: list[tuple[str, float]] = field(default_factory=list)
    complete: bool = False
    error: str = ""
    warning: str = ""


def _bullets(warnings: list[str]) -> str:
    return "- " + "\n- ".join(warnings) if warnings else ""


def _json_span(text: str) -> tuple[str, list[str]]:
    """The first balanced ``{…}`` of ``text`` and warnings about text around it.

    The scan is terminus-2's: a backslash skips the next character even outside strings,
    and a quote toggles "inside a string" wherever it is.
    """
    start = end = -1
    depth = 0
    in_string = skip = False
    for i, ch in enumerate(text):
        if skip:
            skip = False
        elif ch == "\\":
            skip = True
        elif ch == '"':
            in_string = not in_string
        elif not in_string and ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif not in_string and ch == "}":
            depth -= 1
            if depth == 0 and start != -1:
                end = i + 1
                break
    if start == -1 or end == -1:
        return "", ["No valid JSON object found"]
    warnings = []
    if text[:start].strip():
        warnings.append("Extra text detected before JSON object")
    if text[end:].strip():
        warnings.append("Extra text detected after JSON object")
    return text[start:end], warnings


def _order_warning(content: str) -> str | None:
    """A warning when analysis, plan and commands are written out of that order."""
    found = {}
    for name in _FIELDS:
        m = re.search(f'"{name}"\\s*:', content)
        if m:
            found[name] = m.start()
    if len(found) < 2:
        return None
    expected = [n for n in _FIELDS if n in found]
    actual = sorted(expected, key=found.__getitem__)
    if actual == expected:
        return None
    return (f"Fields appear in wrong order. Found: {' → '.join(actual)}, "
            f"expected: {' → '.join(expected)}")


def _commands(items: list[Any], warnings: list[str]) -> tuple[list[tuple[str, float]], str]:
    """The command objects as ``(keystrokes, duration)``, or the error of the first bad one."""
    out: list[tuple[str, float]] = []
    for i, item in enumerate(items, 1):
        if not isinstance(item, dict):
            return [], f"Command {i} must be an object"
        if "keystrokes" not in item:
            return [], f"Command {i} missing required 'keystrokes' field"
        keys = item["keystrokes"]
        if not isinstance(keys, str):
            return [], f"Command {i} 'keystrokes' must be a string"
        duration: Any = 1.0
        if "duration" not in item:
            warnings.append(f"Command {i}: Missing duration field, using default 1.0")
        elif isinstance(item["duration"], (int, float)):
            duration = item["duration"]
        else:
            warnings.append(f"Command {i}: Invalid duration value, using default 1.0")
        # Theirs lists a set (its order varies between runs); ours, the order written.
        unknown = [k for k in item if k not in ("keystrokes", "duration")]
        if unknown:
            warnings.append(f"Command {i}: Unknown fields: {', '.join(unknown)}")
        if i < len(items) and not keys.endswith("\n"):
            warnings.append(f"Command {i} should end with newline when followed by another "
                            "command. Otherwise the two commands will be concatenated together "
                            "on the same line.")
        try:
            seconds = float(duration)
        except OverflowError:  # an integer past float range: theirs crashes; wait the most
            seconds = math.inf
        out.append((keys, seconds))
    return out, ""


def _attempt(text: str) -> TerminusReply:
    """One reading of ``text``, without the auto-corrections."""
    warnings: list[str] = []
    content, around = _json_span(text)
    warnings.extend(around)
    if not content:
        return TerminusReply(error="No valid JSON found in response", warning=_bullets(warnings))
    try:
        data = json.loads(content)
    except json.JSONDecodeError as e:
        shown = (f" | Content: {content!r}" if len(content) < 200
                 else f" | Content preview: {content[:100]!r}...")
        return TerminusReply(error=f"Invalid JSON: {e}{shown}", warning=_bullets(warnings))
    except (ValueError, RecursionError) as e:  # huge numbers, deep nesting: theirs crashes
        return TerminusReply(error=f"Invalid JSON: {e}", warning=_bullets(warnings))
    if not isinstance(data, dict):
        return TerminusReply(error="Response must be a JSON object", warning=_bullets(warnings))
    missing = [n for n in _FIELDS if n not in data]
    if missing:
        return TerminusReply(error=f"Missing required fields: {', '.join(missing)}",
                             warning=_bullets(warnings))
    for name in ("analysis", "plan"):
        if not isinstance(data[name], str):
            warnings.append(f"Field '{name}' should be a string")
    if not isinstance(data["commands"], list):
        return TerminusReply(error="Field 'commands' must be an array",
                             warning=_bullets(warnings))
    order = _order_warning(content)
    if order:
        warnings.append(order)
    flag = data.get("task_complete")
    if flag is not None and not isinstance(flag, (bool, str)):
        warnings.append("Field 'task_complete' should be a boolean or string")
    # A string says yes in words; any other value counts by its truth (1 and {"a": 1} do).
    complete = flag.lower() in ("true", "1", "yes") if isinstance(flag, str) else bool(flag)
    commands, error = _commands(data["commands"], warnings)
    if error and complete:
        # Completing: a bad command is only a warning, and nothing runs.
        warnings.append(error)
        return TerminusReply(complete=True, warning=_bullets(warnings))
    if error:
        return TerminusReply(error=error, warning=_bullets(warnings))
    return TerminusReply(commands, complete, "", _bullets(warnings))


def _close_braces(text: str, error: str) -> str | None:
    """``text`` with its missing closing braces added, when the error is of that kind."""
    kinds = ("Invalid JSON", "Expecting", "Unterminated", "No valid JSON found")
    missing = text.count("{") - text.count("}")
    if missing > 0 and any(k in error for k in kinds):
        return text + "}" * missing
    return None


def _extract_object(text: str, error: str) -> str | None:
    """The first object of at most two levels in ``text`` that is valid JSON."""
    for candidate in _FLAT_OBJECT.findall(text):
        try:
            json.loads(candidate)
        except (ValueError, RecursionError):
            continue
        return str(candidate)
    return None


def read_reply(text: str | None) -> TerminusReply:
    """Read a reply exactly as terminus-2's JSON parser does (errors, warnings, fixes).

    When the reply does not parse, the two auto-corrections are tried in order (closing
    braces added; the first well-formed object taken out of the text); the first that
    parses wins and adds an ``AUTO-CORRECTED`` warning. Never raises.
    """
    text = text or ""
    first = _attempt(text)
    if not first.error:
        return first
    for name, fix in ((_FIX_BRACES, _close_braces), (_FIX_EXTRACT, _extract_object)):
        fixed = fix(text, first.error)
        if fixed is None:
            continue
        second = _attempt(fixed)
        if not second.error:
            note = f"- AUTO-CORRECTED: {name} - please fix this in future responses"
            second.warning = f"{note}\n{second.warning}" if second.warning else note
            return second
    return first


def limit_output(text: str, max_bytes: int = OUTPUT_LIMIT) -> str:
    """``text`` cut to ``max_bytes`` UTF-8 bytes, keeping its first and last halves, with
    terminus-2's marker between them."""
    raw = text.encode("utf-8", errors="replace")
    if len(raw) <= max_bytes:
        return text
    half = max_bytes // 2
    head = raw[:half].decode("utf-8", errors="ignore")
    tail = raw[-half:].decode("utf-8", errors="ignore")
    omitted = len(raw) - len(head.encode()) - len(tail.encode())
    return (f"{head}\n[... output limited to {max_bytes} bytes; {omitted} interior bytes "
            f"omitted ...]\n{tail}")


class TerminusJSONParser(OutputParser):
    """terminus-2's JSON replies: ``analysis``, ``plan``, ``commands`` (``keystrokes``,
    ``duration``), ``task_complete``. The prompt template describes the format, so there
    is no separate description; :class:`Terminus2Session` keeps the conversation."""

    name = "terminus_json"

    def describe(self, interface: ActionInterface) -> str:
        return ""  # the first user turn (the template) says everything

    def calls(self, reply: TerminusReply) -> list[Call]:
        """The interface calls of a reply that parsed: one per command, then completion."""
        out = [Call("keystrokes", {"keystrokes": keys, "duration": _wait(seconds)})
               for keys, seconds in reply.commands]
        if reply.complete:
            out.append(Call("task_complete"))
        return out

    def parse(self, response: PolicyResponse, interface: ActionInterface) -> list[Call]:
        reply = read_reply(response.text)
        if reply.error:
            raise ParseError(reply.error)
        return self.calls(reply)

    def encode(self, calls: list[Call], interface: ActionInterface) -> PolicyResponse:
        commands = [{"keystrokes": str(c.args.get("keystrokes", "")),
                     "duration": c.args.get("duration", 1.0)}
                    for c in calls if c.name == "keystrokes"]
        reply = {
            "analysis": "The terminal is ready for the next step of the task.",
            "plan": ("Run the commands below." if commands
                     else "Nothing is left to run; the task is done."),
            "commands": commands,
            "task_complete": any(c.name == "task_complete" for c in calls),
        }
        return PolicyResponse(text=json.dumps(reply, indent=2, ensure_ascii=False))


def _wait(seconds: float) -> float:
    """The wait terminus-2 makes for a ``duration``: at most 60 s; none for a negative (or
    not-a-number) one, whose sleep it skips."""
    wait = min(seconds, MAX_DURATION)
    return wait if wait >= 0 else 0.0


# -- the interface -----------------------------------------------------------------------------
#: tmux key names beyond :data:`~tackroom.harness.shell.KEY_NAMES`, as the bytes a terminal
#: sends for them (tmux reads a keystroke string that is exactly a key name as that key).
_TMUX_KEYS = {
    "Up": "\x1b[A", "Down": "\x1b[B", "Right": "\x1b[C", "Left": "\x1b[D",
    "Home": "\x1b[H", "End": "\x1b[F", "PageUp": "\x1b[5~", "PgUp": "\x1b[5~",
    "PPage": "\x1b[5~", "PageDown": "\x1b[6~", "PgDn": "\x1b[6~", "NPage": "\x1b[6~",
    "DC": "\x1b[3~", "Delete": "\x1b[3~", "IC": "\x1b[2~", "Insert": "\x1b[2~",
    "BSpace": "\x7f", "BTab": "\x1b[Z", "Space": " ", "C-m": "\r", "C-j": "\n",
    "KPEnter": "\r", "C-Space": "\x00",
}


def _key_bytes(keys: str) -> str | None:
    """The characters a tmux key name stands for (``C-x``, ``M-x``, ``Up`` …), or ``None``."""
    if keys in _TMUX_KEYS:
        return _TMUX_KEYS[keys]
    if re.fullmatch(r"[CM]-[A-Za-z]", keys):
        ctrl = chr(ord(keys[2].lower()) - 96)
        return ctrl if keys[0] == "C" else "\x1b" + keys[2]
    return None


class TerminusKeysInterface(ActionInterface):
    """``keystrokes(keystrokes, duration)`` sent verbatim to the live shell, then a wait of
    ``duration`` seconds (ended early when its prompt returns); ``task_complete()``."""

    name = "terminus_keys"
    supports = frozenset({"shell", "submit"})
    specs = (
        ActionSpec("keystrokes", "Send the keystrokes to the terminal verbatim, then wait.",
                   (Param("keystrokes", "string", "the exact keystrokes (\\n runs a command; "
                          "a tmux key name such as C-c alone presses that key; empty: just "
                          "wait)"),
                    Param("duration", "number", "seconds to wait afterwards (default 1.0, "
                          "at most 60; ends early when the shell's prompt returns)"))),
        ActionSpec("task_complete", "Mark the task complete; asked twice in a row, the task's "
                   "tests run."),
    )

    def validate(self, call: Call) -> dict[str, Any]:
        if call.name == "keystrokes" and isinstance(call.args, dict):
            call = Call(call.name, {"duration": 1.0, **call.args})
        return super().validate(call)

    def to_actions(self, call: Call) -> list[Action]:
        a = self.validate(call)
        if call.name == "task_complete":
            return [Submit()]
        keys = _text_ok(a["keystrokes"], "keystrokes")
        wait = _wait(a["duration"])
        if keys in KEY_NAMES:
            return [Press(keys)]
        sent = _key_bytes(keys)
        return [TypeKeys(keys if sent is None else sent, wait)]

    def express(self, action: Action, obs: Observation) -> list[Call] | None:
        if isinstance(action, Submit):
            return [Call("task_complete")]
        if not isinstance(action, Shell):
            return None
        # The same keystrokes terminal_keys writes (a script runs through a here-document).
        typed = get("interface", "terminal_keys").express(action, obs)
        if not typed:
            return None
        return [Call("keystrokes", {"keystrokes": c.args["keystrokes"],
                                    "duration": _wait(float(c.args["wait_s"]))})
                for c in typed]


register("interface")(TerminusKeysInterface())


# -- the conversation ------------------------------------------------------------------------
def _confirm(terminal: str) -> str:
    return (f"Current terminal state:\n{terminal}\n\n"
            "Are you sure you want to mark the task as complete? This will trigger your "
            "solution to be graded and you won't be able to make any further corrections. "
            'If so, include "task_complete": true in your JSON response again.')


class Terminus2Session(HarnessSession):
    """The conversation terminus-2 holds with its model, on tackroom's episode loop.

    No system message and no history window (terminus-2 keeps every turn). The first
    user turn is the template; each next one is what terminus-2 would send: the new
    terminal output, after warnings or a confirmation question, or only the parse error
    (nothing ran). ``task_complete`` runs that reply's commands and asks for
    confirmation; a second one in a row (parse errors between them do not count)
    submits. The runner's other feedback (an action the sandbox refused) is put first.
    """

    def __init__(self, spec: HarnessSpec, instruction: str) -> None:
        super().__init__(spec, instruction)
        self._template = template()
        self._prompts: list[list[str]] = []  # the user messages before each reply
        self._replies: list[str] = []
        self._buffer: str | None = None  # the terminal as last shown (for "new output")
        self._pending = False  # task_complete said once; the next one submits
        self._asking = False  # this turn said it first: ask for confirmation
        self._warning = ""
        self._cut = False  # the reply was cut at the output limit
        self._refused = False  # nothing of the reply ran: the next prompt is only the error

    def _system_prompt(self) -> str:
        return ""

    @property
    def preamble(self) -> str:
        """The template: what the model reads first, before the task and the terminal."""
        return self._template

    def messages(self) -> list[dict[str, Any]]:
        """Every turn so far, user and assistant in turn, starting with the template."""
        msgs: list[dict[str, Any]] = []
        for k, prompts in enumerate(self._prompts):
            msgs.extend({"role": "user", "content": p} for p in prompts)
            if k < len(self._replies):
                msgs.append({"role": "assistant", "content": self._replies[k]})
        return msgs

    def record_reply(self, response: PolicyResponse, results: list[str]) -> None:
        self._replies.append(response.text or "")

    def _terminal(self, screen: str) -> str:
        """terminus-2's ``get_incremental_output`` over the screens we have: what follows
        the last line shown before, or the whole screen when that cannot be told."""
        before, self._buffer = self._buffer, screen
        if before is not None:
            shown = before.strip()
            if shown in screen:
                # As theirs: the cut is where the previous text's last line starts.
                cut = shown.rfind("\n") if "\n" in shown else screen.index(shown)
                new = screen[cut:]
                if new.strip():
                    return f"New Terminal Output:\n{new}"
        return f"Current Terminal Screen:\n{screen}"

    def parse(self, response: PolicyResponse) -> Parsed:
        self._asking, self._warning, self._cut, self._refused = False, "", False, True
        reply = read_reply(response.text)
        if response.finish_reason == "length":
            self._cut = True
            # Theirs reads the cut reply for its warnings only (none when there is no text).
            note = (f"\n\nParser warnings from your truncated response:\n{reply.warning}"
                    if reply.warning and response.text is not None else "")
            return Parsed(error=OUTPUT_CUT + note)
        feedback = (f"ERROR: {reply.error}" + (f"\nWARNINGS: {reply.warning}" if reply.warning
                                              else "")) if reply.error else ""
        # Theirs tells errors from warnings by the text "ERROR:" in the feedback, so a
        # warning that quotes it (an unknown field named so) stops the reply as well.
        if reply.error or "ERROR:" in reply.warning:
            return Parsed(error=feedback or f"WARNINGS: {reply.warning}")
        calls = FORMAT.calls(reply)
        actions: list[Action] = []
        for call in calls:
            try:
                actions.extend(self.interface.resolve(call, self._shown))
            except CallError as e:  # ours: what the sandbox cannot type (NUL, too long)
                return Parsed(calls=calls, error=f"ERROR: {e}")
        submit = [a for a in actions if isinstance(a, Submit)]
        actions = [a for a in actions if not isinstance(a, Submit)]
        if not submit:
            self._pending = False
        elif self._pending:
            actions.extend(submit)
        else:
            self._pending = self._asking = True
        self._warning, self._refused = reply.warning, False
        return Parsed(actions=actions, calls=calls)

    def feedback_for_parse_error(self, error: str) -> str:
        if self._cut:
            return error
        return (f"Previous response had parsing errors:\n{error}\n\n"
                "Please fix these issues and provide a proper JSON response.")

    def add_observation(self, rendered: str | list[dict[str, Any]], feedback: str | None,
                        budget: str) -> None:
        if not isinstance(rendered, str):  # terminus-2 reads text: keep an image part's text
            rendered = "".join(p.get("text", "") for p in parts_of(rendered) or [])
        if not self._prompts:
            self._prompts.append([self._template.format(
                instruction=self.instruction,
                terminal_state=limit_output(self._terminal(rendered)))])
            return
        if self._refused:
            # After a cut reply theirs records its error message, then asks with it again:
            # the model reads it twice in a row.
            self._prompts.append([feedback or ""] * (2 if self._cut else 1))
            return
        output = limit_output(self._terminal(rendered))
        if self._asking:
            prompt = _confirm(output)
        elif self._warning:
            # Theirs cuts the output a second time here (a cut text is longer than the cut).
            prompt = (f"Previous response had warnings:\nWARNINGS: {self._warning}\n\n"
                      f"{limit_output(output)}")
        else:
            prompt = limit_output(output)
        if feedback:  # ours: the sandbox refused an action (no such thing in terminus-2)
            prompt = f"{feedback.strip()}\n\n{prompt}"
        self._prompts.append([prompt])


TerminusJSONParser.conversation = Terminus2Session
#: The registered parser (``terminus_json``).
FORMAT = TerminusJSONParser()
register("parser")(FORMAT)


__all__ = ["JSON_TEMPLATE", "OUTPUT_CUT", "REFERENCE", "TEMPLATES", "Terminus2Session",
           "TerminusJSONParser", "TerminusKeysInterface", "TerminusReply", "limit_output",
           "read_reply", "template"]
