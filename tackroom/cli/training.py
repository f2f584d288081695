"""``tackroom model init``, ``sft``, ``train`` and ``export-groups``: local models and training."""

from __future__ import annotations

from typing import Annotated

import typer

from tackroom.cli.common import (
    DEFAULT_DB,
    DbOpt,
    RayAddressOpt,
    RayOpt,
    console,
    progress_bar,
    split,
)
from tackroom.core.episode import Outcome

_OUTCOME_HELP = ("Episode outcomes to learn from (default success; also "
                 + ", ".join(o.value for o in Outcome if o is not Outcome.SUCCESS) + ").")


def model_init(
    out_dir: Annotated[str, typer.Argument(help="Directory to write the model into.")],
    arch: Annotated[str, typer.Option(help="qwen2 | llama")] = "qwen2",
    size: Annotated[str, typer.Option(help="tiny (~1M) | small (~5M) | base (~30M)")] = "tiny",
    vocab_size: Annotated[int, typer.Option(help="BPE vocabulary size.")] = 4096,
    seed: Annotated[int, typer.Option(help="Seed for weights and tokenizer.")] = 0,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing model.")] = False,
) -> None:
    """Build a small causal LM and a byte-level BPE tokenizer trained offline on our harness texts.

    Saved with save_pretrained, so transformers, `--policy hf:DIR` and (later)
    `tackroom serve DIR` load it. Deterministic given the seed.

    [bold]Example[/bold]:  tackroom model init models/tiny --size tiny
    """
    from tackroom.models import init_model, read_model_card

    with console.status(f"building a {size} {arch} model in {out_dir}…"):
        path = init_model(out_dir, arch=arch, size=size, vocab_size=vocab_size, seed=seed,
                          overwrite=force)
    card = read_model_card(path) or {}
    params = card.get("params") or card.get("parameters")
    console.print(f"[bold]model:[/bold] {path}  ({arch}, {size}"
                  + (f", {params:,} parameters" if isinstance(params, int) else "") + ")")
    console.print(f"evaluate it: tackroom eval --suite toy --policy hf:{path}")


def sft_cmd(
    model_dir: Annotated[str, typer.Argument(help="The model to start from (a local directory).")],
    out: Annotated[str, typer.Option(help="Directory for checkpoints and the final model.")],
    db: DbOpt = DEFAULT_DB,
    suite: Annotated[str | None, typer.Option(help="Only episodes of this suite.")] = None,
    harness: Annotated[list[str] | None, typer.Option(
        help="Only episodes under these harnesses (comma-separated or repeated).")] = None,
    tasks: Annotated[list[str] | None, typer.Option(help="Task ids or globs.")] = None,
    outcome: Annotated[list[str] | None, typer.Option(
        help=_OUTCOME_HELP)] = None,
    run: Annotated[list[str] | None, typer.Option(help="Only these runs.")] = None,
    policy: Annotated[list[str] | None, typer.Option(
        help="Only episodes of these policies (e.g. expert).")] = None,
    lora: Annotated[bool, typer.Option("--lora/--full", help="Train a LoRA adapter, or every weight.")] = False,
    lora_rank: Annotated[int, typer.Option(help="LoRA rank.")] = 32,
    lora_alpha: Annotated[int, typer.Option(help="LoRA alpha (scale = alpha / rank).")] = 64,
    adapter: Annotated[str | None, typer.Option(help="Continue training this LoRA adapter.")] = None,
    lr: Annotated[float, typer.Option(help="Peak learning rate.")] = 1e-3,
    warmup: Annotated[int, typer.Option(help="Warm-up steps.")] = 10,
    epochs: Annotated[float, typer.Option(help="Passes over the examples (fractions allowed).")] = 3.0,
    batch_size: Annotated[int, typer.Option(help="Examples per micro-batch.")] = 8,
    grad_accum: Annotated[int, typer.Option(help="Micro-batches per optimiser step.")] = 1,
    max_length: Annotated[int, typer.Option(help="Skip examples longer than this (tokens).")] = 2048,
    checkpoint_every: Annotated[int, typer.Option(help="Optimiser steps between checkpoints.")] = 50,
    seed: Annotated[int, typer.Option(help="Seed (data order, initialisation of adapters).")] = 0,
    device: Annotated[str, typer.Option(help="cpu or cuda[:N].")] = "cpu",
    threads: Annotated[int | None, typer.Option(help="torch CPU threads.")] = None,
    save_dtype: Annotated[str | None, typer.Option(
        help="Store the final full model as float16/bfloat16 (half the size).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from the newest checkpoint in --out.")] = False,
) -> None:
    """Supervised fine-tuning on recorded episodes: the loss covers only what the model wrote.

    Each recorded turn is an example (the exact prompt the policy saw under its
    harness, and its reply); turns that failed to parse are skipped. Metrics of
    every step go to the record store; checkpoints to --out.

    [bold]Examples[/bold]

      tackroom eval --suite miniwob --harness som-tools --policy expert --seeds 100-199

      tackroom sft models/tiny --out models/tiny-sft --harness som-tools --outcome success

      tackroom sft models/tiny --out models/tiny-sft --resume      # after a crash

      tackroom eval --suite miniwob --harness som-tools --policy hf:models/tiny-sft/final
    """
    from tackroom.app.runs import new_run_id
    from tackroom.app.training import sft, sft_config

    # Checked here, before the progress bar and before torch loads: a typo is one line.
    config = sft_config(model_dir, out, suite=suite, harnesses=split(harness),
                        tasks=split(tasks), outcomes=split(outcome), runs=split(run),
                        policies=split(policy), lora=lora, lora_rank=lora_rank,
                        lora_alpha=lora_alpha, adapter=adapter, lr=lr, warmup=warmup,
                        epochs=epochs, batch_size=batch_size, grad_accum=grad_accum,
                        max_length=max_length, checkpoint_every=checkpoint_every, seed=seed,
                        device=device, threads=threads, save_dtype=save_dtype)
    run_id = "sft-" + new_run_id()
    with progress_bar("sft steps", None, stats="preparing examples…") as bar:

        def on_step(step: int, total: int, m: dict[str, float]) -> None:
            bar.update(step, total, f"loss {m['loss']:.3f} · acc {m['token_accuracy']:.0%} · "
                       f"{m['seconds']:.0f} s")

        result = sft(config, store=db, run_id=run_id, resume=resume, on_step=on_step)
    if result.resumed_from is not None:
        console.print(f"resumed from step {result.resumed_from}")
    skipped = ", ".join(f"{k} {v}" for k, v in result.skipped.items()) or "none"
    console.print(f"[bold]trained:[/bold] {result.examples} examples, {result.steps} steps, "
                  f"final loss {result.last.get('loss', float('nan')):.4f} "
                  f"(skipped turns: {skipped}); run {run_id} in {db}")
    _print_model(result.final, model_dir if config.lora else None)


def train_cmd(
    overrides: Annotated[list[str] | None, typer.Argument(
        help="Settings section.key=value (TOML values), applied after --config.")] = None,
    config: Annotated[str | None, typer.Option(
        "--config", "-c", help="A TOML file of RLConfig sections (docs/training.md).")] = None,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue from the newest checkpoint in run.out_dir.")] = False,
    ray: RayOpt = False,
    ray_address: RayAddressOpt = None,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads.")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the resolved configuration, train nothing.")] = False,
    db: DbOpt = DEFAULT_DB,
) -> None:
    """Policy-gradient training (GRPO, Dr.GRPO, GSPO) across harnesses, online or on records.

    Every step's metrics go to the record store (`tackroom runs`); online rollouts are
    recorded too, each turn with the weight version that wrote it.

    [bold]Examples[/bold]

      tackroom train -c train.toml

      tackroom train -c train.toml algo.algorithm=gspo grouping.group=cross lora.rank=16

      tackroom train -c train.toml --resume            # after a crash

      tackroom eval --suite toy --policy hf:BASE:runs/train/final ...
    """
    from tackroom.app.runs import new_run_id
    from tackroom.app.training import train, train_config

    cfg = train_config(config, overrides or [])
    if dry_run:
        console.print(cfg.to_toml(resolved=True), markup=False, highlight=False)
        return
    with progress_bar("train steps", cfg.steps, stats="first rollouts…") as bar:

        def on_step(step: int, total: int, m: dict[str, float]) -> None:
            stats = (f"reward {m.get('reward_mean', float('nan')):.2f} · success "
                     f"{m.get('success', 0.0):.0%} · loss {m.get('loss', float('nan')):.3f}")
            if "eval/success" in m:
                stats += f" · eval {m['eval/success']:.0%}"
            bar.update(step, total, stats)

        result = train(cfg, store=db, run_id="train-" + new_run_id(), resume=resume,
                       executor="ray" if ray or ray_address else "local",
                       ray_address=ray_address, threads=threads, on_step=on_step,
                       on_note=bar.note)
    console.print(f"[bold]trained:[/bold] {result.steps} steps ({cfg.algorithm}, "
                  f"{'LoRA' if cfg.lora else 'full'}); run {result.run_id} in {db}")
    if result.eval:
        parts = ", ".join(f"{k.removeprefix('eval/success/')} {v:.0%}"
                          for k, v in result.eval.items() if k.startswith("eval/success/"))
        console.print(f"[bold]evaluation[/bold] (greedy, held-out seeds): "
                      f"{result.eval.get('eval/success', 0.0):.0%} ({parts})")
    _print_model(result.final, result.base_model if cfg.lora else None, result.version)


def export_groups_cmd(
    runs: Annotated[list[str] | None, typer.Argument(
        help="Runs to export (default: every run in the store).")] = None,
    out: Annotated[str, typer.Option("--out", "-o", help="Directory for the Parquet files.")
                   ] = "groups",
    fmt: Annotated[list[str] | None, typer.Option(
        "--format", help="verl, trl (comma-separated; default both).")] = None,
    config: Annotated[str | None, typer.Option(
        "--config", "-c", help="A training TOML: its [grouping] decides groups and "
        "advantages.")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="section.key=value, e.g. grouping.group=cross (repeatable).")] = None,
    suite: Annotated[str | None, typer.Option(help="Only episodes of this suite.")] = None,
    harness: Annotated[list[str] | None, typer.Option(
        help="Only these harnesses (comma-separated).")] = None,
    tasks: Annotated[list[str] | None, typer.Option(help="Task ids or globs.")] = None,
    db: DbOpt = DEFAULT_DB,
) -> None:
    """Export recorded episodes as groups with advantages, for verl and TRL (Parquet).

    One row per turn: the prompt the policy saw, its reply, and the episode's group,
    reward and advantage (grouping and normalisation as `tackroom train` computes them).

    [bold]Example[/bold]

      tackroom export-groups RUN_ID -o groups --set grouping.group=cross
    """
    from tackroom.app.training import export_groups, train_config

    cfg = train_config(config, set_ or [])
    result = export_groups(out, split(runs), config=cfg, suite=suite or "",
                           harnesses=split(harness), tasks=split(tasks),
                           formats=split(fmt), store=db)
    console.print(f"[bold]exported[/bold] {result.rows} turns of {result.episodes} episodes "
                  f"in {result.groups} groups (grouping.group = {cfg.group!r}):")
    for name, path in result.files.items():
        console.print(f"  {name}: {path}")


def _print_model(final: object, base: str | None, version: str | None = None) -> None:
    """Where a trained model went and the policy spec that evaluates it (``base``: LoRA)."""
    spec = f"hf:{base}:{final}" if base else f"hf:{final}"
    console.print(f"[bold]model:[/bold] {final}" + (f" (version {version})" if version else "")
                  + f"\nevaluate it: tackroom eval --policy {spec} ...")
