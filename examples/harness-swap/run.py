"""The harness-swap experiment of RESEARCH.md §1 at small scale (see README.md here).

A policy trained under harness A (the bundled model, SFT under ``som-tools``) is
evaluated under other harnesses (the drop), trained further under each of them
with one fixed budget (the gains), and the gains are regressed on the ceiling
C(h') and the mismatch M(π, h') measured *before* that training.

Phases (each is skipped when ``out/state.json`` says it is done, so an
interrupted run continues where it stopped; ``--fresh`` starts over):

1. ``record``  expert episodes under every target harness on training seeds
2. ``before``  the bundled policy and the expert under A and every target, on eval seeds
3. ``sft-H``   ``tackroom sft`` from the bundled weights on H's expert episodes (fixed steps)
4. ``after-H`` the further-trained model under H, on the same eval seeds
5. analysis    gain points + fit (``tackroom.analysis.gain``), conflation, the HTML report

Run from the repository root:  .venv/bin/python examples/harness-swap/run.py
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
TACKROOM = str(ROOT / ".venv" / "bin" / "tackroom")

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


def env() -> dict[str, str]:
    e = dict(os.environ)
    # One torch thread everywhere: `hf:` policies have no CLI option for it, and torch
    # reads OMP_NUM_THREADS at start-up (the bundled policy and `sft --threads 1` set it too).
    e.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    e.setdefault("MINIWOB_CHROME_BINARY", "/usr/bin/chromium")
    e.setdefault("MINIWOB_CHROMEDRIVER", "/usr/bin/chromedriver")
    return e


class Experiment:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.out)
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

    def sh(self, name: str, cmd: list[str]) -> str:
        log = self.out / "logs" / f"{name}.log"
        print(f"$ {' '.join(cmd)}", flush=True)
        t0 = time.time()
        with open(log, "w") as f:
            proc = subprocess.run(cmd, cwd=ROOT, env=env(), stdout=f, stderr=subprocess.STDOUT,
                                  text=True)
        text = log.read_text()
        if proc.returncode != 0:
            sys.exit(f"{name} failed (exit {proc.returncode}); log: {log}\n{text[-3000:]}")
        print(f"  {name}: {time.time() - t0:.0f} s (log {self.rel(log)})", flush=True)
        return text

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
        text = self.sh(name, [TACKROOM, "eval", "--suite", "miniwob", "--tasks", TASKS,
                              "--harness", ",".join(harnesses), "--policy", ",".join(policies),
                              "--seeds", seeds, "--max-tokens", str(self.args.max_tokens),
                              "-n", str(self.args.concurrency), "--db", self.db])
        m = re.findall(r"\(run (\S+?)\)", text)
        if not m:
            sys.exit(f"{name}: no run id in the output")
        return {"run": m[-1]}

    def record(self) -> dict:
        return self.eval("record", self.targets, ["expert"], self.args.train_seeds)

    def before(self) -> dict:
        hs = [HARNESS_A] + [h for h in self.targets if h != HARNESS_A]
        return self.eval("before", hs, ["bundled", "expert"], self.args.eval_seeds)

    def n_examples(self, harness: str) -> int:
        """Trainable turns `tackroom sft` will see (parsed, non-empty replies of successes)."""
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
        # `tackroom sft` runs round(ceil(n / batch) * epochs) steps: pick epochs for exactly --steps.
        epochs = self.args.steps / per_epoch
        out = self.out / f"sft-{harness}"
        shutil.rmtree(out, ignore_errors=True)
        text = self.sh(f"sft-{harness}", [
            TACKROOM, "sft", str(ROOT / "tackroom/policies/bundled_model"), "--out", self.rel(out),
            "--db", self.db, "--run", self.state["phases"]["record"]["run"], "--policy", "expert",
            "--harness", harness, "--epochs", f"{epochs:.6f}",
            "--batch-size", str(self.args.batch_size), "--lr", str(self.args.lr),
            "--warmup", str(self.args.warmup), "--checkpoint-every", "1000", "--threads", "1",
            "--save-dtype", "float16"])
        m = re.search(r"trained: (\d+) examples, (\d+) steps, final loss ([\d.]+)", text)
        acc = re.findall(r"acc (\d+)%", text)
        return {"model": self.rel(out / "final"), "examples": n, "epochs": epochs,
                "steps": int(m.group(2)) if m else None,
                "final_loss": float(m.group(3)) if m else None,
                "final_token_acc": int(acc[-1]) / 100 if acc else None}

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

    # The HTML report over every run, as a user makes it: `tackroom report` with the
    # training harness of every policy (the transfer matrix: the bundled policy and the
    # one trained further under A share the row som-tools; the report adds one row per
    # policy) and the gain pairs (the gain scatter, ceilings measured before).
    report = exp.out / "report.html"
    trained = [f"{bundled}={HARNESS_A}"] + [f"{ph[f'after-{h}']['policy']}={h}"
                                          for h in exp.targets]
    exp.sh("report", [TACKROOM, "report", ph["before"]["run"], *after_runs, "--db", exp.db,
                      "--out", str(report), *[a for t in trained for a in ("--trained", t)],
                      *[a for before, after, h in pairs
                        for a in ("--gain", f"{before}={after}@{h}")]])

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
