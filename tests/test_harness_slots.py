"""The harness slots' typed keys live on the settings base: defaults, checks and docs agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from tackroom.core.errors import HarnessError
from tackroom.harness.slots import BudgetSettings, LoopSettings
from tackroom.harness.spec import DEFAULTS, load_harness

DOC = Path(__file__).resolve().parents[1] / "docs" / "harnesses.md"


@pytest.mark.parametrize("cls", [LoopSettings, BudgetSettings])
def test_the_docs_key_tables_are_the_slot_settings(cls) -> None:
    """docs/harnesses.md lists exactly the [loop] and [budget] keys, with their defaults."""
    doc = DOC.read_text()
    start, end = f"<!-- settings:{cls.__name__} -->\n", f"<!-- /settings:{cls.__name__} -->"
    assert start in doc and end in doc
    table = doc.split(start, 1)[1].split(end, 1)[0]
    assert table == cls.key_table(), (
        f"docs/harnesses.md's key table is stale: paste {cls.__name__}.key_table() between "
        "the markers")
    keys = [row.split("`")[1] for row in table.splitlines()[2:]]
    assert keys == [cls.key_of(n) for n in cls.specs()]


def test_a_harness_without_loop_or_budget_gets_the_declared_defaults(tmp_path) -> None:
    p = tmp_path / "bare.toml"
    p.write_text('[observation]\nrenderer = "html"\n[actions]\ninterface = "element_refs"\n'
                 'parser = "json"\n')
    h = load_harness(str(p))
    assert h.loop == {s.key: s.default for s in LoopSettings.specs().values()}
    assert h.budget == {s.key: s.default for s in BudgetSettings.specs().values()}
    assert h.loop == DEFAULTS["loop"] and h.budget["turns"] == 12
    assert h.budget["wall_seconds"] == 300.0 and isinstance(h.budget["wall_seconds"], float)


def test_values_are_kept_as_written_except_whole_floats_for_integer_keys(tmp_path) -> None:
    p = tmp_path / "v.toml"
    p.write_text('extends = "som-tools"\n[loop]\nhistory = 2.0\nmax_consecutive_errors = 3\n'
                 '[budget]\nwall_seconds = 60\ntokens = 1e6\n')
    h = load_harness(str(p))
    # An integer key holds an int (the loop slices and ranges with it) ...
    assert h.loop["history"] == 2 and isinstance(h.loop["history"], int)
    # ... and a number key keeps what the file says: the content (and its hash) is the file's.
    assert h.budget["wall_seconds"] == 60 and isinstance(h.budget["wall_seconds"], int)
    assert h.budget["tokens"] == 1e6 and isinstance(h.budget["tokens"], float)
    assert h.loop["max_consecutive_errors"] == 3


@pytest.mark.parametrize("body, where, words", [
    ("[loop]\nhistory = 2.5\n", "[loop].history", "loop.history = 2.5 is not an integer"),
    ("[loop]\nactions_per_turn = true\n", "[loop].actions_per_turn", "is not an integer"),
    ("[budget]\nwall_seconds = 700000\n", "[budget].wall_seconds",
     "give a number from 0 to 604,800"),
    ("[budget]\nstate_to_model = 1\n", "[budget].state_to_model", "a boolean (true or false)"),
    ("[budget]\ntokens = nan\n", "[budget].tokens", "is not a finite number"),
    ("[budget]\ntokens = " + "9" * 400 + "\n", "[budget].tokens", "is not a finite number"),
    ("[loop]\non_action_error = \"reflct\"\n", "[loop].on_action_error",
     "did you mean 'reflect'?"),
    ("[observation]\nmax_chars = -1\n", "[observation].max_chars", "from 0 to 1,000,000"),
    ("[observation]\noptions = { max_chars = -1 }\n", "[observation].options.max_chars",
     "out of range"),
    ("[actions]\nparser = \"jsn\"\n", "[actions].parser", "did you mean 'json'?"),
])
def test_a_bad_typed_key_is_one_harness_error_at_its_key(tmp_path, body, where, words) -> None:
    p = tmp_path / "bad.toml"
    p.write_text('extends = "som-tools"\n' + body)
    with pytest.raises(HarnessError) as e:
        load_harness(str(p))
    assert e.value.where == f"{p} {where}", e.value.line()
    assert words in e.value.line() and "\n" not in e.value.line()
