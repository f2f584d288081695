"""Optional experiment trackers: Weights & Biases and MLflow, imported only when asked.

Metrics always go to the record store (``train_steps``); ``[run] log_to``
adds trackers. One that is not installed is skipped with one line saying
so — a missing optional package never stops a training run.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from tackroom.core.registry import entry, register


class Tracker(Protocol):
    """Receives each step's metrics."""

    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


# Each tracker registers under kind "tracker" with the package it needs (meta ``module``);
# ``run.log_to`` is validated against these names. A plug-in adds one the same way: a
# class ``cls(run_id, config, project)`` with ``log`` and ``close``.

@register("tracker", "wandb", summary="Weights & Biases (pip install wandb)", module="wandb")
class _Wandb:
    def __init__(self, run_id: str, config: Mapping[str, Any], project: str) -> None:
        import wandb

        self._wandb = wandb
        self._run = wandb.init(project=project, name=run_id, id=run_id, resume="allow",
                               config=dict(config))

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self._run.log(dict(metrics), step=step)

    def close(self) -> None:
        self._run.finish()


@register("tracker", "mlflow", summary="MLflow (pip install mlflow)", module="mlflow")
class _Mlflow:
    def __init__(self, run_id: str, config: Mapping[str, Any], project: str) -> None:
        import mlflow

        self._mlflow = mlflow
        mlflow.set_experiment(project)
        self._run = mlflow.start_run(run_name=run_id)
        flat = {f"{s}.{k}": v for s, items in config.items() if isinstance(items, Mapping)
                for k, v in items.items()}
        mlflow.log_params({k: str(v)[:250] for k, v in flat.items()})

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        # MLflow metric names may not contain some characters our harness names can.
        self._mlflow.log_metrics({k.replace("@", "_"): float(v) for k, v in metrics.items()},
                                 step=step)

    def close(self) -> None:
        self._mlflow.end_run()


def make_trackers(names: Sequence[str], run_id: str, config: Mapping[str, Any], *,
                  project: str = "tackroom") -> tuple[list[Tracker], list[str]]:
    """Trackers for ``names`` (registered trackers: ``wandb``, ``mlflow`` …) and a note for
    each one skipped."""
    trackers: list[Tracker] = []
    notes: list[str] = []
    for name in names:
        found = entry("tracker", name, where="run.log_to")
        cls, module = found.obj, found.meta.get("module")
        if module and importlib.util.find_spec(module) is None:
            notes.append(f"run.log_to: {name} is not installed; metrics go to the record "
                         f"store only (pip install {module})")
            continue
        try:
            trackers.append(cls(run_id, config, project))
        except Exception as e:  # noqa: BLE001 - a tracker that cannot start is one line
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
            notes.append(f"run.log_to: {name} did not start ({first}); metrics go to the "
                         "record store only")
    return trackers, notes
