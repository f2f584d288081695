"""A task's ``docker-compose.yaml``: its main environment and the services beside it.

Terminal-Bench and Harbor tasks may declare services next to the container the
agent works in. A service runs when it is either

* a *program of the task's own image* — built from the same Dockerfile (or
  naming the same image) with a ``command`` of its own: it is started in the
  episode's tree; or
* a *mapped image* — ``image: redis``, ``postgres``, ``mysql``, ``mariadb``,
  ``nginx`` (any tag; :mod:`tackroom.images.services`): it runs on a Debian root
  file system of its own holding the server's packages.

Either way it starts before the agent, in a network namespace the episode's
sandboxes share (only a loopback: they reach each other, nothing else), its
name resolving to ``127.0.0.1``. Any other image, a build of another context
(``build: ./other``) or a bind-mounted host path makes the task unsupported,
with the reason.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tackroom.images.services import SERVICE_IMAGES, ServiceImage, service_image

#: The names compose files go by, in the order Docker looks for them.
COMPOSE_FILES = ("compose.yaml", "compose.yml", "docker-compose.yaml", "docker-compose.yml")


@dataclass(frozen=True)
class Service:
    """A service beside the agent: a program of the task's image, or a mapped image's server.

    For a mapped image (``image`` set), ``argv`` holds the server's flags only (the
    compose ``command``'s), and :attr:`runs` says how it starts and when it is ready.
    """

    name: str
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    ports: tuple[int, ...] = ()  # what it listens on: waited for before the episode starts
    image: str = ""  # another image's name (``postgres:16``); empty: the task's own image

    @property
    def runs(self) -> ServiceImage | None:
        """How the mapped image runs (``None`` for a program of the task's own image)."""
        return service_image(self.image) if self.image else None


@dataclass(frozen=True)
class Compose:
    """The main service's name, the services to run beside it, and why not, if not."""

    main: str = ""
    services: tuple[Service, ...] = ()
    unsupported: str | None = None


def find_compose(task_dir: Path) -> Path | None:
    """The task's compose file: in ``environment/`` (Harbor) or the task's root."""
    for where in (task_dir / "environment", task_dir):
        for name in COMPOSE_FILES:
            if (where / name).is_file():
                return where / name
    return None


def read_compose(path: Path) -> Compose:
    """Read a compose file; a file that cannot be read is an ``unsupported`` reason."""
    try:
        import yaml
    except ImportError:  # pragma: no cover - a dependency of tackroom
        return Compose(unsupported="reading docker-compose.yaml needs PyYAML")
    try:
        data = yaml.safe_load(path.read_text(errors="replace")) or {}
    except yaml.YAMLError as e:
        return Compose(unsupported=f"{path.name} is not valid YAML "
                                   f"({str(e).splitlines()[0]})")
    services = data.get("services") if isinstance(data, dict) else None
    if not isinstance(services, dict) or not services:
        return Compose()
    specs = {str(k): v if isinstance(v, dict) else {} for k, v in services.items()}
    main = _main(specs)
    extra: list[Service] = []
    for name, spec in specs.items():
        if name == main:
            continue
        if not _same_image(spec, specs[main]):
            other = _other_image(path.name, name, spec)
            if isinstance(other, str):
                return Compose(main, unsupported=other)
            extra.append(other)
            continue
        argv = _argv(spec.get("entrypoint"), spec.get("command"))
        if not argv:
            return Compose(main, unsupported=f"{path.name}: service {name!r} has no command "
                           "(it would run the image's own, which tackroom does not start)")
        extra.append(Service(name, argv, _env(spec.get("environment")),
                             spec.get("working_dir"), _ports(spec)))
    return Compose(main, tuple(extra))


def _other_image(file: str, name: str, spec: dict[str, Any]) -> Service | str:
    """The service of another image, or why it cannot run (a line)."""
    image = str(spec.get("image") or "")
    runs = service_image(image) if image and "build" not in spec else None
    if runs is None:
        what = f"image {image}" if image and "build" not in spec else "an image of its own"
        return (f"{file}: service {name!r} runs {what}; tackroom runs services only as "
                "programs of the task's own image or as one of the images "
                f"{', '.join(SERVICE_IMAGES)} (any tag)")
    if spec.get("entrypoint") is not None:
        return (f"{file}: service {name!r} ({image}) sets an entrypoint; tackroom starts "
                f"{runs.name}'s server itself")
    flags = runs.server_args(_argv(None, spec.get("command")))
    if flags is None:
        return (f"{file}: service {name!r} ({image}) runs a command other than the server "
                f"({' '.join(runs.servers)}), which tackroom does not start")
    mounts = _host_mounts(spec.get("volumes"))
    if mounts:
        return (f"{file}: service {name!r} ({image}) mounts {', '.join(mounts)} from the "
                "host, which tackroom does not do for services of other images")
    return Service(name, flags, _env(spec.get("environment")), None, (runs.port,), image)


def _host_mounts(volumes: Any) -> list[str]:
    """The host paths among compose ``volumes`` (named volumes are only storage: left out)."""
    found = []
    for item in volumes or []:
        if isinstance(item, dict):
            if item.get("type") == "bind":
                found.append(str(item.get("source", "")))
            continue
        source = str(item).split(":", 1)[0]
        if ":" in str(item) and source.startswith((".", "/", "~", "$")):
            found.append(source)
    return found


def _main(specs: dict[str, dict[str, Any]]) -> str:
    """The service the agent works in: ``client`` (Terminal-Bench's), else the first built."""
    if "client" in specs:
        return "client"
    return next((n for n, s in specs.items() if "build" in s), next(iter(specs)))


def _build_of(spec: dict[str, Any]) -> tuple[str, str] | None:
    build = spec.get("build")
    if build is None:
        return None
    if isinstance(build, str):
        return (build.rstrip("/") or ".", "Dockerfile")
    if isinstance(build, dict):
        return (str(build.get("context", ".")).rstrip("/") or ".",
                str(build.get("dockerfile", "Dockerfile")))
    return None


def _same_image(spec: dict[str, Any], main: dict[str, Any]) -> bool:
    build, main_build = _build_of(spec), _build_of(main)
    if build is not None:
        return build == main_build
    image = spec.get("image")
    return image is not None and image == main.get("image")


def _argv(entrypoint: Any, command: Any) -> tuple[str, ...]:
    def words(value: Any) -> list[str]:
        if value is None:
            return []
        if isinstance(value, str):
            return shlex.split(value)
        return [str(v) for v in value]
    return tuple(words(entrypoint) + words(command))


def _env(value: Any) -> dict[str, str]:
    if isinstance(value, dict):
        return {str(k): "" if v is None else str(v) for k, v in value.items()}
    out: dict[str, str] = {}
    for item in value or []:
        key, _, val = str(item).partition("=")
        out[key] = val
    return out


def _ports(spec: dict[str, Any]) -> tuple[int, ...]:
    """The ports a service listens on inside (``expose``, and ``ports``' container side)."""
    found: list[int] = []
    for item in [*(spec.get("expose") or []), *(spec.get("ports") or [])]:
        text = str(item.get("target", "")) if isinstance(item, dict) else str(item)
        inside = text.split(":")[-1].split("/")[0]
        if inside.isdigit():
            found.append(int(inside))
    return tuple(dict.fromkeys(found))
