"""The toy suite: tasks, page semantics, experts, a random baseline and throughput."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from tackroom.core.actions import Action, Click, ClickAt, Press, Shell, Type, TypeText
from tackroom.core.errors import ActionError, TaskNotFound
from tackroom.core.observation import Observation
from tackroom.core.task import CAPABILITIES, Environment, Task
from tackroom.suites import get_suite
from tackroom.suites.toy import ToySuite, make_suite

SUITE = make_suite()
TASKS = SUITE.tasks()
IDS = [t.id for t in TASKS]


def run_expert(task: Task, seed: int, *, coords: bool = False, max_steps: int = 30,
               first_only: bool = True) -> tuple[bool, int]:
    """Run the expert, one action per step (or the whole plan); optionally as coordinates."""
    env = SUITE.make_env(task)
    expert = SUITE.expert(task)
    assert expert is not None
    obs = env.reset(seed)
    state: dict = {}
    for step in range(max_steps):
        plan = expert(obs, state)
        assert plan, f"{task.id} seed {seed}: expert had no action at step {step}"
        for action in (plan[:1] if first_only else plan):
            for a in (to_coords(action, obs) if coords else [action]):
                res = env.step(a)
                if res.terminated or res.truncated:
                    return bool(res.success), step + 1
            obs = res.observation
    return False, max_steps


def to_coords(action: Action, obs: Observation) -> list[Action]:
    """What a coordinate harness does with an expert's ref action."""
    if isinstance(action, (Click, Type)):
        el = obs.element(action.ref)
        assert el is not None
        x, y = el.center
        if isinstance(action, Click):
            return [ClickAt(x, y)]
        return [ClickAt(x, y), TypeText(action.text)]
    return [action]


# -- the suite -------------------------------------------------------------------------------


def test_suite_shape():
    assert SUITE.name == "toy"
    assert len(TASKS) >= 12
    assert len(set(IDS)) == len(IDS)
    for t in TASKS:
        assert t.suite == "toy" and t.key == f"toy/{t.id}"
        assert t.requires and t.requires <= set(CAPABILITIES)
        assert t.has_expert and SUITE.expert(t) is not None
        assert t.description
    assert any("type" in t.requires for t in TASKS)
    assert any("press" in t.requires for t in TASKS)
    assert isinstance(get_suite("toy"), ToySuite)


def test_environment_protocol_and_pool():
    env = SUITE.make_env(TASKS[0])
    assert isinstance(env, Environment)
    assert env.blocking is False

    async def go() -> bool:
        pool = SUITE.pool(4)
        assert pool.size == 4
        async with pool.acquire(TASKS[0]) as env:
            obs = env.reset(0)
            ok = bool(obs.elements)
        await pool.aclose()
        return ok

    assert asyncio.run(go())


def test_unknown_task():
    with pytest.raises(TaskNotFound):
        SUITE.task("no-such-task")
    with pytest.raises(TaskNotFound):
        SUITE.make_env(Task(id="click-button", suite="miniwob"))


@pytest.mark.parametrize("task_id", IDS)
def test_deterministic_per_seed(task_id):
    task = SUITE.task(task_id)
    a, b = SUITE.make_env(task), SUITE.make_env(task)
    for seed in (0, 1, 7):
        assert a.reset(seed).to_dict() == b.reset(seed).to_dict()
    variants = {a.reset(s).html for s in range(20)}
    assert len(variants) > 1, "seeds should vary the page"


@pytest.mark.parametrize("task_id", IDS)
def test_page_structure_and_geometry(task_id):
    env = SUITE.make_env(SUITE.task(task_id))
    for seed in range(10):
        obs = env.reset(seed)
        els = {e.ref: e for e in obs.elements}
        assert obs.elements[0].tag == "body" and obs.elements[0].parent == 0
        assert obs.find(id="query")[0].text == obs.instruction
        assert obs.find(id="area")
        for e in obs.elements:
            assert e.width > 0 and e.height > 0, e
            if e.parent:
                p = els[e.parent]  # the parent is visible too
                assert p.left <= e.left and e.left + e.width <= p.left + p.width, (p, e)
                assert p.top <= e.top and e.top + e.height <= p.top + p.height, (p, e)
        for e in obs.elements:  # visible siblings never overlap
            kids = obs.children(e.ref)
            for i, x in enumerate(kids):
                for y in kids[i + 1:]:
                    overlap = (x.left < y.left + y.width and y.left < x.left + x.width
                               and x.top < y.top + y.height and y.top < x.top + x.height)
                    assert not overlap, (x, y)
        # every element's centre hits the element itself or one of its descendants
        for e in obs.elements:
            hit = env.page.hit(*e.center)
            assert hit is not None
            n = hit
            while n is not None and n.ref != e.ref:
                n = n.parent
            assert n is not None, (e, hit)
        html = obs.html
        assert html.startswith('<body data-ref="1">') and html.endswith("</body>")
        assert all(f'data-ref="{e.ref}"' in html for e in obs.elements)


# -- experts ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("how", "seeds"), [
    ({}, 50),                     # one action per turn, by ref
    ({"coords": True}, 50),       # clicking at element centres
    ({"first_only": False}, 20),  # the whole plan of each turn
], ids=["refs", "coordinates", "whole-plan"])
@pytest.mark.parametrize("task_id", IDS)
def test_expert_solves_every_seed(task_id, how, seeds):
    task = SUITE.task(task_id)
    for seed in range(seeds):
        ok, _ = run_expert(task, seed, **how)
        assert ok, f"{task_id} seed {seed}"


@pytest.mark.parametrize("coords", [False, True])
def test_expert_recovers_from_wrong_text(coords):
    """A field holding the wrong text is cleared (C-a, Backspace) and retyped."""
    task = SUITE.task("login-user")
    expert = SUITE.expert(task)
    env = SUITE.make_env(task)
    obs = env.reset(11)
    for inp in obs.find(tag="input_text") + obs.find(tag="input_password"):
        obs = env.step(Type(inp.ref, "garbage")).observation
    state: dict = {}
    for _ in range(20):
        for a in to_coords(expert(obs, state)[0], obs) if coords else expert(obs, state)[:1]:
            res = env.step(a)
        if res.terminated:
            break
        obs = res.observation
    assert res.success


def test_some_tasks_need_several_steps():
    long = set()
    for task in TASKS:
        steps = max(run_expert(task, s)[1] for s in range(20))
        if steps >= 3:
            long.add(task.id)
    assert len(long) >= 5, long


# -- the random baseline ---------------------------------------------------------------------


def test_random_policy_mostly_fails():
    rng = random.Random(0)
    rates = {}
    for task in TASKS:
        env = SUITE.make_env(task)
        wins = 0
        for seed in range(40):
            obs = env.reset(seed)
            for _ in range(30):
                res = env.step(Click(rng.choice(obs.elements).ref))
                obs = res.observation
                if res.terminated or res.truncated:
                    wins += bool(res.success)
                    break
        rates[task.id] = wins / 40
    mean = sum(rates.values()) / len(rates)
    print(f"\nrandom-click success: mean {mean:.2f}; "
          + ", ".join(f"{k} {v:.2f}" for k, v in rates.items()))
    assert mean < 0.3, rates


# -- page semantics --------------------------------------------------------------------------


def _env(task_id: str, seed: int = 0):
    env = SUITE.make_env(SUITE.task(task_id))
    return env, env.reset(seed)


def test_action_errors():
    env, obs = _env("enter-text")
    with pytest.raises(ActionError, match="no element with ref 999"):
        env.step(Click(999))
    with pytest.raises(ActionError, match="no element with ref"):
        env.step(Click(0))
    button = obs.find(tag="button")[0]
    with pytest.raises(ActionError, match="not a text field"):
        env.step(Type(button.ref, "x"))
    with pytest.raises(ActionError, match="does not support 'shell'"):
        env.step(Shell("ls"))
    env2 = SUITE.make_env(SUITE.task("enter-text"))
    with pytest.raises(ActionError, match="reset"):
        env2.step(Click(1))


def test_hidden_elements_are_not_clickable():
    env, obs = _env("click-tab", 0)
    shown = {e.ref for e in obs.elements}
    hidden = [n.ref for n in env.page.nodes if n.ref not in shown]
    assert hidden
    with pytest.raises(ActionError, match="not visible"):
        env.step(Click(hidden[0]))


def test_click_outside_is_a_noop_and_body_click_blurs():
    env, obs = _env("enter-text")
    res = env.step(ClickAt(-5, -5))
    assert not res.terminated and res.reward == 0.0 and "note" in res.info
    res = env.step(ClickAt(1000, 1000))
    assert not res.terminated
    inp = obs.find(tag="input_text")[0]
    obs = env.step(Click(inp.ref)).observation
    assert obs.element(inp.ref).focused
    obs = env.step(ClickAt(1, 208)).observation  # empty area of the page
    assert not obs.element(inp.ref).focused


def test_typing_focus_and_keys():
    env, obs = _env("enter-text")
    inp = obs.find(tag="input_text")[0]
    res = env.step(TypeText("lost"))  # nothing focused
    assert res.observation.element(inp.ref).value == "" and "note" in res.info
    obs = env.step(Type(inp.ref, "ab")).observation
    assert obs.element(inp.ref).focused and obs.element(inp.ref).value == "ab"
    obs = env.step(TypeText("c")).observation
    assert obs.element(inp.ref).value == "abc"
    obs = env.step(Press("Backspace")).observation
    assert obs.element(inp.ref).value == "ab"
    env.step(Press("C-a"))
    obs = env.step(TypeText("new")).observation
    assert obs.element(inp.ref).value == "new"
    obs = env.step(Press("F13")).observation  # unknown keys do nothing
    assert obs.element(inp.ref).value == "new"
    assert 'value="new"' in obs.html


def test_press_enter_and_newline():
    env, obs = _env("press-enter", 3)
    word = obs.instruction.split('"')[1]
    inp = obs.find(tag="input_text")[0]
    res = env.step(Type(inp.ref, word + "\n"))
    assert res.terminated and res.success and res.reward == 1.0
    env, obs = _env("press-enter", 3)
    env.step(Type(obs.find(tag="input_text")[0].ref, "wrong"))
    res = env.step(Press("Enter"))
    assert res.terminated and res.success is False and res.reward == -1.0


def test_wrong_button_fails_and_episode_ends():
    env, obs = _env("click-button", 5)
    target = obs.instruction.split('"')[1]
    wrong = next(b for b in obs.find(tag="button") if b.text != target)
    res = env.step(Click(wrong.ref))
    assert res.terminated and res.success is False and res.reward == -1.0
    with pytest.raises(ActionError, match="over"):
        env.step(Click(wrong.ref))


def test_label_and_inner_text_clicks_bubble():
    env, obs = _env("click-checkboxes", 2)
    label = obs.find(tag="label")[0]
    box = next(e for e in obs.children(label.parent) if e.tag == "input_checkbox")
    obs = env.step(ClickAt(*label.center)).observation
    assert obs.element(box.ref).value is True
    obs = env.step(Click(label.ref)).observation
    assert obs.element(box.ref).value is False
    # the "x" of the dialog's close button is a span inside the button
    for seed in range(30):
        env, obs = _env("click-dialog", seed)
        if '"x"' in obs.instruction:
            span = obs.find(tag="span", text="x")[0]
            assert obs.element(span.parent).tag == "button"
            res = env.step(ClickAt(*span.center))
            assert res.terminated and res.success
            break
    else:
        pytest.fail("no close-the-dialog seed")


def test_radio_group_and_select():
    env, obs = _env("click-option", 4)
    radios = obs.find(tag="input_radio")
    obs = env.step(Click(radios[0].ref)).observation
    obs = env.step(Click(radios[1].ref)).observation
    assert [obs.element(r.ref).value for r in radios[:2]] == [False, True]
    env, obs = _env("choose-list", 4)
    opt = obs.find(tag="option")[1]
    obs = env.step(Click(opt.ref)).observation
    assert obs.find(tag="select")[0].value == opt.text
    assert obs.element(opt.ref).value is True
    assert " selected>" in obs.html


def test_tabs_reveal_content():
    env, obs = _env("click-tab", 1)
    tabs = obs.find(tag="a", classes="tab")
    before = {e.ref for e in obs.elements}
    obs = env.step(Click(tabs[1].ref)).observation
    after = {e.ref for e in obs.elements}
    assert before != after
    assert "active" in obs.element(tabs[1].ref).classes


def test_observation_html_is_lazy_and_copyable():
    import dataclasses
    import pickle

    env, obs = _env("click-button", 0)
    assert obs._html is None  # not rendered until asked for
    html = obs.html
    assert "<button" in html and obs.to_dict()["html"] == html
    assert pickle.loads(pickle.dumps(obs)) == obs
    copy = dataclasses.replace(obs, instruction="changed")
    assert copy.instruction == "changed" and copy.html == html
    obs.html = "<p>override</p>"
    assert obs.html == "<p>override</p>"


def test_truncation_after_max_steps():
    env = ToySuite(max_steps=3).make_env(SUITE.task("enter-text"))
    env.reset(0)
    results = [env.step(ClickAt(-1, -1)) for _ in range(3)]
    assert [r.truncated for r in results] == [False, False, True]
    assert not results[-1].terminated and results[-1].success is False


# -- throughput (printed, never asserted) -----------------------------------------------------


def test_throughput_report():
    episodes = 0
    start = time.perf_counter()
    for seed in range(60):
        for task in TASKS:
            run_expert(task, seed)
            episodes += 1
    rate = episodes / (time.perf_counter() - start)
    print(f"\ntoy expert throughput: {rate:,.0f} episodes/s ({episodes} episodes)")
    assert episodes == 60 * len(TASKS)
