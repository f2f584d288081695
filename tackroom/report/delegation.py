"""Terminal tables of delegation: a decision model's fit, and the ladder that grades it
(``tackroom delegate fit|bench``, docs/delegation.md)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from tackroom.report.plots import pct, pp

__all__ = ["fit_table", "ladder_table"]


def fit_table(result: Any) -> Table:
    """A :class:`~tackroom.delegation.fit.FitResult` per choice type: data, isolated
    accuracy on the held-out points, τ and its precision and coverage."""
    table = Table(title=f"{result.kind} decision model, trained on {result.train_on} states "
                        f"({result.n_train} train / {result.n_val} held-out points)")
    for col in ("choice type", "train", "held out", "isolated accuracy", "τ",
                "precision at τ", "coverage"):
        table.add_column(col, justify="left" if col == "choice type" else "right")
    for t in result.types:
        fit = t.threshold
        table.add_row(t.type, str(t.n_train), str(t.n_val), pct(t.accuracy),
                      f"{result.thresholds[t.type]:.3f}" if t.type in result.thresholds
                      else "never",
                      pct(fit.precision if fit else None),
                      pct(fit.coverage if fit and fit.tau is not None else None))
    return table


def ladder_table(result: Any) -> Table:
    """The ladder (a :class:`~tackroom.delegation.bench.BenchResult`) as a terminal table,
    intervals in brackets."""
    table = Table(title="Delegation ladder: from isolated decisions to full control")
    for col in ("rung", "decision model", "episodes", "success [95% CI]",
                "Δ vs LLM [95% CI]", "decision accuracy [95% CI]", "take-over rate",
                "LLM calls/ep", "LLM tokens/ep", "tokens saved/ep", "wall s/ep"):
        table.add_column(col, justify="left" if col in ("rung", "decision model") else "right")
    for r in result.rows:
        table.add_row(
            r.rung, r.model or "(LLM)", str(r.episodes) if r.rung != "isolated" else "–",
            _ci(r.success, r.success_ci), _ci(r.delta, r.delta_ci, signed=True),
            _ci(r.accuracy, r.accuracy_ci) + (f" n={r.accuracy_n}" if r.accuracy_n else ""),
            pct(r.takeover_rate), _num(r.llm_calls), _num(r.llm_tokens, 0),
            _num(r.tokens_saved, 0), _num(r.wall_s, 2))
    return table


def _num(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _ci(x: float | None, ci: Any, signed: bool = False) -> str:
    """``81% [70, 90]`` for a rate, ``+12 pp [+3, +20]`` for a difference; ``–`` for none."""
    if x is None:
        return "–"
    text = pp(x) if signed else pct(x)
    if ci:
        text += f" [{pp(ci[0], signed, unit=False)}, {pp(ci[1], signed, unit=False)}]"
    return text
