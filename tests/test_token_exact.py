"""Token-exact records: a gateway turn over ``tackroom serve`` keeps the prompt's ids as served,
and training builds its sample from them — the served tokens exactly, no template re-applied."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
openai = pytest.importorskip("openai")

from conftest import CLICK_TOOLS  # noqa: E402

from tackroom.core.episode import Episode, Outcome  # noqa: E402
from tackroom.core.policy import Sampling  # noqa: E402
from tackroom.gateway import ModelGateway  # noqa: E402
from tackroom.policies.openai_policy import OpenAIPolicy  # noqa: E402
from tackroom.records import RecordStore  # noqa: E402
from tackroom.serve import ServerThread  # noqa: E402
from tackroom.train.samples import episode_samples  # noqa: E402
from tackroom.train.sft import Selection, build_dataset  # noqa: E402

SYSTEM = {"role": "system", "content": "You operate a web page. Call click to act."}


async def _two_turns(base_url: str, model: str) -> tuple[list, list[dict]]:
    """Two agent turns through a gateway over ``tackroom serve``: the route's turns and what
    the gateway's client was sent (the served prompt and completion ids, passed through)."""
    policy = OpenAIPolicy(model, base_url=base_url)  # a local server: asks return_token_ids
    try:
        async with ModelGateway(policy) as gw:
            route = gw.open_episode(Sampling(max_tokens=12, temperature=1.0, seed=3,
                                             logprobs=True))
            messages = [SYSTEM, {"role": "user", "content": "Click the OK button (ref 4)."}]
            sent = []
            # Closed before the gateway: its close would wait for the kept-alive connection.
            async with openai.AsyncOpenAI(base_url=route.base_url, api_key=route.token,
                                          max_retries=0, timeout=120) as client:
                for follow_up in ("The page did not change. Try again.", None):
                    r = await client.chat.completions.create(
                        model="tackroom", messages=messages, tools=CLICK_TOOLS,
                        extra_body={"return_token_ids": True})
                    sent.append(r.model_dump())
                    reply = r.choices[0].message.model_dump(exclude_none=True)
                    if follow_up:
                        messages = [*messages, {"role": "assistant",
                                                "content": reply.get("content") or ""},
                                    {"role": "user", "content": follow_up}]
            gw.close_episode(route.token)
        return route.turns, sent
    finally:
        await policy.aclose()


def test_a_training_sample_from_a_gateway_turn_is_the_served_tokens(
        tiny_chat_dir: Path, tmp_path: Path) -> None:
    with ServerThread(tiny_chat_dir, batch_wait_ms=5) as s:
        turns, sent = asyncio.run(_two_turns(s.base_url, s.model_name))
    assert len(turns) == 2
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tiny_chat_dir))
    for turn, reply in zip(turns, sent, strict=True):
        served_prompt = reply["prompt_token_ids"]
        served_completion = reply["choices"][0]["token_ids"]
        assert turn.prompt_token_ids == served_prompt and turn.token_ids == served_completion
        # What serve tokenised is what its model saw: the template over the messages as sent.
        assert served_prompt == tokenizer.apply_chat_template(
            turn.messages, tools=CLICK_TOOLS, add_generation_prompt=True, tokenize=True,
            return_dict=False)
    ep = Episode(episode_id="e1", run_id="r1", task="toy/click-button", suite="toy",
                 harness="mini-swe-agent", harness_hash="h", policy="openai:tiny", seed=0,
                 outcome=Outcome.SUCCESS, reward=1.0, turns=copy.deepcopy(turns),
                 meta={"agent": {"tools": CLICK_TOOLS}})
    # A tokenizer that cannot render anything: the sample must not need one.
    samples = episode_samples(ep, 0, tokenizer=None, tools=CLICK_TOOLS)
    assert [(x.prompt, x.completion) for x in samples] == \
        [(r["prompt_token_ids"], r["choices"][0]["token_ids"]) for r in sent]
    assert [x.old_logp for x in samples] == [t.logprobs for t in turns]
    # SFT from the record store: the same ids, the loss on the completion only.
    with RecordStore(tmp_path / "r.duckdb") as store:
        store.start_run("r1", "tackroom eval", {}, n_planned=1)
        store.append(ep)
        store.flush()
        data = build_dataset(store, Selection(), tokenizer=None)
    assert [ex.input_ids for ex in data.examples] == \
        [r["prompt_token_ids"] + r["choices"][0]["token_ids"] for r in sent]
    for ex, r in zip(data.examples, sent, strict=True):
        n = len(r["prompt_token_ids"])
        assert ex.labels[n:] == r["choices"][0]["token_ids"]
        assert all(t == -100 for t in ex.labels[:n])
