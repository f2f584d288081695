"""``tackroom ARGS`` run by :func:`tackroom.cli.main` in the test's own process.

For tests that check what a command prints and returns but are not about the process
itself: a ``tackroom`` subprocess pays ~1.5 s of CPU to import the package (and several
more for torch and transformers when it trains), this costs nothing once the test
process has them. Crashes, kills and servers still need a real subprocess.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from unittest import mock

from conftest import CLI_ENV
from typer.testing import CliRunner


@functools.cache
def _command() -> Any:
    """The click command typer builds from ``tackroom.cli.app`` (built once)."""
    import typer.main

    import tackroom.cli

    return typer.main.get_command(tackroom.cli.app)


def run_here(*args: str, cwd: Path | str,
             env_extra: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """What a user would see from ``tackroom ARGS`` in ``cwd``: exit status and both streams.

    An exception ``main`` lets through (a traceback for a user) is raised here. The
    environment is the test's, plus :data:`conftest.CLI_ENV` and ``env_extra``, for the
    duration of the call; the working directory, ``sys.argv`` and the signal handlers are
    put back afterwards.
    """
    import tackroom.cli

    runner = CliRunner()
    old_argv, old_cwd = sys.argv, os.getcwd()
    # main() routes SIGTERM, SIGHUP and SIGINT to tackroom.core.cancel: put them back.
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP,
                                                       signal.SIGINT)}
    sys.argv = ["tackroom", *args]
    try:
        os.chdir(cwd)
        with runner.isolation(env={**CLI_ENV, **(env_extra or {})}) as streams, \
                mock.patch.object(tackroom.cli, "app", _command()):
            try:
                tackroom.cli.main()
                code: Any = 0
            except SystemExit as e:
                code = e.code
            out, err = (s.getvalue().decode("utf-8", "replace") for s in streams[:2])
    finally:
        sys.argv = old_argv
        os.chdir(old_cwd)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return subprocess.CompletedProcess(["tackroom", *args], code, out, err)
