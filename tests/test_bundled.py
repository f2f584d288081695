"""The bundled policy: shipped in the package, small, and the same over HTTP as in-process."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("torch")

from inprocess_cli import run_here  # noqa: E402

from tackroom.policies import make_policy  # noqa: E402
from tackroom.policies.bundled import BUNDLED_DIR, MAX_BYTES, bundled_id  # noqa: E402
from tackroom.records import RecordStore  # noqa: E402
from tackroom.serve import ServerThread  # noqa: E402


def test_the_bundled_policy_ships_in_the_package_and_is_small() -> None:
    files = [p for p in BUNDLED_DIR.iterdir() if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= MAX_BYTES
    card = json.loads((BUNDLED_DIR / "tackroom_model.json").read_text())
    # Trained by our own pipeline: `model init` then `sft` on recorded expert episodes.
    assert card["sft"]["selection"]["harnesses"] == ["som-tools"]
    assert card["sft"]["steps"] > 0
    policy = make_policy("bundled")
    assert policy.id == bundled_id() and policy.id.startswith("bundled@")
    assert make_policy("hf:bundled").id == policy.id


def _outcomes(db: Path) -> dict[tuple[str, int], str]:
    with RecordStore(db, read_only=True) as store:
        rows = store.episodes(store.latest_run_id())
    return {(r["task"], r["seed"]): r["outcome"] for r in rows}


@pytest.mark.browser
def test_bundled_in_process_and_through_serve_succeed_alike_on_miniwob(tmp_path: Path) -> None:
    tasks = "click-test,focus-text,click-dialog,click-test-2"
    common = ["--suite", "miniwob", "--tasks", tasks, "--harness", "som-tools",
              "--seeds", "0-2", "-n", "1"]
    # Both evaluations are `tackroom eval` run in this process, and the server is
    # `tackroom serve`'s server on a thread of it (port 0): three `tackroom` processes
    # would each spend seconds importing torch and transformers, and show nothing more.
    direct = run_here("eval", *common, "--policy", "hf:bundled",
                      "--db", str(tmp_path / "a.duckdb"), cwd=tmp_path)
    assert direct.returncode == 0, direct.stderr
    with ServerThread(BUNDLED_DIR, threads=1) as server:
        served = run_here("eval", *common, "--policy", f"openai:{server.model_name}",
                          "--base-url", server.base_url, "--db", str(tmp_path / "b.duckdb"),
                          cwd=tmp_path)
    assert served.returncode == 0, served.stderr
    a, b = _outcomes(tmp_path / "a.duckdb"), _outcomes(tmp_path / "b.duckdb")
    assert len(a) == 12 and a == b
    # It is a trained policy, not a random one: it solves most of these simple tasks.
    assert Counter(a.values())["success"] >= 8
