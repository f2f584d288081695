"""The README's and docs' claims that code can check, checked: the layer order, the records'
schema version, the registered names and kinds, and the Python API's names and parameters.

Each test reads the sentence or table a reader sees, so a change to the code that leaves
the docs behind fails here, naming the file and what differs.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable
from pathlib import Path

import pytest

import tackroom
from tackroom.core import registry

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def read(name: str) -> str:
    return (ROOT / name).read_text()


def words(listing: str) -> set[str]:
    """The names in a prose list: ``a, `b` or c (note) | d`` -> {a, b, c, d}."""
    listing = re.sub(r"\([^)]*\)", "", listing).replace("`", "")
    parts = re.split(r",|\||\bor\b|\band\b", listing)
    return {p.strip().strip('"') for p in parts if p.strip()}


def one_match(pattern: str, text: str, where: str) -> re.Match[str]:
    found = list(re.finditer(pattern, text, re.MULTILINE))
    assert len(found) == 1, f"{where}: expected one match of {pattern!r}, found {len(found)}"
    return found[0]


# ---------------------------------------------------------------------------------- layers
def test_readme_states_the_layer_order_the_structure_test_checks() -> None:
    from test_structure import LAYERS

    line = one_match(r"^core ←.*$", read("README.md"), "README.md Layout").group(0)
    stated = [tuple(u.strip() for u in layer.split(",")) for layer in line.split("←")]
    assert stated == [tuple(layer) for layer in LAYERS], (
        "README.md's Layout order differs from tests/test_structure.py's LAYERS:\n"
        f"  README: {stated}\n  LAYERS: {list(LAYERS)}")


def test_readme_layout_lists_every_package() -> None:
    listed = set(re.findall(r"^tackroom/(\w+)/", read("README.md"), re.MULTILINE))
    packages = {p.name for p in (ROOT / "tackroom").iterdir()
                if (p / "__init__.py").is_file()}
    assert listed == packages, (f"README.md Layout: missing {sorted(packages - listed)}, "
                                f"stale {sorted(listed - packages)}")


# ---------------------------------------------------------------------------------- records
def test_records_doc_states_the_schema_version() -> None:
    from tackroom.records.schema import SCHEMA_VERSION

    stated = one_match(r"^## Schema \(version (\d+)\)", read("docs/records.md"),
                       "docs/records.md").group(1)
    assert int(stated) == SCHEMA_VERSION, (
        f"docs/records.md says schema version {stated}; tackroom/records/schema.py has "
        f"{SCHEMA_VERSION}")


# ---------------------------------------------------------------------------------- registry
def test_extending_doc_lists_every_kind() -> None:
    stated = re.findall(r"^\| `(\w+)` \|", read("docs/extending.md"), re.MULTILINE)
    assert sorted(stated) == sorted(registry.KINDS), (
        f"docs/extending.md's kinds {sorted(stated)} != the registry's {sorted(registry.KINDS)}")


def _cell(doc: str, key: str, column: int = 3) -> Callable[[], set[str]]:
    """The names in column ``column`` of the key table row of ``key``."""
    def names() -> set[str]:
        row = one_match(rf"^\| `{re.escape(key)}` \|.*$", read(doc), doc).group(0)
        return words(row.split("|")[column].rpartition(" — ")[2])  # "what it is — names"
    return names


def _line(doc: str, pattern: str) -> Callable[[], set[str]]:
    """The names in the first group of ``pattern``'s first match in ``doc``."""
    def names() -> set[str]:
        found = re.search(pattern, read(doc), re.MULTILINE)
        assert found, f"{doc}: no line matches {pattern!r}"
        return words(found.group(1))
    return names


def _bullets(doc: str, names: list[str]) -> Callable[[], set[str]]:
    """The names documented as ``- `name` —`` bullets, among the candidates ``names``."""
    return lambda: {n for n in names if re.search(rf"^- `{re.escape(n)}` —", read(doc),
                                                  re.MULTILINE)}


#: Where the docs list each kind's names, as a reader finds them.
DOCUMENTED: dict[str, Callable[[], set[str]]] = {
    "suite": lambda: {w.split(" ")[0] for w in words(one_match(
        r"^tackroom/suites/ +(.*)$", read("README.md"), "README.md").group(1))},
    "policy": _line("README.md", r"^tackroom/policies/ +the registered backends: ([^;]*)"),
    "algorithm": _cell("docs/training.md", "algo.algorithm"),
    "advantage": lambda: set(re.findall(r"(\w+) =", one_match(
        r"^\| `grouping\.group` \|.*$", read("docs/training.md"), "docs/training.md").group(0)))
    | _cell("docs/training.md", "grouping.normalise")(),
    "tracker": _cell("docs/training.md", "run.log_to"),
    "proposer": _line("docs/optimize.md", r"`tackroom list\s+proposer`\): (.*?)\. "),
    "acceptance": _line("docs/optimize.md", r'^acceptance = "greedy" +# (.*)$'),
    "decision_model": _bullets("docs/delegation.md", ["logistic", "gbm", "lm", "mlp"]),
    "sandbox": lambda: set(re.findall(r"--sandbox ([a-z]+)", read("docs/terminal.md")))
    | {"bubblewrap"},  # the default, named in prose
}


@pytest.mark.parametrize("kind", sorted(DOCUMENTED))
def test_documented_names_are_the_registered_ones(kind: str) -> None:
    documented, registered = DOCUMENTED[kind](), set(registry.names(kind))
    assert documented == registered, (
        f"{kind}: documented but not registered {sorted(documented - registered)}; "
        f"registered but not documented {sorted(registered - documented)}")


@pytest.mark.parametrize("kind", sorted(registry.KINDS))
def test_every_registered_name_appears_in_the_docs(kind: str) -> None:
    text = read("README.md") + "".join(p.read_text() for p in sorted(DOCS.glob("*.md")))
    missing = [n for n in registry.names(kind)
               if not re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text)]
    assert not missing, f"registered {kind} names no doc mentions: {missing}"


# ---------------------------------------------------------------------------------- the API
def api_names() -> list[str]:
    return re.findall(r"^\| \[`tackroom\.(\w+)`\]", read("docs/api.md"), re.MULTILINE)


def test_every_api_name_in_the_table_exists() -> None:
    names = api_names()
    assert len(names) >= 15
    missing = [n for n in names if not hasattr(tackroom, n)]
    assert not missing, f"docs/api.md lists names tackroom does not have: {missing}"


def test_the_store_is_always_the_keyword_store() -> None:
    # docs/api.md: "The record store is always the keyword `store=`".
    wrong = []
    for name in api_names():
        obj = getattr(tackroom, name)
        fns = [obj.open] if inspect.isclass(obj) and hasattr(obj, "open") else [obj]
        for fn in filter(callable, fns):  # not callable: test_documented_calls says so
            params = inspect.signature(fn).parameters
            if {"db", "db_path", "database"} & set(params):
                wrong.append(f"tackroom.{name}{inspect.signature(fn)}")
    assert not wrong, "docs/api.md says the store is always store=; these differ:\n  " + \
        "\n  ".join(wrong)


def test_the_api_functions_live_in_tackroom_app() -> None:
    # docs/api.md: "They are importable from `tackroom` ... and live in `tackroom/app/`."
    where = {n: getattr(getattr(tackroom, n), "__module__", None)
             or getattr(tackroom, n).__name__ for n in api_names()}  # a module has no __module__
    elsewhere = {n: w for n, w in where.items() if not w.startswith("tackroom.app")}
    assert not elsewhere, f"docs/api.md says tackroom/app/; these live elsewhere: {elsewhere}"


def _documented_calls() -> list[tuple[str, ast.Call, int]]:
    """Every ``tackroom.NAME(...)`` / ``tackroom.Run.open(...)`` call in docs/api.md's
    Python blocks, with the line of its block."""
    text = read("docs/api.md")
    calls = []
    for m in re.finditer(r"```python\n(.*?)```", text, re.DOTALL):
        line = text[:m.start()].count("\n") + 2
        for node in ast.walk(ast.parse(m.group(1))):
            if isinstance(node, ast.Call):
                dotted = ast.unparse(node.func)
                if re.fullmatch(r"tackroom\.\w+(\.open)?", dotted):
                    calls.append((dotted, node, line + node.lineno - 1))
    return calls


def test_documented_calls_match_the_signatures() -> None:
    calls = _documented_calls()
    assert len(calls) >= 15
    bad = []
    for dotted, call, line in calls:
        obj: object = tackroom
        for part in dotted.split(".")[1:]:
            obj = getattr(obj, part, None)
        if obj is None or not callable(obj):
            bad.append(f"docs/api.md:{line}: {dotted} does not exist")
            continue
        sig = inspect.signature(obj)
        try:  # placeholders stand for the documented arguments' values
            sig.bind(*[None] * len(call.args), **{k.arg: None for k in call.keywords if k.arg})
        except TypeError as e:
            bad.append(f"docs/api.md:{line}: {dotted}({ast.unparse(call)[len(dotted) + 1:-1]})"
                       f" does not fit {dotted}{sig}: {e}")
    assert not bad, "\n".join(bad)
