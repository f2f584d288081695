"""The leakage guard: no candidate may carry what identifies the evaluation's tasks or answers.

An optimiser that writes ``"on click-button, click the third button"`` into a skill has not
found a better procedure: it has memorised the dev set, and its gain will not transfer. The
guard rejects every edit whose text (a rule, a skill, its name, a prompt, an option value, the
proposer's ``why``) names

* a **task id** of the suite: ``click-button``, ``toy/click-button``, and the same with any
  case and with ``_``, ``.`` or nothing between the id's words (``Click_Button``,
  ``clickbutton``); not with spaces, since ``click button`` is ordinary advice. An id of one
  word (``login``) is matched only as ``suite/id``: alone it is a common word;
* a **seed** of the evaluation splits, *written as a seed*: the number must follow the word
  ``seed`` (``seed 17``, ``seed=17``, ``seeds 17, 18 and 19``, ``seed_17``, ``Seed #17``). A
  bare number (``press 1 key``, ``at most 3 tries``) is never a seed, and a seed number outside
  the splits is not a leak;
* a **task file path**: a task's path from its ``meta`` (terminal tasks), or one given, in full
  or by its last two or more components (``tasks/csv-join``); and any path into tackroom's
  task data (``suites/<suite>/tasks``, ``suites/code/packages``);
* an **expected answer**: strings from the tasks' ``meta`` (``answer``, ``answers``,
  ``expected``, and the code suite's hidden test ids ``requirement`` / ``regression``, in full
  or by the test's method name), or given; matched case-insensitively as a whole token, and only
  when at least :data:`MIN_ANSWER` characters long (a one-digit answer is in every text).

What it cannot see: per-seed answers that exist only when a page is built (the toy suite's
target words), so a proposer shown failed episodes' instructions could still copy one; the
:class:`~tackroom.optimize.proposers.LLMProposer` is shown instructions scrubbed by
:meth:`LeakageGuard.scrub`, and the optimiser's held-out split is what catches the rest.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from tackroom.core.task import Suite, Task
from tackroom.optimize.edits import Candidate, Edit

#: Answers shorter than this are not matched (see the module docstring).
MIN_ANSWER = 3
#: Task meta keys whose values are expected answers (strings or lists of strings).
ANSWER_KEYS = ("answer", "answers", "expected", "requirement", "regression")
#: Paths into tackroom's own task data, whatever the task.
_TASK_DATA = re.compile(r"suites/[\w.-]+/(?:tasks|packages)\b", re.I)
#: ``seed`` (``seeds``, ``seed_id``, ``seed number`` …) and the numbers that follow it.
_SEED = re.compile(
    r"seed(?:s|[\s_-]?(?:ids?|numbers?|values?))?(?![a-z])"
    r"((?:[\s:=#(\[_-]|no\.)*\d+(?:(?:\s*(?:,|;|/|&|\band\b|\bor\b)\s*|\s+)\d+)*)",
    re.I)


@dataclass(frozen=True)
class _Pattern:
    kind: str  # "task id", "seed", "task path", "answer"
    shown: str  # what it names, for the reason
    regex: re.Pattern[str]


def _word_boundaries(body: str) -> str:
    # Not inside a longer id or word: click-button must not match click-button-sequence.
    return rf"(?<![A-Za-z0-9_.-]){body}(?![A-Za-z0-9_-])"


class LeakageGuard:
    """Rejects edits that name the evaluation's tasks, seeds, task files or answers.

    ``tasks`` are :class:`~tackroom.core.task.Task` s (their ids, ``suite/id`` keys, and what
    their ``meta`` holds of paths and answers) or plain ids; ``seeds`` are the seeds of every
    split the optimiser evaluates on; ``answers`` and ``paths`` add strings the tasks' meta
    does not hold. The rules are the module's docstring.
    """

    def __init__(self, tasks: Iterable[Task | str], seeds: Iterable[int],
                 answers: Iterable[str] = (), paths: Iterable[str] = ()) -> None:
        self.seeds = frozenset(int(s) for s in seeds)
        answers, paths = list(answers), list(paths)
        self._patterns: list[_Pattern] = []
        for t in tasks:
            if isinstance(t, Task):
                self._add_task(t.id, t.suite)
                answers += _meta_answers(t.meta)
                if isinstance(t.meta.get("path"), str):
                    paths.append(t.meta["path"])
            else:
                suite, _, tid = str(t).rpartition("/")
                self._add_task(tid, suite or None)
        for a in answers:
            self._add_answer(a)
        for p in paths:
            self._add_path(p)

    @classmethod
    def for_suite(cls, suite: Suite, seeds: Iterable[int], answers: Iterable[str] = (),
                  paths: Iterable[str] = ()) -> LeakageGuard:
        """The guard for every task of ``suite`` (not only those evaluated: a rule naming any
        task of the suite is tuned to it) and the seeds of every split."""
        return cls(suite.tasks(), seeds, answers, paths)

    def _add_task(self, task_id: str, suite: str | None) -> None:
        words = [w for w in re.split(r"[-_.\s]+", task_id) if w]
        body = r"[-_.]?".join(re.escape(w) for w in words)
        if suite:
            self._patterns.append(_Pattern("task id", f"{suite}/{task_id}", re.compile(
                _word_boundaries(re.escape(suite) + r"\s*/\s*" + body), re.I)))
        if len(words) > 1:  # one word alone is a common word (see the module docstring)
            self._patterns.append(_Pattern("task id", task_id,
                                           re.compile(_word_boundaries(body), re.I)))

    def _add_answer(self, answer: str) -> None:
        answer = str(answer).strip()
        if len(answer) < MIN_ANSWER:
            return
        self._patterns.append(_Pattern("answer", answer, re.compile(
            r"(?<![A-Za-z0-9_])" + re.escape(answer) + r"(?![A-Za-z0-9_])", re.I)))

    def _add_path(self, path: str) -> None:
        parts = PurePosixPath(str(path).replace("\\", "/")).parts
        parts = tuple(p for p in parts if p != "/")
        # The whole path, and each tail of two or more components (tasks/csv-join).
        for k in range(len(parts), 1, -1):
            tail = "/".join(parts[-k:])
            self._patterns.append(_Pattern("task path", tail, re.compile(
                r"(?<![A-Za-z0-9_.-])" + re.escape(tail) + r"(?![A-Za-z0-9_-])")))

    # -- checking ----------------------------------------------------------------------------

    def reasons(self, text: str) -> list[str]:
        """Why ``text`` leaks (empty: it does not), one reason per thing it names."""
        out: list[str] = []
        for p in self._patterns:
            m = p.regex.search(text)
            if m:
                out.append(f"names {p.kind} {p.shown!r}" +
                           (f" (as {m.group(0)!r})" if m.group(0) != p.shown else ""))
        m = _TASK_DATA.search(text)
        if m:
            out.append(f"names task path {m.group(0)!r}")
        for m in _SEED.finditer(text):
            hit = sorted({int(n) for n in re.findall(r"\d+", m.group(1))} & self.seeds)
            if hit:
                out.append(f"names evaluation seed(s) {', '.join(map(str, hit))} "
                           f"(as {m.group(0).strip()!r})")
        return list(dict.fromkeys(out))

    def check(self, edits: Sequence[Edit]) -> list[str]:
        """Why these edits leak, ``edit #i (op): reason`` each; empty when they are clean."""
        out = []
        for i, e in enumerate(edits):
            for r in self.reasons("\n".join(_texts(e))):
                out.append(f"edit #{i + 1} ({e.op}): {r}")
        return out

    def filter(self, candidates: Iterable[Candidate], log: list[dict[str, Any]]
               ) -> list[Candidate]:
        """The candidates whose edits are clean; each rejected one appended to ``log`` as
        ``{"event": "leakage_rejected", "candidate", "hash", "parent", "parent_hash",
        "reasons", "edits"}`` (what the optimiser's records keep)."""
        kept = []
        for c in candidates:
            why = self.check(c.edits)
            if why:
                log.append({"event": "leakage_rejected", "candidate": c.name, "hash": c.hash,
                            "parent": c.parent, "parent_hash": c.parent_hash, "reasons": why,
                            "edits": [e.to_dict() for e in c.edits]})
            else:
                kept.append(c)
        return kept

    def scrub(self, text: str) -> str:
        """``text`` with every task id, path, answer and seed mention replaced by a marker:
        what a proposer may be shown of the episodes it learns from."""
        for p in self._patterns:
            text = p.regex.sub(f"<{p.kind}>", text)
        text = _TASK_DATA.sub("<task path>", text)
        return _SEED.sub("seed <n>", text)


def _meta_answers(meta: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key in ANSWER_KEYS:
        v = meta.get(key)
        for item in (v if isinstance(v, list | tuple) else [v]):
            if isinstance(item, str):
                out.append(item)
                if key in ("requirement", "regression") and "." in item:
                    out.append(item.rsplit(".", 1)[1])  # test_add_over_weekend
    return out


def _texts(e: Edit) -> list[str]:
    """Every string an edit carries, nested option values included."""
    out = [s for s in (e.slot, e.skill, e.text, e.why) if s]

    def walk(v: Any) -> None:
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            for k, x in v.items():
                out.append(str(k))
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif v is not None:
            out.append(str(v))

    walk(e.value)
    return out
