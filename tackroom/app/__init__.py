"""The application layer: the Python API that the CLI, the examples, the benchmarks and the
trainer's evaluations all use. Re-exported from :mod:`tackroom` (``tackroom.evaluate`` …).

======================  ==========================================================
``evaluate``            run a grid of episodes and record it → :class:`Run`
``resume``              finish a recorded run (missing and infra-failed episodes)
``plan``                the grid and policies of a run, recording nothing (dry run)
``seal``                write a sealed manifest: every cell fixed and hashed
``evaluate_sealed``     run every cell of a manifest
``report``              the HTML report and terminal tables of some runs
``list_runs``           the newest recorded runs, with their counts
``read_run``            a run's episode rows
``read_episode``        one recorded episode with its turns
``export_run``          a run's episodes as JSONL, Parquet or ATIF files
``diff_harnesses``      the slots in which two harnesses differ
``list_tasks``          a suite's tasks
``import_tasks``        import Harbor / Terminal-Bench task directories
``sft``                 supervised fine-tuning on recorded episodes
``train``               policy-gradient RL across harnesses
``Run``                 a recorded run, read back from the store
======================  ==========================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tackroom.core.lazy import lazy_attribute

if TYPE_CHECKING:  # for type checkers; at run time see __getattr__
    from tackroom.app.evaluation import (
        RunPlan,
        RunStart,
        evaluate,
        evaluate_sealed,
        execute,
        parse_seeds,
        plan,
        plan_resume,
        plan_sealed,
        resume,
    )
    from tackroom.app.harnesses import (
        HarnessDiff,
        SlotDiff,
        describe_harness,
        diff_harnesses,
        harness_catalogue,
        validate_harnesses,
    )
    from tackroom.app.records import (
        Export,
        RunEpisodes,
        export_run,
        list_runs,
        read_episode,
        read_run,
    )
    from tackroom.app.reporting import Report, report
    from tackroom.app.runs import Run, new_run_id, resolve_run
    from tackroom.app.sealing import inexpressible_pairs, seal
    from tackroom.app.tasks import TaskImport, import_tasks, list_tasks
    from tackroom.app.training import sft, train

__all__ = ["Export", "HarnessDiff", "Report", "Run", "RunEpisodes", "RunPlan", "RunStart",
           "SlotDiff", "TaskImport", "describe_harness", "diff_harnesses", "harness_catalogue",
           "validate_harnesses", "evaluate", "evaluate_sealed", "execute",
           "export_run", "import_tasks", "inexpressible_pairs", "list_runs", "list_tasks",
           "new_run_id", "parse_seeds", "plan", "plan_resume", "plan_sealed", "read_episode",
           "read_run", "report", "resolve_run", "resume", "seal", "sft", "train"]


#: Name → the module it comes from. Loaded on first use: a command that records a run need
#: not import the trainer, nor one that lists runs the runner.
_LAZY = {
    "RunPlan": "tackroom.app.evaluation",
    "RunStart": "tackroom.app.evaluation",
    "evaluate": "tackroom.app.evaluation",
    "evaluate_sealed": "tackroom.app.evaluation",
    "execute": "tackroom.app.evaluation",
    "parse_seeds": "tackroom.app.evaluation",
    "plan": "tackroom.app.evaluation",
    "plan_resume": "tackroom.app.evaluation",
    "plan_sealed": "tackroom.app.evaluation",
    "resume": "tackroom.app.evaluation",
    "HarnessDiff": "tackroom.app.harnesses",
    "SlotDiff": "tackroom.app.harnesses",
    "describe_harness": "tackroom.app.harnesses",
    "diff_harnesses": "tackroom.app.harnesses",
    "harness_catalogue": "tackroom.app.harnesses",
    "validate_harnesses": "tackroom.app.harnesses",
    "Export": "tackroom.app.records",
    "RunEpisodes": "tackroom.app.records",
    "export_run": "tackroom.app.records",
    "list_runs": "tackroom.app.records",
    "read_episode": "tackroom.app.records",
    "read_run": "tackroom.app.records",
    "Report": "tackroom.app.reporting",
    "report": "tackroom.app.reporting",
    "Run": "tackroom.app.runs",
    "new_run_id": "tackroom.app.runs",
    "resolve_run": "tackroom.app.runs",
    "inexpressible_pairs": "tackroom.app.sealing",
    "seal": "tackroom.app.sealing",
    "TaskImport": "tackroom.app.tasks",
    "import_tasks": "tackroom.app.tasks",
    "list_tasks": "tackroom.app.tasks",
    "sft": "tackroom.app.training",
    "train": "tackroom.app.training",
}


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, _LAZY, name)
