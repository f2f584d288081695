"""``tackroom harness …`` and ``tackroom tasks …``: harness files and suites' tasks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from tackroom.cli.common import console, err_console
from tackroom.core.errors import TackroomError
from tackroom.core.registry import choices


def tasks_cmd(ctx: typer.Context,
              suite: Annotated[str, typer.Option(help="Suite: " + choices("suite") + ".")] = "miniwob") -> None:
    """List a suite's tasks, what they require, and which have an expert.

    [bold]Example[/bold]:  tackroom tasks --suite toy
    """
    if ctx.invoked_subcommand is not None:
        return
    from tackroom.suites import get_suite

    s = get_suite(suite)
    table = Table(title=f"Tasks in {escape(suite)}", title_justify="left")
    for col in ("task", "requires", "expert", "description"):
        table.add_column(col)
    for t in s.tasks():
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
    from tackroom.cli.common import progress_bar
    from tackroom.sandbox import provider
    from tackroom.suites.terminal import BUILTIN
    from tackroom.suites.terminal.importer import (
        ImportResult,
        import_tasks,
        task_folders,
        task_store,
    )

    chosen = provider(sandbox)  # an unknown name: one line naming the registered ones
    if chosen.runs_images:
        chosen.require()
    builtin = frozenset(p.name for p in BUILTIN.iterdir() if p.is_dir())
    folders = task_folders(directory)
    done: list[str] = []
    with progress_bar("tasks", len(folders), enabled=len(folders) > 1 or check) as bar:
        def start(task_id: str) -> None:
            bar.update(len(done), stats=f"{task_id}: importing")

        def building(task_id: str, message: str) -> None:
            bar.update(len(done), stats=f"{task_id}: {message}")

        def finished(r: ImportResult) -> None:
            done.append(r.id)
            bar.update(len(done), stats=f"{r.id}: {'imported' if r.imported else 'skipped'}")

        results = import_tasks(directory, builtin=builtin, check=check, on_task=finished,
                               on_start=start, progress=building, sandbox=sandbox)
    table = Table(title=f"Imported from {escape(str(directory))}", title_justify="left")
    for col in ("task", "imported", "environment", "untouched", "oracle", "reason / build log"):
        table.add_column(col, overflow="fold")
    for r in results:
        # A kept, checked task: its tests failed untouched and passed after its solution.
        untouched, oracle = (("fails", "passes" if r.has_oracle else "none")
                             if r.checked else ("not run", "not run")) if r.imported else ("", "")
        note = escape(r.reason) if not r.imported else escape(str(r.log or ""))
        table.add_row(escape(r.id), "[green]yes[/green]" if r.imported else "[yellow]skipped[/]",
                      escape(r.environment or ("host system" if r.imported else "")), untouched,
                      oracle, note)
    console.print(table)
    n = sum(r.imported for r in results)
    console.print(f"{n} of {len(results)} folder(s) imported into {task_store()}; run them "
                  "with tackroom eval --suite terminal --tasks ID", markup=False)


def harness_list() -> None:
    """List the harnesses on the search path ($TACKROOM_HARNESS_PATH, ./harnesses, built-in)."""
    from tackroom.harness.spec import AgentHarness, list_harnesses, load_harness

    table = Table(title="Harnesses", title_justify="left")
    for col in ("name", "hash", "renderer", "interface", "parser", "per turn", "on error",
                "file"):
        table.add_column(col)
    for name, path in list_harnesses().items():
        try:
            h = load_harness(str(path))
        except TackroomError as e:
            table.add_row(escape(name), "[red]invalid[/red]", escape(e.what), "", "", "", "",
                          escape(str(path)))
            continue
        if isinstance(h, AgentHarness):  # a third-party CLI: its own renderer, parser and loop
            row = (h.name, h.hash, "(agent CLI)", f"{h.agent['cli']} {h.agent['version']}",
                   "(its own)", "", "", path)
        else:
            row = (h.name, h.hash, h.observation["renderer"], h.actions["interface"],
                   h.actions["parser"], h.loop["actions_per_turn"], h.loop["on_action_error"],
                   path)
        table.add_row(*(escape(str(v)) for v in row))
    console.print(table)


def harness_show(name: Annotated[str, typer.Argument(help="Harness name or path.")]) -> None:
    """Print a harness fully resolved (after extends), with its hash and system prompt."""
    from tackroom.harness.session import HarnessSession
    from tackroom.harness.spec import AgentHarness, load_harness

    h = load_harness(name)
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
    console.print(HarnessSession(h, "").messages()[0]["content"], markup=False, emoji=False,
                  highlight=False)


def harness_diff(a: Annotated[str, typer.Argument(help="First harness.")],
                 b: Annotated[str, typer.Argument(help="Second harness.")]) -> None:
    """Show which slots differ between two harnesses (after extends)."""
    from tackroom.harness.spec import load_harness

    ha, hb = load_harness(a), load_harness(b)
    table = Table(title=escape(f"{ha.ident} vs {hb.ident}"), title_justify="left")
    for col in ("slot", ha.name, hb.name):
        table.add_column(escape(col), overflow="fold")
    ca, cb = ha.content(), hb.content()
    n = 0
    for slot in list(ca) + [s for s in cb if s not in ca]:
        va, vb = ca.get(slot), cb.get(slot)
        if isinstance(vb, dict) and va is None:
            va = {}
        if isinstance(va, dict):
            vb = vb if isinstance(vb, dict) else {}
            for k in sorted(set(va) | set(vb)):
                if va.get(k) != vb.get(k):
                    table.add_row(escape(f"{slot}.{k}"), escape(repr(va.get(k))),
                                  escape(repr(vb.get(k))))
                    n += 1
        elif va != vb:
            table.add_row(escape(slot), escape(repr(va)), escape(repr(vb)))
            n += 1
    console.print(table if n else "identical content (same hash)")


def harness_validate(paths: Annotated[list[str], typer.Argument(
        help="Harness files or names.")]) -> None:
    """Check harness files; exit 2 if any is invalid (one line per file).

    [bold]Example[/bold]:  tackroom harness validate harnesses/*.toml
    """
    from tackroom.harness.spec import load_harness

    bad = 0
    for p in paths:
        try:
            h = load_harness(p)
            console.print(f"[green]ok[/green] {escape(p)}: {escape(h.ident)}")
        except TackroomError as e:
            bad += 1
            err_console.print(f"[red]invalid[/red] {escape(e.line())}", soft_wrap=True)
    if bad:
        raise typer.Exit(2)
