"""``tackroom train``: multi-harness policy-gradient training on the hf backend.

One loop, read top to bottom in :meth:`_Trainer.run`:

1. **Data** — an *iteration* gathers ``optim.grad_accum`` rollout batches:
   online (the current policy plays ``group_size`` episodes per (task,
   harness) of ``tasks_per_step`` tasks, under tackroom's harnesses or real agent
   CLIs behind the model gateway; :mod:`tackroom.train.rollouts`) or
   frozen records from the store (:mod:`tackroom.train.offline`). With
   ``rollout.backend = "openai"`` an inference server plays them, each weight
   version hot-loaded into it as a LoRA adapter, and with
   ``rollout.max_staleness = s > 0`` a background thread plays iteration j's
   batches with iteration j − s's weights while the learner trains
   (:mod:`tackroom.train.server`).
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
5. **Bookkeeping** — metrics of every step to the store (and W&B / MLflow);
   checkpoints every ``run.checkpoint_every`` steps (at iteration ends) that
   ``--resume`` continues from exactly; greedy evaluation on held-out seeds.

Every set of weights has a *version*, ``<run_id>-step-<k>`` (after k
optimiser steps). Each rollout turn records the version that wrote it in
``Turn.adapter``; each checkpoint (and ``final``) carries its version in
``tackroom_adapter.json``, which the hf policy reads as the adapter's name,
so turns served later from a checkpoint record the same version.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tackroom.core.episode import Episode, Outcome
from tackroom.core.errors import ConfigError, TackroomError
from tackroom.core.policy import Sampling
from tackroom.core.task import Suite, Task
from tackroom.harness.spec import HarnessSpec
from tackroom.policies.hf_policy import ADAPTER_VERSION_FILE
from tackroom.records.store import RecordStore
from tackroom.suites import select_tasks
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

VALUE_HEAD_FILE = "value_head.pt"
#: Iterations in a row that may yield nothing to train on before the run stops.
MAX_EMPTY_ITERATIONS = 3


def weight_version(run_id: str, step: int) -> str:
    """The name of the weights after ``step`` optimiser steps of run ``run_id``."""
    return f"{run_id}-step-{step}"


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
        on_step: ``(step, total, metrics)`` after each optimiser step.
        on_note: one-line notices (log-prob source, trackers, resumption).
    """
    trainer = _Trainer(cfg, store, run_id, resume=resume, ray=ray or bool(ray_address),
                       ray_address=ray_address, threads=threads, on_step=on_step,
                       on_note=on_note)
    return trainer.run()


class _Trainer:
    """The state of one training run (see the module docstring for the loop)."""

    def __init__(self, cfg: RLConfig, store: RecordStore, run_id: str, *, resume: bool,
                 ray: bool, ray_address: str | None, threads: int | None,
                 on_step: Callable[[int, int, dict[str, float]], None] | None,
                 on_note: Callable[[str], None] | None) -> None:
        self.cfg = cfg.resolved()
        self.store = store
        self.run_id = run_id
        self.resume = resume
        self.ray = ray
        self.ray_address = ray_address
        self.threads = threads
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

    # ------------------------------------------------------------------ set-up
    def _setup_data(self) -> None:
        c = self.cfg
        self.suite: Suite | None = None
        self.tasks: list[Task] = []
        self.harness_specs: list[HarnessSpec] = []
        self.records = None
        if c.source == "online":
            from tackroom.harness.spec import load_harness
            from tackroom.suites import get_suite

            if not c.suite:
                raise ConfigError("data.suite is empty", "[data]",
                                  "name the suite to roll out on, e.g. data.suite = \"toy\"")
            if not c.harnesses:
                raise ConfigError("data.harnesses is empty", "[data]",
                                  "list the training harnesses, e.g. data.harnesses = "
                                  "[\"som-tools\", \"html-commands\"]")
            self.suite = get_suite(c.suite)
            self.tasks = select_tasks(self.suite, c.tasks, "data.tasks")
            self.harness_specs = [load_harness(h) for h in c.harnesses]
            # An agent harness's tools are its CLI's own, recorded with each episode
            # (meta.agent.tools): no harness file holds them.
            self.tools = {h.name: h.tools for h in self.harness_specs}
            self.train_harnesses = [h.name for h in self.harness_specs]
            if self.ray:
                from tackroom.runner.ray_workers import require_ray

                require_ray()
        else:
            from tackroom.train.offline import RecordSource

            self.records = RecordSource.open(self.store, runs=c.runs, suite=c.suite,
                                             harnesses=c.harnesses, tasks=c.tasks,
                                             tasks_per_step=c.tasks_per_step, seed=c.seed)
            self.train_harnesses = self.records.harnesses
            if self.ray:
                self.note("--ray is for online rollouts; training on records runs here")
            if c.suite:
                from tackroom.suites import get_suite

                self.suite = get_suite(c.suite)
        # Evaluation: held-out seeds of the chosen (or training) tasks and harnesses.
        self.eval_tasks: list[Task] = []
        self.eval_specs: list[HarnessSpec] = []
        if c.eval_tasks or c.eval_harnesses or c.eval_every:
            from tackroom.harness.spec import load_harness

            if self.suite is None:
                raise ConfigError("evaluation needs a suite", "[eval]",
                                  "set data.suite, or drop the [eval] settings")
            self.eval_tasks = select_tasks(self.suite, c.eval_tasks, "eval.tasks") \
                if c.eval_tasks else (self.tasks or select_tasks(
                    self.suite, self.records.tasks if self.records else [], "eval.tasks"))
            names = c.eval_harnesses or self.train_harnesses
            self.eval_specs = [load_harness(h) for h in names]

    def _setup_model(self) -> dict[str, Any] | None:
        import torch

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

            self.vocab = harness_vocab(self.train_harnesses)
            hidden = int(self.engine.model.config.hidden_size)
            self.head = make_value_head(c.critic, hidden, n_harnesses=len(self.vocab),
                                        harness_embed=c.harness_embed,
                                        mlp_hidden=c.value_hidden).to(self.device)
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
            if state.get("data") != self._fingerprint():
                raise ConfigError("the training data changed since the checkpoint", "--resume",
                                  "train on the same records and tasks, or start a new "
                                  "run.out_dir")
            self.run_id = str(state.get("run_id", self.run_id))
            if self.head is not None:
                ckpt = latest_checkpoint(self.out)
                assert ckpt is not None
                self.head.load_state_dict(torch.load(ckpt / VALUE_HEAD_FILE,
                                                     weights_only=True))
        return state

    def _fingerprint(self) -> str:
        if self.records is not None:
            return f"records:{self.records.fingerprint}"
        return "online:" + ",".join(sorted(t.key for t in self.tasks)) + "|" + ",".join(
            f"{h.name}@{h.hash}" for h in self.harness_specs)

    # --------------------------------------------------------------------- run
    def run(self) -> RLResult:
        from tackroom.policies.hf_policy import HFPolicy
        from tackroom.train.tracking import make_trackers

        c = self.cfg
        self._setup_data()
        self._setup_server()
        state = self._setup_model()
        resumed_from = self.engine.step if state is not None else None
        iteration = int(state["iteration"]) if state is not None else 0
        if resumed_from is not None:
            self.note(f"resumed from step {resumed_from}")
        if self.records is not None:
            self.note(self.records.logprob_note)
        config = {"rl": c.to_dict(), "engine": self.engine.describe(),
                  "source": c.source, "model_dir": self.model_dir, "device": self.device,
                  "harness_vocab": self.vocab, "ray": self.ray}
        self.store.start_run(self.run_id, "train", config, n_planned=0)
        trackers, tracker_notes = make_trackers(c.log_to, self.run_id, c.to_dict())
        for line in tracker_notes:
            self.note(line)
        self.policy = HFPolicy.from_model(self.engine.model, self.engine.tokenizer,
                                          model_dir=self.model_dir, device=self.device,
                                          max_batch=max(1, c.concurrency))
        ray_mod, ray_started = None, False
        if self.ray and self.records is None:
            from tackroom.runner.ray_workers import connect, require_ray

            ray_mod = require_ray()
            ray_started = connect(ray_mod, self.ray_address)
        last: dict[str, float] = {}
        eval_metrics: dict[str, float] = {}
        saved_at = self.engine.step
        empty = 0
        status = "interrupted"
        try:
            while self.engine.step < c.steps:
                t0 = time.perf_counter()
                if self.server is None:
                    episodes_by_batch = [self._collect(iteration, b)
                                         for b in range(c.grad_accum)]
                else:
                    episodes_by_batch, served = self._served_batches(iteration)
                t_rollout = time.perf_counter() - t0
                samples, batch_metrics = self._samples(episodes_by_batch)
                if self.server is not None:
                    batch_metrics.update(served)
                    self._check_recorded(samples)
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
                t1 = time.perf_counter()
                self.learner.before_update(samples, self.episodes)
                t_prepare = time.perf_counter() - t1
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
                    if self._eval_due():
                        eval_metrics = self._evaluate()
                        last.update(eval_metrics)
                    self.store.log_train_step(self.run_id, self.engine.step, last)
                    for tr in trackers:
                        tr.log(self.engine.step, last)
                    if self.on_step is not None:
                        self.on_step(self.engine.step, c.steps, last)
                self.policy.set_version(weight_version(self.run_id, self.engine.step))
                every = c.checkpoint_every
                if every and self.engine.step // every > saved_at // every \
                        and self.engine.step < c.steps:
                    self._checkpoint(iteration)
                    saved_at = self.engine.step
            if self.eval_specs and eval_metrics.get("eval/step") != self.engine.step:
                eval_metrics = self._evaluate()
                self.store.log_train_step(self.run_id, self.engine.step, {**last,
                                                                          **eval_metrics})
            self._checkpoint(iteration)
            final = self._save_final(last)
            status = "finished"
        finally:
            if self.producer is not None:
                self.producer.close(timeout=60)
            if self.server is not None:
                for name in list(self.server.loaded):
                    with contextlib.suppress(Exception):
                        self.server.unload(name)
            with contextlib.suppress(Exception):
                asyncio.run(self.policy.aclose())  # its generation thread
            for tr in trackers:
                with contextlib.suppress(Exception):
                    tr.close()
            self.store.finish_run(self.run_id, status)
            if ray_started and ray_mod is not None:
                ray_mod.shutdown()
        return RLResult(self.run_id, final, self.engine.step,
                        weight_version(self.run_id, self.engine.step), self.model_dir,
                        resumed_from, last,
                        self.notes, eval_metrics)

    # ------------------------------------------------------ inference server
    def _setup_server(self) -> None:
        """With ``rollout.backend = "openai"``: check the server answers before anything loads."""
        from tackroom.train.server import InferenceServer

        c = self.cfg
        self.server: InferenceServer | None = None
        self.producer: Any = None
        #: weight version → the last iteration it was published for (on the server).
        self._version_iter: dict[str, int] = {}
        if c.rollout_backend != "openai":
            return
        if self.records is not None:
            self.note("rollout.backend = openai is for online rollouts; training on records "
                      "runs here")
            return
        if self.ray:
            raise ConfigError("--ray and rollout.backend = \"openai\" both say who plays the "
                              "rollouts", "--ray",
                              "drop --ray (the server generates), or set rollout.backend = "
                              "\"hf\"")
        self.server = InferenceServer(c.base_url)
        names = self.server.models()
        mode = (f"async, at most {c.max_staleness} update(s) behind" if c.max_staleness
                else "synchronous")
        self.note(f"rollouts: {c.base_url} (serving {', '.join(names[:3]) or 'nothing'}); "
                  f"each weight version hot-loaded as a LoRA adapter; {mode}")

    def _publish(self, iteration: int) -> str:
        """The current weights as a version on the server, for iteration ``iteration``."""
        from tackroom.train.rollouts import ROLLOUT_WEIGHTS, save_rollout_weights

        assert self.server is not None
        c = self.cfg
        version = weight_version(self.run_id, self.engine.step)
        if version not in self._version_iter:
            save_rollout_weights(self.engine, version, self._write_version(version),
                                 keep=c.max_staleness + 2)
            path = (Path(self.engine.out_dir) / ROLLOUT_WEIGHTS / version).resolve()
            self.server.load(version, str(path))
        self._version_iter[version] = iteration
        # Batches from this iteration on play weights of iteration >= iteration - s.
        for old, last in list(self._version_iter.items()):
            if old != version and last < iteration - c.max_staleness:
                self.server.unload(old)
                del self._version_iter[old]
        return version

    def _served_batches(self, iteration: int) -> tuple[list[list[Episode]], dict[str, float]]:
        """Iteration ``iteration``'s rollout batches from the server, and their staleness."""
        from tackroom.train.server import RolloutProducer

        c = self.cfg
        version = self._publish(iteration)
        if c.max_staleness == 0:
            batches = [self._play_served(iteration, b, version) for b in range(c.grad_accum)]
        else:
            # Iterations still to train if none comes back empty: play no further.
            left = -(-(c.steps - self.engine.step) // c.num_iterations)
            if self.producer is None:
                self.producer = RolloutProducer(
                    lambda j, v: [self._play_served(j, b, v) for b in range(c.grad_accum)],
                    start=iteration, staleness=c.max_staleness, limit=iteration + left)
            self.producer.allow(iteration + left)
            self.producer.publish(iteration, version)
            _, batches = self.producer.get(iteration)
        lags = []
        for ep in (e for b in batches for e in b):
            for turn in ep.turns:
                if turn.adapter not in self._version_iter:
                    raise TackroomError(
                        f"a rollout turn was answered by {turn.adapter!r}, not by a weight "
                        "version this run loaded", "rollout.base_url",
                        "the server must answer with the adapter a request names (its "
                        "'model' field), as vLLM does")
                lags.append(iteration - self._version_iter[turn.adapter])
        if lags and max(lags) > c.max_staleness:
            raise TackroomError(f"rollouts {max(lags)} updates old exceed rollout.max_staleness"
                                f" = {c.max_staleness}", "train", "report this as a bug")
        metrics = {"staleness_max": float(max(lags, default=0)),
                   "staleness_mean": sum(lags) / max(1, len(lags))}
        return batches, metrics

    def _play_served(self, iteration: int, batch: int, version: str) -> list[Episode]:
        """One rollout batch played by weight version ``version`` on the server."""
        from tackroom.train.rollouts import draw_cells, play
        from tackroom.train.server import ServedPolicy

        c = self.cfg
        assert self.suite is not None
        policy = ServedPolicy(version, c.base_url, concurrency=c.concurrency)
        sampling = Sampling(temperature=c.temperature, top_p=c.top_p, max_tokens=c.max_tokens)
        cells = draw_cells(self.tasks, self.harness_specs, policy, seed=c.seed,
                           iteration=iteration, batch=batch, tasks_per_step=c.tasks_per_step,
                           group_size=c.group_size, sampling=sampling)

        async def go() -> list[Episode]:
            try:
                return await play(cells, self.suite, self.run_id, store=self.store,
                                  concurrency=c.concurrency)
            finally:
                await policy.aclose()

        episodes = asyncio.run(go())
        if episodes and all(e.outcome is Outcome.INFRA_ERROR for e in episodes):
            raise TackroomError(f"every rollout of iteration {iteration} failed "
                                f"({(episodes[0].error or '').splitlines()[0][:300]})",
                                "rollout.base_url", f"check the server at {c.base_url}")
        return episodes

    def _check_recorded(self, samples: list[TurnSample]) -> None:
        """Off-policy samples need the sampler's own log-probs: π_old cannot be recomputed."""
        if self.cfg.max_staleness == 0:
            return
        missing = sum(not s.recorded_logp for s in samples)
        if missing:
            raise TackroomError(f"{missing} of {len(samples)} rollout turns came back without "
                                "token ids and log-probs", "rollout.base_url",
                                "async training needs the server's own (vLLM and tackroom "
                                "serve return them with logprobs and return_token_ids); or set "
                                "rollout.max_staleness = 0")

    # -------------------------------------------------------------------- data
    def _collect(self, iteration: int, batch: int) -> list[Episode]:
        """One rollout batch: played now (online) or read from the records."""
        if self.records is not None:
            return self.records.batch(iteration * self.cfg.grad_accum + batch)
        from tackroom.train.rollouts import (
            RemotePolicy,
            draw_cells,
            play,
            save_rollout_weights,
        )

        c = self.cfg
        version = weight_version(self.run_id, self.engine.step)
        sampling = Sampling(temperature=c.temperature, top_p=c.top_p, max_tokens=c.max_tokens)
        common = dict(seed=c.seed, iteration=iteration, batch=batch,
                      tasks_per_step=c.tasks_per_step, group_size=c.group_size,
                      sampling=sampling)
        assert self.suite is not None
        if not self.ray:
            self.policy.id = f"train:{version}"
            self.policy.set_version(version)
            cells = draw_cells(self.tasks, self.harness_specs, self.policy, **common)
            with self._eval_mode():
                return asyncio.run(play(cells, self.suite, self.run_id, store=self.store,
                                        concurrency=c.concurrency))
        from tackroom.runner.ray_workers import ray_executor

        spec = save_rollout_weights(self.engine, version, self._write_version(version))
        remote = RemotePolicy(spec, spec)
        cells = draw_cells(self.tasks, self.harness_specs, remote, **common)

        async def go() -> list[Episode]:
            async with ray_executor(self.suite, [remote], [spec],
                                    opts={"threads": 1, "max_batch": c.concurrency},
                                    concurrency=c.concurrency, address=self.ray_address) as ex:
                return await play(cells, self.suite, self.run_id, store=self.store,
                                  concurrency=c.concurrency, executor=ex)

        return asyncio.run(go())

    def _tools_for(self, ep: Episode, turn: int = 0) -> Any:
        """The tools ``ep``'s turn ``turn`` offered: the harness's, or an agent CLI's own."""
        if self.records is not None:
            return self.records.tools_for(ep, turn)
        from tackroom.train.sft import episode_tools

        return episode_tools(ep, self.tools[ep.harness], turn)

    def _episode_samples(self, ep: Episode, index: int, use_recorded: bool
                         ) -> list[TurnSample]:
        """``ep``'s turns as samples, each tokenised with the tools its call offered."""
        tok = self.engine.tokenizer
        agent = ep.meta.get("agent") if isinstance(ep.meta, dict) else None
        if not (isinstance(agent, dict) and agent.get("tools_per_call")):
            return episode_samples(ep, index, tok, self._tools_for(ep),
                                   use_recorded=use_recorded)
        out: list[TurnSample] = []  # a CLI whose tools changed between its calls
        for turn in ep.turns:
            one = dataclasses.replace(ep, turns=[turn])
            out.extend(episode_samples(one, index, tok, self._tools_for(ep, turn.index),
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
            advantages = advantages_from_config([episode_sample(e, c.reward, c.verifier) for e in eps],
                                                c) if c.critic == "none" else None
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

    @contextlib.contextmanager
    def _eval_mode(self):
        self.engine.model.eval()
        try:
            yield
        finally:
            self.engine.model.train()

    # -------------------------------------------------------------- evaluation
    def _eval_due(self) -> bool:
        every = self.cfg.eval_every
        return bool(every) and self.engine.step % every == 0 and bool(self.eval_specs)

    def _evaluate(self) -> dict[str, float]:
        """Greedy episodes on held-out seeds with the current weights, recorded apart.

        One evaluation run (``<run_id>-eval``) holds every evaluation of the
        training run; each is told apart by its policy id ``train:<version>``.
        """
        from tackroom.app.evaluation import evaluate
        from tackroom.train.rollouts import EVAL_SEED_BASE

        if not self.eval_specs or self.suite is None:
            return {}
        c = self.cfg
        version = weight_version(self.run_id, self.engine.step)
        self.policy.id = f"train:{version}"
        self.policy.set_version(version)
        with self._eval_mode():
            run = evaluate(self.suite, tasks=self.eval_tasks, harnesses=self.eval_specs,
                           policies=[self.policy],
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

    # ------------------------------------------------------------- checkpoints
    def _write_version(self, version: str) -> Callable[[Path], None]:
        def write(directory: Path) -> None:
            import torch

            (directory / ADAPTER_VERSION_FILE).write_text(json.dumps({
                "version": version, "run_id": self.run_id, "step": self.engine.step,
                "base_model": self.model_dir,
                "mode": "lora" if self.engine.lora is not None else "full"}, indent=1))
            if self.head is not None:
                torch.save(self.head.state_dict(), directory / VALUE_HEAD_FILE)
                (directory / "value_head.json").write_text(json.dumps({
                    "critic": self.cfg.critic, "harness_vocab": self.vocab,
                    "harness_embed": self.cfg.harness_embed,
                    "value_hidden": self.cfg.value_hidden}, indent=1))
        return write

    def _checkpoint(self, iteration: int) -> Path:
        version = weight_version(self.run_id, self.engine.step)
        return self.engine.save_checkpoint(
            {"run_id": self.run_id, "iteration": iteration, "version": version,
             "data": self._fingerprint(), "harness_vocab": self.vocab},
            extra=self._write_version(version))

    def _save_final(self, last: dict[str, float]) -> Path:
        version = weight_version(self.run_id, self.engine.step)
        final = self.engine.save_final(self.out / "final", card={"rl": {
            "run_id": self.run_id, "steps": self.engine.step, "version": version,
            "algorithm": self.cfg.algorithm, "source": self.cfg.source,
            "harnesses": self.train_harnesses,
            "last": {k: v for k, v in last.items() if isinstance(v, (int, float))}}})
        self._write_version(version)(final)
        return final
