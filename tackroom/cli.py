"""The ``tackroom`` command line: eval, runs, show, export, harness, tasks."""

from __future__ import annotations

import asyncio
import datetime as _dt
import difflib
import fnmatch
import json
import os
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from tackroom.core.errors import ConfigError, TackroomError, TaskNotFound
from tackroom.core.policy import Sampling
from tackroom.core.task import Suite, Task

# Piped output (CI logs, files) gets wide tables instead of rich's 80-column default.
_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160
console = Console(width=_WIDTH)
err_console = Console(stderr=True, width=_WIDTH)

DEFAULT_DB = os.environ.get("TACKROOM_DB", "./tackroom-runs/tackroom.duckdb")

app = typer.Typer(
    name="tackroom",
    help="Evaluate, diagnose and train language-model agents across harnesses.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    epilog=(
        "Examples:\n\n"
        "  tackroom eval --suite miniwob --harness som-tools,html-commands,outline-coords "
        "--policy expert --seeds 0-9\n\n"
        "  tackroom eval --suite toy --policy openai:Qwen/Qwen3-8B --base-url http://127.0.0.1:8000/v1\n\n"
        "  tackroom runs\n\n  tackroom show RUN_ID EPISODE_ID\n\n  tackroom report latest\n\n"
        "  tackroom harness list"
    ),
)
harness_app = typer.Typer(help="Inspect and check harness files.", no_args_is_help=True)
app.add_typer(harness_app, name="harness")
model_app = typer.Typer(help="Build local models (no network, no model hub).",
                        no_args_is_help=True)
app.add_typer(model_app, name="model")

DbOpt = Annotated[str, typer.Option("--db", help="Record store (DuckDB file).")]


# -- helpers ---------------------------------------------------------------------------------
def parse_seeds(text: str) -> list[int]:
    """``0-9``, ``0,3,7`` or ``0-4,10`` → sorted unique seeds."""
    seeds: set[int] = set()
    try:
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            if "-" in part:
                a, b = part.split("-", 1)
                lo, hi = int(a), int(b)
                if hi < lo:
                    raise ValueError
                seeds.update(range(lo, hi + 1))
            else:
                seeds.add(int(part))
    except ValueError:
        raise ConfigError(f"cannot read seeds {text!r}", "--seeds",
                          "write a range or list, e.g. 0-9 or 0,3,7") from None
    if not seeds:
        raise ConfigError("no seeds given", "--seeds", "e.g. --seeds 0-9")
    return sorted(seeds)


def _split(values: list[str] | None) -> list[str]:
    out: list[str] = []
    for v in values or []:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


def select_tasks(suite: Suite, patterns: list[str]) -> list[Task]:
    """Tasks matching ids or globs; ``@expert`` means every task with an expert."""
    tasks = suite.tasks()
    by_id = {t.id: t for t in tasks}
    chosen: dict[str, Task] = {}
    for pat in patterns:
        if pat == "@expert":
            matched = [t for t in tasks if t.has_expert]
        elif pat == "@all":
            matched = tasks
        else:
            name = pat.split("/", 1)[1] if pat.startswith(suite.name + "/") else pat
            matched = [t for t in tasks if fnmatch.fnmatchcase(t.id, name)]
            if not matched:
                close = difflib.get_close_matches(name, list(by_id), n=3)
                hint = f"did you mean {', '.join(close)}?" if close else \
                    f"see `tackroom tasks --suite {suite.name}`"
                raise TaskNotFound(f"no task matches {pat!r} in suite {suite.name!r}",
                                   "--tasks", hint)
        for t in matched:
            chosen.setdefault(t.id, t)
    return list(chosen.values())


def _open_store(db: str):
    from tackroom.records import RecordStore

    return RecordStore(db)


def _new_run_id() -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


# -- eval ------------------------------------------------------------------------------------
@app.command("eval")
def eval_cmd(
    suite: Annotated[str, typer.Option(help="Suite: miniwob, toy.")] = "miniwob",
    tasks: Annotated[list[str] | None, typer.Option(
        "--tasks", "-t", help="Task ids or globs (comma-separated); @expert = tasks with an "
        "expert, @all = every task.")] = None,
    harness: Annotated[list[str] | None, typer.Option(
        "--harness", "-H", help="Harness names or .toml paths (comma-separated).")] = None,
    policy: Annotated[list[str] | None, typer.Option(
        "--policy", "-p", help="expert | openai:MODEL[@URL] | replay:RUN_ID")] = None,
    seeds: Annotated[str, typer.Option(help="Seeds, e.g. 0-9 or 0,3,7.")] = "0-4",
    concurrency: Annotated[int, typer.Option("--concurrency", "-n",
                                             help="Episodes at a time.")] = 0,
    base_url: Annotated[str | None, typer.Option(
        help="OpenAI-compatible server URL (default $OPENAI_BASE_URL).")] = None,
    temperature: Annotated[float, typer.Option(help="Sampling temperature.")] = 0.0,
    top_p: Annotated[float, typer.Option(help="Nucleus sampling.")] = 1.0,
    max_tokens: Annotated[int, typer.Option(help="Max completion tokens per turn.")] = 512,
    logprobs: Annotated[bool, typer.Option(help="Ask the server for log-probs.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds per model call.")] = 60.0,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the grid, run nothing.")] = False,
    resume: Annotated[str | None, typer.Option(
        help="Finish RUN: re-run only missing and infra-failed episodes.")] = None,
    by_task: Annotated[bool, typer.Option(help="Also print the per-task matrix.")] = True,
    unsafe_local: Annotated[bool, typer.Option(
        "--unsafe-local", help="Sandboxed suites (terminal): without bubblewrap, run task "
        "commands directly on this machine, with no isolation.")] = False,
    sealed: Annotated[str | None, typer.Option(
        help="Run every cell of a manifest written by `tackroom seal` (no filters; the "
        "report shows the manifest hash and every cell).")] = None,
    ray: Annotated[bool, typer.Option(
        "--ray", help="Run episodes on Ray actors (a local cluster sized to this machine).")
    ] = False,
    ray_address: Annotated[str | None, typer.Option(
        help="Join this Ray cluster instead (auto, HOST:6379, ray://HOST:10001); implies "
        "--ray.")] = None,
    db: DbOpt = DEFAULT_DB,
    ctx: typer.Context = None,  # type: ignore[assignment]  # typer fills it in
) -> None:
    """Run a grid of episodes and print success by harness × policy.

    [bold]Examples[/bold]

      tackroom eval --suite miniwob --harness som-tools,html-commands,outline-coords \\
          --policy expert --seeds 0-9

      tackroom eval --suite toy --tasks 'click-*' --policy openai:my-model \\
          --base-url http://127.0.0.1:8000/v1 --seeds 0-19 -n 8

      tackroom eval --resume 20261129-101500-ab12

      tackroom eval --sealed manifest.json --ray
    """
    from tackroom.harness.spec import load_harness
    from tackroom.policies import make_policy
    from tackroom.runner.grid import plan_grid, resume_attempts
    from tackroom.suites import get_suite

    manifest = _load_manifest(sealed, ctx) if sealed else None
    if unsafe_local:  # read by the sandboxed suites when they build environments
        os.environ["TACKROOM_UNSAFE_LOCAL"] = "1"
        err_console.print("[yellow]--unsafe-local[/yellow]: task commands run directly on this "
                          "machine, with no sandbox")
    store = None
    if resume:
        store = _open_store(db)
        run = store.run(resume)
        if run is None:
            raise ConfigError(f"no run {resume!r}", db, "list runs with `tackroom runs`")
        cfg = run["config"] if isinstance(run["config"], dict) else json.loads(run["config"])
        suite, tasks, harness, policy = cfg["suite"], cfg["tasks"], cfg["harnesses"], cfg["policies"]
        seeds, concurrency = cfg["seeds"], concurrency or cfg.get("concurrency", 0)
        base_url = base_url or cfg.get("base_url")
        sampling = Sampling(**cfg["sampling"])
        timeout = cfg.get("timeout", timeout)
        manifest = _run_manifest(resume, run, cfg, manifest)
    elif manifest is not None:
        suite, tasks, policy = manifest.suite, list(manifest.tasks), list(manifest.policies)
        harness, seeds = [h.ref for h in manifest.harnesses], list(manifest.seeds)
        sampling = Sampling(**manifest.sampling)
    else:
        sampling = Sampling(temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                            logprobs=logprobs)
    the_suite = get_suite(suite)
    policy_specs = _split(policy) or ["expert"]
    default_tasks = ["@expert"] if all(p == "expert" for p in policy_specs) else ["@all"]
    task_list = select_tasks(the_suite, _split(tasks) or default_tasks)
    harness_names = _split(harness) or list(getattr(
        the_suite, "default_harnesses", ["som-tools", "html-commands", "outline-coords"]))
    # A sealed run checks each harness against its hash in the manifest.
    specs = manifest.load_harnesses() if manifest else [load_harness(h) for h in harness_names]
    if resume:
        recorded = cfg.get("harness_hashes", {})
        for h in specs:
            if recorded.get(h.name) not in (None, h.hash):
                raise ConfigError(
                    f"harness {h.name!r} changed since the run (was {recorded[h.name]}, "
                    f"now {h.hash})", h.source,
                    "restore the harness file, or start a new run instead of --resume")
    seed_list = seeds if isinstance(seeds, list) else parse_seeds(seeds)
    opts: dict[str, Any] = {"timeout": timeout}
    if base_url:
        opts["base_url"] = base_url
    policies = [make_policy(p, db=db, **opts) for p in policy_specs]
    plan = plan_grid(task_list, specs, policies, seed_list, sampling)
    if concurrency <= 0:
        concurrency = 4 if suite == "miniwob" else 16
        if any(p.startswith("openai:") for p in policy_specs):
            concurrency = 8

    if dry_run:
        _print_plan(plan, suite, seed_list, policy_specs)
        return

    use_ray = ray or bool(ray_address)
    if use_ray:
        from tackroom.runner.ray_workers import check_ray

        check_ray(ray_address)
    _preflight(policy_specs, db, opts)
    getattr(the_suite, "preflight", lambda: None)()  # e.g. terminal: is bubblewrap there?
    if store is None:
        store = _open_store(db)
    run_id = resume or _new_run_id()
    config = {
        "suite": suite, "tasks": [t.id for t in task_list], "harnesses": harness_names,
        "harness_hashes": {h.name: h.hash for h in specs}, "policies": policy_specs,
        "seeds": seed_list, "sampling": sampling.to_dict(), "concurrency": concurrency,
        "base_url": base_url, "timeout": timeout,
        # The id each policy spec records its episodes under (`report` accepts either).
        "policy_ids": {s: p.id for s, p in zip(policy_specs, policies, strict=True)},
    }
    if manifest is not None:
        from tackroom.runner.sealed import sealed_config

        config.update(sealed_config(manifest, {s: p.id for s, p in zip(
            policy_specs, policies, strict=True)}, [(t.key, h.name) for t, h in plan.inexpressible]))
    cells = plan.cells
    done = 0
    if resume:
        cells, done = resume_attempts(plan, store.episode_ids(run_id))
    store.start_run(run_id, command="eval", config=config, n_planned=len(plan.cells),
                    manifest_hash=manifest.hash if manifest else None)
    console.print(f"[bold]run[/bold] {run_id}: {len(plan.cells)} episodes "
                  f"({len(task_list)} tasks × {len(specs)} harnesses × {len(policies)} "
                  f"policies × {len(seed_list)} seeds), {concurrency} at a time"
                  + (f"; {done} already recorded, {len(cells)} to run" if resume else ""))
    if manifest is not None:
        console.print(f"[bold]sealed[/bold] manifest sha256:{manifest.hash} "
                      f"({manifest.n_cells} cells)")
    if plan.inexpressible:
        console.print(f"[dim]{len(plan.inexpressible)} (task, harness) pairs cannot be "
                      "expressed by the harness and are not run[/dim]")
    status = "finished"
    ray_opts = {"address": ray_address, "specs": policy_specs, "opts": opts} if use_ray \
        else None
    try:
        _run_with_progress(cells, the_suite, run_id, store, concurrency, policies, ray_opts)
    except KeyboardInterrupt:
        status = "interrupted"
        err_console.print(f"[yellow]interrupted[/yellow] — finish with: "
                          f"tackroom eval --resume {run_id}")
        raise typer.Exit(130) from None
    except TackroomError:
        status = "interrupted"
        err_console.print(f"[dim]recorded episodes kept; finish with: "
                          f"tackroom eval --resume {run_id}[/dim]")
        raise
    finally:
        store.finish_run(run_id, status)
        _print_results(store, run_id, [h.name for h in specs], policy_specs, plan, by_task)
        store.close()


#: eval options that choose cells; a sealed manifest fixes them all.
_CELL_OPTIONS = ("suite", "tasks", "harness", "policy", "seeds", "temperature", "top_p",
                 "max_tokens", "logprobs")


def _load_manifest(path: str, ctx: typer.Context | None):
    """The manifest at ``path``, checked against its hash; refuse options that would filter it."""
    from tackroom.runner.sealed import Manifest

    if ctx is not None:
        for name in _CELL_OPTIONS:
            # By name: typer ships its own copy of click's ParameterSource enum.
            source = getattr(ctx.get_parameter_source(name), "name", "DEFAULT")
            if source in ("COMMANDLINE", "ENVIRONMENT"):
                flag = "--" + name.replace("_", "-")
                raise ConfigError("cannot be combined with --sealed: a sealed evaluation "
                                  "runs every cell of its manifest", flag,
                                  f"drop {flag}, or seal a new manifest with `tackroom seal`")
    return Manifest.load(path)


def _run_manifest(run_id: str, run: dict[str, Any], cfg: dict[str, Any], given):
    """The manifest of a sealed run being resumed (``None`` for an ordinary run)."""
    from tackroom.runner.sealed import Manifest

    recorded = run.get("manifest_hash")
    if given is not None and given.hash != recorded:
        raise ConfigError(f"run {run_id} was not sealed with this manifest (run: "
                          f"{recorded or 'not sealed'}, manifest: {given.hash})", "--sealed",
                          "resume without --sealed, or give the run's own manifest")
    if not cfg.get("manifest"):
        return None
    manifest = Manifest.from_dict(cfg["manifest"], f"run {run_id}")
    if manifest.hash != recorded:
        raise ConfigError(f"the manifest recorded with run {run_id} does not match its hash "
                          f"{recorded}", f"run {run_id}",
                          "the record store was edited; start a new sealed run")
    return manifest


def _preflight(policy_specs: list[str], db: str, opts: dict[str, Any]) -> None:
    """Check model servers before a run starts, so a down server is one line, not N errors."""
    from tackroom.policies import make_policy

    async def check() -> None:
        for spec in policy_specs:
            p = make_policy(spec, db=db, **opts)
            try:
                if hasattr(p, "check"):
                    await p.check()
            finally:
                await p.aclose()

    asyncio.run(check())


def _run_with_progress(cells, suite, run_id, store, concurrency, policies,
                       ray_opts: dict[str, Any] | None = None) -> None:
    """Run the cells with a progress bar, here or (``ray_opts``) on Ray rollout workers."""
    from tackroom.runner.grid import run_cells

    counts = {"success": 0, "done": 0, "infra": 0}
    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), TextColumn("eta"),
        TimeRemainingColumn(), console=console, transient=False,
        disable=not cells,
    ) as progress:
        bar = progress.add_task("episodes", total=len(cells), stats="")

        def on_episode(ep) -> None:
            if ep.outcome.value == "infra_error":
                counts["infra"] += 1
                progress.update(bar, stats=_stats(counts))
                if ep.attempt >= 1:
                    progress.advance(bar)
                    counts["done"] += 1
                return
            counts["done"] += 1
            counts["success"] += ep.outcome.value == "success"
            progress.update(bar, advance=1, stats=_stats(counts))

        async def go() -> None:
            # Policies hold connection pools bound to this event loop: close them in it.
            try:
                if ray_opts is None or not cells:
                    await run_cells(cells, suite, run_id, store=store, concurrency=concurrency,
                                    on_episode=on_episode)
                    return
                from tackroom.runner.ray_workers import ray_executor

                async with ray_executor(suite, policies, ray_opts["specs"],
                                        opts=ray_opts["opts"], concurrency=concurrency,
                                        address=ray_opts["address"]) as executor:
                    progress.console.print(f"[dim]{executor.describe()}[/dim]")
                    await run_cells(cells, suite, run_id, store=store, concurrency=concurrency,
                                    on_episode=on_episode, executor=executor)
            finally:
                for p in policies:
                    await p.aclose()

        asyncio.run(go())


def _stats(c: dict[str, int]) -> str:
    rate = c["success"] / c["done"] if c["done"] else 0.0
    infra = f" [magenta]{c['infra']} infra[/magenta]" if c["infra"] else ""
    return f"success {100 * rate:.0f}%{infra}"


def _print_plan(plan, suite: str, seeds: list[int], policies: list[str]) -> None:
    table = Table(title=f"Dry run: {len(plan.cells)} episodes on suite {suite}",
                  title_justify="left")
    for col in ("harness", "hash", "policy", "tasks", "seeds", "episodes"):
        table.add_column(col)
    groups: dict[tuple[str, str, str], set[str]] = {}
    for c in plan.cells:
        groups.setdefault((c.harness.name, c.harness.hash, c.policy.id), set()).add(c.task.id)
    for (h, hh, p), ts in groups.items():
        table.add_row(h, hh, p, str(len(ts)), f"{seeds[0]}–{seeds[-1]} ({len(seeds)})",
                      str(len(ts) * len(seeds)))
    console.print(table)
    for task, h in plan.inexpressible:
        console.print(f"[dim]cannot express: {task.id} under {h.name} "
                      f"(needs {', '.join(sorted(task.requires - h.interface.supports))})[/dim]")


def _print_results(store, run_id: str, harnesses: list[str], policies: list[str], plan,
                   by_task: bool) -> None:
    from tackroom.report.terminal import summary_table, task_matrix

    rows = store.episodes(run_id=run_id)
    if not rows:
        return
    inexpressible: dict[str, int] = {}
    for _, h in plan.inexpressible:
        inexpressible[h.name] = inexpressible.get(h.name, 0) + 1
    pairs = {(t.key, h.name) for t, h in plan.inexpressible}
    if by_task:
        for p in sorted({r["policy"] for r in rows}):
            console.print(task_matrix(rows, harnesses, p, pairs))
    console.print(summary_table(rows, inexpressible=inexpressible or None))
    _print_sealed(store, run_id, rows)
    _print_infra_errors(rows, run_id)
    console.print(f"records: {store.path} (run {run_id})")


def _print_sealed(store, run_id: str, rows: list[dict[str, Any]]) -> None:
    """For a sealed run: every cell of its manifest, and the manifest hash."""
    from tackroom.report.terminal import sealed_table
    from tackroom.runner.sealed import sealed_report

    run = store.run(run_id) or {}
    cfg = run.get("config") or {}
    cfg = cfg if isinstance(cfg, dict) else json.loads(cfg)
    section = sealed_report(run_id, run.get("manifest_hash"), cfg, rows)
    if section is not None:
        console.print(sealed_table(section))


def _print_infra_errors(rows: list[dict[str, Any]], run_id: str) -> None:
    """One line per distinct infrastructure failure, so a crash is visible without digging."""
    seen: dict[str, int] = {}
    for r in rows:
        if r["outcome"] == "infra_error":
            first = (r.get("error") or "unknown infrastructure error").splitlines()[0]
            seen[first] = seen.get(first, 0) + 1
    for line, n in list(seen.items())[:5]:
        err_console.print(f"[magenta]infra error[/magenta] ×{n}: {escape(line)}", soft_wrap=True)
    from tackroom.analysis.summary import final_attempts

    left = sum(1 for r in final_attempts(rows) if r["outcome"] == "infra_error")
    if left:
        err_console.print(f"[dim]{left} episode(s) still infra-failed after a retry; they are "
                          f"recorded apart — re-run them with: tackroom eval --resume {run_id}"
                          "[/dim]", soft_wrap=True)
    elif seen:
        err_console.print("[dim]each was retried as a new attempt and finished[/dim]")


# -- seal ------------------------------------------------------------------------------------
_DEFAULT_HARNESSES = ["som-tools", "html-commands", "outline-coords"]


@app.command("seal")
def seal_cmd(
    out: Annotated[str, typer.Option("--out", "-o", help="Manifest file to write (JSON).")],
    suite: Annotated[str, typer.Option(help="Suite: miniwob, toy.")] = "miniwob",
    tasks: Annotated[list[str] | None, typer.Option(
        "--tasks", "-t", help="Task ids or globs (comma-separated), expanded now; @expert, "
        "@all.")] = None,
    harness: Annotated[list[str] | None, typer.Option(
        "--harness", "-H", help="Evaluation harnesses: names or .toml paths.")] = None,
    policy: Annotated[list[str] | None, typer.Option(
        "--policy", "-p", help="Policies / checkpoints: expert | hf:DIR | openai:MODEL[@URL] "
        "| replay:RUN_ID (comma-separated).")] = None,
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
    from tackroom.harness.spec import load_harness
    from tackroom.policies import check_policy_spec
    from tackroom.runner.sealed import Manifest
    from tackroom.suites import get_suite

    target = Path(out)
    if target.exists() and not force:
        raise ConfigError("the manifest file exists already", str(target),
                          "choose another --out, or pass --force to replace it")
    the_suite = get_suite(suite)
    policy_specs = _split(policy) or ["expert"]
    for spec in policy_specs:
        check_policy_spec(spec)
    default_tasks = ["@expert"] if all(p == "expert" for p in policy_specs) else ["@all"]
    task_list = select_tasks(the_suite, _split(tasks) or default_tasks)
    refs = _split(harness) or list(getattr(the_suite, "default_harnesses", _DEFAULT_HARNESSES))
    held = _split(held_out)
    refs += [h for h in held if h not in refs]
    loaded = [(ref, load_harness(ref)) for ref in refs]
    manifest = Manifest.seal(
        suite=suite, tasks=[t.id for t in task_list], harnesses=loaded, policies=policy_specs,
        seeds=parse_seeds(seeds), held_out=held, train_harnesses=_split(train_harness),
        sampling=Sampling(temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                          logprobs=logprobs).to_dict())
    manifest.write(target)
    cannot = sum(1 for t in task_list for _, h in loaded if not h.interface.can_express(t.requires))
    n_held = len(manifest.held_out)
    console.print(f"[bold]sealed[/bold] {target}: manifest sha256:{manifest.hash}")
    console.print(f"{manifest.n_cells} cells = {len(manifest.policies)} policies × "
                  f"{len(manifest.harnesses)} harnesses"
                  + (f" ({n_held} held out: {', '.join(manifest.held_out)})" if n_held else "")
                  + f" × {len(manifest.tasks)} tasks × {len(manifest.seeds)} seeds"
                  + (f"; {cannot} (task, harness) pairs cannot be expressed and will be "
                     "reported as such" if cannot else ""))
    console.print(f"run it with: tackroom eval --sealed {target}")


# -- runs / show / export ----------------------------------------------------------------------
@app.command("runs")
def runs_cmd(db: DbOpt = DEFAULT_DB,
             limit: Annotated[int, typer.Option(help="How many runs to list.")] = 20) -> None:
    """List recorded runs, newest first.

    [bold]Example[/bold]:  tackroom runs --db ./tackroom-runs/tackroom.duckdb
    """
    with _open_store(db) as store:
        runs = store.runs()[:limit]
    table = Table(title=f"Runs in {db}", title_justify="left")
    for col in ("run", "created", "command", "status", "episodes", "success", "infra err"):
        table.add_column(col)
    for r in runs:
        created = r.get("created_at")
        if isinstance(created, (int, float)):
            created = _dt.datetime.fromtimestamp(created).strftime("%Y-%m-%d %H:%M")
        n = r.get("n_episodes", 0)
        rate = r.get("success_rate")
        table.add_row(r["run_id"], str(created)[:16], str(r.get("command", "")),
                      str(r.get("status", "")), f"{n}/{r.get('n_planned', '?')}",
                      f"{100 * rate:.0f}%" if rate is not None else "",
                      str(r.get("infra_errors", 0) or ""))
    console.print(table)


@app.command("show")
def show_cmd(run: Annotated[str, typer.Argument(help="Run id (or 'latest').")],
             episode: Annotated[str | None, typer.Argument(
                 help="Episode id or prefix: replay it turn by turn.")] = None,
             db: DbOpt = DEFAULT_DB,
             full: Annotated[bool, typer.Option(help="Show every message, not the last.")] = False,
             ) -> None:
    """Summarise a run, or replay one of its episodes turn by turn.

    [bold]Examples[/bold]

      tackroom show latest

      tackroom show 20261129-101500-ab12 3f9c2a
    """
    from tackroom.report.terminal import summary_table

    with _open_store(db) as store:
        run_id = store.latest_run_id() if run == "latest" else run
        if run_id is None or store.run(run_id) is None:
            raise ConfigError(f"no run {run!r}", db, "list runs with `tackroom runs`")
        if episode is None:
            rows = store.episodes(run_id=run_id)
            console.print(summary_table(rows, title=f"Run {run_id}"))
            table = Table(title="Episodes (first 40)", title_justify="left")
            for col in ("episode", "task", "harness", "policy", "seed", "outcome", "turns"):
                table.add_column(col)
            for r in rows[:40]:
                table.add_row(r["episode_id"][:10], r["task"], r["harness"], r["policy"],
                              str(r["seed"]), r["outcome"], str(r["n_turns"]))
            console.print(table)
            return
        ep = store.load_episode(episode, run_id=run_id)
    _replay(ep, full)


def _replay(ep, full: bool) -> None:
    from rich.panel import Panel

    console.print(Panel(
        f"[bold]{escape(ep.task)}[/bold] under [bold]{escape(ep.harness)}[/bold]@{ep.harness_hash} "
        f"by {escape(ep.policy)}, seed {ep.seed}, attempt {ep.attempt}\n"
        f"instruction: {escape(ep.instruction)}\noutcome: [bold]{ep.outcome.value}[/bold] "
        f"reward {ep.reward:.2f}" + (f"\nerror: {escape(ep.error)}" if ep.error else "")
        + (f"\nfailure mode: {ep.failure_mode}" if ep.failure_mode else ""),
        title=f"episode {ep.episode_id}"))
    for t in ep.turns:
        msgs = t.messages if full else t.messages[-1:]
        body = []
        for m in msgs:
            content = m.get("content") or ""
            if m.get("tool_calls"):
                content += "\n" + json.dumps(m["tool_calls"])
            body.append(f"[cyan]{m['role']}[/cyan]: {escape(content)}")
        out = t.raw_text or ""
        if t.tool_calls:
            out += "\n" + "\n".join(f"{c['function']['name']}({c['function']['arguments']})"
                                    for c in t.tool_calls)
        body.append(f"[green]model[/green]: {escape(out.strip())}")
        if t.parse_error:
            body.append(f"[red]parse error[/red]: {escape(t.parse_error)}")
        if t.actions:
            body.append("[yellow]actions[/yellow]: " + escape(", ".join(
                json.dumps(a) for a in t.actions)))
        if t.action_error:
            body.append(f"[red]action error[/red]: {escape(t.action_error)}")
        if t.feedback:
            body.append(f"[magenta]feedback[/magenta]: {escape(t.feedback)}")
        console.print(Panel("\n".join(body), title=f"turn {t.index}",
                            subtitle=f"policy {t.t_policy * 1000:.0f} ms · env "
                            f"{t.t_env * 1000:.0f} ms · tokens "
                            f"{t.prompt_tokens}+{t.completion_tokens}"))


@app.command("export")
def export_cmd(run: Annotated[str, typer.Argument(help="Run id (or 'latest').")],
               fmt: Annotated[str, typer.Option("--format", "-f",
                                                help="jsonl | parquet | atif")] = "jsonl",
               out: Annotated[str | None, typer.Option("--out", "-o", help="Output path.")] = None,
               db: DbOpt = DEFAULT_DB) -> None:
    """Export a run's episodes: JSONL, Parquet (for `datasets`), or ATIF trajectory.json files.

    [bold]Examples[/bold]

      tackroom export latest --format parquet --out episodes.parquet

      tackroom export latest --format atif --out trajectories/
    """
    from tackroom.records import export_atif, export_jsonl, export_parquet

    writers = {"jsonl": export_jsonl, "parquet": export_parquet, "atif": export_atif}
    if fmt not in writers:
        raise ConfigError(f"unknown export format {fmt!r}", "--format",
                          "choose jsonl, parquet or atif")
    with _open_store(db) as store:
        run_id = store.latest_run_id() if run == "latest" else run
        if run_id is None or store.run(run_id) is None:
            raise ConfigError(f"no run {run!r}", db, "list runs with `tackroom runs`")
        target = out or {"jsonl": f"{run_id}.jsonl", "parquet": f"{run_id}.parquet",
                         "atif": f"{run_id}-atif"}[fmt]
        n = writers[fmt](store, run_id, target)
    console.print(f"wrote {n} episodes to {target}")


@app.command("report")
def report_cmd(
    runs: Annotated[list[str], typer.Argument(help="Run ids ('latest' for the newest).")],
    out: Annotated[str | None, typer.Option("--out", "-o", help="HTML file to write.")] = None,
    trained: Annotated[list[str] | None, typer.Option(
        "--trained", help="POLICY=HARNESS: the harness a policy was trained under "
        "(enables the transfer matrix and the 'retrained' ceiling). Repeat or comma-separate."
    )] = None,
    gain: Annotated[list[str] | None, typer.Option(
        "--gain", help="BEFORE=AFTER@HARNESS: policy AFTER is BEFORE trained further under "
        "HARNESS (enables the gain scatter: ΔJ against C and M measured before). Repeat."
    )] = None,
    compare: Annotated[list[str] | None, typer.Option(
        "--compare", help="POLICY@HARNESS cells for the conflation view (every two are "
        "compared); default: each policy under its own harness. Repeat or comma-separate."
    )] = None,
    db: DbOpt = DEFAULT_DB,
) -> None:
    """Summarise runs in the terminal and write a self-contained HTML report.

    The report shows success with intervals, each harness's ceiling (and which estimator
    stands behind it), each policy's mismatch M = C − J, what cross-harness gaps are made
    of (ceiling part vs mismatch part), the transfer matrix when training harnesses are
    given, the gain scatter when further-trained policies are named, and an episode
    browser. It needs no network to view. POLICY may be a policy id (as the tables show
    it) or the spec it was run with (e.g. [cyan]bundled[/cyan], [cyan]hf:out/final[/cyan]).

    [bold]Examples[/bold]

      tackroom report latest

      tackroom report RUN_A RUN_B --trained hf:ckpt-a=som-tools --out report.html

      tackroom report BEFORE AFTER --trained bundled=som-tools \\
          --gain bundled=hf:sft-html/final@html-commands

      tackroom report latest --compare bundled@som-tools,expert@html-commands
    """
    from tackroom.report.html import build_report
    from tackroom.report.terminal import (
        ceiling_mismatch_table,
        conflation_table,
        summary_table,
    )

    with _open_store(db) as store:
        run_ids = []
        for r in runs:
            rid = store.latest_run_id() if r == "latest" else r
            if rid is None or store.run(rid) is None:
                raise ConfigError(f"no run {r!r}", db, "list runs with `tackroom runs`")
            run_ids.append(rid)
        rows = [row for rid in run_ids for row in store.episodes(run_id=rid)]
        if not rows:
            raise ConfigError("the run(s) have no episodes yet", db,
                              "finish them with `tackroom eval --resume RUN`")
        policy = _policy_resolver(rows, [store.run(rid) or {} for rid in run_ids])
        train_harness: dict[str, str] = {}
        for item in _split(trained):
            name, sep, harness_name = item.rpartition("=")
            if not sep or not name or not harness_name:
                raise ConfigError(f"cannot read {item!r}", "--trained", "write POLICY=HARNESS")
            train_harness[policy(name, "--trained")] = harness_name
        gain_pairs = []
        for item in gain or []:
            pair, at, harness_name = item.rpartition("@")
            before, eq, after = pair.partition("=")
            if not (at and eq and before and after and harness_name):
                raise ConfigError(f"cannot read {item!r}", "--gain",
                                  "write BEFORE=AFTER@HARNESS, e.g. "
                                  "bundled=hf:sft-html/final@html-commands")
            gain_pairs.append((policy(before, "--gain"), policy(after, "--gain"), harness_name))
        cells = []
        for item in _split(compare):
            name, at, harness_name = item.rpartition("@")
            if not at or not name or not harness_name:
                raise ConfigError(f"cannot read {item!r}", "--compare",
                                  "write POLICY@HARNESS, e.g. bundled@som-tools")
            cells.append((policy(name, "--compare"), harness_name))
        if len(cells) == 1:
            raise ConfigError("--compare names one cell", "--compare",
                              "name at least two POLICY@HARNESS cells")
        pairs = [(a, b) for i, a in enumerate(cells) for b in cells[i + 1:]]
        console.print(summary_table(rows, title="Success by harness × policy"))
        console.print(ceiling_mismatch_table(rows, train_harness or None))
        console.print(conflation_table(rows, train_harness or None, pairs or None))
        for rid in run_ids:  # sealed runs: every cell of the manifest, with its hash
            _print_sealed(store, rid, [r for r in rows if r["run_id"] == rid])
        target = Path(out or Path(store.path).parent / f"report-{'+'.join(run_ids)}.html")
        build_report(store, run_ids, target, train_harness=train_harness or None,
                     gain_pairs=gain_pairs or None, compare=pairs or None)
    console.print(f"[bold]report:[/bold] {target.resolve()}")


def _policy_resolver(rows: list[dict], runs: list[dict]) -> Callable[[str, str], str]:
    """Map a policy named on the command line (an id, or the spec it was run with) to its id."""
    ids = sorted({str(r["policy"]) for r in rows if r.get("policy")})
    specs: dict[str, str] = {}
    for info in runs:
        specs.update((info.get("config") or {}).get("policy_ids") or {})

    def resolve(name: str, option: str) -> str:
        if name in ids:
            return name
        if name in specs and specs[name] in ids:
            return specs[name]
        raise ConfigError(f"no policy {name!r} in these runs", option,
                          f"name one of: {', '.join(ids)}")
    return resolve


# -- tasks -----------------------------------------------------------------------------------
tasks_app = typer.Typer(help="List a suite's tasks; import task directories.")
app.add_typer(tasks_app, name="tasks")


@tasks_app.callback(invoke_without_command=True)
def tasks_cmd(ctx: typer.Context,
              suite: Annotated[str, typer.Option(help="Suite name.")] = "miniwob") -> None:
    """List a suite's tasks, what they require, and which have an expert.

    [bold]Example[/bold]:  tackroom tasks --suite toy
    """
    if ctx.invoked_subcommand is not None:
        return
    from tackroom.suites import get_suite

    s = get_suite(suite)
    table = Table(title=f"Tasks in {suite}", title_justify="left")
    for col in ("task", "requires", "expert", "description"):
        table.add_column(col)
    for t in s.tasks():
        table.add_row(t.id, ",".join(sorted(t.requires)), "yes" if t.has_expert else "",
                      t.description)
    console.print(table)


@tasks_app.command("import")
def tasks_import(directory: Annotated[Path, typer.Argument(
        help="A Harbor or Terminal-Bench task directory, or a folder of them.")]) -> None:
    """Import terminal tasks into $TACKROOM_TASKS (default ./tackroom-tasks).

    Tasks that need Docker or the network are skipped, each with its reason.

    [bold]Example[/bold]:  tackroom tasks import ~/terminal-bench/tasks
    """
    from tackroom.suites.terminal import BUILTIN
    from tackroom.suites.terminal.importer import import_tasks, task_store

    builtin = frozenset(p.name for p in BUILTIN.iterdir() if p.is_dir())
    results = import_tasks(directory, builtin=builtin)
    for r in results:
        if r.imported:
            console.print(f"[green]imported[/green] {r.id}")
        else:
            console.print(f"[yellow]skipped[/yellow]  {r.id}: {escape(r.reason)}")
    n = sum(r.imported for r in results)
    console.print(f"{n} of {len(results)} task(s) imported into {task_store()}; run them with "
                  "tackroom eval --suite terminal --tasks ID")


# -- harness ---------------------------------------------------------------------------------
@harness_app.command("list")
def harness_list() -> None:
    """List the harnesses on the search path ($TACKROOM_HARNESS_PATH, ./harnesses, built-in)."""
    from tackroom.harness.spec import list_harnesses, load_harness

    table = Table(title="Harnesses", title_justify="left")
    for col in ("name", "hash", "renderer", "interface", "parser", "per turn", "on error",
                "file"):
        table.add_column(col)
    for name, path in list_harnesses().items():
        try:
            h = load_harness(str(path))
        except TackroomError as e:
            table.add_row(name, "[red]invalid[/red]", escape(e.what), "", "", "", "", str(path))
            continue
        table.add_row(h.name, h.hash, h.observation["renderer"], h.actions["interface"],
                      h.actions["parser"], str(h.loop["actions_per_turn"]),
                      h.loop["on_action_error"], str(path))
    console.print(table)


@harness_app.command("show")
def harness_show(name: Annotated[str, typer.Argument(help="Harness name or path.")]) -> None:
    """Print a harness fully resolved (after extends), with its hash and system prompt."""
    from tackroom.harness.session import HarnessSession
    from tackroom.harness.spec import load_harness

    h = load_harness(name)
    console.print(f"[bold]{h.name}[/bold]@{h.hash}  ({h.source})")
    if len(h.extends) > 1:
        console.print("extends: " + " -> ".join(Path(p).stem for p in h.extends))
    console.print_json(json.dumps(h.content()))
    console.rule("system prompt the model sees")
    console.print(HarnessSession(h, "").messages()[0]["content"], markup=False)


@harness_app.command("diff")
def harness_diff(a: Annotated[str, typer.Argument(help="First harness.")],
                 b: Annotated[str, typer.Argument(help="Second harness.")]) -> None:
    """Show which slots differ between two harnesses (after extends)."""
    from tackroom.harness.spec import load_harness

    ha, hb = load_harness(a), load_harness(b)
    table = Table(title=f"{ha.ident} vs {hb.ident}", title_justify="left")
    for col in ("slot", ha.name, hb.name):
        table.add_column(col, overflow="fold")
    ca, cb = ha.content(), hb.content()
    n = 0
    for slot in ca:
        va, vb = ca[slot], cb[slot]
        if isinstance(va, dict):
            for k in sorted(set(va) | set(vb)):
                if va.get(k) != vb.get(k):
                    table.add_row(f"{slot}.{k}", repr(va.get(k)), repr(vb.get(k)))
                    n += 1
        elif va != vb:
            table.add_row(slot, repr(va), repr(vb))
            n += 1
    console.print(table if n else "identical content (same hash)")


@harness_app.command("validate")
def harness_validate(paths: Annotated[list[str], typer.Argument(
        help="Harness files or names.")]) -> None:
    """Check harness files; exit 1 if any is invalid.

    [bold]Example[/bold]:  tackroom harness validate harnesses/*.toml
    """
    from tackroom.harness.spec import load_harness

    bad = 0
    for p in paths:
        try:
            h = load_harness(p)
            console.print(f"[green]ok[/green] {p}: {h.ident}")
        except TackroomError as e:
            bad += 1
            err_console.print(f"[red]invalid[/red] {escape(e.line())}", soft_wrap=True)
    if bad:
        raise typer.Exit(1)


@model_app.command("init")
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


@app.command("sft")
def sft_cmd(
    model_dir: Annotated[str, typer.Argument(help="The model to start from (a local directory).")],
    out: Annotated[str, typer.Option(help="Directory for checkpoints and the final model.")],
    db: DbOpt = DEFAULT_DB,
    suite: Annotated[str | None, typer.Option(help="Only episodes of this suite.")] = None,
    harness: Annotated[list[str] | None, typer.Option(
        help="Only episodes under these harnesses (comma-separated or repeated).")] = None,
    tasks: Annotated[list[str] | None, typer.Option(help="Task ids or globs.")] = None,
    outcome: Annotated[list[str] | None, typer.Option(
        help="Episode outcomes to learn from.")] = None,
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
    from tackroom.train.engine import LoraSettings, OptimSettings
    from tackroom.train.sft import Selection, SFTConfig, run_sft

    selection = Selection(suite=suite, harnesses=tuple(_split(harness)),
                          tasks=tuple(_split(tasks)),
                          outcomes=tuple(_split(outcome)) or ("success",),
                          runs=tuple(_split(run)), policies=tuple(_split(policy)))
    config = SFTConfig(
        model=model_dir, out=out, selection=selection,
        lora=LoraSettings(rank=lora_rank, alpha=lora_alpha) if lora or adapter else None,
        optim=OptimSettings(lr=lr, warmup_steps=warmup, grad_accum=grad_accum),
        epochs=epochs, batch_size=batch_size, max_length=max_length,
        checkpoint_every=checkpoint_every, seed=seed, device=device, threads=threads,
        save_dtype=save_dtype, init_adapter=adapter)
    store = _open_store(db)
    run_id = "sft-" + _new_run_id()
    with Progress(TextColumn("[bold]sft"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), TextColumn("eta"),
                  TimeRemainingColumn(), console=console) as progress:
        bar = progress.add_task("steps", total=None, stats="preparing examples…")

        def on_step(step: int, total: int, m: dict[str, float]) -> None:
            stats = f"loss {m['loss']:.3f} · acc {m['token_accuracy']:.0%}"
            progress.update(bar, total=total, completed=step, stats=stats)
            if not console.is_terminal and (step % max(1, total // 20) == 0 or step == total):
                # Logs and CI have no live bar: a line every 5% instead.
                console.print(f"step {step}/{total} · {stats} · {m['seconds']:.0f} s")

        result = run_sft(config, store, run_id, resume=resume, on_step=on_step)
    store.close()
    if result.resumed_from is not None:
        console.print(f"resumed from step {result.resumed_from}")
    skipped = ", ".join(f"{k} {v}" for k, v in result.skipped.items()) or "none"
    console.print(f"[bold]trained:[/bold] {result.examples} examples, {result.steps} steps, "
                  f"final loss {result.last.get('loss', float('nan')):.4f} "
                  f"(skipped turns: {skipped}); run {run_id} in {db}")
    spec = f"hf:{model_dir}:{result.final}" if config.lora else f"hf:{result.final}"
    console.print(f"[bold]model:[/bold] {result.final}\nevaluate it: tackroom eval "
                  f"--policy {spec} ...")


@app.command("train")
def train_cmd(
    overrides: Annotated[list[str] | None, typer.Argument(
        help="Settings section.key=value (TOML values), applied after --config.")] = None,
    config: Annotated[str | None, typer.Option(
        "--config", "-c", help="A TOML file of RLConfig sections (docs/training.md).")] = None,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue from the newest checkpoint in run.out_dir.")] = False,
    ray: Annotated[bool, typer.Option(
        "--ray", help="Online rollouts on Ray actors (a local cluster sized to this "
        "machine).")] = False,
    ray_address: Annotated[str | None, typer.Option(
        help="Join this Ray cluster instead (auto, HOST:6379, ray://HOST:10001); implies "
        "--ray.")] = None,
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
    from tackroom.train.config import RLConfig
    from tackroom.train.rl import run_rl

    cfg = RLConfig.from_toml(config, overrides or [])
    if dry_run:
        console.print(cfg.to_toml(resolved=True), markup=False, highlight=False)
        return
    store = _open_store(db)
    run_id = "train-" + _new_run_id()
    with Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), TextColumn("eta"),
                  TimeRemainingColumn(), console=console) as progress:
        bar = progress.add_task("steps", total=cfg.steps, stats="first rollouts…")

        def on_step(step: int, total: int, m: dict[str, float]) -> None:
            stats = (f"reward {m.get('reward_mean', float('nan')):.2f} · success "
                     f"{m.get('success', 0.0):.0%} · loss {m.get('loss', float('nan')):.3f}")
            if "eval/success" in m:
                stats += f" · eval {m['eval/success']:.0%}"
            progress.update(bar, total=total, completed=step, stats=stats)

        try:
            result = run_rl(cfg, store, run_id, resume=resume, ray=ray,
                            ray_address=ray_address, threads=threads, on_step=on_step,
                            on_note=lambda line: progress.console.print(escape(line)))
        finally:
            store.close()
    console.print(f"[bold]trained:[/bold] {result.steps} steps ({cfg.algorithm}, "
                  f"{'LoRA' if cfg.lora else 'full'}); run {result.run_id} in {db}")
    if result.eval:
        parts = ", ".join(f"{k.removeprefix('eval/success/')} {v:.0%}"
                          for k, v in result.eval.items() if k.startswith("eval/success/"))
        console.print(f"[bold]evaluation[/bold] (greedy, held-out seeds): "
                      f"{result.eval.get('eval/success', 0.0):.0%} ({parts})")
    spec = f"hf:{result.base_model}:{result.final}" if cfg.lora else f"hf:{result.final}"
    console.print(f"[bold]model:[/bold] {result.final} (version {result.version})\n"
                  f"evaluate it: tackroom eval --policy {spec} ...")


@app.command("export-groups")
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
    from tackroom.train.config import RLConfig
    from tackroom.train.export import FORMATS, export_groups

    cfg = RLConfig.from_toml(config, set_ or [])
    with _open_store(db) as store:
        run_ids = [store.latest_run_id() or "" if r == "latest" else r for r in _split(runs)]
        result = export_groups(store, out, cfg, runs=run_ids, suite=suite or "",
                               harnesses=_split(harness), tasks=_split(tasks),
                               formats=_split(fmt) or list(FORMATS))
    console.print(f"[bold]exported[/bold] {result.rows} turns of {result.episodes} episodes "
                  f"in {result.groups} groups (grouping.group = {cfg.group!r}):")
    for name, path in result.files.items():
        console.print(f"  {name}: {path}")


@app.command("serve")
def serve_cmd(
    model_dir: Annotated[str, typer.Argument(help="A local model directory (save_pretrained).")],
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8000,
    api_key: Annotated[str | None, typer.Option(
        envvar="TACKROOM_SERVE_API_KEY", help="Require `Authorization: Bearer KEY`.")] = None,
    adapter: Annotated[list[str] | None, typer.Option(
        help="NAME=DIR: a LoRA adapter served as model NAME. Repeatable.")] = None,
    max_batch: Annotated[int, typer.Option(help="Requests per generate call.")] = 8,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads.")] = None,
) -> None:
    """Serve a local model over an OpenAI-compatible API (chat completions, tools, streaming,
    log-probs, token ids), so it is evaluated exactly like a vLLM server.

    [bold]Example[/bold]

      tackroom serve models/tiny --port 8000 &

      tackroom eval --suite toy --policy openai:tiny --base-url http://127.0.0.1:8000/v1
    """
    from tackroom.serve import serve_main

    adapters: dict[str, str] = {}
    for item in adapter or []:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"cannot read {item!r}", "--adapter", "write NAME=DIR")
        adapters[name] = path
    extra: dict[str, Any] = {"threads": threads} if threads else {}
    serve_main(model_dir, host=host, port=port, api_key=api_key, adapters=adapters or None,
               max_batch=max_batch, **extra)


def main() -> None:
    """Entry point: user errors print one line and exit 2, never a traceback."""
    try:
        app()
    except TackroomError as e:
        err_console.print(f"[bold red]error:[/bold red] {escape(e.line())}", highlight=False,
                          soft_wrap=True, markup=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/yellow]")
        sys.exit(130)


if __name__ == "__main__":
    main()
