"""Candidates as harness edits, the leakage guard, the proposers and the seed skills."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from tackroom.core.episode import Episode, Outcome, Turn
from tackroom.core.errors import ConfigError, HarnessError
from tackroom.core.task import Task
from tackroom.harness.spec import Skill, load_harness
from tackroom.optimize.edits import (
    EDIT_GRAMMAR,
    OPS,
    Candidate,
    Edit,
    EditError,
    apply_edits,
    make_candidate,
    parse_edits,
    rules,
)
from tackroom.optimize.guard import LeakageGuard
from tackroom.optimize.proposers import (
    DEFAULT_POOL,
    LOOP_RANGES,
    LLMProposer,
    ScriptedProposer,
    SeedProposer,
    rule_pool,
)
from tackroom.optimize.seeds import SEEDS, seed_edits, seed_skills
from tackroom.policies import make_policy
from tackroom.suites import get_suite
from tackroom.suites.miniwob.tasks import TASKS as MINIWOB_TASKS
from tackroom.suites.toy.tasks import SPECS as TOY_SPECS
from tackroom.testing import ScriptedOpenAIServer, text

TOY_TASKS = [s.task for s in TOY_SPECS.values()]
EVAL_SEEDS = range(1000, 1050)

PARENT_TOML = '''
name = "base"
extends = "som-tools"
[observation]
options = { show_ids = true }
[[skills]]
name = "forms"
text = """
- Fill every field.

- Submit last."""
[[skills]]
name = "looking"
text = "Read the page first."
'''


@pytest.fixture
def parent_path(tmp_path: Path) -> Path:
    p = tmp_path / "parents" / "base.toml"
    p.parent.mkdir()
    p.write_text(PARENT_TOML)
    return p


# One edit list per op (and some combinations), each valid on the parent above.
EDIT_CASES: dict[str, list[Edit]] = {
    "set prompt": [Edit("set", slot="prompt.system",
                        value='Say "hi"\n\\ back\tslash \x01 and """ quotes')],
    "set turn template": [Edit("set", slot="prompt.next_turn",
                               value="{feedback}Now:\n{observation}{budget}")],
    "set max_chars": [Edit("set", slot="observation.max_chars", value=4000)],
    "set option": [Edit("set", slot="observation.options.show_ids", value=False),
                   Edit("set", slot="observation.options.extra",
                        value={"a b": [1, 2.5, "x"], "c": {"d": True}})],
    "set loop": [Edit("set", slot="loop.history", value=1),
                 Edit("set", slot="loop.on_malformed", value="end"),
                 Edit("set", slot="loop.max_consecutive_errors", value=2)],
    "set budget": [Edit("set", slot="budget.turns", value=20),
                   Edit("set", slot="budget.state_to_model", value=False)],
    "add_skill": [Edit("add_skill", skill="checking", text="- Check.\n- Check again.")],
    "delete_skill": [Edit("delete_skill", skill="forms")],
    "delete every skill": [Edit("delete_skill", skill="forms"),
                           Edit("delete_skill", skill="looking")],
    # `skills = []` beside a table: found by tackroom self-hpo, once written inside [loop].
    "delete every skill and set loop": [Edit("delete_skill", skill="forms"),
                                        Edit("delete_skill", skill="looking"),
                                        Edit("set", slot="loop.history", value=0)],
    "replace_skill": [Edit("replace_skill", skill="looking", text="Look twice.")],
    "add_rule": [Edit("add_rule", skill="forms", text="Check the labels.")],
    "add_rule at index": [Edit("add_rule", skill="forms", text="First rule", index=0)],
    "delete_rule": [Edit("delete_rule", skill="forms", index=1)],
    "replace_rule": [Edit("replace_rule", skill="forms", index=0, text="Fill each field.")],
    "mixed": [Edit("add_skill", skill="new", text="one"),
              Edit("add_rule", skill="new", text="two"),
              Edit("replace_rule", skill="new", index=0, text="zero"),
              Edit("set", slot="loop.on_action_error", value="reflect", why="errors repeat")],
}


def test_every_op_has_a_round_trip_case() -> None:
    ops = {e.op for edits in EDIT_CASES.values() for e in edits}
    assert ops == set(OPS)


@pytest.mark.parametrize("case", sorted(EDIT_CASES))
def test_candidate_round_trip(case: str, parent_path: Path, tmp_path: Path) -> None:
    """The written candidate loads to exactly apply_edits(parent, edits): same content, hash."""
    parent = load_harness(str(parent_path))
    edits = EDIT_CASES[case]
    expected = apply_edits(parent, edits)
    cand = make_candidate(str(parent_path), parent, edits, "child")
    assert isinstance(cand, Candidate)
    assert cand.hash == expected.hash != parent.hash
    assert (cand.parent, cand.parent_hash, cand.edits) == ("base", parent.hash, tuple(edits))
    path = cand.write(tmp_path / "cands")  # elsewhere than the parent: extends still finds it
    loaded = load_harness(str(path))
    assert loaded.hash == cand.hash and loaded.content() == expected.content()
    assert loaded.name == "child" and loaded.extends[-2] == str(parent_path.resolve())
    # Only what changed is written: untouched slots are inherited, not copied.
    raw = tomllib.loads(cand.toml)
    assert raw["extends"] == str(parent_path.resolve())
    assert "actions" not in raw
    assert ("skills" in raw) == (expected.skills != parent.skills)
    # The record of a candidate holds its edits, readable back.
    d = json.loads(json.dumps(cand.to_dict()))
    assert [Edit.from_dict(e) for e in d["edits"]] == list(edits)
    assert d["hash"] == cand.hash and d["parent_hash"] == parent.hash


def test_candidate_of_a_builtin_and_of_a_candidate(tmp_path: Path) -> None:
    parent = load_harness("aci-viewer")
    first = make_candidate("aci-viewer", parent,
                           [Edit("set", slot="observation.options.files", value="tree")], "c1")
    assert 'extends = "aci-viewer"' in first.toml
    assert tomllib.loads(first.toml)["observation"]["options"] == {"files": "tree"}
    p1 = first.write(tmp_path)
    loaded = load_harness(str(p1))
    assert loaded.observation["options"] == {"files": "tree", "status": True}
    second = make_candidate(str(p1), loaded, seed_edits("code"), "c2")
    assert load_harness(str(second.write(tmp_path / "next"))).hash == second.hash
    assert [s.name for s in second.spec.skills] == [s.name for s in seed_skills("code")]


def test_rules_are_lines_and_keep_the_bullets(parent_path: Path) -> None:
    parent = load_harness(str(parent_path))
    assert rules(parent.skills[0].text) == ["- Fill every field.", "- Submit last."]
    spec = apply_edits(parent, [Edit("add_rule", skill="forms", text="Check\nthe labels.",
                                     index=1)])
    assert spec.skills[0].text == "- Fill every field.\n\n- Check the labels.\n- Submit last."
    spec = apply_edits(parent, [Edit("delete_rule", skill="forms", index=0)])
    assert rules(spec.skills[0].text) == ["- Submit last."]


@pytest.mark.parametrize(("edit", "says"), [
    (Edit("set", slot="prompt.title", value="x"), "unknown or fixed slot 'prompt.title'"),
    (Edit("set", slot="actions.parser", value="json"), "unknown or fixed slot"),
    (Edit("set", slot="loop.history", value=-1), "out of range"),
    (Edit("set", slot="loop.on_malformed", value="ignore"), "on_malformed = 'ignore' is not allowed"),
    (Edit("set", slot="prompt.first_turn", value="{task}"), "unknown placeholder"),
    (Edit("set", slot="budget.turns", value="many"), "budget.turns = 'many' is not an integer"),
    (Edit("set", slot="observation.options.x", value=[1, None]), "null is not a value"),
    (Edit("set", slot="observation.options.a.b", value=1), "bad option name"),
    (Edit("delete_skill", skill="nope"), "no skill named 'nope'"),
    (Edit("add_skill", skill="forms", text="x"), "already a skill named 'forms'"),
    (Edit("add_skill", skill="", text="x"), "bad skill name"),
    (Edit("add_skill", skill="x", text="  "), "needs some text"),
    (Edit("delete_rule", skill="forms", index=2), "rule index 2 is out of range"),
    (Edit("replace_rule", skill="forms", index=-1, text="x"), "out of range"),
    (Edit("add_rule", skill="forms", text="x", index=3), "out of range"),
    (Edit("delete_rule", skill="looking", index=0), "leave the skill empty"),
])
def test_edits_are_checked_against_the_parent(edit: Edit, says: str, parent_path: Path) -> None:
    parent = load_harness(str(parent_path))
    with pytest.raises(EditError) as e:
        apply_edits(parent, [Edit("set", slot="loop.history", value=2), edit])
    assert isinstance(e.value, HarnessError)
    assert says in e.value.line() and e.value.line().startswith("edit #2 (")


def test_malformed_edits_and_pointless_candidates(parent_path: Path) -> None:
    parent = load_harness(str(parent_path))
    with pytest.raises(EditError, match="needs value"):
        Edit("set", slot="loop.history")
    with pytest.raises(EditError, match="takes no slot"):
        Edit("delete_skill", skill="x", slot="loop.history")
    with pytest.raises(EditError, match="unknown op"):
        Edit("rename_skill")
    with pytest.raises(EditError, match="too long"):
        Edit("add_skill", skill="x", text="y" * 9000)
    with pytest.raises(EditError, match="change nothing"):
        make_candidate(str(parent_path), parent, [Edit("set", slot="loop.history",
                                                       value=parent.loop["history"])], "same")
    with pytest.raises(EditError, match="named like its parent"):
        make_candidate(str(parent_path), parent, seed_edits("toy"), "base")
    with pytest.raises(EditError, match="agent-CLI harness"):
        apply_edits(load_harness("aider"), [Edit("set", slot="loop.history", value=1)])


def test_parse_edits_reads_the_grammar_in_any_wrapping() -> None:
    body = ('[{"op": "add_rule", "skill": "forms", "text": "Check labels.", "why": "w"},'
            ' {"op": "set", "slot": "loop.history", "value": 3}]')
    want = [Edit("add_rule", skill="forms", text="Check labels.", why="w"),
            Edit("set", slot="loop.history", value=3)]
    assert parse_edits(body) == want
    assert parse_edits(f"Here you go:\n```json\n{body}\n```\nHope it helps.") == want
    assert parse_edits(f"I think rule [0] is weak. So: {body} Done.") == want
    assert parse_edits(json.dumps({"edits": json.loads(body)})) == want
    assert parse_edits('{"op": "delete_skill", "name": "forms"}') == [
        Edit("delete_skill", skill="forms")]
    assert parse_edits("[]") == []
    assert "add_rule" in EDIT_GRAMMAR and "observation.options.KEY" in EDIT_GRAMMAR


@pytest.mark.parametrize("garbage", [
    "", "   ", "I would add a rule about labels.", "[1, 2, 3]", "[{,}]", '{"a": 1}',
    '[{"op": "zap"}]', '[{"op": "set", "slot": "loop.history"}]',
    '[{"op": "add_rule", "skill": 3, "text": "x"}]',
    '[{"op": "delete_rule", "skill": "x", "index": "two"}]',
    '[{"op": "delete_rule", "skill": "x", "index": true}]',
    '[{"op": "add_skill", "skill": "x", "text": "y", "colour": "red"}]',
    '[{"op": "set", "slot": "loop.history", "value": 1}, 5]',
    '[{"op": "add_rule", "skill": "a", "text": "b"},]',
    '{"edits": "none"}', "[" * 50000, "[{" * 20000, None,
    '[{"op": "add_skill", "skill": "x", "text": "\\ud800"}]',
])
def test_garbage_answers_give_a_clear_error(garbage) -> None:
    with pytest.raises(EditError) as e:
        parse_edits(garbage)
    assert e.value.line().startswith("proposer answer")


# -- the leakage guard -----------------------------------------------------------------------

CODE_TASK = Task("add-business-days", "code", frozenset({"edit"}), meta={
    "requirement": ["test_calkit.BusinessTests.test_add_over_weekend"], "regression": []})
TERMINAL_TASK = Task("csv-join", "terminal", frozenset({"shell"}), meta={
    "path": "/opt/tackroom/suites/terminal/tasks/csv-join", "answer": "id,name,total"})


@pytest.fixture
def guard() -> LeakageGuard:
    return LeakageGuard([*TOY_TASKS, *MINIWOB_TASKS.values(), CODE_TASK, TERMINAL_TASK],
                        seeds=EVAL_SEEDS, answers=["Paris"], paths=["/data/split/dev.jsonl"])


LEAKS = {
    "task id": Edit("add_rule", skill="s", text="On click-button, click the third button."),
    "task key": Edit("add_skill", skill="s", text="For toy/click-dialog press the x."),
    "id variant": Edit("replace_rule", skill="s", index=0, text="In Click_Checkboxes tick all."),
    "id run together": Edit("add_rule", skill="s", text="enterpassword: type it twice"),
    "one-word id as key": Edit("add_rule", skill="s", text="miniwob/terminal needs ls"),
    "id in skill name": Edit("add_skill", skill="login-user tips", text="Type slowly."),
    "id in prompt": Edit("set", slot="prompt.system", value="You solve simple-math pages."),
    "id in why": Edit("add_rule", skill="s", text="Be careful.", why="fails on focus-text"),
    "seed": Edit("add_rule", skill="s", text="On seed 1017 the answer is the second one."),
    "seed list": Edit("add_rule", skill="s", text="seeds 1001, 1002 and 1003 are hard"),
    "seed spelt tight": Edit("add_rule", skill="s", text="Seed#1020: click left"),
    "task path": Edit("add_rule", skill="s", text="Read /opt/tackroom/suites/terminal/tasks/"
                      "csv-join/solution.sh first."),
    "task path tail": Edit("add_rule", skill="s", text="cat tasks/csv-join/tests"),
    "task data": Edit("add_rule", skill="s", text="see suites/code/packages for the tests"),
    "given path": Edit("add_rule", skill="s", text="answers are in /data/split/dev.jsonl"),
    "answer": Edit("add_rule", skill="s", text="When unsure, type paris."),
    "meta answer": Edit("add_rule", skill="s", text="Write the header id,name,total."),
    "hidden test id": Edit("add_rule", skill="s", text="Make test_add_over_weekend pass."),
    "answer in option": Edit("set", slot="observation.options.hint", value=["x", "Paris"]),
}


@pytest.mark.parametrize("kind", sorted(LEAKS))
def test_the_leakage_guard_rejects_a_crafted_leaking_edit(kind: str, guard: LeakageGuard) -> None:
    clean = Edit("add_rule", skill="s", text="Read the instruction before acting.")
    reasons = guard.check([clean, LEAKS[kind]])
    assert reasons and all(r.startswith("edit #2 (") for r in reasons), reasons


@pytest.mark.parametrize("ok", [
    "Press the 1 key, then the 2 key.", "Click button ONE, then click button TWO.",
    "Try at most 3 times; seed the form with values in order.", "seed 17 is fine (not a split)",
    "Log in with the username first.", "A terminal shows output; read it.",
    "Click the button labelled as asked.", "Use 1017 ms waits.", "Answer in 2 words.",
])
def test_the_leakage_guard_passes_clean_text(ok: str, guard: LeakageGuard) -> None:
    assert guard.check([Edit("add_rule", skill="s", text=ok)]) == []


def test_the_guard_filters_and_logs_candidates(guard: LeakageGuard, tmp_path: Path) -> None:
    parent = load_harness("som-tools")
    clean = make_candidate("som-tools", parent, seed_edits("toy"), "seeded")
    leaky = make_candidate("som-tools", parent, [Edit("add_skill", skill="cheat",
                                                      text="click-button: pick 'OK'")], "leaky")
    log: list[dict] = []
    assert guard.filter([clean, leaky], log) == [clean]
    [entry] = log
    assert entry["event"] == "leakage_rejected" and entry["candidate"] == "leaky"
    assert entry["hash"] == leaky.hash and entry["parent_hash"] == parent.hash
    assert "click-button" in entry["reasons"][0] and entry["edits"][0]["op"] == "add_skill"
    json.dumps(log)  # the loop records it as is


def test_scrub_removes_what_the_guard_rejects(guard: LeakageGuard) -> None:
    out = guard.scrub("toy/click-button on seed 1017: typed Paris into csv-join")
    assert guard.reasons(out) == []
    assert "click-button" not in out and "1017" not in out and "Paris" not in out


# -- seed skills -----------------------------------------------------------------------------


def test_seed_skills_pass_the_guard_and_make_a_candidate(guard: LeakageGuard) -> None:
    every_task = LeakageGuard([*TOY_TASKS, *MINIWOB_TASKS.values()], seeds=range(0, 10_000))
    for suite in SEEDS:
        assert guard.check(seed_edits(suite)) == [], suite
        assert every_task.check(seed_edits(suite)) == [], suite
    for suite in ("code", "terminal"):  # every suite's own tasks, paths and hidden test ids
        own = LeakageGuard.for_suite(get_suite(suite), seeds=range(0, 10_000))
        assert all(own.check(seed_edits(s)) == [] for s in SEEDS), suite
    skills = seed_skills("toy")
    assert len(skills) >= 3 and all(isinstance(s, Skill) and len(rules(s.text)) >= 3
                                    for s in skills)
    cand = make_candidate("som-tools", load_harness("som-tools"), seed_edits("toy"), "seeded")
    assert [s.name for s in cand.spec.skills] == [s.name for s in skills]
    with pytest.raises(ConfigError, match="no seed skills for suite 'nope'"):
        seed_skills("nope")


# -- proposers -------------------------------------------------------------------------------


def _failure(i: int) -> Episode:
    return Episode(
        episode_id=f"e{i}", run_id="r", task="toy/click-button", suite="toy", harness="base",
        harness_hash="h", policy="p", seed=1000 + i, outcome=Outcome.FAILURE,
        instruction=f'Click on the "Paris" button (toy/click-button, seed {1000 + i}).',
        turns=[Turn(0, raw_text="I will click the first button."),
               Turn(1, raw_text="click(9)", action_error="no element with ref 9",
                    feedback="That element does not exist.")])


def test_scripted_proposer_is_deterministic_and_valid(parent_path: Path) -> None:
    parent = load_harness(str(parent_path))
    proposer = ScriptedProposer(rule_pool("toy"))
    a = proposer.propose(parent, [], n=8, rng_seed=7)
    assert a == ScriptedProposer(rule_pool("toy")).propose(parent, [], n=8, rng_seed=7)
    assert a != proposer.propose(parent, [], n=8, rng_seed=8)
    assert len(a) == 8 and len({json.dumps([e.to_dict() for e in es]) for es in a}) > 4
    for edits in a:
        spec = apply_edits(parent, edits)
        assert spec.hash != parent.hash
        for key, (lo, hi) in LOOP_RANGES.items():
            assert lo <= spec.loop[key] <= hi
    # From a harness with no skills, rule mutations start a skill.
    bare = load_harness("som-tools")
    only_rules = ScriptedProposer(pool=["- Look first."], mutations=["add_rule"])
    [[edit]] = only_rules.propose(bare, [], n=1, rng_seed=0)
    assert edit == Edit("add_skill", skill="skill-1", text="- Look first.")
    assert ScriptedProposer().propose(load_harness("aider"), [], n=2, rng_seed=0) == []
    with pytest.raises(EditError, match="bad scripted proposer"):
        ScriptedProposer(mutations=["shuffle"])


async def test_apropose_inside_a_loop(parent_path: Path) -> None:
    parent = load_harness(str(parent_path))
    assert await ScriptedProposer().apropose(parent, [], 3, 5) == ScriptedProposer().propose(
        parent, [], 3, 5)


def test_rule_pool_and_seed_proposer(parent_path: Path) -> None:
    pool = rule_pool("toy")
    assert pool[:3] == rules(seed_skills("toy")[0].text) and set(DEFAULT_POOL) <= set(pool)
    assert rule_pool("elsewhere") == list(DEFAULT_POOL)
    bare = load_harness("som-tools")
    [edits] = SeedProposer("toy").propose(bare, [], n=4, rng_seed=0)
    assert edits == seed_edits("toy")
    seeded = apply_edits(bare, edits)
    assert SeedProposer("toy").propose(seeded, [], n=4, rng_seed=0) == []
    with pytest.raises(ConfigError):
        SeedProposer("nope")


def test_guard_for_a_suite() -> None:
    guard = LeakageGuard.for_suite(get_suite("toy"), seeds=[5, 6])
    assert guard.check([Edit("add_rule", skill="s", text="on toy/copy-text, seed 6")]) != []
    assert len(guard.check([Edit("add_rule", skill="s", text="copy_text: seed 6")])) == 2


async def test_llm_proposer_against_a_real_server(parent_path: Path) -> None:
    parent = load_harness(str(parent_path))
    guard = LeakageGuard(TOY_TASKS, seeds=EVAL_SEEDS, answers=["Paris"])
    good = ('Looking at the failures, the agent guesses refs.\n```json\n'
            '[{"op": "add_rule", "skill": "looking", "text": "Use only refs shown on the page.",'
            ' "why": "it clicked a ref that does not exist"}]\n```')
    fixed_on_retry = '[{"op": "delete_rule", "skill": "forms", "index": 0}]'
    script = [text(good),
              text("I cannot help with that."), text(fixed_on_retry),  # garbage, then usable
              text("no idea"), text('[{"op": "delete_skill", "skill": "missing"}]')]
    with ScriptedOpenAIServer(script) as srv:
        policy = make_policy("openai:proposer-model", base_url=srv.base_url, timeout=5.0,
                             max_retries=0)
        try:
            proposer = LLMProposer(policy, guard=guard, max_failures=2)
            out = await proposer.apropose(parent, [_failure(i) for i in range(5)], n=3,
                                          rng_seed=1)
        finally:
            await policy.aclose()
        bodies = srv.requests
    assert out == [
        [Edit("add_rule", skill="looking", text="Use only refs shown on the page.",
              why="it clicked a ref that does not exist")],
        [Edit("delete_rule", skill="forms", index=0)],
    ]
    [entry] = proposer.log
    assert entry["message"] == "proposer gave no usable edits" and entry["proposal"] == 2
    assert "no JSON array" in entry["problems"][0] and "no skill named" in entry["problems"][1]
    assert len(bodies) == 5
    prompt = bodies[0]["messages"]
    assert prompt[0]["role"] == "system" and EDIT_GRAMMAR in prompt[0]["content"]
    user = prompt[1]["content"]
    assert "[0] - Fill every field." in user and "no element with ref 9" in user
    assert user.count("failed episode") == 2  # max_failures
    assert "click-button" not in user and "Paris" not in user and "seed 10" not in user
    # The retry shows the model its answer and what was wrong with it.
    retry = bodies[2]["messages"]
    assert retry[-2] == {"role": "assistant", "content": "I cannot help with that."}
    assert "could not be used" in retry[-1]["content"]
    assert bodies[0]["seed"] != bodies[1]["seed"]


def test_llm_proposer_from_sync_code_twice(parent_path: Path) -> None:
    """The loop calls propose() from sync code, once a round: the policy outlives each loop."""
    parent = load_harness(str(parent_path))
    answer = '[{"op": "set", "slot": "loop.history", "value": 1}]'
    with ScriptedOpenAIServer(default=text(answer)) as srv:
        policy = make_policy("openai:proposer-model", base_url=srv.base_url, timeout=5.0)
        proposer = LLMProposer(policy)
        first = proposer.propose(parent, [_failure(0)], n=1, rng_seed=0)
        second = proposer.propose(parent, [], n=2, rng_seed=1)
    assert first == [[Edit("set", slot="loop.history", value=1)]] and len(second) == 2
    assert proposer.log == []
    assert "(no failed episodes recorded)" in srv.requests[-1]["messages"][1]["content"]


def test_tool_descriptions_are_a_slot_the_model_reads(tmp_path) -> None:
    from tackroom.harness.session import HarnessSession
    from tackroom.harness.spec import load_harness
    from tackroom.optimize.edits import Edit, EditError, apply_edits, make_candidate

    text = "Press the element with this number."
    for parent_name in ("som-tools", "html-commands"):  # tool schemas; the command list
        parent = load_harness(parent_name)
        cand = make_candidate(parent_name, parent,
                              [Edit("set", slot="actions.descriptions.click", value=text)], "d")
        spec = load_harness(str(cand.write(tmp_path / parent_name)))
        assert spec.hash == cand.hash != parent.hash
        session = HarnessSession(spec, "Click OK.")
        shown = json.dumps(session.tools) if session.tools else session._system_prompt()
        assert text in shown
        # The shared interface is untouched: the parent still shows its own description.
        before = HarnessSession(parent, "Click OK.")
        assert text not in (json.dumps(before.tools) if before.tools else before._system_prompt())
    with pytest.raises(EditError, match="no action 'fly'"):
        apply_edits(load_harness("som-tools"),
                    [Edit("set", slot="actions.descriptions.fly", value="Fly.")])
