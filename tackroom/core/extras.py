"""Optional dependencies (pyproject's extras), checked before a script needs them.

``make`` installs the extras tackroom's own commands use (web, train, delegation, robot,
dev); an example may need one more (examples/critic needs ``critic``: Box2D is built from
source, too slow for every clone). A script calls :func:`require_extra` first, so a
missing package is one line naming the extra and the command that installs it, not a
``ModuleNotFoundError`` half-way through a run.
"""

from __future__ import annotations

import importlib.util
import sys

from tackroom.core.errors import ConfigError

#: For each extra in pyproject.toml, the modules it provides, as imported (a package's
#: import name is not always its distribution's: scikit-learn is ``sklearn``).
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "web": ("miniwob", "selenium", "gymnasium"),
    "train": ("torch", "transformers", "tokenizers", "peft", "safetensors", "jinja2"),
    "scale": ("ray",),
    "critic": ("gymnasium", "Box2D", "mujoco", "imageio"),
    "delegation": ("sklearn",),
    "robot": ("mujoco",),
    "dev": ("pytest", "pytest_asyncio", "xdist", "hypothesis", "ruff", "mypy", "datasets",
            "trl", "ray"),
}


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` that this interpreter cannot import."""
    if extra not in EXTRA_MODULES:
        raise ConfigError(f"unknown extra {extra!r}", "tackroom.core.extras",
                          f"one of: {', '.join(EXTRA_MODULES)}")
    return [m for m in EXTRA_MODULES[extra] if importlib.util.find_spec(m) is None]


def require_extra(*extras: str, who: str) -> None:
    """Raise one :class:`ConfigError` line if a module of any of ``extras`` is missing.

    ``who`` names what needs them (``"examples/critic"``), for the message.
    """
    missing = {extra: gone for extra in extras if (gone := missing_modules(extra))}
    if missing:
        names = ",".join(missing)
        raise ConfigError(
            f"needs the {names} extra{'s' if len(missing) > 1 else ''} "
            f"(missing: {', '.join(m for gone in missing.values() for m in gone)})",
            who, f"install it: .venv/bin/pip install -e '.[{names}]'")


def script_requires(*extras: str, who: str) -> None:
    """:func:`require_extra` for a script's first lines: on a missing module, print the
    one ``error:`` line to stderr and exit with status 2 (bad set-up, as the CLI's)."""
    try:
        require_extra(*extras, who=who)
    except ConfigError as e:
        print(f"error: {e.line()}", file=sys.stderr)
        raise SystemExit(2) from None
