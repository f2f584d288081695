"""The application layer: the Python API that the CLI, the examples, the benchmarks and the
trainer's evaluations all use. Re-exported from :mod:`tackroom` (``tackroom.evaluate`` …).

======================  ==========================================================
``evaluate``            run a grid of episodes and record it → :class:`Run`
``resume``              finish a recorded run (missing and infra-failed episodes)
``plan``                the grid and policies of a run, recording nothing (dry run)
``seal``                write a sealed manifest: every cell fixed and hashed
``evaluate_sealed``     run every cell of a manifest
``report``              the HTML report and terminal tables of some runs
``sft``                 supervised fine-tuning on recorded episodes
``train``               policy-gradient RL across harnesses
``Run``                 a recorded run, read back from the store
======================  ==========================================================
"""

from tackroom.app.evaluation import (
    RunPlan,
    RunStart,
    evaluate,
    evaluate_sealed,
    execute,
    parse_seeds,
    plan,
    resume,
)
from tackroom.app.reporting import Report, report
from tackroom.app.runs import Run, new_run_id, resolve_run
from tackroom.app.sealing import seal
from tackroom.app.training import sft, train

__all__ = ["Report", "Run", "RunPlan", "RunStart", "evaluate", "evaluate_sealed", "execute",
           "new_run_id", "parse_seeds", "plan", "report", "resolve_run", "resume", "seal", "sft",
           "train"]
