"""``tackroom optimize`` and ``tackroom audit``: harness/skill optimisation and its BiPA audit."""

from __future__ import annotations

from typing import Annotated

import typer

from tackroom.cli.common import DEFAULT_DB, DbOpt, console, progress_bar


def optimize_cmd(
    config: Annotated[str | None, typer.Option(
        "--config", "-c", help="optimize.toml: \\[optimize], \\[splits], \\[sampling] "
        "(docs/optimize.md).")] = None,
    resume: Annotated[str | None, typer.Option(
        "--resume", help="Finish optimiser run OPT_RUN from its journal.")] = None,
    out: Annotated[str | None, typer.Option(
        "--out", help="Where candidate harness files go (default: beside the store).")] = None,
    db: DbOpt = DEFAULT_DB,
) -> None:
    """Optimise a harness: propose edits from failures, accept on dev, report on test.

    Every candidate is a harness file that `extends` its parent; every evaluation is an
    ordinary run in the store; a killed run continues with --resume.

    [bold]Examples[/bold]

      tackroom optimize -c optimize.toml

      tackroom optimize --resume opt-20261201-101500-ab12

      tackroom audit opt-20261201-101500-ab12
    """
    from tackroom.app.optimization import optimize
    from tackroom.app.optimize_config import OptimizeConfig
    from tackroom.core.errors import ConfigError
    from tackroom.report.audit_tables import optimize_table

    if (config is None) == (resume is None):
        raise ConfigError("give --config FILE for a new run or --resume OPT_RUN", "optimize",
                          "e.g. tackroom optimize -c optimize.toml")
    cfg = OptimizeConfig.from_toml(config) if config is not None else None  # errors first
    with progress_bar("candidates on dev", cfg.budget if cfg else None,
                      stats="baseline on dev…") as bar:
        result = optimize(cfg, store=db, run_id=resume, resume_run=resume is not None,
                          out_dir=out, on_note=bar.note,
                          on_progress=lambda done, budget: bar.update(done, budget, "of budget"))
    console.print(optimize_table(result))
    console.print(f"accepted: {', '.join(result.accepted) or 'nothing'}; "
                  f"{result.dev_evaluations} dev evaluation(s), {result.rejected} candidate(s) "
                  f"rejected by the leakage guard; best harness: {result.best_path}")
    console.print(f"next: tackroom audit {result.run_id}")


def audit_cmd(
    run: Annotated[str, typer.Argument(help="The optimiser run (opt-…) to audit.")],
    json_out: Annotated[str | None, typer.Option(
        "--json", help="Also write the audit as JSON to this file.")] = None,
    db: DbOpt = DEFAULT_DB,
) -> None:
    """The BiPA audit of an optimiser run: selection effect, dev → test, read graph, cost.

    Re-runs the acceptance rule on the same candidates under fresh seeds (the
    winner's curse), evaluates each accepted candidate on test, reads which skill
    sections the final harness's episodes acted on, and what each accepted edit cost.

    [bold]Examples[/bold]

      tackroom audit opt-20261201-101500-ab12

      tackroom audit opt-20261201-101500-ab12 --json audit.json
    """
    import json
    from pathlib import Path

    from tackroom.app.optimization import audit
    from tackroom.report.audit_tables import audit_tables

    with progress_bar("audit", None, stats="fresh seeds…") as bar:
        result = audit(run, store=db, on_note=bar.note)
    for table in audit_tables(result):
        console.print(table)
    if json_out:
        Path(json_out).write_text(json.dumps(result.to_dict(), indent=1))
        console.print(f"wrote {json_out}")


def self_hpo_cmd(
    config: Annotated[str | None, typer.Option(
        "--config", "-c", help="selfhpo.toml: \\[selfhpo], \\[splits], \\[train], \\[sampling] "
        "(docs/optimize.md, \"Self-HPO\").")] = None,
    resume: Annotated[str | None, typer.Option(
        "--resume", help="Finish Self-HPO run SHPO_RUN from its journal.")] = None,
    out: Annotated[str | None, typer.Option(
        "--out", help="Where harnesses and checkpoints go (default: beside the store).")] = None,
    db: DbOpt = DEFAULT_DB,
) -> None:
    """Self-HPO: the policy proposes harness edits, then trains under the harness it kept.

    Runs three arms with equal budgets — the alternation, harness optimisation alone,
    policy training alone — then a sealed evaluation of every arm's final policy under
    every arm's final harness and the held-out ones. A killed run continues with --resume.

    [bold]Examples[/bold]

      tackroom self-hpo -c selfhpo.toml

      tackroom self-hpo --resume shpo-20261201-101500-ab12

      tackroom report shpo-20261201-101500-ab12.sealed
    """
    from tackroom.app.selfhpo import self_hpo
    from tackroom.app.selfhpo_config import SelfHPOConfig
    from tackroom.core.errors import ConfigError

    if (config is None) == (resume is None):
        raise ConfigError("give --config FILE for a new run or --resume SHPO_RUN", "self-hpo",
                          "e.g. tackroom self-hpo -c selfhpo.toml")
    cfg = SelfHPOConfig.from_toml(config) if config is not None else None  # errors first
    phases: list[int | None] = [0, None]  # done, total

    def progress(done: int, total: int) -> None:
        phases[:] = [done, total]
        bar.update(done, total, "")

    with progress_bar("phases", None, stats="π_0 on dev…") as bar:
        result = self_hpo(cfg, store=db, run_id=resume, resume_run=resume is not None,
                          out_dir=out, on_note=bar.note, on_progress=progress,
                          on_step=lambda step, total, m: bar.update(
                              phases[0] or 0, phases[1], f"training step {step}/{total}, success "
                              f"{m.get('success', float('nan')):.0%}"))
    from tackroom.report.terminal import self_hpo_tables

    for table in self_hpo_tables(result.report):
        console.print(table)
    console.print(f"sealed run {result.sealed_run} (manifest {result.manifest}); "
                  f"the lineage plot: tackroom report {result.run_id}")
