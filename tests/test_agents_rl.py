"""Online RL under an agent harness: `tackroom train` rolls out through a real CLI.

The policy being trained (an ``HFPolicy`` over the trainer's own weights: a one-layer
random model, as the CLI's prompt is long) sits
behind the model gateway; mini-swe-agent, unmodified, runs each rollout in the
sandbox and its every model call is a turn with the token ids and log-probs the
policy sampled. The trainer tokenises each turn with the messages the CLI sent
and the tools it offered (``meta.agent.tools``), so the recomputed log-probs of
the first update are the sampler's own (ratio 1), and the loss is finite.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
from cli_model import one_layer_chat_dir  # noqa: F401 - a fixture

pytest.importorskip("torch")

from tackroom.records import RecordStore  # noqa: E402
from tackroom.sandbox import sandbox_available  # noqa: E402
from tackroom.train.config import RLConfig  # noqa: E402
from tackroom.train.rl import run_rl  # noqa: E402

pytestmark = [pytest.mark.skipif(not sandbox_available(), reason="needs bubblewrap"),
              pytest.mark.slow]


def _cfg(model: Path, tmp_path: Path, steps: int) -> RLConfig:
    harness = tmp_path / "mini-2.toml"  # two model calls: its step limit and the gateway's
    harness.write_text('extends = "mini-swe-agent"\nname = "mini-2"\n'
                       '[budget]\nturns = 2\nwall_seconds = 300\n')
    return RLConfig.from_toml(None, [
        f"model.path={model}", "model.device=cpu", "data.suite=code",
        "data.tasks=add-business-days", f"data.harnesses={harness}",
        "data.tasks_per_step=1", "grouping.group_size=2", "rollout.max_tokens=12",
        "rollout.concurrency=2", f"optim.steps={steps}", "optim.lr=1e-3",
        "optim.micro_batch_size=4", "lora.rank=4", "lora.alpha=8",
        f"run.out_dir={tmp_path / 'out'}"])


def test_online_rl_rolls_out_through_an_agent_cli(one_layer_chat_dir, tmp_path):  # noqa: F811
    import torch

    torch.set_num_threads(1)
    cfg = _cfg(one_layer_chat_dir, tmp_path, steps=2)
    steps: list[dict[str, float]] = []
    with RecordStore(tmp_path / "r.duckdb") as store:
        result = run_rl(cfg, store, "agent-rl", threads=1,
                        on_step=lambda step, total, m: steps.append(m))
        episodes = list(store.iter_episodes("agent-rl"))
    assert result.steps == 2 and len(steps) == 2
    assert (tmp_path / "out" / "final").is_dir()
    # Two rollouts per step, each a real mini-swe-agent run through the gateway.
    assert len(episodes) == 4 and {ep.harness for ep in episodes} == {"mini-2"}
    versions = set()
    for ep in episodes:
        agent = ep.meta["agent"]
        assert ep.outcome.value in ("failure", "budget_exhausted"), (ep.error, agent)
        assert agent["cli"] == "mini-swe-agent" and agent["calls"] == len(ep.turns) >= 1
        # The CLI's own tools travel with the episode: the samples are built with them.
        assert [t["function"]["name"] for t in agent["tools"]] == ["bash"]
        for turn in ep.turns:
            assert turn.token_ids and len(turn.logprobs) == len(turn.token_ids) <= 12
            assert turn.messages[0]["role"] == "system"
            versions.add(turn.adapter)
    # Step k's rollouts were written by the weights after k updates, and say so.
    assert versions == {"agent-rl-step-0", "agent-rl-step-1"}
    for m in steps:
        assert math.isfinite(m["loss"]) and m["episodes"] == 2 and m["turns"] >= 2
        assert m["recorded_logprobs"] == 1.0  # π_old: the log-probs the gateway recorded
    # The first update's π_old is the sampler's, read back on the prompt the trainer built
    # from the CLI's messages and tools: the same tokens, so the ratio is 1.
    first = steps[0]
    assert abs(first["ratio_min"] - 1) < 1e-3 and abs(first["ratio_max"] - 1) < 1e-3, first


@pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                    reason="needs the scale extra: pip install 'tackroom[scale]'")
def test_online_rl_under_an_agent_cli_on_ray_rollout_workers(
        one_layer_chat_dir, tmp_path):  # noqa: F811
    """``--ray``: each rollout worker loads the step's weights, puts its own gateway in front
    of them, and runs the CLI in its own sandboxes; the driver trains on what comes back."""
    import torch

    torch.set_num_threads(1)
    steps: list[dict[str, float]] = []
    with RecordStore(tmp_path / "r.duckdb") as store:
        result = run_rl(_cfg(one_layer_chat_dir, tmp_path, steps=1), store, "agent-rl-ray",
                        ray=True, threads=1, on_step=lambda step, total, m: steps.append(m))
        episodes = list(store.iter_episodes("agent-rl-ray"))
    assert result.steps == 1 and len(episodes) == 2
    for ep in episodes:
        assert ep.outcome.value in ("failure", "budget_exhausted"), (ep.error, ep.meta)
        assert ep.meta["agent"]["calls"] == len(ep.turns) >= 1
        assert all(t.token_ids and t.adapter == "agent-rl-ray-step-0" for t in ep.turns)
    (m,) = steps
    assert math.isfinite(m["loss"]) and m["episodes"] == 2 and m["recorded_logprobs"] == 1.0
    assert abs(m["ratio_min"] - 1) < 1e-3 and abs(m["ratio_max"] - 1) < 1e-3, m
