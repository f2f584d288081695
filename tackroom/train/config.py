"""``RLConfig``: every hyper-parameter of multi-harness RL, named once, in one dataclass.

A TOML file groups them in sections; each key belongs to exactly one::

    [algo]                                # the loss
    algorithm = "gspo"                    # a registered algorithm: grpo | dr_grpo | gspo | gspo_token
    epsilon_low = 3e-4
    epsilon_high = 4e-4
    beta = 0.0

    [grouping]                            # advantages
    group = "within"                      # within | cross | an expression, e.g. "task + '|' + str(seed // 2)"
    normalise = "per_harness"             # per_harness | pooled | none
    group_size = 8

    [critic]
    kind = "harness"                      # none | shared | harness  (V(s, e))

    [lora]
    rank = 32

    [rollout]                             # sampling; who samples
    backend = "openai"                    # hf (in process) | openai (a server, adapters hot-loaded)
    base_url = "http://127.0.0.1:8000/v1"
    max_staleness = 1                     # async: rollouts at most 1 update behind

Command-line overrides are ``section.key=value`` (``algo.epsilon=0.3``) or the
flat field name (``epsilon=0.3``); values are TOML (``data.harnesses=["a","b"]``)
or, failing that, a bare string (``algo.algorithm=gspo``); ``none`` unsets an
optional value. Every bad value raises :class:`ConfigError` naming the key,
where it came from, and what is allowed.

Settings left unset (``None``) take the algorithm's defaults, applied by
:meth:`RLConfig.resolved` (see :func:`algorithm_defaults`: each algorithm's registry
entry says them): GRPO clips at ε = 0.2 and averages per sequence, Dr.GRPO divides
by a constant and does not scale by the group std, GSPO clips at (3e-4, 4e-4).

Parsing, validation, writing and the docs' key table come from the one settings base,
:mod:`tackroom.core.settings`; names that plug-ins extend (``algo.algorithm``,
``grouping.normalise``, ``data.reward``, ``run.log_to``) are checked against the
registry (:mod:`tackroom.core.registry`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tackroom.core.errors import ConfigError
from tackroom.core.registry import entries, entry, names
from tackroom.core.settings import Settings, setting
from tackroom.train.advantages import advantage_names, compile_group_key
from tackroom.train.engine import MAX_BATCH, MAX_RANK, MAX_SEED, MAX_STEPS, SCHEDULES
from tackroom.train.rewards import reward_names

LOSS_AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "constant")
CRITICS = ("none", "shared", "harness")
HARNESS_EMBEDS = ("add", "concat")
DATA_SOURCES = ("online", "records")
ROLLOUT_BACKENDS = ("hf", "openai")
#: The largest ``rollout.max_staleness``: more is a different algorithm, not a lag.
MAX_STALENESS = 64
SECTIONS = ("algo", "grouping", "critic", "lora", "optim", "model", "data", "rollout", "eval",
            "run")

#: What ``None`` means for an algorithm that does not say (a plug-in's loss without
#: ``defaults`` meta): GRPO's settings.
_BASE_DEFAULTS: dict[str, Any] = {"epsilon_low": 0.2, "epsilon_high": 0.2,
                                  "loss_agg": "seq_mean_token_mean", "scale_std": True}


def algorithm_defaults(name: str) -> dict[str, Any]:
    """What ``None`` means for algorithm ``name``: its registry entry's ``defaults`` meta
    (docs/research.md §3; TRL's documented settings)."""
    meta = entry("algorithm", name, where="algo.algorithm").meta
    return {**_BASE_DEFAULTS, **meta.get("defaults", {})}


@dataclass
class RLConfig(Settings):
    """One RL training run's hyper-parameters; ``section.key`` is each one's TOML home."""

    SECTIONS = SECTIONS
    #: Other spellings accepted for a section name.
    SECTION_ALIASES = {"algorithm": "algo", "loss": "algo"}
    LABEL = "RLConfig"
    DOCS = "docs/training.md"
    EXAMPLE_OVERRIDE = "algo.epsilon=0.3"

    # [algo] -------------------------------------------------------------- the loss
    algorithm: str = setting("grpo", "algo", "the policy loss", choices=lambda: names("algorithm"))
    epsilon: float | None = setting(None, "algo", "symmetric clip range ε (sets both ends "
                                 "unless epsilon_low/high are given); TRL epsilon",
                 bounds="[0, 1)", why="the ratio floor is 1 − ε", example="0.2")
    epsilon_low: float | None = setting(None, "algo", "lower clip: ratios below 1 − ε_low are "
                                     "clipped (algorithm default if unset)",
                 bounds="[0, 1)", why="the ratio floor is 1 − ε", example="0.2")
    epsilon_high: float | None = setting(None, "algo", "upper clip: ratios above 1 + ε_high are "
                                      "clipped; TRL epsilon_high",
                 bounds=">= 0", example="0.28")
    beta: float = setting(0.0, "algo", "coefficient of the k3 KL to the reference policy; "
                       "0 skips the reference forward pass",
                 bounds=">= 0", example="0.04")
    kl_ratio_correction: bool = setting(False, "algo", "weight the KL term by the importance "
                                     "ratio (TRL use_bias_correction_kl, default true there)")
    loss_agg: str | None = setting(None, "algo", "how per-token losses are averaged "
                                "(algorithm default if unset)", choices=LOSS_AGGREGATIONS)
    max_completion_length: int = setting(1024, "algo", "the constant divisor of the 'constant' "
                                      "aggregation (Dr.GRPO; TRL max_completion_length)",
                 bounds="[1, 1e7]", example="1024")
    num_iterations: int = setting(1, "algo", "optimisation passes over each batch of rollouts "
                               "(GRPO μ; TRL num_iterations)",
                 bounds="[1, 1000]", example="1")

    # [grouping] ---------------------------------------------------------- advantages
    group: str = setting("within", "grouping", "group key: within = (task, harness), cross = "
                      "task, or an expression over sample fields")
    normalise: str = setting("none", "grouping", "reward normalisation before grouping",
                          choices=lambda: advantage_names("normalise"))
    scale_std: bool | None = setting(None, "grouping", "divide advantages by the group std "
                                  "(algorithm default if unset: off for dr_grpo)")
    std_eps: float = setting(1e-4, "grouping", "ε added to every std (TRL uses 1e-4)",
                 bounds="> 0", why="it guards division by a zero std", example="1e-4")
    group_size: int = setting(8, "grouping", "rollouts per (task, harness) each step (G)",
                 bounds="[1, 4096]", why="2 or more for a baseline", example="8")

    # [critic] ------------------------------------------------------------ PPO critic
    critic: str = setting("none", "critic", "value head: none, shared V(s), or harness-"
                       "conditioned V(s, e)", key="kind", choices=CRITICS)
    gamma: float = setting(1.0, "critic", "discount γ over turns",
                 bounds="[0, 1]", example="1.0")
    lam: float = setting(0.95, "critic", "GAE λ",
                 bounds="[0, 1]", example="0.95")
    value_coef: float = setting(0.5, "critic", "weight of the value loss in the total loss",
                 bounds=">= 0", example="0.5")
    value_clip: float | None = setting(0.2, "critic", "clip range of the value loss "
                                    "(none: unclipped)",
                 bounds="> 0", why="or none for no clipping", example="0.2")
    harness_embed: str = setting("add", "critic", "how the harness embedding enters V(s, e)",
                              choices=HARNESS_EMBEDS)
    value_hidden: int = setting(256, "critic", "hidden width of the value head (0: linear)",
                 bounds="[0, 65536]", example="256")

    # [lora] -------------------------------------------------------------- adapter
    lora: bool = setting(True, "lora", "train a LoRA adapter (false: every weight)",
                      key="enabled")
    lora_rank: int = setting(32, "lora", "LoRA rank r", key="rank",
                 bounds=f"[1, {MAX_RANK}]", example="32")
    lora_alpha: int = setting(64, "lora", "LoRA α (scale α / r)", key="alpha",
                 bounds="[1, 1e6]", example="64")
    lora_dropout: float = setting(0.0, "lora", "dropout on the LoRA input", key="dropout",
                 bounds="[0, 1)", example="0.05")
    lora_target_modules: str | list[str] = setting(
        "all-linear", "lora", "'all-linear' or a list of module names", key="target_modules")

    # [optim] ------------------------------------------------------------- optimiser
    lr: float = setting(1e-5, "optim", "AdamW learning rate",
                 bounds="(0, 1]", why="above 1 only diverges", example="1e-5")
    weight_decay: float = setting(0.0, "optim", "AdamW weight decay",
                 bounds="[0, 1000]", example="0.0")
    adam_beta1: float = setting(0.9, "optim", "AdamW β1",
                 bounds="[0, 1)", example="0.9")
    adam_beta2: float = setting(0.999, "optim", "AdamW β2",
                 bounds="[0, 1)", example="0.999")
    max_grad_norm: float = setting(1.0, "optim", "gradient clipping norm",
                 bounds="(0, 1e12]", example="1.0")
    warmup_steps: int = setting(0, "optim", "linear warm-up steps",
                 bounds=f"[0, {MAX_STEPS}]", example="0")
    schedule: str = setting("constant", "optim", "learning-rate schedule after warm-up",
                         choices=SCHEDULES)
    min_lr_ratio: float = setting(0.1, "optim", "floor of the decaying schedules, × lr",
                 bounds="[0, 1]", example="0.1")
    grad_accum: int = setting(1, "optim", "micro-batches per optimiser step",
                 bounds=f"[1, {MAX_BATCH}]", example="1")
    micro_batch_size: int = setting(4, "optim", "completions per forward/backward pass",
                 bounds=f"[1, {MAX_BATCH}]", example="4")
    steps: int = setting(100, "optim", "optimiser steps in the run",
                 bounds=f"[1, {MAX_STEPS}]", example="100")

    # [model] -------------------------------------------------------------- policy
    model: str = setting("", "model", "the base model: a local checkpoint directory", key="path")
    init_adapter: str = setting("", "model", "an adapter to continue training ('' : a fresh one)",
                             key="adapter")
    device: str = setting("auto", "model", "auto, cpu or cuda[:N]")

    # [data] --------------------------------------------------------------- what to train on
    suite: str = setting("", "data", "the task suite")
    tasks: list[str] = setting(None, "data", "task ids or globs ([]: the whole suite)",
                            factory=list)
    harnesses: list[str] = setting(None, "data", "training harnesses (names or .toml paths)",
                                factory=list)
    tasks_per_step: int = setting(8, "data", "tasks drawn per step (× harnesses × group_size "
                               "rollouts)",
                 bounds="[1, 100000]", example="8")
    source: str = setting("online", "data", "online: roll out the current policy each step; "
                       "records: frozen episodes from the record store", choices=DATA_SOURCES)
    runs: list[str] = setting(None, "data", "record runs to train on (source = records; "
                           "[]: every run)", factory=list)
    reward: str = setting("success", "data", "an episode's return: success = 1 if it succeeded "
                       "else 0 (the solve rate); recorded = the environment's reward; "
                       "proxy:NAME = a learned/scripted reward (tackroom.train.rewards)",
                          choices=reward_names)
    verifier: bool = setting(False, "data", "gate the reward by the outcome verifier: "
                          "r = v(o)·r (v = 1 iff the episode succeeded), so a proxy pays "
                          "nothing for a wrong outcome")

    # [rollout] ------------------------------------------------------------ sampling
    temperature: float = setting(1.0, "rollout", "sampling temperature (also divides the "
                              "training logits, so ratios compare like with like)",
                 bounds="(0, 2]", why="as for evaluation", example="1.0")
    top_p: float = setting(1.0, "rollout", "nucleus sampling",
                 bounds="(0, 1]", example="1.0")
    max_tokens: int = setting(512, "rollout", "completion tokens per turn",
                 bounds="[1, 1e7]", example="512")
    concurrency: int = setting(8, "rollout", "episodes run at once",
                 bounds="[1, 4096]", example="8")
    rollout_backend: str = setting("hf", "rollout", "who generates rollouts: hf = the model "
                                "being trained, in this process; openai = an OpenAI-compatible "
                                "server (vLLM, tackroom serve) at rollout.base_url, "
                                "each new LoRA adapter hot-loaded into it", key="backend",
                                choices=ROLLOUT_BACKENDS)
    base_url: str = setting("", "rollout", "the inference server's /v1 root (backend = openai), "
                         "e.g. http://127.0.0.1:8000/v1; its key is $OPENAI_API_KEY")
    max_staleness: int = setting(0, "rollout", "async off-policy: rollouts of the next s steps "
                              "are generated while a step trains, by weights at most s "
                              "updates old (0: synchronous; needs backend = openai)",
                 bounds=f"[0, {MAX_STALENESS}]", why="0: synchronous", example="1")

    # [eval] --------------------------------------------------------------- sealed evaluation
    eval_every: int = setting(0, "eval", "evaluate every N steps (0: at the end only)",
                           key="every",
                 bounds=f"[0, {MAX_STEPS}]", why="0: never", example="0")
    eval_harnesses: list[str] = setting(None, "eval", "evaluation harnesses — include unseen "
                                     "ones (docs/research.md §2)", key="harnesses", factory=list)
    eval_tasks: list[str] = setting(None, "eval", "evaluation task ids or globs", key="tasks",
                                 factory=list)
    eval_seeds: int = setting(1, "eval", "seeds per (task, harness) cell", key="seeds",
                 bounds="[1, 1000000]", example="1")

    # [run] ---------------------------------------------------------------- bookkeeping
    seed: int = setting(0, "run", "seeds sampling, shuffling and initialisation",
                 bounds=f"[0, {MAX_SEED}]", example="0")
    checkpoint_every: int = setting(50, "run", "save a checkpoint every N steps (0: only the "
                                 "final one)",
                 bounds=f"[0, {MAX_STEPS}]", why="0: never", example="50")
    out_dir: str = setting("runs/train", "run", "where checkpoints go")
    log_to: list[str] = setting(None, "run", "also log metrics to these trackers (when installed)",
                                factory=list, choices=lambda: names("tracker"))


    # ------------------------------------------------------------------ checks
    def check_together(self) -> None:
        """The rules that span several keys (each key's own type, choices and bounds are
        checked by :meth:`~tackroom.core.settings.Settings.validate` first)."""
        # The group key is compiled now, so a bad expression fails before any rollout.
        try:
            compile_group_key(self.group)
        except ConfigError as e:
            raise ConfigError(e.what, f"{self.where('group')}: {self.key_of('group')}",
                              e.fix) from None
        algorithm = entry("algorithm", self.algorithm)
        if self.critic != "none" and not algorithm.meta.get("per_token_advantages", True):
            takes = [e.name for e in entries("algorithm") if e.meta.get("per_token_advantages", True)]
            raise ConfigError(
                f"algorithm {self.algorithm!r} with critic {self.critic!r}: sequence-level "
                f"{self.algorithm.upper()} takes one advantage per completion, a critic gives "
                "one per turn", self.where("critic"),
                f"use algo.algorithm = one of {', '.join(takes)} with a critic, "
                "or critic.kind = \"none\"")
        self._check_rollout_backend()

    def _check_rollout_backend(self) -> None:
        """``rollout.backend``, ``base_url`` and ``max_staleness`` fit together."""
        if self.rollout_backend == "openai":
            url = self.base_url.strip()
            if not url.startswith(("http://", "https://")):
                where = self.where("base_url" if "base_url" in self._sources
                                   else "rollout_backend")
                raise ConfigError(f"rollout.base_url = {self.base_url!r} "
                                  + ("is not an http(s) URL" if url else "is empty"), where,
                                  "with rollout.backend = \"openai\" set rollout.base_url to "
                                  "the server's /v1 root, e.g. \"http://127.0.0.1:8000/v1\"")
            if not self.lora:
                raise self.fail("lora", "cannot be served by an inference server",
                                "rollout.backend = \"openai\" hot-loads LoRA adapters: keep "
                                "lora.enabled = true, or use rollout.backend = \"hf\"")
        if self.max_staleness > 0:
            if self.rollout_backend != "openai":
                raise self.fail("max_staleness", "needs rollout.backend = \"openai\"",
                                "the hf backend generates with the very model being trained, "
                                "so rollouts cannot overlap updates: serve the model "
                                "(tackroom serve, vLLM) and set rollout.backend = \"openai\" "
                                "and rollout.base_url, or set rollout.max_staleness = 0")
            if self.source != "online":
                raise self.fail("max_staleness", "is for online rollouts",
                                "records are already collected: set rollout.max_staleness "
                                "= 0 with data.source = \"records\"")
            if self.temperature != 1.0:
                raise self.fail("max_staleness", f"needs rollout.temperature = 1 (not "
                                f"{self.temperature:g})",
                                "servers return log-probs of the temperature-1 distribution, "
                                "and off-policy ratios need the sampler's own: train at "
                                "temperature 1, or set rollout.max_staleness = 0")

    # ------------------------------------------------------------------ defaults
    def resolved_values(self) -> dict[str, Any]:
        """The algorithm-dependent settings with ``None`` replaced by the algorithm's default."""
        d = algorithm_defaults(self.algorithm)
        return {
            "epsilon_low": _first(self.epsilon_low, self.epsilon, d["epsilon_low"]),
            "epsilon_high": _first(self.epsilon_high, self.epsilon, d["epsilon_high"]),
            "loss_agg": _first(self.loss_agg, d["loss_agg"]),
            "scale_std": _first(self.scale_std, d["scale_std"]),
        }

    def resolved(self) -> RLConfig:
        """A copy with every algorithm default filled in (what the losses actually use)."""
        out = dataclasses.replace(self, **self.resolved_values())
        out._sources = dict(self._sources)  # replace() does not copy the sources
        return out

    # ------------------------------------------------------------------ writing
    def to_dict(self, *, resolved: bool = False) -> dict[str, Any]:
        """Sectioned plain values (``None`` left out), e.g. for the run's config snapshot."""
        return Settings.to_dict(self.resolved() if resolved else self)

    def to_toml(self, *, resolved: bool = False) -> str:
        """The config as TOML that :meth:`from_toml` reads back to an equal config."""
        return Settings.to_toml(self.resolved() if resolved else self)

    # ------------------------------------------------------------------ hand-offs
    def lora_settings(self) -> Any:
        """The engine's ``LoraSettings`` (``None`` when training every weight)."""
        from tackroom.train.engine import LoraSettings
        if not self.lora:
            return None
        targets = self.lora_target_modules
        return LoraSettings(rank=self.lora_rank, alpha=self.lora_alpha, dropout=self.lora_dropout,
                            target_modules=targets if isinstance(targets, str) else tuple(targets))

    def optim_settings(self) -> Any:
        """The engine's ``OptimSettings`` for these values."""
        from tackroom.train.engine import OptimSettings
        return OptimSettings(lr=self.lr, weight_decay=self.weight_decay,
                             warmup_steps=self.warmup_steps, schedule=self.schedule,
                             min_lr_ratio=self.min_lr_ratio, max_grad_norm=self.max_grad_norm,
                             grad_accum=self.grad_accum, betas=(self.adam_beta1, self.adam_beta2))


def _first(*values: Any) -> Any:
    return next(v for v in values if v is not None)


#: ``"algo.epsilon=0.3"`` → ``("epsilon", 0.3)`` (see :meth:`Settings.parse_override`).
parse_override = RLConfig.parse_override
