"""``tackroom train``: multi-harness policy-gradient training on the hf backend.

One loop, read top to bottom in :meth:`_Trainer.run`:

1. **Data** — an *iteration* gathers ``optim.grad_accum`` rollout batches from a
   rollout source (:mod:`tackroom.train.sources`): online (the current policy plays
   ``group_size`` episodes per (task, harness) of ``tasks_per_step`` tasks, under
   tackroom's harnesses or real agent CLIs behind the model gateway;
   :mod:`tackroom.train.rollouts`), frozen records from the store
   (:mod:`tackroom.train.offline`), or an inference server (``rollout.backend =
   "openai"``) with each weight version hot-loaded into it as a LoRA adapter — with
   ``rollout.max_staleness = s > 0`` a background thread plays iteration j's batches
   with iteration j − s's weights while the learner trains (:mod:`tackroom.train.server`).
2. **Samples** — each turn of each scored episode is a completion
   (:mod:`tackroom.train.samples`). Advantages: the episode's group advantage
   (:func:`~tackroom.train.advantages.advantages_from_config`) on each of its
   turns; or, with a critic, GAE over the episode's turns from V(s) / V(s, e)
   read at each turn's last prompt token, whitened over the batch.
3. **Before the update** (no grad) — π_old where the records lack it (or at a
   training temperature other than the recorded 1), π_ref when β > 0, and
   the critic's values for GAE.
4. **Update** — ``algo.num_iterations`` optimiser steps, each one pass over the
   iteration's samples in micro-batches of ``optim.micro_batch_size``; the
   loss normalisers are the whole pass's totals, so the micro-batch
   gradients sum to the full-batch gradient. Loss = policy loss
   (:func:`~tackroom.train.losses.policy_loss_from_config`) + ``value_coef``
   · value loss.
5. **Bookkeeping** — metrics of every step to the store (and the ``run.log_to``
   trackers); checkpoints every ``run.checkpoint_every`` steps (at iteration ends)
   that ``--resume`` continues from exactly (:mod:`tackroom.train.checkpoints`, which
   also names every set of weights by its *version*); greedy evaluation on held-out
   seeds through the ``evaluate`` function the application layer passes in
   (``tackroom.evaluate``: training sits below the app and does not import it).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tackroom.core.episode import Episode, Outcome
from tackroom.core.errors import ConfigError, TackroomError
from tackroom.core.policy import Policy, Sampling
from tackroom.core.task import Suite, Task
from tackroom.harness.spec import HarnessSpec
from tackroom.records.store import RecordStore
from tackroom.train.checkpoints import VALUE_HEAD_FILE, Checkpoints, weight_version
from tackroom.train.config import RLConfig
from tackroom.train.engine import TrainEngine, latest_checkpoint
from tackroom.train.learner import Learner
from tackroom.train.rewards import get_proxy, is_proxy
from tackroom.train.samples import (
    TurnSample,
    episode_reward,
    episode_sample,
    episode_samples,
    scored,
)
from tackroom.train.sources import (
    LocalRollouts,
    RecordRollouts,
    RolloutSource,
    ServedRollouts,
    connect_server,
    eval_mode,
    open_data,
)

__all__ = ["run_rl", "RLResult", "Evaluate", "weight_version", "VALUE_HEAD_FILE",
           "resolve_model", "resolve_device"]

#: Iterations in a row that may yield nothing to train on before the run stops.
MAX_EMPTY_ITERATIONS = 3


class Evaluate(Protocol):
    """Plays and records greedy evaluation episodes; returns the run (``final_episodes()``).

    :func:`tackroom.evaluate` is one: ``tackroom.train`` and ``tackroom train`` pass it.
    """

    def __call__(self, suite: Suite, *, tasks: Sequence[Task], harnesses: Sequence[HarnessSpec],
                 policies: Sequence[Policy], seeds: range, sampling: Sampling,
                 concurrency: int, store: RecordStore, run_id: str, train_run: str) -> Any: ...


@dataclass
class RLResult:
    """How a training run ended and where its model went."""

    run_id: str
    final: Path
    steps: int
    version: str
    #: The base model directory (``hf:BASE:FINAL`` serves a LoRA result).
    base_model: str
    resumed_from: int | None
    last: dict[str, float]
    notes: list[str] = field(default_factory=list)
    eval: dict[str, float] = field(default_factory=dict)


def resolve_model(path: str) -> str:
    """``model.path`` as a directory: ``bundled`` is the policy shipped with tackroom."""
    if not path:
        raise ConfigError("model.path is empty", "[model]",
                          "set [model] path = \"DIR\" (a local checkpoint; `tackroom model "
                          "init DIR` makes one) or \"bundled\"")
    if path in ("bundled", "hf:bundled"):
        from tackroom.policies.bundled import bundled_dir

        return str(bundled_dir())
    return path.removeprefix("hf:")


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` when available, else ``cpu``."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def run_rl(cfg: RLConfig, store: RecordStore, run_id: str, *, resume: bool = False,
           ray: bool = False, ray_address: str | None = None, threads: int | None = None,
           evaluate: Evaluate | None = None,
           on_step: Callable[[int, int, dict[str, float]], None] | None = None,
           on_note: Callable[[str], None] | None = None) -> RLResult:
    """Train per ``cfg``; metrics of every step go to ``store`` under ``run_id``.

    Args:
        cfg: every hyper-parameter (docs/training.md, "The trainer").
        store: the record store: rollouts and evaluations are recorded in it,
            frozen records are read from it.
        run_id: the training run's id (a resumed run keeps its original id).
        resume: continue from the newest checkpoint under ``run.out_dir``.
        ray, ray_address: play online rollouts on Ray rollout workers
            (a local cluster, or the one at ``ray_address``).
        threads: torch CPU threads.
        evaluate: plays the ``[eval]`` episodes (``tackroom.evaluate``, which
            ``tackroom.train`` passes); needed only when ``[eval]`` asks for evaluation.
        on_step: ``(step, total, metrics)`` after each optimiser step.
        on_note: one-line notices (log-prob source, trackers, resumption).
    """
    trainer = _Trainer(cfg, store, run_id, resume=resume, ray=ray or bool(ray_address),
                       ray_address=ray_address, threads=threads, evaluate=evaluate,
                       on_step=on_step, on_note=on_note)
    return trainer.run()


class _Trainer:
    """The state of one training run (see the module docstring for the loop)."""

    def __init__(self, cfg: RLConfig, store: RecordStore, run_id: str, *, resume: bool,
                 ray: bool, ray_address: str | None, threads: int | None,
                 evaluate: Evaluate | None,
                 on_step: Callable[[int, int, dict[str, float]], None] | None,
                 on_note: Callable[[str], None] | None) -> None:
        self.cfg = cfg.resolved()
        self.store = store
        self.run_id = run_id
        self.resume = resume
        self.ray = ray
        self.ray_address = ray_address
        self.threads = threads
        self.evaluate = evaluate
        self.on_step = on_step
        self._on_note = on_note
        self.notes: list[str] = []
        self.model_dir = resolve_model(cfg.model)
        self.device = resolve_device(cfg.device)
        self.out = Path(cfg.out_dir)

    def note(self, line: str) -> None:
        self.notes.append(line)
        if self._on_note is not None:
            self._on_note(line)

    # --------------------------------------------------------------------- run
    def run(self) -> RLResult:
        from tackroom.policies.hf_policy import HFPolicy
        from tackroom.train.tracking import make_trackers

        c = self.cfg
        # Set-up: the data, the server (checked before any model loads), the model.
        self.data = open_data(c, self.store, ray=self.ray, note=self.note)
        if self.data.eval_specs and self.evaluate is None:
            raise ConfigError("[eval] asks for evaluation but no evaluate function was given",
                              "[eval]", "train with tackroom.train() or `tackroom train`, or "
                              "pass evaluate=tackroom.evaluate to run_rl")
        server = connect_server(c, self.data, ray=self.ray, note=self.note)
        state = self._setup_model()
        resumed_from = self.engine.step if state is not None else None
        iteration = int(state["iteration"]) if state is not None else 0
        if resumed_from is not None:
            self.note(f"resumed from step {resumed_from}")
        if self.data.records is not None:
            self.note(self.data.records.logprob_note)
        self.store.start_run(self.run_id, "train", {
            "rl": c.to_dict(), "engine": self.engine.describe(), "source": c.source,
            "model_dir": self.model_dir, "device": self.device, "harness_vocab": self.vocab,
            "ray": self.ray}, n_planned=0)
        trackers, tracker_notes = make_trackers(c.log_to, self.run_id, c.to_dict())
        for line in tracker_notes:
            self.note(line)
        self.policy = HFPolicy.from_model(self.engine.model, self.engine.tokenizer,
                                          model_dir=self.model_dir, device=self.device,
                                          max_batch=max(1, c.concurrency))
        rollouts = self._rollouts(server)

        last: dict[str, float] = {}
        eval_metrics: dict[str, float] = {}
        saved_at = self.engine.step
        empty = 0
        status = "interrupted"
        try:
            while self.engine.step < c.steps:
                # 1. Data: this iteration's rollout batches.
                t0 = time.perf_counter()
                batches, source_metrics = rollouts.batches(iteration)
                t_rollout = time.perf_counter() - t0
                # 2. Samples, with group advantages (or none yet, with a critic).
                samples, batch_metrics = self._samples(batches)
                batch_metrics.update(source_metrics)
                rollouts.check(samples)
                iteration += 1
                if not samples:
                    empty += 1
                    self.note(f"iteration {iteration}: nothing to train on (no scored turns)")
                    if empty >= MAX_EMPTY_ITERATIONS:
                        raise TackroomError(f"{empty} iterations in a row gave no turns to "
                                            "train on", "train",
                                            "check the harnesses, tasks and the model's replies "
                                            "(`tackroom show` on the run)")
                    continue
                empty = 0
                # 3. Before the update: π_old, π_ref, the critic's values.
                t1 = time.perf_counter()
                self.learner.before_update(samples, self.episodes)
                t_prepare = time.perf_counter() - t1
                # 4. Update: num_iterations optimiser steps over the samples.
                for _ in range(c.num_iterations):
                    if self.engine.step >= c.steps:
                        break
                    t2 = time.perf_counter()
                    step_metrics = self.learner.update(samples)
                    t_update = time.perf_counter() - t2
                    tokens = sum(len(s.completion) for s in samples)
                    last = {**batch_metrics, **step_metrics,
                            "rollout_seconds": t_rollout, "update_seconds": t_update,
                            "prepare_seconds": t_prepare,
                            "tokens_per_s": tokens / max(t_update, 1e-9)}
                    # 5. Bookkeeping: evaluation when due, metrics, checkpoints.
                    if self._eval_due():
                        eval_metrics = self._evaluate()
                        last.update(eval_metrics)
                    self.store.log_train_step(self.run_id, self.engine.step, last)
                    for tr in trackers:
                        tr.log(self.engine.step, last)
                    if self.on_step is not None:
                        self.on_step(self.engine.step, c.steps, last)
                self.policy.set_version(self.checkpoints.version)
                every = c.checkpoint_every
                if every and self.engine.step // every > saved_at // every \
                        and self.engine.step < c.steps:
                    self.checkpoints.save(iteration, self.data.fingerprint())
                    saved_at = self.engine.step
            if self.data.eval_specs and eval_metrics.get("eval/step") != self.engine.step:
                eval_metrics = self._evaluate()
                self.store.log_train_step(self.run_id, self.engine.step, {**last,
                                                                          **eval_metrics})
            self.checkpoints.save(iteration, self.data.fingerprint())
            final = self.checkpoints.save_final(last, self.data.train_harnesses)
            status = "finished"
        finally:
            rollouts.close()
            with contextlib.suppress(Exception):
                asyncio.run(self.policy.aclose())  # its generation thread
            for tr in trackers:
                with contextlib.suppress(Exception):
                    tr.close()
            self.store.finish_run(self.run_id, status)
        return RLResult(self.run_id, final, self.engine.step, self.checkpoints.version,
                        self.model_dir, resumed_from, last, self.notes, eval_metrics)

    # ------------------------------------------------------------------ set-up
    def _setup_model(self) -> dict[str, Any] | None:
        """The engine, the critic's head, the KL reference and the learner; the checkpoint's
        state when resuming (``None`` otherwise)."""
        c = self.cfg
        if not self.resume and latest_checkpoint(self.out) is not None:
            raise ConfigError(f"{self.out} already holds checkpoints", "run.out_dir",
                              "pass --resume to continue that run, or choose another "
                              "run.out_dir")
        self.engine = TrainEngine(self.model_dir, self.out, c.steps, lora=c.lora_settings(),
                                  optim=c.optim_settings(), init_adapter=c.init_adapter or None,
                                  seed=c.seed, device=self.device, threads=self.threads)
        # The critic: a value head on the policy's last hidden state, in the same optimiser.
        self.head = None
        self.vocab: dict[str, int] = {}
        if c.critic != "none":
            from tackroom.train.critic import harness_vocab, make_value_head

            self.vocab = harness_vocab(self.data.train_harnesses)
            hidden = int(self.engine.model.config.hidden_size)
            head = make_value_head(c.critic, hidden,  # type: ignore[arg-type]
                                   n_harnesses=len(self.vocab),
                                   harness_embed=c.harness_embed,  # type: ignore[arg-type]
                                   mlp_hidden=c.value_hidden)
            assert head is not None  # critic != "none"
            self.head = head.to(self.device)
            self.engine.optimizer.add_param_group(
                {"params": list(self.head.parameters()), "weight_decay": 0.0})
        # The reference for the KL term: the base without the adapter, or a frozen copy.
        self.ref_model = None
        if c.beta > 0 and c.lora_settings() is None:
            self.ref_model = copy.deepcopy(self.engine.model).eval()
            for p in self.ref_model.parameters():
                p.requires_grad_(False)
        self.learner = Learner(self.engine, c, head=self.head, vocab=self.vocab,
                               ref_model=self.ref_model)
        state = self.engine.resume() if self.resume else None
        if state is not None:
            if state.get("data") != self.data.fingerprint():
                raise ConfigError("the training data changed since the checkpoint", "--resume",
                                  "train on the same records and tasks, or start a new "
                                  "run.out_dir")
            self.run_id = str(state.get("run_id", self.run_id))
        self.checkpoints = Checkpoints(self.engine, c, self.run_id, self.model_dir,
                                       head=self.head, vocab=self.vocab)
        if state is not None:
            self.checkpoints.restore_head()
        return state

    def _rollouts(self, server: Any) -> RolloutSource:
        """The rollout source ``[data]`` and ``[rollout]`` ask for."""
        if self.data.records is not None:
            return RecordRollouts(self.cfg, self.data.records)
        if server is not None:
            return ServedRollouts(self.cfg, self.data, self.store, self.run_id, self.engine,
                                  self.checkpoints, server)
        return LocalRollouts(self.cfg, self.data, self.store, self.run_id, self.engine,
                             self.policy, self.checkpoints, ray=self.ray,
                             ray_address=self.ray_address)

    # ----------------------------------------------------------------- samples
    def _episode_samples(self, ep: Episode, index: int, use_recorded: bool
                         ) -> list[TurnSample]:
        """``ep``'s turns as samples, each tokenised with the tools its call offered."""
        tok = self.engine.tokenizer
        agent = ep.meta.get("agent") if isinstance(ep.meta, dict) else None
        if not (isinstance(agent, dict) and agent.get("tools_per_call")):
            return episode_samples(ep, index, tok, self.data.tools_for(ep),
                                   use_recorded=use_recorded)
        out: list[TurnSample] = []  # a CLI whose tools changed between its calls
        for turn in ep.turns:
            one = dataclasses.replace(ep, turns=[turn])
            out.extend(episode_samples(one, index, tok, self.data.tools_for(ep, turn.index),
                                       use_recorded=use_recorded))
        return out

    def _samples(self, batches: list[list[Episode]]) -> tuple[list[TurnSample],
                                                              dict[str, float]]:
        """Turn samples of every batch, with advantages, and the batches' metrics."""
        from tackroom.train.advantages import advantages_from_config

        c = self.cfg
        use_recorded = c.temperature == 1.0
        samples: list[TurnSample] = []
        episodes: list[Episode] = []
        adv_metrics: list[dict[str, float]] = []
        for batch in batches:
            eps = scored(batch)
            if not eps:
                continue
            advantages = advantages_from_config(
                [episode_sample(e, c.reward, c.verifier) for e in eps], c) \
                if c.critic == "none" else None
            for k, ep in enumerate(eps):
                index = len(episodes)
                episodes.append(ep)
                turns = self._episode_samples(ep, index, use_recorded)
                if advantages is not None:
                    for s in turns:
                        s.advantage = float(advantages.values[k])
                samples.extend(turns)
            if advantages is not None:
                adv_metrics.append(advantages.metrics)
        self.episodes = episodes
        metrics: dict[str, float] = {}
        if episodes:
            metrics["episodes"] = float(len(episodes))
            metrics["turns"] = float(len(samples))
            metrics["reward_mean"] = sum(episode_reward(e, c.reward, c.verifier)
                                         for e in episodes) / len(episodes)
            if is_proxy(c.reward):
                # The proxy's own score and the outcome shares, ungated, every step: what
                # the tilt model (tackroom.analysis.tilt) is compared against.
                proxy = get_proxy(c.reward)
                metrics["proxy_reward_mean"] = sum(proxy(e) for e in episodes) / len(episodes)
                labels = [proxy.outcome(e) for e in episodes]
                for label in proxy.labels:
                    metrics[f"outcome/{label}"] = labels.count(label) / len(labels)
            metrics["success"] = sum(e.outcome is Outcome.SUCCESS for e in episodes) \
                / len(episodes)
            metrics["parse_error_rate"] = sum(bool(t.parse_error) for e in episodes
                                              for t in e.turns) / max(1, sum(
                                                  len(e.turns) for e in episodes))
            for h in sorted({e.harness for e in episodes}):
                mine = [e for e in episodes if e.harness == h]
                metrics[f"success/{h}"] = sum(e.outcome is Outcome.SUCCESS
                                              for e in mine) / len(mine)
            metrics["completion_tokens"] = float(sum(len(s.completion) for s in samples))
            metrics["recorded_logprobs"] = sum(s.recorded_logp for s in samples) \
                / max(1, len(samples))
        for key in ("frac_zero_std_groups", "frac_zero_std_samples", "n_groups",
                    "advantage_abs_mean"):
            vals = [m[key] for m in adv_metrics if key in m]
            if vals:
                metrics[key] = sum(vals) / len(vals)
        return samples, metrics

    # -------------------------------------------------------------- evaluation
    def _eval_due(self) -> bool:
        every = self.cfg.eval_every
        return bool(every) and self.engine.step % every == 0 and bool(self.data.eval_specs)

    def _evaluate(self) -> dict[str, float]:
        """Greedy episodes on held-out seeds with the current weights, recorded apart.

        One evaluation run (``<run_id>-eval``) holds every evaluation of the
        training run; each is told apart by its policy id ``train:<version>``.
        """
        from tackroom.train.rollouts import EVAL_SEED_BASE

        if not self.data.eval_specs or self.data.suite is None or self.evaluate is None:
            return {}
        c = self.cfg
        version = self.checkpoints.version
        self.policy.id = f"train:{version}"
        self.policy.set_version(version)
        with eval_mode(self.engine):
            run = self.evaluate(self.data.suite, tasks=self.data.eval_tasks,
                                harnesses=self.data.eval_specs, policies=[self.policy],
                                seeds=range(EVAL_SEED_BASE, EVAL_SEED_BASE + c.eval_seeds),
                                sampling=Sampling(max_tokens=c.max_tokens, logprobs=True),
                                concurrency=c.concurrency, store=self.store,
                                run_id=f"{self.run_id}-eval", train_run=self.run_id)
        rows = [r for r in run.final_episodes() if r["policy"] == self.policy.id
                and r["outcome"] != Outcome.INFRA_ERROR]
        out: dict[str, float] = {"eval/step": float(self.engine.step)}
        if rows:
            out["eval/success"] = sum(r["outcome"] == Outcome.SUCCESS for r in rows) / len(rows)
            for h in sorted({r["harness"] for r in rows}):
                mine = [r for r in rows if r["harness"] == h]
                out[f"eval/success/{h}"] = sum(r["outcome"] == Outcome.SUCCESS
                                               for r in mine) / len(mine)
        return out
