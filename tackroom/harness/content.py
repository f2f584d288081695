"""Message content with images: OpenAI content parts, and their text-only forms.

A renderer that shows the model an image returns :class:`RenderedParts`: a ``str``
(its text form, each image written as :data:`IMAGE_PLACEHOLDER`, which is what
``Turn.observation`` records) that also carries ``.parts``, the OpenAI
chat-completions content parts::

    [{"type": "text", "text": "End effector at (0.30, 0.00, 0.25) m."},
     {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR..."}}]

:class:`~tackroom.harness.session.HarnessSession` then makes that user message's
``content`` a list of parts (the harness template's text around ``{observation}``
as text parts). Policies that speak the OpenAI API send the parts as they are;
tackroom's local text-only models see :func:`text_only` messages, where each image
is the text :data:`IMAGE_PLACEHOLDER`. The record store keeps images as files
beside the store, not inline (:mod:`tackroom.records.blobs`).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["IMAGE_PLACEHOLDER", "IMAGE_TYPES", "RenderedParts", "image_part", "text_part",
           "is_image_part", "text_of", "text_only", "merge_text", "parts_of"]

#: What an image becomes in a text-only view of a message.
IMAGE_PLACEHOLDER = "[image]"
#: Content-part types that hold an image (OpenAI chat, OpenAI responses, Anthropic).
IMAGE_TYPES = ("image_url", "input_image", "image")


def text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def image_part(data: bytes, media_type: str = "image/png",
               detail: str | None = None) -> dict[str, Any]:
    """An OpenAI ``image_url`` part holding ``data`` as a base64 ``data:`` URL."""
    url = f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"
    image: dict[str, Any] = {"url": url}
    if detail:
        image["detail"] = detail
    return {"type": "image_url", "image_url": image}


def is_image_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") in IMAGE_TYPES


def text_of(content: Any, image: str | Callable[[dict[str, Any]], str] = IMAGE_PLACEHOLDER
            ) -> str:
    """A message ``content`` (string or parts) as one string; images as ``image``."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    out = []
    for part in content:
        if is_image_part(part):
            out.append(image(part) if callable(image) else image)
        elif isinstance(part, dict):
            out.append(str(part.get("text", "")))
        else:
            out.append(str(part))
    return "".join(out)


def merge_text(parts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``parts`` with adjacent text parts joined and empty ones dropped."""
    out: list[dict[str, Any]] = []
    for p in parts:
        if p.get("type") == "text":
            if not p.get("text"):
                continue
            if out and out[-1].get("type") == "text" and set(out[-1]) == {"type", "text"}:
                out[-1] = text_part(out[-1]["text"] + p["text"])
                continue
        out.append(p)
    return out


class RenderedParts(str):
    """A rendered observation with images: the ``str`` is its text form, ``.parts``
    the content parts the model is sent."""

    parts: list[dict[str, Any]]

    def __new__(cls, parts: Sequence[dict[str, Any]]) -> RenderedParts:
        parts = merge_text(parts)
        obj = super().__new__(cls, text_of(parts))
        obj.parts = parts
        return obj

    def __reduce__(self) -> tuple[Any, ...]:
        return (RenderedParts, (self.parts,))


def parts_of(rendered: Any) -> list[dict[str, Any]] | None:
    """The content parts of a renderer's result (``None``: it is plain text)."""
    if isinstance(rendered, RenderedParts):
        return rendered.parts
    if isinstance(rendered, list):
        return [p if isinstance(p, dict) else text_part(str(p)) for p in rendered]
    return None


def text_only(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with every image part replaced by the text :data:`IMAGE_PLACEHOLDER`
    (messages without images are returned as they are, not copied)."""
    out = []
    for m in messages:
        c = m.get("content") if isinstance(m, dict) else None
        if isinstance(c, list) and any(is_image_part(p) for p in c):
            m = {**m, "content": merge_text(
                [text_part(IMAGE_PLACEHOLDER) if is_image_part(p) else p for p in c])}
        out.append(m)
    return out
