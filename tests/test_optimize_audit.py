"""The BiPA audit (tackroom.optimize.audit) and acceptance rules: selection effect, read graph, cost.

Every random draw has a fixed seed, so the numbers are the same on every run.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tackroom.core.episode import Episode, Outcome, Turn
from tackroom.core.errors import ConfigError
from tackroom.core.registry import get, names
from tackroom.harness.spec import parse_harness
from tackroom.optimize.acceptance import (
    accept_greedy,
    accept_pareto,
    accept_threshold,
    get_rule,
    pareto_rule,
    unit_scores,
)
from tackroom.optimize.audit import (
    acceptance_replay,
    dev_test,
    edit_cost,
    edit_costs,
    read_graph,
    replay_agreement,
    unit_usage,
)
from tackroom.report.audit_tables import render_audit_tables

# -- acceptance replay on candidates with known true gains -------------------------------------
#: 20 candidates as good as the baseline and one truly 5 points better.
P_TRUE = np.array([0.5] * 20 + [0.55])
P_BASE = 0.5
N_UNITS = 50
NAMES = [f"c{i:02d}" for i in range(P_TRUE.size)]


def known_selection_effect(reps: int = 40_000, seed: int = 123) -> float:
    """E[gain at selection − true gain of the pick | the greedy rule accepts], by Monte Carlo.

    The same procedure as ``accept_greedy``: the best dev mean is picked and
    accepted when it beats the baseline's dev mean (ties: a tie at the top
    goes to the first maximum, as ``argmax`` does).
    """
    rng = np.random.default_rng(seed)
    means = rng.binomial(N_UNITS, P_TRUE, size=(reps, P_TRUE.size)) / N_UNITS
    base = rng.binomial(N_UNITS, P_BASE, size=reps) / N_UNITS
    pick = means.argmax(axis=1)
    best = means.max(axis=1)
    accepted = best > base
    curse = (best - base) - (P_TRUE[pick] - P_BASE)
    return float(curse[accepted].mean())


def draw(rng: np.random.Generator):
    """One optimiser run: selection and fresh outcomes of every candidate and the baseline."""
    sel = {n: rng.binomial(1, p, N_UNITS) for n, p in zip(NAMES, P_TRUE, strict=True)}
    fresh = {n: rng.binomial(1, p, N_UNITS) for n, p in zip(NAMES, P_TRUE, strict=True)}
    return sel, fresh, rng.binomial(1, P_BASE, N_UNITS), rng.binomial(1, P_BASE, N_UNITS)


KNOWN = known_selection_effect()


def test_the_known_effect_is_a_winners_curse():
    # Two Monte Carlo runs agree, and the effect is the expected size: the max of 21
    # binomial means (sd 0.071) sits ~1.9 sd above the truth.
    assert KNOWN == pytest.approx(known_selection_effect(seed=7), abs=0.005)
    assert 0.11 < KNOWN < 0.17


def test_one_replay_recovers_the_selection_effect_within_its_interval():
    res = acceptance_replay(*draw(np.random.default_rng(2026)), rule="greedy", seed=0)
    assert len(res.selected) == 1
    # Within the bootstrap interval, and within 0.25 (two sd of one replay with 50+50
    # units: sd ≈ 0.126, measured over many replays below).
    assert res.effect.lo <= KNOWN <= res.effect.hi
    assert abs(res.effect.value - KNOWN) < 0.25
    # The fresh gain's interval covers the pick's true gain.
    true_gain = P_TRUE[NAMES.index(res.selected[0])] - P_BASE
    assert res.gain_fresh.lo <= true_gain <= res.gain_fresh.hi
    assert res.effect.value == pytest.approx(res.gain_selection.value - res.gain_fresh.value)
    # The selection-only bootstrap is a cross-check of the same sign and order.
    assert 0.0 < res.curse_bootstrap < 0.3
    # Seeded: the same call gives the same numbers; the result is JSON.
    again = acceptance_replay(*draw(np.random.default_rng(2026)), rule="greedy", seed=0)
    assert again == res
    assert json.loads(json.dumps(res.to_dict()))["effect"]["value"] == res.effect.value


def test_replays_are_unbiased_for_the_known_effect():
    rng = np.random.default_rng(99)
    effects = [acceptance_replay(*draw(rng), n_boot=0).effect.value for _ in range(400)]
    effects = np.array([e for e in effects if np.isfinite(e)])  # runs that accepted
    assert len(effects) > 350
    se = effects.std() / np.sqrt(len(effects))
    assert se < 0.008
    assert abs(effects.mean() - KNOWN) < 0.025  # ≈ 3 standard errors


def test_interval_coverage_is_near_nominal():
    rng = np.random.default_rng(5)
    hits = [(r.effect.lo <= KNOWN <= r.effect.hi)
            for r in (acceptance_replay(*draw(rng), n_boot=400, seed=s) for s in range(40))
            if r.selected]
    assert np.mean(hits) >= 0.8


def test_no_selection_effect_when_the_winner_is_clear():
    sel = {"good": [1.0] * 40, "bad": [0.0] * 40}
    fresh = {"good": [1.0] * 40, "bad": [0.0] * 40}
    base = [1.0, 0.0] * 20
    res = acceptance_replay(sel, fresh, base, base, rule="greedy", n_boot=200)
    assert res.selected == ("good",)
    assert res.effect.value == pytest.approx(0.0)
    assert res.gain_selection.value == pytest.approx(0.5)
    assert res.agreement.same and res.agreement.jaccard == 1.0
    assert res.curse_bootstrap == pytest.approx(0.0, abs=0.02)  # baseline resampling noise


def test_replay_agreement():
    sel = {"a": [1, 1, 0, 0], "b": [1, 0, 0, 0]}
    fresh = {"a": [0, 0, 0, 0], "b": [1, 1, 1, 0]}
    base = [0, 0, 0, 0]
    ag = replay_agreement(sel, fresh, base, base, "greedy")
    assert ag.selected == ("a",) and ag.replayed == ("b",)
    assert not ag.same and not ag.top_same and ag.jaccard == 0.0
    ag = replay_agreement(sel, fresh, base, base, get_rule("threshold", threshold=0.1))
    assert ag.selected == ("a", "b") and ag.replayed == ("b",)
    assert ag.jaccard == 0.5 and not ag.same and not ag.top_same


# -- acceptance rules ------------------------------------------------------------------------------
def test_greedy_and_threshold():
    scores = {"a": [1, 0, 0, 0], "b": [1, 1, 0, 0], "c": [1, 1, 0, 0]}
    assert accept_greedy(scores, [1, 1, 0, 0]) == []  # must beat the baseline
    assert accept_greedy(scores, [1, 0, 0, 0]) == ["b"]  # ties: first in order
    assert accept_threshold(scores, [0, 0, 0, 0], threshold=0.25) == ["b", "c"]
    assert accept_threshold(scores, [0, 0, 0, 0]) == ["b", "c", "a"]
    assert {"greedy", "threshold", "pareto"} <= set(names("acceptance"))
    with pytest.raises(ConfigError, match="unknown acceptance 'bogus'") as err:
        get_rule("bogus")
    assert "greedy" in err.value.fix  # the message lists the registered rules


def test_pareto_front_on_a_crafted_table():
    table = {
        "A": {"t1": 1.0, "t2": 0.0, "t3": 0.5},
        "B": {"t1": 0.0, "t2": 1.0, "t3": 0.5},
        "C": {"t1": 0.5, "t2": 0.5, "t3": 0.5},  # best at nothing, dominated by no one
        "D": {"t1": 0.0, "t2": 0.5, "t3": 0.5},  # dominated by B and by C
        "E": {"t1": 1.0, "t2": 0.0, "t3": 0.5},  # a copy of A: copies do not dominate
        "F": {"t1": 1.0, "t2": 0.0, "t3": 0.0},  # dominated by A
    }
    assert accept_pareto(table) == ["A", "B", "C", "E"]
    with pytest.raises(ValueError, match="same tasks"):
        accept_pareto({"A": {"t1": 1.0}, "B": {"t2": 1.0}})

    # As a rule over (task, seed) units: per-task means; the baseline joins the pool.
    units = [("t1", 0), ("t1", 1), ("t2", 0), ("t2", 1)]
    scores = {"same": [1, 0, 0, 0], "worse": [0, 0, 0, 0], "t2er": [0, 0, 1, 0],
              "both": [1, 1, 1, 0]}
    base = [1, 0, 0, 0]
    # "same" equals the baseline (adds nothing), "worse" is dominated, "t2er" is dominated
    # by "both"; "both" is the front.
    assert pareto_rule(scores, base, units=units) == ["both"]
    assert get("acceptance", "pareto") is pareto_rule
    res = acceptance_replay(scores, scores, base, base, "pareto", units_sel=units,
                            units_fresh=units, n_boot=100)
    assert res.selected == ("both",) and res.effect.value == pytest.approx(0.0)


# -- dev -> test -----------------------------------------------------------------------------------
def test_dev_test_gains():
    dev = {"held": [1, 1, 1, 1, 0, 0, 0, 0], "faded": [1, 1, 1, 1, 1, 0, 0, 0]}
    test = {"held": [1, 1, 1, 0, 0, 0], "faded": [1, 0, 0, 0, 0, 0]}
    rows = dev_test(dev, test, [1, 0, 0, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0],
                    accepted=["held", "faded"], n_boot=500)
    held, faded = rows
    assert held.candidate == "held"
    assert held.dev.value == pytest.approx(3 / 8) and held.test.value == pytest.approx(2 / 6)
    assert faded.dev.value == pytest.approx(4 / 8) and faded.test.value == pytest.approx(0.0)
    assert faded.drop.value == pytest.approx(0.5)
    assert faded.drop.lo <= 0.5 <= faded.drop.hi
    assert held.dev.lo <= held.dev.value <= held.dev.hi
    assert (held.n_dev, held.n_test) == (8, 6)
    json.dumps([r.to_dict() for r in rows])


# -- the read graph of a crafted episode -----------------------------------------------------------
SYSTEM = ("You are an agent.\n\nGive exactly one action per turn.\n\n"
          "## Skill: forms\n"
          "- Fill every field before pressing Submit.\n"
          "- If a dropdown is empty, reload the page with `F5`.\n"
          "- Finish with `click` on the submit button.")
USER0 = "Task: enter the name Bob\n\nPage:\n[1] textbox name\n[2] button Submit"
OBS1 = "[1] textbox name: Bob\n[2] button Submit"
TOOL1 = "typed Bob into [1]; saved a draft to forms/draft.json"
CALL = {"id": "call_1", "type": "function",
        "function": {"name": "type", "arguments": json.dumps({"ref": 1, "text": "Bob"})}}


def crafted_episode() -> Episode:
    sys_msg = {"role": "system", "content": SYSTEM}
    raw0 = "I will fill every field before pressing submit. Typing the name first."
    t0 = Turn(index=0, messages=[sys_msg, {"role": "user", "content": USER0}], raw_text=raw0,
              tool_calls=[CALL], actions=[{"kind": "type", "ref": 1, "text": "Bob"}],
              observation=OBS1, prompt_tokens=100)
    t1 = Turn(index=1, messages=[
        sys_msg, {"role": "user", "content": USER0},
        {"role": "assistant", "content": raw0, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": TOOL1},
        {"role": "user", "content": "Page:\n" + OBS1}],
        raw_text="Clicking [2] button Submit since [1] textbox name: Bob is done.",
        actions=[{"kind": "click", "ref": 2}], prompt_tokens=180)
    return Episode(episode_id="ep1", run_id="r", task="form", suite="toy", harness="h",
                   harness_hash="x", policy="p", seed=0, turns=[t0, t1],
                   outcome=Outcome.SUCCESS)


def test_read_graph_matches_a_hand_count():
    g = read_graph(crafted_episode())
    ids = [u.id for u in g.units]
    assert ids == ["skill:forms", "skill:forms/0", "skill:forms/1", "skill:forms/2",
                   "prompt:0", "prompt:1", "tool:call_1", "obs:0", "obs:1",
                   "file:forms/draft.json"]
    assert g.unit("skill:forms/1").text == "If a dropdown is empty, reload the page with `F5`."
    assert g.unit("skill:forms/1").parent == "skill:forms"
    # in context: turn 0 sees the 4 skill units, 2 prompt sections and the first user
    # message (7); turn 1 also sees the observation, the tool output and the file (10).
    ctx = {(e.turn, e.unit) for e in g.in_context}
    assert len(g.in_context) == len(ctx) == 17
    assert {u for t, u in ctx if t == 0} == set(ids[:6]) | {"obs:0"}
    assert {u for t, u in ctx if t == 1} == set(ids)
    # acted on: turn 0 quotes rule 1 ("fill every field before"), hence the skill, and types
    # into [1], listed in the first user message; turn 1 clicks (rule 3's `click`, hence
    # the skill), quotes the observation and clicks [2], listed in the first message too.
    acted = {(e.turn, e.unit): e.evidence for e in g.acted_on}
    assert acted == {(0, "skill:forms"): "every field before pressing",
                     (0, "skill:forms/0"): "every field before pressing",
                     (0, "obs:0"): "ref [1]",
                     (1, "skill:forms"): "click", (1, "skill:forms/2"): "click",
                     (1, "obs:0"): "ref [2]", (1, "obs:1"): "1 textbox name bob"}
    assert len(g.acted_on) == len(acted)
    assert g.read_then_act == 7
    assert g.acted() == ["skill:forms", "skill:forms/0", "skill:forms/2"]
    assert g.never_used() == ["skill:forms/1"]
    assert g.never_used(None) == ["skill:forms/1", "prompt:0", "prompt:1", "tool:call_1",
                                  "file:forms/draft.json"]
    counts = g.counts()
    assert counts["skill:forms/0"] == {"in_context": 2, "acted_on": 1}
    assert counts["obs:1"] == {"in_context": 1, "acted_on": 1}
    assert counts["obs:0"] == {"in_context": 2, "acted_on": 2}
    assert counts["file:forms/draft.json"] == {"in_context": 1, "acted_on": 0}
    summary = g.summary()
    assert summary["units"] == {"file": 1, "observation": 2, "prompt_section": 2,
                                "skill_section": 4, "tool_output": 1}
    assert summary["read_then_act"] == 7 and summary["in_context_edges"] == 17
    json.dumps(g.to_dict())


def test_read_graph_with_the_spec_agrees():
    spec = parse_harness({"name": "h", "observation": {"renderer": "element_list"},
                          "actions": {"interface": "element_refs", "parser": "tool_calls"},
                          "skills": [{"name": "forms",
                                      "text": SYSTEM.split("## Skill: forms\n")[1]}]})
    assert read_graph(crafted_episode(), spec) == read_graph(crafted_episode())


def test_unit_usage_over_episodes():
    ep2 = crafted_episode()
    for t in ep2.turns:  # an episode that follows no rule
        t.raw_text, t.tool_calls, t.actions = "ok", [], [{"kind": "press", "key": "Enter"}]
    usage = {u.id: u for u in unit_usage([read_graph(crafted_episode()), read_graph(ep2)])}
    assert set(usage) == {"skill:forms", "skill:forms/0", "skill:forms/1", "skill:forms/2"}
    assert usage["skill:forms/0"].episodes_in_context == 2
    assert usage["skill:forms/0"].episodes_acted == 1
    assert usage["skill:forms"].turns_acted == 2
    assert usage["skill:forms/1"].never_used and not usage["skill:forms/2"].never_used
    assert usage["skill:forms/1"].to_dict()["never_used"] is True


# -- cost ------------------------------------------------------------------------------------------
def _ep(task: str, seed: int, tokens: list[int], outcome: Outcome = Outcome.SUCCESS) -> Episode:
    return Episode(episode_id=f"{task}{seed}{len(tokens)}", run_id="r", task=task, suite="s",
                   harness="h", harness_hash="x", policy="p", seed=seed, outcome=outcome,
                   turns=[Turn(index=i, prompt_tokens=n) for i, n in enumerate(tokens)])


def test_edit_cost_on_crafted_episodes():
    before = [_ep("a", 0, [100, 150]), _ep("b", 0, [100]), _ep("c", 0, [100, 100])]
    after = [_ep("a", 0, [130, 190, 200]), _ep("b", 0, [120]),
             _ep("c", 0, [1, 1], Outcome.INFRA_ERROR),  # dropped: infra errors cost nothing
             _ep("d", 0, [500])]  # unpaired
    cost = edit_cost(before, after, label="seed → v1", n_boot=500)
    assert cost.n == 2
    # a: 250 -> 520 (+270), b: 100 -> 120 (+20); turns a: 2 -> 3, b: 1 -> 1.
    assert cost.input_tokens.before == pytest.approx(175)
    assert cost.input_tokens.after == pytest.approx(320)
    assert cost.input_tokens.diff == pytest.approx(145)
    assert 20 <= cost.input_tokens.lo <= cost.input_tokens.hi <= 270
    assert cost.turns.diff == pytest.approx(0.5)
    # Record rows work the same way.
    rows = [{"task": e.task, "seed": e.seed, "outcome": e.outcome.value, "attempt": 0,
             "sampling": {}, "prompt_tokens": e.prompt_tokens, "n_turns": e.n_turns}
            for e in after]
    assert edit_cost(before, rows, n_boot=500).input_tokens == cost.input_tokens
    chain = edit_costs([("seed", before), ("v1", after), ("v2", after)], n_boot=200)
    assert [c.label for c in chain] == ["seed → v1", "v1 → v2"]
    assert chain[1].input_tokens.diff == 0.0 and chain[1].n == 3
    json.dumps(cost.to_dict())


def test_unit_scores_align_candidates():
    a = [_ep("t", 0, [1]), _ep("t", 1, [1], Outcome.FAILURE), _ep("u", 0, [1])]
    b = [_ep("t", 0, [1], Outcome.FAILURE), _ep("t", 1, [1]),
         _ep("u", 0, [1], Outcome.INFRA_ERROR)]
    units, scores = unit_scores({"a": a, "b": b})
    assert units == [("t", 0), ("t", 1)]
    assert scores == {"a": [1.0, 0.0], "b": [0.0, 1.0]}


def test_render_audit_tables():
    from rich.console import Console

    res = acceptance_replay(*draw(np.random.default_rng(1)), n_boot=100)
    rows = dev_test({"a": [1, 0]}, {"a": [0, 0]}, [0, 0], [0, 0], n_boot=50)
    usage = unit_usage([read_graph(crafted_episode())])
    cost = edit_cost([_ep("a", 0, [10])], [_ep("a", 0, [20])], n_boot=50)
    tables = render_audit_tables(res, rows, usage, [cost])
    console = Console(width=200, record=True, color_system=None)
    for t in tables:
        console.print(t)
    text = console.export_text()
    assert "selection effect" in text and "never used" in text and "+10" in text


def code_episode() -> Episode:
    """Three turns of a code-suite-like episode: grep, view a file, edit it."""
    sys_msg = {"role": "system", "content": "You fix bugs in a Python repository."}
    user0 = "Task: fix the bug\n\nThe repository is checked out at /repo (3 files)."
    obs1 = "pkg/util.py:3:    return total / len(xs)\nREADME.md:1: demo"
    obs2 = ("[File: /repo/pkg/util.py (3 lines total)]\n1 def mean(xs):\n"
            "2     total = sum(xs)\n3     return total / len(xs)")
    m0 = [sys_msg, {"role": "user", "content": user0}]
    a0 = {"role": "assistant", "content": ""}
    m1 = m0 + [a0, {"role": "user", "content": obs1}]
    m2 = m1 + [{"role": "assistant", "content": "Open the file."},
               {"role": "user", "content": obs2}]
    turns = [
        Turn(index=0, messages=m0, actions=[{"kind": "shell", "cmd": "grep -rn total /repo"}],
             observation=obs1),
        Turn(index=1, messages=m1, raw_text="Open the file.",
             actions=[{"kind": "view_file", "path": "pkg/util.py", "line": 0, "window": 100,
                       "scroll": 0}], observation=obs2),
        Turn(index=2, messages=m2, actions=[{"kind": "edit", "path": "pkg/util.py",
                                             "old": "return total / len(xs)",
                                             "new": "return total / max(1, len(xs))"}]),
    ]
    return Episode(episode_id="ep2", run_id="r", task="fix", suite="code", harness="h",
                   harness_hash="x", policy="p", seed=0, turns=turns)


def test_read_graph_of_a_code_episode_matches_a_hand_count():
    g = read_graph(code_episode())
    assert [u.id for u in g.units] == ["prompt:0", "obs:0", "obs:1", "obs:2", "file:pkg/util.py",
                                       "file:README.md", "file:/repo/pkg/util.py"]
    # in context: turn 0 the prompt and the task (2); turn 1 adds the grep output and the
    # two files it names (5); turn 2 adds the viewer's output and its file (7).
    per_turn = [sum(1 for e in g.in_context if e.turn == t) for t in range(3)]
    assert per_turn == [2, 5, 7]
    acted = {(e.turn, e.unit): e.evidence for e in g.acted_on}
    assert acted == {
        (0, "obs:0"): "/repo",  # the grep names the repository the task names
        (1, "file:pkg/util.py"): "pkg/util.py",  # the view opens the file grep found
        (2, "obs:1"): "return total len xs",  # the edit quotes the line both outputs show
        (2, "obs:2"): "return total len xs",
        (2, "file:pkg/util.py"): "pkg/util.py",
        (2, "file:/repo/pkg/util.py"): "pkg/util.py",  # a tail of the viewer's path
    }
    assert g.never_used(None) == ["prompt:0", "file:README.md"]
    assert g.never_used() == [] and g.acted() == []  # no skills
