"""Sandboxes: where a task's commands run, isolated, within limits.

The contract (:mod:`tackroom.sandbox.contract`) is small: a :class:`Provider` says whether
it can run here and may start a task's own image; a :class:`Sandbox` is started when made,
runs commands (``run``, ``popen``), copies directories in and out, holds its
:class:`Limits`, and is closed once. Two providers are registered under the kind
``"sandbox"``:

* ``bubblewrap`` (:mod:`tackroom.sandbox.bubblewrap`, the default): ``bwrap`` over this
  machine's system, or over a task's image that :mod:`tackroom.images` built;
* ``docker`` (:mod:`tackroom.sandbox.docker`): ``docker build`` and ``docker exec``.

:func:`provider` is the one place a provider is chosen (``--sandbox NAME``). The sandbox
runs the root file systems :mod:`tackroom.images` builds; ``images`` never imports this
package.
"""

from __future__ import annotations

from tackroom.core.registry import get, names
from tackroom.sandbox.bubblewrap import (
    BUBBLEWRAP,
    SANDBOX_PATH,
    TASK_PATH,
    BubblewrapSandbox,
    require_sandbox,
    run_agent,
    sandbox_available,
)
from tackroom.sandbox.contract import (
    CommandResult,
    Container,
    Limits,
    Provider,
    Sandbox,
    SandboxUnavailable,
)
from tackroom.sandbox.process import OUTPUT_CAP, copy_tree, kill, limit_in_output, special_files

#: The provider used when none is named.
DEFAULT = BUBBLEWRAP.name


def provider(name: str = DEFAULT, *, where: str = "--sandbox") -> Provider:
    """The sandbox provider registered as ``name``; one clear error naming the others if none.

    The one place a provider is chosen: suites, ``tasks import`` and the CLI ask here.
    """
    return get("sandbox", name, where=where)


def providers() -> list[str]:
    """The names of the registered sandbox providers (``--sandbox`` choices)."""
    return names("sandbox")


__all__ = ["DEFAULT", "OUTPUT_CAP", "SANDBOX_PATH", "TASK_PATH", "BubblewrapSandbox",
           "CommandResult", "Container", "Limits", "Provider", "Sandbox", "SandboxUnavailable",
           "copy_tree", "kill", "limit_in_output", "provider", "providers", "require_sandbox",
           "run_agent", "sandbox_available", "special_files"]
