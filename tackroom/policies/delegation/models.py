"""Decision models: p_D(choice | state) over a decision point's choice set.

Three kinds, one interface (:class:`DecisionModel`); each kind is a class registered under
the ``decision_model`` kind of :mod:`tackroom.core.registry` (``tackroom list
decision_model``; :func:`kinds`), with ``load`` and ``train`` class methods:

- ``logistic``: a conditional logit — softmax over the choice set of w·φ(state, choice)
  with φ the standardised :func:`~tackroom.policies.delegation.features.point_features`; trained
  with weighted cross-entropy + L2 (L-BFGS when scipy is installed, otherwise a fixed
  number of gradient steps: both deterministic). One weight vector is shared by every
  point type, and (``interactions=True``, the default) each feature also appears once
  per point type, so that e.g. "the element's text matches the instruction" may weigh
  differently for ``click`` and ``submit`` while a rare type still borrows the shared
  weights. A point type never seen in training uses the shared weights alone.
- ``gbm``: scikit-learn's ``HistGradientBoostingClassifier`` on one row per choice (is
  this the correct choice?); p_D = the positive scores normalised over the choice set.
- ``lm``: a small causal LM (:func:`tackroom.models.init_model`, or any local model
  directory) fine-tuned to score choices: score(choice) = the log-probability of the
  choice's label tokens after :func:`~tackroom.policies.delegation.features.context_text`
  (averaged over the label tokens, or summed with ``score="sum"``); p_D = softmax over
  the choice set; trained with weighted cross-entropy over the choice set.

A model lives in a directory whose ``decision.json`` says ``{"kind", "format": 1, ...}``;
:func:`load_model` reads any registered kind back and :func:`model_hash` is the 12-hex
content hash a harness's ``[delegation] model_hash`` pins. This module sits below the
runner (the episode loop loads models through :mod:`.runtime`); fitting one on recorded
runs is :mod:`tackroom.delegation`'s, which also gives the ``lm`` kind a fresh base model.

Training honours each :class:`Example`'s ``weight`` (a weight of 0 is the same as
leaving the example out); restricting to the states right after a mistake is the
caller's filter on ``post_mistake``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import pickle
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from tackroom.core.errors import ConfigError
from tackroom.core.registry import choices, get, has, names, register
from tackroom.policies.delegation.features import (
    FEATURE_NAMES,
    POINT_TYPES,
    context_text,
    label_text,
    point_features,
)
from tackroom.policies.delegation.lm_training import torch_threads, train_lm

#: The version of the ``decision.json`` layout this module writes and reads.
FORMAT = 1
#: The file that says what a decision model directory holds.
DECISION_FILE = "decision.json"


@dataclass
class Example:
    """One recorded decision: the point, the index of the correct choice, its weight.

    ``label`` comes from the scripted expert's action at that state; ``post_mistake``
    marks the states right after an agent's mistake (a caller may train on those alone).
    """

    point: dict
    label: int
    weight: float = 1.0
    post_mistake: bool = False


@runtime_checkable
class DecisionModel(Protocol):
    """What the delegation runtime asks of a decision model."""

    kind: str

    def predict(self, point: dict) -> list[float]:
        """Probabilities over ``point["choices"]``, in order, summing to 1."""
        ...

    def save(self, path: Path) -> None:
        """Write the model into directory ``path`` (with its ``decision.json``)."""
        ...


# -- shared helpers -----------------------------------------------------------------------
def _n_choices(point: Any) -> int:
    choices = point.get("choices") if isinstance(point, dict) else None
    return len(choices) if isinstance(choices, list) else 0


def _softmax(scores: np.ndarray) -> list[float]:
    """A valid distribution from raw scores; uniform where the scores are not usable."""
    n = len(scores)
    if n == 0:
        return []
    s = np.asarray(scores, dtype=np.float64)
    if not np.all(np.isfinite(s)):
        s = np.where(np.isfinite(s), s, -np.inf)
        if not np.any(np.isfinite(s)):
            return [1.0 / n] * n
    e = np.exp(s - np.max(s))
    return (e / e.sum()).tolist()


def _normalise(p: np.ndarray) -> list[float]:
    """``p`` ≥ 0 rescaled to sum to 1; uniform when it is all zero or not finite."""
    n = len(p)
    if n == 0:
        return []
    p = np.asarray(p, dtype=np.float64)
    p = np.where(np.isfinite(p) & (p > 0), p, 0.0)
    total = p.sum()
    if total <= 0:
        return [1.0 / n] * n
    return (p / total).tolist()


def _check_examples(examples: Sequence[Example], kind: str) -> list[Example]:
    """The examples with a positive weight, after checking every example is usable."""
    where = f"train decision model ({kind})"
    out = []
    for i, ex in enumerate(examples):
        n = _n_choices(ex.point)
        if n < 1:
            raise ConfigError(f"example {i} has no choices", where,
                              "drop decision points without choices before training")
        if isinstance(ex.label, bool) or not isinstance(ex.label, (int, np.integer)) \
                or not 0 <= int(ex.label) < n:
            raise ConfigError(f"example {i} has label {ex.label!r}, not an index of its "
                              f"{n} choices", where, "give the index of the correct choice")
        w = ex.weight
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) \
                or w < 0:
            raise ConfigError(f"example {i} has weight {w!r}", where,
                              "weights must be finite numbers ≥ 0")
        if w > 0:
            out.append(ex)
    if not out:
        raise ConfigError("no training examples with a positive weight", where,
                          "record decision points with the expert's choice first "
                          "(a harness with [delegation] points and an expert policy)")
    return out


def _options(kind: str, given: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    bad = sorted(set(given) - set(defaults))
    if bad:
        raise ConfigError(f"unknown option(s) {bad} for the {kind} decision model",
                          f"train decision model ({kind})",
                          f"allowed: {', '.join(sorted(defaults))}")
    return {**defaults, **given}


def _write_decision(path: Path, meta: dict[str, Any]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    # sorted keys and no timestamps: the same model always writes the same bytes, so
    # its model_hash is stable
    (path / DECISION_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")


def _check_features(meta: dict[str, Any], where: str) -> None:
    if meta.get("features") != list(FEATURE_NAMES):
        raise ConfigError("the model was trained on other features than this tackroom "
                          "computes", where, "train it again with this version")


def kinds() -> list[str]:
    """The registered decision model kinds (``logistic``, ``gbm``, ``lm`` and plug-ins')."""
    return names("decision_model")


# -- logistic -----------------------------------------------------------------------------
@register("decision_model", "logistic", summary="a conditional logit over the choice set "
          "(per-type interactions; L-BFGS)")
class LogisticModel:
    """Conditional logit over a choice set: p(c) ∝ exp(w·z(c)), z = standardised φ."""

    kind = "logistic"

    def __init__(self, mean: np.ndarray, std: np.ndarray, weights: np.ndarray,
                 interactions: bool, info: dict[str, Any]) -> None:
        self.mean = np.asarray(mean, dtype=np.float64)
        self.std = np.asarray(std, dtype=np.float64)
        self.weights = np.asarray(weights, dtype=np.float64)
        self.interactions = interactions
        self.info = info

    def design(self, point: dict) -> np.ndarray:
        """The model's input rows for ``point``: one per choice."""
        return _logit_design([point_features(point)], [_ptype(point)], self.mean, self.std,
                             self.interactions)

    def predict(self, point: dict) -> list[float]:
        """Probabilities over ``point["choices"]``."""
        if _n_choices(point) == 0:
            return []
        return _softmax(self.design(point) @ self.weights)

    def save(self, path: Path) -> None:
        """Write ``decision.json`` alone: the weights are a few hundred numbers."""
        # JSON floats are written with repr, which round-trips float64 exactly: a
        # loaded model predicts bit for bit what the trained one did
        _write_decision(Path(path), {
            "kind": self.kind, "format": FORMAT, "features": list(FEATURE_NAMES),
            "point_types": list(POINT_TYPES), "interactions": self.interactions,
            "mean": self.mean.tolist(), "std": self.std.tolist(),
            "weights": self.weights.tolist(), "info": self.info})

    @classmethod
    def load(cls, path: Path, meta: dict[str, Any], where: str) -> LogisticModel:
        """Rebuild from the ``decision.json`` of directory ``path`` (the weights are in it)."""
        return cls.from_meta(meta, where)

    @classmethod
    def train(cls, examples: list[Example], seed: int, **options: Any) -> LogisticModel:
        """Fit on checked examples (options: ``l2``, ``interactions``, ``max_iter``)."""
        return _train_logistic(examples, seed, **options)

    @classmethod
    def from_meta(cls, meta: dict[str, Any], where: str) -> LogisticModel:
        """Rebuild from a ``decision.json``."""
        _check_features(meta, where)
        f = len(FEATURE_NAMES)
        inter = meta.get("interactions")
        mean, std, w = (np.asarray(meta.get(k), dtype=np.float64)
                        for k in ("mean", "std", "weights"))
        d = f * (1 + len(POINT_TYPES)) if inter else f
        if not isinstance(inter, bool) or mean.shape != (f,) or std.shape != (f,) \
                or w.shape != (d,) or not (np.all(np.isfinite(mean)) and
                                           np.all(np.isfinite(w)) and np.all(std > 0)):
            raise ValueError("mean/std/weights have the wrong shape or values")
        return cls(mean, std, w, inter, meta.get("info") or {})


def _ptype(point: Any) -> str:
    t = point.get("type") if isinstance(point, dict) else None
    return t if isinstance(t, str) else ""


def _logit_design(rows: list[list[list[float]]], types: list[str], mean: np.ndarray,
                  std: np.ndarray, interactions: bool) -> np.ndarray:
    x = np.asarray([r for point_rows in rows for r in point_rows], dtype=np.float64)
    x = x.reshape(-1, len(FEATURE_NAMES))
    z = (x - mean) / std
    if not interactions:
        return z
    row_types = [t for t, point_rows in zip(types, rows, strict=True) for _ in point_rows]
    blocks = [z] + [z * np.asarray([[rt == t] for rt in row_types], dtype=np.float64)
                    for t in POINT_TYPES]
    return np.concatenate(blocks, axis=1)


def _train_logistic(examples: list[Example], seed: int, **options: Any) -> LogisticModel:
    opts = _options("logistic", options, {"l2": 1e-2, "interactions": True, "max_iter": 500})
    l2, inter, max_iter = float(opts["l2"]), bool(opts["interactions"]), int(opts["max_iter"])
    rows = [point_features(ex.point) for ex in examples]
    types = [_ptype(ex.point) for ex in examples]
    sizes = np.asarray([len(r) for r in rows])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    w = np.asarray([ex.weight for ex in examples], dtype=np.float64)
    w = w / w.sum()
    row_w = np.repeat(w, sizes)
    x = np.asarray([r for pr in rows for r in pr], dtype=np.float64)
    # weighted statistics: an example of weight 0 (dropped before) or of small weight
    # moves the standardisation no more than it moves the fit
    mean = (row_w[:, None] * x).sum(0) / row_w.sum()
    std = np.sqrt((row_w[:, None] * (x - mean) ** 2).sum(0) / row_w.sum())
    std = np.where(std > 1e-9, std, 1.0)  # a constant feature: leave it at 0
    z = _logit_design(rows, types, mean, std, inter)
    target = np.zeros(len(z))
    target[starts + np.asarray([ex.label for ex in examples])] = 1.0

    def loss_grad(beta: np.ndarray) -> tuple[float, np.ndarray]:
        s = z @ beta
        smax = np.maximum.reduceat(s, starts)
        e = np.exp(s - np.repeat(smax, sizes))
        tot = np.add.reduceat(e, starts)
        p = e / np.repeat(tot, sizes)
        lse = np.log(tot) + smax
        loss = float(w @ (lse - s[target == 1])) + 0.5 * l2 * float(beta @ beta)
        grad = z.T @ (row_w * (p - target)) + l2 * beta
        return loss, grad

    beta0 = np.zeros(z.shape[1])
    try:
        from scipy.optimize import minimize
    except ImportError:  # no scipy: plain gradient descent, a fixed number of steps
        beta, method = _gradient_descent(loss_grad, beta0, z, l2, 20 * max_iter), "gd"
    else:
        res = minimize(loss_grad, beta0, jac=True, method="L-BFGS-B",
                       options={"maxiter": max_iter})
        beta, method = res.x, "lbfgs"
    loss, _ = loss_grad(beta)
    info = {"examples": len(examples), "rows": int(len(z)), "l2": l2, "max_iter": max_iter,
            "optimizer": method, "train_loss": round(loss, 6), "seed": seed}
    return LogisticModel(mean, std, beta, inter, info)


def _gradient_descent(loss_grad: Any, beta: np.ndarray, z: np.ndarray, l2: float,
                      steps: int) -> np.ndarray:
    # the weighted softmax loss has curvature at most max‖z‖²/2, so this step never
    # overshoots: slow but sure, and deterministic
    lr = 1.0 / (l2 + 0.5 * float(np.max(np.sum(z * z, axis=1), initial=1.0)))
    for _ in range(steps):
        beta = beta - lr * loss_grad(beta)[1]
    return beta


# -- gbm ----------------------------------------------------------------------------------
@register("decision_model", "gbm", summary="gradient-boosted trees on per-choice rows "
          "(scikit-learn)")
class GBMModel:
    """Gradient-boosted trees on per-choice rows; p_D = positive scores, normalised."""

    kind = "gbm"

    def __init__(self, estimator: Any, info: dict[str, Any]) -> None:
        self.estimator = estimator  # None: every training point had a single choice
        self.info = info

    def predict(self, point: dict) -> list[float]:
        """Probabilities over ``point["choices"]``."""
        n = _n_choices(point)
        if n == 0:
            return []
        if self.estimator is None:
            return [1.0 / n] * n
        x = np.asarray(point_features(point), dtype=np.float64)
        # One OpenMP thread: a point is a few rows, and a pool of several spends ~15x the
        # CPU of one waking and spinning for them (more still on a busy machine).
        with _thread_limit(1):
            return _normalise(self.estimator.predict_proba(x)[:, 1])

    def save(self, path: Path) -> None:
        """Write ``model.pkl`` and ``decision.json`` holding the pickle's sha256."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        blob = pickle.dumps(self.estimator, protocol=4)
        (path / "model.pkl").write_bytes(blob)
        import sklearn

        _write_decision(path, {
            "kind": self.kind, "format": FORMAT, "features": list(FEATURE_NAMES),
            "pickle": "model.pkl", "pickle_sha256": hashlib.sha256(blob).hexdigest(),
            "sklearn": sklearn.__version__, "info": self.info})

    @classmethod
    def train(cls, examples: list[Example], seed: int, **options: Any) -> GBMModel:
        """Fit on checked examples (options as :func:`_train_gbm` lists them)."""
        return _train_gbm(examples, seed, **options)

    @classmethod
    def load(cls, path: Path, meta: dict[str, Any], where: str) -> GBMModel:
        """Rebuild from a model directory, verifying the pickle first."""
        return cls.from_dir(path, meta, where)

    @classmethod
    def from_dir(cls, path: Path, meta: dict[str, Any], where: str) -> GBMModel:
        """Rebuild from a model directory, verifying the pickle first."""
        _check_features(meta, where)
        # Unpickling runs code, so the bytes are checked against the sha256 that
        # decision.json recorded when they were written: a corrupt or swapped model.pkl is
        # refused before it is read. (decision.json itself is pinned by the harness's
        # model_hash; load_model(expected_hash=...) checks that before anything else.)
        blob = (path / "model.pkl").read_bytes()
        if hashlib.sha256(blob).hexdigest() != meta.get("pickle_sha256"):
            raise ConfigError("model.pkl does not match the sha256 in decision.json", where,
                              "the model directory is corrupt or was edited: train it again")
        estimator = pickle.loads(blob)  # the bytes were verified above
        if estimator is not None and not hasattr(estimator, "predict_proba"):
            raise ValueError("model.pkl holds no classifier")
        return cls(estimator, meta.get("info") or {})


@contextlib.contextmanager
def _thread_limit(threads: int | None) -> Iterator[None]:
    if not threads:
        yield
        return
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(limits=int(threads)):
        yield


def _train_gbm(examples: list[Example], seed: int, **options: Any) -> GBMModel:
    opts = _options("gbm", options, {"max_iter": 200, "learning_rate": 0.1,
                                     "max_leaf_nodes": 15, "min_samples_leaf": 5,
                                     # One thread by default: the trees differ with the
                                     # OpenMP thread count (which torch, in the same
                                     # process, may have changed), and a fit must repeat.
                                     "l2_regularization": 1.0, "threads": 1})
    try:
        from sklearn.ensemble import HistGradientBoostingClassifier
    except ImportError as e:
        raise ConfigError("the gbm decision model needs scikit-learn", "train decision model",
                          "pip install 'tackroom[delegation]'") from e
    xs: list[list[float]] = []
    ys: list[int] = []
    ws: list[float] = []
    for ex in examples:
        rows = point_features(ex.point)
        xs.extend(rows)
        ys.extend(int(i == ex.label) for i in range(len(rows)))
        ws.extend([float(ex.weight)] * len(rows))
    info = {"examples": len(examples), "rows": len(xs), "seed": seed,
            **{k: v for k, v in opts.items() if k != "threads"}}
    if len(set(ys)) < 2:  # only single-choice points: nothing to rank, p_D is uniform
        return GBMModel(None, info)
    est = HistGradientBoostingClassifier(
        max_iter=int(opts["max_iter"]), learning_rate=float(opts["learning_rate"]),
        max_leaf_nodes=int(opts["max_leaf_nodes"]),
        min_samples_leaf=int(opts["min_samples_leaf"]),
        l2_regularization=float(opts["l2_regularization"]),
        early_stopping=False,  # its validation split would be random and data-size dependent
        random_state=seed)
    with _thread_limit(opts["threads"]):
        est.fit(np.asarray(xs, dtype=np.float64), np.asarray(ys),
                sample_weight=np.asarray(ws))
    return GBMModel(est, info)


# -- lm -----------------------------------------------------------------------------------
@register("decision_model", "lm", summary="a small causal LM scoring each choice's label "
          "(torch, transformers)", fresh_base=True)
class LMModel:
    """A causal LM that scores each choice's label after the state's text.

    Registered with ``fresh_base``: trained without a ``base`` it starts from a fresh
    ``tackroom model init``, which the fitting layer (:func:`tackroom.delegation.training.
    train_model`) makes and passes in, since that initialiser sits above the runner.
    """

    kind = "lm"

    def __init__(self, model: Any, tokenizer: Any, opts: dict[str, Any],
                 info: dict[str, Any]) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_len = int(opts["max_len"])
        self.score = str(opts["score"])
        self.threads = opts.get("threads")
        self.batch = int(opts.get("predict_batch", 64))
        self.info = info

    def _encode(self, point: dict) -> list[tuple[list[int], int]]:
        """(token ids, number of label tokens at the end) for each choice."""
        tok = self.tokenizer
        ctx = tok.encode(context_text(point), add_special_tokens=False)
        out = []
        for c in point["choices"]:
            lab = tok.encode(label_text(c), add_special_tokens=False) or [tok.pad_token_id]
            lab = lab[: max(1, self.max_len // 2)]
            keep = max(1, self.max_len - len(lab))
            # cut the context from the left: context_text puts the goal last
            out.append((ctx[-keep:] + lab, len(lab)))
        return out

    def scores(self, encoded: list[tuple[list[int], int]]) -> Any:
        """The label log-probability (sum or mean) of each encoded sequence (a tensor)."""
        import torch

        width = max(len(ids) for ids, _ in encoded)
        pad = self.tokenizer.pad_token_id
        ids = torch.full((len(encoded), width), pad, dtype=torch.long)
        mask = torch.zeros((len(encoded), width), dtype=torch.long)
        label_mask = torch.zeros((len(encoded), width), dtype=torch.bool)
        for i, (seq, n_lab) in enumerate(encoded):
            ids[i, : len(seq)] = torch.tensor(seq)
            mask[i, : len(seq)] = 1
            label_mask[i, len(seq) - n_lab: len(seq)] = True
        logits = self.model(input_ids=ids, attention_mask=mask).logits
        # token t is predicted by the logits at t-1
        logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
        tok_lp = logp.gather(-1, ids[:, 1:, None]).squeeze(-1)
        lm = label_mask[:, 1:].float()
        total = (tok_lp * lm).sum(-1)
        return total / lm.sum(-1).clamp(min=1) if self.score == "mean" else total

    def predict(self, point: dict) -> list[float]:
        """Probabilities over ``point["choices"]`` (eval mode, no gradients)."""
        import torch

        if _n_choices(point) == 0:
            return []
        encoded = self._encode(point)
        self.model.eval()
        with torch.no_grad(), torch_threads(self.threads):
            s = torch.cat([self.scores(encoded[i:i + self.batch])
                           for i in range(0, len(encoded), self.batch)])
        return _softmax(s.double().numpy())

    def save(self, path: Path) -> None:
        """``save_pretrained`` model and tokenizer, plus ``decision.json``."""
        from tackroom.policies.chat_format import no_progress_bars

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        with no_progress_bars():
            self.model.save_pretrained(path)
            self.tokenizer.save_pretrained(path)
        _write_decision(path, {
            "kind": self.kind, "format": FORMAT, "max_len": self.max_len,
            "score": self.score, "threads": self.threads, "context": "context_text/1",
            "info": self.info})

    @classmethod
    def train(cls, examples: list[Example], seed: int, **options: Any) -> LMModel:
        """Fine-tune the model directory ``options["base"]`` on checked examples.

        Options: ``base`` (required here; :func:`tackroom.delegation.training.train_model`
        makes a fresh one when none is given), ``epochs``, ``lr``, ``max_len``, ``batch``,
        ``score``, ``threads``, ``weight_decay``; ``size`` and ``base_label`` say how a
        fresh base was made (recorded in ``info["base"]``).
        """
        opts = _options("lm", options, {"base": None, "size": "tiny", "base_label": None,
                                        "epochs": 3, "lr": 1e-3, "max_len": 192, "batch": 8,
                                        "score": "mean", "threads": 2, "weight_decay": 0.0})
        return train_lm(cls, examples, seed, opts)

    @classmethod
    def load(cls, path: Path, meta: dict[str, Any], where: str) -> LMModel:
        """Load model and tokenizer with local files only."""
        return cls.from_dir(path, meta, where)

    @classmethod
    def from_dir(cls, path: Path, meta: dict[str, Any], where: str) -> LMModel:
        """Load model and tokenizer with local files only."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from tackroom.policies.chat_format import no_progress_bars

        if meta.get("score") not in ("sum", "mean") or not isinstance(meta.get("max_len"), int):
            raise ValueError("decision.json lacks score/max_len")
        with no_progress_bars():
            tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
        model.eval()
        return cls(model, tok, {"max_len": meta["max_len"], "score": meta["score"],
                                "threads": meta.get("threads")}, meta.get("info") or {})


def model_hash(path: str | Path) -> str:
    """12-hex content hash of a model directory: its files' relative names and bytes."""
    root = Path(path)
    if not root.is_dir():
        raise ConfigError(f"no decision model directory at {root}", str(root),
                          "train one (`tackroom delegate fit`) or check the path")
    h = hashlib.sha256()
    for f in sorted((p for p in root.rglob("*") if p.is_file()),
                    key=lambda p: p.relative_to(root).as_posix()):
        name = f.relative_to(root).as_posix().encode()
        data = f.read_bytes()
        h.update(len(name).to_bytes(8, "little") + name)
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()[:12]


def load_model(path: str | Path, *, expected_hash: str | None = None) -> DecisionModel:
    """Load the decision model in directory ``path``.

    ``expected_hash`` (a harness's ``model_hash``) is checked before anything is read,
    so an edited directory is refused before its files are parsed or unpickled.
    Any problem — no directory, no or bad ``decision.json``, unknown kind or format,
    missing or corrupt files — is a :class:`~tackroom.core.errors.ConfigError`.
    """
    root = Path(path)
    where = str(root)
    fix = "train it again (`tackroom delegate fit`) or point to the right directory"
    if not root.is_dir():
        raise ConfigError("no decision model directory here", where,
                          "train one (`tackroom delegate fit`) or check the path")
    if expected_hash is not None and model_hash(root) != expected_hash:
        raise ConfigError(f"the model's hash {model_hash(root)} is not the pinned "
                          f"{expected_hash}", where,
                          "the model changed since the harness was written: fit again or "
                          "update model_hash")
    try:
        meta = json.loads((root / DECISION_FILE).read_text())
    except FileNotFoundError:
        raise ConfigError(f"no {DECISION_FILE}: not a decision model directory", where,
                          fix) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{DECISION_FILE} is unreadable ({e})", where, fix) from None
    if not isinstance(meta, dict):
        raise ConfigError(f"{DECISION_FILE} is not an object", where, fix)
    kind = meta.get("kind")
    if not isinstance(kind, str) or not has("decision_model", kind):
        raise ConfigError(f"unknown decision model kind {kind!r}", where,
                          f"kinds: {choices('decision_model')}")
    if meta.get("format") != FORMAT:
        raise ConfigError(f"decision model format {meta.get('format')!r}; this tackroom "
                          f"reads format {FORMAT}", where, fix)
    try:
        return get("decision_model", kind).load(root, meta, where)
    except ConfigError:
        raise
    except Exception as e:  # any library's failure on bad files becomes one clear line
        raise ConfigError(f"the {kind} decision model is corrupt or incomplete "
                          f"({type(e).__name__}: {str(e)[:200]})", where, fix) from None
