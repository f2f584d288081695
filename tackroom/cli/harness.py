"""``tackroom harness …`` and ``tackroom tasks …``: harness files and suites' tasks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from tackroom.cli.common import console, err_console, kind_help

if TYPE_CHECKING:
    from tackroom.suites.terminal.importer import ImportResult


def tasks_cmd(ctx: typer.Context,
              suite: Annotated[str, typer.Option(help=kind_help("suite", "Suite: {}."))] = "miniwob") -> None:
    """List a suite's tasks, what they require, and which have an expert.

    [bold]Example[/bold]:  tackroom tasks --suite toy
    """
    if ctx.invoked_subcommand is not None:
        return
    from tackroom.app.tasks import list_tasks

    tasks = list_tasks(suite)
    table = Table(title=f"Tasks in {escape(suite)}", title_justify="left")
    for col in ("task", "requires", "expert", "description"):
        table.add_column(col)
    for t in tasks:
        table.add_row(escape(t.id), escape(",".join(sorted(t.requires))),
                      "yes" if t.has_expert else "", escape(t.description))
    console.print(table)


def tasks_import(directory: Annotated[Path, typer.Argument(
        help="A Harbor or Terminal-Bench task directory, or a folder of them.")],
        check: Annotated[bool, typer.Option(
            "--check/--no-check", help="Build each task's environment and run its oracle "
            "before keeping it: its tests must fail untouched and pass after its solution. "
            "Without it, environments are built on first use.")] = True,
        sandbox: Annotated[str, typer.Option(
            help="'bubblewrap' (build without Docker) or 'docker' (build and check with a "
            "Docker daemon).")] = "bubblewrap") -> None:
    """Import terminal tasks into $TACKROOM_TASKS (default ./tackroom-tasks).

    A task with a Dockerfile gets its environment built from it, without Docker (a
    Debian root file system for its base image, then its steps, with network only to
    the package registries; cached by content in ~/.cache/tackroom/images). Each task
    is then checked in the sandbox (tests fail untouched, pass after the reference
    solution; a command the sandbox lacks is named). Tasks that cannot run here, that
    fail the check, and folders that are not tasks are listed as skipped, each with
    its reason.

    [bold]Examples[/bold]

      tackroom tasks import ~/terminal-bench/tasks

      tackroom tasks import ~/harbor-tasks/my-task --no-check

      tackroom tasks import ~/terminal-bench/tasks --sandbox docker
    """
    import contextlib

    from tackroom.app.tasks import import_tasks
    from tackroom.cli.common import Bar, progress_bar

    done: list[str] = []
    bar: Bar | None = None
    with contextlib.ExitStack() as stack:
        def found(n: int) -> None:
            nonlocal bar
            bar = stack.enter_context(progress_bar("tasks", n, enabled=n > 1 or check))

        def update(stats: str) -> None:
            if bar is not None:
                bar.update(len(done), stats=stats)

        def finished(r: ImportResult) -> None:
            done.append(r.id)
            update(f"{r.id}: {'imported' if r.imported else 'skipped'}")

        imported = import_tasks(directory, check=check, sandbox=sandbox, on_folders=found,
                                on_start=lambda task_id: update(f"{task_id}: importing"),
                                progress=lambda task_id, message: update(f"{task_id}: {message}"),
                                on_task=finished)
    results = imported.results
    table = Table(title=f"Imported from {escape(str(directory))}", title_justify="left")
    for col in ("task", "imported", "environment", "untouched", "oracle", "reason / build log"):
        table.add_column(col, overflow="fold")
    for r in results:
        # A kept, checked task: its tests failed untouched and passed after its solution.
        untouched, oracle = (("fails", "passes" if r.has_oracle else "none")
                             if r.checked else ("not run", "not run")) if r.imported else ("", "")
        note = escape(r.reason) if not r.imported else escape(
            "\n".join([*r.notes, *([str(r.log)] if r.log else [])]))
        table.add_row(escape(r.id), "[green]yes[/green]" if r.imported else "[yellow]skipped[/]",
                      escape(r.environment or ("host system" if r.imported else "")), untouched,
                      oracle, note)
    console.print(table)
    console.print(f"{imported.n_imported} of {len(results)} folder(s) imported into "
                  f"{imported.store}; run them with tackroom eval --suite terminal --tasks ID",
                  markup=False)


def harness_list() -> None:
    """List the harnesses on the search path ($TACKROOM_HARNESS_PATH, ./harnesses, built-in)."""
    from tackroom.app.harnesses import harness_catalogue

    cols = ("renderer", "interface", "parser", "per turn", "on error")
    table = Table(title="Harnesses", title_justify="left")
    for col in ("name", "hash", *cols, "file"):
        table.add_column(col)
    for entry in harness_catalogue():
        if entry.spec is None:
            what = entry.error.what if entry.error is not None else ""
            table.add_row(escape(entry.name), "[red]invalid[/red]", escape(what), "", "", "", "",
                          escape(str(entry.path)))
            continue
        summary = entry.summary
        row = (entry.spec.name, entry.spec.hash, *(summary[c] for c in cols), str(entry.path))
        table.add_row(*(escape(str(v)) for v in row))
    console.print(table)


def harness_show(name: Annotated[str, typer.Argument(help="Harness name or path.")]) -> None:
    """Print a harness fully resolved (after extends), with its hash and system prompt."""
    from tackroom.app.harnesses import describe_harness
    from tackroom.harness.spec import AgentHarness

    view = describe_harness(name)
    h = view.spec
    console.print(f"[bold]{escape(h.name)}[/bold]@{h.hash}  ({escape(h.source)})")
    if len(h.extends) > 1:
        console.print("extends: " + " -> ".join(Path(p).stem for p in h.extends), markup=False)
    if isinstance(h, AgentHarness):  # the CLI brings its own prompt, observations and parser
        console.print_json(json.dumps({"agent": h.agent, "budget": h.budget}))
        console.print(f"an agent harness: {h.agent['cli']} {h.agent['version']} runs "
                      "unmodified in the task's sandbox; its prompts are its own",
                      markup=False)
        return
    console.print_json(json.dumps(h.content()))
    console.rule("system prompt the model sees")
    console.print(view.system_prompt or "", markup=False, emoji=False, highlight=False)


def harness_diff(a: Annotated[str, typer.Argument(help="First harness.")],
                 b: Annotated[str, typer.Argument(help="Second harness.")]) -> None:
    """Show which slots differ between two harnesses (after extends)."""
    from tackroom.app.harnesses import diff_harnesses

    diff = diff_harnesses(a, b)
    if diff.identical:
        console.print("identical content (same hash)")
        return
    table = Table(title=escape(f"{diff.a.ident} vs {diff.b.ident}"), title_justify="left")
    for col in ("slot", diff.a.name, diff.b.name):
        table.add_column(escape(col), overflow="fold")
    for d in diff.slots:
        table.add_row(escape(d.slot), escape(repr(d.a)), escape(repr(d.b)))
    console.print(table)


def harness_validate(paths: Annotated[list[str], typer.Argument(
        help="Harness files or names.")]) -> None:
    """Check harness files; exit 2 if any is invalid (one line per file).

    [bold]Example[/bold]:  tackroom harness validate harnesses/*.toml
    """
    from tackroom.app.harnesses import validate_harnesses

    bad = 0
    for check in validate_harnesses(paths):
        if check.spec is not None:
            console.print(f"[green]ok[/green] {escape(check.path)}: {escape(check.spec.ident)}")
        else:
            bad += 1
            line = check.error.line() if check.error is not None else check.path
            err_console.print(f"[red]invalid[/red] {escape(line)}", soft_wrap=True)
    if bad:
        raise typer.Exit(2)
