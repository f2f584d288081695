"""``tackroom self-hpo``: two rounds of each arm, equal budgets, the lineage, a killed run resumed.

The policy is a tiny model SFT'd here on toy expert episodes (a real checkpoint,
trained by RL in each policy phase); the proposer is the optimiser's scripted one, as
for a model too small to write edits.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from conftest import CLI_ENV, TACKROOM, run_cli
from inprocess_cli import run_here

pytest.importorskip("torch")

import tackroom  # noqa: E402
from tackroom.app.optimization import journal  # noqa: E402
from tackroom.app.selfhpo import self_hpo  # noqa: E402
from tackroom.app.selfhpo_config import SelfHPOConfig  # noqa: E402
from tackroom.core.errors import ConfigError  # noqa: E402
from tackroom.harness.spec import load_harness  # noqa: E402
from tackroom.records import RecordStore  # noqa: E402
from tackroom.testing import ScriptedOpenAIServer, text  # noqa: E402

TASKS = ["focus-text", "click-dialog"]
HARNESS = """name = "{name}"
[prompt]
system = "You are a web agent. Act on an element by its reference number."
[observation]
renderer = "{renderer}"
[actions]
interface = "element_refs"
parser = "commands"
[loop]
history = 1
on_malformed = "feedback"
[budget]
turns = 2
wall_seconds = 60
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """Harnesses ``shpo-list`` (H_0) and ``shpo-html`` (held out), and π_0: a tiny SFT'd model."""
    from tackroom.app import evaluate, sft
    from tackroom.models import init_model
    from tackroom.models.corpus import harness_corpus
    from tackroom.train.engine import OptimSettings
    from tackroom.train.sft import Selection, SFTConfig

    root = tmp_path_factory.mktemp("selfhpo")
    (root / "harnesses").mkdir()
    for name, renderer in (("shpo-list", "element_list"), ("shpo-html", "html")):
        (root / "harnesses" / f"{name}.toml").write_text(HARNESS.format(name=name,
                                                                         renderer=renderer))
    old = os.environ.get("TACKROOM_HARNESS_PATH")
    os.environ["TACKROOM_HARNESS_PATH"] = str(root / "harnesses")
    init_model(root / "tiny", size="tiny", corpus=harness_corpus(seeds=(0,)), seed=0)
    db = root / "sft.duckdb"
    run = evaluate(suite="toy", tasks=TASKS, harnesses=["shpo-list"], policies=["expert"],
                   seeds=range(6), store=db)
    trained = sft(SFTConfig(model=str(root / "tiny"), out=str(root / "sft"),
                            selection=Selection(runs=(run.id,)),
                            optim=OptimSettings(lr=1e-2, warmup_steps=2), epochs=20,
                            batch_size=8, checkpoint_every=1000, threads=1), store=db)
    yield {"root": root, "model": str(trained.final)}
    if old is None:
        os.environ.pop("TACKROOM_HARNESS_PATH", None)
    else:
        os.environ["TACKROOM_HARNESS_PATH"] = old


def selfhpo_toml(env, path: Path, **over) -> Path:
    s = {"rounds": 2, "candidates": 2, "steps_per_round": 2, "proposer": "scripted", **over}
    path.write_text(f"""
[selfhpo]
suite = "toy"
harness = "shpo-list"
model = "{env['model']}"
tasks = ["focus-text", "click-dialog"]
held_out = ["shpo-html"]
rounds = {s['rounds']}
candidates = {s['candidates']}
steps_per_round = {s['steps_per_round']}
proposer = "{s['proposer']}"
seed = 0
concurrency = 16
[splits]
train = "0-3"
dev = "100-103"
test = "1000000-1000003"
[train.algo]
algorithm = "dr_grpo"
max_completion_length = 16
[train.grouping]
group_size = 2
[train.lora]
enabled = false
[train.optim]
lr = 1e-3
micro_batch_size = 8
[train.model]
device = "cpu"
[train.data]
tasks_per_step = 2
[train.rollout]
max_tokens = 16
concurrency = 16
[train.run]
checkpoint_every = 1
[sampling]
max_tokens = 16
""")
    return path


def test_two_rounds_of_each_arm_record_the_lineage_with_equal_budgets(env, tmp_path):
    cfg = SelfHPOConfig.from_toml(selfhpo_toml(env, tmp_path / "selfhpo.toml"))
    # Equal by construction: the alternation spends what each half spends alone.
    alt, har, pol = (cfg.budget(a) for a in ("alternate", "harness", "policy"))
    assert alt.updates == pol.updates == 2 * 2 and har.updates == 0
    assert alt.rollouts_per_update == pol.rollouts_per_update == 2 * 2
    assert alt.proposals == har.proposals == 2 * 2 and pol.proposals == 0
    assert alt.dev_evaluations == har.dev_evaluations == 4 and pol.dev_evaluations == 0

    db = tmp_path / "r.duckdb"
    notes: list[str] = []
    res = self_hpo(cfg, store=db, out_dir=tmp_path / "out", on_note=notes.append)
    assert set(res.lineage) == {"alternate", "harness", "policy"}
    assert all(len(rounds) == 2 for rounds in res.lineage.values())
    # What was spent is what was planned (updates exactly, dev evaluations at most).
    for arm in res.lineage:
        b = cfg.budget(arm)
        assert res.spent[arm]["updates"] == b.updates
        assert res.spent[arm]["dev_evaluations"] <= b.dev_evaluations
    assert res.spent["alternate"]["dev_evaluations"] == res.spent["harness"]["dev_evaluations"]

    alt_rounds = res.lineage["alternate"]
    # Round 1's harness phase ran for the policy round 0 trained; its training under the
    # harness round 1 kept; each round's policy is the one the round before handed on.
    assert alt_rounds[1]["harness_phase"]["policy"] == alt_rounds[0]["policy"]
    assert alt_rounds[0]["policy"] != cfg.start_policy
    assert alt_rounds[1]["policy_phase"]["harness"] == alt_rounds[1]["harness"]
    assert all("policy_phase" not in r for r in res.lineage["harness"])
    assert all(r["policy"] == cfg.start_policy for r in res.lineage["harness"])
    assert all(r["harness"] == "shpo-list" for r in res.lineage["policy"])
    with RecordStore(db, read_only=True) as store:
        entries = journal(store, res.run_id)
        for arm, rounds in res.lineage.items():
            for r, row in enumerate(rounds):
                assert f"measure:{arm}:{r}" in entries
                if "policy_phase" in row:
                    steps = store.train_steps(f"{res.run_id}.{arm}.r{r}.train")
                    assert [s["step"] for s in steps] == [1, 2]
                if "harness_phase" in row:
                    h = row["harness_phase"]
                    sub = journal(store, h["run"])
                    # the optimiser round kept its test split sealed
                    assert not [k for k in sub if k.endswith(":test")]
                    assert h["proposer"] == "scripted" and len(h["proposed"]) == 2
                    # an accepted harness is the candidate exactly, under a name of its own
                    if h["accepted"]:
                        assert load_harness(h["harness"]).name == f"{arm}-h{r + 1}"
                        assert h["hash"] == load_harness(h["harness"]).hash
        sealed = store.run(res.sealed_run)
        assert sealed["status"] == "finished" and sealed["manifest_hash"]
        sealed_rows = store.episodes(res.sealed_run)
    # Every final policy under every final harness and the held-out one, on test seeds only.
    assert {int(r["seed"]) for r in sealed_rows} == set(range(1_000_000, 1_000_004))
    assert set(res.table) == {"start", "alternate", "harness", "policy"}
    for cells in res.table.values():
        assert "shpo-html" in cells and "shpo-list" in cells
        assert all(c["n"] == len(TASKS) * 4 for c in cells.values())
    assert {"alternate - start", "alternate - harness", "alternate - policy",
            "harness - start", "policy - start"} <= set(res.effects)
    assert any(name.endswith("under shpo-html") for name in res.effects)
    assert any("harness phase" in n for n in notes) and any("policy phase" in n for n in notes)

    # The report of the Self-HPO run: its sealed evaluation, and the lineage of every arm.
    rep = tackroom.report([res.run_id], store=db, out=tmp_path / "report.html")
    assert rep.run_ids == [res.sealed_run]
    page = rep.path.read_text()
    assert "Self-HPO lineage" in page and 'class="plot lineage"' in page
    for arm in ("alternate", "harness", "policy"):
        assert f"<td>{arm}</td>" in page
    assert "carry-over" in page or "alternate - start" in page


def test_a_killed_self_hpo_resumes_mid_round(env, tmp_path):
    # The proposer is an external model behind a scripted server in this process; it
    # stops answering at its 3rd call — the first proposal of the alternation's round 1,
    # after round 0's harness and policy phases: the run is killed there, mid-round, at a
    # point of the run, never after a time. Only the alternation runs: it is the arm with
    # both phases in a round (the arms run one after another, each from the start pair, and
    # the first test shows the other two), so the resumed run is its round 1 and the
    # sealed evaluation, not two more arms' worth of training and optimising.
    calls, release = [0], threading.Event()

    def reply(body: dict) -> object:
        calls[0] += 1
        if calls[0] == 3:
            release.wait(120)
        return text(json.dumps([{"op": "add_skill", "skill": f"extra{calls[0]}",
                                 "text": "- Act on the element the instruction names."}]))

    with ScriptedOpenAIServer(reply) as srv:
        toml = selfhpo_toml(env, tmp_path / "selfhpo.toml", proposer="openai:proposer-model")
        toml.write_text(toml.read_text().replace(
            "concurrency = 16\n[splits]", f'concurrency = 16\nbase_url = "{srv.base_url}"\n'
            'arms = ["alternate"]\n[splits]'))
        db = tmp_path / "r.duckdb"
        cli_env = {**os.environ, **CLI_ENV, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
        proc = subprocess.Popen([*TACKROOM, "self-hpo", "-c", str(toml), "--db", str(db),
                                 "--out", str(tmp_path / "out")], cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=cli_env)
        try:
            deadline = time.monotonic() + 300
            while calls[0] < 3 and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            proc.send_signal(signal.SIGKILL)
            out = proc.communicate(timeout=60)[0]
        finally:
            if proc.poll() is None:
                proc.kill()
            release.set()
        assert proc.returncode == -signal.SIGKILL, out
        run_id = re.search(r"shpo-\d{8}-\d{6}-[0-9a-f]{4}", out).group(0)
        killed_at = time.time()
        with RecordStore(db) as store:
            before = journal(store, run_id)
            assert store.run(run_id)["status"] != "finished"
            assert store.run(f"{run_id}.alternate.r1")["status"] != "finished"
        assert {"harness:alternate:0", "policy:alternate:0", "measure:alternate:0"} <= set(before)
        assert "harness:alternate:1" not in before

        # The resume in this process (the kill above is the subprocess that matters): a
        # second `tackroom` process would spend seconds importing torch again.
        done = run_here("self-hpo", "--resume", run_id, "--db", str(db), "--out",
                        str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"resuming {run_id}" in done.stdout
    assert "lineage" in done.stdout and "sealed evaluation on test" in done.stdout
    with RecordStore(db, read_only=True) as store:
        after = journal(store, run_id)
        for key, e in before.items():
            assert after[key]["step"] == e["step"], key  # read back, not run again
            if e.get("kind") == "measure":
                times = [r["recorded_at"] for r in store.episodes(e["run"])]
                assert times and max(times) < killed_at, key
        # Round 0's training was not repeated: its steps were logged once, before the kill.
        steps = store.train_steps(f"{run_id}.alternate.r0.train")
        assert [s["step"] for s in steps] == [1, 2]
        assert store.run(run_id)["status"] == "finished"
        final = after["final"]
        assert set(final["spent"]) == {"alternate"}
        assert final["spent"]["alternate"]["updates"] == 4  # its budget: 2 rounds x 2 steps
        # The external model proposed every round's edits, recorded as its own.
        assert after["harness:alternate:1"]["proposer"] == "openai:proposer-model"
        assert after["harness:alternate:1"]["proposed"]


def test_bad_self_hpo_configs_are_one_clear_line(env, tmp_path):
    bad = selfhpo_toml(env, tmp_path / "bad.toml")
    bad.write_text(bad.read_text().replace("[train.optim]", "[train.optim]\nsteps = 7"))
    with pytest.raises(ConfigError, match=r"\[train.optim\] steps is set by each round"):
        SelfHPOConfig.from_toml(bad)
    p = run_cli("self-hpo", "-c", str(bad), "--db", str(tmp_path / "x.duckdb"), cwd=tmp_path)
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert "steps_per_round" in p.stdout + p.stderr
    arms = selfhpo_toml(env, tmp_path / "arms.toml")
    arms.write_text(arms.read_text().replace("seed = 0", 'seed = 0\narms = ["alternate", "x"]'))
    with pytest.raises(ConfigError, match="arms = .* must be a non-empty list"):
        SelfHPOConfig.from_toml(arms)
    with pytest.raises(ConfigError, match="no Self-HPO run"):
        self_hpo(store=tmp_path / "y.duckdb", run_id="shpo-nope", resume_run=True)


def test_the_docs_key_table_is_the_settings() -> None:
    """docs/optimize.md lists exactly SelfHPOConfig's keys, with their defaults (generated)."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "optimize.md").read_text()
    start, end = "<!-- settings:SelfHPOConfig -->\n", "<!-- /settings:SelfHPOConfig -->"
    table = doc.split(start, 1)[1].split(end, 1)[0]
    assert table == SelfHPOConfig.key_table(), (
        "docs/optimize.md's key table is stale: paste SelfHPOConfig.key_table() between "
        "the markers")
    assert "| `selfhpo.proposer` | \"self\" |" in table

