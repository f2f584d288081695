"""tackroom: evaluate, diagnose and train language-model agents across harnesses.

The Python API (see docs/api.md)::

    import tackroom
    run = tackroom.evaluate(suite="toy", harnesses=["som-tools"], policies=["expert"],
                            seeds=range(3))
    print(run.id, run.success_rate)

Names are loaded on first use, so ``import tackroom`` stays cheap (no DuckDB,
torch or Ray until a function needs them).
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from tackroom.core.lazy import lazy_attribute
from tackroom.core.version import __version__

if TYPE_CHECKING:  # for type checkers and editors; at run time see __getattr__
    from tackroom.app import (
        HarnessDiff,
        Report,
        Run,
        RunPlan,
        describe_harness,
        diff_harnesses,
        evaluate,
        evaluate_sealed,
        export_run,
        harness_catalogue,
        import_tasks,
        list_runs,
        list_tasks,
        plan,
        read_episode,
        read_run,
        report,
        resume,
        seal,
        sft,
        train,
        validate_harnesses,
    )
    from tackroom.app.delegation import bench_delegation, fit_delegation
    from tackroom.app.optimization import audit, optimize
    from tackroom.app.selfhpo import self_hpo
    from tackroom.core.policy import Sampling

_API = ("HarnessDiff", "Report", "Run", "RunPlan", "describe_harness", "diff_harnesses",
        "evaluate", "harness_catalogue", "validate_harnesses",
        "evaluate_sealed", "export_run", "import_tasks", "list_runs", "list_tasks", "plan",
        "read_episode", "read_run", "report", "resume", "seal", "sft", "train")
#: Name → the module it comes from.
_LAZY = {**{name: "tackroom.app" for name in _API}, "Sampling": "tackroom.core.policy",
         "optimize": "tackroom.app.optimization", "audit": "tackroom.app.optimization",
         "self_hpo": "tackroom.app.selfhpo", "fit_delegation": "tackroom.app.delegation",
         "bench_delegation": "tackroom.app.delegation"}

__all__ = ["HarnessDiff", "Report", "Run", "RunPlan", "Sampling", "__version__", "audit",
           "bench_delegation", "describe_harness", "diff_harnesses", "evaluate", "harness_catalogue",
           "validate_harnesses", "evaluate_sealed", "export_run",
           "fit_delegation", "import_tasks", "list_runs", "list_tasks", "read_episode",
           "read_run", "optimize", "plan", "report", "resume", "seal", "self_hpo", "sft",
           "train"]


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, _LAZY, name)


class _Facade(types.ModuleType):
    """The package module: ``tackroom.report``, ``tackroom.train`` and ``tackroom.optimize``
    stay the API functions.

    Importing the subpackage ``tackroom.report`` (``tackroom.train``, ``tackroom.optimize``)
    would bind it as an attribute of this package, hiding the function of the same name;
    the subpackages stay importable by their full names (``from tackroom.report.view import …``).
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Facade
