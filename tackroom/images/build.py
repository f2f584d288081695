"""Build a task's environment from its Dockerfile, without Docker.

An environment is a stack of layer directories in the cache
(``$TACKROOM_CACHE/images``), each named by a hash of what went into it:

* a **base** layer: the ``FROM`` image mapped to a Debian root file system
  (:mod:`tackroom.images.bases`) that ``mmdebstrap`` makes from Debian's
  archive, its package lists kept so that an ``apt-get install`` needs no
  full download;
* a **task** layer: the Dockerfile's ``RUN``, ``COPY``/``ADD``, ``WORKDIR``,
  ``ENV``, ``USER`` steps applied over the base. ``RUN`` steps run in a
  bubblewrap sandbox whose network reaches only the package registries
  (:mod:`tackroom.images.egress`); ``COPY`` is done from the host, from the
  build context only;
* optionally a **tests** layer: the install commands hoisted out of the
  task's test script (:mod:`tackroom.images.testdeps`), so that the verifier,
  which runs with no network, finds its tools.

The task layer's key covers the base, the Dockerfile, the build arguments and
every file of the build context; the tests layer's covers the task layer and
the install script. A second build of the same task is a cache hit; every
real build is appended to ``builds.log`` (what :func:`build_count` counts).
Layers are written into an overlay's upper directory and kept as they are
(whiteouts included), shifted into the image uid range
(:mod:`tackroom.images.userns`) so that sandboxes run on them as an
unprivileged root of their own.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tackroom.core.cache import cache_home, locked
from tackroom.core.errors import InfraError, TackroomError
from tackroom.images.bases import BaseSpec, UnmappedBase, resolve_base
from tackroom.images.dockerfile import DOCKER_PATH, Copy, Run, User, Workdir, parse_dockerfile
from tackroom.images.egress import BuildNetwork, host_ca_bundle
from tackroom.images.overlay import bind, mount, overlay_options, owned_mount_dir, unmount
from tackroom.images.userns import IMAGE_UID, as_image_root, mapped_userns, require_root, shift_tree

#: Marks a finished layer; holds its image's configuration.
DONE = "image.json"
#: Seconds one build step (or mmdebstrap) may take.
STEP_TIMEOUT_S = 1800
#: Where build steps see the host's CA bundle and the shared download caches.
_RUN_DIR = "/run/tackroom-build"
#: Format of the cache entries; bump it to rebuild everything.
_FORMAT = 1

Progress = Callable[[str], None]


class Unbuildable(TackroomError):
    """The task's environment cannot be built here (an unmapped base, a multi-stage build)."""


class BuildError(TackroomError):
    """A build step failed; ``where`` is the Dockerfile, the message the step and its output."""


@dataclass(frozen=True)
class Image:
    """A built environment: its layers (topmost first) and how its processes start."""

    key: str
    layers: tuple[Path, ...]
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    user: str = "root"
    notes: tuple[str, ...] = ()
    log: Path | None = None
    built: bool = False  # built by this call (False: found in the cache)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "layers": [str(p) for p in self.layers], "env": self.env,
                "workdir": self.workdir, "user": self.user, "notes": list(self.notes)}


def images_dir() -> Path:
    """Where built layers are kept: ``$TACKROOM_CACHE/images``."""
    return cache_home() / "images"


def build_count(*, this_process: bool = False) -> int:
    """How many layers were really built (not found in the cache) with this cache, ever; with
    ``this_process``, only those this process built (the cache is shared by concurrent runs,
    e.g. test workers, so a count over all of them can move under a caller's feet)."""
    return count_builds(images_dir() / "builds.log", this_process)


def log_build(log: Path, what: str, key: str, started: float) -> None:
    """Append one real build to ``log`` (one JSON line; :func:`build_count` counts them)."""
    with open(log, "a") as f:
        f.write(json.dumps({"key": key, "what": what, "pid": os.getpid(),
                            "seconds": round(time.monotonic() - started, 1)}) + "\n")


def count_builds(log: Path, this_process: bool = False) -> int:
    """The builds ``log`` holds (with ``this_process``, only this process's)."""
    if not log.is_file():
        return 0
    lines = log.read_text().splitlines()
    if not this_process:
        return len(lines)
    pid = os.getpid()
    return sum(1 for line in lines if line.strip() and json.loads(line).get("pid") == pid)


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps([_FORMAT, *parts], sort_keys=True,
                                     default=str).encode()).hexdigest()[:20]


def context_digest(context: Path) -> str:
    """A hash of every file of a build context: paths, modes, link targets, contents."""
    h = hashlib.sha256()
    for path in sorted(context.rglob("*")):
        rel = str(path.relative_to(context))
        st = path.lstat()
        h.update(f"{rel}\0{st.st_mode:o}\0".encode())
        if path.is_symlink():
            h.update(os.readlink(path).encode())
        elif path.is_file():
            with open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
    return h.hexdigest()


def _load(entry: Path) -> Image | None:
    done = entry / DONE
    if not done.is_file():
        return None
    data = json.loads(done.read_text())
    return Image(data["key"], tuple(Path(p) for p in data["layers"]), data["env"],
                 data["workdir"], data["user"], tuple(data["notes"]), entry / "build.log")


def _finish(entry: Path, image: Image, what: str, started: float) -> Image:
    (entry / DONE).write_text(json.dumps(image.to_json(), indent=1))
    log_build(images_dir() / "builds.log", what, image.key, started)
    return Image(**{**image.__dict__, "log": entry / "build.log", "built": True})


# -- the base ---------------------------------------------------------------------------------

def ensure_base(spec: BaseSpec, progress: Progress | None = None) -> Image:
    """The base layer of ``spec``, made with ``mmdebstrap`` the first time."""
    require_root("building a task environment")
    key = _digest("base", spec.key)
    entry = images_dir() / f"base-{key}"
    if (image := _load(entry)) is not None:
        return image
    with locked(images_dir() / f"base-{key}.lock"):
        if (image := _load(entry)) is not None:
            return image
        if shutil.which("mmdebstrap") is None:
            raise InfraError("mmdebstrap is not installed", "task environment",
                             "apt-get install mmdebstrap (make setup does it)")
        started = time.monotonic()
        _clear(entry)
        entry.mkdir(parents=True)
        layer = entry / "layer"
        packages = sorted({"ca-certificates", *spec.packages})
        argv = ["mmdebstrap", f"--variant={spec.variant}", f"--include={','.join(packages)}",
                f"--components={','.join(spec.components)}", "--skip=cleanup/apt/lists",
                "--aptopt=Acquire::Retries \"3\";", spec.suite, str(layer), spec.mirror]
        if progress:
            progress(f"making the {spec.suite} root file system ({', '.join(packages)})")
        _logged(argv, entry / "build.log", "making the base root file system "
                f"({spec.suite})", where=spec.key)
        shift_tree(layer)
        image = Image(key, (layer,), dict(spec.env), "/", "root",
                      (spec.note,) if spec.note else ())
        return _finish(entry, image, "base", started)


def _clear(entry: Path) -> None:
    """Remove what an unfinished build left at ``entry``, mounts included: a build killed
    mid-way (mmdebstrap's ``/proc``, a step's overlay) leaves them behind, and they would
    make every later build of it fail."""
    prefix = str(entry) + "/"
    try:
        with open("/proc/self/mounts") as f:
            points = [line.split()[1].replace("\\040", " ") for line in f]
    except OSError:
        points = []
    for point in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
        unmount(Path(point))  # lazily, innermost first
    shutil.rmtree(entry, ignore_errors=True)
    if entry.exists():
        raise InfraError("an unfinished build's directory cannot be removed", str(entry),
                         "remove it by hand (after unmounting what is mounted below it)")


# -- the task ---------------------------------------------------------------------------------

def build_image(dockerfile: Path, context: Path, *, build_args: Mapping[str, str] = {},  # noqa: B006
                progress: Progress | None = None) -> Image:
    """The environment ``dockerfile`` builds from ``context``, from the cache if it is there.

    Raises :class:`Unbuildable` when it cannot be built here (with the reason)
    and :class:`BuildError` when a step fails (with the step and its output).
    """
    text = dockerfile.read_text(errors="replace")
    df = parse_dockerfile(text, where=str(dockerfile), build_args=build_args)
    if df.unsupported:
        raise Unbuildable(df.unsupported, str(dockerfile), "run the task with --sandbox docker")
    try:
        spec = resolve_base(df.base)
    except UnmappedBase as e:
        raise Unbuildable(e.reason, str(dockerfile), "") from None
    require_root("building a task environment")
    # the base's WORKDIR changes where the steps' relative paths land (absent when "/", so
    # the keys of images built before bases had one stay the same)
    start = () if spec.workdir == "/" else ({"workdir": spec.workdir},)
    key = _digest("task", spec.key, *start, text, dict(build_args), context_digest(context))
    entry = images_dir() / f"task-{key}"
    if (image := _load(entry)) is not None:
        return image
    base = ensure_base(spec, progress)
    with locked(images_dir() / f"task-{key}.lock"):
        if (image := _load(entry)) is not None:
            return image
        started = time.monotonic()
        # the base image's WORKDIR exists in it (Terminal-Bench's /app), made or not by a step
        steps: list[Step] = [] if spec.workdir == "/" else \
            [_step(Workdir(spec.workdir), context, dockerfile, base.env)]
        for step in df.steps:
            steps.append(_step(step, context, dockerfile, base.env))
        layer = _build_layer(entry, base.layers, steps, progress, str(dockerfile))
        cfg = df.config
        image = Image(key, (layer, *base.layers), {**base.env, **cfg.env}, cfg.workdir or "/",
                      cfg.user or "root", base.notes)
        return _finish(entry, image, "task", started)


def with_tests_layer(image: Image, script: str, tests: Path, *,
                     env: Mapping[str, str] = {},  # noqa: B006
                     progress: Progress | None = None) -> Image:
    """``image`` plus a layer made by running ``script`` (the tests' installs) with network.

    It runs as the verifier will: in the image's working directory, with the
    task's ``tests`` folder at ``/tests`` (read-only; a ``pip install -r
    /tests/requirements.txt`` finds its file) and ``env`` set.
    """
    if not script.strip():
        return image
    where = str(tests)
    key = _digest("tests", image.key, script, dict(env), context_digest(tests))
    entry = images_dir() / f"tests-{key}"
    if (cached := _load(entry)) is not None:
        return cached
    with locked(images_dir() / f"tests-{key}.lock"):
        if (cached := _load(entry)) is not None:
            return cached
        started = time.monotonic()
        step = Run(("/bin/bash", "-c", script), {**image.env, **env}, image.workdir, "root",
                   "(the test script's installs)")
        layer = _build_layer(entry, image.layers, [_step(step, Path("."), Path(where), {})],
                             progress, where, binds=[(tests, "/tests", True)])
        out = Image(key, (layer, *image.layers), image.env, image.workdir, image.user,
                    image.notes)
        return _finish(entry, out, "tests", started)


# -- one layer --------------------------------------------------------------------------------

def _build_layer(entry: Path, lowers: Sequence[Path], steps: Sequence[Step],
                 progress: Progress | None, where: str,
                 binds: Sequence[tuple[Path, str, bool]] = ()) -> Path:
    """Apply ``steps`` over ``lowers`` in an overlay; the upper directory becomes the layer.

    ``binds`` (host path, path inside, read-only) are mounted for the steps only.
    """
    _clear(entry)
    work = entry / "building"
    upper, scratch = work / "upper", work / "work"
    for d in (upper, scratch):
        d.mkdir(parents=True)
    os.chown(upper, IMAGE_UID, IMAGE_UID)  # the merged root is the image root's
    log = entry / "build.log"
    log.touch()
    # The merged tree is mounted where the build's uid can reach it (the cache may be under
    # a home it cannot enter); what the steps share is bound into it by root, beforehand.
    top = owned_mount_dir("tackroom-build-")
    merged = top / "merged"
    merged.mkdir()
    mounts: list[Path] = []
    try:
        mount("overlay", merged, overlay_options(lowers, upper, scratch))
        mounts.append(merged)
        for source, inside, ro in [*_shared(work), *binds]:
            target = resolve_inside(merged, inside)
            bind(source, target, read_only=ro)
            mounts.append(target)
        with BuildNetwork() as net, mapped_userns() as userns:
            for i, step in enumerate(steps, 1):
                if progress:
                    progress(f"step {i}/{len(steps)}")
                step(merged, net, userns, log)
    finally:
        for target in reversed(mounts):
            unmount(target)
        shutil.rmtree(top, ignore_errors=True)
        _publish_debs(work / "apt")
    # What only the build used: its mount points, the package lists it refreshed.
    for rel in (_RUN_DIR.lstrip("/"), "var/lib/apt/lists", *(b[1].lstrip("/") for b in binds)):
        target = upper / rel
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target, ignore_errors=True)
    shift_tree(upper)
    layer = entry / "layer"
    upper.rename(layer)
    shutil.rmtree(work, ignore_errors=True)
    return layer


def _shared(work: Path) -> list[tuple[Path, str, bool]]:
    """What every build step sees: the download caches, the host's CA bundle (source,
    path inside, read-only).

    apt takes a lock on its archive directory without waiting, so two builds (two test
    workers, two ``tackroom`` runs) sharing one would fail each other. Each build gets a
    directory of its own holding hard links to every package already downloaded, and
    what it downloads is linked back into the shared cache afterwards (:func:`_publish_debs`).
    """
    caches = images_dir() / "downloads"
    apt_cache, pip_cache = caches / "apt", caches / "pip"
    for d in (apt_cache, pip_cache):
        d.mkdir(parents=True, exist_ok=True)
    own = work / "apt"
    (own / "partial").mkdir(parents=True, exist_ok=True)
    for deb in apt_cache.glob("*.deb"):
        with contextlib.suppress(FileExistsError):
            os.link(deb, own / deb.name)
    shift_tree(pip_cache)
    shift_tree(own)
    out = [(own, "/var/cache/apt/archives", False), (pip_cache, f"{_RUN_DIR}/pip", False)]
    ca = host_ca_bundle()
    if ca is not None:
        out.append((ca, f"{_RUN_DIR}/ca.crt", True))
    return out


def _publish_debs(own: Path) -> None:
    """The packages a build downloaded, linked into the shared cache for the next builds
    (complete files only: apt moves a package out of ``partial/`` once it is verified)."""
    shared = images_dir() / "downloads" / "apt"
    for deb in own.glob("*.deb") if own.is_dir() else ():
        with contextlib.suppress(FileExistsError, FileNotFoundError):
            os.link(deb, shared / deb.name)


Step = Callable[[Path, BuildNetwork, int, Path], None]


def _step(step: object, context: Path, dockerfile: Path, base_env: Mapping[str, str]) -> Step:
    """A function applying one parsed Dockerfile step to the merged tree."""

    def run(merged: Path, net: BuildNetwork, userns: int, log: Path) -> None:
        if isinstance(step, Run):
            _run_step(step, merged, net, userns, log, base_env, dockerfile)
        elif isinstance(step, Copy):
            _copy_step(step, merged, context, dockerfile, log)
        elif isinstance(step, Workdir):
            _make_dirs(merged, step.path)
        elif isinstance(step, User):
            pass  # recorded in the image's configuration; RUN steps carry their user
    return run


def _make_dirs(merged: Path, path: str) -> None:
    """``path`` made in the image if missing, as Docker's WORKDIR does: owned by the image's
    root (made by the host's root, a directory would be nobody's in the image's namespace,
    and its root could not write there)."""
    target = resolve_inside(merged, path)
    target.mkdir(parents=True, exist_ok=True)
    while target != merged and target.is_relative_to(merged):
        st = target.lstat()
        if st.st_uid < IMAGE_UID:
            os.lchown(target, IMAGE_UID + st.st_uid, IMAGE_UID + st.st_gid)
        target = target.parent


def _run_step(step: Run, merged: Path, net: BuildNetwork, userns: int, log: Path,
              base_env: Mapping[str, str], dockerfile: Path) -> None:
    # The proxy, and the host's CA bundle where _shared bound it: an intercepting proxy's CA
    # (this machine's egress has one) must be trusted inside.
    env = {"PATH": DOCKER_PATH, "HOME": "/root", "LANG": "C.UTF-8", **base_env, **step.env,
           **net.env(ca_path=f"{_RUN_DIR}/ca.crt"), "PIP_CACHE_DIR": f"{_RUN_DIR}/pip"}
    args = [*as_image_root(), "bwrap", "--userns", str(userns), "--unshare-pid",
            "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--new-session",
            "--bind", str(merged), "/", "--proc", "/proc", "--dev", "/dev"]  # /tmp: the image's
    workdir = step.workdir or "/"
    _make_dirs(merged, workdir)
    args += ["--cap-add", "ALL", "--chdir", workdir, "--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    argv = list(step.argv)
    if step.user and step.user not in ("root", "0", "0:0"):
        uid, gid = _user_ids(merged, step.user)
        argv = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", *argv]
    with open(log, "a") as f:
        f.write(f"\n$ {step.text}\n")
    _logged([*args, "--", *argv], log, step.text, where=str(dockerfile),
            preexec_fn=net.enter, pass_fds=(userns,), net=net)


def _logged(argv: list[str], log: Path, what: str, *, where: str, net: BuildNetwork | None = None,
            **popen: Any) -> None:
    """Run ``argv`` with its output appended to ``log``; :class:`BuildError` if it fails."""
    with open(log, "ab") as out:
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out,  # noqa: S603
                                  stderr=subprocess.STDOUT, timeout=STEP_TIMEOUT_S, **popen)
        except subprocess.TimeoutExpired:
            raise BuildError(f"{_short(what)} ran over {STEP_TIMEOUT_S} s", where,
                             f"see {log}") from None
    if proc.returncode != 0:
        tail = " ".join(_tail(log).split())[-300:]
        denied = f"; the build network refused {', '.join(net.denied)}" if net and net.denied \
            else ""
        raise BuildError(f"{_short(what)} failed (exit {proc.returncode}){denied}: {tail}",
                         where, f"the whole log: {log}")


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 80 else text[:77] + "..."


def _tail(log: Path, size: int = 2000) -> str:
    with open(log, "rb") as f:
        f.seek(max(0, log.stat().st_size - size))
        return f.read().decode(errors="replace")


# -- COPY -------------------------------------------------------------------------------------

def resolve_inside(root: Path, path: str) -> Path:
    """The host path of ``path`` in the tree ``root``, symlinks followed as a chroot would.

    An image's absolute symlink (``/etc/alternatives/...``) points into the
    image, never at the host; the last component is not followed if missing.
    """
    parts = [p for p in path.split("/") if p not in ("", ".")]
    out: list[str] = []
    hops = 0
    while parts:
        name = parts.pop(0)
        if name == "..":
            if out:
                out.pop()
            continue
        host = root.joinpath(*out, name)
        if host.is_symlink():
            hops += 1
            if hops > 40:
                raise InfraError("too many levels of symbolic links", path)
            target = os.readlink(host)
            if target.startswith("/"):
                out = []
            parts = [p for p in target.split("/") if p not in ("", ".")] + parts
            continue
        out.append(name)
    return root.joinpath(*out)


def _copy_step(step: Copy, merged: Path, context: Path, dockerfile: Path, log: Path) -> None:
    verb = "ADD" if step.add else "COPY"
    with open(log, "a") as f:
        f.write(f"\n$ {verb} {' '.join(step.sources)} {step.dest}\n")
    if step.url:
        raise BuildError(f"{verb} of a URL ({step.sources[0]}) is not supported", str(dockerfile),
                         "download it in a RUN step (curl/wget through the build network)")
    sources: list[Path] = []
    if step.heredoc:
        staged = merged.parent / "heredoc"
        staged.mkdir(exist_ok=True)
        for name, body in step.heredoc.items():
            (staged / name).write_text(body)
            sources.append(staged / name)
    else:
        ctx = context.resolve()
        for pattern in step.sources:
            found = sorted(ctx.glob(pattern.lstrip("/"))) if any(c in pattern for c in "*?[") \
                else [ctx / pattern.lstrip("/")]
            for src in found:
                real = src.resolve()
                if not real.is_relative_to(ctx):
                    raise BuildError(f"{verb} {pattern}: outside the build context", str(dockerfile),
                                     "copy files from the task's environment folder only")
                if not real.exists():
                    raise BuildError(f"{verb} {pattern}: no such file in the build context",
                                     str(dockerfile), f"the context is {ctx}")
                sources.append(real)
        if not sources:
            raise BuildError(f"{verb} {' '.join(step.sources)}: nothing matches", str(dockerfile),
                             f"the context is {ctx}")
    dest = resolve_inside(merged, step.dest)
    into_dir = step.dest_is_dir or len(sources) > 1 or dest.is_dir()
    uid, gid = _user_ids(merged, step.chown) if step.chown else (0, 0)
    made: list[Path] = []  # what takes the --chown/--chmod
    landed: list[Path] = []  # every entry this step wrote, to shift into the image's range
    for src in sources:
        if src.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
            below = [dest / p.relative_to(src) for p in src.rglob("*")]
            landed += below
            made += [dest, *below] if step.chown or step.chmod else []
            continue
        if step.add and step.extract and tarfile.is_tarfile(src):
            dest.mkdir(parents=True, exist_ok=True)
            with tarfile.open(src) as tar:
                tar.extractall(dest, filter="tar")
                landed += [dest / m.name for m in tar.getmembers()]
            continue
        target = dest / src.name if into_dir else dest
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)
        made.append(target)
        landed.append(target)
    # New entries belong to the image's root, as Docker's do. Only what this step wrote:
    # a COPY into / must not walk the whole image (nor the build's read-only mounts in it).
    _shift_new(merged, dest, landed)
    for path in made:
        os.lchown(path, IMAGE_UID + uid, IMAGE_UID + gid)
        if step.chmod and not path.is_symlink():
            os.chmod(path, int(step.chmod, 8))


def _shift_new(merged: Path, dest: Path, landed: Sequence[Path]) -> None:
    """Shift what a step wrote (``landed``), ``dest`` and the directories made above it."""
    for path in landed:
        if path.exists() or path.is_symlink():
            shift_tree(path, recurse=False)
    parent = dest
    while parent != merged and parent.is_relative_to(merged):
        st = parent.lstat()
        if st.st_uid < IMAGE_UID:
            os.lchown(parent, IMAGE_UID + st.st_uid, IMAGE_UID + st.st_gid)
        parent = parent.parent


def _user_ids(merged: Path, user: str) -> tuple[int, int]:
    """``user[:group]`` (names or numbers) as the image's uid and gid."""
    name, _, group = user.partition(":")
    passwd = _table(resolve_inside(merged, "/etc/passwd"))
    groups = _table(resolve_inside(merged, "/etc/group"))
    if name.isdigit():
        uid = int(name)
        gid = next((int(r[3]) for r in passwd.values() if r[2] == name), uid)
    elif name in passwd:
        uid, gid = int(passwd[name][2]), int(passwd[name][3])
    else:
        raise BuildError(f"unknown user {name!r} in the image", "Dockerfile",
                         "create it first (RUN useradd ...)")
    if group:
        if group.isdigit():
            gid = int(group)
        elif group in groups:
            gid = int(groups[group][2])
        else:
            raise BuildError(f"unknown group {group!r} in the image", "Dockerfile",
                             "create it first (RUN groupadd ...)")
    return uid, gid


def _table(path: Path) -> dict[str, list[str]]:
    if not path.is_file():
        return {}
    rows = [line.split(":") for line in path.read_text(errors="replace").splitlines()]
    return {r[0]: r for r in rows if len(r) >= 4}
