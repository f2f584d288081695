"""The episode browser's payload: every recorded episode listed, the turns of some embedded.

:func:`browser_data` returns two JSON-able blocks for the HTML report
(:mod:`tackroom.report.html`): the episode *index* (one compact row per
recorded episode, superseded attempts included, with lookup tables for the
repeated names) and the *turns* of at most ``limit`` episodes, a spread over
every (policy, harness, task, outcome) group. Message content is slimmed:
long strings are cut at :data:`MAX_TEXT`; images (robot screenshots) are embedded
as ``data:`` URLs — the report stays one self-contained file — until
:data:`MAX_IMAGE_BYTES` of them are, and replaced by a note after that.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from tackroom.core.episode import Episode, Turn
from tackroom.report.view import OUTCOMES, ReportView, _num

__all__ = ["browser_data", "MAX_TEXT", "MAX_LIST_ERROR"]

#: Longest text (characters) kept per field of an embedded turn.
MAX_TEXT = 20_000
#: Longest error text kept per row of the episode list.
MAX_LIST_ERROR = 300
#: Most bytes of images (as data URLs) embedded in one report, and in one image.
MAX_IMAGE_BYTES = 48 * 2**20
MAX_ONE_IMAGE = 4 * 2**20


_RASTER = tuple(f"data:image/{t};base64," for t in ("png", "jpeg", "webp", "gif"))


class _Images:
    """The report's images: each distinct data URL embedded once (a history window
    shows the same screenshot on several turns), while the budget lasts."""

    def __init__(self, budget: int = MAX_IMAGE_BYTES) -> None:
        self.left = budget
        self.urls: list[str] = []
        self._index: dict[str, int] = {}
        self.omitted = 0

    def embed(self, url: Any) -> int | None:
        """The image's index in :attr:`urls` (``None``: not embedded)."""
        if not (isinstance(url, str) and url.startswith(_RASTER)):
            return None  # raster images only (no SVG: nothing in the report is active)
        if url in self._index:
            return self._index[url]
        if len(url) > MAX_ONE_IMAGE or len(url) > self.left:
            self.omitted += 1
            return None
        self.left -= len(url)
        self._index[url] = len(self.urls)
        self.urls.append(url)
        return self._index[url]


def _cut(text: Any, limit: int = MAX_TEXT) -> Any:
    if not isinstance(text, str) or len(text) <= limit:
        return text
    return text[:limit] + f"\n… [{len(text) - limit} more characters not embedded]"


def _slim(obj: Any, images: _Images | None = None) -> Any:
    """Message content with long strings cut, and images embedded while ``images``
    has budget left (else, or without ``images``, a note in their place)."""
    if isinstance(obj, str):
        return _cut(obj)
    if isinstance(obj, list):
        return [_slim(v, images) for v in obj]
    if isinstance(obj, dict):
        kind = obj.get("type")
        if kind in ("image_url", "input_image", "image"):
            url = obj.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            k = images.embed(url) if images is not None else None
            if k is not None:
                return {"type": kind, "img": k}
            size = len(url) if isinstance(url, str) else 0
            why = ("stored image missing" if isinstance(url, str)
                   and url.startswith("tackroom-blob:") else "not embedded")
            return {"type": kind, "omitted": f"image, {size // 1024} kB, {why}"}
        return {k: _slim(v, images) for k, v in obj.items()}
    return obj


def _turn_json(t: Turn, prev: list[dict[str, Any]], images: _Images | None = None
               ) -> dict[str, Any]:
    msgs = t.messages or []
    keep = 0
    for a, b in zip(prev, msgs, strict=False):
        if a != b:
            break
        keep += 1
    d: dict[str, Any] = {"k": keep, "m": [_slim(m, images) for m in msgs[keep:]],
                         "raw": _cut(t.raw_text), "r": _num(t.reward)}
    if t.tool_calls:
        d["tc"] = _slim(t.tool_calls)
    if t.parse_error:
        d["pe"] = _cut(t.parse_error)
    if t.feedback:
        d["fb"] = _cut(t.feedback)
    if t.actions:
        d["a"] = _slim(t.actions)
    if t.action_error:
        d["ae"] = _cut(t.action_error)
    if t.observation is not None:
        d["o"] = _cut(t.observation)
    if t.prompt_tokens or t.completion_tokens:
        d["pt"], d["ct"] = t.prompt_tokens, t.completion_tokens
    d["tp"], d["te"], d["th"] = _num(t.t_policy), _num(t.t_env), _num(t.t_harness)
    if t.logprobs:
        finite = [x for x in t.logprobs if math.isfinite(x)]
        d["lp"] = [len(t.logprobs), _num(sum(finite) / len(finite)) if finite else None]
    if t.adapter:
        d["ad"] = t.adapter
    return d


def _episode_json(ep: Episode, images: _Images | None = None) -> dict[str, Any]:
    turns: list[dict[str, Any]] = []
    prev: list[dict[str, Any]] = []
    for t in ep.turns:
        turns.append(_turn_json(t, prev, images))
        prev = t.messages or []
    return {"instruction": _cut(ep.instruction), "error": _cut(ep.error), "turns": turns}


def _pick_embedded(rows: Sequence[Mapping[str, Any]], limit: int) -> list[int]:
    """Indexes of the rows whose turns are embedded: all if they fit, else a spread.

    Round-robin over (policy, harness, task, outcome) groups, so every group
    (the failures of a cell as well as its successes) has examples.
    """
    if limit <= 0:
        return []
    if len(rows) <= limit:
        return list(range(len(rows)))
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        groups[(r["policy"], r["harness"], r["task"], r["outcome"])].append(i)
    queues = [groups[k] for k in sorted(groups)]
    chosen: list[int] = []
    depth = 0
    while len(chosen) < limit:
        added = False
        for q in queues:
            if depth < len(q):
                chosen.append(q[depth])
                added = True
                if len(chosen) >= limit:
                    break
        if not added:
            break
        depth += 1
    return sorted(chosen)


def browser_data(store: Any, view: ReportView, limit: int
                 ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The episode list (every recorded episode of ``view``) and the turns of at most ``limit``.

    ``store`` is the record store ``view`` was built from: the turns are read
    from it here, only for the episodes embedded.
    """
    data, final_ids = view.data, view.final_ids
    h_pos = {h: i for i, h in enumerate(data["harnesses"])}
    p_pos = {p: i for i, p in enumerate(data["policies"])}
    rows = sorted(view.rows, key=lambda r: (r["task"], h_pos[r["harness"]], p_pos[r["policy"]],
                                       r["seed"], r["attempt"], r["run_id"]))
    lookups: dict[str, list[str]] = {
        "run": list(data["run_ids"]), "task": list(data["tasks"]),
        "harness": list(data["harnesses"]), "policy": list(data["policies"]),
        "outcome": list(OUTCOMES)}
    for r in rows:
        if r["outcome"] not in lookups["outcome"]:
            lookups["outcome"].append(r["outcome"])
    pos = {k: {v: i for i, v in enumerate(vs)} for k, vs in lookups.items()}
    embedded = set(_pick_embedded(rows, limit))
    cols = ["run", "id", "task", "harness", "policy", "seed", "attempt", "outcome", "reward",
            "n_turns", "tokens", "parse_errors", "error", "turns_embedded", "final"]
    out_rows = []
    for i, r in enumerate(rows):
        err = r.get("error")
        out_rows.append([
            pos["run"][r["run_id"]], r["episode_id"], pos["task"][r["task"]],
            pos["harness"][r["harness"]], pos["policy"][r["policy"]], r["seed"], r["attempt"],
            pos["outcome"][r["outcome"]], _num(r.get("reward")), r.get("n_turns") or 0,
            int(r.get("prompt_tokens") or 0) + int(r.get("completion_tokens") or 0),
            r.get("parse_errors") or 0, _cut(err, MAX_LIST_ERROR) if err else None,
            1 if i in embedded else 0, 1 if id(r) in final_ids else 0])
    suites = {t.split("/", 1)[0] + "/" for t in data["tasks"] if "/" in t}
    index = {"cols": cols, "rows": out_rows, "lookups": lookups, "embedded": len(embedded),
             "limit": limit, "strip": suites.pop() if len(suites) == 1 else ""}

    turns: dict[str, Any] = {}
    by_run: dict[str, list[str]] = defaultdict(list)
    for i in sorted(embedded):
        by_run[rows[i]["run_id"]].append(rows[i]["episode_id"])
    images = _Images()
    for rid, ids in by_run.items():
        for ep in store.iter_episodes(rid, episode_id=ids):
            turns[f"{rid}/{ep.episode_id}"] = _episode_json(ep, images)
    # The data URLs that embedded image parts ({"img": k}) point to, and how many
    # images were left out for the budget.
    index["image_urls"] = images.urls
    index["images"] = [len(images.urls), images.omitted]
    return index, turns

