"""Every example checks its extras first: a missing package is one line naming the extra."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

from tackroom.core.errors import ConfigError
from tackroom.core.extras import EXTRA_MODULES, missing_modules, require_extra

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("examples/*/run.py"))


def run_without(script: str, hidden: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    """``script ARGS`` in a fresh interpreter where the modules ``hidden`` cannot be imported
    (``sys.modules[name] = None`` is how Python marks a module as not importable)."""
    code = ("import runpy, sys\n"
            f"for name in {hidden!r}:\n    sys.modules[name] = None\n"
            f"sys.argv = [{script!r}, *{list(args)!r}]\n"
            f"runpy.run_path({script!r}, run_name='__main__')\n")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def the_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def test_the_table_names_every_extra_of_the_package() -> None:
    declared = set(importlib.metadata.metadata("tackroom").get_all("Provides-Extra") or [])
    assert set(EXTRA_MODULES) == declared


def test_the_critic_quick_run_names_its_extra_when_imageio_is_missing() -> None:
    line = the_error_line(run_without("examples/critic/run.py", ["imageio"], "--quick"))
    assert line.startswith("error: examples/critic: needs the critic extra (missing: ")
    assert "imageio" in line and "pip install -e '.[critic]'" in line


@pytest.mark.parametrize("script", [e for e in EXAMPLES if "skill-audit" not in e])
def test_every_example_checks_torch_before_it_needs_it(script: str) -> None:
    line = the_error_line(run_without(script, ["torch"], "--help"))
    assert "torch" in line and "train" in line and script.split("/")[1] in line


def test_skill_audit_on_miniwob_needs_the_web_extra() -> None:
    line = the_error_line(run_without("examples/skill-audit/run.py", ["selenium"],
                                      "--suite", "miniwob"))
    assert "needs the web extra (missing: selenium)" in line


def test_require_extra_through_the_api() -> None:
    assert missing_modules("train") == []  # `make` installs it
    with pytest.raises(ConfigError, match="unknown extra 'gpu'"):
        require_extra("gpu", who="a script")
    sys.modules["jinja2"], saved = None, sys.modules.get("jinja2")  # type: ignore[assignment]
    try:
        with pytest.raises(ConfigError) as e:
            require_extra("train", "delegation", who="a script")
    finally:
        if saved is None:
            del sys.modules["jinja2"]
        else:
            sys.modules["jinja2"] = saved
    assert e.value.line() == ("a script: needs the train extra (missing: jinja2) — install it: "
                              ".venv/bin/pip install -e '.[train]'")
