"""Which of an agent CLI's model calls are agent turns, and which are side calls; and their threads.

A CLI makes calls that are not steps of its agent loop: OpenCode asks for a
title for the session first (no tools, a "title generator" system prompt),
Claude Code and Codex summarise a long history to compact it, a sub-agent runs
with a system prompt and tools of its own, and Anthropic's and OpenAI's APIs
count tokens. Such a *side call* is recorded (``Turn.side`` names it) but kept
out of the turn budget and out of training data, and a scripted expert gives it
a neutral answer instead of a step of its script.

Each call also belongs to a *thread*: the sequence of calls whose histories
extend one another. A CLI whose history is append-only has one; a sub-agent, a
side call, or the agent's history after a compaction starts another. A turn's
prompt is always its own call's messages, so a record whose history was
rewritten still trains correctly, and stores compactly (each turn's messages a
delta of the last turn of its own thread).

The rules, generic first (:class:`CallClassifier`):

1. A harness's hint (``[agent] side_calls``, see :func:`read_rules`) that matches
   the call's system prompt, last user message or model name labels it.
2. A call that continues a thread (that thread's last messages are a prefix of
   its own; the same messages again: a retry) is in that thread, of that
   thread's kind — except a call with no
   tools that continues an agent thread that had them: a summary.
3. Otherwise, with no agent thread yet, it starts the agent thread.
4. With no tools while the agent thread has tools: a side call (``title`` or
   ``summary`` when its prompt says so, else ``side``).
5. With tools while the agent thread had none (the agent's first real call came
   after a side call, as OpenCode's does): it becomes the agent thread, and the
   earlier tool-less threads are relabelled side calls.
6. The agent thread's system prompt and tools but not its history: the agent
   again, in a new thread (its history was compacted or windowed).
7. Another system prompt or tool set: a ``subagent``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from tackroom.core.errors import ConfigError

__all__ = ["LABELS", "Call", "CallClassifier", "SideCallRule", "read_rules"]

#: The labels of side calls (``Turn.side``); an agent turn has none (``None``).
LABELS = ("title", "summary", "subagent", "count_tokens", "side")
_RULE_KEYS = ("label", "system", "user", "model")


@dataclass(frozen=True)
class SideCallRule:
    """A harness's hint: calls whose system prompt / last user message / model name match are
    side calls labelled ``label`` (each pattern a regular expression, searched; all given
    must match)."""

    label: str
    system: re.Pattern[str] | None = None
    user: re.Pattern[str] | None = None
    model: re.Pattern[str] | None = None

    def matches(self, system: str, user: str, model: str) -> bool:
        return all(p is None or p.search(text) is not None
                   for p, text in ((self.system, system), (self.user, user),
                                   (self.model, model)))


def read_rules(raw: Any, where: str) -> tuple[SideCallRule, ...]:
    """The ``[agent] side_calls`` hints: a list of tables ``{label, system?, user?, model?}``.

    Raises :class:`ConfigError` naming the entry when one is malformed.
    """
    if raw is None:
        return ()
    example = ('e.g. side_calls = [{ label = "title", system = "title generator" }]; '
               f"labels: {', '.join(LABELS)}")
    if not isinstance(raw, list):
        raise ConfigError("side_calls must be a list of tables", where, example)
    rules = []
    for i, entry in enumerate(raw):
        w = f"{where}[{i}]"
        if not isinstance(entry, dict) or set(entry) - set(_RULE_KEYS) or \
                entry.get("label") not in LABELS or \
                not any(isinstance(entry.get(k), str) for k in _RULE_KEYS[1:]):
            raise ConfigError(f"side_calls[{i}] must have a label and at least one of "
                              "system, user, model (strings)", w, example)
        patterns: dict[str, re.Pattern[str] | None] = {}
        for key in _RULE_KEYS[1:]:
            value = entry.get(key)
            if value is None:
                patterns[key] = None
                continue
            if not isinstance(value, str):
                raise ConfigError(f"side_calls[{i}].{key} must be a string", w, example)
            try:
                patterns[key] = re.compile(value)
            except re.error as e:
                raise ConfigError(f"side_calls[{i}].{key} is not a regular expression ({e})",
                                  w, "escape it, or write a valid pattern") from None
        rules.append(SideCallRule(entry["label"], **patterns))
    return tuple(rules)


@dataclass(frozen=True)
class Call:
    """What one call is: ``side`` (``None``: an agent turn) and its ``thread``.

    ``relabel`` maps earlier threads to the side-call label they turn out to have
    (rule 5): their recorded turns are side calls, not agent turns.
    """

    side: str | None
    thread: int
    relabel: dict[int, str] = field(default_factory=dict)


@dataclass
class _Thread:
    id: int
    side: str | None
    system: str
    tools: str
    has_tools: bool
    last: list[Any]  # the last call's messages, normalised


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        return "\n".join(p.get("text", "") if isinstance(p, dict) else str(p)
                         for p in content).strip()
    return ""


def _args(arguments: Any) -> Any:
    try:
        return json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return arguments


def _normal(m: Any) -> Any:
    """A message as compared between calls: what a CLI echoes back may differ in form
    (``None`` or ``""`` content, re-serialised arguments, new call ids)."""
    if not isinstance(m, dict):
        return m
    calls = [(c.get("function", {}).get("name"), _args(c.get("function", {}).get("arguments")))
             for c in m.get("tool_calls") or [] if isinstance(c, dict)]
    return (m.get("role"), _text(m.get("content")), json.dumps(calls, sort_keys=True))


def _system(messages: list[Any]) -> str:
    return "\n".join(_text(m.get("content")) for m in messages
                     if isinstance(m, dict) and m.get("role") == "system")


def _last_user(messages: list[Any]) -> str:
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    return _text(users[-1].get("content")) if users else ""


def _tool_names(tools: list[dict[str, Any]] | None) -> str:
    return json.dumps(sorted(str((t.get("function") or {}).get("name"))
                             for t in tools or [] if isinstance(t, dict)))


def _guess(system: str, user: str) -> str:
    """The label of a tool-less side call, from what its prompt asks for."""
    said = f"{system}\n{user}".lower()
    if "title" in said:
        return "title"
    if "summar" in said or "compact" in said:
        return "summary"
    return "side"


class CallClassifier:
    """Classifies one route's calls in arrival order (see the module docstring)."""

    def __init__(self, rules: tuple[SideCallRule, ...] = ()) -> None:
        self.rules = rules
        self.threads: list[_Thread] = []

    @property
    def agent(self) -> _Thread | None:
        """The agent's thread (the latest one that is an agent's; ``None`` before any)."""
        return next((t for t in reversed(self.threads) if t.side is None), None)

    def classify(self, messages: list[Any], tools: list[dict[str, Any]] | None,
                 model: str = "") -> Call:
        """What a call with ``messages`` (as the policy gets them) and ``tools`` is."""
        normal = [_normal(m) for m in messages]
        system, user = _system(messages), _last_user(messages)
        names = _tool_names(tools)
        for rule in self.rules:  # 1
            if rule.matches(system, user, model or ""):
                return self._place(rule.label, normal, system, names, bool(tools))
        for t in reversed(self.threads):  # 2
            if len(t.last) <= len(normal) and normal[:len(t.last)] == t.last:
                if t.side is None and t.has_tools and not tools:
                    return self._new("summary", normal, system, names, False)
                t.last = normal
                return Call(t.side, t.id)
        agent = self.agent
        if agent is None:  # 3
            return self._new(None, normal, system, names, bool(tools))
        if not tools and agent.has_tools:  # 4
            return self._new(_guess(system, user), normal, system, names, False)
        if tools and not agent.has_tools:  # 5
            relabel = {}
            for t in self.threads:
                if t.side is None:
                    t.side = relabel[t.id] = _guess(t.system, "")
            call = self._new(None, normal, system, names, True)
            return Call(None, call.thread, relabel)
        if system == agent.system and names == agent.tools:  # 6
            return self._new(None, normal, system, names, bool(tools))
        return self._new("subagent", normal, system, names, bool(tools))  # 7

    def _place(self, label: str, normal: list[Any], system: str, names: str,
               has_tools: bool) -> Call:
        for t in reversed(self.threads):
            if t.side == label and len(t.last) <= len(normal) and normal[:len(t.last)] == t.last:
                t.last = normal
                return Call(label, t.id)
        return self._new(label, normal, system, names, has_tools)

    def _new(self, side: str | None, normal: list[Any], system: str, names: str,
             has_tools: bool) -> Call:
        thread = _Thread(len(self.threads), side, system, names, has_tools, normal)
        self.threads.append(thread)
        return Call(side, thread.id)
