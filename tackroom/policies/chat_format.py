"""The chat format of tackroom's local models: ChatML turns, Hermes/Qwen-style tools.

A conversation renders as::

    <|im_start|>system
    {system prompt}

    # Tools
    ...
    <tools>
    {"type": "function", "function": {...}}
    </tools>
    ...<|im_end|>
    <|im_start|>user
    {text}<|im_end|>
    <|im_start|>assistant
    {text}
    <tool_call>
    {"name": "click", "arguments": {"ref": 3}}
    </tool_call><|im_end|>
    <|im_start|>tool
    <tool_response>
    {result}
    </tool_response><|im_end|>
    <|im_start|>assistant

This is the format Qwen2.5 and Hermes models use, so what a tiny tackroom
model learns transfers to the prompts real open models see, and vLLM's
``hermes`` tool parser reads its output. Tool results get their own ``tool``
turn (one per result) rather than Qwen's grouping inside a ``user`` turn: the
records keep OpenAI's one-message-per-result shape, and so does the prompt.

An assistant turn is wrapped in ``{% generation %}`` so that
``apply_chat_template(..., return_assistant_tokens_mask=True)`` marks exactly
the tokens a model wrote (its ``<|im_end|>`` included) — what training needs.

Tool-call arguments are written as given when they are a string (OpenAI's
convention: the raw JSON the model wrote, malformed or not), and as JSON when
they are an object, so re-rendering a recorded reply reproduces it.

tackroom's local models read text only: every prompt is rendered from
:func:`text_only` messages, where an image part (a robot screenshot) is the text
``[image]`` — at inference (``HFPolicy``, ``tackroom serve``) and in training alike,
so the tokens a model is trained on are the tokens it was given.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tackroom.harness.content import IMAGE_PLACEHOLDER, text_only  # noqa: F401 - re-exported
from tackroom.wire.toolcalls import parse_tool_calls  # noqa: F401 - re-exported: the one reader

PAD = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
#: Control tokens: never produced by splitting text, dropped when decoding.
SPECIAL_TOKENS = (PAD, IM_START, IM_END)
#: Single tokens that stay visible in decoded text (the tool-call syntax).
MARKUP_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
                 "<tools>", "</tools>")

TOOLS_PREAMBLE = (
    "# Tools\n\n"
    "You may call one or more functions. The function signatures are within "
    "<tools></tools> XML tags:\n<tools>"
)
TOOLS_POSTAMBLE = (
    "\n</tools>\n\n"
    "To call a function, write a JSON object with the function's name and arguments "
    "within <tool_call></tool_call> XML tags:\n"
    "<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n'
    "</tool_call>"
)

# Written with explicit string pieces (Qwen's style) so that transformers'
# trim_blocks / lstrip_blocks settings cannot change the whitespace.
CHAT_TEMPLATE = (
    "{%- macro text(c) -%}"
    "{%- if c is none -%}"
    "{%- elif c is string -%}{{- c -}}"
    "{%- else -%}{%- for p in c -%}{%- if p.type == 'text' -%}{{- p.text -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{%- endmacro -%}"
    "{%- if messages and messages[0].role == 'system' -%}"
    "{%- set system = text(messages[0].content) -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set system = '' -%}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- if system or tools -%}"
    "{{- '<|im_start|>system\\n' + system -}}"
    "{%- if tools -%}"
    "{%- if system -%}{{- '\\n\\n' -}}{%- endif -%}"
    "{{- " + json.dumps(TOOLS_PREAMBLE) + " -}}"
    "{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}"
    "{{- " + json.dumps(TOOLS_POSTAMBLE) + " -}}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for m in loop_messages -%}"
    "{%- if m.role == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- generation -%}"
    "{%- set body = text(m.content) -%}"
    "{{- body -}}"
    "{%- for tc in (m.tool_calls or []) -%}"
    "{%- set f = tc.function if tc.function is defined else tc -%}"
    "{%- if body or not loop.first -%}{{- '\\n' -}}{%- endif -%}"
    "{{- '<tool_call>\\n{\"name\": ' + (f.name | tojson) + ', \"arguments\": ' -}}"
    "{%- if f.arguments is string -%}{{- f.arguments -}}"
    "{%- elif f.arguments is none -%}{{- '{}' -}}"
    "{%- else -%}{{- f.arguments | tojson -}}{%- endif -%}"
    "{{- '}\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>' -}}"
    "{%- endgeneration -%}"
    "{{- '\\n' -}}"
    "{%- elif m.role == 'tool' -%}"
    "{{- '<|im_start|>tool\\n<tool_response>\\n' + text(m.content)"
    " + '\\n</tool_response><|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + m.role + '\\n' + text(m.content) + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def format_tool_call(name: str, arguments: Any) -> str:
    """One ``<tool_call>`` block exactly as the chat template writes it."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments,
                                                                   ensure_ascii=False)
    return ('<tool_call>\n{"name": ' + json.dumps(name, ensure_ascii=False)
            + ', "arguments": ' + args + "}\n</tool_call>")


@contextlib.contextmanager
def no_progress_bars() -> Iterator[None]:
    """Silence transformers' progress bars (loading / writing weights) for a moment."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


#: The card ``tackroom model init`` writes beside the weights.
MODEL_CARD = "tackroom_model.json"


def model_dir_problem(model_dir: str | Path) -> str | None:
    """What keeps ``model_dir`` from being a save_pretrained model directory, or ``None``.

    A cheap file check, so a wrong path is reported before torch is imported.
    """
    path = Path(model_dir)
    if not path.is_dir():
        return f"no model directory at {model_dir}"
    if not (path / "config.json").is_file():
        return f"{model_dir} is not a model directory (no config.json)"
    return None


def read_model_card(model_dir: str | Path) -> dict[str, Any] | None:
    """The ``tackroom_model.json`` of a directory, or ``None`` (not a tackroom-built model)."""
    p = Path(model_dir) / MODEL_CARD
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None
