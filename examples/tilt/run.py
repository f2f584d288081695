"""What KL-regularised optimisation of a flawed learned reward amplifies (docs/research.md §6).

The research saw wrong-object grasps become *more* frequent as task success
rose under a learned reward. The tilt model says why: the optimum of
E[r̂] − β·KL(π ‖ π_0) is π*(τ) ∝ π_0(τ)·exp(r̂(τ)/β), so every outcome the
learned reward r̂ pays for grows — correct or not. This script checks the
prediction end to end on the toy suite with tackroom's Python API:

1. π_0: a tiny model SFT'd (briefly, so that it still makes mistakes) on toy
   expert episodes of ``click-button`` and ``click-link``;
2. π_0 sampled at temperature 1, ``--group`` samples per task instance, on
   training seeds: its outcomes (success / near-miss = the element next to
   the right one / other) and the flawed proxy ``near-miss`` (pays 1 for a
   success *and* for a near miss);
3. the tilt predictions (``tackroom.analysis.tilt.predict``) at two β, for
   the proxy and for the verifier-gated reward r = v(o)·r̂;
4. ``tackroom.train`` (Dr.GRPO: advantage r − mean(r) per instance, k3 KL at
   ``algo.beta``) with ``data.reward = "proxy:{a.proxy}"`` at each β, and once
   with ``data.verifier = true``;
5. each trained policy evaluated at temperature 1 on held-out seeds
   (≥ 1,000,000) and the shares compared with the predictions
   (``tilt.compare``), plus an SVG plot.

With ``--slips`` π_0 imitates a demonstrator that slips in a share of the
instances (a near miss, a far click, or pressing Enter instead of choosing),
optionally after SFT on the perfect expert (``--expert-epochs``), and
``--proxy press-enter`` pays for the Enter reply instead of the near miss
(README, "A sixth try": the design under which the gate's redirection shows).

Writes ``results.md``, ``results.json`` and ``shares.svg`` in the work directory.

Usage: .venv/bin/python examples/tilt/run.py [--workdir tilt-run] [--betas 0.5,0.1]
       [--steps 40] [--lr 5e-3] [--eval-seeds 300] [--start-seeds 100] [--group 8]
       [--tasks-per-step 8] [--sft-epochs 10] [--sft-lr 1e-2] [--gated-only]
       [--harness list-cmd|text-cmd] [--word-tokens] [--slips NEAR,OTHER[,ENTER]]
       [--expert-epochs 0] [--proxy near-miss|press-enter] [--size tiny|small]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import tackroom
from tackroom.core.errors import TackroomError
from tackroom.core.extras import script_requires
from tackroom.core.policy import PolicyRequest, PolicyResponse
from tackroom.policies.expert import ExpertPolicy
from tackroom.testing.harnesses import command_harness

script_requires("train", who="examples/tilt")

EVAL_SEED_BASE = 1_000_000  # tackroom.train.rollouts.EVAL_SEED_BASE: never a training seed
TASKS = ["click-button", "click-link"]
#: The harnesses π_0 can be trained and sampled under (tackroom.testing.harnesses): the same
#: numbered element list, one text command, one turn; they differ in how a click names its
#: element — by reference number (``click 9``) or by the text it shows (``click "frost"``).
HARNESSES = {
    "list-cmd": command_harness(
        "list-cmd", description="Numbered element list; one text command per turn; one turn.",
        turns=1, max_chars=4000,
        system="You are a web agent. Act on an element by its reference number."),
    "text-cmd": command_harness(
        "text-cmd", description="Numbered element list; click by the element's text; one turn.",
        turns=1, max_chars=4000, interface="element_text",
        system="You are a web agent. Act on an element by the text it shows."),
}
MAX_TOKENS = 16
#: The per-instance group key: the advantage compares the G samples of one (task, seed),
#: the context the tilt is taken in.
GROUP_KEY = "task + '|' + str(seed)"


class SlippingExpert(ExpertPolicy):
    """The toy expert with deliberate slips, as a demonstrator π_0 imitates.

    In a share ``near`` of the instances it clicks a clickable sibling right next to the
    element the instruction names (a near miss), in a share ``other`` one further away
    (when the page has one; else it clicks the right one), and in a share ``enter`` it
    presses Enter instead of choosing (``pressed-enter``). Which instances slip is fixed
    by the instance, ``(task, seed)``, so the SFT data repeats exactly. A π_0 SFT'd on
    these demonstrations has the mistakes in its support *within* each instance — the
    precondition of the per-instance tilt, which no π_0 trained on a perfect expert here
    provided (README, "A sixth try").
    """

    id = "slip-expert"

    def __init__(self, near: float, other: float, enter: float = 0.0) -> None:
        self.near, self.other, self.enter = near, other, enter

    def slip(self, view: Any) -> Any:
        """The slipped click for this instance, or ``None`` (take the expert's action)."""
        from tackroom.core.actions import Click, Press
        from tackroom.suites.toy.outcomes import answer

        right, siblings = answer(view.task.id, view.seed)
        if right is None or len(siblings) < 2 or view.turn != 0:
            return None
        rng = random.Random(f"{view.task.key}|{view.seed}")
        u, at = rng.random(), siblings.index(right)
        if u < self.near:
            pool = [n for i, n in enumerate(siblings) if abs(i - at) == 1]
        elif u < self.near + self.other:
            pool = [n for i, n in enumerate(siblings) if abs(i - at) >= 2]
        elif u < self.near + self.other + self.enter:
            return Press("Enter")
        else:
            return None
        return Click(rng.choice(pool).ref) if pool else None

    async def act(self, request: PolicyRequest) -> PolicyResponse:
        view = request.view
        click = self.slip(view) if view is not None else None
        if click is not None:
            response = view.encode([click])
            if response is not None:
                return response
        return await super().act(request)


@contextmanager
def step(what: str) -> Iterator[None]:
    t0 = time.perf_counter()
    print(f"  {what} …", flush=True)
    yield
    print(f"  {what}: done [{time.perf_counter() - t0:.0f} s]", flush=True)


def train_toml(model: str, a: argparse.Namespace) -> str:
    return f"""# Online Dr.GRPO on a learned (flawed) reward; β and the gate are set per run.
[algo]
algorithm = "dr_grpo"          # advantage r − mean(r): the objective is E[r̂] − β·KL
max_completion_length = {MAX_TOKENS}
beta = 0.5
kl_ratio_correction = true     # the gradient of KL(π ‖ π_0), the KL the tilt assumes (README)
[grouping]
group = "{GROUP_KEY}"
group_size = {a.group}
[lora]
enabled = false
[optim]
lr = {a.lr}
steps = {a.steps}
micro_batch_size = 16
[model]
path = "{model}"
device = "cpu"
[data]
suite = "toy"
tasks = {json.dumps(TASKS)}
harnesses = ["{a.harness}"]
tasks_per_step = {a.tasks_per_step}
reward = "proxy:{a.proxy}"
verifier = false
[rollout]
max_tokens = {MAX_TOKENS}
concurrency = 32
[run]
checkpoint_every = 0
"""


def sample(policy: str, seeds: range, group: int, db: str, label: str, harness: str) -> list[str]:
    """``group`` temperature-1 runs of ``policy`` under ``harness`` over ``seeds``; their run ids."""
    from tackroom.core.policy import Sampling

    ids = []
    for g in range(group):
        run = tackroom.evaluate(suite="toy", tasks=TASKS, harnesses=[harness], policies=[policy],
                                seeds=seeds, store=db, run_id=f"{label}-{g}",
                                sampling=Sampling(temperature=1.0, max_tokens=MAX_TOKENS),
                                concurrency=32)
        ids.append(run.id)
    return ids


def records(db: str, run_ids: list[str], proxy_name: str) -> tuple[list[str], list[float],
                                                                  list[str]]:
    """Outcomes, proxy rewards and instance keys of every episode of ``run_ids``."""
    from tackroom.analysis.tilt import from_records
    from tackroom.records.store import RecordStore
    from tackroom.train.rewards import get_proxy

    proxy = get_proxy(proxy_name)
    outcomes: list[str] = []
    rewards: list[float] = []
    groups: list[str] = []
    with RecordStore(db) as st:
        for rid in run_ids:
            r = from_records(st, rid, proxy)
            outcomes += r.outcomes
            rewards += r.rewards
            groups += r.groups
    return outcomes, rewards, groups


def svg(rows: list[dict[str, Any]], labels: tuple[str, ...], path: Path) -> None:
    """Grouped bars per run: P_0, predicted (with its interval) and observed share per outcome."""
    colours = {"start": "#bbbbbb", "predicted": "#4c78a8", "observed": "#f58518"}
    w, h, pad, top = 180 * len(rows) + 60, 300, 40, 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h + 70}" '
           'font-family="sans-serif" font-size="11">',
           f'<rect width="{w}" height="{h + 70}" fill="white"/>']
    y0 = top + h - pad
    scale = h - pad - top
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        y = y0 - tick * scale
        out.append(f'<line x1="40" x2="{w - 10}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="35" y="{y + 4:.1f}" text-anchor="end">{int(tick * 100)}%</text>')
    for k, row in enumerate(rows):
        x0 = 50 + 180 * k
        out.append(f'<text x="{x0 + 80}" y="{top - 10}" text-anchor="middle" '
                   f'font-weight="bold">{row["run"]}</text>')
        for j, lab in enumerate(labels):
            s = row["shares"][lab]
            for i, kind in enumerate(("start", "predicted", "observed")):
                v = s[kind]
                x = x0 + j * 55 + i * 15
                out.append(f'<rect x="{x}" y="{y0 - v * scale:.1f}" width="13" '
                           f'height="{v * scale:.1f}" fill="{colours[kind]}"/>')
                if kind == "predicted":
                    lo, hi = s["interval"]
                    out.append(f'<line x1="{x + 6.5}" x2="{x + 6.5}" y1="{y0 - lo * scale:.1f}" '
                               f'y2="{y0 - hi * scale:.1f}" stroke="black"/>')
            out.append(f'<text x="{x0 + j * 55 + 22}" y="{y0 + 14}" '
                       f'text-anchor="middle">{lab}</text>')
    lx = 50
    for kind, c in colours.items():
        out.append(f'<rect x="{lx}" y="{h + 40}" width="12" height="12" fill="{c}"/>')
        out.append(f'<text x="{lx + 16}" y="{h + 50}">{kind}</text>')
        lx += 100
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default="tilt-run")
    ap.add_argument("--betas", default="0.5,0.1", help="two (or more) KL coefficients")
    ap.add_argument("--steps", type=int, default=40, help="training steps per run")
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--tasks-per-step", type=int, default=8)
    ap.add_argument("--group", type=int, default=8, help="samples per task instance (G)")
    ap.add_argument("--start-seeds", type=int, default=100,
                    help="task instances per task for the π_0 records")
    ap.add_argument("--eval-seeds", type=int, default=300,
                    help="held-out instances per task per evaluation (one sample each)")
    ap.add_argument("--expert-seeds", type=int, default=200,
                    help="expert episodes per task for SFT")
    ap.add_argument("--sft-epochs", type=float, default=10.0,
                    help="SFT epochs: few, so that π_0 still misses")
    ap.add_argument("--sft-lr", type=float, default=1e-2, help="SFT learning rate")
    ap.add_argument("--gated-only", action="store_true",
                    help="train and evaluate only the gated run (at the last β)")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--harness", default="list-cmd", choices=sorted(HARNESSES),
                    help="how a click names its element: list-cmd (by number) or text-cmd "
                         "(by its text)")
    ap.add_argument("--word-tokens", action="store_true",
                    help="train π_0's tokenizer on every toy label word too (one token each)")
    ap.add_argument("--slips", default="0,0,0", metavar="NEAR,OTHER[,ENTER]",
                    help="the demonstrator's slips: the shares of instances where it clicks "
                         "the element next to the right one, one further away, or presses "
                         "Enter instead (default none: the perfect expert)")
    ap.add_argument("--expert-epochs", type=float, default=0.0,
                    help="with --slips: SFT epochs on the perfect expert first")
    ap.add_argument("--proxy", default="near-miss", choices=("near-miss", "press-enter"),
                    help="the flawed learned reward (tackroom.train.rewards)")
    ap.add_argument("--size", default="tiny", choices=("tiny", "small"),
                    help="π_0's model size (tackroom.models.init_model)")
    a = ap.parse_args()
    try:
        run_experiment(a)
    except TackroomError as e:
        sys.exit(f"failed: {e.line()}")


def run_experiment(a: argparse.Namespace) -> None:
    from tackroom.analysis import tilt
    from tackroom.models import init_model
    from tackroom.models.corpus import harness_corpus
    from tackroom.train.engine import OptimSettings
    from tackroom.train.rewards import get_proxy
    from tackroom.train.sft import Selection, SFTConfig

    betas = [float(b) for b in a.betas.split(",")]
    slips = [float(x) for x in a.slips.split(",")]
    near, other, enter = (slips + [0.0, 0.0, 0.0])[:3]
    slipping = bool(near or other or enter)
    if a.expert_epochs > 0 and not slipping:
        sys.exit("--expert-epochs is SFT on the perfect expert *before* a slipping "
                 "demonstrator's episodes: give --slips too (or use --sft-epochs alone)")
    work = Path(a.workdir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    (work / "harnesses").mkdir(parents=True)
    os.environ["TACKROOM_HARNESS_PATH"] = str(work / "harnesses")
    (work / "harnesses" / f"{a.harness}.toml").write_text(HARNESSES[a.harness])
    db = str(work / "runs.duckdb")
    threads = int(a.threads)
    t_start = time.perf_counter()

    # 1. π_0: a tiny model, SFT'd briefly on expert episodes.
    with step(f"{a.size} model"):
        corpus = harness_corpus(seeds=(0,))
        if a.word_tokens:
            # Every label the toy pages draw from, as the pages quote it, a few times over, so
            # that the tokenizer learns each as one token (seed 0's pages alone leave about a
            # third of them in pieces: "juniper" is j·un·i·per).
            from tackroom.suites.toy.tasks import WORDS

            corpus += [" ".join(f'"{w}"' for w in WORDS)] * 8
        init_model(work / "tiny", size=a.size, corpus=corpus, seed=0)
    with step("expert episodes"):
        tackroom.evaluate(suite="toy", tasks=TASKS, harnesses=[a.harness], policies=["expert"],
                          seeds=range(a.expert_seeds), store=db, run_id="expert")
    model, data_run = str(work / "tiny"), "expert"

    def sft_on(run: str, epochs: float, out: str, base: str) -> Any:
        return tackroom.sft(SFTConfig(
            model=base, out=str(work / out),
            # Every episode of the run, slipped ones too: π_0 imitates its demonstrator.
            selection=Selection(harnesses=(a.harness,), runs=(run,),
                                outcomes=("success", "failure", "budget_exhausted")),
            optim=OptimSettings(lr=a.sft_lr, warmup_steps=2), epochs=epochs, batch_size=8,
            checkpoint_every=1000, threads=threads), store=db)

    if slipping:
        if a.expert_epochs > 0:
            # First learn to read the page from the perfect expert (the copy's onset), then
            # the demonstrator's slips on top (they slow that onset down a lot: README).
            with step(f"SFT on the expert ({a.expert_epochs:g} epochs)"):
                model = str(sft_on("expert", a.expert_epochs, "sft-expert", model).final)
        with step(f"demonstrator episodes (slips: near {near:g}, other {other:g}, "
                  f"enter {enter:g})"):
            tackroom.evaluate(suite="toy", tasks=TASKS, harnesses=[a.harness],
                              policies=[SlippingExpert(near, other, enter)],
                              seeds=range(a.expert_seeds), store=db, run_id="demo")
        data_run = "demo"
    labels = get_proxy(a.proxy).labels
    demo, _, _ = records(db, [data_run], a.proxy)
    demo_line = "SFT data (the demonstrator's episodes): " + ", ".join(
        f"{lab} {100 * demo.count(lab) / len(demo):.1f}%" for lab in labels)
    print("  " + demo_line, flush=True)
    with step(f"SFT ({a.sft_epochs:g} epochs)"):
        sft = sft_on(data_run, a.sft_epochs, "sft", model)
    start = str(sft.final)

    # 2. π_0's outcomes and proxy rewards, G samples per training instance.
    with step(f"π_0 records: {len(TASKS)} tasks × {a.start_seeds} seeds × G = {a.group}"):
        start_runs = sample(f"hf:{start}", range(a.start_seeds), a.group, db, "start", a.harness)
    outcomes, rewards, groups = records(db, start_runs, a.proxy)
    gated = [r if o == "success" else 0.0 for o, r in zip(outcomes, rewards, strict=True)]

    # 3. Predictions: per instance (the tilt of a contextual policy) and pooled (the formula
    # applied to the marginal, as the issue writes it), for the proxy and the gated reward.
    runs: list[tuple[str, float, bool]] = [] if a.gated_only else [
        (f"proxy β={b:g}", b, False) for b in betas]
    runs.append((f"gated β={betas[-1]:g}", betas[-1], True))
    preds = {}
    for name, b, gate in runs:
        r = gated if gate else rewards
        preds[name] = (tilt.predict(outcomes, r, b, labels=labels, groups=groups, seed=0),
                       tilt.predict(outcomes, r, b, labels=labels, seed=0))

    # 4. Training, 5. evaluation.
    (work / "train.toml").write_text(train_toml(start, a))
    observed: dict[str, dict[str, int]] = {}
    train_logs: dict[str, list[dict[str, float]]] = {}
    for name, b, gate in runs:
        slug = name.replace(" ", "-").replace("β=", "b")
        with step(f"train {name} ({a.steps} steps)"):
            rl = tackroom.train(work / "train.toml",
                                [f"algo.beta={b}", f"data.verifier={'true' if gate else 'false'}",
                                 f"run.out_dir={work / slug}"],
                                store=db, threads=threads, run_id=f"train-{slug}")
        with tackroom_store(db) as st:
            train_logs[name] = st.train_steps(rl.run_id)
        with step(f"evaluate {name}"):
            ev = sample(f"hf:{rl.final}", range(EVAL_SEED_BASE, EVAL_SEED_BASE + a.eval_seeds),
                        1, db, f"eval-{slug}", a.harness)
        o, _, _ = records(db, ev, a.proxy)
        observed[name] = {lab: o.count(lab) for lab in labels}
    with step("evaluate π_0 on held-out seeds"):
        ev = sample(f"hf:{start}", range(EVAL_SEED_BASE, EVAL_SEED_BASE + a.eval_seeds), 1, db,
                    "eval-start", a.harness)
    o, _, _ = records(db, ev, a.proxy)
    observed_start = {lab: o.count(lab) for lab in labels}

    # Report.
    wall = time.perf_counter() - t_start
    lines = [demo_line,
             f"π_0 records: {len(outcomes)} episodes ({len(set(groups))} instances × G = "
             f"{a.group}); shares " + ", ".join(
                 f"{lab} {100 * outcomes.count(lab) / len(outcomes):.1f}%" for lab in labels),
             "π_0 on held-out seeds: " + ", ".join(
                 f"{lab} {100 * c / max(1, sum(observed_start.values())):.1f}%"
                 for lab, c in observed_start.items()), ""]
    out_json: dict[str, Any] = {"args": vars(a), "wall_s": wall, "runs": {}}
    plot_rows = []
    for name, b, gate in runs:
        per, pooled = preds[name]
        cmp_per = tilt.compare(per, observed[name])
        cmp_pool = tilt.compare(pooled, observed[name])
        last = train_logs[name][-1] if train_logs[name] else {}
        lines += [cmp_per.table(f"**{name}** — per-instance tilt"), "",
                  "pooled-formula prediction: " + ", ".join(
                      f"{r.label} {100 * r.predicted:.1f}% [{100 * r.interval[0]:.1f}, "
                      f"{100 * r.interval[1]:.1f}]" for r in cmp_pool.rows)
                  + f"; TV {cmp_pool.tv:.3f}",
                  "last training step: " + ", ".join(
                      f"{k} {100 * v:.0f}%" for k, v in last.items()
                      if k.startswith("outcome/")) + (f", kl {last['kl']:.3f}"
                                                      if "kl" in last else ""), ""]
        out_json["runs"][name] = {
            "beta": b, "verifier": gate, "observed": observed[name],
            "predicted_per_instance": per.shares(), "predicted_pooled": pooled.shares(),
            "intervals_per_instance": {x.label: x.interval for x in per.outcomes},
            "tv_per_instance": cmp_per.tv, "tv_pooled": cmp_pool.tv,
            "progress_per_instance": cmp_per.progress,
            "train_log": train_logs[name]}
        plot_rows.append({"run": name, "shares": {
            r.label: {"start": r.p0, "predicted": r.predicted, "interval": r.interval,
                      "observed": r.observed} for r in cmp_per.rows}})
    lines.append(f"wall time {wall:.0f} s ({wall / 60:.1f} min), {threads} thread(s)")
    text = "\n".join(lines)
    print("\n" + text, flush=True)
    (work / "results.md").write_text(text + "\n")
    (work / "results.json").write_text(json.dumps(out_json, indent=1, default=list))
    svg(plot_rows, labels, work / "shares.svg")
    print(f"wrote {work / 'results.md'}, results.json, shares.svg", flush=True)


@contextmanager
def tackroom_store(db: str) -> Iterator[Any]:
    from tackroom.records.store import RecordStore

    st = RecordStore(db)
    try:
        yield st
    finally:
        st.close()


if __name__ == "__main__":
    main()
