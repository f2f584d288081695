"""Code tasks as data: a small package, an issue, hidden tests, and the reference fix.

Each task is one TOML file in ``tasks/`` that names a package in ``packages/``::

    package = "textkit"                       # packages/textkit/
    title = "slugify drops accented letters"
    issue = '''What the user reports ...'''
    requirement = ["test_textkit.SlugTests.test_accents"]   # FAIL_TO_PASS
    # regression = [...]   # PASS_TO_PASS; default: every other test of the package

    [[fix]]                                   # the reference fix, applied in order
    path = "textkit/slug.py"
    old = '''...lines in the task's repository...'''
    new = '''...the same lines, fixed...'''

A package directory holds the *fixed* code (``packages/<name>/<name>/``) and its
unittest files (``packages/<name>/tests/test_*.py``), which are the hidden
tests. The task's repository is the package with the fix undone: each ``new``
(which must occur exactly once) is replaced by its ``old``, last edit first.
Fix edits are whole lines (``old`` and ``new`` end in a newline), so every
harness — line-range editors included — can express them.
"""

from __future__ import annotations

import ast
import functools
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from tackroom.core.episode import Outcome
from tackroom.core.errors import ConfigError
from tackroom.core.task import Task

SUITE = "code"
HERE = Path(__file__).parent
TASKS_DIR = HERE / "tasks"
PACKAGES_DIR = HERE / "packages"
#: Where the repository appears to the agent (the sandbox's task directory).
REPO_PATH = "/task"
#: Outcomes the runner decides, mapped to this suite's failure modes (see
#: ``tackroom.runner.episode``): a budget that runs out, or a harness that ends
#: the episode after repeated unreadable or rejected output.
RUNNER_FAILURE_MODES = {Outcome.BUDGET_EXHAUSTED: "budget_exhausted",
                        Outcome.TIMEOUT: "budget_exhausted",
                        Outcome.FAILURE: "malformed_edits"}
FAILURE_MODES = ("dropped_requirement", "broke_existing", "no_edit", "malformed_edits",
                 "budget_exhausted")


@dataclass(frozen=True)
class FixEdit:
    """Replace ``old`` (exactly one occurrence) by ``new`` in ``path``."""

    path: str
    old: str
    new: str


@dataclass(frozen=True)
class CodeTask:
    """One repository-repair task, fully loaded.

    Attributes:
        files: the task's repository as the agent gets it (path -> text).
        fixed_files: the same repository with the reference fix applied.
        tests: the hidden unittest modules (file name -> text).
        requirement: test ids that fail before the fix and must pass (FAIL_TO_PASS).
        regression: test ids that pass before and must still pass (PASS_TO_PASS).
        fix: the reference fix, as whole-line edits applied in order.
    """

    id: str
    package: str
    title: str
    issue: str
    files: dict[str, str] = field(compare=False)
    fixed_files: dict[str, str] = field(compare=False)
    tests: dict[str, str] = field(compare=False)
    requirement: tuple[str, ...] = ()
    regression: tuple[str, ...] = ()
    fix: tuple[FixEdit, ...] = ()
    source: str = ""

    @property
    def instruction(self) -> str:
        """What the agent is told: where the repository is, and the issue."""
        return (f"Resolve this issue in the Python repository at {REPO_PATH} (package "
                f"`{self.package}`, standard library only).\n\nIssue: {self.title}\n\n"
                f"{self.issue.strip()}")

    @functools.cached_property
    def task(self) -> Task:
        return Task(
            id=self.id, suite=SUITE, requires=frozenset({"edit", "submit"}),
            description=self.title, has_expert=True,
            meta={"package": self.package, "requirement": list(self.requirement),
                  "regression": list(self.regression),
                  "failure_modes": dict(RUNNER_FAILURE_MODES)},
        )


def _read_tree(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc":
            out[p.relative_to(root).as_posix()] = p.read_text()
    return out


def hidden_test_ids(tests: dict[str, str]) -> list[str]:
    """``module.Class.test_method`` for every test method in the unittest files."""
    ids = []
    for name, text in sorted(tests.items()):
        module = Path(name).stem
        for node in ast.parse(text).body:
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name.startswith("test"):
                        ids.append(f"{module}.{node.name}.{item.name}")
    return ids


@functools.cache
def load_package(name: str) -> tuple[dict[str, str], dict[str, str]]:
    """``(source files, hidden test files)`` of ``packages/<name>``."""
    root = PACKAGES_DIR / name
    if not (root / name).is_dir():
        raise ConfigError(f"no package {name!r}", str(PACKAGES_DIR),
                          f"add packages/{name}/{name}/ with the fixed code")
    files = {f"{name}/{k}": v for k, v in _read_tree(root / name).items()}
    tests = {k: v for k, v in _read_tree(root / "tests").items() if k.endswith(".py")}
    return files, tests


def load_task(path: Path) -> CodeTask:
    """Read and check one task file; a broken one is a one-line :class:`ConfigError`."""
    where = str(path)
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"not valid TOML: {e}", where, "fix the syntax") from None
    unknown = set(raw) - {"package", "title", "issue", "requirement", "regression", "fix"}
    if unknown:
        raise ConfigError(f"unknown key(s) {sorted(unknown)}", where,
                          "allowed: package, title, issue, requirement, regression, fix")
    for key in ("package", "title", "issue"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise ConfigError(f"{key!r} must be a non-empty string", where)
    fixed, tests = load_package(raw["package"])
    fixes = []
    for i, spec in enumerate(raw.get("fix", [])):
        if set(spec) != {"path", "old", "new"} or not all(isinstance(v, str) for v in spec.values()):
            raise ConfigError(f"[[fix]] #{i + 1} needs string path, old and new", where)
        for key in ("old", "new"):
            if spec[key] and not spec[key].endswith("\n"):
                raise ConfigError(f"[[fix]] #{i + 1}: {key} must be whole lines (end with a "
                                  "newline)", where)
        fixes.append(FixEdit(spec["path"], spec["old"], spec["new"]))
    if not fixes:
        raise ConfigError("no [[fix]] edits", where, "add the reference fix")
    files = dict(fixed)
    for i, edit in reversed(list(enumerate(fixes))):
        text = files.get(edit.path)
        if text is None or text.count(edit.new) != 1:
            raise ConfigError(f"[[fix]] #{i + 1}: 'new' must occur exactly once in {edit.path} of "
                              f"package {raw['package']!r}", where)
        files[edit.path] = text.replace(edit.new, edit.old)
    check = dict(files)
    for i, edit in enumerate(fixes):
        text = check[edit.path]
        at = text.find(edit.old)
        if text.count(edit.old) != 1 or (at > 0 and text[at - 1] != "\n"):
            raise ConfigError(f"[[fix]] #{i + 1}: 'old' must be whole lines occurring exactly "
                              f"once in the task's {edit.path}", where)
        check[edit.path] = text.replace(edit.old, edit.new)
    if check != fixed:
        raise ConfigError("the fix does not turn the task's repository back into the package",
                          where, "check the order of the [[fix]] edits")
    ids = hidden_test_ids(tests)
    requirement = tuple(raw.get("requirement", []))
    regression = tuple(raw.get("regression", [i for i in ids if i not in requirement]))
    for tid in requirement + regression:
        if tid not in ids:
            raise ConfigError(f"unknown test id {tid!r}", where,
                              f"tests of {raw['package']}: {', '.join(ids)}")
    if not requirement or set(requirement) & set(regression):
        raise ConfigError("requirement tests must be non-empty and apart from regression tests",
                          where)
    return CodeTask(id=path.stem, package=raw["package"], title=raw["title"].strip(),
                    issue=raw["issue"], files=files, fixed_files=fixed, tests=tests,
                    requirement=requirement, regression=regression, fix=tuple(fixes),
                    source=where)


@functools.cache
def load_tasks() -> dict[str, CodeTask]:
    """Every shipped code task by id, in file-name order."""
    return {p.stem: load_task(p) for p in sorted(TASKS_DIR.glob("*.toml"))}
