"""The ``tackroom`` command line: a thin layer over :mod:`tackroom.app`.

Each command group lives in a small module that only parses arguments and
prints; the work is done by the Python API (``tackroom.evaluate`` …):

- :mod:`.evaluate` — ``eval`` (also ``--resume``, ``--sealed``, ``--dry-run``, ``--ray``), ``seal``
- :mod:`.records` — ``runs``, ``show``, ``export``
- :mod:`.report` — ``report``
- :mod:`.harness` — ``harness list|show|diff|validate``, ``tasks`` and ``tasks import``
- :mod:`.listing` — ``list [KIND]`` (what the registry holds)
- :mod:`.training` — ``model init``, ``sft``, ``train``, ``export-groups``
- :mod:`.serve` — ``serve``
- :mod:`.optimize` — ``optimize``, ``audit``, ``self-hpo``
- :mod:`.delegate` — ``delegate fit|bench|hash``

User errors (:class:`~tackroom.core.errors.TackroomError`, and click's usage errors) print
one line and exit 2.

Every run of ``tackroom`` imports all these modules (typer builds every command to parse one
command line), so they import at module level only what parsing needs: each command imports
the API it calls inside its function, and a help text that lists a registry kind's names is
made when its help page is shown (:func:`.common.kind_help`). ``tackroom --help`` then costs
no DuckDB, Arrow, browser or trainer import, and ``tackroom eval --suite toy`` no browser.
"""

from __future__ import annotations

import sys

import typer
from rich.markup import escape

from tackroom.cli import (
    delegate,
    evaluate,
    harness,
    listing,
    optimize,
    records,
    report,
    serve,
    training,
)
from tackroom.cli.common import HelpCommand, HelpGroup, err_console
from tackroom.core import cancel
from tackroom.core.errors import ConfigError, TackroomError

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
        "  tackroom harness list\n\n  tackroom train -c train.toml"
    ),
)
app.command("eval", cls=HelpCommand)(evaluate.eval_cmd)
app.command("seal", cls=HelpCommand)(evaluate.seal_cmd)
app.command("runs", cls=HelpCommand)(records.runs_cmd)
app.command("show", cls=HelpCommand)(records.show_cmd)
app.command("export", cls=HelpCommand)(records.export_cmd)
app.command("report", cls=HelpCommand)(report.report_cmd)
app.command("list", cls=HelpCommand)(listing.list_cmd)

tasks_app = typer.Typer(help="List a suite's tasks; import task directories.", cls=HelpGroup)
tasks_app.callback(invoke_without_command=True)(harness.tasks_cmd)
tasks_app.command("import", cls=HelpCommand)(harness.tasks_import)
app.add_typer(tasks_app, name="tasks")

harness_app = typer.Typer(help="Inspect and check harness files.", no_args_is_help=True)
harness_app.command("list", cls=HelpCommand)(harness.harness_list)
harness_app.command("show", cls=HelpCommand)(harness.harness_show)
harness_app.command("diff", cls=HelpCommand)(harness.harness_diff)
harness_app.command("validate", cls=HelpCommand)(harness.harness_validate)
app.add_typer(harness_app, name="harness")

model_app = typer.Typer(help="Build local models (no network, no model hub).",
                        no_args_is_help=True)
model_app.command("init", cls=HelpCommand)(training.model_init)
app.add_typer(model_app, name="model")
app.command("sft", cls=HelpCommand)(training.sft_cmd)
app.command("train", cls=HelpCommand)(training.train_cmd)
app.command("export-groups", cls=HelpCommand)(training.export_groups_cmd)
app.command("serve", cls=HelpCommand)(serve.serve_cmd)
app.command("optimize", cls=HelpCommand)(optimize.optimize_cmd)
app.command("audit", cls=HelpCommand)(optimize.audit_cmd)
app.command("self-hpo", cls=HelpCommand)(optimize.self_hpo_cmd)

delegate_app = typer.Typer(help="Decision models that take over some of the LLM's choices.",
                           no_args_is_help=True)
delegate_app.command("fit", cls=HelpCommand)(delegate.fit_cmd)
delegate_app.command("bench", cls=HelpCommand)(delegate.bench_cmd)
delegate_app.command("hash", cls=HelpCommand)(delegate.hash_cmd)
app.add_typer(delegate_app, name="delegate")


def _usage_error(e: typer.TyperException) -> ConfigError:
    """A command-line mistake click found (unknown option, a value of the wrong type, a
    missing argument) as the one-line error every other user error is."""
    ctx = getattr(e, "ctx", None)
    path = ctx.command_path if ctx is not None else "tackroom"
    return ConfigError(e.format_message(), path,  # type: ignore[attr-defined]
                       f"see `{path} --help`")


def main() -> None:
    """Entry point: user errors print one line and exit 2, never a traceback.

    That includes what click finds while parsing the command line (an unknown option, a
    value of the wrong type, a missing argument): ``error: tackroom eval: No such option:
    --bogus — see `tackroom eval --help```, not click's usage box.
    Ctrl-C exits 130, SIGTERM 143 and SIGHUP 129, each after the run in progress is
    recorded as interrupted (``tackroom eval --resume RUN`` finishes it): the three go
    through :mod:`tackroom.core.cancel`, whatever SIGINT's inherited disposition (a
    script's ``tackroom eval … &`` starts with SIGINT ignored, and SIGTERM still stops it).
    """
    cancel.install()
    code = 0
    try:
        try:
            # Not standalone: click's errors come here instead of being printed as a
            # usage box; typer.Exit(n) and --help come back as the return value.
            rv = app(standalone_mode=False)
            code = rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
        except typer.TyperException as e:  # typer's copy of click's ClickException
            if type(e).__name__ == "NoArgsIsHelpError":  # typer has printed the help
                code = 2
            elif getattr(e, "exit_code", 1) == 2:  # a usage error
                raise _usage_error(e) from None
            else:  # click's other errors: its own message and status
                e.show()  # type: ignore[attr-defined]
                code = e.exit_code  # type: ignore[attr-defined]
        except typer.Abort:
            err_console.print("[red]Aborted.[/red]")
            code = 1
    except TackroomError as e:
        err_console.print(f"[bold red]error:[/bold red] {escape(e.line())}", highlight=False,
                          soft_wrap=True, markup=True)
        code = 2
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/yellow]")
        code = 130
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    stopped_by = cancel.requested()
    if stopped_by is not None and code != 0:
        code = 128 + stopped_by
    sys.exit(code)


__all__ = ["app", "main"]
