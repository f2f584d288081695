"""Images in the records: content-addressed files beside the store, referenced by the turns.

A screenshot in a message (an ``image_url`` part whose URL is a base64 ``data:``
URL) is not stored inline in the DuckDB file: :func:`externalize` writes its bytes
once to ``<store dir>/blobs/<sha256>.<ext>`` and puts a reference in the stored
message in place of the data URL::

    {"type": "image_url", "image_url": {"url": "tackroom-blob:<sha256>.png"}}

Every other key of the part (``detail``) is kept. Reading back, :func:`resolve`
turns each reference into the data URL again, so :meth:`RecordStore.load_episode`,
exports, training and the report see the messages exactly as the model did. A
reference whose file is missing stays a reference (readers show it as an image
that is not available).

The files are shared by every store in the directory and by every turn that
showed the same image (the same bytes are one file); deleting episodes leaves
them (they may be shared). Writes are atomic (a temporary file, then a rename),
and happen before the episode's rows are committed, so a committed turn never
names a file that is not there.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["REF_SCHEME", "BlobStore", "blob_dir", "externalize", "resolve", "is_ref"]

#: The URL scheme of a reference to a stored image.
REF_SCHEME = "tackroom-blob:"
_DATA_URL = re.compile(r"data:(image/[a-z0-9.+-]+);base64,", re.IGNORECASE)
_REF = re.compile(r"tackroom-blob:([0-9a-f]{64})\.([a-z0-9]{1,8})\Z")
_EXT = {"image/png": "png", "image/jpeg": "jpg", "image/jpg": "jpg", "image/webp": "webp",
        "image/gif": "gif"}
_MEDIA = {"png": "image/png", "jpg": "image/jpeg", "webp": "image/webp", "gif": "image/gif"}


def blob_dir(db_path: str | Path) -> Path:
    """Where the images of the store at ``db_path`` are kept: ``<its dir>/blobs``."""
    return Path(db_path).parent / "blobs"


def is_ref(url: Any) -> bool:
    return isinstance(url, str) and url.startswith(REF_SCHEME)


class BlobStore:
    """Content-addressed files under ``root`` (made at the first write)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"BlobStore({str(self.root)!r})"

    def put(self, data: bytes, ext: str) -> str:
        """Store ``data`` (once) and return its reference ``tackroom-blob:<sha256>.<ext>``."""
        name = f"{hashlib.sha256(data).hexdigest()}.{ext}"
        path = self.root / name
        if not path.is_file():
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        return REF_SCHEME + name

    def path(self, ref: str) -> Path | None:
        """The file of a reference (``None`` for what is not a well-formed reference)."""
        m = _REF.match(ref) if isinstance(ref, str) else None
        return self.root / f"{m.group(1)}.{m.group(2)}" if m else None

    def data_url(self, ref: str) -> str | None:
        """The reference's image as a ``data:`` URL (``None`` when its file is missing)."""
        path = self.path(ref)
        if path is None:
            return None
        try:
            data = path.read_bytes()
        except OSError:
            return None
        media = _MEDIA.get(path.suffix[1:], "application/octet-stream")
        return f"data:{media};base64,{base64.b64encode(data).decode('ascii')}"


def _image_url(part: Any) -> tuple[dict[str, Any], str] | None:
    """``(the image_url dict, its url)`` of an OpenAI ``image_url`` part, else ``None``."""
    if not isinstance(part, dict) or part.get("type") != "image_url":
        return None
    image = part.get("image_url")
    if isinstance(image, dict) and isinstance(image.get("url"), str):
        return image, image["url"]
    return None


def _map_parts(messages: Sequence[Any], fn: Any, memo: dict[int, Any]) -> list[Any]:
    """``messages`` with ``fn(url) -> new url | None`` applied to every image part.

    Messages without a changed part are kept as they are (the same objects), and
    a message seen before (``memo``, by identity: turns share their messages)
    maps to the same new object, so the turns stay cheap to compare and store.
    """
    out: list[Any] = []
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        if not isinstance(content, list):
            out.append(m)
            continue
        key = id(m)
        hit = memo.get(key)
        if hit is not None and hit[0] is m:
            out.append(hit[1])
            continue
        changed, parts = False, []
        for p in content:
            found = _image_url(p)
            new = fn(found[1]) if found else None
            if new is None:
                parts.append(p)
            else:
                assert found is not None  # fn ran, so the part had an image URL
                changed = True
                parts.append({**p, "image_url": {**found[0], "url": new}})
        new_m = {**m, "content": parts} if changed else m
        memo[key] = (m, new_m)  # the message is held, so its id is not reused meanwhile
        out.append(new_m)
    return out


def externalize(messages: Sequence[Any], blobs: BlobStore,
                memo: dict[int, Any] | None = None) -> list[Any]:
    """``messages`` with each image ``data:`` URL written to ``blobs`` and replaced by its
    reference (for storing)."""
    def store(url: str) -> str | None:
        m = _DATA_URL.match(url)
        if m is None:
            return None
        try:
            data = base64.b64decode(url[m.end():], validate=True)
        except (binascii.Error, ValueError):
            return None  # not valid base64: kept inline, as the model saw it
        return blobs.put(data, _EXT.get(m.group(1).lower(), "bin"))

    return _map_parts(messages, store, {} if memo is None else memo)


def resolve(messages: Sequence[Any], blobs: BlobStore,
            memo: dict[int, Any] | None = None) -> list[Any]:
    """``messages`` with each image reference replaced by its ``data:`` URL (for reading)."""
    urls: dict[str, str | None] = {}

    def load(url: str) -> str | None:
        if not is_ref(url):
            return None
        if url not in urls:
            urls[url] = blobs.data_url(url)
        return urls[url]

    return _map_parts(messages, load, {} if memo is None else memo)
