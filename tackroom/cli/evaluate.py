"""``tackroom eval`` and ``tackroom seal``: argument parsing and printing over :mod:`tackroom.app`.

``eval`` calls one of :func:`tackroom.evaluate`, :func:`tackroom.resume`,
:func:`tackroom.evaluate_sealed` (or, with ``--dry-run``, the matching ``plan``
function) and prints what it is told through their callbacks.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from tackroom.cli.common import (
    DEFAULT_DB,
    DbOpt,
    RayAddressOpt,
    RayOpt,
    console,
    err_console,
    kind_help,
    lazy_help,
    progress_bar,
    split,
)
from tackroom.core.episode import Episode, Outcome
from tackroom.core.errors import ConfigError, TackroomError
from tackroom.core.policy import Sampling

if TYPE_CHECKING:
    from tackroom.app.evaluation import RunPlan, RunStart
    from tackroom.app.runs import Run

_SUITE_HELP = kind_help("suite", "Suite: {}, or module:factory (see `tackroom list suite`).")


def _policy_help(prefix: str = "") -> str:
    def make() -> str:
        from tackroom.policies import policy_forms

        return prefix + " | ".join(policy_forms()) + " (comma-separated)."
    return lazy_help(prefix + "A policy spec, see `tackroom list policy` (comma-separated).", make)


#: eval options that choose cells; a sealed manifest fixes them all.
_CELL_OPTIONS = ("suite", "tasks", "harness", "policy", "seeds", "temperature", "top_p",
                 "max_tokens", "logprobs")


def eval_cmd(
    suite: Annotated[str, typer.Option(help=_SUITE_HELP)] = "miniwob",
    tasks: Annotated[list[str] | None, typer.Option(
        "--tasks", "-t", help="Task ids or globs (comma-separated); @expert = tasks with an "
        "expert, @all = every task.")] = None,
    harness: Annotated[list[str] | None, typer.Option(
        "--harness", "-H", help="Harness names or .toml paths (comma-separated; default the "
        "suite's own).")] = None,
    policy: Annotated[list[str] | None, typer.Option("--policy", "-p", help=_policy_help())
                      ] = None,
    seeds: Annotated[str, typer.Option(help="Seeds, e.g. 0-9 or 0,3,7.")] = "0-4",
    concurrency: Annotated[int, typer.Option(
        "--concurrency", "-n", help="Episodes at a time (default: the suite's; 8 with "
        "openai:).")] = 0,
    base_url: Annotated[str | None, typer.Option(
        help="OpenAI-compatible server URL (default $OPENAI_BASE_URL).")] = None,
    temperature: Annotated[float, typer.Option(help="Sampling temperature.")] = 0.0,
    top_p: Annotated[float, typer.Option(help="Nucleus sampling.")] = 1.0,
    max_tokens: Annotated[int, typer.Option(help="Max completion tokens per turn.")] = 512,
    logprobs: Annotated[bool, typer.Option(help="Ask the server for log-probs.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds per model call.")] = 60.0,
    max_episodes: Annotated[int | None, typer.Option(
        help="Allow a grid of up to N episodes (default limit 1000000).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the grid, run nothing.")] = False,
    resume: Annotated[str | None, typer.Option(
        help="Finish RUN ('latest' for the newest): re-run only missing and infra-failed "
        "episodes.")] = None,
    by_task: Annotated[bool, typer.Option(help="Also print the per-task matrix.")] = True,
    unsafe_local: Annotated[bool, typer.Option(
        "--unsafe-local", help="Sandboxed suites (terminal, code): without bubblewrap, run "
        "task commands directly on this machine, with no isolation.")] = False,
    sandbox: Annotated[str, typer.Option(
        help="Terminal tasks with a Dockerfile: 'bubblewrap' (their environment built "
        "without Docker) or 'docker' (built and run with a Docker daemon).")] = "bubblewrap",
    sealed: Annotated[str | None, typer.Option(
        help="Run every cell of a manifest written by `tackroom seal` (no filters; the "
        "report shows the manifest hash and every cell).")] = None,
    ray: RayOpt = False,
    ray_address: RayAddressOpt = None,
    db: DbOpt = DEFAULT_DB,
    ctx: typer.Context = None,  # type: ignore[assignment]  # typer fills it in
) -> None:
    """Run a grid of episodes and print success by harness × policy.

    [bold]Examples[/bold]

      tackroom eval --suite miniwob --harness som-tools,html-commands,outline-coords \\
          --policy expert --seeds 0-9

      tackroom eval --suite toy --tasks 'click-*' --policy openai:my-model \\
          --base-url http://127.0.0.1:8000/v1 --seeds 0-19 -n 8

      tackroom eval --suite terminal --policy expert --unsafe-local

      tackroom eval --suite terminal --tasks my-imported-task --sandbox docker

      tackroom eval --resume latest

      tackroom eval --sealed manifest.json --ray
    """
    from tackroom.app import evaluation
    from tackroom.sandbox import DEFAULT as DEFAULT_SANDBOX

    if sealed:
        _refuse_cell_options(ctx)
    suite_options: dict[str, object] = {"unsafe_local": True} if unsafe_local else {}
    if sandbox != DEFAULT_SANDBOX:  # only suites that run sandboxes take the option
        suite_options["sandbox"] = sandbox
    if unsafe_local:
        err_console.print("[yellow]--unsafe-local[/yellow]: task commands run directly on this "
                          "machine, with no sandbox")
    sampling = Sampling(temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                        logprobs=logprobs)
    cells: dict[str, Any] = dict(tasks=split(tasks), harnesses=split(harness),
                                 policies=split(policy) or ["expert"], seeds=seeds,
                                 sampling=sampling)
    server: dict[str, Any] = dict(concurrency=concurrency, base_url=base_url)
    if dry_run:
        if resume:
            plan = evaluation.plan_resume(resume, db, sealed=sealed, max_episodes=max_episodes,
                                          **server)
        elif sealed:
            plan = evaluation.plan_sealed(sealed, timeout=timeout, suite_options=suite_options,
                                          store=db, max_episodes=max_episodes, **server)
        else:
            plan = evaluation.plan(suite, timeout=timeout, suite_options=suite_options,
                                   store=db, max_episodes=max_episodes, **cells, **server)
        with plan:
            _print_plan(plan)
        return
    run: dict[str, Any] = dict(store=db, executor="ray" if ray or ray_address else "local",
                               ray_address=ray_address, max_episodes=max_episodes, **server)
    with _watched(db, by_task, resumed=bool(resume)) as callbacks:
        if resume:
            evaluation.resume(resume, sealed=sealed, **run, **callbacks)
        elif sealed:
            evaluation.evaluate_sealed(sealed, timeout=timeout, suite_options=suite_options,
                                       **run, **callbacks)
        else:
            evaluation.evaluate(suite, timeout=timeout, suite_options=suite_options, **cells,
                                **run, **callbacks)


def _refuse_cell_options(ctx: typer.Context | None) -> None:
    """A sealed evaluation runs every cell of its manifest: options that filter it are refused."""
    if ctx is None:
        return
    for name in _CELL_OPTIONS:
        # By name: typer ships its own copy of click's ParameterSource enum.
        source = getattr(ctx.get_parameter_source(name), "name", "DEFAULT")
        if source in ("COMMANDLINE", "ENVIRONMENT"):
            flag = "--" + name.replace("_", "-")
            raise ConfigError("cannot be combined with --sealed: a sealed evaluation "
                              "runs every cell of its manifest", flag,
                              f"drop {flag}, or seal a new manifest with `tackroom seal`")


@contextmanager
def _watched(db: str, by_task: bool, resumed: bool) -> Iterator[dict[str, Any]]:
    """The progress bar and the callbacks a run reports to; the results once it ends.

    Whatever ends the run — done, Ctrl-C or a signal, an error — a run that was recorded
    as started gets its tables printed and, if not done, the command that finishes it.
    """
    from tackroom.app.runs import Run

    counts = {"success": 0, "done": 0, "infra": 0}
    started: list[RunStart] = []
    with progress_bar("episodes", None, enabled=True) as bar:

        def on_start(start: RunStart) -> None:
            started.append(start)
            plan, cfg = start.plan, start.plan.config
            bar.update(0, total=start.to_run)
            bar.note(f"run {start.run_id}: {plan.describe()}, {cfg.concurrency} at a time"
                     + (f"; {start.already} already recorded, {start.to_run} to run"
                        if resumed else ""))
            if cfg.manifest_hash:
                bar.note(f"sealed manifest sha256:{cfg.manifest_hash} "
                         f"({plan.manifest.n_cells if plan.manifest else '?'} cells)")
            if plan.grid.inexpressible:
                bar.note(f"{len(plan.grid.inexpressible)} (task, harness) pairs cannot be "
                         "expressed by the harness and are not run")

        def on_episode(ep: Episode) -> None:
            if ep.outcome is Outcome.INFRA_ERROR:
                counts["infra"] += 1
                if ep.attempt < 1:  # retried as a new attempt: not done yet
                    bar.update(counts["done"], stats=_stats(counts))
                    return
            else:
                counts["success"] += ep.outcome is Outcome.SUCCESS
            counts["done"] += 1
            bar.update(counts["done"], stats=_stats(counts))

        try:
            yield {"on_start": on_start, "on_episode": on_episode, "on_note": bar.note}
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP (tackroom.core.cancel)
            if not started:
                raise
            err_console.print(f"[yellow]interrupted[/yellow] — finish with: "
                              f"tackroom eval --resume {started[0].run_id}")
            raise typer.Exit(130) from None
        except TackroomError:
            if started:
                err_console.print(f"[dim]recorded episodes kept; finish with: "
                                  f"tackroom eval --resume {started[0].run_id}[/dim]")
            raise
        finally:
            if started:
                bar.progress.stop()
                print_results(Run.open(started[0].run_id, store=db), by_task)


def _stats(c: dict[str, int]) -> str:
    rate = c["success"] / c["done"] if c["done"] else 0.0
    infra = f" [magenta]{c['infra']} infra[/magenta]" if c["infra"] else ""
    return f"success {100 * rate:.0f}%{infra}"


def _print_plan(plan: RunPlan) -> None:
    seeds = plan.config.seeds
    table = Table(title=f"Dry run: {plan.n_episodes} episodes on suite "
                  f"{escape(plan.suite.name)}", title_justify="left")
    for col in ("harness", "hash", "policy", "tasks", "seeds", "episodes"):
        table.add_column(col)
    groups: dict[tuple[str, str, str], set[str]] = {}
    for c in plan.grid.cells:
        groups.setdefault((c.harness.name, c.harness.hash, c.policy.id), set()).add(c.task.id)
    for (h, hh, p), ts in groups.items():
        table.add_row(escape(h), escape(hh), escape(p), str(len(ts)),
                      f"{seeds[0]}–{seeds[-1]} ({len(seeds)})", str(len(ts) * len(seeds)))
    console.print(table)
    for task, spec in plan.grid.inexpressible:
        needs = ", ".join(sorted(task.requires - spec.interface.supports))
        console.print(f"[dim]cannot express: {escape(task.id)} under {escape(spec.name)} "
                      f"(needs {escape(needs)})[/dim]")


def print_results(run: Run, by_task: bool = True) -> None:
    """After a run: the per-task matrices, the summary, the sealed cells, infra errors."""
    from tackroom.report.terminal import summary_table, task_matrix

    rows = run.episodes()
    if not rows:
        return
    cannot = [(t, h) for t, h in run.config.inexpressible]
    per_harness: dict[str, int] = {}
    for _, h in cannot:
        per_harness[h] = per_harness.get(h, 0) + 1
    harnesses = list(run.config.harness_hashes) or sorted({r["harness"] for r in rows})
    if by_task:
        for p in sorted({r["policy"] for r in rows}):
            console.print(task_matrix(rows, harnesses, p, set(cannot)))
    console.print(summary_table(rows, inexpressible=per_harness or None))
    print_sealed(run, rows)
    _print_infra_errors(rows, run.id)
    console.print(f"records: {run.db} (run {run.id})", markup=False, highlight=False)


def print_sealed(run: Run, rows: list[dict[str, Any]]) -> None:
    """For a sealed run: every cell of its manifest, and the manifest hash."""
    from tackroom.report.terminal import sealed_table
    from tackroom.runner.sealed import sealed_report

    section = sealed_report(run.id, run.manifest_hash, run.config, rows)
    if section is not None:
        console.print(sealed_table(section))


def _print_infra_errors(rows: list[dict[str, Any]], run_id: str) -> None:
    """One line per distinct infrastructure failure, so a crash is visible without digging."""
    from tackroom.analysis.summary import final_attempts

    seen: dict[str, int] = {}
    for r in rows:
        if r["outcome"] == Outcome.INFRA_ERROR:
            first = (r.get("error") or "unknown infrastructure error").splitlines()[0]
            seen[first] = seen.get(first, 0) + 1
    for line, n in list(seen.items())[:5]:
        err_console.print(f"[magenta]infra error[/magenta] ×{n}: {escape(line)}", soft_wrap=True)
    left = sum(1 for r in final_attempts(rows) if r["outcome"] == Outcome.INFRA_ERROR)
    if left:
        err_console.print(f"[dim]{left} episode(s) still infra-failed after a retry; they are "
                          f"recorded apart — re-run them with: tackroom eval --resume {run_id}"
                          "[/dim]", soft_wrap=True)
    elif seen:
        err_console.print("[dim]each was retried as a new attempt and finished[/dim]")


def seal_cmd(
    out: Annotated[str, typer.Option("--out", "-o", help="Manifest file to write (JSON).")],
    suite: Annotated[str, typer.Option(help=_SUITE_HELP)] = "miniwob",
    tasks: Annotated[list[str] | None, typer.Option(
        "--tasks", "-t", help="Task ids or globs (comma-separated), expanded now; @expert, "
        "@all.")] = None,
    harness: Annotated[list[str] | None, typer.Option(
        "--harness", "-H", help="Evaluation harnesses: names or .toml paths.")] = None,
    policy: Annotated[list[str] | None, typer.Option(
        "--policy", "-p", help=_policy_help("Policies / checkpoints: "))] = None,
    seeds: Annotated[str, typer.Option(help="Seeds, e.g. 0-9 or 0,3,7.")] = "0-4",
    held_out: Annotated[list[str] | None, typer.Option(
        "--held-out", help="Harnesses held out of training: evaluated too, and marked.")] = None,
    train_harness: Annotated[list[str] | None, typer.Option(
        "--train-harness", help="The harnesses the checkpoints were trained under (e.g. the "
        "training config's list); every other evaluation harness is marked held out.")] = None,
    temperature: Annotated[float, typer.Option(help="Sampling temperature.")] = 0.0,
    top_p: Annotated[float, typer.Option(help="Nucleus sampling.")] = 1.0,
    max_tokens: Annotated[int, typer.Option(help="Max completion tokens per turn.")] = 512,
    logprobs: Annotated[bool, typer.Option(help="Ask the server for log-probs.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Seal an evaluation: write a manifest of policies × harnesses × tasks × seeds and its hash.

    `tackroom eval --sealed FILE` then runs every cell of it — nothing filtered, nothing
    dropped — and the report shows each cell with the manifest hash.

    [bold]Example[/bold]

      tackroom seal --suite toy --harness som-tools,html-commands --held-out outline-coords \\
          --policy hf:ckpt/a,hf:ckpt/b --seeds 0-9 --out manifest.json
    """
    from tackroom.app.sealing import inexpressible_pairs, seal

    manifest = seal(out, suite=suite, tasks=split(tasks), harnesses=split(harness),
                    policies=split(policy) or ["expert"], seeds=seeds, held_out=split(held_out),
                    train_harnesses=split(train_harness),
                    sampling=Sampling(temperature=temperature, top_p=top_p,
                                      max_tokens=max_tokens, logprobs=logprobs), force=force)
    cannot = len(inexpressible_pairs(manifest))
    n_held = len(manifest.held_out)
    console.print(f"[bold]sealed[/bold] {escape(str(Path(out)))}: manifest "
                  f"sha256:{manifest.hash}")
    console.print(f"{manifest.n_cells} cells = {len(manifest.policies)} policies × "
                  f"{len(manifest.harnesses)} harnesses"
                  + (f" ({n_held} held out: {', '.join(manifest.held_out)})" if n_held else "")
                  + f" × {len(manifest.tasks)} tasks × {len(manifest.seeds)} seeds"
                  + (f"; {cannot} (task, harness) pairs cannot be expressed and will be "
                     "reported as such" if cannot else ""), markup=False)
    console.print(f"run it with: tackroom eval --sealed {out}", markup=False)
