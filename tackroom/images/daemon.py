"""Task images for a Docker daemon, built from the same bases and through the same network.

What ``--sandbox docker`` runs (:mod:`tackroom.sandbox.docker`) is built here:

* **Bases.** No registry is reachable, so a ``FROM`` image the daemon does not have is
  replaced by the Debian root file system that stands in for it without Docker
  (:mod:`tackroom.images.bases`, made by ``mmdebstrap``): the layer is streamed into
  ``docker import`` with its uids shifted back (:mod:`tackroom.images.userns`) and the
  base's ``ENV``, tagged ``tackroom-base:KEY`` by content. An image the daemon already has
  (pulled by its user) is used as it is; an unmapped one it lacks is refused with the reason.
* **Task images.** ``docker build`` (the classic builder: it can join a container's network)
  of the task's Dockerfile with those ``FROM`` lines rewritten, tagged ``tackroom-task:KEY``
  by the content of the Dockerfile, the bases and the build context: a second build is a
  lookup. Its ``RUN`` steps reach **only the package registries**: they run with
  ``--network container:HOLDER``, a container of ``--network none`` (only a loopback) into
  whose namespace the allow-list proxy of :class:`~tackroom.images.egress.BuildNetwork` puts
  its listening socket — the same proxy, allow-list and refusals as the bubblewrap builds.
* **The tests' installs** (:mod:`tackroom.images.testdeps`), hoisted to build time as for
  bubblewrap: built once per (task image, install script, tests) as one more ``RUN`` over the
  task image, and that layer alone kept as a tar (``docker save``), copied into an
  episode's container just before its verifier runs. The agent never sees it.

The host's CA bundle (:func:`~tackroom.images.egress.host_ca_bundle`: this machine's egress
may intercept TLS) is part of each imported base at :data:`BUILD_CA`, and ``RUN`` steps of a
mapped stage are pointed at it through build arguments (not kept in the image's ``ENV``).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from tackroom.core.cache import locked
from tackroom.core.errors import InfraError
from tackroom.images.bases import BaseSpec, UnmappedBase, resolve_base
from tackroom.images.build import (
    BuildError,
    Progress,
    Unbuildable,
    context_digest,
    count_builds,
    ensure_base,
    images_dir,
    log_build,
)
from tackroom.images.dockerfile import DOCKER_PATH
from tackroom.images.egress import CA_ENV_VARS, BuildNetwork, host_ca_bundle
from tackroom.images.userns import IMAGE_UID, SPAN

#: Where an imported base keeps this machine's CA bundle, for its builds' TLS.
BUILD_CA = "/usr/local/share/tackroom/build-ca.crt"
#: Seconds one ``docker build`` may take.
BUILD_TIMEOUT_S = 3600
#: Build arguments Docker passes to ``RUN`` steps without an ``ARG`` line.
_PREDEFINED = {"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "no_proxy",
               "NO_PROXY", "ftp_proxy", "FTP_PROXY", "all_proxy", "ALL_PROXY"}
_FROM = re.compile(r"^(\s*FROM\s+)((?:--\S+\s+)*)(\S+)(.*)$", re.I)
_ARG = re.compile(r"^\s*ARG\s+(\w+)(?:=(\S*))?\s*$", re.I)
_VAR = re.compile(r"\$(?:\{(\w+)(?::?-([^}]*))?\}|(\w+))")
_RUN_HEREDOC = re.compile(r"^(\s*RUN\s+)((?:--\S+\s+)*)(.*?)<<(-?)\s*(['\"]?)(\w+)\5(.*)$", re.I)
_FORMAT = 1


def docker(*args: str, timeout: float = 120, input: bytes | None = None,  # noqa: A002
           check: bool = True, where: str = "docker") -> subprocess.CompletedProcess[bytes]:
    """Run the Docker CLI (the classic builder: BuildKit cannot join a container's network);
    :class:`InfraError` with its last output when it fails and ``check``."""
    env = {**os.environ, "DOCKER_BUILDKIT": "0", "DOCKER_CLI_HINTS": "false"}
    try:
        proc = subprocess.run(["docker", *args], capture_output=True, timeout=timeout,  # noqa: S603
                              input=input, env=env)
    except subprocess.TimeoutExpired:
        raise InfraError(f"docker {args[0]} took over {timeout:.0f} s", where) from None
    if check and proc.returncode != 0:
        raise InfraError(f"docker {args[0]} failed (exit {proc.returncode}): "
                         + _tail(proc.stderr), where)
    return proc


def _tail(data: bytes, size: int = 300) -> str:
    return " ".join(data.decode(errors="replace").split())[-size:]


@functools.cache
def daemon_unavailable() -> str | None:
    """Why no Docker daemon can be used here (``None`` if ``docker info`` answers)."""
    if shutil.which("docker") is None:
        return "the docker CLI is not installed (apt-get install docker.io; make setup does it)"
    try:
        proc = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],  # noqa: S607
                              capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "docker info did not answer within 20 s"
    if proc.returncode != 0:
        return "no Docker daemon answers: " + " ".join(proc.stderr.split())[:200]
    return None


def has_image(ref: str) -> bool:
    """Whether the daemon has the image ``ref``."""
    return docker("image", "inspect", "--format", "{{.Id}}", ref, check=False).returncode == 0


def _digest(*parts: object) -> str:
    return hashlib.sha256(json.dumps([_FORMAT, *parts], sort_keys=True,
                                     default=str).encode()).hexdigest()[:20]


def _log_build(what: str, tag: str, started: float) -> None:
    # Not images/builds.log: that one counts the bubblewrap layers (build_count).
    log_build(images_dir() / "docker-builds.log", what, tag, started)


def docker_build_count(*, this_process: bool = False) -> int:
    """How many images the Docker daemon really built or imported for tackroom, ever (with
    ``this_process``, only those this process asked for)."""
    return count_builds(images_dir() / "docker-builds.log", this_process)


# -- bases ------------------------------------------------------------------------------------

def _ca_bytes() -> bytes:
    ca = host_ca_bundle()
    return ca.read_bytes() if ca is not None else b""


def base_image(spec: BaseSpec, progress: Progress | None = None) -> str:
    """The tag of ``spec``'s root file system imported into the daemon (made once)."""
    ca = _ca_bytes()
    start = () if spec.workdir == "/" else (spec.workdir,)  # the WORKDIR the base sets
    tag = f"tackroom-base:{_digest('base', spec.key, *start, hashlib.sha256(ca).hexdigest())}"
    if has_image(tag):
        return tag
    base = ensure_base(spec, progress)
    with locked(images_dir() / "docker-import.lock"):
        if has_image(tag):
            return tag
        started = time.monotonic()
        if progress:
            progress(f"docker import of the {spec.suite} root file system")
        changes = [f"ENV PATH={DOCKER_PATH}", *(f"ENV {k}={v}" for k, v in base.env.items()),
                   *([f"WORKDIR {spec.workdir}"] if spec.workdir != "/" else []), 'CMD ["bash"]']
        argv = ["docker", "import", *(a for c in changes for a in ("--change", c)), "-", tag]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,  # noqa: S603
                                stderr=subprocess.PIPE)
        assert proc.stdin is not None
        try:
            with tarfile.open(fileobj=proc.stdin, mode="w|") as tar:
                for layer in reversed(base.layers):
                    _add_tree(tar, layer)
                if ca:
                    info = tarfile.TarInfo(BUILD_CA.lstrip("/"))
                    info.size, info.mode = len(ca), 0o644
                    tar.addfile(info, io.BytesIO(ca))
        except BrokenPipeError:
            pass  # docker import ended early: its error says why
        finally:
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()
        assert proc.stderr is not None
        err = proc.stderr.read()
        proc.wait(timeout=BUILD_TIMEOUT_S)
        if proc.returncode != 0:
            raise InfraError(f"docker import of {spec.key} failed: {_tail(err)}", spec.key)
        _log_build("base", tag, started)
    return tag


def _add_tree(tar: tarfile.TarFile, root: Path) -> None:
    """Add the shifted tree ``root`` to ``tar`` as the image sees it (its own uids)."""
    def unshift(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.uid - IMAGE_UID if IMAGE_UID <= info.uid < IMAGE_UID + SPAN else 0
        info.gid = info.gid - IMAGE_UID if IMAGE_UID <= info.gid < IMAGE_UID + SPAN else 0
        info.uname = info.gname = ""
        return info

    for top, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs) + sorted(files):
            path = os.path.join(top, name)
            rel = os.path.relpath(path, root)
            info = tar.gettarinfo(path, arcname=rel)
            if info is None:  # a socket: nothing a layer needs
                continue
            unshift(info)
            if info.isreg():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)


# -- task images ------------------------------------------------------------------------------

@dataclass(frozen=True)
class DockerImage:
    """A task image in the daemon: its tag, what its bases stand in for, whether this call
    built it (``False``: found by its tag)."""

    tag: str
    notes: tuple[str, ...] = ()
    built: bool = False
    log: Path | None = None
    #: Its last stage is an imported base: it has :data:`BUILD_CA` for builds over it.
    build_ca: bool = False


def rewrite_froms(text: str, where: str, progress: Progress | None = None
                  ) -> tuple[str, list[str], tuple[str, ...], bool]:
    """``text`` with each ``FROM`` the daemon lacks replaced by its imported base; the tags it
    builds on, the notes of the mapped bases, and whether the last stage is one of them.

    A mapped stage also declares the build arguments that point its ``RUN`` steps at the
    proxy's CA bundle (:data:`BUILD_CA`).
    """
    out: list[str] = []
    bases: list[str] = []
    notes: list[str] = []
    stages: set[str] = set()
    meta: dict[str, str] = {}  # ARGs before the first FROM, which FROM lines may use
    last_mapped = False
    for lineno, line in enumerate(_without_heredocs(text).split("\n"), 1):
        m = _FROM.match(line)
        arg = _ARG.match(line)
        if arg and not bases and not stages:
            meta[arg.group(1)] = (arg.group(2) or "").strip("'\"")
        if not m:
            out.append(line)
            continue
        head, flags, image, rest = m.groups()
        image = _expand(image, meta)
        alias = re.search(r"\bas\s+(\S+)", rest, re.I)
        if alias:
            stages.add(alias.group(1).lower())
        last_mapped = False
        if image.lower() == "scratch" or image.lower() in stages or "$" in image:
            out.append(line)
            continue
        if has_image(image):
            bases.append(image)
            out.append(line)
            continue
        last_mapped = True
        try:
            spec = resolve_base(image)
        except UnmappedBase as e:
            raise Unbuildable(f"{e.reason.split(';')[0]}, and the Docker daemon does not have "
                              "it", f"{where}:{lineno}", f"docker pull {image} first") from None
        tag = base_image(spec, progress)
        bases.append(tag)
        if spec.note:
            notes.append(spec.note)
        out.append(f"{head}{flags}{tag}{rest}")
        out += [f"ARG {name}" for name in (*CA_ENV_VARS, "PIP_DEFAULT_TIMEOUT")]
    return "\n".join(out), bases, tuple(dict.fromkeys(notes)), last_mapped


def _expand(word: str, meta: Mapping[str, str]) -> str:
    """``$VAR``, ``${VAR}`` and ``${VAR:-default}`` of a ``FROM`` line, from the global ARGs."""
    return _VAR.sub(lambda m: meta.get(m.group(1) or m.group(3), m.group(2) or ""), word)


def _without_heredocs(text: str) -> str:
    """``text`` with each ``RUN <<EOF`` heredoc (BuildKit syntax, which the classic builder
    lacks) made a one-line ``RUN`` that decodes the same script and runs it the same way."""
    lines = text.replace("\r\n", "\n").split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = _RUN_HEREDOC.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        head, flags, before, chomp, _quote, delim, after = m.groups()
        body: list[str] = []
        i += 1
        while i < len(lines) and (lines[i].lstrip("\t") if chomp else lines[i]) != delim:
            body.append(lines[i].lstrip("\t") if chomp else lines[i])
            i += 1
        i += 1  # the delimiter
        script = base64.b64encode(("\n".join(body) + "\n").encode()).decode()
        decode = f"echo {script} | base64 -d"
        command = f"{before.strip()} {after.strip()}".strip()
        # alone, the heredoc is the script; after a command, that command's standard input
        run = f"{decode} | {command}" if command else f'sh -c "$({decode})"'
        out.append(f"{head}{flags}{run}")
        # keep the line count: errors name the Dockerfile's own lines
        out += ["# (heredoc)"] * (len(body) + 1)
    return "\n".join(out)


@contextlib.contextmanager
def registry_network(image: str) -> Iterator[tuple[str, BuildNetwork]]:
    """A container of ``image`` with no network but the proxy to the package registries on
    its loopback: its name (``docker build --network container:NAME``) and the network."""
    name = f"tackroom-buildnet-{uuid.uuid4().hex[:12]}"
    docker("run", "-d", "--name", name, "--network", "none", "--entrypoint", "sleep", image,
           "infinity")
    try:
        pid = docker("inspect", "--format", "{{.State.Pid}}", name).stdout.decode().strip()
        fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            with BuildNetwork(netns=fd, port=0) as net:
                yield name, net
        finally:
            os.close(fd)
    finally:
        docker("rm", "-f", name, check=False)


def _build_args(net: BuildNetwork) -> list[str]:
    # Only the stages over an imported base declare the CA's (see rewrite_froms)
    env = net.env(ca_path=BUILD_CA) if _ca_bytes() else net.env()
    return [a for k, v in env.items() for a in ("--build-arg", f"{k}={v}")]


def _docker_build(tag: str, dockerfile_text: str, context: Path, holder_image: str,
                  log: Path, where: str, timeout_s: float = BUILD_TIMEOUT_S) -> None:
    """``docker build`` through the registries-only network; :class:`BuildError` if it fails."""
    with tempfile.NamedTemporaryFile("w", suffix=".Dockerfile", delete=False) as f:
        f.write(dockerfile_text)
    try:
        with registry_network(holder_image) as (holder, net):
            proc = docker("build", "--network", f"container:{holder}", "--force-rm",
                          *_build_args(net), "-t", tag, "-f", f.name,
                          str(context), timeout=timeout_s, check=False, where=where)
            denied = net.denied
    finally:
        os.unlink(f.name)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        refused = f"; the build network refused {', '.join(denied)}" if denied else ""
        raise BuildError(f"docker build failed (exit {proc.returncode}){refused}: "
                         f"{_tail(proc.stdout + proc.stderr)}", where, f"the whole log: {log}")


def build_task_image(dockerfile: Path, context: Path, *, progress: Progress | None = None,
                     timeout_s: float = BUILD_TIMEOUT_S) -> DockerImage:
    """The task's image in the daemon, built by ``docker build`` unless its tag is there
    (within ``timeout_s``: ``task.toml``'s ``build_timeout_sec``).

    Raises :class:`Unbuildable` for a base image the daemon lacks and nothing stands in for,
    :class:`BuildError` when the build fails (its output's tail, the log's path).
    """
    where = str(dockerfile)
    text, bases, notes, ca = rewrite_froms(dockerfile.read_text(errors="replace"), where,
                                           progress)
    if not bases:
        raise Unbuildable("the Dockerfile has no base image the Docker daemon can build on",
                          where, "start it FROM an image (not scratch or a variable)")
    key = _digest("task", text, context_digest(context))
    tag = f"tackroom-task:{key}"
    log = images_dir() / f"docker-task-{key}" / "build.log"
    if has_image(tag):
        return DockerImage(tag, notes, False, log, ca)
    with locked(images_dir() / f"docker-task-{key}.lock"):
        if has_image(tag):
            return DockerImage(tag, notes, False, log, ca)
        started = time.monotonic()
        if progress:
            progress("docker build")
        _docker_build(tag, text, context, bases[0], log, where, timeout_s)
        _log_build("task", tag, started)
    return DockerImage(tag, notes, True, log, ca)


# -- the tests' installs ----------------------------------------------------------------------

def tests_layer(image: DockerImage, script: str, tests: Path, *, workdir: str,
                env: Mapping[str, str], progress: Progress | None = None) -> Path | None:
    """A tar of what ``script`` (the tests' hoisted installs) adds to ``image``, built once.

    The script runs as the verifier will, in ``workdir`` with ``tests`` at ``/tests`` and
    ``env`` set, through the registries-only network. ``None`` when there is nothing to
    install. What it deletes is not carried over (installs add files).
    """
    if not script.strip():
        return None
    image_id = docker("image", "inspect", "--format", "{{.Id}}",
                      image.tag).stdout.decode().strip()
    key = _digest("tests", image_id, script, dict(env), workdir, context_digest(tests))
    entry = images_dir() / f"docker-tests-{key}"
    layer = entry / "layer.tar"
    if layer.is_file():
        return layer
    with locked(images_dir() / f"docker-tests-{key}.lock"):
        if layer.is_file():
            return layer
        started = time.monotonic()
        if progress:
            progress("docker build of the tests' installs")
        tag = f"tackroom-tests:{key}"
        with tempfile.TemporaryDirectory(prefix="tackroom-tests-ctx-") as tmp:
            ctx = Path(tmp)
            shutil.copytree(tests, ctx / "tests", symlinks=True)
            (ctx / "install.sh").write_text(script)
            exports = " ".join(f"{k}={_sh(v)}" for k, v in env.items())
            text = "\n".join([
                f"FROM {image.tag}", "COPY tests /tests",
                "COPY install.sh /tmp/tackroom-install.sh", "ARG PIP_DEFAULT_TIMEOUT",
                *(f"ARG {name}" for name in CA_ENV_VARS if image.build_ca),
                f"RUN mkdir -p {_sh(workdir)} && cd {_sh(workdir)} && env {exports} "
                "bash /tmp/tackroom-install.sh", ""])
            _docker_build(tag, text, ctx, image.tag, entry / "build.log", str(tests))
        try:
            _save_top_layer(tag, layer)
        finally:
            docker("rmi", tag, check=False)
        _log_build("tests", tag, started)
    return layer


def _sh(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def _save_top_layer(tag: str, out: Path) -> None:
    """Write the topmost layer of ``tag`` (its last ``RUN``) to ``out``, as a plain tar of the
    files it adds: no whiteouts, nothing under ``/tests`` or the install script."""
    with tempfile.TemporaryDirectory(prefix="tackroom-save-") as tmp:
        saved = Path(tmp) / "image.tar"
        docker("save", "-o", str(saved), tag, timeout=BUILD_TIMEOUT_S)
        with tarfile.open(saved) as image:
            manifest = json.load(image.extractfile("manifest.json"))  # type: ignore[arg-type]
            top = manifest[0]["Layers"][-1]
            member = image.extractfile(top)
            assert member is not None
            partial = out.with_suffix(".partial")
            with tarfile.open(fileobj=member, mode="r|") as src, \
                    tarfile.open(partial, "w") as dst:
                for info in src:
                    name = info.name.lstrip("./")
                    if (Path(name).name.startswith(".wh.") or name == "tests"
                            or name.startswith("tests/") or name.startswith("tmp/tackroom-")):
                        continue
                    dst.addfile(info, src.extractfile(info) if info.isreg() else None)
            partial.rename(out)
