"""Records converted in a process of their own: the same rows, nothing lost, secrets kept out.

The runner's writer hands batches of finished episodes to a
:class:`~tackroom.records.converter.RowConverter` child when many episodes are in
flight (``run_cells(writer="process")``, or ``"auto"`` from ``OFFLOAD_AT``). These
tests run real episodes (the toy suite, the scripted expert and a model that never
answers in the format) through both writers and compare what the store holds.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tackroom.core import Outcome, Sampling
from tackroom.core.episode import Episode, Turn
from tackroom.core.secrets import register_secret
from tackroom.harness.spec import load_harness
from tackroom.policies import make_policy
from tackroom.records import RecordStore
from tackroom.records.converter import ConverterLost, RowConverter, convert_batch
from tackroom.runner import grid
from tackroom.runner.grid import plan_grid, run_cells
from tackroom.suites import get_suite

TOY = get_suite("toy")
TASKS = [t for t in TOY.tasks() if t.id in ("click-button", "enter-text")]


def _run(store: RecordStore, writer: str, seeds: range = range(12)) -> list[Episode]:
    """Real episodes through ``run_cells`` with ``writer``; the episodes as they ended."""
    harnesses = [load_harness("som-tools"), load_harness("html-commands")]
    plan = plan_grid(TASKS, harnesses, [make_policy("expert")], seeds, Sampling())
    store.start_run("r", command="eval", config={}, n_planned=len(plan.cells))
    return asyncio.run(run_cells(plan.cells, TOY, "r", store=store, concurrency=8,
                                 writer=writer))


def _dump(store: RecordStore) -> list[tuple]:
    out = []
    for ep in sorted(store.iter_episodes("r"), key=lambda e: e.episode_id):
        d = ep.to_dict()
        d.pop("recorded_at", None)
        out.append((ep.episode_id, ep.outcome, d["turns"], d["meta"], ep.n_turns))
    return out


def _recorded_on_the_thread(tmp_path: Path, eps: list[Episode]) -> list[tuple]:
    """What the in-thread path (``RecordStore.append``) stores for the same episodes."""
    with RecordStore(tmp_path / "thread.duckdb") as a:
        a.start_run("r", command="eval", config={}, n_planned=len(eps))
        for ep in eps:
            a.append(ep)
        a.flush()
        return _dump(a)


def test_the_process_writer_records_what_the_thread_writer_does(tmp_path: Path):
    with RecordStore(tmp_path / "process.duckdb") as b:
        eps = _run(b, "process")
        got = _dump(b)
    assert len(eps) == 2 * 2 * 12
    assert got == _recorded_on_the_thread(tmp_path, eps)
    # The episodes ran for real: the expert solves the toy tasks in several turns.
    assert all(o is Outcome.SUCCESS for _, o, *_ in got)
    assert any(n > 1 for *_, n in got)


def test_the_converter_makes_the_tables_the_store_would(tmp_path: Path):
    with RecordStore(tmp_path / "src.duckdb") as src:
        eps = _run(src, "thread", range(3))
    conv = RowConverter(tmp_path / "blobs")
    try:
        got = conv.convert(eps, 123.0)
    finally:
        conv.close()
    want = convert_batch(eps, 123.0, None)
    assert got[0].equals(want[0]) and got[1].equals(want[1])
    assert got[0].num_rows == len(eps) and got[1].num_rows == sum(e.n_turns for e in eps)


def _secret_episode(secret: str) -> Episode:
    turn = Turn(index=0, messages=[{"role": "user", "content": f"use {secret} please"}],
                raw_text=f"I will use {secret}")
    return Episode(episode_id="e1", run_id="r", task="toy/x", suite="toy", harness="h",
                   harness_hash="0", policy="p", seed=0, outcome=Outcome.FAILURE,
                   turns=[turn])


def test_secrets_registered_in_the_parent_are_redacted_by_the_child(tmp_path: Path):
    secret = "zq-live-secret-7f3a9c1e"
    register_secret(secret)
    conv = RowConverter(tmp_path / "blobs")
    try:
        eps, turns = conv.convert([_secret_episode(secret)], 0.0)
    finally:
        conv.close()
    text = str(turns.to_pylist()) + str(eps.to_pylist())
    assert secret not in text and "[redacted]" in text


def test_a_bad_episode_is_refused_with_the_reason(tmp_path: Path):
    bad = _secret_episode("x")
    bad.task = ""
    conv = RowConverter(tmp_path / "blobs")
    try:
        with pytest.raises(ValueError, match="task must be a non-empty string"):
            conv.convert([bad], 0.0)
        # The child lives on: the next batch converts.
        assert conv.convert([_secret_episode("y")], 0.0)[0].num_rows == 1
    finally:
        conv.close()


def test_what_pickle_cannot_take_is_refused_without_losing_the_child(tmp_path: Path):
    odd = _secret_episode("y")
    odd.meta = {"hook": lambda: None}  # the store writes str() of it; pickle cannot
    conv = RowConverter(tmp_path / "blobs")
    try:
        with pytest.raises(ValueError, match="cannot hand the batch"):
            conv.convert([odd], 0.0)
        assert conv.convert([_secret_episode("y")], 0.0)[0].num_rows == 1
    finally:
        conv.close()
    # Through the runner's writer: converted on the thread instead, and recorded.
    with RecordStore(tmp_path / "s.duckdb") as store:
        store.start_run("r", command="eval", config={}, n_planned=1)
        w = grid._Writer(store, backlog=4, offload=True)

        async def go() -> None:
            await w.add(odd)
            w.flush()  # in the loop, as run_cells does

        asyncio.run(go())
        assert store.count("r") == 1 and w.offloaded == 0


def test_a_dead_converter_says_so_and_a_closed_one_too(tmp_path: Path):
    conv = RowConverter(tmp_path / "blobs")
    assert conv._proc is not None
    conv._proc.kill()
    conv._proc.wait()
    with pytest.raises(ConverterLost):
        conv.convert([_secret_episode("y")], 0.0)
    conv.close()
    with pytest.raises(ConverterLost):
        conv.convert([_secret_episode("y")], 0.0)


def test_a_run_whose_converter_dies_loses_no_episode(tmp_path: Path, monkeypatch):
    real = RowConverter.convert
    calls = []

    def dies_at_the_second_batch(self, episodes, now):
        calls.append(len(episodes))
        if len(calls) == 2 and self._proc is not None:
            self._proc.kill()
            self._proc.wait()
        return real(self, episodes, now)

    monkeypatch.setattr(RowConverter, "convert", dies_at_the_second_batch)
    monkeypatch.setattr(grid, "WRITE_BATCH", 4)  # several batches in a small run
    with RecordStore(tmp_path / "b.duckdb") as b:
        eps = _run(b, "process")
        got = _dump(b)
    assert len(calls) == 2  # after the loss, the rest of the run converts on the thread
    assert len(got) == 48 and got == _recorded_on_the_thread(tmp_path, eps)


def test_a_bad_episode_fails_the_process_writers_run_with_the_stores_error(tmp_path: Path):
    class Breaks:
        """A policy-free run: run_cells records whatever the executor returns."""

        def __init__(self) -> None:
            self.n = 0

        async def run(self, cell, run_id):
            self.n += 1
            ep = _secret_episode("z")
            ep.episode_id = f"e{self.n}"
            ep.task = "" if self.n == 3 else "toy/x"
            return ep

        async def aclose(self) -> None:
            return None

    plan = plan_grid(TASKS[:1], [load_harness("som-tools")], [make_policy("expert")],
                     range(6), Sampling())
    with RecordStore(tmp_path / "s.duckdb") as store:
        store.start_run("r", command="eval", config={}, n_planned=6)
        with pytest.raises(ValueError, match="task must be a non-empty string"):
            asyncio.run(run_cells(plan.cells, TOY, "r", store=store, concurrency=1,
                                  executor=Breaks(), writer="process"))


def test_auto_offloads_from_the_threshold_and_a_bad_setting_is_refused():
    plan = plan_grid(TASKS[:1], [load_harness("som-tools")], [make_policy("expert")],
                     range(1), Sampling())
    with pytest.raises(ValueError, match="writer must be"):
        asyncio.run(run_cells(plan.cells, TOY, "r", writer="fast"))
    assert grid.OFFLOAD_AT >= 64  # small runs never pay for the child's start-up


def test_a_large_evaluation_converts_in_the_child_and_records_every_episode(
        tmp_path: Path, monkeypatch):
    import tackroom

    real = RowConverter.convert
    converted: list[int] = []

    def counting(self, episodes, now):
        converted.append(len(episodes))
        return real(self, episodes, now)

    monkeypatch.setattr(RowConverter, "convert", counting)
    n = grid.OFFLOAD_AT
    run = tackroom.evaluate(suite="toy", tasks=["click-button", "enter-text"],
                            harnesses=["som-tools"], policies=["expert"], seeds=range(n),
                            concurrency=n, store=tmp_path / "big.duckdb")
    assert sum(converted) == 2 * n  # every episode's rows were made in the child
    with RecordStore(tmp_path / "big.duckdb") as store:
        assert store.count(run.id) == 2 * n
        assert store.count(run.id, outcome="success") == 2 * n
