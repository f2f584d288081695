"""A real TRL ``GRPOTrainer`` on a tiny random Qwen2, to check tackroom's math against.

Nothing here reimplements TRL: the trainer is TRL's own class, built with
TRL's own ``__init__`` (on CPU, float64 weights, no downloads), and the tests
call its own methods — ``_generate_and_score_completions`` for group
advantages and ``_compute_loss`` for the loss. The only stand-ins are the
*data*: a ``rollout_func`` (a documented TRL hook) returns fixed completions
instead of sampling, and a reward function returns fixed rewards.

Used by tests/test_losses.py, tests/test_advantages.py and bench/train.py,
which builds the trainer around a tackroom model with a LoRA adapter
(:func:`make_trainer`'s ``model``, ``tokenizer``, ``peft_config`` and extra
``GRPOConfig`` settings). It lives with the tests, not in the package: it needs
TRL and ``datasets``, which only the ``dev`` extra installs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

VOCAB = 32
PAD, EOS = VOCAB, VOCAB + 1


def tiny_model() -> Any:
    """A 2-layer Qwen2 with random weights, in float64."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=VOCAB + 2, hidden_size=16, intermediate_size=32,
                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                      max_position_embeddings=64, pad_token_id=PAD, eos_token_id=EOS,
                      tie_word_embeddings=False)
    return Qwen2ForCausalLM(cfg).to(torch.float64)


def tiny_tokenizer() -> Any:
    """A word-level tokenizer over ``t0 … t31``, built in memory."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(VOCAB)} | {"<pad>": PAD, "<eos>": EOS}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")


class FixedRollouts:
    """TRL's ``rollout_func`` hook, returning the completions a test set beforehand."""

    def __init__(self) -> None:
        self.completions: list[list[int]] = []

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        tok = trainer.processing_class
        assert len(prompts) == len(self.completions), "set .completions for every prompt"
        return {"prompt_ids": [tok(p)["input_ids"] for p in prompts],
                "completion_ids": [list(c) for c in self.completions], "logprobs": None}


def given_reward(prompts: list[Any], completions: list[Any], reward: list[float],
                 **_: Any) -> list[float]:
    """Reward function: the ``reward`` column of each input row."""
    return list(reward)


def make_trainer(out_dir: str, *, num_generations: int, max_completion_length: int,
                 model: Any = None, tokenizer: Any = None, peft_config: Any = None,
                 **grpo_args: Any) -> Any:
    """TRL's GRPOTrainer, constructed by TRL's own ``__init__``.

    ``beta`` is 0 at construction (a non-zero beta would make TRL load a
    reference model by name from the Hub); tests set ``trainer.beta`` and pass
    ``ref_per_token_logps`` in the batch, exactly what ``_compute_loss`` reads.

    ``model`` / ``tokenizer`` default to the tiny float64 Qwen2 and its
    word-level tokenizer; ``peft_config`` (a peft ``LoraConfig``) makes TRL
    wrap the model in an adapter; ``grpo_args`` go to ``GRPOConfig`` (e.g.
    ``importance_sampling_level="sequence"``, ``epsilon=3e-4``).
    """
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    settings = dict(output_dir=out_dir, use_cpu=True, bf16=False,
                    fp16=False, report_to="none", save_strategy="no", logging_steps=1,
                    num_generations=num_generations,
                    per_device_train_batch_size=num_generations,
                    max_completion_length=max_completion_length, beta=0.0)
    settings.update(grpo_args)
    args = GRPOConfig(**settings)
    trainer = GRPOTrainer(model=model if model is not None else tiny_model(),
                          reward_funcs=given_reward, args=args,
                          train_dataset=Dataset.from_dict({"prompt": ["t1"], "reward": [0.0]}),
                          processing_class=tokenizer if tokenizer is not None
                          else tiny_tokenizer(),
                          rollout_func=FixedRollouts(), peft_config=peft_config)
    trainer.model.train()
    # Set by Trainer's training loop before each step; 1 = no accumulation.
    trainer.current_gradient_accumulation_steps = 1
    return trainer


def trl_batch(trainer: Any, prompts: Sequence[str], rewards: Sequence[float],
              completions: Sequence[Sequence[int]]) -> dict[str, Any]:
    """TRL's own training batch (padded ids, masks, group advantages) for fixed rollouts.

    ``prompts[i]`` is row i's prompt: TRL groups ``num_generations`` consecutive
    rows, which must share a prompt, as its ``RepeatSampler`` arranges.
    """
    trainer.rollout_func.completions = [list(c) for c in completions]
    rows = [{"prompt": p, "reward": float(r)} for p, r in zip(prompts, rewards, strict=True)]
    return trainer._generate_and_score_completions(rows)


def last_metric(trainer: Any, name: str) -> float:
    """The newest value TRL logged under ``name`` (train mode)."""
    return float(trainer._metrics["train"][name][-1])
