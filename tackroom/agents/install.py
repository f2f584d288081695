"""Install an agent harness's CLI once, into a content-addressed cache outside the clone.

``~/.cache/tackroom/agents/<cli>-<version>-<hash>`` (``$TACKROOM_CACHE``
overrides ``~/.cache/tackroom``), where the hash covers the installer and the
pinned packages: the same harness on a second run, or in a second checkout,
reuses the directory; a changed pin is another directory. A pip install is a
virtual environment of the system's ``python3`` (the interpreter the sandbox
has: ``/usr`` is bound into it), an npm install a ``--prefix`` directory.
The directory is mounted read-only into the sandbox at the same path, so the
absolute paths in a virtual environment's scripts hold there too.

Installs are serialised by a lock file, so concurrent episodes and runs
install once, and count only once finished (a marker file written last).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tackroom.core.cache import cache_home, locked
from tackroom.core.errors import InfraError

#: Marks a finished install; holds what was installed.
DONE = ".tackroom-installed.json"
#: The interpreter a pip-installed CLI runs on, inside the sandbox as outside.
SYSTEM_PYTHON = "/usr/bin/python3"
#: Seconds one install may take.
INSTALL_TIMEOUT_S = 1800


def cache_root() -> Path:
    """``$TACKROOM_CACHE/agents``, by default ``~/.cache/tackroom/agents``."""
    return cache_home() / "agents"


def install_dir(agent: dict[str, Any]) -> Path:
    """Where the CLI of the ``[agent]`` slot ``agent`` is (or will be) installed."""
    spec = json.dumps(agent["install"], sort_keys=True)
    digest = hashlib.sha256(spec.encode()).hexdigest()[:12]
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in agent["cli"])
    return cache_root() / f"{safe}-{agent['version']}-{digest}"


def ensure_installed(agent: dict[str, Any], *, log: Any = None) -> Path:
    """The CLI's install directory, installing it first if it is not in the cache.

    Raises :class:`InfraError` (one line, the installer's last output) if the
    install fails: an episode that cannot start its CLI is an infrastructure
    failure, never the model's.
    """
    target = install_dir(agent)
    if (target / DONE).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with locked(target.parent / f"{target.name}.lock"):
        if (target / DONE).is_file():  # another process installed it while we waited
            return target
        spec = dict(agent["install"])
        python = spec.pop("python", None)
        (installer, packages), = spec.items()
        if log is not None:
            log(f"installing {' '.join(packages)} ({installer}) into {target}")
        # In place, under the lock: a virtual environment records its own path, so it
        # cannot be built elsewhere and moved. Only the marker makes it count as done.
        shutil.rmtree(target, ignore_errors=True)
        try:
            runtime = None
            if installer == "pip":
                interpreter = find_python(python) if python else _system_python()
                _pip(target, packages, interpreter)
                runtime = _outside_usr(interpreter)
            else:
                _npm(target, packages)
            _readable(target)
            (target / DONE).write_text(json.dumps(
                {"cli": agent["cli"], "version": agent["version"],
                 "install": agent["install"], "runtime": runtime}, indent=1))
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
    return target


def _readable(root: Path) -> None:
    """Readable (and, where executable, runnable) by the sandbox's own uid."""
    for path in [root, *root.rglob("*")]:
        with contextlib.suppress(OSError):
            if not path.is_symlink():
                mode = path.stat().st_mode
                os.chmod(path, mode | 0o444 | (0o111 if mode & 0o100 or path.is_dir() else 0))


def _run(argv: list[str], what: str, env: dict[str, str] | None = None) -> None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S,
                              env={**os.environ, **(env or {})})
    except FileNotFoundError:
        raise InfraError(f"cannot install the agent CLI: {argv[0]} not found", what,
                         f"install {Path(argv[0]).name} on this machine") from None
    except subprocess.TimeoutExpired:
        raise InfraError(f"installing the agent CLI took over {INSTALL_TIMEOUT_S} s", what,
                         "check the network to the package registry") from None
    if proc.returncode != 0:
        tail = " ".join((proc.stderr or proc.stdout).split())[-400:]
        raise InfraError(f"installing the agent CLI failed (exit {proc.returncode}): {tail}",
                         what, "check the pinned version and the network to the registry")


def runtime_dir(target: Path) -> str | None:
    """The interpreter's installation an install's virtual environment links to, when it
    lies outside ``/usr`` (which the sandbox has): it must be mounted too."""
    try:
        return json.loads((target / DONE).read_text()).get("runtime")
    except (OSError, ValueError):
        return None


def find_python(version: str) -> str:
    """A ``python<version>`` on this machine: on ``PATH``, in ``/usr``, or a pyenv install."""
    name = f"python{version}"
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    candidates = [f"/usr/bin/{name}", f"/usr/local/bin/{name}",
                  *sorted((str(p) for p in pyenv.glob(f"{version}.*/bin/{name}")), reverse=True),
                  shutil.which(name)]
    for c in candidates:
        # A pyenv shim is a script that picks a Python by the directory it runs in: not one.
        if c and "/shims/" not in c and os.access(c, os.X_OK):
            return os.path.realpath(c)
    raise InfraError(f"this agent CLI needs Python {version}, and this machine has none",
                     "pip install", f"install {name} (apt-get install {name}, or pyenv "
                     f"install {version})")


def _system_python() -> str:
    return SYSTEM_PYTHON if os.path.exists(SYSTEM_PYTHON) else sys.executable


def _outside_usr(interpreter: str) -> str | None:
    real = Path(os.path.realpath(interpreter))
    prefix = real.parent.parent  # .../bin/python3.12 -> ...
    return None if str(prefix).startswith("/usr") else str(prefix)


def _pip(target: Path, packages: list[str], python: str) -> None:
    _run([python, "-m", "venv", str(target)], "pip install")
    _run([str(target / "bin" / "python"), "-m", "pip", "install", "--no-input",
          "--disable-pip-version-check", "--no-warn-script-location", *packages],
         "pip install", {"PIP_NO_CACHE_DIR": "0"})


def _npm(target: Path, packages: list[str]) -> None:
    target.mkdir(parents=True, exist_ok=True)
    _run(["npm", "install", "--prefix", str(target), "--no-audit", "--no-fund",
          "--no-update-notifier", "--loglevel=error", *packages], "npm install")
