"""The hf policy on a tiny random model: determinism, log-probs, batching, tools, LoRA."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from conftest import CLICK_TOOLS  # noqa: E402

from tackroom.core import Outcome, PolicyError, Sampling  # noqa: E402
from tackroom.core.errors import ContextLengthExceeded  # noqa: E402
from tackroom.core.policy import PolicyRequest  # noqa: E402
from tackroom.harness.spec import load_harness  # noqa: E402
from tackroom.models import format_tool_call  # noqa: E402
from tackroom.policies.hf_policy import HFPolicy, _Job, make_hf_policy  # noqa: E402
from tackroom.runner.grid import plan_grid, run_cells  # noqa: E402
from tackroom.suites import get_suite  # noqa: E402

SYSTEM = {"role": "system", "content": "You are a web agent."}


def chat(*users: str) -> list[dict]:
    msgs = [SYSTEM]
    for i, u in enumerate(users):
        if i:
            msgs.append({"role": "assistant", "content": "ok"})
        msgs.append({"role": "user", "content": u})
    return msgs


def req(messages, tools=CLICK_TOOLS, **sampling) -> PolicyRequest:
    sampling.setdefault("max_tokens", 12)
    return PolicyRequest(messages=messages, tools=tools, sampling=Sampling(**sampling))


@pytest.fixture(scope="module")
def policy(tiny_chat_dir):
    return HFPolicy(tiny_chat_dir, batch_wait_ms=20)


def act(policy, request):
    return asyncio.run(policy.act(request))


def test_greedy_is_deterministic(policy, tiny_chat_dir):
    a = act(policy, req(chat("Task: click OK")))
    b = act(policy, req(chat("Task: click OK")))
    assert a.token_ids == b.token_ids and a.text == b.text and a.tool_calls == b.tool_calls
    assert a.completion_tokens == len(a.token_ids) == len(a.logprobs) <= 12
    assert a.prompt_tokens == len(policy.prompt_ids(chat("Task: click OK"), CLICK_TOOLS))
    assert a.model == str(tiny_chat_dir) and a.adapter is None
    assert policy.id == f"hf:{tiny_chat_dir}"
    if a.finish_reason == "length":
        assert a.completion_tokens == 12


def test_logprobs_match_score_and_a_forward_pass(policy):
    messages = chat("Task: type hello", "Page: [1] input")
    r = act(policy, req(messages, max_tokens=16, temperature=1.0, seed=7))
    assert len(r.logprobs) == len(r.token_ids) > 0
    scored = policy.score(messages, r.token_ids, CLICK_TOOLS)
    assert max(abs(a - b) for a, b in zip(scored, r.logprobs, strict=True)) < 1e-4
    # By hand: the model's distribution at temperature 1, whatever the sampling.
    prompt = policy.prompt_ids(messages, CLICK_TOOLS)
    ids = torch.tensor([prompt + r.token_ids])
    with torch.no_grad():
        logits = policy.model(input_ids=ids).logits[0]
    logp = torch.log_softmax(logits[len(prompt) - 1:-1], -1)
    manual = logp.gather(-1, ids[0, len(prompt):, None]).squeeze(-1).tolist()
    assert max(abs(a - b) for a, b in zip(manual, r.logprobs, strict=True)) < 1e-4
    assert all(lp <= 0 for lp in r.logprobs)


def test_batched_equals_unbatched(policy, monkeypatch):
    requests = [
        req(chat("Task: click OK")),
        req(chat("Task: a much longer instruction about filling the whole form in",
                 "Page:\n[1] input_text\n[2] button \"Submit\"\n[3] link"), max_tokens=9),
        req(chat("short"), tools=None, max_tokens=14),
        req(chat("Task: pick one"), temperature=0.9, top_p=0.95, seed=3),
    ]
    alone = [act(policy, r) for r in requests]

    async def together():
        return await asyncio.gather(*(policy.act(r) for r in requests))

    sizes = []
    inner = policy._generate
    monkeypatch.setattr(policy, "_generate", lambda batch: sizes.append(len(batch)) or inner(batch))
    batched = asyncio.run(together())
    assert sizes == [4]  # one generate call, rows of different lengths and sampling
    for a, b in zip(alone, batched, strict=True):
        assert a.token_ids == b.token_ids
        assert a.text == b.text and a.finish_reason == b.finish_reason
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-4
    assert len(batched[1].token_ids) <= 9


def test_shared_prompt_prefix_is_run_once_and_changes_nothing(policy, monkeypatch):
    """One harness's batch (same system prompt and tools) and a group of G samples of one
    prompt: the shared prefix is prefilled once, and every row gets what it gets alone."""
    from tackroom.policies import hf_policy

    requests = [
        req(chat("Task: click OK")),
        req(chat("Task: a much longer instruction about filling the whole form in",
                 "Page:\n[1] input_text\n[2] button \"Submit\"\n[3] link"), max_tokens=9),
        *[req(chat("Task: pick one"), temperature=1.0, seed=s) for s in range(3)],
    ]
    alone = [act(policy, r) for r in requests]
    shared = []
    inner = hf_policy._shared_prefix
    monkeypatch.setattr(hf_policy, "_shared_prefix",
                        lambda prompts: shared.append(inner(prompts)) or shared[-1])

    async def together(rs):
        return await asyncio.gather(*(policy.act(r) for r in rs))

    for group in (requests, requests[2:]):
        shared.clear()
        batched = asyncio.run(together(group))
        prompts = [policy.prompt_ids(r.messages, r.tools) for r in group]
        assert shared == [inner(prompts)] and shared[0] >= hf_policy.MIN_SHARED_PREFIX
        for a, b in zip(alone[len(requests) - len(group):], batched, strict=True):
            assert a.token_ids == b.token_ids and a.text == b.text
            assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-4
    # The group's prompts are identical: all but the last token is shared.
    assert shared[0] == len(prompts[0]) - 1


def test_system_block_keys_values_are_reused_across_batches(tiny_chat_dir, policy, monkeypatch):
    """A harness's system block is prefilled once; later turns (batches of one here) reuse
    its keys/values and get exactly what a policy without the cache gets."""
    plain = HFPolicy(tiny_chat_dir)
    plain.prefix_cache = False
    requests = [req(chat("Task: click OK")),
                req(chat("Task: type hello", "Page:\n[1] input_text\n[2] button"), max_tokens=6),
                req(chat("Task: click OK"), tools=None),
                req(chat("Task: pick one"), temperature=1.0, seed=5)]
    policy._stem_kv.clear()
    lengths: list[int] = []
    forward = policy.model.forward
    monkeypatch.setattr(policy.model, "forward",
                        lambda *a, **k: lengths.append(k["input_ids"].shape[1]) or forward(*a, **k))
    got = [act(policy, r) for r in requests]
    want = [act(plain, r) for r in requests]
    for a, b in zip(got, want, strict=True):
        assert a.token_ids == b.token_ids and a.text == b.text
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-4
    # The system block with tools is computed once, then reused by the three requests that
    # share it; the one without tools is too short (< MIN_SHARED_PREFIX) to be worth caching.
    (key,) = policy._stem_kv
    assert len(key[2]) >= 32 and lengths.count(len(key[2])) == 1, lengths
    # A later weight version never reads keys/values of the earlier one.
    policy.set_version("v2")
    assert not policy._stem_kv
    policy.set_version(None)


def test_batches_are_grouped(tiny_chat_dir):
    p = HFPolicy(tiny_chat_dir, max_batch=2, batch_wait_ms=50)
    sizes = []
    inner = p._generate
    p._generate = lambda batch: sizes.append(len(batch)) or inner(batch)

    async def five():
        return await asyncio.gather(*(p.act(req(chat(f"task {i}"), max_tokens=3))
                                      for i in range(5)))

    out = asyncio.run(five())
    assert len(out) == 5 and sorted(sizes, reverse=True) == [2, 2, 1]


def test_seeded_sampling_is_reproducible(policy):
    messages = chat("Task: click OK")
    a = act(policy, req(messages, temperature=1.0, seed=11, max_tokens=16))
    b = act(policy, req(messages, temperature=1.0, seed=11, max_tokens=16))
    c = act(policy, req(messages, temperature=1.0, seed=12, max_tokens=16))
    assert a.token_ids == b.token_ids
    assert a.token_ids != c.token_ids  # a random 4096-token model: equal is ~impossible
    # top_p that keeps one token is greedy.
    g = act(policy, req(messages, max_tokens=16))
    nucleus = act(policy, req(messages, temperature=1.0, top_p=1e-6, seed=1, max_tokens=16))
    assert nucleus.token_ids == g.token_ids


def test_checkpoint_generation_defaults_do_not_leak(tiny_chat_dir, policy, tmp_path):
    """Greedy means argmax of the model's logits, whatever generation_config.json says."""
    copy = shutil.copytree(tiny_chat_dir, tmp_path / "m")
    gc = json.loads((copy / "generation_config.json").read_text())
    gc.update(do_sample=True, temperature=0.1, top_k=2, repetition_penalty=3.0,
              no_repeat_ngram_size=1)
    (copy / "generation_config.json").write_text(json.dumps(gc))
    r = req(chat("hi"), max_tokens=20)
    assert act(HFPolicy(copy), r).token_ids == act(policy, r).token_ids


def test_prompt_longer_than_the_context_is_a_budget_error(tiny_chat_dir):
    p = HFPolicy(tiny_chat_dir)
    p.max_positions = 20
    with pytest.raises(ContextLengthExceeded, match="does not fit"):
        act(p, req(chat("a prompt that is certainly longer than twenty tokens")))
    p.max_positions = len(p.prompt_ids(chat("hi"), CLICK_TOOLS)) + 3
    r = act(p, req(chat("hi"), max_tokens=50))  # max_tokens is cut to what fits
    assert r.completion_tokens <= 3


def job(policy, tools=True, max_new=50):
    return _Job(prompt=[1, 2, 3], sampling=Sampling(), max_new=max_new, parse_tools=tools,
                adapter=None, future=None)  # type: ignore[arg-type]


def test_replies_become_text_and_tool_calls(policy):
    tok = policy.tokenizer
    eos = tok.eos_token_id
    good = tok.encode("Let me click.\n" + format_tool_call("click", {"ref": 3}))
    r = policy._response(job(policy), good + [eos, 7, 7], [-1.0] * (len(good) + 3))
    assert r.finish_reason == "stop" and r.token_ids == good + [eos]
    assert r.completion_tokens == len(good) + 1 == len(r.logprobs)
    assert r.text == "Let me click."
    assert [(c.name, c.arguments) for c in r.tool_calls] == [("click", '{"ref": 3}')]

    bad = tok.encode('<tool_call>\n{"name": "click", "arguments": {ref: 3}}\n</tool_call>')
    r = policy._response(job(policy), bad + [eos], [-1.0] * (len(bad) + 1))
    assert r.text is None and r.tool_calls[0].name == "click"
    assert r.tool_calls[0].arguments == '{"name": "click", "arguments": {ref: 3}}'

    r = policy._response(job(policy, tools=False), good + [eos], [-1.0] * (len(good) + 1))
    assert r.tool_calls == [] and "<tool_call>" in r.text  # text harnesses read it all

    r = policy._response(job(policy, max_new=4), good, [-1.0] * len(good))
    assert r.finish_reason == "length" and r.token_ids == good[:4]


def test_malformed_tool_call_is_a_parse_error_not_an_exception(policy):
    from tackroom.harness.session import HarnessSession

    tok = policy.tokenizer
    bad = tok.encode('<tool_call>\n{"name": "click", "arguments": {"ref": 3}\n</tool_call>')
    r = policy._response(job(policy), bad + [tok.eos_token_id], [0.0] * (len(bad) + 1))
    session = HarnessSession(load_harness("som-tools"), "click")
    parsed = session.parse(r)
    assert parsed.error and "not valid JSON" in parsed.error


def test_lora_adapter_changes_outputs_and_is_reported(tiny_chat_dir, lora_adapter_dir):
    p = HFPolicy(tiny_chat_dir)
    messages = chat("Task: click OK")
    base = act(p, req(messages, max_tokens=8))
    p.load_adapter("step1", lora_adapter_dir)
    assert p.adapter is None and act(p, req(messages, max_tokens=8)).token_ids == base.token_ids
    p.set_adapter("step1")
    tuned = act(p, req(messages, max_tokens=8))
    assert tuned.adapter == "step1"
    scored_base = p.score(messages, tuned.token_ids, CLICK_TOOLS, adapter=None)
    assert max(abs(a - b) for a, b in zip(scored_base, tuned.logprobs, strict=True)) > 1e-3
    scored = p.score(messages, tuned.token_ids, CLICK_TOOLS)
    assert max(abs(a - b) for a, b in zip(scored, tuned.logprobs, strict=True)) < 1e-4

    async def mixed():
        # Each call is served by the adapter active when it was made; batches never mix.
        first = asyncio.create_task(p.act(req(messages, max_tokens=8)))
        await asyncio.sleep(0)
        p.set_adapter(None)
        second = asyncio.create_task(p.act(req(messages, max_tokens=8)))
        return await first, await second

    on, off = asyncio.run(mixed())
    assert (on.adapter, off.adapter) == ("step1", None)
    assert on.token_ids == tuned.token_ids and off.token_ids == base.token_ids
    with pytest.raises(PolicyError, match="no adapter named"):
        p.set_adapter("nope")


def test_adapter_from_spec(tiny_chat_dir, lora_adapter_dir):
    p = make_hf_policy(f"hf:{tiny_chat_dir}:{lora_adapter_dir}", max_batch="4", batch_wait_ms="1")
    assert p.id == f"hf:{tiny_chat_dir}:{lora_adapter_dir}" and p.max_batch == 4
    r = act(p, req(chat("hi"), max_tokens=4))
    assert r.adapter == p.adapter == lora_adapter_dir.name
    assert p.describe()["adapters"] == {lora_adapter_dir.name: str(lora_adapter_dir)}


def test_bad_model_dir_is_one_clear_line(tmp_path):
    with pytest.raises(PolicyError) as e:
        HFPolicy(tmp_path / "missing")
    line = e.value.line()
    assert "\n" not in line and "no model directory" in line and "tackroom model init" in line
    (tmp_path / "empty").mkdir()
    with pytest.raises(PolicyError, match="no config.json.*tackroom model init"):
        make_hf_policy(f"hf:{tmp_path / 'empty'}")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{not json")
    with pytest.raises(PolicyError, match="cannot load") as e:
        HFPolicy(tmp_path / "broken")
    assert "\n" not in e.value.line()
    for spec in ("hf:", "openai:x"):
        with pytest.raises(PolicyError, match="hf:MODEL_DIR"):
            make_hf_policy(spec)
    with pytest.raises(PolicyError, match="not a number"):
        make_hf_policy(f"hf:{tmp_path}", max_batch="many")


def test_smoke_episode_through_the_runner(policy, tmp_path):
    suite = get_suite("toy")
    task = next(t for t in suite.tasks() if t.id == "click-button")
    h = tmp_path / "short.toml"
    h.write_text('extends = "som-tools"\n[budget]\nturns = 2\n')
    plan = plan_grid([task], [load_harness(str(h))], [policy], [0], Sampling(max_tokens=16))
    [ep] = asyncio.run(run_cells(plan.cells, suite, "run-hf", concurrency=2))
    assert ep.policy == policy.id
    assert ep.outcome in (Outcome.FAILURE, Outcome.BUDGET_EXHAUSTED), ep.error
    assert ep.turns
    for turn in ep.turns:
        assert turn.parse_error or turn.actions or turn.action_error
        assert turn.token_ids and len(turn.token_ids) == len(turn.logprobs)
        assert turn.completion_tokens == len(turn.token_ids) and turn.prompt_tokens > 0
        assert turn.messages[0]["role"] == "system"
