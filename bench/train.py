"""A GSPO LoRA update step: tackroom vs TRL's GRPOTrainer, same model, same batch (a benchmark).

Both sides train a rank-32 LoRA adapter on the same local model (built offline
by ``tackroom model init``) with the same batch: one group of G completions of
one real harness prompt (the first turn of a toy task under ``som-tools``:
system prompt, tool schemas, page), rewards alternating 1/0.

* tackroom: :class:`tackroom.train.learner.Learner` — ``algo.algorithm = "gspo"``,
  its shared-prompt forward pass, loss, backward and AdamW step.
* TRL: a real ``GRPOTrainer`` (``importance_sampling_level="sequence"``,
  ε = 3e-4 / 4e-4, ``loss_type="grpo"``) built by TRL's own ``__init__``
  (tests/trl_reference.py); its batch from its own
  ``_generate_and_score_completions`` on the fixed completions; timed:
  ``compute_loss`` + ``accelerator.backward`` + optimiser step.

Generation is not timed on either side (π_old comes with the batch, as
recorded log-probs do). Each side runs in a fresh process, so peak memory is
its own: the growth of resident memory from just before the first step
(CPU; sampled every 2 ms), or ``torch.cuda.max_memory_allocated`` above the
memory allocated before it (CUDA).
Reported: completion tokens trained per second (median step), the ratio
tackroom / TRL (target ≥ 1.0), and peak memory.

Usage: .venv/bin/python bench/train.py [--size small] [--group 8] [--completion 64]
                                       [--steps 5] [--threads 2] [--device auto]

``--async`` measures something else: whole ``tackroom train`` steps against a
latency-bound rollout server (``rollout.backend = "openai"``; a real
``tackroom serve`` — HTTP, adapter hot-loading — whose model answers a fixed
command after ``--latency`` seconds and costs no CPU, as a remote vLLM's GPUs
would), synchronous
(``rollout.max_staleness = 0``) against async (``= 1``: the next step's rollouts
play while this one trains). The latency defaults to the measured update time,
so rollouts and updates take about as long (target: async ≥ 1.5× sync steps/s)::

    .venv/bin/python bench/train.py --async [--size small] [--steps 5] [--latency auto]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tackroom.testing.harnesses import command_harness  # no torch: cheap to import

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

RANK, ALPHA = 32, 64


# ---------------------------------------------------------------------------- shared set-up

def _prompt_messages() -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The first prompt of a toy episode under som-tools, and the harness's tool schemas."""
    from tackroom.core.policy import Sampling
    from tackroom.harness.spec import load_harness
    from tackroom.policies import make_policy
    from tackroom.runner.grid import plan_grid, run_cells
    from tackroom.suites import get_suite

    suite = get_suite("toy")
    h = load_harness("som-tools")
    cells = plan_grid([suite.task("click-button")], [h], [make_policy("expert")], [0],
                      Sampling()).cells
    ep = asyncio.run(run_cells(cells, suite, "bench"))[0]
    return ep.turns[0].messages, h.parser.tools(h.interface)


def _batch(model_dir: str, group: int, completion: int) -> dict[str, Any]:
    """Prompt text and ids, G completions (token ids), rewards: identical for both sides."""
    import torch
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    messages, tools = _prompt_messages()
    text = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True,
                                   tokenize=False)
    prompt_ids = tok(text)["input_ids"]
    special = set(tok.all_special_ids)
    allowed = torch.tensor([i for i in range(len(tok)) if i not in special])
    g = torch.Generator().manual_seed(0)
    completions = [allowed[torch.randint(len(allowed), (completion,), generator=g)].tolist()
                   for _ in range(group)]
    return {"text": text, "prompt_ids": prompt_ids, "completions": completions,
            "rewards": [float(i % 2 == 0) for i in range(group)]}


class _PeakRSS:
    """Peak resident memory above a baseline, sampled by a thread (CPU runs)."""

    def __init__(self) -> None:
        self.base = self._rss()
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    @staticmethod
    def _rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._rss())
            time.sleep(0.002)

    def __enter__(self) -> _PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())

    @property
    def grown(self) -> int:
        return self.peak - self.base


def _measure(step, steps: int, device: str) -> dict[str, float]:
    """Median seconds per step (after one warm-up step) and peak memory in bytes.

    Peak memory is measured from just before the warm-up step — the step's whole
    working set: activations, logits, gradients, optimiser state.
    """
    import torch

    times: list[float] = []
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()  # warm-up: allocator, kernels, optimiser state
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        peak = torch.cuda.max_memory_allocated() - base
    else:
        with _PeakRSS() as mem:
            step()
            for _ in range(steps):
                t0 = time.perf_counter()
                step()
                times.append(time.perf_counter() - t0)
        peak = mem.grown
    return {"seconds": statistics.median(times), "peak_bytes": float(peak)}


# ---------------------------------------------------------------------------- the two sides

def run_tackroom(model_dir: str, out: str, batch: dict[str, Any], args: dict[str, Any]
                 ) -> dict[str, float]:
    import torch

    from tackroom.train.advantages import compute_advantages
    from tackroom.train.config import RLConfig
    from tackroom.train.engine import TrainEngine
    from tackroom.train.learner import Learner
    from tackroom.train.samples import TurnSample

    torch.set_num_threads(args["threads"])
    group = len(batch["completions"])
    cfg = RLConfig(algorithm="gspo", lora_rank=RANK, lora_alpha=ALPHA, lr=1e-5,
                   micro_batch_size=group, steps=args["steps"] + 1, device=args["device"],
                   max_completion_length=args["completion"])
    engine = TrainEngine(model_dir, out, cfg.steps, lora=cfg.lora_settings(),
                         optim=cfg.optim_settings(), device=args["device"],
                         threads=args["threads"])
    learner = Learner(engine, cfg)
    adv = compute_advantages([{"task": "t", "harness": "h", "reward": r}
                              for r in batch["rewards"]]).values
    samples = [TurnSample(list(batch["prompt_ids"]), list(c), None, i, 0, "h", advantage=a)
               for i, (c, a) in enumerate(zip(batch["completions"], adv, strict=True))]
    learner.before_update(samples, [])  # π_old, as a sampler's recorded log-probs would be
    return _measure(lambda: learner.update(samples), args["steps"], args["device"])


def run_trl(model_dir: str, out: str, batch: dict[str, Any], args: dict[str, Any]
            ) -> dict[str, float]:
    import runpy  # the TRL reference is a test helper (tests/trl_reference.py), not installed

    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ref = runpy.run_path(str(Path(__file__).resolve().parents[1] / "tests" / "trl_reference.py"))
    make_trainer, trl_batch = ref["make_trainer"], ref["trl_batch"]

    torch.set_num_threads(args["threads"])
    group = len(batch["completions"])
    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    from tackroom.policies.chat_format import no_progress_bars

    with no_progress_bars():
        model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True,
                                                     dtype=torch.float32)
    trainer = make_trainer(
        out, num_generations=group, max_completion_length=args["completion"], model=model,
        tokenizer=tok, peft_config=LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0,
                                              target_modules="all-linear",
                                              task_type="CAUSAL_LM"),
        importance_sampling_level="sequence", epsilon=3e-4, epsilon_high=4e-4,
        loss_type="grpo", learning_rate=1e-5, use_cpu=not args["device"].startswith("cuda"))
    inputs = trl_batch(trainer, [batch["text"]] * group, batch["rewards"],
                       batch["completions"])
    assert inputs["prompt_ids"][0].tolist()[-len(batch["prompt_ids"]):] == batch["prompt_ids"]
    trainer.create_optimizer()
    optimizer = trainer.optimizer

    def step() -> None:
        loss = trainer.compute_loss(trainer.model, inputs)
        trainer.accelerator.backward(loss)
        torch.nn.utils.clip_grad_norm_([p for p in trainer.model.parameters()
                                        if p.requires_grad], 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return _measure(step, args["steps"], args["device"])


def _child(side: str, model_dir: str, batch: dict[str, Any], args: dict[str, Any],
           queue: Any) -> None:
    import warnings

    # peft and TRL call transformers APIs it deprecates; not what is measured here.
    warnings.simplefilter("ignore", FutureWarning)
    try:
        with tempfile.TemporaryDirectory() as out:
            fn = run_tackroom if side == "tackroom" else run_trl
            queue.put((side, fn(model_dir, out, batch, args), None))
    except Exception as e:  # noqa: BLE001 - reported by the parent
        import traceback

        queue.put((side, None, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


# ------------------------------------------------------------ async vs sync, whole steps

_BENCH_HARNESS = command_harness("bench-cmd1", wall_seconds=120)


class _LatencyPolicy:
    """What ``tackroom serve`` serves in this benchmark: a fixed reply after ``latency`` s.

    The model's answer costs no CPU here (a remote vLLM's GPUs generate), so a
    rollout batch takes the server's latency, not this machine's cores: the
    latency-bound case async training is for. Replies are real token ids of the
    model's vocabulary (a ``click`` command and the stop token) with log-probs;
    adapters are recorded by name as a server would load them.
    """

    max_batch = 64
    batch_wait_ms = 250.0  # the server admits a whole step's requests as one batch

    def __init__(self, model_dir: str, latency: float) -> None:
        from transformers import AutoTokenizer

        self.model_dir = model_dir
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        self.latency = latency
        self.max_positions = None
        end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.stop_ids = [end]
        self._ids = self.tokenizer("click 1", add_special_tokens=False)["input_ids"] + [end]
        self._adapters: dict[str, str] = {}
        self.adapter: str | None = None

    def prompt_ids(self, messages: list[dict[str, Any]], tools: Any = None) -> list[int]:
        ids = self.tokenizer.apply_chat_template(messages, tools=tools or None,
                                                 add_generation_prompt=True, tokenize=True,
                                                 return_dict=False)
        return [int(i) for i in (ids[0] if ids and isinstance(ids[0], list) else ids)]

    def load_adapter(self, name: str, path: str) -> None:
        self._adapters[name] = path

    def unload_adapter(self, name: str) -> None:
        self._adapters.pop(name, None)

    def set_adapter(self, name: str | None) -> None:
        self.adapter = name

    async def act(self, request: Any) -> Any:
        from tackroom.core.policy import PolicyResponse

        adapter = self.adapter
        await asyncio.sleep(self.latency)
        n = len(self._ids)
        return PolicyResponse(text="click 1", prompt_tokens=0, completion_tokens=n,
                              token_ids=list(self._ids), logprobs=[-0.5] * n,
                              model=self.model_dir, adapter=adapter, finish_reason="stop")

    async def aclose(self) -> None:
        return None


def _train_run(model_dir: str, work: Path, base_url: str, staleness: int, steps: int,
               threads: int, tag: str) -> dict[str, float]:
    """One ``tackroom train`` run against the server; seconds per step after the first."""
    from tackroom.records import RecordStore
    from tackroom.train.config import RLConfig
    from tackroom.train.rl import run_rl

    cfg = RLConfig.from_toml(None, [
        f"model.path={model_dir}", "model.device=cpu", "data.suite=toy",
        "data.tasks=focus-text,click-dialog,click-button,click-link",
        "data.harnesses=bench-cmd1", "data.tasks_per_step=4", "grouping.group_size=4",
        "rollout.max_tokens=16", "rollout.concurrency=16", "rollout.backend=openai",
        f"rollout.base_url={base_url}", f"rollout.max_staleness={staleness}",
        "lora.rank=8", "lora.alpha=16", "optim.micro_batch_size=4", "optim.lr=1e-4",
        f"optim.steps={steps}", "run.checkpoint_every=0", f"run.out_dir={work / tag}"])
    marks: list[float] = []
    metrics: list[dict[str, float]] = []

    def on_step(step: int, total: int, m: dict[str, float]) -> None:
        marks.append(time.perf_counter())
        metrics.append(m)

    with RecordStore(work / f"{tag}.duckdb") as store:
        run_rl(cfg, store, tag, threads=threads, on_step=on_step)
    per_step = (marks[-1] - marks[0]) / max(1, len(marks) - 1)
    rest = metrics[1:] or metrics
    return {"seconds": per_step,
            "update": statistics.median(m["update_seconds"] for m in rest),
            "rollout": statistics.median(m["rollout_seconds"] for m in rest),
            "staleness_max": max(m.get("staleness_max", 0.0) for m in metrics)}


def bench_async(a: argparse.Namespace) -> None:
    """Sync vs async ``tackroom train`` steps against a latency-bound ``tackroom serve``."""
    import warnings

    import torch

    from tackroom.models import init_model
    from tackroom.models.corpus import harness_corpus
    from tackroom.serve import ServerThread

    warnings.simplefilter("ignore", FutureWarning)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "harnesses").mkdir()
        (work / "harnesses" / "bench-cmd1.toml").write_text(_BENCH_HARNESS)
        os.environ["TACKROOM_HARNESS_PATH"] = str(work / "harnesses")
        model_dir = str(init_model(work / "model", size=a.size,
                                   corpus=harness_corpus(seeds=(0,)), seed=0))
        server_policy = _LatencyPolicy(model_dir, 0.0)
        with ServerThread(policy=server_policy) as srv:
            if a.latency == "auto":  # make a rollout batch take about one update's time
                probe = _train_run(model_dir, work, srv.base_url, 0, 3, 1, "probe")
                server_policy.latency = max(0.05, probe["update"] - probe["rollout"])
            else:
                server_policy.latency = float(a.latency)
            sync = _train_run(model_dir, work, srv.base_url, 0, a.steps, 1, "sync")
            asyn = _train_run(model_dir, work, srv.base_url, 1, a.steps, 1, "async")
    latency = server_policy.latency
    print(f"tackroom train against a latency-bound tackroom serve: model size {a.size!r}, "
          f"CPU, 1 thread; 16 one-turn episodes per step; every request waits "
          f"{latency:.2f} s; {a.steps} steps each (the first not timed)")
    print(f"{'':22} {'s/step':>8} {'steps/s':>8} {'rollout s':>10} {'update s':>9} "
          f"{'staleness':>9}")
    for name, r in (("sync (max_staleness 0)", sync), ("async (max_staleness 1)", asyn)):
        print(f"{name:22} {r['seconds']:8.3f} {1 / r['seconds']:8.3f} {r['rollout']:10.3f} "
              f"{r['update']:9.3f} {r['staleness_max']:9.0f}")
    print(f"steps/s ratio async / sync: {sync['seconds'] / asyn['seconds']:.2f}× "
          "(target ≥ 1.5 when rollouts and updates take similar time)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default=None,
                    help="tackroom model init size")
    ap.add_argument("--group", type=int, default=8, help="completions per group (G)")
    ap.add_argument("--completion", type=int, default=64, help="tokens per completion")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per side")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    ap.add_argument("--device", default="auto", help="auto, cpu or cuda")
    ap.add_argument("--async", dest="async_", action="store_true",
                    help="instead: sync vs async tackroom train steps against a server")
    ap.add_argument("--latency", default="auto",
                    help="--async: seconds each rollout request waits (auto: the update time)")
    a = ap.parse_args()
    if a.async_:
        a.size = a.size or "small"
        a.steps = max(a.steps, 3)
        bench_async(a)
        return
    a.size = a.size or "small"
    import torch

    device = a.device if a.device != "auto" else ("cuda" if torch.cuda.is_available()
                                                   else "cpu")
    from tackroom.models import init_model

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = str(init_model(Path(tmp) / "model", size=a.size, seed=0))
        batch = _batch(model_dir, a.group, a.completion)
        args = {"steps": a.steps, "threads": a.threads, "device": device,
                "completion": a.completion}
        ctx = mp.get_context("spawn")
        results: dict[str, dict[str, float]] = {}
        for side in ("tackroom", "trl"):
            queue = ctx.Queue()
            proc = ctx.Process(target=_child, args=(side, model_dir, batch, args, queue))
            proc.start()
            name, result, error = queue.get()
            proc.join()
            if error:
                raise SystemExit(f"{side} failed:\n{error}")
            results[name] = result
    tokens = a.group * a.completion
    print(f"GSPO LoRA (r={RANK}) update step, model size {a.size!r}, device {device}, "
          f"{a.threads} thread(s); batch: G = {a.group} completions × {a.completion} tokens "
          f"after a {len(batch['prompt_ids'])}-token prompt")
    print(f"{'':10} {'s/step':>8} {'tokens/s':>10} {'peak memory':>12}")
    for side in ("tackroom", "trl"):
        r = results[side]
        print(f"{side:10} {r['seconds']:8.3f} {tokens / r['seconds']:10.1f} "
              f"{r['peak_bytes'] / 2**20:9.1f} MiB")
    ratio = results["trl"]["seconds"] / results["tackroom"]["seconds"]
    print(f"tokens/s ratio tackroom / TRL: {ratio:.2f}× (target ≥ 1.0)")


if __name__ == "__main__":
    main()
