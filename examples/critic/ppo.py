"""PPO with a shared critic V(s) or an environment-conditioned critic V(s, e), CleanRL-style.

docs/research.md §5. The copies of a vector environment disagree about what a
state is worth (envs.py: per-copy dynamics and per-copy reward scale c_e). A
shared critic regresses to their mixture, so every advantage carries the
copy's offset c_e·V(s) − mean_e' c_e'·V(s), summed over the GAE horizon; V(s, e)
removes it. The actor is π(a|s) in both arms: deployment needs no index.

Read it top to bottom: every hyper-parameter is in :class:`Args`; the critic's
value head, GAE and the clipped value loss are tackroom's own
(``tackroom/train/critic.py``), so this example tests the library:

- ``make_value_head("shared" | "harness", H, n_harnesses=K)`` on an MLP torso
  that maps the observation to H features (the head takes [B, H] as it takes
  an LM's last hidden state);
- ``gae(rewards, values, mask, gamma=, lam=, last_values=)`` over episode
  *segments* cut out of the rollout, right-padded; a segment cut by the rollout's
  end or a time limit bootstraps from V of its final state, one that terminated
  from 0;
- ``value_loss(values, returns, old_values=, clip=)``.

Usage: .venv/bin/python examples/critic/ppo.py --env cartpole --critic harness --seed 0
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from envs import REWARD_SCALES, SPECS, make_vector_env
from torch import nn
from torch.distributions import Categorical, Normal

from tackroom.train.critic import gae, make_value_head, value_loss


@dataclass
class Args:
    env: str = "cartpole"           # cartpole | mujoco | bipedal | grid (envs.SPECS)
    critic: str = "shared"          # shared: V(s); harness: V(s, e), e = the copy's variant
    seed: int = 0
    total_timesteps: int = 100_000
    num_steps: int = 64             # rollout length per copy (16 copies: 4 levels x 4 scales)
    learning_rate: float = 2.5e-4
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int = 4
    update_epochs: int = 4
    norm_adv: bool = True
    clip_coef: float = 0.2
    value_clip: float | None = 0.2  # tackroom value_loss(clip=); on normalised returns
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    hidden: int = 64                # actor and critic torso width H
    value_hidden: int = 64          # ValueHead mlp_hidden (> 0: E[e] can change *how* s is valued)
    norm_obs: bool = False          # running mean/std of observations, shared by all copies
    reward_scales: tuple[float, ...] = REWARD_SCALES
    eval_every: int = 0             # steps between unseen-level evaluations (0: only at the end)
    eval_episodes: int = 48         # per level set (final); a quarter at checkpoints
    threads: int = 1
    log: list = field(default_factory=list, repr=False)


# Per-environment settings: CleanRL's PPO defaults for discrete / MuJoCo tasks.
PRESETS: dict[str, dict] = {
    "cartpole": dict(total_timesteps=200_000, learning_rate=2.5e-4, num_steps=64),
    "grid": dict(total_timesteps=300_000, learning_rate=5e-4, num_steps=64, update_epochs=3),
    "mujoco": dict(total_timesteps=150_000, learning_rate=3e-4, num_steps=128, update_epochs=10,
                   num_minibatches=32, ent_coef=0.0, norm_obs=True),
    "bipedal": dict(total_timesteps=150_000, learning_rate=3e-4, num_steps=128, update_epochs=10,
                    num_minibatches=32, ent_coef=0.0, norm_obs=True),
}


class RunningMeanStd:
    """Running mean and variance (Chan et al.), for observation and return normalisation."""

    def __init__(self, shape=()) -> None:
        self.mean, self.var, self.count = np.zeros(shape), np.ones(shape), 1e-4

    def update(self, x: np.ndarray) -> None:
        m, v, n = x.mean(0), x.var(0), x.shape[0]
        d, tot = m - self.mean, self.count + n
        self.mean = self.mean + d * n / tot
        self.var = (self.var * self.count + v * n + d ** 2 * self.count * n / tot) / tot
        self.count = tot


def layer(i: int, o: int, std: float = np.sqrt(2)) -> nn.Linear:
    lin = nn.Linear(i, o)
    nn.init.orthogonal_(lin.weight, std)
    nn.init.zeros_(lin.bias)
    return lin


class Agent(nn.Module):
    """Actor π(a|s) (never sees e) and critic torso + tackroom ValueHead: V(s) or V(s, e)."""

    def __init__(self, obs_dim: int, act_dim: int, continuous: bool, args: Args, k: int):
        super().__init__()
        h = args.hidden
        self.continuous = continuous
        self.actor = nn.Sequential(layer(obs_dim, h), nn.Tanh(), layer(h, h), nn.Tanh(),
                                   layer(h, act_dim, 0.01))
        if continuous:
            self.log_std = nn.Parameter(torch.zeros(act_dim))
        # The critic's torso plays the LM's role: it turns s into H features.
        self.torso = nn.Sequential(layer(obs_dim, h), nn.Tanh(), layer(h, h), nn.Tanh())
        self.value_head = make_value_head(args.critic, h, n_harnesses=k if args.critic ==
                                          "harness" else 0, mlp_hidden=args.value_hidden)

    def value(self, obs: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        return self.value_head(self.torso(obs), e if self.value_head.conditioned else None)

    def dist(self, obs: torch.Tensor):
        out = self.actor(obs)
        if self.continuous:
            return Normal(out, self.log_std.exp().expand_as(out))
        return Categorical(logits=out)

    def logp_entropy(self, obs, action):
        d = self.dist(obs)
        if self.continuous:
            return d.log_prob(action).sum(-1), d.entropy().sum(-1)
        return d.log_prob(action), d.entropy()


def segment_gae(rewards: np.ndarray, values: np.ndarray, ends: np.ndarray, end_values: np.ndarray,
                gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """GAE over a [T, N] rollout with episode boundaries, through tackroom's ``gae``.

    ``ends[t, n]``: the episode of copy n ended after step t (terminated or
    truncated); ``end_values[t, n]``: V of the state after step t's episode end
    — 0 if it terminated, V(final obs) if a time limit cut it, and, at t = T−1
    for a running episode, V(next obs). Each episode segment becomes a row of a
    right-padded [S, L] batch with ``last_values``, which is what ``gae`` takes.
    """
    T, N = rewards.shape
    rows = []                                     # (copy, t0, t1) inclusive
    for n in range(N):
        t0 = 0
        for t in range(T):
            if ends[t, n] or t == T - 1:
                rows.append((n, t0, t))
                t0 = t + 1
    L = max(t1 - t0 + 1 for _, t0, t1 in rows)
    R = torch.zeros(len(rows), L, dtype=torch.float64)
    V = torch.zeros_like(R)
    M = torch.zeros(len(rows), L, dtype=torch.bool)
    last = torch.zeros(len(rows), dtype=torch.float64)
    for i, (n, t0, t1) in enumerate(rows):
        ln = t1 - t0 + 1
        R[i, :ln] = torch.from_numpy(rewards[t0:t1 + 1, n])
        V[i, :ln] = torch.from_numpy(values[t0:t1 + 1, n])
        M[i, :ln] = True
        last[i] = end_values[t1, n]
    adv_s, ret_s = gae(R, V, M, gamma=gamma, lam=lam, last_values=last)
    adv, ret = np.zeros_like(rewards), np.zeros_like(rewards)
    for i, (n, t0, t1) in enumerate(rows):
        adv[t0:t1 + 1, n] = adv_s[i, :t1 - t0 + 1].numpy()
        ret[t0:t1 + 1, n] = ret_s[i, :t1 - t0 + 1].numpy()
    return adv, ret


@torch.no_grad()
def evaluate(agent: Agent, args: Args, levels: tuple, episodes: int, seed: int,
             obs_rms: RunningMeanStd | None) -> float:
    """Mean unscaled return of π(a|s) (sampled) over ``episodes`` episodes per level set."""
    spec = SPECS[args.env]
    envs = make_vector_env(spec, levels, 1, seed)
    obs, _ = envs.reset(seed=seed)
    returns, ep_ret = [], np.zeros(envs.num_envs)
    while len(returns) < episodes:
        x = obs if obs_rms is None else np.clip((obs - obs_rms.mean) / np.sqrt(obs_rms.var + 1e-8),
                                                -10, 10)
        a = agent.dist(torch.as_tensor(x, dtype=torch.float32)).sample().numpy()
        if spec.continuous:
            a = np.clip(a, envs.single_action_space.low, envs.single_action_space.high)
        obs, r, term, trunc, _ = envs.step(a)
        ep_ret += r
        for n in np.flatnonzero(term | trunc):
            returns.append(ep_ret[n])
            ep_ret[n] = 0.0
    envs.close()
    return float(np.mean(returns[:episodes]))


def train(args: Args) -> dict:
    """One PPO run; returns the final evaluations and the learning curve."""
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    torch.set_num_threads(args.threads)
    spec = SPECS[args.env]
    n_scales = len(args.reward_scales)
    envs = make_vector_env(spec, spec.train_levels, n_scales, args.seed)
    N = k = envs.num_envs                  # one environment index per copy: e = 0..15
    env_index = np.arange(N)
    scale = np.asarray(args.reward_scales, dtype=np.float64)[env_index % n_scales]  # c_e
    obs_dim = envs.single_observation_space.shape[0]
    act_dim = (envs.single_action_space.shape[0] if spec.continuous
               else envs.single_action_space.n)
    agent = Agent(obs_dim, act_dim, spec.continuous, args, k)
    opt = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    e_t = torch.as_tensor(env_index, dtype=torch.long)

    obs_rms = RunningMeanStd((obs_dim,)) if args.norm_obs else None
    # Return normalisation *shared by all copies*: a per-copy normaliser
    # (gymnasium's NormalizeReward on each copy) would undo the per-copy
    # reward scale — the very disagreement the critic has to model.
    ret_rms, disc_ret = RunningMeanStd(), np.zeros(N)

    def norm(o: np.ndarray) -> np.ndarray:
        if obs_rms is None:
            return o
        return np.clip((o - obs_rms.mean) / np.sqrt(obs_rms.var + 1e-8), -10, 10)

    T = args.num_steps
    batch = T * N
    mb = batch // args.num_minibatches
    updates = args.total_timesteps // batch
    obs_raw, _ = envs.reset(seed=args.seed)
    ep_ret, ep_len = np.zeros(N), np.zeros(N, dtype=int)
    curve, recent, evals = [], [], []
    start = time.time()
    step = 0
    for update in range(1, updates + 1):
        if args.anneal_lr:
            opt.param_groups[0]["lr"] = args.learning_rate * (1 - (update - 1) / updates)
        B_obs = np.zeros((T, N, obs_dim), np.float32)
        B_act = np.zeros((T, N, act_dim) if spec.continuous else (T, N), np.float32)
        B_logp, B_val, B_rew = (np.zeros((T, N)) for _ in range(3))
        B_end, B_endv = np.zeros((T, N), bool), np.zeros((T, N))
        raws = []
        for t in range(T):
            raws.append(obs_raw)
            x = norm(obs_raw)
            with torch.no_grad():
                xt = torch.as_tensor(x, dtype=torch.float32)
                d = agent.dist(xt)
                a = d.sample()
                logp = d.log_prob(a).sum(-1) if spec.continuous else d.log_prob(a)
                v = agent.value(xt, e_t)
            act = a.numpy()
            if spec.continuous:
                act = np.clip(act, envs.single_action_space.low, envs.single_action_space.high)
            obs_raw, r, term, trunc, info = envs.step(act)
            step += N
            B_obs[t], B_act[t], B_logp[t], B_val[t] = x, a.numpy(), logp.numpy(), v.numpy()
            # What copy e is trained on: its own reward scale c_e times the task reward.
            r_train = scale * r
            disc_ret = disc_ret * args.gamma + r_train
            ret_rms.update(disc_ret)
            B_rew[t] = r_train
            ep_ret += r
            ep_len += 1
            done = term | trunc
            B_end[t] = done
            if trunc.any():    # a time limit is not an ending: bootstrap from V(final obs)
                fin = np.stack([info["final_obs"][n] if trunc[n] else obs_raw[n]
                                for n in range(N)])
                with torch.no_grad():
                    fv = agent.value(torch.as_tensor(norm(fin), dtype=torch.float32), e_t).numpy()
                B_endv[t] = np.where(trunc, fv, 0.0)
            for n in np.flatnonzero(done):
                recent.append(ep_ret[n])
                ep_ret[n], ep_len[n] = 0.0, 0
            disc_ret[done] = 0.0
        with torch.no_grad():   # a running episode at the rollout's end: V(next obs)
            nv = agent.value(torch.as_tensor(norm(obs_raw), dtype=torch.float32), e_t).numpy()
        B_endv[-1] = np.where(B_end[-1], B_endv[-1], nv)
        if obs_rms is not None:
            obs_rms.update(np.concatenate(raws))

        # Values were predicted in normalised-return units; rewards follow.
        rew = B_rew / np.sqrt(ret_rms.var + 1e-8)
        adv, ret = segment_gae(rew, B_val, B_end, B_endv, args.gamma, args.gae_lambda)

        b_obs = torch.as_tensor(B_obs.reshape(batch, obs_dim))
        b_act = torch.as_tensor(B_act.reshape((batch, act_dim) if spec.continuous else batch))
        if not spec.continuous:
            b_act = b_act.long()
        b_logp = torch.as_tensor(B_logp.reshape(batch), dtype=torch.float32)
        b_adv = torch.as_tensor(adv.reshape(batch), dtype=torch.float32)
        b_ret = torch.as_tensor(ret.reshape(batch), dtype=torch.float32)
        b_val = torch.as_tensor(B_val.reshape(batch), dtype=torch.float32)
        b_e = e_t.repeat(T)                                 # row t*N + n has copy n
        # CleanRL's explained variance: the values predicted *before* this update
        # against the returns computed from them — out of sample for the critic.
        var_r = float(np.var(ret))
        ev_rollout = 1.0 - float(np.var(ret - B_val)) / var_r if var_r > 0 else float("nan")
        vmetrics = {}
        for _ in range(args.update_epochs):
            perm = torch.randperm(batch)
            for s in range(0, batch, mb):
                idx = perm[s:s + mb]
                newlogp, ent = agent.logp_entropy(b_obs[idx], b_act[idx])
                ratio = (newlogp - b_logp[idx]).exp()
                a_mb = b_adv[idx]
                if args.norm_adv:
                    a_mb = (a_mb - a_mb.mean()) / (a_mb.std() + 1e-8)
                pg = torch.max(-a_mb * ratio,
                               -a_mb * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)).mean()
                vl = value_loss(agent.value(b_obs[idx], b_e[idx]), b_ret[idx],
                                old_values=b_val[idx] if args.value_clip else None,
                                clip=args.value_clip)
                loss = pg - args.ent_coef * ent.mean() + args.vf_coef * vl.loss
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                opt.step()
                vmetrics = vl.metrics
        mean_ret = float(np.mean(recent)) if recent else float("nan")
        curve.append({"step": step, "train_return": mean_ret,
                      "explained_variance": ev_rollout,
                      "explained_variance_fit": vmetrics.get("explained_variance"),
                      "value_loss": vmetrics.get("value_loss")})
        recent = recent[-4 * N:]     # a moving window over the last few episodes per copy
        if args.eval_every and (step // args.eval_every) > ((step - batch) // args.eval_every) \
                and update < updates:
            evals.append({"step": step, "unseen": evaluate(agent, args, spec.unseen_levels,
                                                           max(args.eval_episodes // 4, 4), 10_000 + update,
                                                           obs_rms)})
    envs.close()
    final = {
        "train": evaluate(agent, args, spec.train_levels, args.eval_episodes, 777, obs_rms),
        "unseen": evaluate(agent, args, spec.unseen_levels, args.eval_episodes, 778, obs_rms),
    }
    evals.append({"step": step, "unseen": final["unseen"]})
    return {"env": args.env, "critic": args.critic, "seed": args.seed, "steps": step,
            "wall_s": round(time.time() - start, 1), "final": final, "curve": curve,
            "unseen_curve": evals,
            "args": {k_: v for k_, v in dataclasses.asdict(args).items() if k_ != "log"}}


def make_args(env: str, **over) -> Args:
    return Args(**{"env": env, **PRESETS[env], **over})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="cartpole", choices=sorted(SPECS))
    p.add_argument("--critic", default="shared", choices=["shared", "harness"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--total-timesteps", type=int)
    a = p.parse_args()
    over = {"critic": a.critic, "seed": a.seed}
    if a.total_timesteps:
        over["total_timesteps"] = a.total_timesteps
    out = train(make_args(a.env, **over))
    print(json.dumps({k: out[k] for k in ("env", "critic", "seed", "steps", "wall_s", "final")}))


if __name__ == "__main__":
    main()
