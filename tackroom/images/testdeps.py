"""A test script's network installs moved to build time, so that verification runs offline.

Terminal-Bench's ``run-tests.sh`` and Harbor's ``tests/test.sh`` install their test tools
(apt packages, pytest, uv) when they run, but an episode verifies without network.
:func:`split_test_script` cuts the script in two: ``install``, the installs to run once in
the image at build time, and ``verify``, the script with each of them replaced by a no-op.

What is hoisted: top-level commands only. An install inside an ``if`` block, a loop, a
function body or a subshell is left where it is (whether it runs depends on state the build
cannot know), and so is a command that feeds a heredoc. ``cd`` / ``export`` / ``source`` /
``NAME=value`` commands before an install are repeated in ``install`` (the installs depend on
them: ``cd /app`` before ``uv venv .venv``) and kept in ``verify``. ``install`` must run with
the working directory, environment and test files the verifier will have.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

MARK = ": tackroom: installed at build time: "
_APT = {"update", "install", "upgrade", "dist-upgrade", "full-upgrade", "build-dep", "clean",
        "autoclean", "autoremove"}
_STATE = {"cd", "export", "source", ".", "pushd"}
_OPEN = {"if": 1, "case": 1, "for": 1, "while": 1, "until": 1, "select": 1, "{": 1,
         "fi": -1, "esac": -1, "done": -1, "}": -1}
_FUNCTION = re.compile(r"\s*(function\s+[\w.:-]+|[\w.:-]+\s*\(\s*\))")
_UV = re.compile(r"https?://(?:astral\.sh/uv/(?:([0-9][^/]*)/)?install\.sh|github\.com/"
                 r"astral-sh/uv/releases/(?:download/([^/]+)|latest/download)/uv-installer\.sh)")
_HEREDOC = re.compile(r"(?<![<\w])<<-?\s*(['\"]?)([\w.-]+)\1")

#: uv's install script lives on astral.sh and GitHub, which the build's network (package
#: registries only) cannot reach; the same uv comes from PyPI. ``pip --user`` puts it where
#: the script does (~/.local/bin), and the script's ``env`` file is written too, for the
#: ``source $HOME/.local/bin/env`` that follows it in the test scripts. pip comes without
#: apt's recommendations (a compiler and Python's headers: ~600 MB of a tests layer that
#: Docker copies into every episode's container), as the real installer needs none.
_UV_FUNCTION = r"""tackroom_install_uv() {
  python3 -m pip --version >/dev/null 2>&1 || { apt-get update && apt-get install -y --no-install-recommends python3-pip; }
  PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --user --no-warn-script-location "uv${1:+==$1}"
  mkdir -p "$HOME/.local/bin"
  cat >"$HOME/.local/bin/env" <<'TACKROOM_EOF'
#!/bin/sh
case ":${PATH}:" in
    *:"$HOME/.local/bin":*) ;;
    *) export PATH="$HOME/.local/bin:$PATH" ;;
esac
TACKROOM_EOF
}
"""


@dataclass(frozen=True)
class TestScript:
    """``install`` (bash, empty if nothing is hoisted), ``verify`` (the script, with as many
    lines as it had) and ``installs`` (the hoisted commands, for logs)."""

    __test__ = False  # not a pytest test class, whatever its name

    install: str
    verify: str
    installs: tuple[str, ...]
    #: The helper scripts (see :func:`split_test_script`) whose installs ``install`` runs.
    helpers: tuple[str, ...] = ()


def split_test_script(text: str, helpers: Mapping[str, TestScript] = {}) -> TestScript:  # noqa: B006 - read only
    """Split a test script into its build-time installs and what is left to verify.

    ``helpers``: the other scripts of the tests folder that have installs, already split,
    by file name. A top-level ``source``/``.``/``bash``/``sh`` of one of them (Terminal-Bench's
    ``source $TEST_DIR/setup-uv-pytest.sh``) stays in ``verify`` (which then runs the
    helper's own ``verify``), and the helper's ``install`` is run in its place at build time
    (in this shell for ``source``, in a subshell otherwise).
    """
    lines = text.split("\n")
    verify: list[str] = []
    install: list[str] = []
    installs: list[str] = []
    used: list[str] = []
    pending: list[str] = []  # state commands not yet repeated in install
    depth, i = 0, 0
    while i < len(lines):
        start, unit = i, lines[i]
        i += 1
        pieces, complete = _scan(unit)
        while not complete and i < len(lines):
            unit += "\n" + lines[i]
            i += 1
            pieces, complete = _scan(unit)
        heredoc = _HEREDOC.search(_code(unit, pieces))
        if heredoc:  # the body is data, not commands: take it whole, hoist nothing
            end, chomp = heredoc.group(2), "<<-" in heredoc.group(0)
            while i < len(lines) and (lines[i].lstrip("\t") if chomp else lines[i]) != end:
                i += 1
            i = min(i + 1, len(lines))
            verify += lines[start:i]
            depth += _nesting(unit, pieces)
            continue
        top, depth = depth == 0, max(0, depth + _nesting(unit, pieces))
        chain = _chain(unit, pieces)
        helper = _helper(chain, helpers) if top else None
        if helper is not None:
            name, same_shell = helper
            body = helpers[name].install.rstrip("\n")
            install += [*pending, body if same_shell else f"(\n{body}\n)"]
            pending = []
            verify.append(unit)
            installs += helpers[name].installs
            used.append(name)
            continue
        kinds = [_kind(words) for _, _, words, _ in chain]
        if not top or "install" not in kinds:
            pending += [text for (text, _, _, _), k in zip(chain, kinds, strict=True)
                        if top and k == "state"]
            verify.append(unit)
            continue
        install += pending
        pending = []
        if all(k == "install" for k in kinds):
            # the whole line goes: one marker line, blank lines for the rest of it
            install.append(" ".join(_installed(t, w) + (f" {op}" if op else "")
                                    for t, op, w, _ in chain))
            indent = unit[:len(unit) - len(unit.lstrip())]
            verify.append(indent + MARK + shlex.quote(_one_line(unit)[:60])
                          + "\n" * unit.count("\n"))
        else:
            # installs chained to other commands: each install becomes a no-op in place, and
            # state (source .venv/bin/activate) stays, since verify needs it too
            out, at = [], 0
            for (t, op, w, span), k in zip(chain, kinds, strict=True):
                if k == "state":
                    install.append(t)
                elif k == "install":
                    install.append(_installed(t, w) + (" || true" if op == "||" else ""))
                    seg = unit[span[0]:span[1]]
                    lead, trail = seg[:len(seg) - len(seg.lstrip())], seg[len(seg.rstrip()):]
                    out += [unit[at:span[0]], lead, MARK, shlex.quote(_one_line(t)[:60]), trail]
                    at = span[1]
            new = "".join(out) + unit[at:]
            verify.append(new + "\n" * (unit.count("\n") - new.count("\n")))
        installs += [_one_line(t) for (t, _, _, _), k in zip(chain, kinds, strict=True)
                     if k == "install"]
    if not installs:
        return TestScript("", text, ())
    head = ["#!/bin/bash", "# The test script's installs, run at build time by tackroom.",
            "set -e"]
    if any("tackroom_install_uv" in line for line in install):
        head.append(_UV_FUNCTION.rstrip("\n"))
    return TestScript("\n".join(head + install) + "\n", "\n".join(verify), tuple(installs),
                      tuple(used))


#: Where a test script finds the other files of its tests folder.
_TESTS_DIRS = {"/tests", "$TEST_DIR", "${TEST_DIR}", "tests", "./tests", ""}


def _helper(chain: list, helpers: Mapping[str, TestScript]) -> tuple[str, bool] | None:
    """``(name, same shell)`` when ``chain`` is one command sourcing or running a helper."""
    if not helpers or len(chain) != 1 or len(chain[0][2]) != 1:
        return None
    words = _command(chain[0][2][0])
    if len(words) < 2 or words[0] not in ("source", ".", "bash", "sh"):
        return None
    folder, name = posixpath.split(words[1])
    if name not in helpers or folder not in _TESTS_DIRS:
        return None
    return name, words[0] in ("source", ".")


def _scan(text: str) -> tuple[list[tuple[int, int, str]], bool]:
    """Top-level commands of ``text`` as ``(start, end, operator after)``, and whether
    ``text`` is complete (no open quote, parenthesis or trailing ``\\`` / ``&&`` / ``|``)."""
    pieces: list[tuple[int, int, str]] = []
    start, i, n, quote, depth, dangling = 0, 0, len(text), "", 0, False
    while i < n:
        c = text[i]
        if c == "\\" and quote != "'":
            dangling = i == n - 1  # a \ that escapes the line's end: the line goes on
            i += 1
        elif quote:
            if c == quote:
                quote = ""
        elif c in "'\"`":
            quote = c
        elif c == "#" and (i == 0 or text[i - 1] in " \t\n;&|()"):
            end = text.find("\n", i)
            pieces.append((start, i, "#"))  # the comment ends the command before it
            start = i = n if end < 0 else end
            continue
        elif c == "(":
            depth += 1
        elif c == ")":
            depth = max(0, depth - 1)  # case patterns close what they never opened
        elif depth == 0 and c in ";&|\n":
            op = text[i:i + 2] if text[i:i + 2] in ("&&", "||", ";;") else c
            pieces.append((start, i, op))
            i += len(op)
            start = i
            continue
        i += 1
    last = pieces[-1][2] if pieces and not text[start:].strip() else ""
    complete = not quote and depth == 0 and not dangling \
        and last not in ("&&", "||", "|")
    pieces.append((start, n, ""))
    return [p for p in pieces if text[p[0]:p[1]].strip()], complete


def _code(text: str, pieces: list[tuple[int, int, str]]) -> str:
    return " ; ".join(text[a:b] for a, b, _ in pieces)


def _nesting(text: str, pieces: list[tuple[int, int, str]]) -> int:
    """How many blocks (if, loops, case, braces, functions) ``text`` opens, net."""
    total = 0
    for a, b, _ in pieces:
        piece = text[a:b]
        words = piece.split()
        total += _OPEN.get(words[0], 0) if words else 0
        if _FUNCTION.match(piece) and not piece.rstrip().endswith("}"):
            total += "{" in piece and words[0] != "{"
    return total


def _chain(text: str, pieces: list[tuple[int, int, str]]):
    """Pipelines of ``text``: ``(text, operator after, commands' words, (start, end))``."""
    chain, group = [], []
    for piece in pieces:
        group.append(piece)
        if piece[2] != "|":
            a, b = group[0][0], group[-1][1]
            cmds = [_words(text[p[0]:p[1]]) for p in group]
            chain.append((text[a:b].strip(), piece[2] if piece[2] not in ("\n", "#") else "",
                          cmds, (a, b)))
            group = []
    return chain


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command.replace("\\\n", " "))
    except ValueError:
        return []


def _kind(cmds: list[list[str]]) -> str:
    """``install``, ``state`` (cd, export, source, NAME=value) or ``other``."""
    first = cmds[0] if cmds else []
    if not first:
        return "other"
    if len(cmds) == 1 and (first[0] in _STATE or all(_assignment(w) for w in first)):
        return "state"
    words = _command(first)
    if len(cmds) > 1 and _fetches(words):
        return "install"  # curl/wget ... | sh (an installer) or | tar (an unpacked download)
    return "install" if words and _installs(words) else "other"


def _installs(words: list[str]) -> bool:
    prog, rest = posixpath.basename(words[0]), words[1:]
    sub = _positional(rest)
    if prog in ("apt-get", "apt", "aptitude"):
        return bool(sub) and sub[0] in _APT
    if re.fullmatch(r"pip[\d.]*", prog):
        return sub[:1] == ["install"]
    if re.fullmatch(r"python[\d.]*", prog) and "-m" in rest:
        module = rest[rest.index("-m") + 1:]
        return module[:1] in (["venv"], ["virtualenv"], ["ensurepip"]) or (
            module[:1] == ["pip"] and _positional(module[1:])[:1] == ["install"])
    if prog == "virtualenv":
        return True
    if prog == "uv":
        # ``uv init`` makes the project the ``uv add`` after it installs into (Terminal-Bench's
        # default test script): hoisted with it, or the build's ``uv add`` finds no project.
        return sub[:1] in (["venv"], ["add"], ["sync"], ["lock"], ["init"]) or sub[:2] in (
            ["pip", "install"], ["pip", "sync"], ["tool", "install"], ["python", "install"])
    if prog in ("npm", "pnpm"):
        return sub[:1] in (["install"], ["i"], ["ci"], ["add"])
    if prog == "curl":
        out = any(w in ("-o", "-O", "--output", "--remote-name", "--output-dir")
                  or w.startswith("--output=") or re.fullmatch(r"-[A-Za-z]*[oO][A-Za-z]*", w)
                  for w in rest)
        return out and _fetches(words)
    return prog == "wget" and _fetches(words)


def _fetches(words: list[str]) -> bool:
    """A curl/wget of a public host (not localhost, an IP or a one-word service name)."""
    if not words or posixpath.basename(words[0]) not in ("curl", "wget"):
        return False
    for word in words[1:]:
        m = re.match(r"(?:https?|ftp)://([^/:?#]+)", word)
        host = m.group(1).lower() if m else ""
        if "." in host and not re.fullmatch(r"[\d.]+", host) and not host.endswith(
                (".local", ".localhost", ".internal")):
            return True
    return False


def _installed(text: str, cmds: list[list[str]]) -> str:
    """What ``install`` runs for a hoisted pipeline: itself, or the uv stand-in."""
    for word in (cmds[0] if cmds else []):
        if (m := _UV.match(word)) and len(cmds) > 1:
            version = m.group(1) or m.group(2) or ""
            return f"tackroom_install_uv {shlex.quote(version)}" if version else \
                "tackroom_install_uv"
    return text


def _command(words: list[str]) -> list[str]:
    """``words`` without ``sudo -E``, ``env``, ``NAME=value`` and similar prefixes."""
    while words:
        if _assignment(words[0]):
            words = words[1:]
        elif words[0] in ("sudo", "env", "command", "time", "nohup", "exec"):
            words = words[1:]
            while words and words[0].startswith("-"):
                words = words[2:] if words[0] in ("-u", "-g") else words[1:]
        else:
            break
    return words


def _positional(words: list[str]) -> list[str]:
    """The non-option words; ``-o X`` style options' values are skipped."""
    out, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word in ("-o", "-c", "-t"):
            skip = True
        elif not word.startswith("-"):
            out.append(word)
    return out


def _assignment(word: str) -> bool:
    return re.match(r"[A-Za-z_]\w*=", word) is not None


def _one_line(text: str) -> str:
    return " ".join(text.replace("\\\n", " ").split())
