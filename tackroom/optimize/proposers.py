"""Proposers: where candidate edits come from.

Every proposer answers ``propose(parent, failures, n, rng_seed)`` (or, inside an event loop,
``await apropose(...)``) with up to ``n`` edit lists, each one candidate's edits on
``parent``, each checked to apply (an edit that does not apply is never returned). What went
wrong on the way (an answer with no usable edits, a server error) goes to the proposer's
``log``, a list of dicts the optimiser records.

* :class:`LLMProposer` — reflective mutation as GEPA does it: any tackroom policy (``openai:…``,
  ``hf:…``, the policy being trained) is shown the harness, failed episodes summarised from
  their records (scrubbed of task ids, seeds and answers by the leakage guard) and the edit
  grammar, and answers with edits.
* :class:`ScriptedProposer` — deterministic structured mutations from a seeded RNG (rules and
  skills from a pool, loop limits within their ranges): for tests and for models too small to
  propose.
* :class:`SeedProposer` — the hand-written baseline, :func:`tackroom.optimize.seeds.seed_edits`,
  as a proposer.

Each registers a factory under the ``proposer`` kind of :mod:`tackroom.core.registry`
(``scripted``, ``seeds``, ``llm``); :func:`make_proposer` builds the one an
``optimize.toml``'s ``proposer`` names: a registered name, or a policy spec, which
is the ``llm`` proposer asking that policy.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from tackroom.core.aio import run_sync
from tackroom.core.episode import Episode
from tackroom.core.errors import ConfigError, ContextLengthExceeded, InfraError, PolicyError
from tackroom.core.policy import Policy, PolicyRequest, Sampling
from tackroom.core.registry import entry, has, names, register
from tackroom.harness.spec import AgentHarness, HarnessSpec, Skill
from tackroom.optimize.edits import (
    EDIT_GRAMMAR,
    Edit,
    EditError,
    apply_edits,
    describe_skills,
    parse_edits,
    rules,
)
from tackroom.optimize.guard import LeakageGuard
from tackroom.optimize.seeds import SEEDS, seed_edits, seed_skills

__all__ = ["DEFAULT_POOL", "LLMProposer", "Proposer", "ScriptedProposer", "SeedProposer",
           "check_proposer", "make_proposer", "rule_pool", "seed_edits", "seed_skills"]


class Proposer(Protocol):
    """Anything that proposes candidate edits of a harness."""

    #: Problems met while proposing (dicts with an ``event`` key), for the optimiser's records.
    log: list[dict[str, Any]]

    def propose(self, parent: HarnessSpec, failures: list[Episode], n: int,
                rng_seed: int) -> list[list[Edit]]:
        """Up to ``n`` edit lists on ``parent``, each valid on it; fewer when some failed."""
        ...

    async def apropose(self, parent: HarnessSpec, failures: list[Episode], n: int,
                       rng_seed: int) -> list[list[Edit]]:
        """:meth:`propose`, from inside a running event loop."""
        ...


# -- the LLM proposer ------------------------------------------------------------------------

PROPOSER_SYSTEM = """You improve the harness of an AI agent: the system prompt, settings and
skills (procedural advice) it reads while doing tasks. You are shown the harness and some
episodes the agent failed. Find what went wrong in general, and propose edits that would help
the agent on every task of this kind, not only these episodes. Prefer a few short, concrete
rules over long text; do not repeat advice the harness already has.

""" + EDIT_GRAMMAR


def _cut(text: str | None, limit: int) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else text[: limit - 15].rstrip() + " …[truncated]"


def describe_harness(spec: HarnessSpec) -> str:
    """The harness's editable slots, as the proposer sees them."""
    loop = {k: v for k, v in spec.loop.items() if k != "reflect_prompt"}
    return "\n".join((
        f"harness {spec.name!r}: observation {spec.observation['renderer']} "
        f"(max_chars {spec.observation['max_chars']}, options {spec.observation['options']}), "
        f"actions {spec.actions['interface']} written as {spec.actions['parser']}",
        f"prompt.system:\n{_cut(spec.prompt['system'], 3000)}",
        f"prompt.first_turn: {spec.prompt['first_turn']!r}",
        f"prompt.next_turn: {spec.prompt['next_turn']!r}",
        f"loop: {loop}",
        f"loop.reflect_prompt: {spec.loop['reflect_prompt']!r}",
        f"budget: {spec.budget}",
        "skills:",
        describe_skills(spec.skills),
    ))


def summarise_failure(ep: Episode, scrub: Callable[[str], str] | None = None, last_turns: int = 2,
                      limit: int = 400) -> str:
    """One failed episode, from its record: instruction, outcome and failure mode, and the
    last turns' model output, parse error, action error and feedback; each field cut to
    ``limit`` characters and passed through ``scrub`` (task ids, seeds, answers out)."""
    clean = scrub or (lambda s: s)
    lines = [f"instruction: {clean(_cut(ep.instruction, 2 * limit))}",
             f"outcome: {ep.outcome.value}" + (f" ({ep.failure_mode})" if ep.failure_mode else "")
             + f" after {ep.n_turns} turn(s)"]
    if ep.error:
        lines.append(f"error: {clean(_cut(ep.error, limit))}")
    for t in ep.turns[-last_turns:]:
        said = t.raw_text or " ".join(f"{c.get('function', {}).get('name', '?')}"
                                      f"({c.get('function', {}).get('arguments', '')})"
                                      for c in t.tool_calls)
        lines.append(f"turn {t.index + 1} model: {clean(_cut(said, limit))}")
        for label, value in (("parse error", t.parse_error), ("action error", t.action_error),
                             ("feedback", t.feedback)):
            if value:
                lines.append(f"turn {t.index + 1} {label}: {clean(_cut(value, limit))}")
    return "\n".join(lines)


#: The proposer's default sampling: some temperature, so that ``n`` proposals differ.
PROPOSER_SAMPLING = Sampling(temperature=0.7, max_tokens=1024)


class LLMProposer:
    """Reflective mutation: a policy reads the harness and failures and answers with edits.

    Args:
        policy: any tackroom policy (``make_policy("openai:…")``, ``hf:…``, the trained one).
        guard: scrubs what the policy is shown of the episodes (``None``: shown as recorded).
        max_failures: how many failed episodes one prompt shows (a different sample of them
            for each of the ``n`` proposals, drawn from ``rng_seed``).
        max_prompt_chars: the most characters of episode summaries one prompt holds.
        sampling: the proposer's sampling; its ``seed`` is set per proposal from ``rng_seed``.

    An answer that is not a usable edit list (no JSON, an unknown op, an edit that does not
    apply) is shown its error and asked once more; a second failure is logged as
    ``{"event": "proposer_no_edits", ...}`` and that proposal is skipped, never raised.
    """

    def __init__(self, policy: Policy, guard: LeakageGuard | None = None, max_failures: int = 4,
                 max_prompt_chars: int = 12000,
                 sampling: Sampling = PROPOSER_SAMPLING) -> None:
        self.policy = policy
        self.guard = guard
        self.max_failures = max_failures
        self.max_prompt_chars = max_prompt_chars
        self.sampling = sampling
        self.log: list[dict[str, Any]] = []

    def messages(self, parent: HarnessSpec, failures: Sequence[Episode]) -> list[dict[str, Any]]:
        """The proposer's prompt for these failures."""
        scrub = self.guard.scrub if self.guard is not None else None
        parts, used = [], 0
        for i, ep in enumerate(failures):
            s = f"failed episode {i + 1}:\n{summarise_failure(ep, scrub)}"
            if used + len(s) > self.max_prompt_chars:
                break
            parts.append(s)
            used += len(s)
        shown = "\n\n".join(parts) or "(no failed episodes recorded)"
        user = (f"{describe_harness(parent)}\n\n{shown}\n\n"
                "Propose edits to the harness as a JSON array, following the grammar.")
        return [{"role": "system", "content": PROPOSER_SYSTEM},
                {"role": "user", "content": user}]

    def propose(self, parent: HarnessSpec, failures: list[Episode], n: int,
                rng_seed: int) -> list[list[Edit]]:
        """Up to ``n`` edit lists; each proposal is one policy call (and at most one retry).

        The policy may be used from one event loop after another (tackroom's HTTP client
        reopens its connections on a new loop)."""
        return run_sync(lambda: self.apropose(parent, failures, n, rng_seed))

    async def apropose(self, parent: HarnessSpec, failures: list[Episode], n: int,
                       rng_seed: int) -> list[list[Edit]]:
        rng = random.Random(rng_seed)
        out: list[list[Edit]] = []
        for i in range(n):
            shown = (rng.sample(failures, self.max_failures)
                     if len(failures) > self.max_failures else list(failures))
            edits = await self._one(parent, shown, seed=rng_seed * 1009 + i, proposal=i)
            if edits:
                out.append(edits)
        return out

    async def _one(self, parent: HarnessSpec, failures: list[Episode], seed: int,
                   proposal: int) -> list[Edit] | None:
        messages = self.messages(parent, failures)
        sampling = Sampling(temperature=self.sampling.temperature, top_p=self.sampling.top_p,
                            max_tokens=self.sampling.max_tokens, seed=seed,
                            top_k=self.sampling.top_k)
        problems, answers = [], []
        for _attempt in range(2):  # the answer, then one retry shown what was wrong
            try:
                reply = await self.policy.act(PolicyRequest(messages=messages,
                                                            sampling=sampling))
            except (InfraError, ContextLengthExceeded) as e:
                problems.append(e.line())
                break
            text = reply.text or ""
            answers.append(_cut(text, 600))
            try:
                edits = parse_edits(text)
                if not edits:
                    raise EditError("the answer is an empty edit list", "proposer answer",
                                    "propose at least one edit")
                apply_edits(parent, edits)
                return edits
            except EditError as e:
                problems.append(e.line())
                messages = messages + [
                    {"role": "assistant", "content": _cut(text, 4000)},
                    {"role": "user", "content": f"That answer could not be used: {e.line()}\n"
                                                "Answer again with only the JSON array of "
                                                "edits, following the grammar."}]
        self.log.append({"event": "proposer_no_edits", "proposer": "llm",
                         "policy": self.policy.id, "proposal": proposal,
                         "message": "proposer gave no usable edits", "problems": problems,
                         "answers": answers})
        return None


# -- the scripted proposer -------------------------------------------------------------------

#: Rules the scripted proposer draws from when given none: general advice for any agent.
DEFAULT_POOL: tuple[str, ...] = (
    "- Read the whole instruction before the first action.",
    "- Act on exactly the element the instruction names, matching its text exactly.",
    "- After an error, change what you do instead of repeating the same action.",
    "- Check every requirement of the task before the action that finishes it.",
    "- Prefer one careful action over several guesses.",
    "- When what you need is not shown, look for a control that reveals more.",
)
#: The loop limits it tweaks, and the ranges it keeps them in (inside the spec's ranges).
LOOP_RANGES: dict[str, tuple[int, int]] = {"history": (0, 12), "max_consecutive_errors": (1, 10)}
MUTATIONS = ("add_rule", "delete_rule", "replace_rule", "add_skill", "delete_skill",
             "replace_skill", "loop")


class ScriptedProposer:
    """Structured mutations from a seeded RNG: same seed, same edits.

    Args:
        pool: rule texts to add or put in place of others.
        skills: whole skills to add or put in place of others (default: skills of 2 or 3
            pool rules, named ``skill-<k>``).
        mutations: which of :data:`MUTATIONS` it draws from.
        max_edits: each proposal has 1 to ``max_edits`` edits.
    """

    def __init__(self, pool: Sequence[str] = DEFAULT_POOL, skills: Sequence[Skill] = (),
                 mutations: Sequence[str] = MUTATIONS, max_edits: int = 2) -> None:
        bad = set(mutations) - set(MUTATIONS)
        if bad or not pool:
            raise EditError(f"bad scripted proposer settings {sorted(bad) or 'empty pool'}",
                            "ScriptedProposer", f"mutations: {', '.join(MUTATIONS)}; "
                            "give at least one rule text")
        self.pool = tuple(pool)
        self.skills = tuple(skills)
        self.mutations = tuple(mutations)
        self.max_edits = max_edits
        self.log: list[dict[str, Any]] = []

    async def apropose(self, parent: HarnessSpec, failures: list[Episode], n: int,
                       rng_seed: int) -> list[list[Edit]]:
        return self.propose(parent, failures, n, rng_seed)

    def propose(self, parent: HarnessSpec, failures: list[Episode], n: int,
                rng_seed: int) -> list[list[Edit]]:
        """``failures`` are not read: the mutations are blind, as a baseline's should be."""
        out: list[list[Edit]] = []
        for i in range(n):
            rng = random.Random(f"{rng_seed}:{i}")  # str seeds are stable across runs
            edits = self._proposal(parent, rng)
            if edits:
                out.append(edits)
        return out

    def _proposal(self, parent: HarnessSpec, rng: random.Random) -> list[Edit]:
        if isinstance(parent, AgentHarness):
            return []
        edits: list[Edit] = []
        spec = parent
        for _ in range(rng.randint(1, self.max_edits)):
            for _try in range(10):  # some mutations do not fit the spec as it is: draw again
                e = self._mutation(spec, rng, rng.choice(self.mutations))
                if e is None:
                    continue
                try:
                    nxt = apply_edits(spec, [e])
                except EditError:
                    continue
                if nxt.hash != spec.hash:
                    edits.append(e)
                    spec = nxt
                    break
        return edits

    def _mutation(self, spec: HarnessSpec, rng: random.Random, kind: str) -> Edit | None:
        skills = list(spec.skills)
        names = {s.name for s in skills}
        if kind == "loop":
            key = rng.choice(sorted(LOOP_RANGES))
            lo, hi = LOOP_RANGES[key]
            now = int(spec.loop[key])
            value = min(hi, max(lo, now + rng.choice((-2, -1, 1, 2))))
            return Edit("set", slot=f"loop.{key}", value=value) if value != now else None
        if kind in ("add_skill", "replace_skill"):
            new = self._new_skill(rng, names)
            if kind == "add_skill":
                return Edit("add_skill", skill=new.name, text=new.text)
            if not skills:
                return None
            return Edit("replace_skill", skill=rng.choice(skills).name, text=new.text)
        if not skills:
            if kind != "add_rule":
                return None
            # No skill to add a rule to: start one with the rule.
            return Edit("add_skill", skill=self._fresh_name(names), text=rng.choice(self.pool))
        s = rng.choice(skills)
        n_rules = len(rules(s.text))
        if kind == "delete_skill":
            return Edit("delete_skill", skill=s.name)
        if kind == "add_rule":
            return Edit("add_rule", skill=s.name, text=rng.choice(self.pool),
                        index=rng.randint(0, n_rules))
        if n_rules == 0 or (kind == "delete_rule" and n_rules < 2):
            return None
        index = rng.randrange(n_rules)
        if kind == "delete_rule":
            return Edit("delete_rule", skill=s.name, index=index)
        return Edit("replace_rule", skill=s.name, index=index, text=rng.choice(self.pool))

    def _new_skill(self, rng: random.Random, names: set[str]) -> Skill:
        fresh = [s for s in self.skills if s.name not in names]
        if fresh:
            return rng.choice(fresh)
        text = "\n".join(rng.sample(self.pool, min(len(self.pool), rng.randint(2, 3))))
        return Skill(self._fresh_name(names), text)

    @staticmethod
    def _fresh_name(names: set[str]) -> str:
        k = 1
        while f"skill-{k}" in names:
            k += 1
        return f"skill-{k}"


def rule_pool(suite: str) -> list[str]:
    """Rule texts for the scripted proposer on ``suite``: the rules of its seed skills, then
    :data:`DEFAULT_POOL` (only those for a suite without seeds)."""
    own = [r for s in (seed_skills(suite) if suite in SEEDS else []) for r in rules(s.text)]
    return list(dict.fromkeys(own + list(DEFAULT_POOL)))


class SeedProposer:
    """The hand-written baseline as a proposer: one proposal, adding the suite's seed skills
    that ``parent`` does not already have (none once it has them all)."""

    def __init__(self, suite: str) -> None:
        self.suite = suite
        self.edits = seed_edits(suite)  # an unknown suite fails here, not mid-loop
        self.log: list[dict[str, Any]] = []

    def propose(self, parent: HarnessSpec, failures: list[Episode], n: int,
                rng_seed: int) -> list[list[Edit]]:
        have = {s.name for s in parent.skills}
        edits = [e for e in self.edits if e.skill not in have]
        return [edits] if edits and n > 0 and not isinstance(parent, AgentHarness) else []

    async def apropose(self, parent: HarnessSpec, failures: list[Episode], n: int,
                       rng_seed: int) -> list[list[Edit]]:
        return self.propose(parent, failures, n, rng_seed)


# -- the registered proposers -----------------------------------------------------------------
# A factory per name: ``factory(suite, *, policy=None, base_url=None) -> Proposer``. The
# ``llm`` entry takes the policy spec a config names in place of a proposer name.
@register("proposer", "scripted", summary="seeded structured mutations of rules, skills and "
          "loop limits (tests, models too small to propose)")
def scripted_proposer(suite: str, *, policy: str | None = None,
                      base_url: str | None = None) -> ScriptedProposer:
    """A :class:`ScriptedProposer` drawing from ``suite``'s :func:`rule_pool`."""
    return ScriptedProposer(rule_pool(suite))


@register("proposer", "seeds", summary="the suite's hand-written seed skills, as one candidate")
def seeds_proposer(suite: str, *, policy: str | None = None,
                   base_url: str | None = None) -> SeedProposer:
    """A :class:`SeedProposer` for ``suite``."""
    return SeedProposer(suite)


@register("proposer", "llm", summary="GEPA's reflective mutation by a policy: write its spec "
          "(openai:M, hf:DIR) as the proposer", policy=True)
def llm_proposer(suite: str, *, policy: str | None = None,
                 base_url: str | None = None) -> LLMProposer:
    """An :class:`LLMProposer` asking the policy ``policy`` (a policy spec)."""
    from tackroom.policies import make_policy

    if not policy:
        raise ConfigError("the llm proposer needs a policy", "proposer",
                          "write the policy's spec as the proposer, e.g. proposer = "
                          "\"openai:Qwen/Qwen3-8B\"")
    return LLMProposer(make_policy(policy, base_url=base_url))


def _named(spec: str) -> bool:
    """Whether ``spec`` is a registered proposer written by its name (not a policy spec)."""
    return has("proposer", spec) and not entry("proposer", spec).meta.get("policy")


def check_proposer(spec: str, where: str = "proposer") -> None:
    """Raise :class:`ConfigError` unless ``spec`` is a proposer's name or a policy spec
    (its form only: nothing is loaded)."""
    from tackroom.policies import check_policy_spec

    if _named(spec):
        return
    try:
        check_policy_spec(spec)
    except (PolicyError, ConfigError):
        named = [n for n in names("proposer") if _named(n)]
        raise ConfigError(f"unknown proposer {spec!r}", where,
                          f"use one of: {', '.join(named)}, or a policy spec for the llm "
                          "proposer (openai:MODEL, hf:DIR)") from None


def make_proposer(spec: str, *, suite: str, base_url: str | None = None) -> Proposer:
    """The proposer ``spec`` names: a registered proposer by name, else the ``llm`` proposer
    asking the policy ``spec``."""
    if _named(spec):
        return entry("proposer", spec).obj(suite, base_url=base_url)
    check_proposer(spec)
    return entry("proposer", "llm").obj(suite, policy=spec, base_url=base_url)
