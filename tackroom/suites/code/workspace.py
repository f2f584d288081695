"""The agent's repository on the host: path checks, file edits, snapshots, the file viewer.

File edits are applied here, directly to the task directory, after checking
that the path stays inside it (symlinks resolved, so a link made by a shell
command cannot point an edit outside). Commands run in the sandbox, which
sees the same directory at ``/task``. Every error is an
:class:`~tackroom.core.errors.ActionError` whose text the model is shown.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from tackroom.core.errors import ActionError
from tackroom.suites.code.tasks import REPO_PATH

#: Files larger than this are not shown or edited as text.
MAX_FILE_BYTES = 200_000
_SKIP_DIRS = {"__pycache__", ".git", ".tackroom_hidden"}


@dataclass
class Viewer:
    """The windowed file viewer's state: which file is open, and its first shown line."""

    path: str
    top: int
    window: int


class Workspace:
    """The repository directory of one episode.

    ``owner`` is the uid that files created here must belong to, so that the
    sandbox's unprivileged user can still change them (``None``: leave as is).
    """

    def __init__(self, root: Path, owner: int | None = None) -> None:
        self.root = root.resolve()
        self.owner = owner

    # -- paths -------------------------------------------------------------------------
    def resolve(self, path: str) -> tuple[Path, str]:
        """``(host path, repository-relative path)`` of ``path``, or an ActionError."""
        p = (path or "").strip()
        if not p:
            raise ActionError("no file path given; paths are relative to the repository, "
                              "e.g. pkg/module.py")
        if p == REPO_PATH or p.startswith(REPO_PATH + "/"):
            p = p[len(REPO_PATH):].lstrip("/")
        if os.path.isabs(p):
            raise ActionError(f"{path!r} is outside the repository; use a path relative to "
                              f"{REPO_PATH}, e.g. pkg/module.py")
        try:
            host = (self.root / p).resolve()
        except (OSError, ValueError, RuntimeError):  # NUL bytes, over-long names, link loops
            raise ActionError(f"{path[:200]!r} is not a usable file path") from None
        if host != self.root and self.root not in host.parents:
            raise ActionError(f"{path!r} is outside the repository; use a path inside "
                              f"{REPO_PATH}")
        return host, host.relative_to(self.root).as_posix()

    def read(self, path: str) -> tuple[str, str]:
        """``(text, relative path)`` of an existing text file."""
        host, rel = self.resolve(path)
        if not host.is_file():
            hint = "" if host.parent.is_dir() else " (nor its folder)"
            raise ActionError(f"no file {rel!r} in the repository{hint}; list files with ls "
                              "or use a path shown to you")
        if host.stat().st_size > MAX_FILE_BYTES:
            raise ActionError(f"{rel} is too large to handle as text "
                              f"({host.stat().st_size} bytes)")
        try:
            return host.read_text(), rel
        except UnicodeDecodeError:
            raise ActionError(f"{rel} is not a UTF-8 text file") from None
        except OSError as e:
            raise ActionError(f"cannot read {rel}: {e.strerror or e}") from None

    def write(self, path: str, text: str) -> str:
        """Create or overwrite a file (and its folders); returns the relative path."""
        host, rel = self.resolve(path)
        if host.is_dir():
            raise ActionError(f"{rel!r} is a folder, not a file")
        missing = [d for d in [host.parent, *host.parent.parents] if not d.exists()]
        existed = host.exists()
        try:
            data = text.encode()
        except UnicodeEncodeError:  # lone surrogates, e.g. from a JSON "\ud800" escape
            raise ActionError(f"the new content of {rel} is not valid Unicode text") from None
        if len(data) > MAX_FILE_BYTES:
            raise ActionError(f"the new content of {rel} is too large ({len(data)} bytes)")
        try:
            host.parent.mkdir(parents=True, exist_ok=True)
            host.write_bytes(data)
        except OSError as e:
            raise ActionError(f"cannot write {rel}: {e.strerror or e}") from None
        if self.owner is not None:
            for p in [*missing, *([] if existed else [host])]:
                os.lchown(p, self.owner, self.owner)
        return rel

    # -- state -------------------------------------------------------------------------
    def snapshot(self) -> dict[str, str]:
        """Every text file of the repository, relative path -> content."""
        out: dict[str, str] = {}
        for dirpath, dirs, files in os.walk(self.root):
            dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
            for name in sorted(files):
                host = Path(dirpath) / name
                if name.endswith(".pyc"):
                    continue
                try:
                    # Regular files only: a symlink may point anywhere, and opening a FIFO a
                    # command left would block (docs/security.md).
                    if not stat.S_ISREG(host.lstat().st_mode):
                        continue
                    rel = host.relative_to(self.root).as_posix()
                    rel.encode()  # a name that is not UTF-8 could not be shown or recorded
                    if host.stat().st_size > MAX_FILE_BYTES:
                        continue
                    out[rel] = host.read_text()
                except (OSError, UnicodeError):
                    continue
        return out


def replace_once(text: str, old: str, new: str, rel: str) -> str:
    """``text`` with its single occurrence of ``old`` replaced, or a helpful ActionError."""
    n = text.count(old)
    if n == 1:
        return text.replace(old, new)
    if n > 1:
        raise ActionError(f"the text to replace occurs {n} times in {rel}; include more "
                          "surrounding lines so that it matches exactly once")
    hint = ""
    squashed = [ln.strip() for ln in old.strip("\n").splitlines()]
    lines = text.splitlines()
    for i in range(len(lines) - len(squashed) + 1):
        if squashed and [ln.strip() for ln in lines[i:i + len(squashed)]] == squashed:
            hint = (f" It matches lines {i + 1}-{i + len(squashed)} only if whitespace is "
                    "ignored: copy the lines exactly, indentation included.")
            break
    raise ActionError(f"the text to replace was not found in {rel}.{hint} The file is "
                      "unchanged; copy the current lines exactly")


def numbered(lines: list[str], first: int) -> str:
    """``12:code`` lines, numbered from ``first`` (as SWE-agent's viewer shows them)."""
    return "\n".join(f"{first + i}:{ln}" for i, ln in enumerate(lines))


def window_text(rel: str, text: str, viewer: Viewer) -> str:
    """The viewer's window on ``text``, with a header and how much lies above and below."""
    lines = text.splitlines()
    top = viewer.top
    shown = lines[top - 1: top - 1 + viewer.window]
    above, below = top - 1, max(0, len(lines) - (top - 1) - len(shown))
    out = [f"[File: {REPO_PATH}/{rel} ({len(lines)} lines total)]"]
    if above:
        out.append(f"({above} more lines above)")
    out.append(numbered(shown, top) if shown else "(the file is empty)")
    if below:
        out.append(f"({below} more lines below)")
    return "\n".join(out)


def clamp_top(top: int, n_lines: int, window: int) -> int:
    """The first line of a window of ``window`` lines, kept within the file."""
    return max(1, min(top, max(1, n_lines - window + 1)))
