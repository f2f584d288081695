"""HTML report build time on a 24,000-episode run (a benchmark, not a test).

Synthesises a record store shaped like a real sealed evaluation — 40 tasks ×
4 harnesses × 5 policies (the expert, a base model, two policies trained
under one harness each, a further-trained one) × 30 seeds, 3–5 turns per
episode with growing message histories, a few infra errors — then times
:func:`report_data` and :func:`build_report` and prints the HTML size.
Target: the build in < 10 s.

With ``--browser`` it also opens the report in headless Chromium and times
the page load and the episode browser's first render.

Usage: .venv/bin/python bench/report.py [--episodes 24000] [--max-browser 2000] [--browser]
                                         [--store PATH] [--out report.html]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from tackroom.core.episode import Episode, Outcome, Turn, episode_id
from tackroom.records import RecordStore
from tackroom.report.html import build_report, report_data

HARNESSES = ["som-tools", "html-commands", "outline-coords", "som-tools-reflect"]
POLICIES = ["expert", "base", "tuned-som", "tuned-html", "tuned-som-v2"]
TRAIN = {"tuned-som": "som-tools", "tuned-html": "html-commands", "tuned-som-v2": "outline-coords"}
GAIN_PAIRS = [("tuned-som", "tuned-som-v2", "outline-coords"), ("base", "tuned-som", "som-tools"),
              ("base", "tuned-html", "html-commands")]
SYSTEM = ("You are a web agent. Each turn you see the task and a numbered list of the page's "
          "elements. Act on an element by its [number]. Complete the task exactly as stated.\n") * 3
SAMPLING = {"temperature": 0.0, "top_p": 1.0, "max_tokens": 512, "seed": None, "logprobs": False}


def _p_success(policy: str, harness: str, task_no: int) -> float:
    if policy == "expert":
        return 0.97
    base = {"base": 0.35, "tuned-som": 0.45, "tuned-html": 0.45, "tuned-som-v2": 0.5}[policy]
    if TRAIN.get(policy) == harness:
        base += 0.35
    return max(0.02, min(0.98, base + 0.02 * (task_no % 7) - 0.06))


def _page(rng: random.Random, n: int = 12) -> str:
    return "\n".join(f'[{i}] button "{rng.choice(WORDS)}"' for i in range(3, 3 + n))


WORDS = ("apple", "amber", "anchor", "arrow", "bacon", "badge", "basil", "bench", "berry",
         "blaze", "bloom", "brick", "cabin", "cable", "candy", "cargo", "cedar", "chalk")


def synth_episode(run_id: str, task_no: int, harness: str, policy: str, seed: int,
                  rng: random.Random) -> Episode:
    task = f"toy/task-{task_no:02d}"
    hh = f"h{HARNESSES.index(harness):011d}"
    n_turns = rng.randint(3, 5)
    roll = rng.random()
    outcome = (Outcome.INFRA_ERROR if roll < 0.002 else
               Outcome.SUCCESS if rng.random() < _p_success(policy, harness, task_no) else
               rng.choice([Outcome.FAILURE, Outcome.FAILURE, Outcome.BUDGET_EXHAUSTED]))
    instruction = f'Click on the "{rng.choice(WORDS)}" button, then submit.'
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"Task: {instruction}\n\nPage:\n{_page(rng)}"}]
    turns = []
    for i in range(n_turns):
        bad = policy != "expert" and rng.random() < 0.1
        raw = "click the thing" if bad else f"```\nclick {rng.randint(3, 14)}\n```"
        obs = _page(rng)
        turns.append(Turn(
            index=i, messages=list(messages), raw_text=raw,
            parse_error="no command found in the reply" if bad else None,
            feedback="Your last reply could not be read as an action." if bad else None,
            actions=[] if bad else [{"kind": "click", "ref": rng.randint(3, 14)}],
            observation=obs, reward=1.0 if (outcome is Outcome.SUCCESS and i == n_turns - 1)
            else 0.0, prompt_tokens=300 + 120 * i, completion_tokens=rng.randint(8, 40),
            t_policy=0.3, t_env=0.01, t_harness=0.001))
        messages = messages + [{"role": "assistant", "content": raw},
                               {"role": "user", "content": f"Page:\n{obs}"}]
    return Episode(
        episode_id=episode_id(task, hh, policy, SAMPLING, seed), run_id=run_id, task=task,
        suite="toy", harness=harness, harness_hash=hh, policy=policy, seed=seed,
        sampling=SAMPLING, outcome=outcome, reward=float(outcome is Outcome.SUCCESS),
        instruction=instruction, turns=turns,
        error="browser crashed" if outcome is Outcome.INFRA_ERROR else None,
        started_at=time.time(), ended_at=time.time() + 2.0)


def synthesise(path: Path, n_episodes: int, run_id: str = "bench-report") -> int:
    rng = random.Random(0)
    n_tasks = 40
    seeds = max(1, n_episodes // (n_tasks * len(HARNESSES) * len(POLICIES)))
    store = RecordStore(path)
    store.start_run(run_id, "eval", {"suite": "toy", "harnesses": HARNESSES,
                                     "policies": POLICIES}, n_tasks * len(HARNESSES)
                    * len(POLICIES) * seeds)
    batch: list[Episode] = []
    n = 0
    for t in range(n_tasks):
        for h in HARNESSES:
            for p in POLICIES:
                for s in range(seeds):
                    batch.append(synth_episode(run_id, t, h, p, s, rng))
                    n += 1
                    if len(batch) >= 2000:
                        store.append_many(batch)
                        batch = []
    store.append_many(batch)
    store.finish_run(run_id)
    store.close()
    return n


def time_browser(html: Path) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    with tempfile.TemporaryDirectory() as profile:
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-background-networking", "--no-first-run", "--disable-sync",
                     f"--user-data-dir={profile}"):
            options.add_argument(flag)
        options.binary_location = "/usr/bin/chromium"
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        try:
            t0 = time.perf_counter()
            driver.get(html.resolve().as_uri())
            rows = driver.execute_script("return document.querySelectorAll('#eplist tr.ep').length")
            load = time.perf_counter() - t0
            timing = driver.execute_script(
                "var t = performance.timing; return t.loadEventEnd - t.navigationStart;")
            t0 = time.perf_counter()
            driver.execute_script("var s = document.querySelector('select[data-f=outcome]');"
                                  "s.value = '1'; s.dispatchEvent(new Event('change'));")
            refilter = time.perf_counter() - t0
            print(f"browser: page ready in {load:.2f} s (navigation→load {timing} ms), "
                  f"{rows} rows listed, re-filter {1000 * refilter:.0f} ms")
        finally:
            driver.quit()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=24_000)
    ap.add_argument("--max-browser", type=int, default=2000)
    ap.add_argument("--browser", action="store_true", help="also time the page in Chromium")
    ap.add_argument("--store", type=Path, default=None,
                    help="keep the synthetic store here and reuse it on the next run "
                         "(synthesis is dominated by the store's write path, ~20 s)")
    ap.add_argument("--out", type=Path, default=None, help="also copy the report here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = args.store or Path(tmp) / "bench.duckdb"
        if db.exists():
            with RecordStore(db, read_only=True) as store:
                n = store.count("bench-report")
            print(f"reusing {db} ({n:,} episodes)")
        else:
            t0 = time.perf_counter()
            n = synthesise(db, args.episodes)
            print(f"synthesised {n:,} episodes in {time.perf_counter() - t0:.1f} s "
                  "(RecordStore.append_many)")
        with RecordStore(db, read_only=True) as store:
            t0 = time.perf_counter()
            data = report_data(store, ["bench-report"], TRAIN, gain_pairs=GAIN_PAIRS)
            t_data = time.perf_counter() - t0
            out = Path(tmp) / "report.html"
            t0 = time.perf_counter()
            build_report(store, ["bench-report"], out, train_harness=TRAIN,
                         gain_pairs=GAIN_PAIRS, max_episodes_in_browser=args.max_browser)
            t_build = time.perf_counter() - t0
        size = out.stat().st_size
        missing = sorted(data["notes"])
        print(f"report_data: {t_data:.2f} s; build_report: {t_build:.2f} s "
              f"(target < 10 s) {'OK' if t_build < 10 else 'SLOW'}")
        print(f"HTML: {size / 1e6:.1f} MB for {n:,} episodes listed, "
              f"{min(n, args.max_browser):,} with turns; notes: {missing or 'none'}")
        if args.out:
            args.out.write_bytes(out.read_bytes())
        if args.browser:
            time_browser(out)


if __name__ == "__main__":
    main()
