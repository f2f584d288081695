"""tackroom.core.settings: one base that parses, validates, writes and documents settings."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tackroom.core.errors import ConfigError
from tackroom.core.settings import Interval, Settings, setting


@dataclass
class Demo(Settings):
    SECTIONS = ("optim", "run")
    SECTION_ALIASES = {"opt": "optim"}
    DOCS = "docs/demo.md"

    lr: float = setting(1e-5, "optim", "learning rate", bounds="(0, 1]", example="1e-5",
                        why="above 1 only diverges")
    steps: int = setting(100, "optim", "optimiser steps", bounds="[1, 4096]")
    schedule: str = setting("constant", "optim", "schedule",
                            choices=lambda: ["constant", "cosine"])
    clip: float | None = setting(None, "optim", "clip range (none: unclipped)", bounds="> 0")
    out: str = setting("runs/x", "run", "where checkpoints go", key="out_dir")
    tags: list[str] = setting(None, "run", "labels", factory=list)
    fast: bool = setting(False, "run", "skip checks", flag="--fast")

    def check_together(self) -> None:
        if self.schedule == "cosine" and self.steps < 10:
            raise self.fail("steps", "is too short for a cosine schedule", "raise optim.steps")


def test_defaults_round_trip_and_overrides(tmp_path: Path) -> None:
    d = Demo()
    assert (d.lr, d.steps, d.clip, d.tags) == (1e-5, 100, None, [])
    p = tmp_path / "demo.toml"
    p.write_text("[opt]\nsteps = 20\n[run]\nout_dir = \"o\"\n")
    d = Demo.from_toml(p, ["optim.clip=0.5", "tags=a,b", "optim.clip=none", "lr=1"])
    assert (d.steps, d.out, d.tags, d.clip, d.lr) == (20, "o", ["a", "b"], None, 1.0)
    p.write_text(d.to_toml())
    assert Demo.from_toml(p) == d
    assert Demo.from_dict({"optim": {"steps": 7}, "fast": True}).to_dict() == {
        "optim": {"lr": 1.0e-5, "steps": 7, "schedule": "constant"},
        "run": {"out_dir": "runs/x", "tags": [], "fast": True}}


@pytest.mark.parametrize("override, what, where, fix", [
    ("optim.lr=0", "optim.lr = 0.0 is out of range", "override",
     "give a number in (0, 1], e.g. 1e-5 (above 1 only diverges)"),
    ("steps=0", "optim.steps = 0 is out of range", "override",
     "give an integer from 1 to 4,096, e.g. 100"),  # a closed interval: check_number's words
    ("optim.clip=-1", "optim.clip = -1.0 is out of range", "override", "give a number > 0"),
    ("optim.schedule=cosin", "is not allowed (did you mean 'cosine'?)", "override",
     "constant, cosine"),
    ("optim.steps=2.5", "is not an integer", "override", "an integer"),
    ("run.fast=yes", "is not a boolean", "override", "true or false"),
    ("run.outdir=x", "unknown setting 'run.outdir' (did you mean 'run.out_dir'?)",
     "override", "keys in this section"),
    ("optimm.lr=1", "unknown section [optimm] (did you mean [optim]?)", "override", "optim"),
    ("steps", "an override is key=value", "override", "e.g. optim.lr=1e-5"),
    ("stepz=1", "unknown setting 'stepz'", "override", "docs/demo.md"),
])
def test_errors_name_the_key_its_source_and_the_fix(override: str, what: str, where: str,
                                                    fix: str) -> None:
    with pytest.raises(ConfigError) as e:
        Demo.from_toml(None, [override])
    assert what in e.value.what and fix in e.value.fix and override in e.value.where


def test_direct_construction_checks_types_rules_and_flags() -> None:
    with pytest.raises(ConfigError) as e:
        Demo(lr="x")  # type: ignore[arg-type]
    assert e.value.where == "Demo" and "is not a number" in e.value.what
    with pytest.raises(ConfigError) as e:
        Demo(schedule="cosine", steps=5)
    assert "too short" in e.value.what
    assert Demo(steps=10.0).steps == 10  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as e:
        Demo(fast=1)  # type: ignore[arg-type]
    assert e.value.where == "--fast"  # a value given in Python is reported at its flag


def test_key_table_lists_every_key() -> None:
    table = Demo.key_table().splitlines()
    assert table[:2] == ["| key | default | meaning |", "|---|---|---|"]
    assert "| `optim.lr` | 1e-05 | learning rate (in (0, 1]) |" in table
    assert "| `optim.schedule` | \"constant\" | schedule — constant, cosine |" in table
    assert "| `run.out_dir` (`out`) | \"runs/x\" | where checkpoints go |" in table
    assert "| `optim.clip` | unset | clip range (none: unclipped) (> 0) |" in table
    assert len(table) == 2 + 7


def test_intervals() -> None:
    assert 0 not in Interval.parse("(0, 1]") and 1 in Interval.parse("(0, 1]")
    assert 1 not in Interval.parse("[0, 1)") and 0 in Interval.parse("[0, 1)")
    assert -1 not in Interval.parse(">= 0") and 5 in Interval.parse("<= 5")
    assert Interval.parse("[1, 4096]").rule(integer=True) == "from 1 to 4096"
    with pytest.raises(ValueError):
        Interval.parse("0..1")
