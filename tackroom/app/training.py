"""Training from Python: supervised fine-tuning on records, and policy-gradient RL.

Both record every step's metrics in the store under a run id of their own
(``sft-…`` / ``train-…``) and write checkpoints that ``--resume`` continues from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from tackroom.app.runs import new_run_id, open_store
from tackroom.core.errors import ConfigError
from tackroom.records import RecordStore
from tackroom.train.config import RLConfig
from tackroom.train.rl import RLResult, run_rl
from tackroom.train.sft import SFTConfig, SFTResult, run_sft

StepCallback = Callable[[int, int, dict[str, float]], None]


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


def train(config: RLConfig | str | Path | None = None, overrides: Sequence[str] = (), *,
          store: RecordStore | str | Path | None = None, run_id: str | None = None,
          resume: bool = False, executor: str = "local", ray_address: str | None = None,
          threads: int | None = None, on_step: StepCallback | None = None,
          on_note: Callable[[str], None] | None = None) -> RLResult:
    """Policy-gradient training (GRPO, Dr.GRPO, GSPO) across harnesses, online or on records.

    ``config`` is an :class:`~tackroom.train.config.RLConfig` or the path of a
    TOML file of its sections; ``overrides`` are ``section.key=value`` strings
    applied after it (a TOML path only). ``executor="ray"`` plays online rollouts on Ray actors.

    ::

        result = tackroom.train("train.toml", ["algo.algorithm=gspo", "optim.steps=20"])
        print(result.final, result.eval.get("eval/success"))
    """
    if not isinstance(config, RLConfig):
        config = RLConfig.from_toml(str(config) if config is not None else None, list(overrides))
    elif overrides:
        raise ConfigError("overrides apply to a TOML configuration", "train",
                          "set the fields of the RLConfig instead, or pass the TOML path")
    with open_store(store) as st:
        return run_rl(config, st, run_id or "train-" + new_run_id(), resume=resume,
                      ray=executor == "ray" or bool(ray_address), ray_address=ray_address,
                      threads=threads, on_step=on_step, on_note=on_note)
