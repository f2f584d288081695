"""Parallel environments whose copies disagree about what a state is worth.

docs/research.md §5: a shared critic V(s) over parallel environments that give
different returns from the same state regresses to their mixture. Each
:class:`Spec` below has four training *levels* of one task, and the training
vector environment runs one copy of every (level, reward scale) pair — 4 x 4 =
16 copies; copy ``e = level * 4 + scale`` is its environment index. Copies differ

- in **how they move** (the level): pole length (CartPole), gravity (MuJoCo
  InvertedDoublePendulum, BipedalWalker), the maze pool (grid world);
- in **what they reward**: a reward scale ``c ∈ REWARD_SCALES`` applied in the
  training loop (``ppo.py``), so the *training* return from one state differs
  by up to 16x between copies. Every level meets every scale, so no level is
  trained with larger advantages than another. Evaluation always reports the
  unscaled task return, so one number means the same on every level.

Unseen levels are parameter values (or maze seeds) that no training copy used.
The actor is π(a|s) and never sees ``e``; only the conditioned critic does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

# Per-variant reward scales c_e: the same state is worth c_e·V(s) to copy e.
REWARD_SCALES = (0.25, 0.5, 2.0, 4.0)


@dataclass(frozen=True)
class Spec:
    """One task: its variants (training levels), its unseen levels, its references."""

    name: str
    train_levels: tuple            # level parameters trained on
    unseen_levels: tuple           # level parameters never trained on
    make: Callable[[object], gym.Env]   # level parameter -> env
    continuous: bool
    tuned_reference: float | None  # None: computed per level (grid world's oracle)
    tuned_source: str

# --- CartPole: per-copy pole length -------------------------------------------------------

def make_cartpole(half_length: float) -> gym.Env:
    env = gym.make("CartPole-v1")
    cp = env.unwrapped
    cp.length = float(half_length)                 # half the pole's length (default 0.5)
    cp.polemass_length = cp.masspole * cp.length   # cached product used by step()
    return env


# --- MuJoCo: InvertedDoublePendulum with per-copy gravity ---------------------------------

def make_double_pendulum(gravity: float) -> gym.Env:
    env = gym.make("InvertedDoublePendulum-v5")
    env.unwrapped.model.opt.gravity[:] = (0.0, 0.0, -float(gravity))
    return env


# --- Box2D: BipedalWalker with per-copy gravity -------------------------------------------

def make_bipedal(gravity: float) -> gym.Env:
    env = gym.make("BipedalWalker-v3")
    # The b2World is made once in __init__ and survives reset(), so this sticks.
    env.unwrapped.world.gravity = (0.0, -float(gravity))
    return env


# --- A procedurally generated grid world (the Procgen-style unseen-levels test) -----------

GRID = 7          # interior size; the observation is 3 one-hot planes of GRID x GRID
MAX_STEPS = 40
MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))


def make_level(seed: int) -> tuple[np.ndarray, tuple[int, int], tuple[int, int], int]:
    """(walls, start, goal, shortest distance) of maze ``seed``; always solvable."""
    rng = np.random.default_rng(seed)
    while True:
        walls = rng.random((GRID, GRID)) < 0.3
        free = np.argwhere(~walls)
        if len(free) < 2:
            continue
        i, j = rng.choice(len(free), size=2, replace=False)
        start, goal = tuple(free[i]), tuple(free[j])
        d = _bfs(walls, start, goal)
        if d is not None and d >= 3:
            return walls, start, goal, d


def _bfs(walls: np.ndarray, start: tuple[int, int], goal: tuple[int, int]) -> int | None:
    dist = {start: 0}
    todo = deque([start])
    while todo:
        p = todo.popleft()
        if p == goal:
            return dist[p]
        for dr, dc in MOVES:
            q = (p[0] + dr, p[1] + dc)
            if 0 <= q[0] < GRID and 0 <= q[1] < GRID and not walls[q] and q not in dist:
                dist[q] = dist[p] + 1
                todo.append(q)
    return None


def oracle_return(seed: int) -> float:
    """The best achievable return on maze ``seed``: the shortest path's."""
    return 1.0 - 0.9 * make_level(seed)[3] / MAX_STEPS


class GridLevels(gym.Env):
    """Reach the goal in a maze drawn from a fixed pool of level seeds.

    Return 1 − 0.9·t/MAX_STEPS on reaching the goal at step t, 0 on timeout
    (the Procgen / MiniGrid convention). The observation is egocentric — walls
    (the outside counts as wall) and goal in a (2·GRID−1)² window centred on
    the agent — so "the goal is two cells left" looks the same in every maze,
    which is what lets a small MLP generalise to unseen mazes at all.
    """

    W = 2 * GRID - 1
    observation_space = gym.spaces.Box(0.0, 1.0, (2 * W * W,), np.float32)
    action_space = gym.spaces.Discrete(4)

    def __init__(self, level_seeds: tuple[int, ...]) -> None:
        self.levels = [make_level(s) for s in level_seeds]

    def _obs(self) -> np.ndarray:
        o = np.zeros((2, self.W, self.W), np.float32)
        o[0] = 1.0                                   # everything off the board is wall
        r0, c0 = GRID - 1 - self.pos[0], GRID - 1 - self.pos[1]   # board origin in the window
        o[0, r0:r0 + GRID, c0:c0 + GRID] = self.walls
        o[1, r0 + self.goal[0], c0 + self.goal[1]] = 1.0
        return o.ravel()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.walls, self.pos, self.goal, _ = self.levels[self.np_random.integers(len(self.levels))]
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        dr, dc = MOVES[int(action)]
        q = (self.pos[0] + dr, self.pos[1] + dc)
        if 0 <= q[0] < GRID and 0 <= q[1] < GRID and not self.walls[q]:
            self.pos = q
        self.t += 1
        done = self.pos == self.goal
        reward = 1.0 - 0.9 * self.t / MAX_STEPS if done else 0.0
        return self._obs(), reward, done, self.t >= MAX_STEPS and not done, {}


# Training mazes: four disjoint pools of 50 seeds, one per level (200 in all,
# Procgen's usual count); unseen mazes: seeds from 1,000,000 up, never trained on.
GRID_TRAIN = tuple(tuple(range(50 * k, 50 * (k + 1))) for k in range(4))
GRID_UNSEEN = tuple(tuple(range(1_000_000 + 50 * k, 1_000_000 + 50 * (k + 1))) for k in range(4))

SPECS: dict[str, Spec] = {
    "cartpole": Spec("cartpole", (0.25, 0.5, 0.9, 1.4), (0.35, 0.7, 1.1, 1.7), make_cartpole,
                     False, 500.0, "the ceiling (500 steps), which tuned PPO reaches"),
    "mujoco": Spec("mujoco", (6.0, 8.0, 9.81, 12.0), (5.0, 7.0, 11.0, 13.0),
                   make_double_pendulum, True, 9350.0,
                   "InvertedDoublePendulum's ceiling (~9.35 per step for 1000 steps)"),
    "bipedal": Spec("bipedal", (8.0, 9.0, 10.0, 11.0), (7.5, 8.5, 10.5, 11.5), make_bipedal,
                    True, 300.0, "the 'solved' threshold of BipedalWalker-v3"),
    "grid": Spec("grid", GRID_TRAIN, GRID_UNSEEN, GridLevels, False, None,
                 "the shortest-path return of each maze (BFS oracle)"),
}


def make_vector_env(spec: Spec, levels: tuple, copies_per_level: int, seed: int
                    ) -> gym.vector.SyncVectorEnv:
    """Copy i runs ``levels[i // copies_per_level]``; SAME_STEP autoreset puts the
    final observation of an episode that ended in ``info["final_obs"]``."""
    fns = [(lambda lv=levels[i // copies_per_level]: spec.make(lv))
           for i in range(len(levels) * copies_per_level)]
    envs = gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    envs.reset(seed=seed)
    envs.action_space.seed(seed)
    return envs
