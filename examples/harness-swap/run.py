"""The harness-swap experiment of docs/research.md §1 at small scale (see README.md here).

A policy trained under harness A (the bundled model, SFT under ``som-tools``) is
evaluated under other harnesses (the drop), trained further under each of them
with one fixed budget (the gains), and the gains are regressed on the ceiling
C(h') and the mismatch M(π, h') measured *before* that training.

Phases (each is skipped when ``out/state.json`` says it is done, so an
interrupted run continues where it stopped; ``--fresh`` starts over):

1. ``record``  expert episodes under every target harness on training seeds
2. ``before``  the bundled policy and the expert under A and every target, on eval seeds
3. ``sft-H``   ``tackroom.sft`` from the bundled weights on H's expert episodes (fixed steps)
4. ``after-H`` the further-trained model under H, on the same eval seeds
5. analysis    gain points + fit (``tackroom.analysis.gain``), conflation, the HTML report

Evaluations are ``tackroom.evaluate`` calls, training ``tackroom.sft``, the report
``tackroom.report`` (docs/api.md), all in this process; each phase writes a short log
(run id, summary rows) to ``out/logs/PHASE.log``.

Run from the repository root:  .venv/bin/python examples/harness-swap/run.py
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

# One torch thread everywhere, set before anything imports torch (which reads
# OMP_NUM_THREADS at start-up); `hf:` policies also get threads=1 (policy_options) and
# the SFT runs SFTConfig(threads=1).
os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
os.environ.setdefault("MINIWOB_CHROME_BINARY", "/usr/bin/chromium")
os.environ.setdefault("MINIWOB_CHROMEDRIVER", "/usr/bin/chromedriver")

import tackroom  # noqa: E402  (cheap: the API loads DuckDB and torch on first use)
from tackroom.core.errors import TackroomError  # noqa: E402
from tackroom.core.extras import script_requires  # noqa: E402

script_requires("web", "train", who="examples/harness-swap")

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

TASKS = ("click-test,click-test-2,click-test-transfer,click-button,click-button-sequence,"
         "click-dialog,click-dialog-2,click-link,click-widget,focus-text,focus-text-2,"
         "identify-shape")
HARNESS_A = "som-tools"  # what the bundled policy was trained under (Makefile `policy`)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--targets", default="som-tools,html-commands,outline-coords,"
                   "html-commands-single,som-tools-reflect",
                   help="harnesses to train further under (A itself included = a small-gain point)")
    p.add_argument("--eval-seeds", default="0-2", help="evaluation seeds (before and after)")
    p.add_argument("--train-seeds", default="2000-2007", help="seeds of the expert training episodes")
    p.add_argument("--steps", type=int, default=12, help="optimiser steps of further training, "
                   "the same for every harness")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("-n", "--concurrency", type=int, default=4)
    p.add_argument("--out", default=str(HERE / "out"))
    p.add_argument("--fresh", action="store_true", help="delete --out first")
    p.add_argument("--only", default="", help="stop after this phase (record, before, sft-H, after-H)")
    return p.parse_args()


class Experiment:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        # Absolute, then work from the repository root: `hf:` policy ids carry paths
        # relative to it (as when the CLI ran there).
        self.out = Path(args.out).resolve()
        os.chdir(ROOT)
        if args.fresh and self.out.exists():
            shutil.rmtree(self.out)
        (self.out / "logs").mkdir(parents=True, exist_ok=True)
        self.db = str(self.out / "records.duckdb")
        self.state_path = self.out / "state.json"
        self.state = json.loads(self.state_path.read_text()) if self.state_path.exists() else {}
        self.state.setdefault("phases", {})
        self.targets = [h for h in args.targets.split(",") if h]

    def save(self) -> None:
        self.state_path.write_text(json.dumps(self.state, indent=2))

    def rel(self, path: Path | str) -> str:
        """A path relative to the repository root: `hf:` policy ids carry it."""
        return os.path.relpath(Path(path).resolve(), ROOT)

    def log(self, name: str, lines: list[str]) -> Path:
        """Write a phase's log (what the phase did, its run id, its numbers)."""
        log = self.out / "logs" / f"{name}.log"
        log.write_text("\n".join(lines) + "\n")
        return log

    def call(self, name: str, what: str, fn):
        """Run one API call for phase ``name``; a TackroomError ends the script with its line."""
        print(f"  {what}", flush=True)
        t0 = time.time()
        try:
            result = fn()
        except TackroomError as e:
            log = self.log(name, [what, f"failed: {e.line()}"])
            sys.exit(f"{name} failed: {e.line()}\nlog: {log}")
        self.seconds = time.time() - t0
        return result

    def phase(self, name: str, fn) -> dict:
        done = self.state["phases"].get(name)
        if done:
            print(f"[{name}] done before ({done.get('seconds', 0):.0f} s), skipped", flush=True)
            return done
        print(f"[{name}]", flush=True)
        t0 = time.time()
        result = fn()
        result["seconds"] = time.time() - t0
        self.state["phases"][name] = result
        self.save()
        if self.args.only == name:
            sys.exit(f"stopped after {name} (--only)")
        return result

    # -- phases ----------------------------------------------------------------------------
    def eval(self, name: str, harnesses: list[str], policies: list[str], seeds: str) -> dict:
        from tackroom.core.episode import Episode, Outcome
        from tackroom.core.policy import Sampling

        done = {"n": 0, "success": 0}

        def on_episode(ep: Episode) -> None:
            if ep.outcome is Outcome.INFRA_ERROR and ep.attempt < 1:
                return  # retried as a new attempt
            done["n"] += 1
            done["success"] += ep.outcome is Outcome.SUCCESS
            if done["n"] % 20 == 0:
                print(f"    {done['n']} episodes, {done['success']} successes", flush=True)

        what = (f"tackroom.evaluate(suite='miniwob', harnesses={harnesses}, "
                f"policies={policies}, seeds='{seeds}', max_tokens={self.args.max_tokens}, "
                f"concurrency={self.args.concurrency})")
        run = self.call(name, what, lambda: tackroom.evaluate(
            suite="miniwob", tasks=TASKS.split(","), harnesses=harnesses, policies=policies,
            seeds=seeds, sampling=Sampling(max_tokens=self.args.max_tokens),
            concurrency=self.args.concurrency, policy_options={"threads": 1}, store=self.db,
            on_episode=on_episode))
        lines = [what, f"run {run.id} ({run.status}) in {run.db}: "
                 f"success {100 * run.success_rate:.1f}%, {self.seconds:.0f} s",
                 "", f"{'harness':<22} {'policy':<56} {'success':>8}  {'95% CI':<14} "
                 f"{'n':>4} {'infra':>5} {'turns':>6} {'parse err':>9}"]
        for c in run.summary():
            lo, hi = c.interval
            ci = f"[{100 * lo:.0f}, {100 * hi:.0f}]"
            lines.append(f"{c.harness:<22} {c.policy:<56} {100 * c.rate:7.1f}%  {ci:<14} "
                         f"{c.n:>4} {c.infra_errors:>5} {c.mean_turns:>6.2f} "
                         f"{c.parse_errors:>9}")
        log = self.log(name, lines)
        print(f"  {name}: run {run.id}, success {100 * run.success_rate:.1f}%, "
              f"{self.seconds:.0f} s (log {self.rel(log)})", flush=True)
        return {"run": run.id}

    def record(self) -> dict:
        return self.eval("record", self.targets, ["expert"], self.args.train_seeds)

    def before(self) -> dict:
        hs = [HARNESS_A] + [h for h in self.targets if h != HARNESS_A]
        return self.eval("before", hs, ["bundled", "expert"], self.args.eval_seeds)

    def n_examples(self, harness: str) -> int:
        """Trainable turns `tackroom.sft` will see (parsed, non-empty replies of successes)."""
        from tackroom.records import RecordStore

        with RecordStore(self.db, read_only=True) as store:
            rows = store.query(
                "SELECT count(*) AS n FROM turns t JOIN episodes e "
                "ON t.run_id = e.run_id AND t.episode_id = e.episode_id "
                "WHERE e.run_id = ? AND e.harness = ? AND e.policy = 'expert' "
                "AND e.outcome = 'success' AND t.parse_error IS NULL "
                "AND (coalesce(t.raw_text, '') <> '' OR t.tool_calls IS NOT NULL)",
                [self.state["phases"]["record"]["run"], harness])
        return int(rows[0]["n"])

    def sft(self, harness: str) -> dict:
        n = self.n_examples(harness)
        per_epoch = -(-n // self.args.batch_size)
        # `tackroom.sft` runs round(ceil(n / batch) * epochs) steps: pick epochs for exactly --steps.
        epochs = self.args.steps / per_epoch
        out = self.out / f"sft-{harness}"
        shutil.rmtree(out, ignore_errors=True)
        from tackroom.train.engine import OptimSettings
        from tackroom.train.sft import Selection, SFTConfig

        config = SFTConfig(
            model=str(ROOT / "tackroom/policies/bundled_model"), out=self.rel(out),
            selection=Selection(harnesses=(harness,),
                                runs=(self.state["phases"]["record"]["run"],),
                                policies=("expert",)),
            optim=OptimSettings(lr=self.args.lr, warmup_steps=self.args.warmup),
            epochs=float(f"{epochs:.6f}"), batch_size=self.args.batch_size,
            checkpoint_every=1000, threads=1, save_dtype="float16")

        def on_step(step: int, total: int, m: dict[str, float]) -> None:
            print(f"    step {step}/{total}: loss {m['loss']:.3f}, "
                  f"acc {m['token_accuracy']:.0%}", flush=True)

        name = f"sft-{harness}"
        result = self.call(name, f"tackroom.sft(SFTConfig(out={config.out!r}, epochs="
                           f"{config.epochs}, ...)) on {n} examples under {harness}",
                           lambda: tackroom.sft(config, store=self.db, on_step=on_step))
        loss, acc = result.last.get("loss"), result.last.get("token_accuracy")
        # As the CLI printed them (loss to 4 places, accuracy in whole percent).
        final_loss = round(loss, 4) if loss is not None else None
        final_acc = round(100 * acc) / 100 if acc is not None else None
        log = self.log(name, [
            f"tackroom.sft: {config}",
            f"run {result.run_id}: {result.examples} examples, {result.steps} steps, final "
            f"loss {final_loss}, token accuracy {final_acc} (skipped turns: "
            f"{result.skipped or 'none'}); {self.seconds:.0f} s",
            f"model: {result.final}"])
        print(f"  {name}: run {result.run_id}, {result.steps} steps, final loss {final_loss}, "
              f"{self.seconds:.0f} s (log {self.rel(log)})", flush=True)
        return {"model": self.rel(result.final), "examples": n, "epochs": epochs,
                "steps": result.steps, "final_loss": final_loss, "final_token_acc": final_acc}

    def after(self, harness: str) -> dict:
        model = self.state["phases"][f"sft-{harness}"]["model"]
        r = self.eval(f"after-{harness}", [harness], [f"hf:{model}"], self.args.eval_seeds)
        r["policy"] = f"hf:{model}"
        return r

    def run(self) -> None:
        t0 = time.time()
        self.phase("record", self.record)
        self.phase("before", self.before)
        for h in self.targets:
            self.phase(f"sft-{h}", lambda h=h: self.sft(h))
            self.phase(f"after-{h}", lambda h=h: self.after(h))
        analyse(self)
        total = sum(p.get("seconds", 0) for p in self.state["phases"].values())
        print(f"\nphase time in all: {total / 60:.1f} min (this invocation {(time.time() - t0) / 60:.1f} min)")


# -- analysis --------------------------------------------------------------------------------
def pct(x: float | None) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.0f}%"


def pp(x: float | None) -> str:
    return "—" if x is None or math.isnan(x) else f"{100 * x:+.0f} pp"


def analyse(exp: Experiment) -> None:
    from tackroom.analysis.ceiling import best_ceilings, ceilings
    from tackroom.analysis.gain import fit_gain, gain_points
    from tackroom.analysis.transfer import conflation, transfer_matrix
    from tackroom.policies.bundled import bundled_id
    from tackroom.records import RecordStore

    ph = exp.state["phases"]
    bundled = bundled_id()
    with RecordStore(exp.db, read_only=True) as store:
        before_rows = store.episodes(run_id=ph["before"]["run"])
        after_runs = [ph[f"after-{h}"]["run"] for h in exp.targets]
        after_rows = [r for rid in after_runs for r in store.episodes(run_id=rid)]

    # Ceilings from the records *before* further training only (expert + bundled).
    ceils = ceilings(before_rows)
    best = best_ceilings(ceils)
    pairs = [(bundled, ph[f"after-{h}"]["policy"], h) for h in exp.targets]
    points = gain_points(before_rows, after_rows, ceils, pairs)
    fit = fit_gain(points)

    rows = []
    for p in points:
        exp_est = next(e for e in ceils[p.harness] if e.estimator == "expert")
        sft = ph[f"sft-{p.harness}"]
        rows.append({
            "harness": p.harness, "own": p.harness == HARNESS_A,
            "ceiling": p.ceiling, "ceiling_estimator": best[p.harness].estimator,
            "expert": exp_est.value, "expert_lo": exp_est.lo, "expert_hi": exp_est.hi,
            "j_before": p.success_before, "mismatch_before": p.mismatch,
            "j_after": p.success_after, "gain": p.gain, "gain_lo": p.gain_lo,
            "gain_hi": p.gain_hi, "predicted": fit.predict(p.ceiling, p.mismatch),
            "n_tasks": p.n_tasks, "sft_examples": sft["examples"], "sft_steps": sft["steps"],
            "sft_final_loss": sft["final_loss"], "sft_final_token_acc": sft["final_token_acc"]})

    tm = transfer_matrix(before_rows, {bundled: HARNESS_A})
    drops = {eh: {"success": tm.cells[(HARNESS_A, eh)].rate,
                  "drop": tm.drop.get((HARNESS_A, eh)),
                  "drop_lo": getattr(tm.drop_test.get((HARNESS_A, eh)), "lo", None),
                  "drop_hi": getattr(tm.drop_test.get((HARNESS_A, eh)), "hi", None)}
             for (th, eh) in tm.cells if th == HARNESS_A}
    conf = []
    for h in exp.targets:
        if h == HARNESS_A:
            continue
        c = conflation(before_rows, (bundled, HARNESS_A), (bundled, h), ceils)
        conf.append({"a": f"{bundled} under {HARNESS_A}", "b": f"{bundled} under {h}",
                     "gap": c.gap, "ceiling_part": c.ceiling_part,
                     "mismatch_part": c.mismatch_part})

    # The HTML report over every run, as a user makes it (`tackroom report`, here
    # `tackroom.report`) with the training harness of every policy (the transfer matrix:
    # the bundled policy and the one trained further under A share the row som-tools; the
    # report adds one row per policy) and the gain pairs (the gain scatter, ceilings
    # measured before).
    report = exp.out / "report.html"
    trained = {bundled: HARNESS_A, **{ph[f"after-{h}"]["policy"]: h for h in exp.targets}}
    runs = [ph["before"]["run"], *after_runs]
    cli = (f"tackroom report {' '.join(runs)} --db {exp.rel(exp.db)} --out {exp.rel(report)} "
           + " ".join(f"--trained {p}={h}" for p, h in trained.items()) + " "
           + " ".join(f"--gain {b}={a}@{h}" for b, a, h in pairs))
    print(f"[report] the same as: {cli}", flush=True)
    rep = exp.call("report", "tackroom.report(...)", lambda: tackroom.report(
        runs, out=report, store=exp.db, trained=trained, gain=pairs))
    from rich.console import Console

    with open(exp.out / "logs" / "report.log", "w") as f:
        f.write(f"tackroom.report over runs {', '.join(rep.run_ids)}; the same as:\n{cli}\n\n")
        console = Console(file=f, width=200, no_color=True)
        for table in rep.tables():
            console.print(table)
        f.write(f"report: {rep.path}\n")
    print(f"  report: {exp.seconds:.0f} s (log {exp.rel(exp.out / 'logs' / 'report.log')})",
          flush=True)

    results = {"bundled": bundled, "args": vars(exp.args), "points": rows,
               "fit": {"model": fit.model, "intercept": fit.intercept,
                       "coef_ceiling": fit.coef_ceiling, "coef_mismatch": fit.coef_mismatch,
                       "r2": fit.r2, "n": fit.n, "note": fit.note, "residuals": fit.residuals},
               "drop_from_A": drops, "conflation": conf,
               "phase_seconds": {k: v.get("seconds") for k, v in ph.items()},
               "report": exp.rel(report)}
    (exp.out / "results.json").write_text(json.dumps(results, indent=2))
    md = results_markdown(results)
    (exp.out / "results.md").write_text(md)
    print("\n" + md)
    print(f"report: {report}")


def results_markdown(r: dict) -> str:
    a = r["args"]
    lines = [f"Eval seeds {a['eval_seeds']} × 12 tasks per cell; further training: "
             f"{a['steps']} steps × batch {a['batch_size']}, lr {a['lr']}, from `{r['bundled']}`.",
             "",
             "| harness h' | ceiling C(h') (expert, Wilson 95%) | J before (bundled) | "
             "mismatch M before | J after | gain ΔJ [95% CI] | predicted ΔJ | SFT examples / final loss |",
             "|---|---|---|---|---|---|---|---|"]
    for p in r["points"]:
        name = f"{p['harness']} (A)" if p["own"] else p["harness"]
        ceil = f"{pct(p['expert'])} [{pct(p['expert_lo'])}, {pct(p['expert_hi'])}]"
        if p["ceiling_estimator"] != "expert":
            ceil += f"; used {pct(p['ceiling'])} ({p['ceiling_estimator']})"
        ci = (f" [{pp(p['gain_lo'])}, {pp(p['gain_hi'])}]" if p["gain_lo"] is not None else "")
        lines.append(f"| {name} | {ceil} | {pct(p['j_before'])} | {pp(p['mismatch_before'])} | "
                     f"{pct(p['j_after'])} | {pp(p['gain'])}{ci} | {pp(p['predicted'])} | "
                     f"{p['sft_examples']} / {p['sft_final_loss']} |")
    f = r["fit"]

    terms = [f"{f['intercept']:+.3f}"]
    for key, sym in (("coef_ceiling", "C"), ("coef_mismatch", "M")):
        if f[key] is not None and not math.isnan(f[key]):
            terms.append(f"{f[key]:+.3f}·{sym}")
    lines += ["", f"Gain fit (`fit_gain`, model `{f['model']}`): ΔJ ≈ {' '.join(terms)}; "
              f"R² = {f['r2']:.3f}, n = {f['n']}" + (f" — {f['note']}" if f["note"] else "")]
    lines += ["", "Drop of the bundled policy from A (transfer matrix row som-tools):", ""]
    for eh, d in r["drop_from_A"].items():
        ci = (f" [{pp(d['drop_lo'])}, {pp(d['drop_hi'])}]" if d["drop_lo"] is not None else "")
        lines.append(f"- under {eh}: success {pct(d['success'])}, drop {pp(d['drop'])}{ci}")
    lines += ["", "Conflation (gap = ΔC − ΔM):", ""]
    for c in r["conflation"]:
        lines.append(f"- {c['a']} vs {c['b']}: gap {pp(c['gap'])} = ceiling part "
                     f"{pp(c['ceiling_part'])} − mismatch part {pp(c['mismatch_part'])}")
    secs = r["phase_seconds"]
    lines += ["", "Phase wall times: " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in secs.items()
                                                  if v is not None)
              + f"; total {sum(v for v in secs.values() if v) / 60:.1f} min"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    Experiment(parse_args()).run()
