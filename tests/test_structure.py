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


def test_core_imports_only_core():
    bad = _violations("tackroom.core imports nothing from tackroom outside tackroom.core",
                      lambda m, imp: not _under(m.name, "tackroom.core")
                      or not _tackroom(imp.name) or _under(imp.name, "tackroom.core"))
    assert not bad, "\n".join(bad)


def test_harness_imports_only_core_and_harness():
    bad = _violations("tackroom.harness imports only from tackroom.core and tackroom.harness",
                      lambda m, imp: not _under(m.name, "tackroom.harness")
                      or not _tackroom(imp.name) or _under(imp.name, "tackroom.core")
                      or _under(imp.name, "tackroom.harness"))
    assert not bad, "\n".join(bad)


#: What tackroom.optimize (candidates, proposers, the guard, the audit) stands on: the
#: analysis/train level, below the application layer and the CLI that drive it.
OPTIMIZE_MAY_IMPORT = ("tackroom.core", "tackroom.harness", "tackroom.runner", "tackroom.records",
                       "tackroom.policies", "tackroom.analysis", "tackroom.optimize")


def test_optimize_sits_at_the_analysis_level():
    bad = _violations("tackroom.optimize imports only from "
                      + ", ".join(OPTIMIZE_MAY_IMPORT),
                      lambda m, imp: not _under(m.name, "tackroom.optimize")
                      or not _tackroom(imp.name)
                      or any(_under(imp.name, p) for p in OPTIMIZE_MAY_IMPORT))
    assert not bad, "\n".join(bad)
