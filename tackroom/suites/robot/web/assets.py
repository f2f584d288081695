"""three.js for the robot's browser interface, installed from npm once and served locally.

The web app imports ``three`` through an import map that points at
``/vendor/three.module.js``; the :class:`~tackroom.suites.robot.server.RobotServer`
serves that file (and the ``three.core.js`` it imports) from
``$TACKROOM_CACHE/npm/three-<version>/`` (by default ``~/.cache/tackroom/npm/...``).
:func:`ensure_three` fills that directory with ``npm install three@<pinned>`` the
first time and reuses it after; nothing is fetched at run time and no page loads
anything from a CDN. ``make setup`` runs this module to pre-install it::

    python -m tackroom.suites.robot.web.assets

The directory counts only once a marker file (holding the version and npm's
integrity hash from ``package-lock.json``) is written last, under a lock, so an
interrupted install is redone and concurrent processes install once.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tackroom.core.cache import cache_home, locked
from tackroom.core.errors import InfraError

#: The pinned three.js release (npm package ``three``).
THREE_VERSION = "0.187.0"
#: Marks a finished install; holds what was installed.
DONE = ".tackroom-installed.json"
#: Seconds ``npm install`` may take.
INSTALL_TIMEOUT_S = 600
#: The files of ``three/build`` the server may serve (the ES module and what it imports).
SERVED = ("three.module.js", "three.core.js")


def three_dir(version: str = THREE_VERSION) -> Path:
    """Where three.js ``version`` is (or will be) installed."""
    return cache_home() / "npm" / f"three-{version}"


def _build_dir(target: Path) -> Path:
    return target / "node_modules" / "three" / "build"


def ensure_three(version: str = THREE_VERSION, *, log=None) -> Path:
    """The ``three/build`` directory of the cached install, installing it first if needed.

    Raises:
        InfraError: ``npm`` is missing, or the install failed (one line: npm's last output).
    """
    target = three_dir(version)
    if (target / DONE).is_file() and (_build_dir(target) / "three.module.js").is_file():
        return _build_dir(target)
    npm = shutil.which("npm")
    if npm is None:
        raise InfraError("npm is not installed; the robot suite's 3D interface needs three.js "
                         "from npm", "tackroom.suites.robot.web.assets",
                         "install Node.js and npm (apt-get install nodejs npm), then run "
                         "`python -m tackroom.suites.robot.web.assets`")
    target.parent.mkdir(parents=True, exist_ok=True)
    with locked(target.parent / f"{target.name}.lock"):
        if (target / DONE).is_file() and (_build_dir(target) / "three.module.js").is_file():
            return _build_dir(target)
        if log is not None:
            log(f"installing three@{version} from npm into {target}")
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        (target / "package.json").write_text(json.dumps(
            {"name": "tackroom-robot-web", "private": True,
             "dependencies": {"three": version}}, indent=1) + "\n")
        cmd = [npm, "install", "--ignore-scripts", "--no-audit", "--no-fund",
               "--no-update-notifier", "--loglevel=error", "--save-exact"]
        try:
            proc = subprocess.run(cmd, cwd=target, capture_output=True, text=True,
                                  timeout=INSTALL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise InfraError(f"npm install three@{version} took over {INSTALL_TIMEOUT_S} s",
                             str(target), "check the network to the npm registry") from None
        module = _build_dir(target) / "three.module.js"
        if proc.returncode != 0 or not module.is_file():
            tail = (proc.stderr or proc.stdout or "").strip().splitlines()
            last = tail[-1] if tail else f"exit {proc.returncode}"
            raise InfraError(f"npm install three@{version} failed: {last}", str(target),
                             "check the network to the npm registry, then run "
                             "`python -m tackroom.suites.robot.web.assets`")
        integrity = None
        try:
            lock = json.loads((target / "package-lock.json").read_text())
            integrity = lock["packages"]["node_modules/three"].get("integrity")
        except (OSError, KeyError, ValueError):
            pass
        (target / DONE).write_text(json.dumps({"package": "three", "version": version,
                                               "integrity": integrity}) + "\n")
    return _build_dir(target)


def main() -> int:
    try:
        build = ensure_three(log=lambda m: print(m, file=sys.stderr))
    except InfraError as e:
        print(f"error: {e.line()}", file=sys.stderr)
        return 1
    print(f"three@{THREE_VERSION}: {build}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
