"""A model's control characters reach the terminal escaped, never obeyed (issue 35 item 8).

A recorded episode whose model wrote ``ESC [31m``, an OSC title sequence, a carriage
return and a bidirectional override is replayed with ``tackroom show``: every byte the
command writes is printable, and the escapes are shown as ``\\x1b[31m``.
"""

from __future__ import annotations

from conftest import run_cli

import tackroom
from tackroom.core.policy import PolicyResponse

HOSTILE = "\x1b[31mred\x1b[0m \x1b]0;pwned\x07 over\rwrite \u202eevil\x08"


class Hostile:
    """A policy whose every answer (and whose id) carries terminal control sequences."""

    id = "hostile\x1b[2J"

    async def act(self, request):
        return PolicyResponse(text=HOSTILE, completion_tokens=3)

    async def aclose(self) -> None:
        return None


def _no_control_bytes(text: str) -> None:
    bad = sorted({repr(c) for c in text if not (c.isprintable() or c in "\n ")})
    assert not bad, f"control characters written to the terminal: {bad}"


def test_show_escapes_a_models_control_characters(tmp_path):
    db = tmp_path / "r.duckdb"
    run = tackroom.evaluate(suite="toy", tasks=["toy/click-button"], harnesses=["som-tools"],
                            policies=[Hostile()], seeds=[0], store=db)
    (ep,) = run.load_episodes()
    assert any(HOSTILE in (t.raw_text or "") for t in ep.turns)  # recorded as it came

    replay = run_cli("show", run.id, ep.episode_id, "--full", "--db", str(db), cwd=tmp_path)
    assert replay.returncode == 0, replay.stderr
    _no_control_bytes(replay.stdout + replay.stderr)
    assert "\\x1b[31mred\\x1b[0m" in replay.stdout and "\\x1b]0;pwned\\x07" in replay.stdout
    assert "over\\rwrite" in replay.stdout and "\\u202eevil\\x08" in replay.stdout

    summary = run_cli("show", run.id, "--db", str(db), cwd=tmp_path)
    assert summary.returncode == 0, summary.stderr
    _no_control_bytes(summary.stdout + summary.stderr)
    assert "hostile\\x1b[2J" in summary.stdout  # the policy id, in both tables

    runs = run_cli("report", run.id, "--db", str(db), "--out", str(tmp_path / "r.html"),
                   cwd=tmp_path)
    assert runs.returncode == 0, runs.stderr
    _no_control_bytes(runs.stdout + runs.stderr)
