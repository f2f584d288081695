"""One policy-gradient update on a :class:`~tackroom.train.engine.TrainEngine`.

:class:`Learner` is the part of ``tackroom train`` that touches tensors: it
lays a step's :class:`~tackroom.train.samples.TurnSample` s out in
micro-batches (rows that share a prompt together, so the shared-prefix
forward computes it once), fills in what the update needs before it starts
(π_old where unknown, π_ref for the KL term, the critic's values and GAE),
and takes the optimiser step:

    loss = policy_loss(logp, π_old, A, mask) + value_coef · value_loss(V, R)

with the loss normalisers set to the whole step's totals (``num_sequences``,
``num_tokens``), so the micro-batch gradients sum to the full-batch gradient
whatever ``micro_batch_size`` is. ``bench/train.py`` times exactly this step.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from typing import Any

from tackroom.core.episode import Episode
from tackroom.train.config import RLConfig
from tackroom.train.engine import TrainEngine
from tackroom.train.samples import TurnSample, episode_reward, turn_rewards


class Learner:
    """The update math of ``tackroom train`` on an engine's model.

    Args:
        engine: the model, tokenizer and optimiser.
        cfg: the run's settings (resolved here).
        head: the critic's value head (``None``: no critic); its parameters
            must already be in the engine's optimiser.
        vocab: harness name → index, for V(s, e).
        ref_model: the frozen reference for full fine-tuning with β > 0
            (LoRA uses the base model with the adapter disabled).
    """

    def __init__(self, engine: TrainEngine, cfg: RLConfig, *, head: Any = None,
                 vocab: dict[str, int] | None = None, ref_model: Any = None) -> None:
        self.engine = engine
        self.cfg = cfg.resolved()
        self.head = head
        self.vocab = dict(vocab or {})
        self.ref_model = ref_model
        self.device = str(engine.device)
        tok = engine.tokenizer
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    def micro_batches(self, samples: Sequence[TurnSample]) -> list[list[TurnSample]]:
        """Samples in micro-batches of at most ``micro_batch_size``, sharing prompts.

        Rows with the same prompt (a group's first turns) sit together, so the
        shared-prefix forward (:mod:`tackroom.train.forward`) computes it once.
        A row whose prompt shares less than half of the batch's first prompt
        starts a new micro-batch: rows of two different pages in one batch would
        each compute their own page, which costs more than two small batches.
        """
        order = sorted(samples, key=lambda s: (s.prompt, s.episode, s.turn))
        n = self.cfg.micro_batch_size
        out: list[list[TurnSample]] = []
        for s in order:
            if out and len(out[-1]) < n and _shared(out[-1][0].prompt, s.prompt) * 2 \
                    >= len(s.prompt):
                out[-1].append(s)
            else:
                out.append([s])
        return out

    def forward(self, model: Any, batch: Sequence[TurnSample], *, hidden: bool) -> Any:
        """Log-probs of each completion token, its mask, and the last prompt token's state.

        Returns ``(logp [B, W], mask [B, W], states [B, H] | None, offsets [B])``
        where row i's completion occupies columns ``offsets[i] ..
        offsets[i] + len(completion) - 1``.
        """
        import torch

        from tackroom.train.forward import logits_from
        from tackroom.train.losses import token_logprobs

        rows = len(batch)
        width = max(s.length for s in batch)
        ids = torch.full((rows, width), self.pad_id, dtype=torch.long)
        attn = torch.zeros((rows, width), dtype=torch.long)
        for i, s in enumerate(batch):
            ids[i, :s.length] = torch.tensor(s.prompt + s.completion)
            attn[i, :s.length] = 1
        ids, attn = ids.to(self.device), attn.to(self.device)
        prompt_len = torch.tensor([len(s.prompt) for s in batch], device=self.device)
        comp_len = torch.tensor([len(s.completion) for s in batch], device=self.device)
        start = int(prompt_len.min()) - 1
        out = logits_from(model, ids, attn, start, hidden=hidden)
        logits, states = out if hidden else (out, None)
        logp = token_logprobs(logits[:, :-1], ids[:, start + 1:], self.cfg.temperature)
        pos = torch.arange(start + 1, width, device=self.device)
        mask = (pos[None] >= prompt_len[:, None]) & (pos[None] < (prompt_len + comp_len)[:, None])
        last = None
        if states is not None:
            last = states[torch.arange(rows, device=self.device), prompt_len - 1 - start]
        return logp, mask, last, (prompt_len - 1 - start).tolist()

    def _place(self, values: Sequence[Sequence[float]], offsets: Sequence[int],
               like: Any) -> Any:
        import torch

        out = torch.zeros_like(like, dtype=torch.float32)
        for i, (v, o) in enumerate(zip(values, offsets, strict=True)):
            out[i, o:o + len(v)] = torch.tensor(v, dtype=torch.float32)
        return out.to(like.dtype)

    def _harness_index(self, batch: Sequence[TurnSample]) -> Any:
        import torch

        if not self.vocab:
            return None
        return torch.tensor([self.vocab[s.harness] for s in batch], device=self.device)

    def before_update(self, samples: list[TurnSample], episodes: Sequence[Episode]) -> None:
        """π_old where unknown, π_ref for the KL term, V(s) and GAE for the critic."""
        import torch

        c = self.cfg
        model = self.engine.model
        need_old = any(s.old_logp is None for s in samples)
        if need_old or self.head is not None:
            with torch.no_grad():
                for batch in self.micro_batches(samples):
                    logp, _, last, offsets = self.forward(model, batch,
                                                           hidden=self.head is not None)
                    for i, s in enumerate(batch):
                        if s.old_logp is None:
                            o = offsets[i]
                            s.old_logp = logp[i, o:o + len(s.completion)].float().tolist()
                    if self.head is not None:
                        values = self.head(last, self._harness_index(batch))
                        for s, v in zip(batch, values.tolist(), strict=True):
                            s.value = float(v)
        if c.beta > 0:
            with torch.no_grad(), self._reference() as ref:
                for batch in self.micro_batches(samples):
                    logp, _, _, offsets = self.forward(ref, batch, hidden=False)
                    for i, s in enumerate(batch):
                        o = offsets[i]
                        s.ref_logp = logp[i, o:o + len(s.completion)].float().tolist()
        if self.head is not None:
            self._gae(samples, episodes)

    @contextlib.contextmanager
    def _reference(self):
        if self.ref_model is not None:
            yield self.ref_model
            return
        with self.engine.model.disable_adapter():
            yield self.engine.model

    def _gae(self, samples: list[TurnSample], episodes: Sequence[Episode]) -> None:
        """Per-turn advantages and returns from the critic's values, per episode."""
        import torch

        from tackroom.train.critic import gae

        c = self.cfg
        by_episode: dict[int, list[TurnSample]] = {}
        for s in samples:
            by_episode.setdefault(s.episode, []).append(s)
        eps = sorted(by_episode)
        k = max(len(v) for v in by_episode.values())
        rewards = torch.zeros((len(eps), k), dtype=torch.float64)
        values = torch.zeros((len(eps), k), dtype=torch.float64)
        mask = torch.zeros((len(eps), k), dtype=torch.bool)
        for row, e in enumerate(eps):
            turns = sorted(by_episode[e], key=lambda s: s.turn)
            by_episode[e] = turns
            r = turn_rewards(episodes[e], c.reward, c.verifier)
            for j, s in enumerate(turns):
                rewards[row, j] = r[s.turn] if s.turn < len(r) else 0.0
                values[row, j] = float(s.value or 0.0)
                mask[row, j] = True
            # The episode's return lands on its last trained turn.
            rewards[row, len(turns) - 1] = episode_reward(episodes[e], c.reward, c.verifier)
        adv, ret = gae(rewards, values, mask, gamma=c.gamma, lam=c.lam)
        flat = adv[mask]
        mean, std = float(flat.mean()), float(flat.std()) if flat.numel() > 1 else 0.0
        for row, e in enumerate(eps):
            for j, s in enumerate(by_episode[e]):
                # Whitened over the batch, as PPO does: the scale of returns never sets the
                # step size.
                s.advantage = (float(adv[row, j]) - mean) / (std + 1e-8)
                s.ret = float(ret[row, j])

    def update(self, samples: list[TurnSample]) -> dict[str, float]:
        """One optimiser step: a pass over ``samples`` in micro-batches."""
        import torch

        from tackroom.train.critic import value_loss
        from tackroom.train.losses import policy_loss_from_config

        c = self.cfg
        model = self.engine.model
        n_seq = len(samples)
        n_tok = float(sum(len(s.completion) for s in samples))
        sums: dict[str, float] = {}
        weights: dict[str, float] = {}
        extremes = {"ratio_min": math.inf, "ratio_max": -math.inf}
        total_loss = 0.0
        for batch in self.micro_batches(samples):
            logp, mask, last, offsets = self.forward(model, batch, hidden=self.head is not None)
            old = self._place([s.old_logp or [] for s in batch], offsets, logp)
            ref = self._place([s.ref_logp or [] for s in batch], offsets, logp) \
                if c.beta > 0 else None
            adv = torch.tensor([s.advantage for s in batch], dtype=logp.dtype,
                               device=logp.device)
            if self.head is not None:
                # Per-turn advantages, spread over the reply's tokens: a [B, T] advantage.
                adv = adv[:, None] * mask.to(logp.dtype)
            pl = policy_loss_from_config(c, logp, old, adv, mask.to(logp.dtype), ref_logp=ref,
                                         num_sequences=n_seq, num_tokens=n_tok)
            loss = pl.loss
            tokens = float(mask.sum())
            if self.head is not None:
                values = self.head(last, self._harness_index(batch))
                returns = torch.tensor([s.ret for s in batch], dtype=values.dtype,
                                       device=values.device)
                old_v = torch.tensor([s.value for s in batch], dtype=values.dtype,
                                     device=values.device)
                vl = value_loss(values, returns, old_values=old_v, clip=c.value_clip)
                # value_loss is a mean over this micro-batch: weight it by its share.
                loss = loss + c.value_coef * vl.loss * (len(batch) / n_seq)
                for key, v in vl.metrics.items():
                    if math.isfinite(v):
                        sums[key] = sums.get(key, 0.0) + v * len(batch)
                        weights[key] = weights.get(key, 0.0) + len(batch)
            loss.backward()
            total_loss += float(loss.detach())
            for key, v in pl.metrics.items():
                if key in extremes:
                    extremes[key] = (min if key == "ratio_min" else max)(extremes[key], v)
                elif key not in ("loss", "tokens"):
                    sums[key] = sums.get(key, 0.0) + v * tokens
                    weights[key] = weights.get(key, 0.0) + tokens
        if self.head is not None:
            torch.nn.utils.clip_grad_norm_(list(self.head.parameters()), c.max_grad_norm)
        info = self.engine.optimizer_step()
        out = {"loss": total_loss, **{k: v / max(weights[k], 1e-12) for k, v in sums.items()},
               **{k: v for k, v in extremes.items() if math.isfinite(v)}, **info}
        return out


def _shared(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of two token lists."""
    k = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        k += 1
    return k
