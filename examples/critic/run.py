"""The protocol: shared V(s) vs conditioned V(s, e), seeds x environments, train and unseen levels.

For every environment in envs.SPECS and every seed, ppo.py trains one policy with
each critic; each final policy is evaluated (unscaled task return, sampled
actions) on its training levels and on unseen levels. Returns are normalised
per environment and level set,

    normalised = (R − R_random) / (R_tuned − R_random),

R_random measured here (uniform random actions, same levels), R_tuned from
envs.Spec (a ceiling, a 'solved' threshold, or the grid world's shortest-path
oracle). The aggregate is the mean normalised return over environments, and the
change is the research's: (conditioned − shared) / |shared|, with a bootstrap
over seeds (each environment and arm resampled on its own).

Writes out/results.jsonl (one line per run), out/summary.json, out/report.md
(the tables) and out/curve-<env>.svg (learning curves, hand-written SVG).

Usage: .venv/bin/python examples/critic/run.py [--quick] [--workers 2] [--envs cartpole,grid]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from multiprocessing import Pool
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from tackroom.core.extras import script_requires  # noqa: E402

script_requires("critic", "train", who="examples/critic")
from envs import SPECS, make_level, make_vector_env  # noqa: E402
from ppo import make_args, train  # noqa: E402

OUT = Path(__file__).parent / "out"
ARMS = ("shared", "harness")

# Full protocol: 5 seeds per arm; steps per environment (reduced for MuJoCo and
# BipedalWalker to fit a 2-core machine in ~25 minutes: see README).
FULL = {"seeds": 5, "steps": {"cartpole": 200_000, "grid": 300_000, "mujoco": 150_000,
                              "bipedal": 100_000},
        "eval_episodes": {"cartpole": 48, "grid": 48, "mujoco": 24, "bipedal": 24}}
QUICK = {"seeds": 2, "steps": {"cartpole": 30_000, "grid": 30_000, "mujoco": 10_240,
                               "bipedal": 10_240},
         "eval_episodes": {"cartpole": 8, "grid": 8, "mujoco": 4, "bipedal": 4}}


def random_return(env: str, levels: tuple, episodes: int, seed: int = 12345) -> float:
    """Mean return of uniformly random actions on ``levels``."""
    envs = make_vector_env(SPECS[env], levels, 1, seed)
    envs.reset(seed=seed)
    rets, ep = [], np.zeros(envs.num_envs)
    while len(rets) < episodes:
        _, r, term, trunc, _ = envs.step(envs.action_space.sample())
        ep += r
        for n in np.flatnonzero(term | trunc):
            rets.append(ep[n])
            ep[n] = 0.0
    envs.close()
    return float(np.mean(rets[:episodes]))


def tuned_return(env: str, levels: tuple) -> float:
    spec = SPECS[env]
    if spec.tuned_reference is not None:
        return spec.tuned_reference
    # The grid world: the mean shortest-path return over the level set's mazes.
    from envs import MAX_STEPS
    return float(np.mean([1.0 - 0.9 * make_level(s)[3] / MAX_STEPS
                          for pool in levels for s in pool]))


def job(a: tuple) -> dict:
    env, critic, seed, steps, episodes = a
    out = train(make_args(env, critic=critic, seed=seed, total_timesteps=steps,
                          eval_episodes=episodes))
    print(f"{env:9s} {critic:8s} seed {seed}  train {out['final']['train']:9.3f}  "
          f"unseen {out['final']['unseen']:9.3f}  ({out['wall_s']} s)", flush=True)
    return out


def boot_mean(x: np.ndarray, rng: np.random.Generator, n: int = 10_000) -> tuple[float, float]:
    idx = rng.integers(len(x), size=(n, len(x)))
    m = x[idx].mean(1)
    return float(np.percentile(m, 2.5)), float(np.percentile(m, 97.5))


def summarise(runs: list[dict], refs: dict) -> dict:
    rng = np.random.default_rng(0)
    envs = [e for e in SPECS if any(r["env"] == e for r in runs)]
    norm = {}   # (env, arm, split) -> normalised returns over seeds
    for e in envs:
        for arm in ARMS:
            for split in ("train", "unseen"):
                lo, hi = refs[e][split]["random"], refs[e][split]["tuned"]
                xs = [(r["final"][split] - lo) / (hi - lo) for r in
                      sorted(runs, key=lambda r: r["seed"]) if r["env"] == e and r["critic"] == arm]
                norm[e, arm, split] = np.asarray(xs)
    table = {}
    for e in envs:
        for split in ("train", "unseen"):
            for arm in ARMS:
                x = norm[e, arm, split]
                raw = [r["final"][split] for r in runs if r["env"] == e and r["critic"] == arm]
                table[f"{e}/{split}/{arm}"] = {
                    "n": len(x), "raw_mean": float(np.mean(raw)), "norm_mean": float(x.mean()),
                    "norm_ci": boot_mean(x, rng)}
    agg = {}
    for split in ("train", "unseen"):
        means = {arm: np.mean([norm[e, arm, split].mean() for e in envs]) for arm in ARMS}
        boots = []
        for _ in range(10_000):
            m = {arm: np.mean([rng.choice(norm[e, arm, split], len(norm[e, arm, split])).mean()
                               for e in envs]) for arm in ARMS}
            boots.append((m["harness"] - m["shared"]) / abs(m["shared"]) * 100)
        agg[split] = {"shared": float(means["shared"]), "harness": float(means["harness"]),
                      "change_pct": float((means["harness"] - means["shared"])
                                          / abs(means["shared"]) * 100),
                      "change_ci": (float(np.percentile(boots, 2.5)),
                                    float(np.percentile(boots, 97.5)))}
    return {"envs": envs, "table": table, "aggregate": agg, "refs": refs}


def report(summary: dict, wall: dict, total_wall: float, mode: str) -> str:
    lines = [f"Mode: {mode}. Normalised return = (R − R_random) / (R_tuned − R_random); "
             "mean over seeds [95% bootstrap interval]; raw = mean unscaled return.", ""]
    for e in summary["envs"]:
        r = summary["refs"][e]
        lines += [f"### {e}", "",
                  f"R_random train {r['train']['random']:.3f}, unseen {r['unseen']['random']:.3f}; "
                  f"R_tuned train {r['train']['tuned']:.3f}, unseen {r['unseen']['tuned']:.3f} "
                  f"({SPECS[e].tuned_source}); wall {wall.get(e, 0):.0f} s of runs", "",
                  "| critic | seeds | train levels (norm.) | raw | unseen levels (norm.) | raw |",
                  "|---|---|---|---|---|---|"]
        for arm in ARMS:
            t, u = summary["table"][f"{e}/train/{arm}"], summary["table"][f"{e}/unseen/{arm}"]
            name = "shared V(s)" if arm == "shared" else "conditioned V(s, e)"
            lines.append(f"| {name} | {t['n']} | {t['norm_mean']:.3f} [{t['norm_ci'][0]:.3f}, "
                         f"{t['norm_ci'][1]:.3f}] | {t['raw_mean']:.2f} | {u['norm_mean']:.3f} "
                         f"[{u['norm_ci'][0]:.3f}, {u['norm_ci'][1]:.3f}] | {u['raw_mean']:.2f} |")
        lines.append("")
    lines += ["### Aggregate (mean normalised return over environments)", "",
              "| levels | shared | conditioned | change (cond − shared)/|shared| [95% CI] |",
              "|---|---|---|---|"]
    for split in ("train", "unseen"):
        a = summary["aggregate"][split]
        lines.append(f"| {split} | {a['shared']:.3f} | {a['harness']:.3f} | "
                     f"{a['change_pct']:+.1f}% [{a['change_ci'][0]:+.1f}%, {a['change_ci'][1]:+.1f}%] |")
    lines += ["", f"Total wall time: {total_wall:.0f} s"]
    return "\n".join(lines) + "\n"


def svg_curves(env: str, runs: list[dict], refs: dict, path: Path) -> None:
    """Normalised training-level return vs steps: thin lines per seed, thick the mean."""
    W, H, pad = 560, 340, 50
    lo, hi = refs["train"]["random"], refs["train"]["tuned"]
    colours = {"shared": "#d62728", "harness": "#1f77b4"}
    series = {arm: [r["curve"] for r in runs if r["env"] == env and r["critic"] == arm]
              for arm in ARMS}
    xmax = max(c[-1]["step"] for cs in series.values() for c in cs)

    def y_of(v: float) -> float:
        return (v - lo) / (hi - lo)

    ys = [y_of(p["train_return"]) for cs in series.values() for c in cs for p in c
          if p["train_return"] == p["train_return"]]
    ymin, ymax = min(0.0, min(ys)), max(1.0, max(ys))

    def pt(x: float, y: float) -> str:
        return (f"{pad + x / xmax * (W - 2 * pad):.1f},"
                f"{H - pad - (y - ymin) / (ymax - ymin) * (H - 2 * pad):.1f}")

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle">{env}: normalised return on '
           f'training levels (training episodes)</text>',
           f'<polyline points="{pt(0, ymin)} {pt(xmax, ymin)}" stroke="black" fill="none"/>',
           f'<polyline points="{pt(0, ymin)} {pt(0, ymax)}" stroke="black" fill="none"/>']
    for yv in (0.0, 0.5, 1.0):
        if ymin <= yv <= ymax:
            x0, y0 = pt(0, yv).split(",")
            out.append(f'<text x="{float(x0) - 6}" y="{float(y0) + 4}" text-anchor="end">{yv}</text>')
            out.append(f'<polyline points="{pt(0, yv)} {pt(xmax, yv)}" stroke="#ddd" fill="none"/>')
    out.append(f'<text x="{W - pad}" y="{H - pad + 18}" text-anchor="end">{xmax:,} steps</text>')
    for arm, cs in series.items():
        for c in cs:
            pts = " ".join(pt(p["step"], y_of(p["train_return"])) for p in c
                           if p["train_return"] == p["train_return"])
            out.append(f'<polyline points="{pts}" stroke="{colours[arm]}" stroke-opacity="0.25" '
                       f'fill="none"/>')
        n = min(len(c) for c in cs)
        mean = [np.nanmean([y_of(c[i]["train_return"]) for c in cs]) for i in range(n)]
        pts = " ".join(pt(cs[0][i]["step"], m) for i, m in enumerate(mean) if m == m)
        out.append(f'<polyline points="{pts}" stroke="{colours[arm]}" stroke-width="2.5" '
                   f'fill="none"/>')
    for i, arm in enumerate(ARMS):
        label = "shared V(s)" if arm == "shared" else "conditioned V(s, e)"
        out.append(f'<text x="{pad + 10}" y="{pad + 16 * i}" fill="{colours[arm]}">{label}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 seeds, a few thousand steps")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--envs", default=",".join(SPECS))
    p.add_argument("--out", default=str(OUT))
    a = p.parse_args()
    proto, mode = (QUICK, "quick") if a.quick else (FULL, "full")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    envs = [e for e in a.envs.split(",") if e]
    start = time.time()
    refs = {e: {split: {"random": random_return(e, lv, 48 if not a.quick else 8),
                        "tuned": tuned_return(e, lv)}
                for split, lv in (("train", SPECS[e].train_levels),
                                  ("unseen", SPECS[e].unseen_levels))} for e in envs}
    print("references:", json.dumps(refs), flush=True)
    # The longest runs first, so the two workers finish together.
    jobs = [(e, arm, s, proto["steps"][e], proto["eval_episodes"][e])
            for e in sorted(envs, key=lambda e: ("bipedal", "mujoco", "grid", "cartpole").index(e))
            for s in range(proto["seeds"]) for arm in ARMS]
    runs = []
    with Pool(a.workers) as pool, open(out / "results.jsonl", "w") as f:
        for r in pool.imap_unordered(job, jobs):
            runs.append(r)
            f.write(json.dumps(r) + "\n")
            f.flush()
    total = time.time() - start
    wall = {e: sum(r["wall_s"] for r in runs if r["env"] == e) for e in envs}
    summary = summarise(runs, refs)
    (out / "summary.json").write_text(json.dumps({**summary, "wall_s": wall,
                                                  "total_wall_s": total, "mode": mode},
                                                 indent=1) + "\n")
    text = report(summary, wall, total, mode)
    (out / "report.md").write_text(text)
    for e in envs:
        svg_curves(e, runs, refs[e], out / f"curve-{e}.svg")
    print(text)


if __name__ == "__main__":
    main()
