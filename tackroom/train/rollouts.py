"""Online rollouts: each step, the current policy plays G episodes per (task, harness).

A step draws ``tasks_per_step`` task *instances*: the tasks in a seeded
order, each at a fresh environment seed shared by every harness and every
sample of that instance — so with distinct tasks a ``within`` group is G
samples of one (task instance, harness) and a ``cross`` group pools the
harnesses on the same instance. When ``tasks_per_step`` exceeds the number
of tasks, tasks repeat at other seeds; the built-in groupings then pool a
task's instances (a per-task baseline), and a key such as
``"task + '|' + harness + '|' + str(seed)"`` keeps each instance its own group. Task choice, environment seeds and sampling seeds derive from
(run seed, iteration) alone, so a resumed run replays exactly the rollouts
the crashed one would have made.

The episodes run through the ordinary runner (:func:`~tackroom.runner.grid.run_cells`)
and are recorded in the store under the training run, with the weight
version that wrote each turn in ``Turn.adapter``:

* **here** — an :class:`~tackroom.policies.hf_policy.HFPolicy` serving the
  model being trained straight from memory (no reload between steps);
* **on Ray** — the weights of the version are saved under
  ``OUT/rollout-weights/<version>`` and each step's rollout workers
  (:mod:`tackroom.runner.ray_workers`) load them as ``hf:BASE:ADAPTER``.

Agent harnesses (a third-party CLI, :mod:`tackroom.runner.agent`) roll out the
same way: the runner puts a model gateway in front of the policy being trained
(here, or in each Ray worker), the CLI's every model call is a turn with the
token ids and log-probs that policy sampled, and the trainer tokenises each
turn with the messages the CLI sent and the tools it offered
(``meta.agent.tools``).
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tackroom.core.episode import Episode
from tackroom.core.policy import Policy, PolicyRequest, PolicyResponse, Sampling
from tackroom.core.task import Suite, Task
from tackroom.harness.spec import HarnessSpec
from tackroom.runner.episode import EpisodeSpec
from tackroom.runner.grid import run_cells

#: Training rollouts use environment seeds below this; evaluation seeds start here, so
#: evaluation is always on held-out instances.
EVAL_SEED_BASE = 1_000_000
ROLLOUT_WEIGHTS = "rollout-weights"


def draw_cells(tasks: Sequence[Task], harnesses: Sequence[HarnessSpec], policy: Policy, *,
               seed: int, iteration: int, batch: int, tasks_per_step: int, group_size: int,
               sampling: Sampling) -> list[EpisodeSpec]:
    """The episodes of one rollout batch (see the module docstring).

    Pairs a harness cannot express are left out, as in an evaluation grid.
    """
    rng = random.Random(f"tackroom-rollouts:{seed}:{iteration}:{batch}")
    chosen: list[Task] = []
    while len(chosen) < tasks_per_step:
        chosen.extend(rng.sample(list(tasks), len(tasks)))
    cells: list[EpisodeSpec] = []
    used: set[tuple[str, int]] = set()
    for task in chosen[:tasks_per_step]:
        env_seed = rng.randrange(EVAL_SEED_BASE)
        while (task.key, env_seed) in used:  # two instances of a task never share a seed
            env_seed = rng.randrange(EVAL_SEED_BASE)
        used.add((task.key, env_seed))
        for h in harnesses:
            if not h.can_express(task.requires):
                continue
            for _ in range(group_size):
                s = Sampling(temperature=sampling.temperature, top_p=sampling.top_p,
                             max_tokens=sampling.max_tokens, seed=rng.getrandbits(31),
                             logprobs=True, top_k=sampling.top_k)
                cells.append(EpisodeSpec(task, h, policy, env_seed, s))
    return cells


async def play(cells: Sequence[EpisodeSpec], suite: Suite, run_id: str, *, store: Any,
               concurrency: int, executor: Any = None,
               on_episode: Callable[[Episode], None] | None = None) -> list[Episode]:
    """Run and record ``cells``; the final attempt of each, in cell order."""
    order = {c.episode_id: i for i, c in enumerate(cells)}
    episodes = await run_cells(cells, suite, run_id, store=store, concurrency=concurrency,
                               on_episode=on_episode, executor=executor)
    # run_cells returns episodes as they finish; a fixed order keeps steps reproducible.
    return sorted(episodes, key=lambda ep: order.get(_first_attempt_id(ep, cells), 0))


def _first_attempt_id(ep: Episode, cells: Sequence[EpisodeSpec]) -> str:
    if ep.attempt == 0:
        return ep.episode_id
    from tackroom.core.episode import episode_id

    return episode_id(ep.task, ep.harness_hash, ep.policy, ep.sampling, ep.seed, 0)


@dataclass
class RemotePolicy:
    """The driver's name for a policy that Ray workers build from ``spec``.

    :class:`~tackroom.runner.ray_workers.RayExecutor` only needs the id of
    each of its policies on the driver; the model itself lives on the actors.
    """

    id: str
    spec: str

    async def act(self, request: PolicyRequest) -> PolicyResponse:
        raise RuntimeError(f"{self.id} runs on Ray rollout workers, not in this process")

    async def aclose(self) -> None:
        return None


def save_rollout_weights(engine: Any, version: str, write_version: Callable[[Path], None],
                         keep: int = 2) -> str:
    """Save the engine's current weights for Ray workers; the policy spec that loads them."""
    root = Path(engine.out_dir) / ROLLOUT_WEIGHTS
    target = root / version
    tmp = root / f".tmp-{version}"
    shutil.rmtree(tmp, ignore_errors=True)
    engine.save_final(tmp)
    write_version(tmp)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    old = sorted((p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")),
                 key=lambda p: p.stat().st_mtime)
    for p in old[:-keep]:
        shutil.rmtree(p, ignore_errors=True)
    base = Path(engine.model_dir)
    return f"hf:{base}:{target}" if engine.lora is not None else f"hf:{target}"
