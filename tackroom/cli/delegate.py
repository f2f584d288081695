"""``tackroom delegate fit|bench|hash``: decision models that share control with the LLM."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from tackroom.cli.common import DEFAULT_DB, DbOpt, console, kind_help, progress_bar, split
from tackroom.core.errors import ConfigError
from tackroom.core.policy import Sampling


def fit_cmd(
    harness: Annotated[str, typer.Option(
        "--harness", "-H", help="The harness the recorded runs used (its [delegation] points); "
        "the output extends it.")],
    out: Annotated[Path, typer.Option(
        help="The delegating harness to write; the model goes to <stem>.decision/ beside it.")],
    model: Annotated[str, typer.Option(
        help=kind_help("decision_model", "Decision model kind: {}."))] = "logistic",
    train_on: Annotated[str, typer.Option(
        help="all | post-mistake (only states right after a mistake) | weighted.")] = "all",
    target_precision: Annotated[float, typer.Option(
        help="Precision each type's threshold must reach on held-out episodes.")] = 0.9,
    global_threshold: Annotated[bool, typer.Option(
        "--global-threshold", help="One threshold for every choice type (the naive "
        "baseline) instead of one per type.")] = False,
    points: Annotated[list[str] | None, typer.Option(
        help="Point types to delegate (default the harness's).")] = None,
    runs: Annotated[list[str] | None, typer.Option(
        "--run", help="Runs to learn from (default every run in --db).")] = None,
    validation: Annotated[float, typer.Option(help="Share of episodes held out.")] = 0.25,
    min_support: Annotated[int, typer.Option(
        help="Fewest held-out take-overs a threshold is fitted on.")] = 5,
    option: Annotated[list[str] | None, typer.Option(
        "--option", "-o", help="A model option KEY=VALUE (e.g. epochs=3 for lm).")] = None,
    seed: Annotated[int, typer.Option(help="Training seed.")] = 0,
    db: DbOpt = DEFAULT_DB,
) -> None:
    """Train a decision model on recorded decision points and write a delegating harness.

    [bold]Examples[/bold]

      tackroom eval --suite miniwob --harness som-record.toml --policy bundled,expert \\
          --seeds 100-139 --db train.duckdb

      tackroom delegate fit --db train.duckdb --harness som-record.toml \\
          --out harnesses/som-delegate.toml --model logistic --train-on weighted

      tackroom delegate fit --db train.duckdb --harness som-record.toml \\
          --out som-naive.toml --global-threshold
    """
    from tackroom.app.delegation import fit_delegation
    from tackroom.report.delegation import fit_table

    result = fit_delegation(db, harness, out, kind=model, train_on=train_on,
                            target_precision=target_precision, per_type=not global_threshold,
                            points=split(points), runs=split(runs), validation=validation,
                            min_support=min_support, seed=seed, options=_options(option))
    console.print(fit_table(result))
    console.print(f"wrote {result.harness} (model {result.model_dir}, "
                  f"hash {result.model_hash})")


def bench_cmd(
    delegating: Annotated[list[str], typer.Option(
        "--delegating", "-D", help="Delegating harnesses to grade (comma-separated).")],
    suite: Annotated[str, typer.Option(help="Suite.")] = "miniwob",
    tasks: Annotated[list[str] | None, typer.Option("--tasks", "-t", help="Task ids or globs."
                                                    )] = None,
    policy: Annotated[str, typer.Option("--policy", "-p", help="The LLM.")] = "bundled",
    seeds: Annotated[str, typer.Option(help="Seeds, e.g. 0-9.")] = "0-9",
    rungs: Annotated[list[str] | None, typer.Option(
        help="Rungs: llm, isolated, one, confident, alone (default all).")] = None,
    max_tokens: Annotated[int, typer.Option(help="Max completion tokens per turn.")] = 512,
    concurrency: Annotated[int, typer.Option("--concurrency", "-n")] = 0,
    workdir: Annotated[Path, typer.Option(help="Where the rung harnesses and ladder.json go."
                                          )] = Path("delegate-bench"),
    json_out: Annotated[bool, typer.Option("--json", help="Print the ladder as JSON.")] = False,
    db: Annotated[Path | None, typer.Option(
        help="Record store (default WORKDIR/bench.duckdb).")] = None,
) -> None:
    """Grade decision models from isolated decisions to full control (the ladder).

    The first --delegating harness runs every rung; the others run the isolated and
    confident rungs (a comparison of decision models on the same episodes).

    [bold]Examples[/bold]

      tackroom delegate bench -D som-delegate.toml,som-naive.toml --suite miniwob \\
          --tasks click-test,click-button --policy bundled --seeds 0-19 --max-tokens 48
    """
    from tackroom.app.delegation import RUNGS, bench_delegation
    from tackroom.report.delegation import ladder_table

    chosen = split(rungs) or list(RUNGS)
    with progress_bar("episodes", None) as bar:
        done = [0]

        def on_start(start: Any) -> None:
            bar.update(0, total=start.to_run)

        def on_episode(ep: Any) -> None:
            done[0] += 1
            bar.update(done[0])

        result = bench_delegation(suite, tasks=split(tasks), seeds=seeds, policy=policy,
                                  delegating=split(delegating), workdir=workdir, store=db,
                                  sampling=Sampling(max_tokens=max_tokens),
                                  concurrency=concurrency, rungs=chosen,
                                  on_start=on_start, on_episode=on_episode)
    if json_out:
        console.print_json(json.dumps(result.to_dict()))
        return
    console.print(ladder_table(result))
    console.print(f"run {result.run_id} in {result.db}; ladder in {workdir / 'ladder.json'}")


def hash_cmd(path: Annotated[Path, typer.Argument(help="A decision model directory.")]) -> None:
    """Print a decision model's content hash (what a harness's model_hash pins)."""
    from tackroom.policies.delegation.models import model_hash

    console.print(model_hash(path))


def _options(values: list[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for v in split(values):
        key, sep, raw = v.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"model option {v!r} is not KEY=VALUE", "--option",
                              "e.g. --option epochs=3")
        try:
            out[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.strip()] = raw
    return out
