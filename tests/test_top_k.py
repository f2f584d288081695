"""Top-k sampling: the settings (off by default, records unchanged), the ``hf`` backend's
per-row sampler, ``tackroom serve``'s chat reader and the ``openai`` policy's request."""

from __future__ import annotations

import random

import pytest

from tackroom.app.limits import check_sampling
from tackroom.core.errors import ConfigError
from tackroom.core.policy import PolicyRequest, Sampling
from tackroom.core.run import RunConfig
from tackroom.policies.openai_policy import OpenAIPolicy
from tackroom.testing import ScriptedOpenAIServer, text
from tackroom.wire.chat import parse_chat_request
from tackroom.wire.errors import ApiError

SERVED = {"m": None}
HI = [{"role": "user", "content": "hi"}]


# ------------------------------------------------------------------ settings
def test_top_k_off_leaves_the_recorded_sampling_as_it_was():
    """Episode ids and run configs hash ``to_dict``: without top_k it has the old keys."""
    assert Sampling(temperature=0.7, seed=3).to_dict() == {
        "temperature": 0.7, "top_p": 1.0, "max_tokens": 512, "seed": 3, "logprobs": False}
    assert Sampling(top_k=20).to_dict()["top_k"] == 20
    for s in (Sampling(), Sampling(temperature=1.0, top_k=40)):
        assert RunConfig.from_dict(RunConfig(sampling=s).to_dict()).sampling == s
    with pytest.raises(ConfigError, match="top_k -1 is out of range"):
        check_sampling(Sampling(top_k=-1))


# ------------------------------------------------------- the hf row sampler
def _draws(logits, sampling: Sampling, seeds: range) -> list[int]:
    from tackroom.policies.hf_batching import RowSampler

    sampler = RowSampler([sampling] * len(seeds), "cpu", random.Random(0))
    for g, seed in zip(sampler.generators, seeds, strict=True):
        g.manual_seed(seed)
    out = sampler(None, logits.expand(len(seeds), -1).clone())
    assert all(int((row > float("-inf")).sum()) == 1 for row in out)  # one token left per row
    return out.argmax(dim=-1).tolist()


def test_row_sampler_top_1_is_the_argmax_and_top_k_stays_in_the_top_k():
    torch = pytest.importorskip("torch")
    logits = torch.randn(1, 500, generator=torch.Generator().manual_seed(0)) * 0.1  # ~flat
    ranked = torch.argsort(logits[0], descending=True).tolist()
    assert set(_draws(logits, Sampling(temperature=1.0, top_k=1), range(200))) == {ranked[0]}
    for k in (2, 5, 50):
        drawn = _draws(logits, Sampling(temperature=1.0, top_k=k), range(400))
        assert set(drawn) <= set(ranked[:k])
        assert len(set(drawn)) == k  # a nearly flat top k: each of them is drawn
    # Top-p is taken over what top-k left (renormalised), as transformers and vLLM do: of a
    # flat top 4, top_p 0.4 keeps 2 (the full vocabulary's top-p would keep ~200).
    assert set(_draws(logits, Sampling(temperature=1.0, top_k=4, top_p=0.4), range(400))) \
        == set(ranked[:2])
    # Off (0) or at least the vocabulary: plain sampling, far outside any small top k.
    for k in (0, 500, 10_000):
        assert len(set(_draws(logits, Sampling(temperature=1.0, top_k=k), range(400)))) > 100


def test_top_k_is_per_row_and_greedy_rows_are_untouched():
    torch = pytest.importorskip("torch")
    from tackroom.policies.hf_batching import RowSampler

    logits = torch.randn(3, 64, generator=torch.Generator().manual_seed(1))
    rows = [Sampling(temperature=1.5, top_k=1, seed=4), Sampling(), Sampling(temperature=1.5,
                                                                            top_k=3, seed=4)]
    out = RowSampler(rows, "cpu", random.Random(0))(None, logits.clone())
    assert out[0].argmax() == logits[0].argmax()
    assert torch.equal(out[1], logits[1])
    assert int(out[2].argmax()) in torch.topk(logits[2], 3).indices.tolist()


# ------------------------------------------------------- tackroom serve's reader
@pytest.mark.parametrize(("sent", "top_k"), [(None, 0), (0, 0), (-1, 0), (1, 1), (64, 64)])
def test_the_chat_reader_takes_top_k(sent, top_k):
    body = {"model": "m", "messages": HI, **({} if sent is None else {"top_k": sent})}
    assert parse_chat_request(body, SERVED).sampling.top_k == top_k


@pytest.mark.parametrize("sent", [-2, 2.5, "4", True])
def test_the_chat_reader_refuses_a_top_k_that_is_none(sent):
    with pytest.raises(ApiError) as e:
        parse_chat_request({"model": "m", "messages": HI, "top_k": sent}, SERVED)
    assert e.value.status == 400 and e.value.message.startswith("'top_k' ")


# ------------------------------------------------------------- the openai policy
@pytest.mark.parametrize("client", ["lean", "sdk"])
async def test_the_openai_policy_sends_top_k_only_when_set(client):
    with ScriptedOpenAIServer(default=text("ok")) as srv:
        async with OpenAIPolicy("m", base_url=srv.base_url, client=client,
                                max_retries=0) as policy:
            for s in (Sampling(), Sampling(temperature=0.6, top_k=20)):
                await policy.act(PolicyRequest(messages=HI, sampling=s))
        async with OpenAIPolicy("m", base_url=srv.base_url, client=client, max_retries=0,
                                extra_body={"top_k": 5}) as policy:
            await policy.act(PolicyRequest(messages=HI, sampling=Sampling(top_k=20)))
    assert [b.get("top_k") for b in srv.requests] == [None, 20, 5]
