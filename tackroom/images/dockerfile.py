"""A Dockerfile read into the build steps that make its image, as Docker (BuildKit) reads it.

:func:`parse_dockerfile` turns the text into a base image name, a sequence of :class:`Run`,
:class:`Copy`, :class:`Workdir` and :class:`User` steps with every variable already
substituted, and the final :class:`ImageConfig`. A file that only Docker can build (several
stages, ``COPY --from``, ``FROM scratch``) is parsed all the same; its ``unsupported`` says why.
A malformed file raises :class:`~tackroom.core.errors.ConfigError` naming the line.
"""

from __future__ import annotations

import json
import platform
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

from tackroom.core.errors import ConfigError

#: The PATH every Docker base image sets (and built environments' processes get).
DOCKER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: What a Dockerfile starts with; ``ENV PATH=/x:$PATH`` extends it.
DEFAULT_ENV: Mapping[str, str] = {"PATH": DOCKER_PATH}
_ARCHIVES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tbz2", ".tar.zst")
_IGNORED = {"EXPOSE", "LABEL", "VOLUME", "HEALTHCHECK", "STOPSIGNAL", "MAINTAINER", "ONBUILD"}
_KNOWN = _IGNORED | {"FROM", "RUN", "CMD", "ENTRYPOINT", "ENV", "ARG", "ADD", "COPY", "WORKDIR",
                     "USER", "SHELL"}
_HEREDOC = re.compile(r"^(\d*)<<(-?)([^<].*)$")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Run:
    """``RUN``: execute ``argv`` as ``user`` in ``workdir`` with ``env`` (ENV and ARG values)."""

    argv: tuple[str, ...]
    env: dict[str, str]
    workdir: str
    user: str
    text: str  # the instruction as written, heredoc bodies included: for logs


@dataclass(frozen=True)
class Copy:
    """``COPY`` / ``ADD`` of build-context ``sources`` (globs as written) to absolute ``dest``.

    ``dest_is_dir``: the destination was written as a directory (trailing ``/``, ``.``, or
    several sources); the builder must also copy *into* ``dest`` when it already is one, as
    Docker does. ``heredoc`` maps a source name to the text of an inline file; ``url``: an
    ``ADD`` of an http(s) URL; ``extract``: an ``ADD`` of a local tar archive, unpacked.
    Files are owned by root unless ``chown`` says otherwise, whatever ``USER`` is.
    """

    sources: tuple[str, ...]
    dest: str
    dest_is_dir: bool
    chown: str | None = None
    chmod: str | None = None
    add: bool = False
    url: bool = False
    extract: bool = False
    heredoc: dict[str, str] | None = None
    workdir: str = "/"


@dataclass(frozen=True)
class Workdir:
    """``WORKDIR``: Docker creates ``path`` (absolute) if it is missing."""

    path: str


@dataclass(frozen=True)
class User:
    """``USER``: later steps and the container run as ``user`` (``name[:group]`` or ids)."""

    user: str


Step = Run | Copy | Workdir | User


@dataclass(frozen=True)
class ImageConfig:
    """What the built image's container starts with: ``cmd``/``entrypoint`` are None if unset."""

    env: dict[str, str]
    workdir: str = "/"
    user: str = "root"
    cmd: tuple[str, ...] | None = None
    entrypoint: tuple[str, ...] | None = None
    shell: tuple[str, ...] = ("/bin/sh", "-c")


@dataclass(frozen=True)
class Dockerfile:
    """A parsed Dockerfile; ``unsupported`` (one line) is set when only Docker can build it."""

    base: str
    steps: tuple[Step, ...]
    config: ImageConfig
    unsupported: str | None = None


@dataclass
class _Heredoc:
    token: str  # as written in the instruction, e.g. <<-"EOF"
    name: str
    chomp: bool  # <<- : leading tabs are stripped from the body
    quoted: bool  # <<"EOF" : the body is not expanded
    body: str = ""


@dataclass
class _Stage:
    """What is in effect at a point of the file; a new FROM starts a fresh one."""

    env: dict[str, str]
    args: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    user: str = "root"
    shell: tuple[str, ...] = ("/bin/sh", "-c")
    cmd: tuple[str, ...] | None = None
    entrypoint: tuple[str, ...] | None = None
    steps: list[Step] = field(default_factory=list)

    def vars(self) -> dict[str, str]:
        return {**self.args, **self.env}  # an ENV always wins over an ARG of the same name

    def config(self) -> ImageConfig:
        return ImageConfig(dict(self.env), self.workdir, self.user, self.cmd, self.entrypoint,
                           self.shell)


def _base_workdir(image: str) -> str:
    """Where relative paths start in ``image``: its WORKDIR where the mapped base has one
    (Terminal-Bench's bases: ``/app``, so ``COPY data.csv ./`` lands in ``/app``), else ``/``."""
    from tackroom.images.bases import UnmappedBase, resolve_base  # its sibling; no cycle
    try:
        return resolve_base(image).workdir
    except UnmappedBase:
        return "/"


def parse_dockerfile(text: str, *, where: str = "Dockerfile",
                     build_args: Mapping[str, str] = {},  # noqa: B006 - read only
                     base_env: Mapping[str, str] = DEFAULT_ENV) -> Dockerfile:
    """Parse ``text``; ``build_args`` are ``--build-arg`` values (only declared ARGs take them).

    ``base_env`` is the base image's environment, which ``$VAR`` in ENV and ARG can extend.
    """
    lines = text.removeprefix("\ufeff").replace("\r\n", "\n").split("\n")
    escape = _directives(lines, where)
    # ARGs before the first FROM: visible to FROM and to redeclarations (ARG NAME) in a stage;
    # BuildKit predefines the platform ones (ARG TARGETARCH, then .../tool-$TARGETARCH.tgz)
    meta: dict[str, str] = {**_platform_args(), **{k: v for k, v in build_args.items()
                                                   if k in _PLATFORM_ARGS}}
    stage: _Stage | None = None
    base, first, froms, unsupported = "", None, 0, None
    for lineno, kw, args, source, heredocs in _instructions(lines, escape, where):
        at = f"{where}:{lineno}"
        if kw not in _KNOWN:
            raise ConfigError(f"unknown instruction {kw}", at, "see the Dockerfile reference")
        if not args.strip() and not heredocs:
            raise ConfigError(f"{kw} needs arguments", at)
        if kw == "ARG":
            _arg(args, escape, at, meta, stage, build_args)
            continue
        if kw == "FROM":
            froms += 1
            words = [w for w in _split(args, escape, at) if not w.startswith("--platform")]
            image = _expand(words[0], meta, escape, at) if words else ""
            if froms == 1:
                base = image
                unsupported = unsupported or (
                    "FROM scratch builds an image from nothing" if image == "scratch" else None)
            elif first is None:
                first = stage
                unsupported = unsupported or f"multi-stage build (FROM {image} at line {lineno}); " \
                              "only Docker builds those"
            stage = _Stage(env=dict(base_env), workdir=_base_workdir(image))
            continue
        if stage is None:
            raise ConfigError(f"{kw} before FROM", at, "a Dockerfile starts with FROM")
        reason = _instruction(stage, kw, args, source, heredocs, escape, at)
        unsupported = unsupported or reason
    if stage is None:
        raise ConfigError("no FROM instruction", f"{where}:1", "a Dockerfile starts with FROM")
    final = first or stage
    return Dockerfile(base, tuple(final.steps), final.config(), unsupported)


_PLATFORM_ARGS = ("TARGETPLATFORM", "TARGETOS", "TARGETARCH", "TARGETVARIANT",
                  "BUILDPLATFORM", "BUILDOS", "BUILDARCH", "BUILDVARIANT")


def _platform_args() -> dict[str, str]:
    """BuildKit's platform ARGs for this machine, which the image is built for."""
    arch = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower(), platform.machine().lower())
    values = ("linux/" + arch, "linux", arch, "")
    return dict(zip(_PLATFORM_ARGS, values * 2, strict=True))


def _instruction(st: _Stage, kw: str, args: str, source: str, heredocs: list[_Heredoc],
                 escape: str, at: str) -> str | None:
    """Apply one instruction after FROM to ``st``; the reason if only Docker can do it."""
    if kw in _IGNORED:
        return None  # metadata, or ONBUILD triggers that only run in a child image
    if kw == "RUN":
        flags, rest = _flags(args, {"mount", "network", "security"}, at)
        for mount in flags.get("mount", []):
            if not re.search(r"(^|,)type=(cache|tmpfs)(,|$)", mount or ""):
                return f"RUN --mount={mount} needs Docker's BuildKit"
        st.steps.append(Run(_run_argv(st.shell, rest, heredocs, at), st.vars(), st.workdir,
                            st.user, source))
    elif kw in ("COPY", "ADD"):
        return _copy(st, kw, args, heredocs, escape, at)
    elif kw in ("CMD", "ENTRYPOINT"):
        argv = _exec_form(args, at) or (*st.shell, args.strip())
        if kw == "CMD":
            st.cmd = tuple(argv)
        else:
            st.entrypoint = tuple(argv)
    elif kw == "SHELL":
        shell = _exec_form(args, at)
        if not shell:
            raise ConfigError("SHELL needs a JSON array, e.g. [\"/bin/bash\", \"-c\"]", at)
        st.shell = tuple(shell)
    elif kw == "ENV":
        # need_value=True: every name has a value, none is None
        st.env.update(cast("dict[str, str]", _pairs(args, escape, at, st.vars(), need_value=True)))
    elif kw == "WORKDIR":
        st.workdir = _abspath(st.workdir, _expand(args.strip(), st.vars(), escape, at))
        st.steps.append(Workdir(st.workdir))
    elif kw == "USER":
        st.user = _expand(args.strip(), st.vars(), escape, at)
        st.steps.append(User(st.user))
    return None


def _arg(args: str, escape: str, at: str, meta: dict[str, str], st: _Stage | None,
         build_args: Mapping[str, str]) -> None:
    """``ARG name[=default] ...``: a build arg overrides the default; a redeclared name
    without a default takes the value it had before the first FROM."""
    scope = meta if st is None else st.args
    vars_ = meta if st is None else st.vars()
    for name, default in _pairs(args, escape, at, vars_, need_value=False).items():
        if name in build_args:
            scope[name] = build_args[name]
        elif default is not None:
            scope[name] = default
        elif st is not None and name in meta:
            scope[name] = meta[name]


def _copy(st: _Stage, kw: str, args: str, heredocs: list[_Heredoc], escape: str,
          at: str) -> str | None:
    flags, rest = _flags(args, {"chown", "chmod", "link", "from", "parents", "exclude",
                                "checksum", "keep-git-dir"}, at)
    if "from" in flags:
        return f"{kw} --from={flags['from'][0]} copies out of another image or build stage"
    if "parents" in flags or "exclude" in flags:
        return f"{kw} --parents/--exclude needs Docker's BuildKit"
    vars_ = st.vars()
    inline = {h.token: h for h in heredocs}
    words = _exec_form(rest, at) or _split(rest, escape, at)
    words = [inline[w].name if w in inline else _expand(w, vars_, escape, at) for w in words]
    if len(words) < 2:
        raise ConfigError(f"{kw} needs a source and a destination", at)
    *sources, dest = words
    dest_is_dir = dest.endswith("/") or dest in (".", "")
    if len(sources) > 1 and not dest_is_dir:
        raise ConfigError(f"{kw} of several sources needs a destination ending in /", at)
    add = kw == "ADD"
    url = add and any(re.match(r"https?://", s) for s in sources)
    if add and any(s.startswith("git@") or re.match(r"https?://.*\.git(#.*)?$", s)
                   for s in sources):
        return "ADD of a git repository needs Docker"
    extract = add and not url and any(s.lower().endswith(_ARCHIVES) for s in sources)

    def chown_chmod(name: str) -> str | None:
        values = flags.get(name)
        return _expand(values[-1], vars_, escape, at) if values and values[-1] else None

    bodies = {h.name: _chomp(h.body, h.chomp) if h.quoted
              else _expand(_chomp(h.body, h.chomp), vars_, escape, at, quotes=False)
              for h in heredocs}
    st.steps.append(Copy(tuple(sources), _abspath(st.workdir, dest), dest_is_dir,
                         chown_chmod("chown"), chown_chmod("chmod"), add, url, extract,
                         bodies or None, st.workdir))
    return None


def _run_argv(shell: tuple[str, ...], cmd: str, heredocs: list[_Heredoc],
              at: str) -> tuple[str, ...]:
    """RUN's argv as BuildKit makes it: exec form as is, else ``(*shell, command)``."""
    argv = _exec_form(cmd, at)
    if argv:
        return tuple(argv)
    if len(heredocs) == 1 and cmd.strip() == heredocs[0].token:
        body = _chomp(heredocs[0].body, heredocs[0].chomp)
        if body.startswith("#!"):
            # BuildKit runs a heredoc with a shebang as an executable file, not through SHELL
            runner = 'f=$(mktemp) && printf %s "$1" >"$f" && chmod +x "$f" && "$f"; ' \
                     'rc=$?; rm -f "$f"; exit $rc'
            return ("/bin/sh", "-c", runner, "sh", body)
        return (*shell, body)
    # heredocs fed to a command (RUN python3 <<EOF): the shell reads them from the script
    full = cmd.strip() + "".join(f"\n{h.body}{h.name}" for h in heredocs)
    if not full:
        raise ConfigError("RUN needs a command", at)
    return (*shell, full)


def _directives(lines: list[str], where: str) -> str:
    """The escape character the parser directives at the top name (``\\`` by default)."""
    escape = "\\"
    for lineno, line in enumerate(lines, 1):
        m = re.match(r"\s*#\s*([A-Za-z]+)\s*=\s*(\S*)\s*$", line)
        if not m:
            break  # directives end at the first line that is not one, comment or blank alike
        if m.group(1).lower() == "escape":
            if m.group(2) not in ("\\", "`"):
                raise ConfigError(f"escape directive must be \\ or `, not {m.group(2)!r}",
                                  f"{where}:{lineno}")
            escape = m.group(2)
    return escape


def _instructions(lines: list[str], escape: str, where: str):
    """Yield ``(line, KEYWORD, arguments, source text, heredocs)`` per instruction."""
    cont = re.compile(re.escape(escape) + r"[ \t]*$")
    i, n = 0, len(lines)
    while i < n:
        start, raw = i + 1, lines[i]
        i += 1
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        line, source = raw.lstrip(), [raw]
        going = bool(cont.search(line))
        line = cont.sub("", line)
        while going and i < n:
            nxt = lines[i]
            i += 1
            source.append(nxt)
            if not nxt.strip() or nxt.lstrip().startswith("#"):
                continue  # comments and blank lines inside a continuation are dropped
            going = bool(cont.search(nxt))
            line += cont.sub("", nxt)
        kw, _, args = line.strip().partition(" ")
        kw, _, more = kw.partition("\t")  # a tab may separate the keyword too
        kw, args = kw.upper(), f"{more} {args}".strip()
        heredocs: list[_Heredoc] = []
        if kw in ("RUN", "COPY", "ADD") and "<<" in args and not args.startswith("["):
            words = _split(args, escape, f"{where}:{start}")
            if any(re.fullmatch(r"\d*<<-?", w) for w in words[:-1]):
                # BuildKit also reads "<< EOF" as a heredoc: close the gap, as the shell would
                for j in reversed(range(len(words) - 1)):
                    if re.fullmatch(r"\d*<<-?", words[j]) and words[j + 1][0] != "<":
                        words[j:j + 2] = [words[j] + words[j + 1]]
                args = " ".join(words)
            heredocs = _heredocs(args, escape, f"{where}:{start}")
            for doc in heredocs:
                body = []
                while True:
                    if i >= n:
                        raise ConfigError(f"unterminated heredoc (no line {doc.name})",
                                          f"{where}:{start}", f"end it with a line {doc.name}")
                    text = lines[i]
                    i += 1
                    source.append(text)
                    if (text.lstrip("\t") if doc.chomp else text) == doc.name:
                        break
                    body.append(text + "\n")
                doc.body = "".join(body)
        yield start, kw, args, "\n".join(source), heredocs


def _heredocs(args: str, escape: str, at: str) -> list[_Heredoc]:
    docs = []
    for word in _split(args, escape, at):
        m = _HEREDOC.match(word)
        if m:
            name = _expand(m.group(3), {}, escape, at)
            docs.append(_Heredoc(word, name, m.group(2) == "-", any(q in m.group(3) for q in "'\"")))
    return docs


def _chomp(body: str, chomp: bool) -> str:
    return "".join(line.lstrip("\t") for line in body.splitlines(True)) if chomp else body


def _flags(args: str, known: set[str], at: str) -> tuple[dict[str, list[str | None]], str]:
    """Leading ``--name[=value]`` flags (a name may repeat) and the rest of the arguments."""
    flags: dict[str, list[str | None]] = {}
    while m := re.match(r"--([A-Za-z][\w-]*)(?:=(\S*))?(?:\s+|$)", args):
        if m.group(1) not in known:
            raise ConfigError(f"unknown flag --{m.group(1)}", at)
        flags.setdefault(m.group(1), []).append(m.group(2))
        args = args[m.end():]
    return flags, args


def _exec_form(args: str, at: str) -> list[str] | None:
    """The JSON (exec) form's list, or None for the shell form (``RUN [ -f x ]`` is shell)."""
    text = args.strip()
    if not text.startswith("["):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value
    if re.match(r"\[\s*\"", text) or value is not None:
        raise ConfigError(f"bad JSON form {text[:60]}", at, 'write ["executable", "arg", ...]')
    return None


def _pairs(args: str, escape: str, at: str, vars_: Mapping[str, str],
           need_value: bool) -> dict[str, str | None]:
    """ENV/ARG ``k=v k2="v 2"`` pairs, or the legacy ``k value with spaces`` (ENV only)."""
    words = _split(args, escape, at)
    if need_value and "=" not in words[0]:
        if len(words) < 2:
            raise ConfigError(f"ENV {words[0]} has no value", at, "write ENV NAME=value")
        value = args.strip()[len(words[0]):].strip()
        return {words[0]: _expand(value, vars_, escape, at)}
    out: dict[str, str | None] = {}
    for word in words:
        name, eq, value = word.partition("=")
        if not _NAME.fullmatch(name) or (need_value and not eq):
            raise ConfigError(f"bad variable {word!r}", at, "write NAME=value")
        # Docker substitutes from before the instruction: ENV a=bye b=$a takes the old $a
        out[name] = _expand(value, vars_, escape, at) if eq else None
    return out


def _split(text: str, escape: str, at: str) -> list[str]:
    """Split on unquoted whitespace, keeping quotes and escapes for :func:`_expand`."""
    words, cur, quote, i = [], None, None, 0
    while i < len(text):
        c = text[i]
        if quote is None and c in " \t\n":
            if cur is not None:
                words.append(cur)
            cur, i = None, i + 1
            continue
        cur = (cur or "") + c
        if c == escape and quote != "'" and i + 1 < len(text):
            cur, i = cur + text[i + 1], i + 2
            continue
        if quote is None and c in "'\"":
            quote = c
        elif c == quote:
            quote = None
        i += 1
    if quote:
        raise ConfigError(f"unterminated {quote} quote", at)
    return words + ([cur] if cur is not None else [])


def _expand(word: str, vars_: Mapping[str, str], escape: str, at: str,
            quotes: bool = True) -> str:
    """Docker's word processing: quote removal, escapes and ``$VAR`` / ``${VAR...}``."""
    out, quote, i, n = [], None, 0, len(word)
    while i < n:
        c = word[i]
        if quote == "'":
            if c == "'":
                quote = None
            else:
                out.append(c)
        elif c == escape and i + 1 < n:
            if (quote == '"' and word[i + 1] not in ('"', "$", escape)) or (
                    not quotes and word[i + 1] not in ("$", escape)):
                out.append(c)  # in double quotes and heredocs only these can be escaped
            out.append(word[i + 1])
            i += 1
        elif quotes and quote is None and c in "'\"":
            quote = c
        elif quotes and quote == '"' and c == '"':
            quote = None
        elif c == "$" and i + 1 < n and word[i + 1] == "{":
            end, depth = i + 2, 1
            while end < n and depth:
                depth += {"{": 1, "}": -1}.get(word[end], 0)
                end += 1
            if depth:
                raise ConfigError(f"missing }} in {word!r}", at)
            out.append(_braced(word[i + 2:end - 1], vars_, escape, at))
            i = end - 1
        elif c == "$" and (m := _NAME.match(word, i + 1)):
            out.append(vars_.get(m.group(), ""))
            i = m.end() - 1
        else:
            out.append(c)
        i += 1
    return "".join(out)


def _braced(inner: str, vars_: Mapping[str, str], escape: str, at: str) -> str:
    """``${NAME}``, ``${NAME:-word}``, ``${NAME-word}``, ``${NAME:+word}``, ``${NAME+word}``."""
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:?)([-+?])(.*))?", inner, re.S)
    if not m:
        raise ConfigError(f"bad substitution ${{{inner}}}", at)
    name, colon, op, word = m.groups()
    value = vars_.get(name)
    present = value is not None and (value != "" or not colon)
    if op is None:
        return value or ""
    if op == "-":
        return (value or "") if present else _expand(word, vars_, escape, at)
    if op == "+":
        return _expand(word, vars_, escape, at) if present else ""
    if not present:
        raise ConfigError(f"{name} is not set: {_expand(word, vars_, escape, at)}", at)
    return value or ""


def _abspath(workdir: str, path: str) -> str:
    """``path`` resolved against ``workdir``, normalised, always absolute."""
    full = posixpath.normpath(posixpath.join(workdir, path or "."))
    return "/" + full.lstrip("/")
