"""The default tokenizer corpus: our own harness texts, produced by running the experts.

A tokenizer for an agent model should know the words it will read and write:
system prompts, rendered pages, tool schemas, tool calls and the commands and
JSON of text harnesses. We get them without any download by running the toy
suite's scripted experts through every shipped harness and keeping each
distinct message text, raw reply and tool-call JSON.

The corpus is a deterministic function of ``seeds`` (and of the shipped
harnesses and suite): texts are de-duplicated and sorted, so the order in
which concurrent episodes finish does not matter.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Sequence
from typing import Any

from tackroom.policies.chat_format import TOOLS_PREAMBLE, format_tool_call


def _message_texts(msg: dict[str, Any]) -> Iterable[str]:
    content = msg.get("content")
    if isinstance(content, str) and content:
        yield content
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                yield part["text"]
    for tc in msg.get("tool_calls") or []:
        fn = tc.get("function") or {}
        yield format_tool_call(str(fn.get("name", "")), fn.get("arguments", "{}"))


#: The shipped harnesses a tokenizer's corpus is drawn from by default. Pinned, not "every
#: shipped harness": a new harness (the robot suite's, say) would otherwise change the
#: tokenizer of every tiny model built after it — and with it every test start and every
#: example's recorded result built on one.
CORPUS_HARNESSES = (
    "aci-viewer-nolint", "aci-viewer", "codeact-context", "codeact", "edit-blocks-oneshot",
    "edit-blocks", "html-commands-single", "html-commands", "json-tools-text", "json-tools",
    "outline-coords", "som-tools-reflect", "som-tools", "terminal-bash", "terminal-keys",
)


def harness_corpus(seeds: Sequence[int] = (0, 1, 2), harnesses: Sequence[str] | None = None,
                   ) -> list[str]:
    """Distinct texts from expert episodes of every toy task under the corpus harnesses.

    Args:
        seeds: episode seeds (more seeds: more page variety).
        harnesses: harness names or paths; default :data:`CORPUS_HARNESSES` (shipped).
    """
    from tackroom.core.policy import Sampling
    from tackroom.harness.spec import BUILTIN_DIR, load_harness
    from tackroom.policies.expert import ExpertPolicy
    from tackroom.runner.grid import plan_grid, run_cells
    from tackroom.suites.toy import make_suite

    suite = make_suite()
    refs = list(harnesses) if harnesses else [
        str(BUILTIN_DIR / file) for file in sorted(f"{name}.toml" for name in CORPUS_HARNESSES)]
    specs = [load_harness(r) for r in refs]
    plan = plan_grid(suite.tasks(), specs, [ExpertPolicy()], list(seeds), Sampling())
    episodes = asyncio.run(run_cells(plan.cells, suite, "corpus", concurrency=8))

    # The template's own words: role names follow <|im_start|>, the preamble heads tool lists.
    texts: set[str] = {TOOLS_PREAMBLE, "system\nuser\nassistant\ntool\n"}
    for spec in specs:
        tools = spec.parser.tools(spec.interface)
        if tools:
            texts.add("\n".join(json.dumps(t, ensure_ascii=False) for t in tools))
    for ep in episodes:
        for turn in ep.turns:
            for msg in turn.messages:
                texts.update(_message_texts(msg))
            if turn.raw_text:
                texts.add(turn.raw_text)
            for tc in turn.tool_calls:
                fn = tc.get("function") or {}
                texts.add(format_tool_call(str(fn.get("name", "")), fn.get("arguments", "{}")))
            if turn.feedback:
                texts.add(turn.feedback)
            if turn.observation:
                texts.add(turn.observation)
    return sorted(t for t in texts if t)
