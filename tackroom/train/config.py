"""``RLConfig``: every hyper-parameter of multi-harness RL, named once, in one dataclass.

A TOML file groups them in sections; each key belongs to exactly one::

    [algo]                                # the loss
    algorithm = "gspo"                    # grpo | dr_grpo | gspo | gspo_token
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
:meth:`RLConfig.resolved` (see ``ALGORITHM_DEFAULTS``): GRPO clips at ε = 0.2
and averages per sequence, Dr.GRPO divides by a constant and does not scale by
the group std, GSPO clips at (3e-4, 4e-4).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from tackroom.core.errors import ConfigError
from tackroom.train.engine import MAX_BATCH, MAX_RANK, MAX_SEED, MAX_STEPS

ALGORITHMS = ("grpo", "dr_grpo", "gspo", "gspo_token")
LOSS_AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "constant")
NORMALISATIONS = ("per_harness", "pooled", "none")
CRITICS = ("none", "shared", "harness")
HARNESS_EMBEDS = ("add", "concat")
SCHEDULES = ("cosine", "linear", "constant")
DATA_SOURCES = ("online", "records")
REWARDS = ("success", "recorded")
ROLLOUT_BACKENDS = ("hf", "openai")
#: The largest ``rollout.max_staleness``: more is a different algorithm, not a lag.
MAX_STALENESS = 64
LOGGERS = ("wandb", "mlflow")
SECTIONS = ("algo", "grouping", "critic", "lora", "optim", "model", "data", "rollout", "eval",
            "run")
#: Other spellings accepted for a section name.
SECTION_ALIASES = {"algorithm": "algo", "loss": "algo"}

#: What ``None`` means for each algorithm (docs/research.md §3; TRL's documented settings).
ALGORITHM_DEFAULTS: dict[str, dict[str, Any]] = {
    "grpo": {"epsilon_low": 0.2, "epsilon_high": 0.2, "loss_agg": "seq_mean_token_mean",
             "scale_std": True},
    "dr_grpo": {"epsilon_low": 0.2, "epsilon_high": 0.2, "loss_agg": "constant",
                "scale_std": False},
    "gspo": {"epsilon_low": 3e-4, "epsilon_high": 4e-4, "loss_agg": "seq_mean_token_mean",
             "scale_std": True},
    "gspo_token": {"epsilon_low": 3e-4, "epsilon_high": 4e-4,
                   "loss_agg": "seq_mean_token_mean", "scale_std": True},
}


def _opt(default: Any, section: str, doc: str, *, key: str | None = None,
         choices: tuple[str, ...] | None = None, factory: Any = None) -> Any:
    meta = {"section": section, "key": key, "doc": doc, "choices": choices}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class RLConfig:
    """One RL training run's hyper-parameters; ``section.key`` is each one's TOML home."""

    # [algo] -------------------------------------------------------------- the loss
    algorithm: str = _opt("grpo", "algo", "the policy loss", choices=ALGORITHMS)
    epsilon: float | None = _opt(None, "algo", "symmetric clip range ε (sets both ends "
                                 "unless epsilon_low/high are given); TRL epsilon")
    epsilon_low: float | None = _opt(None, "algo", "lower clip: ratios below 1 − ε_low are "
                                     "clipped (algorithm default if unset)")
    epsilon_high: float | None = _opt(None, "algo", "upper clip: ratios above 1 + ε_high are "
                                      "clipped; TRL epsilon_high")
    beta: float = _opt(0.0, "algo", "coefficient of the k3 KL to the reference policy; "
                       "0 skips the reference forward pass")
    kl_ratio_correction: bool = _opt(False, "algo", "weight the KL term by the importance "
                                     "ratio (TRL use_bias_correction_kl, default true there)")
    loss_agg: str | None = _opt(None, "algo", "how per-token losses are averaged "
                                "(algorithm default if unset)", choices=LOSS_AGGREGATIONS)
    max_completion_length: int = _opt(1024, "algo", "the constant divisor of the 'constant' "
                                      "aggregation (Dr.GRPO; TRL max_completion_length)")
    num_iterations: int = _opt(1, "algo", "optimisation passes over each batch of rollouts "
                               "(GRPO μ; TRL num_iterations)")

    # [grouping] ---------------------------------------------------------- advantages
    group: str = _opt("within", "grouping", "group key: within = (task, harness), cross = "
                      "task, or an expression over sample fields")
    normalise: str = _opt("none", "grouping", "reward normalisation before grouping",
                          choices=NORMALISATIONS)
    scale_std: bool | None = _opt(None, "grouping", "divide advantages by the group std "
                                  "(algorithm default if unset: off for dr_grpo)")
    std_eps: float = _opt(1e-4, "grouping", "ε added to every std (TRL uses 1e-4)")
    group_size: int = _opt(8, "grouping", "rollouts per (task, harness) each step (G)")

    # [critic] ------------------------------------------------------------ PPO critic
    critic: str = _opt("none", "critic", "value head: none, shared V(s), or harness-"
                       "conditioned V(s, e)", key="kind", choices=CRITICS)
    gamma: float = _opt(1.0, "critic", "discount γ over turns")
    lam: float = _opt(0.95, "critic", "GAE λ")
    value_coef: float = _opt(0.5, "critic", "weight of the value loss in the total loss")
    value_clip: float | None = _opt(0.2, "critic", "clip range of the value loss "
                                    "(none: unclipped)")
    harness_embed: str = _opt("add", "critic", "how the harness embedding enters V(s, e)",
                              choices=HARNESS_EMBEDS)
    value_hidden: int = _opt(256, "critic", "hidden width of the value head (0: linear)")

    # [lora] -------------------------------------------------------------- adapter
    lora: bool = _opt(True, "lora", "train a LoRA adapter (false: every weight)",
                      key="enabled")
    lora_rank: int = _opt(32, "lora", "LoRA rank r", key="rank")
    lora_alpha: int = _opt(64, "lora", "LoRA α (scale α / r)", key="alpha")
    lora_dropout: float = _opt(0.0, "lora", "dropout on the LoRA input", key="dropout")
    lora_target_modules: str | list[str] = _opt(
        "all-linear", "lora", "'all-linear' or a list of module names", key="target_modules")

    # [optim] ------------------------------------------------------------- optimiser
    lr: float = _opt(1e-5, "optim", "AdamW learning rate")
    weight_decay: float = _opt(0.0, "optim", "AdamW weight decay")
    adam_beta1: float = _opt(0.9, "optim", "AdamW β1")
    adam_beta2: float = _opt(0.999, "optim", "AdamW β2")
    max_grad_norm: float = _opt(1.0, "optim", "gradient clipping norm")
    warmup_steps: int = _opt(0, "optim", "linear warm-up steps")
    schedule: str = _opt("constant", "optim", "learning-rate schedule after warm-up",
                         choices=SCHEDULES)
    min_lr_ratio: float = _opt(0.1, "optim", "floor of the decaying schedules, × lr")
    grad_accum: int = _opt(1, "optim", "micro-batches per optimiser step")
    micro_batch_size: int = _opt(4, "optim", "completions per forward/backward pass")
    steps: int = _opt(100, "optim", "optimiser steps in the run")

    # [model] -------------------------------------------------------------- policy
    model: str = _opt("", "model", "the base model: a local checkpoint directory", key="path")
    init_adapter: str = _opt("", "model", "an adapter to continue training ('' : a fresh one)",
                             key="adapter")
    device: str = _opt("auto", "model", "auto, cpu or cuda[:N]")

    # [data] --------------------------------------------------------------- what to train on
    suite: str = _opt("", "data", "the task suite")
    tasks: list[str] = _opt(None, "data", "task ids or globs ([]: the whole suite)",
                            factory=list)
    harnesses: list[str] = _opt(None, "data", "training harnesses (names or .toml paths)",
                                factory=list)
    tasks_per_step: int = _opt(8, "data", "tasks drawn per step (× harnesses × group_size "
                               "rollouts)")
    source: str = _opt("online", "data", "online: roll out the current policy each step; "
                       "records: frozen episodes from the record store", choices=DATA_SOURCES)
    runs: list[str] = _opt(None, "data", "record runs to train on (source = records; "
                           "[]: every run)", factory=list)
    # Checked in validate(), not by ``choices``: besides REWARDS it takes ``proxy:NAME`` for
    # every registered proxy reward (tackroom.train.rewards).
    reward: str = _opt("success", "data", "an episode's return: success = 1 if it succeeded "
                       "else 0 (the solve rate); recorded = the environment's reward; "
                       "proxy:NAME = a learned/scripted reward (tackroom.train.rewards)")
    verifier: bool = _opt(False, "data", "gate the reward by the outcome verifier: "
                          "r = v(o)·r (v = 1 iff the episode succeeded), so a proxy pays "
                          "nothing for a wrong outcome")

    # [rollout] ------------------------------------------------------------ sampling
    temperature: float = _opt(1.0, "rollout", "sampling temperature (also divides the "
                              "training logits, so ratios compare like with like)")
    top_p: float = _opt(1.0, "rollout", "nucleus sampling")
    max_tokens: int = _opt(512, "rollout", "completion tokens per turn")
    concurrency: int = _opt(8, "rollout", "episodes run at once")
    rollout_backend: str = _opt("hf", "rollout", "who generates rollouts: hf = the model "
                                "being trained, in this process; openai = an OpenAI-compatible "
                                "server (vLLM, tackroom serve) at rollout.base_url, "
                                "each new LoRA adapter hot-loaded into it", key="backend",
                                choices=ROLLOUT_BACKENDS)
    base_url: str = _opt("", "rollout", "the inference server's /v1 root (backend = openai), "
                         "e.g. http://127.0.0.1:8000/v1; its key is $OPENAI_API_KEY")
    max_staleness: int = _opt(0, "rollout", "async off-policy: rollouts of the next s steps "
                              "are generated while a step trains, by weights at most s "
                              "updates old (0: synchronous; needs backend = openai)")

    # [eval] --------------------------------------------------------------- sealed evaluation
    eval_every: int = _opt(0, "eval", "evaluate every N steps (0: at the end only)",
                           key="every")
    eval_harnesses: list[str] = _opt(None, "eval", "evaluation harnesses — include unseen "
                                     "ones (docs/research.md §2)", key="harnesses", factory=list)
    eval_tasks: list[str] = _opt(None, "eval", "evaluation task ids or globs", key="tasks",
                                 factory=list)
    eval_seeds: int = _opt(1, "eval", "seeds per (task, harness) cell", key="seeds")

    # [run] ---------------------------------------------------------------- bookkeeping
    seed: int = _opt(0, "run", "seeds sampling, shuffling and initialisation")
    checkpoint_every: int = _opt(50, "run", "save a checkpoint every N steps (0: only the "
                                 "final one)")
    out_dir: str = _opt("runs/train", "run", "where checkpoints go")
    log_to: list[str] = _opt(None, "run", "also log metrics to: wandb, mlflow (when installed)",
                             factory=list)

    #: Where each field's value came from ("train.toml", "override 'algo.beta=…'"), for errors.
    _sources: dict[str, str] = field(default_factory=dict, init=False, repr=False,
                                     compare=False, metadata={"section": None})

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------------ naming
    @staticmethod
    def key_of(name: str) -> str:
        """The dotted ``section.key`` of field ``name``."""
        f = _FIELDS[name]
        return f"{f.metadata['section']}.{f.metadata['key'] or name}"

    def _where(self, name: str) -> str:
        return self._sources.get(name, "RLConfig")

    def _fail(self, name: str, what: str, fix: str) -> ConfigError:
        return ConfigError(f"{self.key_of(name)} = {getattr(self, name)!r} {what}",
                           self._where(name), fix)

    # ------------------------------------------------------------------ checks
    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first bad key, its source, and what is allowed."""
        for f in fields(self):
            if f.name.startswith("_"):
                continue
            # Direct construction (``RLConfig(beta="x")``) gets the same type errors as TOML.
            value = _coerce(f.name, getattr(self, f.name), self._where(f.name))
            setattr(self, f.name, value)
            choices = f.metadata.get("choices")
            if choices and value is not None and value not in choices:
                close = difflib.get_close_matches(str(value), choices, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise self._fail(f.name, f"is not allowed{hint}",
                                 f"use one of: {', '.join(choices)}")

        def need(name: str, ok: bool, rule: str, example: str) -> None:
            if not ok:
                raise self._fail(name, f"must be {rule}", f"e.g. {self.key_of(name)} = {example}")

        for name in ("epsilon", "epsilon_low"):
            v = getattr(self, name)
            need(name, v is None or 0 <= v < 1, "in [0, 1) (the ratio floor is 1 − ε)", "0.2")
        v = self.epsilon_high
        need("epsilon_high", v is None or v >= 0, ">= 0", "0.28")
        need("beta", self.beta >= 0, ">= 0", "0.04")
        need("max_completion_length", 1 <= self.max_completion_length <= 10_000_000,
             "from 1 to 10_000_000", "1024")
        need("num_iterations", 1 <= self.num_iterations <= 1000, "from 1 to 1000", "1")
        need("std_eps", self.std_eps > 0, "> 0 (it guards division by a zero std)", "1e-4")
        need("group_size", 1 <= self.group_size <= 4096,
             "from 1 to 4096 (2 or more for a baseline)", "8")
        need("gamma", 0 <= self.gamma <= 1, "in [0, 1]", "1.0")
        need("lam", 0 <= self.lam <= 1, "in [0, 1]", "0.95")
        need("value_coef", self.value_coef >= 0, ">= 0", "0.5")
        need("value_clip", self.value_clip is None or self.value_clip > 0,
             "> 0, or none for no clipping", "0.2")
        need("value_hidden", 0 <= self.value_hidden <= 65536, "from 0 to 65536", "256")
        need("lora_rank", 1 <= self.lora_rank <= MAX_RANK, f"from 1 to {MAX_RANK}", "32")
        need("lora_alpha", 1 <= self.lora_alpha <= 1e6, "from 1 to 1e6", "64")
        need("lora_dropout", 0 <= self.lora_dropout < 1, "in [0, 1)", "0.05")
        need("lr", 0 < self.lr <= 1, "in (0, 1] (above 1 only diverges)", "1e-5")
        need("weight_decay", 0 <= self.weight_decay <= 1e3, "from 0 to 1000", "0.0")
        need("adam_beta1", 0 <= self.adam_beta1 < 1, "in [0, 1)", "0.9")
        need("adam_beta2", 0 <= self.adam_beta2 < 1, "in [0, 1)", "0.999")
        need("max_grad_norm", 0 < self.max_grad_norm <= 1e12, "in (0, 1e12]", "1.0")
        need("warmup_steps", 0 <= self.warmup_steps <= MAX_STEPS, f"from 0 to {MAX_STEPS}", "0")
        need("min_lr_ratio", 0 <= self.min_lr_ratio <= 1, "in [0, 1]", "0.1")
        need("grad_accum", 1 <= self.grad_accum <= MAX_BATCH, f"from 1 to {MAX_BATCH}", "1")
        need("micro_batch_size", 1 <= self.micro_batch_size <= MAX_BATCH,
             f"from 1 to {MAX_BATCH}", "4")
        need("steps", 1 <= self.steps <= MAX_STEPS, f"from 1 to {MAX_STEPS}", "100")
        need("tasks_per_step", 1 <= self.tasks_per_step <= 100_000, "from 1 to 100_000", "8")
        need("temperature", 0 < self.temperature <= 2, "in (0, 2] (as for evaluation)", "1.0")
        need("top_p", 0 < self.top_p <= 1, "in (0, 1]", "1.0")
        need("max_tokens", 1 <= self.max_tokens <= 10_000_000, "from 1 to 10_000_000", "512")
        need("concurrency", 1 <= self.concurrency <= 4096, "from 1 to 4096", "8")
        need("max_staleness", 0 <= self.max_staleness <= MAX_STALENESS,
             f"from 0 (synchronous) to {MAX_STALENESS}", "1")
        need("eval_every", 0 <= self.eval_every <= MAX_STEPS, "0 (never) or a step count", "0")
        need("eval_seeds", 1 <= self.eval_seeds <= 1_000_000, "from 1 to 1_000_000", "1")
        need("checkpoint_every", 0 <= self.checkpoint_every <= MAX_STEPS,
             "0 (never) or a step count", "50")
        need("seed", 0 <= self.seed <= MAX_SEED, f"from 0 to {MAX_SEED}", "0")
        self._check_reward()
        for logger in self.log_to:
            if logger not in LOGGERS:
                raise self._fail("log_to", f"names an unknown logger {logger!r}",
                                 f"use any of: {', '.join(LOGGERS)}")

        # The group key is compiled now, so a bad expression fails before any rollout.
        from tackroom.train.advantages import compile_group_key
        try:
            compile_group_key(self.group)
        except ConfigError as e:
            raise ConfigError(e.what, f"{self._where('group')}: {self.key_of('group')}",
                              e.fix) from None

        if self.algorithm == "gspo" and self.critic != "none":
            raise ConfigError(
                f"algorithm 'gspo' with critic {self.critic!r}: sequence-level GSPO takes one "
                "advantage per completion, a critic gives one per turn",
                self._where("critic"),
                "use algo.algorithm = \"gspo_token\" or \"grpo\" with a critic, "
                "or critic.kind = \"none\"")
        self._check_rollout_backend()
        r = self.resolved_values()
        if r["loss_agg"] == "constant" and self.max_completion_length < 1:
            raise self._fail("max_completion_length", "must be >= 1 for the constant "
                             "aggregation", "e.g. algo.max_completion_length = 1024")

    def _check_reward(self) -> None:
        """``data.reward`` is one of REWARDS or ``proxy:NAME`` of a registered proxy."""
        from tackroom.train.rewards import PREFIX, PROXIES, is_proxy

        allowed = ", ".join([*REWARDS, *(f"{PREFIX}{n}" for n in sorted(PROXIES))])
        if is_proxy(self.reward):
            if self.reward[len(PREFIX):] not in PROXIES:
                raise self._fail("reward", "names no registered proxy reward",
                                 f"use one of: {allowed}")
        elif self.reward not in REWARDS:
            close = difflib.get_close_matches(str(self.reward), allowed.split(", "), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise self._fail("reward", f"is not allowed{hint}", f"use one of: {allowed}")

    def _check_rollout_backend(self) -> None:
        """``rollout.backend``, ``base_url`` and ``max_staleness`` fit together."""
        if self.rollout_backend == "openai":
            url = self.base_url.strip()
            if not url.startswith(("http://", "https://")):
                where = self._where("base_url" if "base_url" in self._sources
                                    else "rollout_backend")
                raise ConfigError(f"rollout.base_url = {self.base_url!r} "
                                  + ("is not an http(s) URL" if url else "is empty"), where,
                                  "with rollout.backend = \"openai\" set rollout.base_url to "
                                  "the server's /v1 root, e.g. \"http://127.0.0.1:8000/v1\"")
            if not self.lora:
                raise self._fail("lora", "cannot be served by an inference server",
                                 "rollout.backend = \"openai\" hot-loads LoRA adapters: keep "
                                 "lora.enabled = true, or use rollout.backend = \"hf\"")
        if self.max_staleness > 0:
            if self.rollout_backend != "openai":
                raise self._fail("max_staleness", "needs rollout.backend = \"openai\"",
                                 "the hf backend generates with the very model being trained, "
                                 "so rollouts cannot overlap updates: serve the model "
                                 "(tackroom serve, vLLM) and set rollout.backend = \"openai\" "
                                 "and rollout.base_url, or set rollout.max_staleness = 0")
            if self.source != "online":
                raise self._fail("max_staleness", "is for online rollouts",
                                 "records are already collected: set rollout.max_staleness "
                                 "= 0 with data.source = \"records\"")
            if self.temperature != 1.0:
                raise self._fail("max_staleness", f"needs rollout.temperature = 1 (not "
                                 f"{self.temperature:g})",
                                 "servers return log-probs of the temperature-1 distribution, "
                                 "and off-policy ratios need the sampler's own: train at "
                                 "temperature 1, or set rollout.max_staleness = 0")

    # ------------------------------------------------------------------ defaults
    def resolved_values(self) -> dict[str, Any]:
        """The algorithm-dependent settings with ``None`` replaced by the algorithm's default."""
        d = ALGORITHM_DEFAULTS[self.algorithm]
        return {
            "epsilon_low": _first(self.epsilon_low, self.epsilon, d["epsilon_low"]),
            "epsilon_high": _first(self.epsilon_high, self.epsilon, d["epsilon_high"]),
            "loss_agg": _first(self.loss_agg, d["loss_agg"]),
            "scale_std": _first(self.scale_std, d["scale_std"]),
        }

    def resolved(self) -> RLConfig:
        """A copy with every algorithm default filled in (what the losses actually use)."""
        out = dataclasses.replace(self, **self.resolved_values())
        out._sources = dict(self._sources)  # replace() does not copy init=False fields
        return out

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "config") -> RLConfig:
        """A config from sectioned (``{"algo": {"beta": 0.1}}``) and/or flat keys."""
        values, sources = _collect(data, where)
        return cls._build(values, sources)

    @classmethod
    def from_toml(cls, path: str | Path | None = None,
                  overrides: Sequence[str] = ()) -> RLConfig:
        """Read ``path`` (``None``: the defaults), then apply ``key=value`` overrides in order.

        Validation runs once, on the result, so an override may repair a file's value.
        """
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        if path is not None:
            p = Path(path)
            try:
                data = tomllib.loads(p.read_text(encoding="utf-8"))
            except FileNotFoundError:
                raise ConfigError("config file not found", str(p),
                                  "check the path, or drop it to use the defaults") from None
            except tomllib.TOMLDecodeError as e:
                raise ConfigError(f"not valid TOML: {e}", str(p), "fix the syntax") from None
            values, sources = _collect(data, str(p))
        for item in overrides:
            name, value = parse_override(item)
            values[name], sources[name] = value, f"override {item!r}"
        return cls._build(values, sources)

    @classmethod
    def _build(cls, values: dict[str, Any], sources: dict[str, str]) -> RLConfig:
        coerced = {}
        for name, v in values.items():
            coerced[name] = _coerce(name, v, sources.get(name, "config"))
        cfg = cls.__new__(cls)
        # Sources first, so validation in __post_init__ can say where a bad value came from.
        cfg._sources = sources
        for f in fields(cls):
            if f.name == "_sources":
                continue
            if f.name in coerced:
                setattr(cfg, f.name, coerced[f.name])
            elif f.default is not dataclasses.MISSING:
                setattr(cfg, f.name, f.default)
            else:
                setattr(cfg, f.name, f.default_factory())  # type: ignore[misc]
        cfg.__post_init__()
        return cfg

    # ------------------------------------------------------------------ writing
    def to_dict(self, *, resolved: bool = False) -> dict[str, dict[str, Any]]:
        """Sectioned plain values (``None`` left out), e.g. for the run's config snapshot."""
        cfg = self.resolved() if resolved else self
        out: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
        for f in fields(cfg):
            if f.name.startswith("_"):
                continue
            value = getattr(cfg, f.name)
            if value is not None:
                out[f.metadata["section"]][f.metadata["key"] or f.name] = \
                    list(value) if isinstance(value, list) else value
        return {s: v for s, v in out.items() if v}

    def to_toml(self, *, resolved: bool = False) -> str:
        """The config as TOML that :meth:`from_toml` reads back to an equal config."""
        lines: list[str] = []
        for section, items in self.to_dict(resolved=resolved).items():
            lines.append(f"[{section}]")
            lines.extend(f"{k} = {_toml_value(v)}" for k, v in items.items())
            lines.append("")
        return "\n".join(lines)

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


# ---------------------------------------------------------------------- helpers

_FIELDS = {f.name: f for f in fields(RLConfig) if not f.name.startswith("_")}
#: dotted ``section.key`` → field name
_DOTTED = {RLConfig.key_of(n): n for n in _FIELDS}
_OPTIONAL = {n for n, f in _FIELDS.items() if "None" in str(f.type)}
_FLOATS = {"epsilon", "epsilon_low", "epsilon_high", "beta", "std_eps", "gamma", "lam",
           "value_coef", "value_clip", "lora_dropout", "lr", "weight_decay", "adam_beta1",
           "adam_beta2", "max_grad_norm", "min_lr_ratio", "temperature", "top_p"}
_BOOLS = {"scale_std", "lora", "kl_ratio_correction", "verifier"}
_LISTS = {"tasks", "harnesses", "eval_harnesses", "eval_tasks", "runs", "log_to"}
_STR_OR_LIST = {"lora_target_modules"}
_INTS = {n for n, f in _FIELDS.items()
         if isinstance(f.default, int) and not isinstance(f.default, bool)
         and n not in _FLOATS}


def _collect(data: Mapping[str, Any], where: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Field values from sectioned and/or flat keys, and where each came from."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for top, value in data.items():
        if isinstance(value, Mapping):
            section = _section(top, where)
            for key, v in value.items():
                name = _field_for(f"{section}.{key}", where)
                values[name], sources[name] = v, where
        else:
            name = _field_for(top, where)
            values[name], sources[name] = value, where
    return values, sources


def _first(*values: Any) -> Any:
    return next(v for v in values if v is not None)


def _section(name: str, where: str) -> str:
    section = SECTION_ALIASES.get(name, name)
    if section not in SECTIONS:
        close = difflib.get_close_matches(name, SECTIONS, n=1)
        raise ConfigError(f"unknown section [{name}]" + (f" (did you mean [{close[0]}]?)"
                                                         if close else ""), where,
                          f"sections are: {', '.join(SECTIONS)}")
    return section


def _field_for(key: str, where: str) -> str:
    """The field a ``section.key`` or flat name refers to."""
    if "." in key:
        section, _, rest = key.partition(".")
        dotted = f"{_section(section, where)}.{rest}"
        if dotted in _DOTTED:
            return _DOTTED[dotted]
        # ``algo.algorithm`` style: a flat field name under its own section is fine too.
        if rest in _FIELDS and _FIELDS[rest].metadata["section"] == dotted.split(".")[0]:
            return rest
        known = sorted(k for k in _DOTTED if k.startswith(dotted.split(".")[0] + "."))
        close = difflib.get_close_matches(dotted, list(_DOTTED), n=1)
        raise ConfigError(f"unknown setting {key!r}" + (f" (did you mean {close[0]!r}?)"
                                                         if close else ""), where,
                          f"keys in this section: {', '.join(known)}")
    if key in _FIELDS:
        return key
    close = difflib.get_close_matches(key, [*_FIELDS, *_DOTTED], n=1)
    raise ConfigError(f"unknown setting {key!r}" + (f" (did you mean {close[0]!r}?)"
                                                     if close else ""), where,
                      "see docs/training.md for every key, or use section.key")


def parse_override(item: str) -> tuple[str, Any]:
    """``"algo.epsilon=0.3"`` → ``("epsilon", 0.3)``; the value is TOML, else a bare string."""
    where = f"override {item!r}"
    key, sep, raw = item.partition("=")
    key, raw = key.strip(), raw.strip()
    if not sep or not key:
        raise ConfigError("an override is key=value", where, "e.g. algo.epsilon=0.3")
    name = _field_for(key, where)
    if raw.lower() in ("none", "null") and name in _OPTIONAL:
        return name, None
    try:
        value: Any = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # a bare word or expression: algo.algorithm=gspo, grouping.group=task
    if name in _LISTS and isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    return name, value


def _coerce(name: str, value: Any, where: str) -> Any:
    """``value`` as field ``name``'s type, or a ConfigError saying which type it needs."""
    key = RLConfig.key_of(name)

    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{key} = {value!r} is not {expected}", where,
                           f"give {key} {expected}")

    if value is None:
        if name in _OPTIONAL:
            return None
        raise bad("optional (it needs a value)")
    if name in _BOOLS:
        if not isinstance(value, bool):
            raise bad("a boolean (true or false)")
        return value
    if name in _FLOATS:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("a number")
        if not math.isfinite(value):
            raise bad("a finite number")
        return float(value)
    if name in _INTS:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise bad("an integer")
        return value
    if name in _LISTS:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad("a list of strings")
        return list(value)
    if name in _STR_OR_LIST:
        if isinstance(value, str):
            return value
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return list(value)
        raise bad("a string or a non-empty list of strings")
    if not isinstance(value, str):
        raise bad("a string")
    return value


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {v!r} as TOML")
