"""Does a policy of a ``run.py`` work directory read the target, or only the element kind?

For every episode of π_0's records and of each held-out evaluation in the work
directory's store, the final click is placed among the target's clickable
siblings (the buttons of ``click-button``, the links of ``click-link``;
``tackroom.suites.toy.outcomes.final_click``). Printed per run and task:

* ``on kind``: the share of episodes whose click hit one of those siblings;
* ``right | on kind``: the share of those that hit the right one;
* ``chance``: what ``right | on kind`` would be if the clicked position were
  independent of the target's position (the two observed marginals, per page size).

The expert episodes π_0 was SFT'd on are the check: 100% on both.
``right | on kind`` ≈ ``chance`` means the policy carries no information about
which element the instruction names: a reward can then only teach it to click
an element of the right kind (which lifts success *and* the near miss), not to
pick the named one — the per-instance redirection the verifier gate predicts.

Usage: .venv/bin/python examples/tilt/targets.py --workdir tilt-run
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from pathlib import Path

from tackroom.core.episode import Episode, Outcome


def final_attempts(store: object, run_id: str) -> list[Episode]:
    """The scored final attempts of ``run_id`` (as ``tackroom.analysis.tilt.from_records``)."""
    latest: dict[tuple[str, str, str, int], Episode] = {}
    for ep in store.iter_episodes(run_id):  # type: ignore[attr-defined]
        if ep.outcome is Outcome.INFRA_ERROR:
            continue
        key = (ep.task, ep.harness, ep.policy, int(ep.seed))
        if key not in latest or ep.attempt >= latest[key].attempt:
            latest[key] = ep
    return list(latest.values())


def positions(episodes: list[Episode]) -> dict[str, list[tuple[int, int, int | None]]]:
    """Per task: (siblings on the page, the target's index, the clicked index or None)."""
    from tackroom.suites.toy.outcomes import final_click

    out: dict[str, list[tuple[int, int, int | None]]] = defaultdict(list)
    for ep in episodes:
        clicked, right = final_click(ep)
        if right is None or right.parent is None:
            continue
        sib = [c for c in right.parent.children if c.on_click is not None]
        out[ep.task].append((len(sib), sib.index(right),
                             sib.index(clicked) if clicked in sib else None))
    return out


def summary(rows: list[tuple[int, int, int | None]]) -> str:
    on = [r for r in rows if r[2] is not None]
    if not on:
        return f"on kind 0.0% of {len(rows)}"
    hit = sum(r[2] == r[1] for r in on) / len(on)
    clicked = Counter((n, c) for n, _, c in on)
    target = Counter((n, t) for n, t, _ in rows)
    per_size = Counter(n for n, _, _ in rows)
    chance = sum(k * target[(n, c)] / per_size[n] for (n, c), k in clicked.items()) / len(on)
    return (f"on kind {100 * len(on) / len(rows):.1f}% of {len(rows)}, "
            f"right | on kind {100 * hit:.1f}% (chance {100 * chance:.1f}%)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default="tilt-run")
    a = ap.parse_args()
    from tackroom.records.store import RecordStore

    with RecordStore(str(Path(a.workdir) / "runs.duckdb")) as st:
        ids = [r["run_id"] for r in st.runs()]
        groups = {"expert (SFT data)": [i for i in ids if i == "expert"],
                  "π_0 records": sorted(i for i in ids if i.startswith("start-"))}
        groups |= {i.removesuffix("-0"): [i] for i in sorted(ids) if i.startswith("eval-")}
        for name, run_ids in groups.items():
            eps = [ep for rid in run_ids for ep in final_attempts(st, rid)]
            for task, rows in sorted(positions(eps).items()):
                print(f"{name:<22} {task:<18} {summary(rows)}")


if __name__ == "__main__":
    main()
