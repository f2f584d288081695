"""The training engine shared by ``tackroom sft`` and ``tackroom train``.

One place owns what every trainer needs around its loss: loading a local
checkpoint (full fine-tuning, or a fresh / resumed peft LoRA adapter), the
optimiser and learning-rate schedule, gradient accumulation and clipping,
checkpoints that a crashed run resumes from exactly, the final save, and the
per-step metrics written to the record store.

A checkpoint directory holds the weights (the adapter alone for LoRA) and the
tokenizer, so each one is itself a policy (``hf:OUT/checkpoint-40`` for full
training, ``hf:BASE:OUT/checkpoint-40`` for an adapter), plus
``optimizer.pt`` and ``trainer_state.json`` for resuming.
"""

from __future__ import annotations

import json
import math
import random
import shutil
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tackroom.core.bounds import check_number
from tackroom.core.errors import ConfigError
from tackroom.policies.chat_format import MODEL_CARD, model_dir_problem, no_progress_bars

STATE_FILE = "trainer_state.json"
OPTIMIZER_FILE = "optimizer.pt"
CHECKPOINT_PREFIX = "checkpoint-"


#: Upper bounds of training settings that size memory or loops: far above any real
#: run, low enough that a typo (``--batch-size 80000000``) is one line, not an OOM.
MAX_RANK = 4096
MAX_BATCH = 65536
MAX_STEPS = 10_000_000
MAX_SEED = 2**32 - 1  # what torch and numpy seeds take


@dataclass(frozen=True)
class LoraSettings:
    """A peft LoRA adapter: rank, scale (``alpha / rank``), dropout and target layers."""

    rank: int = 32
    alpha: int = 64
    dropout: float = 0.0
    #: ``all-linear`` (every linear layer but the LM head) or a list of module names.
    target_modules: str | tuple[str, ...] = "all-linear"

    def check(self, where: str, options: Mapping[str, str] | None = None) -> None:
        """Raise :class:`ConfigError` naming the first bad setting.

        ``options`` names the option of a field (``{"rank": "--lora-rank"}``) for the
        message; other fields are reported under ``where``.
        """
        at = (options or {}).get
        check_number(self.rank, 1, MAX_RANK, "lora rank", at("rank", where), integer=True,
                     example="32")
        check_number(self.alpha, 1, 1e6, "lora alpha", at("alpha", where), example="64")
        check_number(self.dropout, 0, 0.99, "lora dropout", at("dropout", where),
                     example="0.05")


@dataclass(frozen=True)
class OptimSettings:
    """AdamW with warm-up then cosine / linear / constant decay, clipped gradients.

    ``grad_accum`` micro-batches make one optimiser step.
    """

    lr: float = 1e-4
    weight_decay: float = 0.0
    warmup_steps: int = 0
    schedule: str = "cosine"
    min_lr_ratio: float = 0.1
    max_grad_norm: float = 1.0
    grad_accum: int = 1
    betas: tuple[float, float] = (0.9, 0.999)

    def check(self, where: str, options: Mapping[str, str] | None = None) -> None:
        """Raise :class:`ConfigError` naming the first bad setting (``options`` as in
        :meth:`LoraSettings.check`)."""
        at = (options or {}).get
        # (field, low, high, integer, example). A learning rate above 1 only
        # diverges; 0 or NaN trains nothing.
        rules = (("lr", 1e-12, 1.0, False, "1e-4"), ("weight_decay", 0, 1e3, False, "0.0"),
                 ("max_grad_norm", 1e-12, 1e12, False, "1.0"),
                 ("warmup_steps", 0, MAX_STEPS, True, "10"),
                 ("grad_accum", 1, MAX_BATCH, True, "1 for no accumulation"),
                 ("min_lr_ratio", 0, 1, False, "0.1"))
        for name, lo, hi, integer, example in rules:
            check_number(getattr(self, name), lo, hi, name, at(name, where), integer=integer,
                         example=example)
        for beta in self.betas:
            check_number(beta, 0, 0.999999, "adam beta", at("betas", where), example="0.9")
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"unknown schedule {self.schedule!r}", where,
                              f"use one of: {', '.join(SCHEDULES)}")


SCHEDULES = ("cosine", "linear", "constant")


def lr_factor(step: int, total: int, optim: OptimSettings) -> float:
    """The learning-rate multiplier at optimiser ``step`` (0-based) of ``total``."""
    if optim.warmup_steps and step < optim.warmup_steps:
        return (step + 1) / optim.warmup_steps
    if optim.schedule == "constant" or total <= optim.warmup_steps:
        return 1.0
    progress = min(1.0, (step - optim.warmup_steps) / max(1, total - optim.warmup_steps))
    floor = optim.min_lr_ratio
    if optim.schedule == "linear":
        return floor + (1 - floor) * (1 - progress)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """The newest complete checkpoint under ``out_dir`` (one with a trainer state)."""
    out = Path(out_dir)
    if not out.is_dir():
        return None
    done = [p for p in out.glob(f"{CHECKPOINT_PREFIX}*") if (p / STATE_FILE).is_file()]
    done = [p for p in done if p.name.removeprefix(CHECKPOINT_PREFIX).isdigit()]
    return max(done, key=lambda p: int(p.name.removeprefix(CHECKPOINT_PREFIX)), default=None)


@dataclass
class TrainEngine:
    """A model being trained, with its optimiser, schedule and checkpoints.

    Args:
        model_dir: the starting checkpoint (any local transformers causal LM
            with a chat-template tokenizer).
        out_dir: where checkpoints and the final model go.
        total_steps: optimiser steps planned (for the schedule).
        lora: train a LoRA adapter on a frozen base; ``None``: every weight.
        optim: optimiser settings.
        init_adapter: an existing adapter to continue training (LoRA only).
        seed: seeds torch and Python's RNG.
        device: ``cpu`` or ``cuda[:N]``.
        threads: CPU threads for torch; ``None`` leaves the default.
        keep_checkpoints: how many checkpoints to keep (oldest removed).
    """

    model_dir: str | Path
    out_dir: str | Path
    total_steps: int
    lora: LoraSettings | None = None
    optim: OptimSettings = field(default_factory=OptimSettings)
    init_adapter: str | Path | None = None
    seed: int = 0
    device: str = "cpu"
    threads: int | None = None
    keep_checkpoints: int = 2

    def __post_init__(self) -> None:
        import torch

        self.optim.check("optim")
        if self.lora is not None:
            self.lora.check("lora")
        if self.threads:
            torch.set_num_threads(int(self.threads))
        torch.manual_seed(self.seed)
        random.seed(self.seed)
        self.out_dir = Path(self.out_dir)
        self.tokenizer, self.model = self._load()
        params = [p for p in self.model.parameters() if p.requires_grad]
        decay = [p for p in params if p.ndim >= 2]
        no_decay = [p for p in params if p.ndim < 2]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.optim.weight_decay},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=self.optim.lr, betas=self.optim.betas)
        self.step = 0  # optimiser steps taken
        self._micro = 0  # micro-batches accumulated towards the next step
        self.trainable = sum(p.numel() for p in params)
        self.total_params = sum(p.numel() for p in self.model.parameters())

    # ---------------------------------------------------------------- load
    def _load(self) -> tuple[Any, Any]:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = Path(self.model_dir)
        if (problem := model_dir_problem(path)) is not None:
            raise ConfigError(problem, "model", "create one with `tackroom model init DIR`")
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        if not getattr(tokenizer, "chat_template", None):
            raise ConfigError(f"the tokenizer in {path} has no chat template", "model",
                              "use a chat model, or one made by `tackroom model init`")
        with no_progress_bars():
            model: torch.nn.Module = AutoModelForCausalLM.from_pretrained(
                path, local_files_only=True, dtype=torch.float32)
        model.to(self.device)
        if self.lora is not None:
            from peft import LoraConfig, PeftModel, get_peft_model

            if self.init_adapter:
                model = PeftModel.from_pretrained(model, str(self.init_adapter),
                                                  is_trainable=True)
            else:
                targets = self.lora.target_modules
                model = get_peft_model(model, LoraConfig(
                    r=self.lora.rank, lora_alpha=self.lora.alpha,
                    lora_dropout=self.lora.dropout, task_type="CAUSAL_LM",
                    target_modules=targets if isinstance(targets, str) else list(targets)))
        elif self.init_adapter:
            raise ConfigError("an adapter to continue was given without LoRA", "adapter",
                              "pass --lora-rank, or drop the adapter")
        model.train()
        return tokenizer, model

    # ------------------------------------------------------------- stepping
    def backward(self, loss: Any) -> None:
        """Accumulate the gradient of one micro-batch's loss (scaled by ``1/grad_accum``)."""
        (loss / self.optim.grad_accum).backward()
        self._micro += 1

    @property
    def ready(self) -> bool:
        """Whether enough micro-batches are accumulated for an optimiser step."""
        return self._micro >= self.optim.grad_accum

    def optimizer_step(self) -> dict[str, float]:
        """Clip, step, advance the schedule; returns ``grad_norm`` and the ``lr`` used."""
        import torch

        lr = self.optim.lr * lr_factor(self.step, self.total_steps, self.optim)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        params = [p for p in self.model.parameters() if p.requires_grad]
        norm = torch.nn.utils.clip_grad_norm_(params, self.optim.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self._micro = 0
        return {"grad_norm": float(norm), "lr": lr}

    # ---------------------------------------------------------- checkpoints
    def save_checkpoint(self, state: Mapping[str, Any], *,
                        extra: Callable[[Path], None] | None = None) -> Path:
        """Write ``checkpoint-<step>`` (weights, tokenizer, optimiser, ``state``).

        The directory is written under a temporary name and renamed, so a
        crash mid-save never leaves a checkpoint that looks complete.
        ``extra(directory)`` writes further files (a value head, a version
        file) into it before the rename, so they are part of that promise.
        """
        import torch

        out = Path(self.out_dir)  # a Path since __post_init__; typed as given
        final = out / f"{CHECKPOINT_PREFIX}{self.step}"
        tmp = out / f".tmp-{CHECKPOINT_PREFIX}{self.step}"
        shutil.rmtree(tmp, ignore_errors=True)
        self._save_weights(tmp)
        if extra is not None:
            extra(tmp)
        torch.save({"optimizer": self.optimizer.state_dict(),
                    "torch_rng": torch.get_rng_state(),
                    "python_rng": random.getstate()}, tmp / OPTIMIZER_FILE)
        (tmp / STATE_FILE).write_text(json.dumps(
            {"step": self.step, **dict(state)}, indent=1, default=str))
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        self._prune()
        return final

    def resume(self) -> dict[str, Any] | None:
        """Load the newest checkpoint under ``out_dir``; its saved state, or ``None``."""
        import torch

        ckpt = latest_checkpoint(self.out_dir)
        if ckpt is None:
            return None
        state = json.loads((ckpt / STATE_FILE).read_text())
        self._load_weights(ckpt)
        saved = torch.load(ckpt / OPTIMIZER_FILE, weights_only=False)
        self.optimizer.load_state_dict(saved["optimizer"])
        torch.set_rng_state(saved["torch_rng"])
        random.setstate(saved["python_rng"])
        self.step = int(state["step"])
        self._micro = 0
        return state

    def save_final(self, path: str | Path | None = None, *, dtype: str | None = None,
                   card: Mapping[str, Any] | None = None) -> Path:
        """Save the trained model (or adapter) for use as a policy; returns its directory.

        ``dtype`` (``float16``/``bfloat16``) stores full weights at half size; the
        hf backend loads them back as float32.
        """
        target = Path(path) if path else Path(self.out_dir) / "final"
        shutil.rmtree(target, ignore_errors=True)
        self._save_weights(target, dtype=dtype)
        if card is not None:
            base = {}
            src = Path(self.model_dir) / MODEL_CARD
            if src.is_file():
                base = json.loads(src.read_text())
            (target / MODEL_CARD).write_text(json.dumps({**base, **dict(card)}, indent=1,
                                                        default=str))
        return target

    def _save_weights(self, target: Path, *, dtype: str | None = None) -> None:
        import torch

        target.mkdir(parents=True, exist_ok=True)
        model = self.model
        if dtype is not None and self.lora is None:
            # A half-precision copy on the side: the training weights stay float32.
            import copy

            model = copy.deepcopy(self.model).to(getattr(torch, dtype))
        with no_progress_bars():
            model.save_pretrained(target)
        self.tokenizer.save_pretrained(target)
        if self.lora is None:
            card = Path(self.model_dir) / MODEL_CARD
            if card.is_file() and not (target / MODEL_CARD).exists():
                shutil.copy(card, target / MODEL_CARD)

    def _load_weights(self, ckpt: Path) -> None:
        import torch
        from safetensors.torch import load_file

        if self.lora is not None:
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(self.model, load_file(ckpt / "adapter_model.safetensors"))
            return
        files = sorted(ckpt.glob("*.safetensors"))
        state: dict[str, Any] = {}
        for f in files:
            state.update(load_file(f))
        missing, unexpected = self.model.load_state_dict(
            {k: v.to(torch.float32) for k, v in state.items()}, strict=False)
        # Tied embeddings are saved once; anything else missing is a real mismatch.
        missing = [k for k in missing if k != "lm_head.weight"]
        if missing or unexpected:
            raise ConfigError(f"checkpoint {ckpt} does not fit the model "
                              f"(missing {missing[:3]}, unexpected {unexpected[:3]})",
                              "--resume", "resume with the same model and settings")

    def _prune(self) -> None:
        ckpts = sorted((p for p in Path(self.out_dir).glob(f"{CHECKPOINT_PREFIX}*")
                        if p.name.removeprefix(CHECKPOINT_PREFIX).isdigit()),
                       key=lambda p: int(p.name.removeprefix(CHECKPOINT_PREFIX)))
        for old in ckpts[:-self.keep_checkpoints] if self.keep_checkpoints > 0 else []:
            shutil.rmtree(old, ignore_errors=True)

    def describe(self) -> dict[str, Any]:
        """What is being trained, for run configs and model cards."""
        return {"model": str(self.model_dir), "mode": "lora" if self.lora else "full",
                "lora": asdict(self.lora) if self.lora else None,
                "optim": asdict(self.optim), "trainable_params": self.trainable,
                "total_params": self.total_params, "seed": self.seed}
