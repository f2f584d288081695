"""Training from Python: supervised fine-tuning on records, policy-gradient RL, group export.

Both trainers record every step's metrics in the store under a run id of their own
(``sft-…`` / ``train-…``) and write checkpoints that ``--resume`` continues from.
``tackroom sft``, ``tackroom train`` and ``tackroom export-groups`` parse their
arguments and call these functions; the trainer's in-run evaluation is
:func:`tackroom.evaluate`, passed in here (training sits below the application layer).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from tackroom.app.evaluation import evaluate
from tackroom.app.runs import new_run_id, open_store, resolve_run
from tackroom.core.episode import Outcome
from tackroom.core.errors import ConfigError
from tackroom.records import RecordStore
from tackroom.train.config import RLConfig
from tackroom.train.engine import LoraSettings, OptimSettings
from tackroom.train.export import FORMATS, ExportResult
from tackroom.train.export import export_groups as _export_groups
from tackroom.train.rl import RLResult, run_rl
from tackroom.train.sft import Selection, SFTConfig, SFTResult, run_sft

__all__ = ["sft", "sft_config", "train", "train_config", "export_groups", "StepCallback"]

StepCallback = Callable[[int, int, dict[str, float]], None]


def sft_config(model: str, out: str, *, suite: str | None = None,
               harnesses: Sequence[str] = (), tasks: Sequence[str] = (),
               outcomes: Sequence[str] = (), runs: Sequence[str] = (),
               policies: Sequence[str] = (), lora: bool = False, lora_rank: int = 32,
               lora_alpha: int = 64, adapter: str | None = None, lr: float = 1e-3,
               warmup: int = 10, epochs: float = 3.0, batch_size: int = 8,
               grad_accum: int = 1, max_length: int | None = 2048,
               checkpoint_every: int = 50, seed: int = 0, device: str = "cpu",
               threads: int | None = None, save_dtype: str | None = None) -> SFTConfig:
    """An :class:`~tackroom.train.sft.SFTConfig` from ``tackroom sft``'s options, checked.

    ``outcomes`` defaults to ``success``; ``lora`` (or an ``adapter`` to continue)
    trains a LoRA adapter, else every weight. Bad values raise one
    :class:`~tackroom.core.errors.ConfigError` naming the option — before torch loads.
    """
    selection = Selection(suite=suite, harnesses=tuple(harnesses), tasks=tuple(tasks),
                          outcomes=tuple(outcomes) or (Outcome.SUCCESS.value,),
                          runs=tuple(runs), policies=tuple(policies))
    return SFTConfig(
        model=model, out=out, selection=selection,
        lora=LoraSettings(rank=lora_rank, alpha=lora_alpha) if lora or adapter else None,
        optim=OptimSettings(lr=lr, warmup_steps=warmup, grad_accum=grad_accum),
        epochs=epochs, batch_size=batch_size, max_length=max_length,
        checkpoint_every=checkpoint_every, seed=seed, device=device, threads=threads,
        save_dtype=save_dtype, init_adapter=adapter)


def sft(config: SFTConfig, *, store: RecordStore | str | Path | None = None,
        run_id: str | None = None, resume: bool = False,
        on_step: StepCallback | None = None) -> SFTResult:
    """Supervised fine-tuning on recorded episodes; the loss covers only what the model wrote.

    ``config.selection`` picks the episodes (suite, harnesses, tasks, outcomes,
    runs, policies); each recorded turn is an example with the exact prompt the
    policy saw. ``on_step(step, total, metrics)`` reports progress.

    ::

        from tackroom.train.sft import SFTConfig, Selection
        result = tackroom.sft(SFTConfig(model="models/tiny", out="models/tiny-sft",
                                        selection=Selection(harnesses=("som-tools",))))
        tackroom.evaluate(policies=[f"hf:{result.final}"], suite="toy")
    """
    with open_store(store) as st:
        return run_sft(config, st, run_id or "sft-" + new_run_id(), resume=resume,
                       on_step=on_step)


def train_config(config: str | Path | None = None, overrides: Sequence[str] = ()) -> RLConfig:
    """The :class:`~tackroom.train.config.RLConfig` of a TOML file (``None``: the defaults)
    with ``section.key=value`` overrides applied, validated."""
    return RLConfig.from_toml(str(config) if config is not None else None, list(overrides))


def train(config: RLConfig | str | Path | None = None, overrides: Sequence[str] = (), *,
          store: RecordStore | str | Path | None = None, run_id: str | None = None,
          resume: bool = False, executor: str = "local", ray_address: str | None = None,
          threads: int | None = None, on_step: StepCallback | None = None,
          on_note: Callable[[str], None] | None = None) -> RLResult:
    """Policy-gradient training (GRPO, Dr.GRPO, GSPO) across harnesses, online or on records.

    ``config`` is an :class:`~tackroom.train.config.RLConfig` or the path of a
    TOML file of its sections; ``overrides`` are ``section.key=value`` strings
    applied after it (a TOML path only). ``executor="ray"`` plays online rollouts on Ray
    actors. ``[eval]`` evaluations run through :func:`tackroom.evaluate`.

    ::

        result = tackroom.train("train.toml", ["algo.algorithm=gspo", "optim.steps=20"])
        print(result.final, result.eval.get("eval/success"))
    """
    if not isinstance(config, RLConfig):
        config = train_config(config, overrides)
    elif overrides:
        raise ConfigError("overrides apply to a TOML configuration", "train",
                          "set the fields of the RLConfig instead, or pass the TOML path")
    with open_store(store) as st:
        return run_rl(config, st, run_id or "train-" + new_run_id(), resume=resume,
                      ray=executor == "ray" or bool(ray_address), ray_address=ray_address,
                      threads=threads, evaluate=evaluate, on_step=on_step, on_note=on_note)


def export_groups(out: str | Path, runs: Sequence[str] = (), *,
                  config: RLConfig | str | Path | None = None, overrides: Sequence[str] = (),
                  suite: str = "", harnesses: Sequence[str] = (), tasks: Sequence[str] = (),
                  formats: Sequence[str] = (),
                  store: RecordStore | str | Path | None = None) -> ExportResult:
    """Recorded episodes as groups with advantages, for verl and TRL (Parquet files in ``out``).

    ``runs`` are run ids or ``latest`` (none: every run); ``config`` (an RLConfig or a
    training TOML, with ``overrides``) decides the grouping and advantages exactly as
    ``tackroom train`` computes them; ``formats`` picks among verl and trl (none: both).
    """
    cfg = config if isinstance(config, RLConfig) else train_config(config, overrides)
    with open_store(store) as st:
        run_ids = [resolve_run(st, r) for r in runs]
        return _export_groups(st, out, cfg, runs=run_ids, suite=suite, harnesses=harnesses,
                              tasks=tasks, formats=list(formats) or list(FORMATS))
