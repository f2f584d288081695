"""Output parsers: the format the model writes its actions in.

Each parser pairs with any action interface: it describes the interface's
actions to the model in its own format (tool schemas, a command grammar, a
JSON shape), reads model output back into :class:`Call` s, and — for experts —
writes calls the way a model would have to.

``parse`` raises :class:`ParseError` and nothing else, whatever the model
wrote; the message is what the model is shown.
"""

from __future__ import annotations

import json
import re
import shlex
import uuid
from typing import Any

from tackroom.core.policy import PolicyResponse, ToolCall
from tackroom.core.registry import register
from tackroom.harness.interfaces import ActionInterface, ActionSpec, Call


class ParseError(ValueError):
    """The model's output could not be read as actions; the text is model-facing."""


class OutputParser:
    """Base class; subclasses implement the four methods."""

    name: str = ""
    #: A :class:`~tackroom.harness.session.HarnessSession` subclass, for a format that
    #: brings its own conversation (terminus-2's); ``None``: the standard one.
    conversation: type | None = None

    def describe(self, interface: ActionInterface) -> str:
        """Instructions for the system prompt: how to write actions."""
        raise NotImplementedError

    def tools(self, interface: ActionInterface) -> list[dict[str, Any]] | None:
        """OpenAI tool schemas, for parsers that use native tool calls."""
        return None

    def parse(self, response: PolicyResponse, interface: ActionInterface) -> list[Call]:
        raise NotImplementedError

    def encode(self, calls: list[Call], interface: ActionInterface) -> PolicyResponse:
        raise NotImplementedError


def _signature(spec: ActionSpec) -> str:
    return f"{spec.name}({', '.join(p.name for p in spec.params)})"


class ToolCallParser(OutputParser):
    """Native OpenAI function calling: one tool per action.

    Subclasses adjust it through :meth:`required` (which parameters the
    schema marks required) and :attr:`no_call_hint` (an example appended to
    the error shown when the reply has no tool call).
    """

    name = "tool_calls"
    #: Appended to the "no tool call found" error, e.g. an example call.
    no_call_hint = ""

    def describe(self, interface: ActionInterface) -> str:
        names = ", ".join(_signature(s) for s in interface.specs)
        return f"Act by calling the provided tools ({names}). Do not describe the action in text."

    def required(self, spec: ActionSpec, interface: ActionInterface) -> list[str]:
        """The parameters of ``spec`` the tool schema marks required: all of them."""
        return [p.name for p in spec.params]

    def tools(self, interface: ActionInterface) -> list[dict[str, Any]]:
        out = []
        for s in interface.specs:
            props = {p.name: {"type": p.type, "description": p.description} for p in s.params}
            out.append({
                "type": "function",
                "function": {
                    "name": s.name,
                    "description": s.description,
                    "parameters": {"type": "object", "properties": props,
                                   "required": self.required(s, interface)},
                },
            })
        return out

    def parse(self, response: PolicyResponse, interface: ActionInterface) -> list[Call]:
        if not response.tool_calls:
            names = ", ".join(s.name for s in interface.specs)
            raise ParseError(f"no tool call found; call one of the tools: {names}"
                             + self.no_call_hint)
        calls = []
        for tc in response.tool_calls:
            if not tc.name:
                raise ParseError("a tool call has no function name")
            raw = tc.arguments if isinstance(tc.arguments, str) else ""
            try:
                args = json.loads(raw) if raw.strip() else {}
            except (ValueError, RecursionError) as e:  # ValueError: JSONDecodeError, huge ints
                raise ParseError(
                    f"arguments of {tc.name!r} are not valid JSON ({e}); "
                    f"write them as a JSON object"
                ) from None
            if not isinstance(args, dict):
                raise ParseError(f"arguments of {tc.name!r} must be a JSON object")
            calls.append(Call(tc.name, args))
        return calls

    def encode(self, calls: list[Call], interface: ActionInterface) -> PolicyResponse:
        return PolicyResponse(tool_calls=[
            ToolCall(f"call_{uuid.uuid4().hex[:12]}", c.name, json.dumps(c.args))
            for c in calls
        ])


register("parser")(ToolCallParser())


_FENCE = re.compile(r"```[a-zA-Z]*\n?(.*?)```", re.DOTALL)


class CommandParser(OutputParser):
    """A small text command language, one command per line: ``click 12``.

    Commands go in a fenced block (```` ``` ````). Without a block, every line
    that starts with a known verb is read and the rest is taken as thinking.
    """

    name = "commands"

    def describe(self, interface: ActionInterface) -> str:
        lines = []
        for s in interface.specs:
            args = " ".join(
                f'"<{p.name}>"' if p.type == "string" else f"<{p.name}>" for p in s.params
            )
            lines.append(f"  {s.name} {args}".rstrip() + f"    # {s.description}")
        return (
            "Write your actions as commands, one per line, inside a ``` block. "
            "Quote text arguments with double quotes. Commands:\n" + "\n".join(lines)
        )

    def parse(self, response: PolicyResponse, interface: ActionInterface) -> list[Call]:
        text = response.text or ""
        blocks = _FENCE.findall(text)
        verbs = {s.name for s in interface.specs}
        if blocks:
            lines = [ln for b in blocks for ln in b.splitlines() if ln.strip()]
            strict = True
        else:
            lines = [ln for ln in text.splitlines()
                     if ln.strip() and ln.strip().split()[0].lower() in verbs]
            strict = False
        if not lines:
            raise ParseError(
                "no command found; write one command per line inside a ``` block, e.g. "
                + self._example(interface)
            )
        calls = []
        for ln in lines:
            try:
                words = shlex.split(ln.strip(), comments=False, posix=True)
            except ValueError as e:
                raise ParseError(f"cannot read command {ln.strip()!r}: {e}") from None
            if not words:
                continue
            verb = words[0].lower()
            spec = interface.spec(verb)
            if spec is None:
                if strict:
                    raise ParseError(
                        f"unknown command {words[0]!r}; commands: {', '.join(sorted(verbs))}"
                    )
                continue
            params = spec.params
            rest = words[1:]
            if len(rest) != len(params):
                # Let the last string parameter absorb unquoted spaces.
                if params and params[-1].type == "string" and len(rest) > len(params):
                    rest = rest[: len(params) - 1] + [" ".join(rest[len(params) - 1:])]
                else:
                    usage = " ".join(f"<{p.name}>" for p in params)
                    raise ParseError(f"{verb} takes {len(params)} argument(s): {verb} {usage}")
            args: dict[str, Any] = {}
            for p, w in zip(params, rest, strict=True):
                args[p.name] = _number(w) if p.type in ("integer", "number") else w
            calls.append(Call(verb, args))
        if not calls:
            raise ParseError("no command found; " + self._example(interface))
        return calls

    def _example(self, interface: ActionInterface) -> str:
        s = interface.specs[0]
        return "```\n" + s.name + " " + " ".join("12" for _ in s.params) + "\n```"

    def encode(self, calls: list[Call], interface: ActionInterface) -> PolicyResponse:
        lines = []
        for c in calls:
            spec = interface.spec(c.name)
            assert spec is not None, c.name
            parts = [c.name]
            for p in spec.params:
                v = c.args[p.name]
                parts.append(_quote(v) if p.type == "string" else _fmt_number(v))
            lines.append(" ".join(parts))
        return PolicyResponse(text="```\n" + "\n".join(lines) + "\n```")


register("parser")(CommandParser())


def _number(word: str) -> Any:
    try:
        return int(word)
    except ValueError:
        try:
            return float(word)
        except ValueError:
            return word


def _fmt_number(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


class JsonActionParser(OutputParser):
    """A JSON object per action in the text: ``{"action": "click", "ref": 12}``.

    A JSON list holds several actions. The JSON may sit in a fenced block or
    anywhere in the reply.
    """

    name = "json"

    def describe(self, interface: ActionInterface) -> str:
        shapes = []
        for s in interface.specs:
            fields = ", ".join(
                f'"{p.name}": <{p.type}>' for p in s.params
            )
            sep = ", " if fields else ""
            shapes.append(f'  {{"action": "{s.name}"{sep}{fields}}}    // {s.description}')
        return (
            "Reply with a JSON object naming one action (or a JSON list of them). Actions:\n"
            + "\n".join(shapes)
        )

    def parse(self, response: PolicyResponse, interface: ActionInterface) -> list[Call]:
        text = response.text or ""
        data = _first_json(text)
        if data is None:
            example = json.dumps({"action": interface.specs[0].name})
            raise ParseError(f"no JSON action found; reply with e.g. {example[:-1]}, ...}}")
        items = data if isinstance(data, list) else [data]
        calls = []
        for item in items:
            if not isinstance(item, dict):
                raise ParseError("each action must be a JSON object with an \"action\" key")
            name = item.get("action")
            if not isinstance(name, str):
                raise ParseError('an action object has no "action" name')
            calls.append(Call(name, {k: v for k, v in item.items() if k != "action"}))
        if not calls:
            raise ParseError("the JSON list of actions is empty")
        return calls

    def encode(self, calls: list[Call], interface: ActionInterface) -> PolicyResponse:
        objs = [{"action": c.name, **c.args} for c in calls]
        return PolicyResponse(text=json.dumps(objs[0] if len(objs) == 1 else objs))


register("parser")(JsonActionParser())


def _first_json(text: str) -> Any:
    """The first JSON object or array in ``text`` (fenced blocks first), else ``None``."""
    candidates = _FENCE.findall(text) + [text]
    decoder = json.JSONDecoder()
    for cand in candidates:
        for i, ch in enumerate(cand):
            if ch in "{[":
                try:
                    value, _ = decoder.raw_decode(cand, i)
                except (json.JSONDecodeError, RecursionError):
                    continue
                if isinstance(value, (dict, list)):
                    return value
    return None
