"""The read graph: which text units an agent had in context, and which it acted on.

:func:`read_graph` builds the bipartite graph turns × text units of one episode, with
an ``in_context`` edge when the unit was in the turn's messages and an ``acted_on``
edge when the turn's output followed it (the attribution rule is documented on
:func:`read_graph`). :func:`unit_usage` sums graphs over episodes: which skill rules
are ever acted on, and which never are.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tackroom.core.episode import Episode, Turn
from tackroom.harness.spec import HarnessSpec
from tackroom.optimize.audit.results import JsonResult, plain
from tackroom.optimize.edits import rules

__all__ = ["Edge", "NGRAM", "ReadGraph", "Unit", "UnitUsage", "read_graph", "unit_usage"]


@dataclass(frozen=True)
class Unit(JsonResult):
    """A text unit an agent can read.

    ``kind``: ``skill_section`` (a whole skill, ``id`` ``skill:NAME``, or one
    of its rules, ``skill:NAME/K`` with ``parent`` the skill's id),
    ``prompt_section`` (a paragraph of the system prompt outside the skills,
    ``prompt:K``), ``observation`` (``obs:0`` the first user message, ``obs:K``
    the observation after turn K−1), ``tool_output`` (a ``role: tool``
    message, ``tool:ID``) or ``file`` (a path named in an observation or tool
    output, ``file:PATH``).
    """

    kind: str
    id: str
    text: str
    parent: str | None = None


@dataclass(frozen=True)
class Edge(JsonResult):
    """Turn ``turn`` → unit ``unit``. ``evidence`` (``acted_on`` only): what matched."""

    turn: int
    unit: str
    evidence: str = ""


@dataclass(frozen=True)
class ReadGraph(JsonResult):
    """The bipartite read graph of one episode: turns × units, two edge sets.

    Every ``acted_on`` edge is also an ``in_context`` edge (a unit out of the
    window cannot be followed), so ``len(acted_on)`` is the number of
    read-then-act links.
    """

    episode_id: str
    n_turns: int
    units: tuple[Unit, ...]
    in_context: tuple[Edge, ...]
    acted_on: tuple[Edge, ...]

    def unit(self, uid: str) -> Unit:
        return next(u for u in self.units if u.id == uid)

    def counts(self) -> dict[str, dict[str, int]]:
        """``unit id -> {"in_context": turns, "acted_on": turns}``, every unit listed."""
        out = {u.id: {"in_context": 0, "acted_on": 0} for u in self.units}
        for e in self.in_context:
            out[e.unit]["in_context"] += 1
        for e in self.acted_on:
            out[e.unit]["acted_on"] += 1
        return out

    def acted(self, kind: str | None = "skill_section") -> list[str]:
        """Ids of the units (of ``kind``; ``None``: all) acted on at least once, in unit order."""
        hit = {e.unit for e in self.acted_on}
        return [u.id for u in self.units if (kind is None or u.kind == kind) and u.id in hit]

    def never_used(self, kind: str | None = "skill_section") -> list[str]:
        """Ids of the units (of ``kind``) that were in context but never acted on."""
        seen = {e.unit for e in self.in_context}
        hit = {e.unit for e in self.acted_on}
        return [u.id for u in self.units
                if (kind is None or u.kind == kind) and u.id in seen and u.id not in hit]

    @property
    def read_then_act(self) -> int:
        """The number of (turn, unit) read-then-act links."""
        return len(self.acted_on)

    def summary(self) -> dict[str, Any]:
        """What a report shows: sections acted on / never used, link counts, per-unit counts."""
        kinds = sorted({u.kind for u in self.units})
        return {
            "episode_id": self.episode_id, "n_turns": self.n_turns,
            "units": {k: sum(1 for u in self.units if u.kind == k) for k in kinds},
            "in_context_edges": len(self.in_context), "read_then_act": self.read_then_act,
            "skill_sections_acted": self.acted("skill_section"),
            "skill_sections_never_used": self.never_used("skill_section"),
            "counts": self.counts(),
        }


_SKILL_HEAD = re.compile(r"^## Skill: (.+)$", re.M)
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+(.*\S)\s*$")
_WORD = re.compile(r"\w+")
_STRIP = "\"'`.,;:!?()[]{}<>"
_SPECIAL = set("/._-#=:$@[]>")
_STOP_TOKENS = {"e.g", "i.e", "etc", "e.g.", "i.e.", "n/a", "and/or"}
_PATH = re.compile(r"(?<![\w/.-])((?:\.{0,2}/)?(?:[\w.-]+/)*[\w-]+\.[A-Za-z][\w]{0,7})(?![\w/])")
_FILE_EXT = {"py", "txt", "md", "json", "toml", "yaml", "yml", "cfg", "ini", "sh", "js", "ts",
             "html", "css", "c", "h", "cc", "cpp", "rs", "go", "java", "rb", "csv", "log", "sql",
             "xml", "lock", "conf"}
NGRAM = 4


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


def _content(msg: Mapping[str, Any]) -> str:
    c = msg.get("content")
    if isinstance(c, str):
        return c
    if isinstance(c, list):  # multimodal parts
        return "\n".join(p.get("text", "") for p in c if isinstance(p, Mapping))
    return ""


def _rules(text: str) -> list[str]:
    """A skill's rules as the edit grammar numbers them (:func:`tackroom.optimize.edits.rules`,
    from 0), each without its bullet, so ``skill:NAME/K`` is the rule ``delete_rule`` K edits."""
    return [m.group(1) if (m := _BULLET.match(line)) else line.strip() for line in rules(text)]


def _skills_of(spec: HarnessSpec | None, system: str) -> list[tuple[str, str]]:
    if spec is not None:
        return [(s.name, s.text.strip()) for s in spec.skills]
    heads = list(_SKILL_HEAD.finditer(system))
    return [(h.group(1).strip(), system[h.end():heads[k + 1].start() if k + 1 < len(heads)
             else len(system)].strip()) for k, h in enumerate(heads)]


def _ngrams(text: str, n: int = NGRAM) -> set[tuple[str, ...]]:
    w = _WORD.findall(text.lower())
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


def _distinctive(text: str) -> set[str]:
    """Backticked spans and command / selector / path-like tokens of ``text`` (lowercase)."""
    out = {s.strip().lower() for s in re.findall(r"`([^`\n]+)`", text) if len(s.strip()) >= 2}
    for raw in text.split():
        tok = raw.strip(_STRIP).lower()
        if (len(tok) >= 3 and tok not in _STOP_TOKENS and any(ch.isalpha() for ch in tok)
                and any(ch in _SPECIAL for ch in tok)):
            out.add(tok)
    return out


def _tails(path: str) -> set[str]:
    """A path and each tail after a ``/``: ``/repo/pkg/a.py``, ``repo/pkg/a.py``, ``pkg/a.py``,
    ``a.py`` (a model names repository files relative to where it stands)."""
    parts = path.split("/")
    return {path} | {"/".join(parts[k:]) for k in range(1, len(parts)) if parts[k]}


def _quotes(output: str, out_grams: set[tuple[str, ...]], refs: Sequence[int], unit: Unit,
            cache: dict[str, tuple[set, set]]) -> str:
    """Why ``output`` (lowercase) follows ``unit``: the matched n-gram or token, else ``""``."""
    if unit.id not in cache:
        toks = _tails(unit.text.lower()) if unit.kind == "file" else _distinctive(unit.text)
        cache[unit.id] = (_ngrams(unit.text), toks)
    grams, toks = cache[unit.id]
    common = grams & out_grams
    if common:
        return " ".join(min(common))
    for tok in sorted(toks):
        if re.search(r"(?<!\w)" + re.escape(tok) + r"(?!\w)", output):
            return tok
    if unit.kind in ("observation", "tool_output"):
        for ref in refs:
            if f"[{ref}]" in unit.text:
                return f"ref [{ref}]"
    return ""


def _refs(turn: Turn) -> list[int]:
    """The element references the turn's actions name (``ref`` fields), sorted."""
    out = set()
    for a in turn.actions:
        ref = a.get("ref") if isinstance(a, Mapping) else None
        if isinstance(ref, int) and not isinstance(ref, bool):
            out.add(ref)
    return sorted(out)


def _output(turn: Turn) -> str:
    """What the turn did, as text: its reply, its tool calls' names and arguments, its actions."""
    parts = [turn.raw_text or ""]
    for tc in turn.tool_calls:
        fn = tc.get("function", tc)
        parts.append(str(fn.get("name", "")))
        args = fn.get("arguments", "")
        try:
            parsed = json.loads(args) if isinstance(args, str) else args
        except (ValueError, TypeError):
            parsed = args
        parts.append(_flatten(parsed))
    for a in turn.actions:
        parts.append(_flatten(a))
    return "\n".join(p for p in parts if p)


def _flatten(x: Any) -> str:
    if isinstance(x, Mapping):
        return " ".join(_flatten(v) for v in x.values())
    if isinstance(x, list | tuple):
        return " ".join(_flatten(v) for v in x)
    return "" if x is None else str(x)


def _files(text: str) -> list[str]:
    return [p for p in _PATH.findall(text) if p.rsplit(".", 1)[-1].lower() in _FILE_EXT]


def read_graph(episode: Episode, spec: HarnessSpec | None = None) -> ReadGraph:
    """The bipartite read graph of ``episode``: turns × the text units they had in context.

    **Units.** The system message of each turn is split into skills and prompt
    sections: each skill (from ``spec.skills``, or, without a spec, the
    ``## Skill: NAME`` blocks :mod:`tackroom.harness.session` writes) is one
    ``skill_section`` unit, and each of its rule lines (bullets ``-``, ``*``,
    ``+``, ``1.``; a skill without bullets: each non-empty line) is another,
    so a rule an optimiser added and no one follows shows up on its own. The
    rest of the system prompt gives one ``prompt_section`` per paragraph.
    ``role: tool`` messages are ``tool_output`` units (one per distinct
    text); the first user message (task and first observation) and each
    turn's ``observation`` are ``observation`` units (a text already a tool
    output is not repeated); file paths (known source/text extensions) named
    in observations and tool outputs are ``file`` units.

    **in_context** (turn t, unit v): v's text (whitespace-normalised,
    case-folded) is a substring of one of the messages turn t was sent; for a
    file, its path is.

    **acted_on** (turn t, unit v) — the attribution: v is in context at t and
    the turn's *output* — its ``raw_text``, its tool calls' names and
    (JSON-decoded) argument values, and its actions' field values — either

    1. quotes v: shares a run of ``NGRAM`` (4) consecutive words with v's text
       (words are ``\\w+`` runs, case-folded), or
    2. uses a distinctive token of v: a backticked span of v, or a token of v
       with a letter and one of ``/ . _ - # = : $ @ [ ] >`` (a command flag, a
       selector, a path, a ``key=value``), found in the output with word
       boundaries; for a file, its path or a tail of it (``pkg/a.py`` for
       ``/repo/pkg/a.py``); or
    3. (observations and tool outputs) acts on an element it lists: an
       action's ``ref`` is ``N`` and the unit shows ``[N]`` (the element-list
       renderers' reference), e.g. ``click(9)`` after ``[9] button "frost"``.

    The rule is lexical and deterministic: it finds an action that follows a
    unit's wording or its concrete tokens, not one that follows its meaning
    in other words (those read as never used), and an output that matches
    several units in context links to each of them. The whole skill matches
    whenever one of its rules does (rule text is part of its text). The
    model's own earlier replies are not units.
    """
    units: dict[str, Unit] = {}
    by_text: dict[str, str] = {}  # normalised text -> unit id (dedupe observation vs tool)

    def add(unit: Unit) -> None:
        key = _norm(unit.text)
        if not key or unit.id in units:
            return
        if unit.kind in ("observation", "tool_output") and key in by_text:
            return
        units[unit.id] = unit
        if unit.kind in ("observation", "tool_output"):
            by_text[key] = unit.id

    system = ""
    for turn in episode.turns:
        for m in turn.messages:
            if m.get("role") == "system":
                system = _content(m)
                break
        if system:
            break
    skills = _skills_of(spec, system)
    for name, text in skills:
        sid = f"skill:{name}"
        add(Unit("skill_section", sid, text))
        for k, rule in enumerate(_rules(text)):
            add(Unit("skill_section", f"{sid}/{k}", rule, parent=sid))
    head = _SKILL_HEAD.search(system)
    prose = system[:head.start()] if head else system
    if spec is not None and not head:
        for _, text in skills:  # skills rendered without the header: cut them out
            prose = prose.replace(text, "")
    for k, para in enumerate(p for p in re.split(r"\n\s*\n", prose) if p.strip()):
        add(Unit("prompt_section", f"prompt:{k}", para.strip()))

    # Tool outputs first, so an observation equal to a tool result stays a tool output.
    for t, turn in enumerate(episode.turns):
        for i, m in enumerate(turn.messages):
            if m.get("role") == "tool":
                tid = m.get("tool_call_id") or f"{t}.{i}"
                add(Unit("tool_output", f"tool:{tid}", _content(m)))
    first_user = next((_content(m) for m in (episode.turns[0].messages if episode.turns else [])
                       if m.get("role") == "user"), "")
    add(Unit("observation", "obs:0", first_user))
    for t, turn in enumerate(episode.turns):
        if turn.observation:
            add(Unit("observation", f"obs:{t + 1}", turn.observation))
    for u in [u for u in units.values() if u.kind in ("observation", "tool_output")]:
        for path in _files(u.text):
            add(Unit("file", f"file:{path}", path))

    in_context: list[Edge] = []
    acted_on: list[Edge] = []
    cache: dict[str, tuple[set, set]] = {}
    normed = {uid: _norm(u.text) for uid, u in units.items()}
    for t, turn in enumerate(episode.turns):
        window = "\n".join(_norm(_content(m)) for m in turn.messages)
        output = _output(turn).lower()
        out_grams = _ngrams(output)
        refs = _refs(turn)
        for uid, u in units.items():
            if normed[uid] not in window:
                continue
            in_context.append(Edge(t, uid))
            why = _quotes(output, out_grams, refs, u, cache)
            if why:
                acted_on.append(Edge(t, uid, why))
    return ReadGraph(episode_id=episode.episode_id, n_turns=len(episode.turns),
                     units=tuple(units.values()), in_context=tuple(in_context),
                     acted_on=tuple(acted_on))


@dataclass(frozen=True)
class UnitUsage(JsonResult):
    """One unit summed over episodes: in how many it was in context, acted on, and the links."""

    id: str
    kind: str
    text: str
    episodes_in_context: int
    episodes_acted: int
    turns_in_context: int
    turns_acted: int

    @property
    def never_used(self) -> bool:
        """In context in some episode, acted on in none."""
        return self.episodes_in_context > 0 and self.episodes_acted == 0

    def to_dict(self) -> dict[str, Any]:
        return {**plain(self), "never_used": self.never_used}


def unit_usage(graphs: Iterable[ReadGraph], kind: str | None = "skill_section"
               ) -> list[UnitUsage]:
    """Units (of ``kind``; ``None``: all) summed over episodes' read graphs, by unit id,
    in first-seen order. ``never_used`` marks the rules no episode acted on."""
    acc: dict[str, dict[str, Any]] = {}
    for g in graphs:
        counts = g.counts()
        for u in g.units:
            if kind is not None and u.kind != kind:
                continue
            a = acc.setdefault(u.id, {"id": u.id, "kind": u.kind, "text": u.text,
                                      "episodes_in_context": 0, "episodes_acted": 0,
                                      "turns_in_context": 0, "turns_acted": 0})
            c = counts[u.id]
            a["episodes_in_context"] += c["in_context"] > 0
            a["episodes_acted"] += c["acted_on"] > 0
            a["turns_in_context"] += c["in_context"]
            a["turns_acted"] += c["acted_on"]
    return [UnitUsage(**a) for a in acc.values()]
