"""The package's import structure: no cycles, and the layers import only downwards.

The graph is read with :mod:`ast` from every ``import`` / ``from … import`` in
each module of ``tackroom/`` — at module level, inside functions, under
``if TYPE_CHECKING:`` alike — plus ``importlib.import_module("literal")``
calls, so a dependency cannot be hidden by moving its import into a function.
Relative imports are resolved against the importing module's package.
"""

from __future__ import annotations

import ast
import functools
import itertools
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "tackroom"
#: Data shipped inside the package (task repositories, task directories), not its code.
DATA_DIRS = ("suites/code/packages", "suites/*/tasks")


@dataclass(frozen=True)
class Import:
    """One imported name as written (absolute), the module it resolves to, and where."""

    name: str
    target: str | None  # the tackroom module it loads; None outside tackroom
    line: int


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    imports: list[Import]

    @property
    def where(self) -> str:
        return str(self.path.relative_to(ROOT.parent))


def _is_data(path: Path) -> bool:
    rel = path.relative_to(ROOT)
    return any(parent.match(d) for parent in rel.parents for d in DATA_DIRS)


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _written(node: ast.AST, package: str) -> list[tuple[str, int]]:
    """The absolute names an import node (or ``import_module`` call) loads."""
    if isinstance(node, ast.Import):
        return [(a.name, node.lineno) for a in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = package.split(".")
            head = ".".join(parts[:len(parts) - node.level + 1])
            base = f"{head}.{base}" if base else head
        # ``from X import a``: X runs, and X.a too when it is a module.
        return [(base, node.lineno)] + [(f"{base}.{a.name}", node.lineno) for a in node.names]
    if (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
                 or isinstance(node.func, ast.Name) and node.func.id == "import_module")):
        return [(node.args[0].value, node.lineno)]
    return []


@functools.cache
def modules() -> dict[str, Module]:
    found: dict[str, Module] = {}
    for path in sorted(ROOT.rglob("*.py")):
        if _is_data(path):
            continue
        name = _module_name(path)
        found[name] = Module(name, path, ast.parse(path.read_text(), str(path)), [])
    for m in found.values():
        package = m.name if m.path.name == "__init__.py" else m.name.rpartition(".")[0]
        for node in ast.walk(m.tree):
            for name, line in _written(node, package):
                target = name
                while target and target not in found:
                    target = target.rpartition(".")[0]
                m.imports.append(Import(name, target or None, line))
    return found


def _runs_on_import(node: ast.AST):
    """The nodes under ``node`` that run when the module is imported.

    Not function bodies, not ``if TYPE_CHECKING:`` blocks.
    """
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            yield from _runs_on_import(ast.Module(body=child.orelse, type_ignores=[]))
            continue
        yield child
        yield from _runs_on_import(child)


def _is_lazy_facade(m: Module) -> bool:
    """A package ``__init__`` that defines ``__getattr__`` and loads, when imported, only core."""
    defines_getattr = any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__"
                          for n in m.tree.body)
    loads = {name for node in _runs_on_import(m.tree) for name, _ in _written(node, m.name)}
    return defines_getattr and all(n == "tackroom" or _under(n, "tackroom.core")
                                   for n in loads if _tackroom(n))


def _edges(exclude: set[str]) -> dict[str, dict[str, int]]:
    """``module -> {imported module: first line}`` among tackroom modules."""
    out: dict[str, dict[str, int]] = {}
    for m in modules().values():
        if m.name in exclude:
            continue
        deps = out.setdefault(m.name, {})
        for imp in m.imports:
            if imp.target and imp.target != m.name and imp.target not in exclude:
                deps.setdefault(imp.target, imp.line)
    return out


def _components(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(edges.get(w, {}))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def _a_cycle(comp: list[str], edges: dict[str, dict[str, int]]) -> list[str]:
    """One cycle through the component's first module, ``a (line) -> b …``, for the message."""
    start, members = comp[0], set(comp)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in edges[v]:
            if w == start:
                path = paths[v] + [start]
                return [f"{a} (line {edges[a][b]})" for a, b in itertools.pairwise(path)] + [start]
            if w in members and w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    return comp


def _violations(rule: str, allowed) -> list[str]:
    """``rule`` and each import that ``allowed(module, import)`` rejects, as ``file:line name``."""
    bad: dict[tuple[str, int], set[str]] = {}
    for m in modules().values():
        for imp in m.imports:
            if not allowed(m, imp):
                bad.setdefault((m.where, imp.line), set()).add(imp.name)
    lines = []
    for (where, line), names in sorted(bad.items()):
        # ``from a.b import c`` names a.b and a.b.c: show the most specific.
        shown = sorted(n for n in names if not any(o.startswith(n + ".") for o in names))
        lines.append(f"  {where}:{line} imports {', '.join(shown)}")
    return [f"{rule}:", *lines] if lines else []


def _tackroom(name: str) -> bool:
    return name == "tackroom" or name.startswith("tackroom.")


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_graph_is_read():
    mods = modules()
    assert {"tackroom", "tackroom.core.episode", "tackroom.harness.spec"} <= set(mods)
    assert not any(".packages." in n or ".tasks." in n for n in mods), "data dirs are skipped"
    spec = mods["tackroom.harness.spec"]
    assert any(i.target == "tackroom.core.errors" for i in spec.imports)


def test_no_import_cycles():
    top = modules()["tackroom"]
    # The top-level package re-exports the API lazily (``__getattr__``): importing it loads
    # nothing but core, so its edges to the API are not a run-time cycle.
    exclude = {"tackroom"} if _is_lazy_facade(top) else set()
    edges = _edges(exclude)
    cycles = _components(edges)
    assert not cycles, "import cycles among tackroom modules:\n" + "\n".join(
        f"  {', '.join(comp)}\n    e.g. {' -> '.join(_a_cycle(comp, edges))}" for comp in cycles)


def test_only_the_cli_imports_the_cli():
    bad = _violations("tackroom.cli is the command line; the rest of the package must not "
                      "import it", lambda m, imp: _under(m.name, "tackroom.cli")
                      or not _under(imp.name, "tackroom.cli"))
    assert not bad, "\n".join(bad)


#: The layers, lowest first: a module imports from its own unit or from a lower layer, never
#: sideways or up — not even inside a function. A unit is a package under ``tackroom/``
#: (``harness``), a top-level module (``serve``), the package itself (``tackroom``, the lazy
#: API facade), or one suite (``suites.*``: each suite package alone; ``suites`` is what they
#: share: the Suite table, Chrome, the reaper). README.md's "Layout" states the same order.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("core",),                                          # the nouns, errors, cache, registry
    ("harness", "images", "agents", "suites", "wire"),  # episode parts; HTTP rules
    ("policies", "records", "sandbox", "testing"),      # who acts; kept; the box; test servers
    ("serve",),                                         # a policy behind HTTP
    ("gateway",),                                       # the recording model gateway
    ("runner",),                                        # the episode loop and the grid
    ("analysis",),                                      # statistics over records
    ("train", "optimize", "lab"),                       # what is done with them
    ("suites.*",),                                      # each suite, registered by name
    ("models",),                                        # `model init` (a corpus from a suite)
    ("delegation", "report"),                           # fit and bench; tables and the page
    ("app",),                                           # the Python API
    ("tackroom",),                                      # the package: the API re-exported
    ("cli",),                                           # parsing plus one call
)
LEVEL = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
#: The longest a module may be, in lines.
MAX_LINES = 700


def unit_of(name: str) -> str:
    """The layer table's name for the unit the module ``name`` belongs to."""
    parts = name.split(".")
    if len(parts) == 1:
        return "tackroom"
    if parts[1] == "suites" and len(parts) >= 3 and (ROOT / "suites" / parts[2]).is_dir():
        return "suites.*"
    return parts[1]


def _suite(name: str) -> str:
    """The suite package a module is in (``tackroom.suites.toy``), or its unit."""
    return ".".join(name.split(".")[:3]) if unit_of(name) == "suites.*" else unit_of(name)


def test_every_module_has_a_layer():
    units = {unit_of(n) for n in modules()}
    missing = sorted(units - set(LEVEL))
    assert not missing, (f"units with no layer in LAYERS (tests/test_structure.py): {missing}; "
                         "place each, and the same in README.md's Layout")
    stale = sorted(set(LEVEL) - units)
    assert not stale, f"LAYERS names units that do not exist: {stale}"


def _allowed(m: Module, imp: Import) -> bool:
    if imp.target is None:  # outside tackroom
        return True
    here, there = unit_of(m.name), unit_of(imp.target)
    if here == there:  # one unit; for suites, one suite (a suite does not import another)
        return here != "suites.*" or _suite(m.name) == _suite(imp.target)
    return LEVEL[there] < LEVEL[here]


def test_layers_point_down_only():
    def level(name: str) -> str:
        return f"{unit_of(name)} (layer {LEVEL.get(unit_of(name), '?')})"

    bad: list[str] = []
    for m in modules().values():
        if unit_of(m.name) not in LEVEL:
            continue  # reported by test_every_module_has_a_layer
        for imp in m.imports:
            if imp.target and unit_of(imp.target) in LEVEL and not _allowed(m, imp):
                bad.append(f"  {m.where}:{imp.line} {level(m.name)} imports {imp.target} "
                           f"{level(imp.target)}")
    assert not bad, ("imports sideways or up the layers of tests/test_structure.py's LAYERS:\n"
                     + "\n".join(sorted(set(bad))))


def test_no_module_is_over_the_line_limit():
    long = sorted((n, len(m.path.read_text().splitlines())) for n, m in modules().items())
    over = [f"  {modules()[n].where}: {lines} lines" for n, lines in long if lines > MAX_LINES]
    assert not over, f"modules over {MAX_LINES} lines (split by concept):\n" + "\n".join(over)


def test_the_slow_tables_name_tests_that_exist():
    # tests/conftest.py marks the slow lane by file and test name; a renamed test would
    # silently join the fast lane.
    import conftest

    tests_dir = Path(conftest.__file__).parent
    missing = [f for f in conftest.SLOW_FILES if not (tests_dir / f).is_file()]
    for entry in conftest.SLOW_TESTS:
        file, _, name = entry.partition("::")
        path = tests_dir / file
        defined = {n.name for n in ast.walk(ast.parse(path.read_text()))
                   if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)} if path.is_file() else set()
        if name not in defined:
            missing.append(entry)
    assert not missing, f"tests/conftest.py's slow tables name what does not exist: {missing}"
