"""The one reader of Hermes ``<tool_call>`` blocks: what a chat model writes when it calls a tool.

``tackroom serve`` (the reply it sends), the in-process ``hf`` policy and the
training exports read tool calls from model text through this module alone.
"""

from __future__ import annotations

import hashlib
import json
import re

from tackroom.core.policy import ToolCall

__all__ = ["TOOL_CALL_BLOCK", "parse_tool_calls", "split_reply"]

#: One block; an unterminated one (cut off by ``max_tokens``) runs to the end of the text.
TOOL_CALL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')


def _call_object(block: str) -> dict | None:
    """The block's JSON object when it is one with a string ``name``, else ``None``."""
    try:
        obj = json.loads(block.strip())
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) and isinstance(obj.get("name"), str) else None


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall]]:
    """Split a reply into its free text and its ``<tool_call>`` blocks.

    Never raises. A block whose JSON is malformed (or that the reply cut off
    before ``</tool_call>``) becomes a call whose ``arguments`` is the raw
    block text, and whose ``name`` is read from it when it can be; the
    harness's parser then records why it cannot be run — the model's error,
    kept as data. Call ids are derived from the reply, so the same reply gets
    the same ids.
    """
    calls: list[ToolCall] = []
    digest = hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    for i, m in enumerate(TOOL_CALL_BLOCK.finditer(text)):
        raw = m.group(1).strip()
        call_id = f"call_{digest}_{i}"
        obj = _call_object(raw)
        if obj is not None:
            args = obj.get("arguments", obj.get("parameters", {}))
            if args is None:
                args = {}
            args_s = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
            calls.append(ToolCall(call_id, obj["name"], args_s))
            continue
        name = _NAME.search(raw)
        try:
            name_s = json.loads(f'"{name.group(1)}"') if name else ""
        except ValueError:
            name_s = ""
        calls.append(ToolCall(call_id, name_s, raw))
    rest = TOOL_CALL_BLOCK.sub("", text).strip()
    return rest, calls


def split_reply(text: str, parse_tools: bool) -> tuple[str | None, list[ToolCall]]:
    """The message ``content`` and ``tool_calls`` of a raw completion text, as a server sends them.

    Without tools the text is the content, as is. With tools, ``<tool_call>``
    blocks become calls and the rest (stripped) the content — ``None`` when only
    calls remain — exactly as the in-process ``hf`` policy splits it. If any block
    is malformed the whole text is the content and there are no calls (vLLM's
    ``hermes`` parser does the same): a broken call is the model's error, shown
    to the harness, never a server error.
    """
    if not parse_tools or "<tool_call>" not in text:
        return (text.strip() if parse_tools else text), []
    if any(_call_object(m.group(1)) is None for m in TOOL_CALL_BLOCK.finditer(text)):
        return text, []
    rest, calls = parse_tool_calls(text)
    return (None if not rest and calls else rest), calls
