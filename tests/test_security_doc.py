"""docs/security.md names a test for every guarantee: each named test must exist.

A row's tests are written ``tests/FILE.py::name`` or ``::name``: a test of a file named
earlier in the same table (the nearest one that has it). A bare ``tests/FILE.py`` names a
whole file.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "security.md"
REF = re.compile(r"`(tests/[\w/]+\.py)?(?:::(\w+))?")


@functools.cache  # a file is named by many rows: parse it once
def _functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def _rows() -> list[tuple[int, str, str]]:
    """Each table row's (line number, guarantee, test cell); ``("", "")`` starts a table."""
    out = []
    for i, line in enumerate(DOC.read_text().splitlines(), 1):
        if line.startswith("## "):
            out.append((i, "", ""))
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("|") and len(cells) == 2 and cells[0] not in ("guarantee", "---|---"):
            if set(cells[0]) <= {"-", "|"}:
                continue
            out.append((i, cells[0], cells[1]))
    return out


def test_every_guarantee_names_a_test_that_exists() -> None:
    rows = _rows()
    assert sum(1 for r in rows if r[1]) > 40, "the tables of docs/security.md were not read"
    missing: list[str] = []
    files: list[Path] = []  # the files named so far in this table, nearest last
    for line, guarantee, tests in rows:
        if not guarantee:
            files = []
            continue
        named = False
        for m in REF.finditer(tests):
            file, name = m.group(1), m.group(2)
            if file:
                if not (ROOT / file).is_file():
                    missing.append(f"line {line}: {file} does not exist")
                    continue
                files.append(ROOT / file)
                named = True
                if name and name not in _functions(ROOT / file):
                    missing.append(f"line {line}: {file}::{name} does not exist")
            elif name:
                named = True
                if not any(name in _functions(f) for f in files):
                    missing.append(f"line {line}: ::{name} is in no file named before it")
        if not named and "tackroom/" not in tests:
            missing.append(f"line {line}: no test for {guarantee[:60]!r}")
    assert not missing, "docs/security.md:\n" + "\n".join(missing)


def test_nothing_is_marked_open() -> None:
    text = DOC.read_text().lower()
    for word in ("| open", "not yet", "todo", "(open)"):
        assert word not in text, f"docs/security.md marks something {word!r}"
