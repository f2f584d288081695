"""Harbor task directories (and Terminal-Bench's older ``task.yaml`` layout), read and laid out.

A Harbor task directory::

    instruction.md        what the agent is asked to do
    task.toml             [metadata] difficulty/category/tags, [agent] timeout_sec,
                          [verifier] timeout_sec and env, [solution] env,
                          [environment] memory_mb and the network asked for, [tackroom] ...
    environment/          files laid out in the task's working directory; an optional
                          environment/Dockerfile is read as a small subset (see below)
    tests/test.sh         the verifier: writes a reward to /logs/verifier/reward.txt
    solution/solve.sh     the reference solution (optional)

A task with a Dockerfile runs on the **environment its Dockerfile builds**
(``environment = "image"``, the default): the ``FROM`` image mapped to a Debian
root file system and the Dockerfile's steps applied, without Docker
(:mod:`tackroom.images.build`; the Terminal-Bench layout is converted to this
one on import). A task may instead say ``[tackroom] environment = "host"``: the
sandbox's read-only view of this machine's system is then its image, and of its
Dockerfile only ``WORKDIR`` (where the task directory is also mounted),
``COPY``/``ADD`` of local files into it, ``ENV`` and ``RUN`` (run once in the
sandbox when the task is laid out) are honoured — the built-in tasks, which
need nothing more, run so. What cannot run here (a prebuilt image, extra
``docker-compose`` services, an unmapped base image; on the host system also
package installs and downloads) makes a task *unsupported*, with the reason —
see :func:`check_supported`.
"""

from __future__ import annotations

import re
import shlex
import shutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tackroom.core.errors import ConfigError
from tackroom.images.bases import UnmappedBase, resolve_base
from tackroom.images.dockerfile import parse_dockerfile
from tackroom.suites.terminal.compose import Compose, find_compose, read_compose

#: Commands that fetch from the network or need Docker; a task using them is skipped.
_NETWORK = re.compile(
    r"(?<![\w./-])(apt-get|apt|apk|yum|dnf|pip3?|pipx|uv|uvx|poetry|conda|mamba|npm|npx|yarn|"
    r"pnpm|curl|wget|docker|cargo\s+install|go\s+(?:get|install)|git\s+clone|gem\s+install)"
    r"(?![\w.-])")
#: Where a task's working directory may not be mounted (the system and the verifier's paths).
_RESERVED = ("/", "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/proc", "/dev", "/tmp",
             "/logs", "/tests", "/solution", "/sys", "/root", "/home", "/var", "/run")
_ID = re.compile(r"^[a-z0-9][a-z0-9._-]{0,79}$")
#: Harbor's network modes (``network_mode`` of [environment], [agent], [verifier]).
NETWORK_MODES = ("public", "no-network", "allowlist")
#: A whole env value that Harbor reads from the host: ``${VAR}`` or ``${VAR:-default}``.
_HOST_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?\}", re.S)


@dataclass
class TaskDir:
    """One task directory, parsed and checked.

    ``workdir`` is the path the task expects to work in (``WORKDIR``;
    ``/app`` for imported tasks by default, ``/task`` when there is no
    Dockerfile); the sandbox mounts the task directory at ``/task`` *and*
    there. ``setup`` are the Dockerfile's ``RUN`` commands, run once at layout.
    """

    id: str
    path: Path
    instruction: str
    workdir: str = "/task"
    copies: list[tuple[str, str]] = field(default_factory=list)  # (src in environment/, dest)
    setup: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    agent_timeout_s: float = 300.0
    verifier_timeout_s: float = 60.0
    command_timeout_s: float = 10.0
    memory_mb: int = 512
    disk_mb: int = 64
    category: str = ""
    difficulty: str = ""
    tags: tuple[str, ...] = ()
    docker_image: str = ""  # a prebuilt image named in task.toml: needs Docker
    #: "image": runs on the environment its Dockerfile builds; "host": on this machine's system.
    environment: str = "host"
    dockerfile: Path | None = None  # environment/Dockerfile, when there is one
    #: ``[verifier] env`` and ``[solution] env``: set for tests/test.sh and for the solution.
    verifier_env: dict[str, str] = field(default_factory=dict)
    solution_env: dict[str, str] = field(default_factory=dict)
    #: What task.toml asks that its episodes run otherwise (the network), a line each.
    notes: tuple[str, ...] = ()
    #: Why the task cannot run as task.toml says (an env value only the host has), or "".
    refused: str = ""

    def compose(self) -> Compose:
        """The task's compose file, read: the services to run beside the agent."""
        path = find_compose(self.path)
        return read_compose(path) if path is not None else Compose()

    @property
    def builds(self) -> bool:
        """Whether the task runs on an environment built from its Dockerfile."""
        return self.environment == "image" and self.dockerfile is not None

    @property
    def tests(self) -> Path:
        return self.path / "tests"

    @property
    def solution(self) -> Path | None:
        p = self.path / "solution" / "solve.sh"
        return p if p.is_file() else None

    def solution_script(self) -> str | None:
        """``solution/solve.sh`` with ``[solution] env`` exported first (the expert runs it as
        one command, where no other way to set its variables exists); None without one."""
        if self.solution is None:
            return None
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in self.solution_env.items())
        return exports + self.solution.read_text()

    @property
    def description(self) -> str:
        for line in self.instruction.splitlines():
            line = line.strip().lstrip("#").strip()
            if line:
                return line[:100]
        return ""

    def lay_out(self, dest: Path) -> None:
        """Copy the environment's files into ``dest`` (the host side of the task dir)."""
        env = self.path / "environment"
        if not (env / "Dockerfile").is_file():
            # No Dockerfile: the environment folder *is* the task directory's content.
            if env.is_dir():
                shutil.copytree(env, dest, symlinks=True, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("Dockerfile"))
            return
        for src, target in self.copies:
            rel = _under(target, self.workdir)
            assert rel is not None  # checked at load time
            source = (env / src).resolve()
            out = dest / rel
            if source.is_dir():
                shutil.copytree(source, out, symlinks=True, dirs_exist_ok=True)
            else:
                if target.endswith("/") or out.is_dir():
                    out = out / source.name
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, out)


def _under(path: str, root: str) -> str | None:
    """``path`` relative to ``root`` (relative paths are under it), or ``None`` if outside."""
    if not path.startswith("/"):
        return path.strip("/") or "."
    root = root.rstrip("/")
    if path.rstrip("/") == root:
        return "."
    if path.startswith(root + "/"):
        return path[len(root) + 1:].strip("/") or "."
    return None


def _bad(what: str, where: Path, fix: str) -> ConfigError:
    return ConfigError(what, str(where), fix)


def load_task(path: Path) -> TaskDir:
    """Read a Harbor task directory; a clear :class:`ConfigError` when it is malformed."""
    path = Path(path)
    if not path.is_dir():
        raise _bad("no such task directory", path, "pass a directory with instruction.md, "
                   "task.toml and tests/test.sh")
    task_id = path.name.lower()
    if not _ID.match(task_id):
        raise _bad(f"task id {path.name!r} is not a valid id", path,
                   "name the directory with lowercase letters, digits, '.', '_' or '-'")
    instr = path / "instruction.md"
    if not instr.is_file():
        raise _bad("missing instruction.md", path, "write the task's instruction there")
    if not (path / "tests" / "test.sh").is_file():
        raise _bad("missing tests/test.sh", path,
                   "add a verifier that writes the reward to /logs/verifier/reward.txt")
    meta: dict[str, Any] = {}
    toml_path = path / "task.toml"
    if toml_path.is_file():
        try:
            meta = tomllib.loads(toml_path.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise _bad(f"task.toml is not valid TOML ({e})", toml_path, "fix the file") from None
    td = TaskDir(task_id, path.resolve(), instr.read_text(errors="replace"))
    try:
        _apply_meta(td, meta)
    except (TypeError, ValueError) as e:
        raise _bad(f"task.toml has a bad value ({e})", toml_path, "fix the file") from None
    dockerfile = path / "environment" / "Dockerfile"
    if dockerfile.is_file():
        td.dockerfile = dockerfile.resolve()
        if td.environment == "image":
            # The image holds the files, the ENV and the working directory.
            td.workdir = parse_dockerfile(dockerfile.read_text(errors="replace"),
                                          where=str(dockerfile)).config.workdir or "/"
            return td
        td.workdir = "/app"
        try:
            _read_dockerfile(td, dockerfile)
        except (ValueError, UnicodeDecodeError) as e:
            raise _bad(f"cannot read the Dockerfile ({e})", dockerfile, "fix the file") from None
    return td


def _apply_meta(td: TaskDir, meta: dict[str, Any]) -> None:
    md = meta.get("metadata", {})
    td.category = str(md.get("category", ""))
    td.difficulty = str(md.get("difficulty", ""))
    td.tags = tuple(str(t) for t in md.get("tags", []))
    td.agent_timeout_s = float(meta.get("agent", {}).get("timeout_sec", td.agent_timeout_s))
    td.verifier_timeout_s = float(meta.get("verifier", {}).get("timeout_sec",
                                                                td.verifier_timeout_s))
    env = meta.get("environment", {})
    td.docker_image = str(env.get("docker_image", "") or "")
    # Harbor sizes containers generously (2 GB+); the sandbox keeps its own, smaller caps.
    td.memory_mb = min(int(env.get("memory_mb", td.memory_mb)), 2048)
    own = meta.get("tackroom", {})
    td.environment = str(own.get("environment", "image"))
    if td.environment not in ("image", "host"):
        raise ValueError(f"[tackroom] environment must be \"image\" or \"host\", "
                         f"not {td.environment!r}")
    td.verifier_env, verifier_refused = _env_table(meta, "verifier", td)
    td.solution_env, solution_refused = _env_table(meta, "solution", td)
    td.refused = verifier_refused or solution_refused
    td.notes = (*_network_notes(meta), *td.notes)
    td.command_timeout_s = float(own.get("command_timeout_sec", td.command_timeout_s))
    td.memory_mb = int(own.get("memory_mb", td.memory_mb))
    td.disk_mb = int(own.get("disk_mb", td.disk_mb))
    if td.agent_timeout_s <= 0 or td.verifier_timeout_s <= 0 or td.command_timeout_s <= 0:
        raise ValueError("timeouts must be positive")


def _env_table(meta: dict[str, Any], section: str, td: TaskDir) -> tuple[dict[str, str], str]:
    """``[section] env``, and why the task is refused ("" if it is not).

    Harbor resolves a whole value ``${VAR}`` / ``${VAR:-default}`` from the host's
    environment when the trial starts. tackroom never reads this machine's variables into
    an episode (they would be kept in its records, and differ from machine to machine): a
    default is taken (noted), and a variable without one refuses the task.
    """
    table = meta.get(section, {}).get("env", {})
    if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
        raise ValueError(f"[{section}] env must be a table of strings")
    env: dict[str, str] = {}
    for key, value in table.items():
        m = _HOST_VAR.fullmatch(value)
        if m is None:
            env[key] = value
        elif m.group(2) is not None:
            env[key] = m.group(2)
            td.notes += (f"[{section}] env {key} takes its default {m.group(2)!r}: tackroom "
                         f"never reads this machine's ${m.group(1)}",)
        else:
            return {}, (f"task.toml's [{section}] env {key} = {value!r} reads this machine's "
                        f"${m.group(1)}, which tackroom never passes into an episode (its "
                        f"records would keep it); give it a default: ${{{m.group(1)}:-value}}")
    return env, ""


def _network_notes(meta: dict[str, Any]) -> list[str]:
    """What task.toml asks of the network beyond what tackroom gives, a line each.

    Episodes never have a network: an agent CLI reaches the model gateway only, the tests
    nothing; builds reach the package registries only. Harbor's ``allow_internet`` (its
    default: true) and ``network_mode`` (``public``, ``no-network``, ``allowlist`` with
    ``allowed_hosts``) are read so that an episode says when it ran with less than asked; a
    task that asks nothing gets no note.
    """
    notes = []
    for section, who in (("environment", "its episodes run"), ("agent", "the agent runs"),
                         ("verifier", "the tests run")):
        table = meta.get(section, {})
        mode, hosts = table.get("network_mode"), table.get("allowed_hosts", [])
        if mode is not None and mode not in NETWORK_MODES:
            raise ValueError(f"[{section}] network_mode must be one of "
                             f"{', '.join(NETWORK_MODES)}, not {mode!r}")
        if not isinstance(hosts, list):
            raise ValueError(f"[{section}] allowed_hosts must be a list of host names")
        internet = table.get("allow_internet") if section == "environment" else None
        if internet is not None and not isinstance(internet, bool):
            raise ValueError(f"[environment] allow_internet must be true or false, "
                             f"not {internet!r}")
        mode = mode or ("allowlist" if hosts else None)
        if mode == "public" or (mode is None and internet):
            asked = "network_mode = \"public\"" if mode else "allow_internet = true"
        elif mode == "allowlist" and hosts:
            asked = f"network_mode = \"allowlist\" ({', '.join(map(str, hosts))})"
        else:
            continue  # no network (or an empty allowlist): what tackroom gives
        notes.append(f"task.toml's [{section}] {asked} is not given: {who} with no "
                     "network (an agent CLI reaches the model gateway only; builds reach the "
                     "package registries only)")
    return notes


def _dockerfile_lines(text: str) -> list[tuple[str, str]]:
    """(instruction, arguments) pairs, with ``\\`` continuations joined and comments dropped."""
    out: list[tuple[str, str]] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    if buf.strip():
        word, _, rest = buf.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def _read_dockerfile(td: TaskDir, dockerfile: Path) -> None:
    """Honour the Dockerfile subset; anything that needs Docker is left to check_supported."""
    for word, rest in _dockerfile_lines(dockerfile.read_text()):
        if word == "WORKDIR":
            td.workdir = rest.rstrip("/") or "/"
        elif word in ("COPY", "ADD"):
            args = [a for a in shlex.split(rest) if not a.startswith("--")]
            if rest.startswith("["):
                args = [a.strip(' "[],') for a in rest.split(",")]
            if len(args) >= 2:
                td.copies += [(src, args[-1]) for src in args[:-1]]
        elif word == "ENV":
            if "=" in rest.split(" ", 1)[0]:
                for pair in shlex.split(rest):
                    key, _, value = pair.partition("=")
                    td.env[key] = value
            else:
                key, _, value = rest.partition(" ")
                td.env[key] = value.strip()
        elif word == "RUN":
            td.setup.append(rest)


def check_supported(td: TaskDir, *, docker: bool = False) -> str | None:
    """Why this task cannot run in the sandbox (``None`` if it can); ``docker``: with Docker,
    which builds any Dockerfile."""
    root = td.path
    if td.refused:
        return td.refused
    compose = td.compose()
    if compose.unsupported:
        return compose.unsupported
    if compose.services and not (td.builds or docker):
        return ("its docker-compose.yaml starts services, which run only on an environment "
                "built from its Dockerfile")
    df = root / "environment" / "Dockerfile"
    if td.docker_image and not (docker and td.dockerfile is not None):
        return (f"task.toml runs the prebuilt image {td.docker_image}; tackroom builds "
                "environments from the task's Dockerfile (with --sandbox docker it runs the "
                "prebuilt image when the daemon has it)")
    if docker:
        return None
    if td.builds:
        assert td.dockerfile is not None
        parsed = parse_dockerfile(td.dockerfile.read_text(errors="replace"),
                                  where=str(td.dockerfile))
        if parsed.unsupported:
            return parsed.unsupported
        try:
            resolve_base(parsed.base)
        except UnmappedBase as e:
            return e.reason
        return None
    if td.workdir in _RESERVED or not td.workdir.startswith("/"):
        return f"its working directory {td.workdir} cannot be mounted in the sandbox"
    for src, dest in td.copies:
        if src.startswith(("http://", "https://")):
            return f"the Dockerfile downloads {src} (needs the network)"
        if "*" in src or "?" in src:
            return f"the Dockerfile copies a glob ({src}); copy files by name"
        source = (root / "environment" / src).resolve()
        if not source.exists() or not source.is_relative_to((root / "environment").resolve()):
            return f"the Dockerfile copies {src}, which is not in environment/"
        if _under(dest, td.workdir) is None:
            return f"the Dockerfile copies to {dest}, outside the working directory {td.workdir}"
    for cmd in td.setup:
        if m := _NETWORK.search(cmd):
            return f"environment/Dockerfile runs '{m.group(0)}' (needs the network)"
    scripts = [root / "tests" / "test.sh", *sorted((root / "tests").glob("*.sh"))]
    for script in scripts:
        m = _NETWORK.search(_code(script.read_text(errors="replace")))
        if m:
            return f"tests/{script.name} runs '{m.group(0)}' (needs the network)"
    if df.is_file() and any(w == "FROM" and "scratch" in r for w, r in
                            _dockerfile_lines(df.read_text())):
        return "the Dockerfile builds FROM scratch (needs its own image)"
    return None


def _code(script: str) -> str:
    """A shell script without its comments (a comment never needs the network)."""
    return "\n".join(line.split(" #", 1)[0] for line in script.splitlines()
                     if not line.lstrip().startswith("#"))
