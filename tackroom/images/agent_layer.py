"""Agent layers: an agent CLI made runnable inside any built task environment.

An agent CLI is installed for a runtime (a Node, a Python new enough) that a
task's image may not have: ``debian:bookworm-slim`` has neither, Terminal-Bench's
Ubuntu base has a Python too old for some CLIs. So the CLI does not use the
image's runtime at all. It brings its own, in two read-only mounts that the
episode's sandbox gets over the image, outside the task's own paths:

* the **runtime** at :data:`RUNTIME_PATH` (``/opt/tackroom/agent``): a small
  Debian userland made with the same ``mmdebstrap`` machinery as the bases
  (:func:`tackroom.images.build.ensure_base`) — ``nodejs``/``npm`` on trixie
  for Node CLIs, ``python3`` on bookworm for Python CLIs (its 3.11 is what the
  pip CLIs run on on the host, and what ``aider-chat``'s ``<3.13`` allows); for a
  Python no Debian release has (OpenHands's ``==3.12.*``), a copy of this machine's
  relocatable (pyenv) build of it, patched like the rest (:data:`_COPIED_PYTHONS`);
* the **CLI** at :data:`CLI_PATH` (``/opt/tackroom/cli``): a virtual
  environment of the runtime's Python made with ``--copies`` (the pip CLI's
  own, or an empty one that runs the gateway relay for a Node CLI), the npm
  packages under ``node_modules``, and a copy of the runtime's ``node`` in
  ``bin/``. It is built once by a build step over the runtime, through the
  build network (the package registries only), with the runtime mounted at
  its final path, so every path the install records holds at run time.

The copied ``python`` and ``node`` executables are patched (``patchelf``) to
start through the runtime's own dynamic loader with the runtime's libraries
first (``DT_RPATH``), so they run on their own glibc whatever the image's:
a console script's ``#!/opt/tackroom/cli/bin/python`` works through the kernel,
and no ``LD_LIBRARY_PATH`` leaks into what the CLI runs. The commands the CLI
runs (``bash``, ``python3``, the task's tools) are the image's own: ``PATH``
is the image's. A CLI whose npm package is a native binary (Claude Code,
opencode, Codex) runs that binary on the image's glibc (every built image is
Debian's) and uses the layer for its install only.

The layer does not depend on the image it runs on (it carries its own loader
and libraries), so one layer per CLI serves every image: its key covers the
runtime's base and the CLI's install spec (a changed pin is a new layer).
The key also covers the build step's script. Layers are built once under a lock, counted finished only by a marker written
last, and logged in ``builds.log`` (:func:`tackroom.images.build.build_count`).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tackroom.core.cache import locked
from tackroom.core.errors import InfraError
from tackroom.images.bases import DEFAULT_MIRROR, BaseSpec
from tackroom.images.build import (
    BuildError,
    Progress,
    Unbuildable,
    _build_layer,
    _clear,
    _digest,
    _step,
    ensure_base,
    images_dir,
    log_build,
)
from tackroom.images.dockerfile import Run
from tackroom.images.userns import IMAGE_UID

#: Where the runtime (a Debian userland) is mounted in an episode's sandbox.
RUNTIME_PATH = "/opt/tackroom/agent"
#: Where the CLI's install is mounted (``{tool}`` in a harness's command).
CLI_PATH = "/opt/tackroom/cli"
#: Where the gateway relay's script and the gateway's socket directory are mounted.
FORWARD_PATH = "/opt/tackroom/forward.py"
GATEWAY_PATH = "/opt/tackroom/gateway"
#: The Node.js a Node CLI runs on (the official build, as the npm package node-linux-*).
NODE_VERSION = "20.20.2"
#: Marks a finished agent layer; holds what it is.
DONE = "agent.json"
#: The runtimes: a Node CLI's (trixie: Node 20, as the CLIs need) and a Python CLI's.
_NODE_RUNTIME: tuple[str, tuple[str, ...]] = (
    "trixie", ("nodejs", "npm", "python3", "python3-venv", "patchelf"))
_PYTHON_RUNTIMES: dict[str, tuple[str, tuple[str, ...]]] = {"3.11": ("bookworm", ("python3", "python3-venv", "patchelf")),
                    "3.12": ("bookworm", ("python3", "python3-venv", "patchelf")),
                    "3.13": ("trixie", ("python3", "python3-venv", "patchelf"))}
_DEFAULT_PYTHON = "3.11"
#: Pythons no Debian release has (OpenHands's ``==3.12.*``): a relocatable build of this
#: machine's (pyenv's: one prefix with its executable, standard library and ``libpython``)
#: is copied into the CLI's layer, without its site-packages, and patched like the rest.
#: Its runtime is the suite this machine's Python was built on (its libssl, libffi, ...).
_COPIED_PYTHONS = ("3.12",)
#: Where that prefix is mounted during the build step only (the layer holds a copy).
_HOST_PYTHON_PATH = "/opt/tackroom/host-python"


@dataclass(frozen=True)
class AgentLayer:
    """A built agent layer: the runtime and the CLI's install, as host directories."""

    key: str
    cli: str
    runtime: Path
    install: Path
    built: bool = False  # built by this call (False: found in the cache)

    @property
    def python(self) -> str:
        """The CLI's Python inside the sandbox (it runs the gateway relay too)."""
        return f"{CLI_PATH}/bin/python"

    @property
    def node(self) -> str:
        """The runtime's Node inside the sandbox (for a Node CLI)."""
        return f"{CLI_PATH}/bin/node"

    @property
    def tool(self) -> str:
        """``{tool}`` in a harness's command: the CLI's install inside the sandbox."""
        return CLI_PATH

    def mounts(self) -> dict[str, str]:
        """Read-only mounts, sandbox path -> host path."""
        return {RUNTIME_PATH: str(self.runtime), CLI_PATH: str(self.install)}

    def command(self, argv: Sequence[str], socket: str | Path, forward: str,
                port: int) -> tuple[list[str], dict[str, str]]:
        """``argv`` as it runs in the sandbox, behind the gateway relay, and its mounts.

        ``node``/``python3`` at its head are the layer's; the relay
        (``forward``, standard library only) runs on the layer's Python and
        listens on ``127.0.0.1:port`` for the gateway's Unix ``socket``, whose
        directory is mounted under the private prefix as well.
        """
        head, *rest = argv
        head = {"node": self.node, "python3": self.python, "python": self.python}.get(head, head)
        inside = f"{GATEWAY_PATH}/{Path(socket).name}"
        out = [self.python, FORWARD_PATH, "--port", str(port), "--socket", inside, "--",
               head, *rest]
        return out, {**self.mounts(), FORWARD_PATH: forward,
                     GATEWAY_PATH: str(Path(socket).parent)}


def runtime_spec(agent: dict[str, Any]) -> BaseSpec:
    """The Debian userland the CLI of the ``[agent]`` slot ``agent`` runs on.

    Raises :class:`Unbuildable` (one line) when no runtime fits (a Python no
    Debian release has).
    """
    spec = dict(agent["install"])
    python = spec.pop("python", None)
    (installer, _packages), = spec.items()
    if installer == "npm":
        suite, packages = _NODE_RUNTIME
    else:
        version = str(python or _DEFAULT_PYTHON)
        if version not in _PYTHON_RUNTIMES:
            raise Unbuildable(
                f"the {agent['cli']} CLI needs Python {version}, and no agent runtime has it "
                f"(Python {' and '.join(_PYTHON_RUNTIMES)}, Debian's)", f"{agent['cli']} [agent] "
                "install", "run it on a task without a built environment")
        suite, packages = _PYTHON_RUNTIMES[version]
    return BaseSpec(suite=suite, packages=packages,
                    mirror=os.environ.get("TACKROOM_DEBIAN_MIRROR") or DEFAULT_MIRROR)


def layer_key(agent: dict[str, Any]) -> str:
    """The agent layer's key: the runtime's base, the CLI's install spec, the build step
    (and the copied Python's identity, for a Python no Debian release has)."""
    copied = _copied_python(agent)
    return _digest("agent", runtime_spec(agent).key, agent["cli"], agent["install"],
                   _script(agent), *([_identity(copied)] if copied else []))


def ensure_agent_layer(agent: dict[str, Any], progress: Progress | None = None) -> AgentLayer:
    """The agent layer of the ``[agent]`` slot ``agent``, built the first time.

    Raises :class:`Unbuildable` when no runtime fits the CLI and
    :class:`BuildError` when its install fails (the step's output in one line).
    """
    runtime = runtime_spec(agent)
    copied = _copied_python(agent)
    key = layer_key(agent)
    entry = images_dir() / f"agent-{key}"
    if (layer := _load(entry)) is not None:
        return layer
    images_dir().mkdir(parents=True, exist_ok=True)
    with locked(images_dir() / f"agent-{key}.lock"):
        if (layer := _load(entry)) is not None:
            return layer
        base = ensure_base(runtime, progress)
        started = time.monotonic()
        _clear(entry)
        install = entry / "cli"
        install.mkdir(parents=True)
        # Owned by the image's root: the build step (root of its own namespace) writes it.
        os.chown(install, IMAGE_UID, IMAGE_UID)
        where = f"{agent['cli']} agent layer"
        if progress:
            progress(f"building the {agent['cli']} agent layer ({_what(agent)})")
        step = Run(("/bin/bash", "-c", _script(agent)), {}, "/", "root",
                   f"(the {agent['cli']} CLI's install)")
        try:
            # The step runs over the runtime (its own /), with the runtime also at its final
            # path and the CLI's directory writable at its own.
            _build_layer(entry / "scratch", base.layers,
                         [_step(step, Path("."), Path(where), {})], progress, where,
                         binds=[(base.layers[0], RUNTIME_PATH, True), (install, CLI_PATH, False),
                                *([(copied, _HOST_PYTHON_PATH, True)] if copied else [])])
        except BuildError as e:
            raise BuildError(f"the {agent['cli']} agent layer cannot be built: {e.what}",
                             e.where, e.fix) from None
        # What the install left outside the CLI's directory (npm's cache, /tmp) is not kept.
        (entry / "scratch" / "build.log").rename(entry / "build.log")
        shutil.rmtree(entry / "scratch", ignore_errors=True)
        (entry / DONE).write_text(json.dumps(
            {"key": key, "cli": agent["cli"], "version": agent["version"],
             "install": agent["install"], "runtime": str(base.layers[0])}, indent=1))
        log_build(images_dir() / "builds.log", f"agent {agent['cli']}", key, started)
        return AgentLayer(key, agent["cli"], base.layers[0], install, built=True)


def agent_layer(agent: dict[str, Any]) -> AgentLayer:
    """:func:`ensure_agent_layer` for an episode: its progress on stderr, and an
    :class:`InfraError` (one line: why) when the layer cannot be built."""
    def progress(message: str) -> None:
        print(f"agent layer {agent['cli']}: {message}", file=sys.stderr, flush=True)

    try:
        return ensure_agent_layer(agent, progress)
    except (Unbuildable, BuildError) as e:
        raise InfraError(e.what, e.where or f"{agent['cli']} agent layer", e.fix) from None


def _load(entry: Path) -> AgentLayer | None:
    done = entry / DONE
    if not done.is_file():
        return None
    data = json.loads(done.read_text())
    return AgentLayer(data["key"], data["cli"], Path(data["runtime"]), entry / "cli")


def _what(agent: dict[str, Any]) -> str:
    spec = {k: v for k, v in agent["install"].items() if k != "python"}
    (installer, packages), = spec.items()
    return f"{installer} {' '.join(packages)}"


def _copied_python(agent: dict[str, Any]) -> Path | None:
    """The prefix of this machine's Python the layer copies, for a version no Debian
    release has; None when the runtime's own Python serves.

    Raises :class:`Unbuildable` (one line) when this machine has no relocatable build of it.
    """
    version = str(agent["install"].get("python") or "")
    if version not in _COPIED_PYTHONS:
        return None
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    found = [p for p in root.glob(f"{version}.*")
             if (p / "bin" / f"python{version}").is_file()
             and (p / "lib" / f"python{version}" / "os.py").is_file()
             and (p / "lib" / f"libpython{version}.so.1.0").is_file()]
    if not found:
        raise Unbuildable(
            f"the {agent['cli']} CLI needs Python {version}, which no Debian release has, and "
            f"this machine has no relocatable build of it to copy (none in {root})",
            f"{agent['cli']} [agent] install", f"pyenv install {version} (with "
            "PYTHON_CONFIGURE_OPTS=--enable-shared), or run it on a task without a built "
            "environment")
    return max(found, key=lambda p: [int(x) if x.isdigit() else -1
                                     for x in p.name.split(".")]).resolve()


def _identity(prefix: Path) -> list[Any]:
    """What tells one build of a copied Python from another (a reinstall is a new layer)."""
    exe = prefix / "bin" / f"python{prefix.name.rsplit('.', 1)[0]}"
    lib = next(prefix.glob("lib/libpython3*.so.1.0"))
    return [prefix.name, *((s.st_size, s.st_mtime_ns) for s in (exe.stat(), lib.stat()))]


def _script(agent: dict[str, Any]) -> str:
    """The build step: a venv of the runtime's Python, the packages, patched executables."""
    spec = {k: v for k, v in agent["install"].items() if k != "python"}
    (installer, packages), = spec.items()
    quoted = " ".join("'" + p.replace("'", "'\\''") + "'" for p in packages)
    version = str(agent["install"].get("python") or "")
    copied = installer == "pip" and version in _COPIED_PYTHONS
    lines = [
        "set -eu",
        f"P={RUNTIME_PATH}; C={CLI_PATH}",
        # The runtime's own loader and library directories, at their paths inside the sandbox.
        "LD=$(ls $P/usr/lib/*-linux-gnu*/ld-linux*.so.* | head -n1)",
        "LIB=$(dirname \"$LD\")",
        "RPATH=$LIB:$P/lib/$(basename \"$LIB\")",
    ]
    if copied:
        # This machine's Python, copied under the CLI's directory (its tests, IDLE, static
        # library and site-packages — this machine's own packages — left out), started
        # through the runtime's loader with its own libpython first.
        lines += [
            f"H={_HOST_PYTHON_PATH}; X=python{version}; mkdir -p $C/python/bin $C/python/lib",
            "cp $H/bin/$X $C/python/bin/",
            "cp -RP $H/lib/libpython* $C/python/lib/",
            "tar -C $H/lib -c --exclude=$X/test --exclude=$X/idlelib --exclude=\"$X/config-*\" "
            "--exclude=\"$X/site-packages/*\" $X | tar -C $C/python/lib -x --no-same-owner",
            "RPATH=$C/python/lib:$RPATH",
            # DT_RPATH for pyenv's DT_RUNPATH (its build's prefix), on libpython and on each
            # extension module: their libraries (libssl, libffi) are then the runtime's,
            # never the image's, which may want a newer glibc than the runtime's.
            "patchelf --force-rpath --set-rpath \"$RPATH\" $C/python/bin/$X "
            "$C/python/lib/lib$X.so.1.0 $C/python/lib/$X/lib-dynload/*.so",
            "patchelf --set-interpreter \"$LD\" $C/python/bin/$X",
            f"$C/python/bin/python{version} -m venv --copies $C",
        ]
    else:
        lines += [
            # The runtime's Python at its final path: the venv records that path as its home.
            "$P/usr/bin/python3 -m venv --copies"
            + (" --without-pip" if installer == "npm" else "") + " $C",
        ]
    if installer == "pip":
        lines.append("$C/bin/python -m pip install --no-input --disable-pip-version-check "
                     f"--no-warn-script-location {quoted}")
    else:
        # Node.js's own build from the npm registry, not Debian's: Debian's loads some of
        # its built-in modules from /usr/share/nodejs, which the image does not have.
        lines += ["case $(uname -m) in aarch64) ARCH=arm64;; *) ARCH=x64;; esac",
                  f"npm install --prefix $C --no-audit --no-fund --no-update-notifier "
                  f"--loglevel=error {quoted} node-linux-$ARCH@{NODE_VERSION}",
                  "cp $C/node_modules/node-linux-$ARCH/bin/node $C/bin/node"]
    lines += [
        # Every executable copy starts through the runtime's loader, its libraries first
        # (DT_RPATH, which dlopen'ed extension modules' dependencies use too).
        "for f in $C/bin/*; do",
        "  if [ -f \"$f\" ] && [ ! -L \"$f\" ] && head -c4 \"$f\" | grep -q ELF; then",
        # Two passes, the path first: both at once break a non-PIE executable (trixie's
        # python3.13) with patchelf 0.18.
        "    patchelf --force-rpath --set-rpath \"$RPATH\" \"$f\"",
        "    patchelf --set-interpreter \"$LD\" \"$f\"",
        "  fi",
        "done",
        "$C/bin/python -c 'import asyncio, ssl, json'",
        *(["$C/bin/node --version"] if installer == "npm" else []),
        "chmod -R a+rX $C",
    ]
    return "\n".join(lines) + "\n"


__all__ = ["CLI_PATH", "RUNTIME_PATH", "AgentLayer", "agent_layer", "ensure_agent_layer",
           "layer_key", "runtime_spec"]
