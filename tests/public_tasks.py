"""Public Harbor and Terminal-Bench task directories, written by their authors, not by us.

Terminal-Bench's source distribution on PyPI (``terminal-bench==0.2.10``) carries its task
corpus (``tasks/<id>/``: ``task.yaml``, a Dockerfile, ``solution.sh``, ``run-tests.sh``,
``tests/``). The Harbor layout (``task.toml``, ``environment/``, ``solution/``, ``tests/``)
of the same tasks is what Harbor's own mapper makes of them
(``harbor.mappers.terminal_bench.TerminalBenchMapper`` from the ``harbor==0.26.0`` wheel),
run here unchanged. Both are fetched once from PyPI by pinned URL and checked by sha256
into ``$TACKROOM_CACHE/public`` (the package registries are reachable while setting up,
as when building environments); nothing of them is committed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tackroom.core.cache import cache_home, locked


@dataclass(frozen=True)
class Download:
    """A file on PyPI, pinned by URL and content."""

    url: str
    sha256: str

    @property
    def name(self) -> str:
        return self.url.rsplit("/", 1)[1]


_FILES = "https://files.pythonhosted.org/packages"
TERMINAL_BENCH = Download(
    f"{_FILES}/42/e7/9c20248f4296115dbe2a1435214b8dbc29fddfad8cccb17547f892f6356b/"
    "terminal_bench-0.2.10.tar.gz",
    "3196ccad3e5d1c1c7b129bb1c7b279d7f44b102ca581310fc38e73207a12b981")
HARBOR = Download(
    f"{_FILES}/07/36/ebe39e73005ace97c3bb7f6cde2618e705029dd32f8e30869c76a82f6bcc/"
    "harbor-0.26.0-py3-none-any.whl",
    "b7c752c5b51ae2ee1fc2ea30621493c7dc0b5a3d0157295bed4552115027baee")
#: The one dependency of Harbor's task models that tackroom's environment lacks.
TOML = Download(
    f"{_FILES}/44/6f/7120676b6d73228c96e17f1f794d8ab046fc910d781c8d151120c3f1569e/"
    "toml-0.10.2-py2.py3-none-any.whl",
    "806143ae5bfb6a3c6e736a764057db0e6a0e05e338b5630894a5f779cabb4f9b")

_MAP = """
import sys
from pathlib import Path
from harbor.mappers.terminal_bench import TerminalBenchMapper
result = TerminalBenchMapper().map(Path(sys.argv[1]), Path(sys.argv[2]))
for name, why in result.failed:
    print(f"{name}: {why}", file=sys.stderr)
sys.exit(1 if result.failed else 0)
"""


def public_dir() -> Path:
    return cache_home() / "public"


def fetch(download: Download) -> Path:
    """``download`` in the cache, fetched once and checked; skips the test when PyPI cannot
    be reached and no copy is cached."""
    path = public_dir() / download.name
    public_dir().mkdir(parents=True, exist_ok=True)
    with locked(path.with_name(path.name + ".lock")):
        if not path.is_file():
            part = path.with_name(path.name + ".part")
            try:
                with urllib.request.urlopen(download.url, timeout=120) as r, open(part, "wb") as f:  # noqa: S310 - a pinned https URL
                    shutil.copyfileobj(r, f)
            except OSError as e:
                part.unlink(missing_ok=True)
                pytest.skip(f"the public task corpus is not cached and PyPI cannot be reached "
                            f"({download.name}: {e})")
            digest = hashlib.sha256(part.read_bytes()).hexdigest()
            if digest != download.sha256:
                part.unlink()
                raise AssertionError(f"{download.name}: sha256 {digest}, pinned "
                                     f"{download.sha256}")
            os.replace(part, path)
    return path


def _unpacked(download: Download) -> Path:
    """The sdist or wheel unpacked beside it (once)."""
    archive = fetch(download)
    out = archive.with_name(archive.name + ".d")
    with locked(archive.with_name(archive.name + ".unpack.lock")):
        if not out.is_dir():
            tmp = out.with_name(out.name + ".part")
            shutil.rmtree(tmp, ignore_errors=True)
            if archive.name.endswith(".whl"):
                with zipfile.ZipFile(archive) as z:
                    z.extractall(tmp)
            else:
                with tarfile.open(archive) as t:
                    t.extractall(tmp, filter="tar")
            os.replace(tmp, out)
    return out


def terminal_bench_tasks(names: list[str], out: Path) -> Path:
    """Terminal-Bench's own directories of ``names`` (its ``task.yaml`` layout), copied to
    ``out``."""
    [root] = _unpacked(TERMINAL_BENCH).iterdir()
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copytree(root / "tasks" / name, out / name, symlinks=True)
    return out


def harbor_mapped_tasks(names: list[str], out: Path) -> Path:
    """The same tasks in the Harbor layout (``task.toml``), as Harbor's mapper writes them."""
    staging = out.with_name(out.name + "-terminal-bench")
    shutil.rmtree(staging, ignore_errors=True)
    source = terminal_bench_tasks(names, staging)
    path = os.pathsep.join(str(_unpacked(d)) for d in (HARBOR, TOML))
    # Harbor's mapper needs pydantic and PyYAML, which tackroom's environment has.
    proc = subprocess.run([sys.executable, "-c", _MAP, str(source), str(out)],  # noqa: S603
                          env={**os.environ, "PYTHONPATH": path}, capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shutil.rmtree(source)
    return out
