"""Base images mapped to the Debian root file systems mmdebstrap makes in their place.

Without Docker there is no registry to pull ``FROM python:3.13-slim`` from, so each base
image that tasks commonly use is approximated by a Debian suite plus packages: the Python
images by Debian's own Python, Ubuntu by the Debian release of its time (Ubuntu's archive
may not be reachable from the build, and the package names of common tools match). Any
other image raises :class:`UnmappedBase`; ``--sandbox docker`` runs it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from dataclasses import dataclass, field

from tackroom.core.errors import TackroomError

DEFAULT_MIRROR = "http://deb.debian.org/debian"
#: The Python each suite ships (``python3``); a python image tag is mapped to the nearest.
SUITE_PYTHON = {"bullseye": (3, 9), "bookworm": (3, 11), "trixie": (3, 13)}
_DEBIAN_TAGS = {"bullseye": "bullseye", "11": "bullseye", "bookworm": "bookworm",
                "12": "bookworm", "trixie": "trixie", "13": "trixie", "stable": "bookworm",
                "latest": "bookworm"}
_UBUNTU_TAGS = {"20.04": "bullseye", "focal": "bullseye", "22.04": "bookworm",
                "jammy": "bookworm", "24.04": "trixie", "noble": "trixie", "latest": "trixie"}
#: What the python images add to Debian: pip and venv, ``python`` on PATH, and a pip that
#: installs system-wide (Debian marks its Python externally managed; the images don't).
_PYTHON = ("python3", "python3-pip", "python3-venv", "python-is-python3")
_PYTHON_ENV = {"PIP_BREAK_SYSTEM_PACKAGES": "1", "LANG": "C.UTF-8"}
#: The non-slim python images are built on buildpack-deps: compilers and fetch tools.
_FULL = ("build-essential", "curl", "git", "gnupg", "libffi-dev", "libssl-dev", "procps",
         "python3-dev", "unzip", "wget", "xz-utils")
_TBENCH = "ghcr.io/laude-institute/t-bench/"
MAPPED = "debian, python, ubuntu, Terminal-Bench bases"


@dataclass(frozen=True)
class BaseSpec:
    """A Debian root file system: ``mmdebstrap --variant=VARIANT --include=PACKAGES SUITE``.

    ``key`` changes exactly when the file system's content would (suite, variant,
    components, packages, env), so a cache of built bases can be keyed by it; the mirror is
    left out since any mirror serves the same packages. ``note`` says how the original image
    differs (another Python, Ubuntu read as Debian), empty when it matches.
    """

    key: str = field(init=False, default="")
    suite: str = "bookworm"
    mirror: str = DEFAULT_MIRROR
    components: tuple[str, ...] = ("main",)
    variant: str = "apt"  # essential packages + apt, like the slim images
    packages: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    note: str = ""
    #: The image's WORKDIR, where a Dockerfile's relative paths start (Terminal-Bench's bases
    #: set ``/app``). Not part of ``key``: it changes no file of the root file system.
    workdir: str = "/"

    def __post_init__(self) -> None:
        packages = tuple(sorted({"ca-certificates", *self.packages}))
        object.__setattr__(self, "packages", packages)
        blob = json.dumps([self.suite, self.variant, self.components, packages,
                           sorted(self.env.items())])
        digest = hashlib.sha256(blob.encode()).hexdigest()[:16]
        object.__setattr__(self, "key", f"{self.suite}-{self.variant}-{digest}")


class UnmappedBase(TackroomError):
    """No Debian root file system stands in for this base image; ``reason`` says so in a line."""

    def __init__(self, image: str) -> None:
        self.image = image
        self.reason = (f"base image {image} is not mapped to a Debian root file system "
                       f"(mapped: {MAPPED}); run it with --sandbox docker")
        super().__init__(self.reason)


def resolve_base(image: str) -> BaseSpec:
    """The Debian root file system that stands in for ``image`` (a ``FROM`` value).

    A ``docker.io/`` or ``library/`` prefix and an ``@sha256:`` digest are ignored.
    """
    mirror = os.environ.get("TACKROOM_DEBIAN_MIRROR") or DEFAULT_MIRROR
    name, _, tag = image.strip().split("@", 1)[0].partition(":")
    if "/" in tag:  # a registry port (localhost:5000/x), not a tag
        name, tag = image, ""
    name = re.sub(r"^(docker\.io/|index\.docker\.io/)?(library/)?", "", name.lower())
    tag = tag.lower() or "latest"
    spec = _resolve(name, tag, image)
    if spec is None:
        raise UnmappedBase(image)
    return dataclasses.replace(spec, mirror=mirror)


def _resolve(name: str, tag: str, image: str) -> BaseSpec | None:
    if name == "debian":
        first, *rest = tag.split("-")
        suite = _DEBIAN_TAGS.get(first.split(".")[0] if first[:1].isdigit() else first)
        # suffixes: -slim and a date (bookworm-20240513-slim); anything else is another image
        if suite and all(part == "slim" or part.isdigit() for part in rest):
            return BaseSpec(suite=suite)
        return None
    if name == "ubuntu":
        suite = _UBUNTU_TAGS.get(tag.split("-")[0])
        if not suite:
            return None
        return BaseSpec(suite=suite, note=f"ubuntu:{tag} approximated by Debian {suite} "
                        "(Ubuntu's archive may not be reachable from the build)")
    if name == "python":
        return _python(tag, image)
    if name == _TBENCH + "python-3-13":
        return BaseSpec(suite="trixie", packages=(*_PYTHON, "tmux", "asciinema"),
                        env=dict(_PYTHON_ENV), workdir="/app")
    if name == _TBENCH + "ubuntu-24-04":
        return BaseSpec(suite="trixie", packages=("tmux", "asciinema", "python3"),
                        note="Terminal-Bench's ubuntu-24-04 approximated by Debian trixie",
                        workdir="/app")
    return None


def _python(tag: str, image: str) -> BaseSpec | None:
    """``python:3.12-slim-bookworm`` and its kin: the suite named, or the nearest Python."""
    version, *suffix = tag.split("-")
    if version in ("latest", "slim") or version in SUITE_PYTHON:
        version, suffix = "3", [version, *suffix] if version != "latest" else suffix
    m = re.fullmatch(r"3(?:\.(\d+))?(?:\.\d+)?(?:(?:a|b|rc)\d*)?", version)
    if not m or not all(part in ("slim", *SUITE_PYTHON) for part in suffix):
        return None  # python 2, alpine, windowsservercore ...
    named = [part for part in suffix if part in SUITE_PYTHON]
    if len(named) > 1:
        return None
    if named:
        suite = named[0]
    elif m.group(1) is None:
        suite = "trixie"  # python:3 is the newest Python
    else:
        # the oldest current suite whose Python is at least as new, else the newest;
        # bullseye only when named: it is past its support and may leave the mirror
        wanted = (3, int(m.group(1)))
        suite = next((s for s in ("bookworm", "trixie") if SUITE_PYTHON[s] >= wanted), "trixie")
    have = ".".join(map(str, SUITE_PYTHON[suite]))
    note = "" if m.group(1) is not None and f"3.{m.group(1)}" == have else \
        f"{image} approximated by Debian {suite}'s Python {have}"
    packages = _PYTHON if "slim" in suffix else (*_PYTHON, *_FULL)
    return BaseSpec(suite=suite, packages=packages, env=dict(_PYTHON_ENV), note=note)
