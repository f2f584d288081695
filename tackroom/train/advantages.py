"""Group-relative advantages across harnesses: grouping and normalisation as options.

Input: the scored samples of one training step — each a task, the harness it
ran under, its reward, and any other fields (seed, suite, policy, meta...).
Output: one advantage per sample and the step's metrics (fraction of
zero-variance groups, mean reward per harness, ...).

Three independent choices (docs/research.md §2, docs/training.md):

1. **Reward normalisation** across the step, before grouping —
   ``per_harness``: z-score each harness's rewards on their own, so a harness
   whose rewards run higher (an easier interface) does not dominate pooled
   comparisons; ``pooled``: one z-score over every sample; ``none``: raw rewards.

       x_i = (r_i − mean_{H(i)} r) / (std_{H(i)} r + ε)     (H(i): i's harness, or everything)

2. **Grouping**, the baseline each sample is compared with — ``within``: one
   group per (task, harness); ``cross``: one group per task, harnesses pooled;
   or a custom key: a small safe expression over the sample's fields
   (``"task + '|' + str(seed // 2)"``) or a Python callable.

3. **Std scaling** inside each group, on (GRPO) or off (Dr.GRPO):

       A_i = (x_i − mean_{g(i)} x) / (std_{g(i)} x + ε)     or     A_i = x_i − mean_{g(i)} x

Standard deviations are the unbiased (n − 1) estimate, as in TRL; a group of
one has std 0. With ``normalise="none"`` this is exactly TRL's
``scale_rewards="group"`` (std on) and ``"none"`` (std off); ``"pooled"`` with
std off is exactly TRL's ``scale_rewards="batch"`` — tests check all three
against TRL's own code.

Pure Python and numpy: no torch, so grouping can be planned and tested without
the training extra.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from tackroom.core.errors import ConfigError
from tackroom.core.registry import entries, get, register

Normalise = Literal["per_harness", "pooled", "none"]
#: A group key: ``within``, ``cross``, a safe expression, or a callable on the sample's fields.
GroupSpec = str | Callable[[Mapping[str, Any]], Hashable]

#: A std at or below this counts as zero (TRL uses ``torch.isclose(std, 0)``, atol 1e-8).
ZERO_STD = 1e-8


# --------------------------------------------------------------------------- samples


@dataclass(frozen=True)
class Sample:
    """One scored rollout: task, harness, reward, and any further named fields.

    ``fields`` are what custom group keys can name besides ``task``,
    ``harness`` and ``reward`` (e.g. ``seed``, ``suite``, ``policy``, ``meta``).
    """

    task: str
    harness: str
    reward: float
    fields: Mapping[str, Any] = field(default_factory=dict)

    def namespace(self) -> dict[str, Any]:
        """Every name a group-key expression may use."""
        return {**self.fields, "task": self.task, "harness": self.harness,
                "reward": self.reward}

    @classmethod
    def from_episode(cls, episode: Any, **extra: Any) -> Sample:
        """A sample from a recorded :class:`~tackroom.core.episode.Episode` (reward = its reward)."""
        fields = {"suite": episode.suite, "seed": episode.seed, "attempt": episode.attempt,
                  "policy": episode.policy, "harness_hash": episode.harness_hash,
                  "outcome": str(getattr(episode.outcome, "value", episode.outcome)),
                  "episode_id": episode.episode_id, "n_turns": len(episode.turns),
                  "meta": dict(episode.meta), **extra}
        return cls(episode.task, episode.harness, float(episode.reward), fields)

    @classmethod
    def coerce(cls, item: Sample | Mapping[str, Any] | Any) -> Sample:
        """A :class:`Sample` from a sample, a mapping with task/harness/reward, or an episode."""
        if isinstance(item, Sample):
            return item
        if isinstance(item, Mapping):
            missing = [k for k in ("task", "harness", "reward") if k not in item]
            if missing:
                raise ValueError(f"a sample needs task, harness and reward; missing {missing}")
            rest = {k: v for k, v in item.items() if k not in ("task", "harness", "reward")}
            return cls(str(item["task"]), str(item["harness"]), float(item["reward"]), rest)
        if all(hasattr(item, a) for a in ("task", "harness", "reward", "turns")):
            return cls.from_episode(item)
        raise TypeError(f"cannot use {type(item).__name__} as a sample")


# --------------------------------------------------------------------------- group keys


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "str": str, "int": int, "float": float, "bool": bool, "len": len,
    "abs": abs, "min": min, "max": max, "round": round,
}
#: Methods callable on *string* values only (e.g. ``task.split('/')[0]`` for a task family).
_STR_METHODS = frozenset({
    "split", "rsplit", "partition", "rpartition", "lower", "upper", "strip", "lstrip",
    "rstrip", "startswith", "endswith", "replace", "removeprefix", "removesuffix",
})
_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
}
_CMPOPS: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
_MAX_EXPR_CHARS = 500
_MAX_SEQ = 10_000  # longest string/tuple an expression may build (no "x" * 10**9)
_WHERE = "grouping.group"
_HELP = ("a group key is 'within', 'cross' or an expression over the sample's fields, "
         "e.g. \"task + '|' + str(seed // 2)\"; allowed: + - * / // %, comparisons, "
         "and/or/not, x if c else y, indexing/slicing, tuples, "
         f"{', '.join(sorted(_FUNCTIONS))}() and string methods "
         f"({', '.join(sorted(_STR_METHODS))})")


class GroupKeyExpr:
    """A group-key expression, checked once and evaluated on each sample's fields.

    Not Python's ``eval``: the parsed tree is walked by a small interpreter that
    knows only literals, the sample's field names, arithmetic, comparisons,
    boolean logic, conditionals, indexing, tuples, a handful of conversion
    functions and read-only string methods. No attribute access except those
    string methods, no other calls, no names beginning with ``_`` — nothing that
    reaches Python's object graph.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        if len(source) > _MAX_EXPR_CHARS:
            raise ConfigError(f"group key expression is {len(source)} characters long",
                              _WHERE, f"keep it under {_MAX_EXPR_CHARS}")
        try:
            self._tree = ast.parse(source.strip(), mode="eval")
        except SyntaxError as e:
            raise ConfigError(f"group key {source!r} is not an expression ({e.msg})",
                              _WHERE, _HELP) from None
        for node in ast.walk(self._tree):
            self._allow(node)

    def _allow(self, node: ast.AST) -> None:
        ok = isinstance(node, (
            ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp,
            ast.Tuple, ast.Subscript, ast.Slice, ast.Name, ast.Constant, ast.Call, ast.Attribute,
            ast.Load, ast.And, ast.Or, ast.Not, ast.USub, ast.UAdd, *_BINOPS, *_CMPOPS))
        why = type(node).__name__
        if isinstance(node, ast.Constant) and not isinstance(
                node.value, (str, int, float, bool, type(None))):
            ok, why = False, f"constant {node.value!r}"
        elif isinstance(node, ast.Name) and node.id.startswith("_"):
            ok, why = False, f"name {node.id!r}"
        elif isinstance(node, ast.Attribute) and node.attr not in _STR_METHODS:
            ok, why = False, f"attribute .{node.attr}"
        elif isinstance(node, ast.Call):
            if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
                ok, why = False, "keyword or * arguments"
            elif isinstance(node.func, ast.Name):
                ok, why = node.func.id in _FUNCTIONS, f"call of {node.func.id}()"
            elif not isinstance(node.func, ast.Attribute):
                ok, why = False, "call of a computed function"
        if not ok:
            raise ConfigError(f"group key {self.source!r} uses {why}, which is not allowed",
                              _WHERE, _HELP)
        if isinstance(node, ast.Attribute) and not _is_call_target(node, self._tree):
            raise ConfigError(f"group key {self.source!r} reads .{node.attr} without calling it",
                              _WHERE, _HELP)

    def __call__(self, names: Mapping[str, Any]) -> Hashable:
        value = self._eval(self._tree.body, names)
        try:
            hash(value)
        except TypeError:
            raise ConfigError(f"group key {self.source!r} gave an unhashable "
                              f"{type(value).__name__}", _WHERE,
                              "make the key a string, number or tuple") from None
        return value

    def __repr__(self) -> str:
        return f"GroupKeyExpr({self.source!r})"

    def _eval(self, node: ast.AST, env: Mapping[str, Any]) -> Any:  # noqa: C901 - one case per node
        ev = self._eval
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise ConfigError(
                    f"group key {self.source!r} names {node.id!r}, which the sample lacks",
                    _WHERE, f"use one of: {', '.join(sorted(env))}")
            return env[node.id]
        if isinstance(node, ast.Tuple):
            return tuple(ev(e, env) for e in node.elts)
        if isinstance(node, ast.UnaryOp):
            v = ev(node.operand, env)
            return not v if isinstance(node.op, ast.Not) else (-v if isinstance(node.op, ast.USub)
                                                               else +v)
        if isinstance(node, ast.BoolOp):
            want = isinstance(node.op, ast.Or)  # `or` stops at the first truthy value
            v = None
            for e in node.values:
                v = ev(e, env)
                if bool(v) == want:
                    return v
            return v
        if isinstance(node, ast.Compare):
            left = ev(node.left, env)
            for op, comp in zip(node.ops, node.comparators, strict=True):
                right = ev(comp, env)
                if not self._apply(_CMPOPS[type(op)], left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.IfExp):
            return ev(node.body, env) if ev(node.test, env) else ev(node.orelse, env)
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left, env), ev(node.right, env)
            if isinstance(node.op, ast.Mult):
                for s, n in ((a, b), (b, a)):
                    if isinstance(s, (str, tuple)) and isinstance(n, int) and len(s) * n > _MAX_SEQ:
                        raise ConfigError(f"group key {self.source!r} builds a sequence longer "
                                          f"than {_MAX_SEQ}", _WHERE, "use a shorter key")
            return self._apply(_BINOPS[type(node.op)], a, b)
        if isinstance(node, ast.Subscript):
            return self._apply(lambda a, b: a[b], ev(node.value, env), ev(node.slice, env))
        if isinstance(node, ast.Slice):
            return slice(*(None if p is None else ev(p, env)
                           for p in (node.lower, node.upper, node.step)))
        if isinstance(node, ast.Call):
            args = [ev(a, env) for a in node.args]
            if isinstance(node.func, ast.Name):
                return self._apply(_FUNCTIONS[node.func.id], *args)
            assert isinstance(node.func, ast.Attribute)
            target = ev(node.func.value, env)
            if not isinstance(target, str):
                raise ConfigError(f"group key {self.source!r} calls .{node.func.attr}() on a "
                                  f"{type(target).__name__}", _WHERE,
                                  "string methods apply to strings only; wrap in str(...)")
            return self._apply(getattr(target, node.func.attr), *args)
        raise ConfigError(f"group key {self.source!r}: cannot evaluate {type(node).__name__}",
                          _WHERE, _HELP)  # unreachable: _allow rejected it

    def _apply(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except (TypeError, ValueError, ZeroDivisionError, IndexError, KeyError) as e:
            raise ConfigError(f"group key {self.source!r} failed on a sample: "
                              f"{type(e).__name__}: {e}", _WHERE,
                              "check the expression against the sample's field types") from None


def _is_call_target(node: ast.Attribute, tree: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and n.func is node for n in ast.walk(tree))


# Grouping rules and reward normalisations are registry entries of kind "advantage" (meta
# ``role`` = "group" or "normalise"), so config validation, messages and a plug-in's own
# rule all read one table; ``grouping.group`` may also be an expression (GroupKeyExpr).

@register("advantage", "within", role="group",
          summary="group rule: one group per (task, harness) — TRL's groups")
def _within(names: Mapping[str, Any]) -> Hashable:
    return (names["task"], names["harness"])


@register("advantage", "cross", role="group",
          summary="group rule: one group per task, harnesses pooled")
def _cross(names: Mapping[str, Any]) -> Hashable:
    return names["task"]


def advantage_names(role: str) -> list[str]:
    """The registered advantage entries of ``role`` (``group`` or ``normalise``)."""
    return [e.name for e in entries("advantage") if e.meta.get("role") == role]


def compile_group_key(spec: GroupSpec) -> Callable[[Mapping[str, Any]], Hashable]:
    """The key function for ``spec``: ``within`` → (task, harness), ``cross`` → task,
    any other string → a :class:`GroupKeyExpr`, a callable → itself.

    Raises :class:`ConfigError` at once for an expression that is not allowed,
    so a bad config fails before any rollout is spent.
    """
    if callable(spec):
        return spec
    if isinstance(spec, str) and spec in advantage_names("group"):
        return get("advantage", spec)
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"group key {spec!r} is empty or not a string", _WHERE, _HELP)
    return GroupKeyExpr(spec)


# --------------------------------------------------------------------------- advantages


@dataclass
class Advantages:
    """Advantages for one step's samples, in input order, and what to log about them.

    Attributes:
        values: A_i per sample.
        normalised: x_i, the rewards after normalisation (what the groups compare).
        group_index: the group of each sample, an index into ``groups``.
        groups: each group's key, in order of first appearance.
        zero_std: per group, whether its rewards were all equal (no signal).
        reward_mean_by_harness: mean raw reward of each harness's samples.
        metrics: flat floats for the step log: ``frac_zero_std_groups``,
            ``frac_zero_std_samples`` (TRL's ``frac_reward_zero_std``),
            ``n_groups``, ``group_size_min/max``, ``reward_mean``, ``reward_std``,
            ``advantage_abs_mean`` and ``reward_mean/<harness>`` per harness.
    """

    values: list[float]
    normalised: list[float]
    group_index: list[int]
    groups: list[Hashable]
    zero_std: list[bool]
    reward_mean_by_harness: dict[str, float]
    metrics: dict[str, float]


def _std(x: np.ndarray) -> float:
    """Unbiased sample std (n − 1), and 0 for fewer than two values."""
    return float(np.std(x, ddof=1)) if x.size > 1 else 0.0


def normalise_rewards(rewards: Sequence[float] | np.ndarray, harnesses: Sequence[str],
                      mode: Normalise, eps: float = 1e-4) -> np.ndarray:
    """x_i = (r_i − mean_S r) / (std_S r + ε), S = i's harness (``per_harness``),
    every sample (``pooled``); x = r for ``none`` — whichever normalisation ``mode`` names."""
    if mode not in advantage_names("normalise"):
        raise ConfigError(f"unknown reward normalisation {mode!r}", "grouping.normalise",
                          f"use one of: {', '.join(advantage_names('normalise'))}")
    return get("advantage", mode)(np.asarray(rewards, dtype=np.float64), harnesses, eps)


@register("advantage", "none", role="normalise", summary="normalisation: raw rewards")
def _raw(r: np.ndarray, harnesses: Sequence[str], eps: float) -> np.ndarray:
    return r.copy()


@register("advantage", "pooled", role="normalise",
          summary="normalisation: one z-score over every sample of the step")
def _pooled(r: np.ndarray, harnesses: Sequence[str], eps: float) -> np.ndarray:
    return (r - r.mean()) / (_std(r) + eps) if r.size else r.copy()


@register("advantage", "per_harness", role="normalise",
          summary="normalisation: z-score each harness's rewards on their own")
def _per_harness(r: np.ndarray, harnesses: Sequence[str], eps: float) -> np.ndarray:
    h = np.asarray(harnesses, dtype=object)
    x = np.empty_like(r)
    for name in dict.fromkeys(harnesses):
        sel = h == name
        x[sel] = (r[sel] - r[sel].mean()) / (_std(r[sel]) + eps)
    return x


def compute_advantages(samples: Sequence[Sample | Mapping[str, Any] | Any], *,
                       group: GroupSpec = "within", normalise: Normalise = "none",
                       scale_std: bool = True, eps: float = 1e-4) -> Advantages:
    """Group-relative advantages of one step's samples (formulas in the module docstring).

    Call it once per step with *every* sample of the step: normalisation and
    the group baselines are statistics over what is passed. Samples are
    :class:`Sample` objects, mappings with ``task``/``harness``/``reward`` (other
    keys become fields), or recorded episodes.
    """
    items = [Sample.coerce(s) for s in samples]
    bad = [i for i, s in enumerate(items) if not math.isfinite(s.reward)]
    if bad:
        s = items[bad[0]]
        raise ValueError(f"sample {bad[0]} ({s.task} under {s.harness}) has reward {s.reward}; "
                         "drop infra_error episodes before computing advantages")
    key_fn = compile_group_key(group)
    rewards = np.array([s.reward for s in items], dtype=np.float64)
    harnesses = [s.harness for s in items]

    x = normalise_rewards(rewards, harnesses, normalise, eps)

    index: dict[Hashable, int] = {}
    group_index = [index.setdefault(key_fn(s.namespace()), len(index)) for s in items]
    gi = np.asarray(group_index, dtype=np.int64)
    adv = np.empty_like(x)
    stds: list[float] = []
    for g in range(len(index)):
        sel = gi == g
        mean, std = float(x[sel].mean()), _std(x[sel])
        adv[sel] = (x[sel] - mean) / (std + eps) if scale_std else x[sel] - mean
        stds.append(std)

    zero = [s <= ZERO_STD for s in stds]
    sizes = np.bincount(gi, minlength=len(index)) if items else np.zeros(0, dtype=np.int64)
    by_harness = {h: float(rewards[np.asarray(harnesses, dtype=object) == h].mean())
                  for h in dict.fromkeys(harnesses)}
    metrics: dict[str, float] = {
        "n_samples": float(len(items)),
        "n_groups": float(len(index)),
        "group_size_min": float(sizes.min()) if sizes.size else 0.0,
        "group_size_max": float(sizes.max()) if sizes.size else 0.0,
        "frac_zero_std_groups": float(np.mean(zero)) if zero else 0.0,
        "frac_zero_std_samples": float(np.mean([zero[g] for g in group_index]))
        if items else 0.0,
        "reward_mean": float(rewards.mean()) if items else 0.0,
        "reward_std": _std(rewards),
        "advantage_abs_mean": float(np.abs(adv).mean()) if items else 0.0,
    }
    metrics.update({f"reward_mean/{h}": v for h, v in by_harness.items()})
    return Advantages(values=adv.tolist(), normalised=x.tolist(), group_index=group_index,
                      groups=list(index), zero_std=zero, reward_mean_by_harness=by_harness,
                      metrics=metrics)


def advantages_from_config(samples: Sequence[Sample | Mapping[str, Any] | Any],
                           cfg: Any) -> Advantages:
    """:func:`compute_advantages` with grouping, normalisation, std scaling and ε from an
    :class:`~tackroom.train.config.RLConfig` (resolved, so Dr.GRPO's "no std" default applies)."""
    c = cfg.resolved()
    return compute_advantages(samples, group=c.group, normalise=c.normalise,
                              scale_std=c.scale_std, eps=c.std_eps)
