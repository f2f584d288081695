"""The MiniWoB++ suite: catalog, experts, the Chromium adapter and its browser pool.

Tests marked ``browser`` drive real headless Chromium; they share one browser
per module where they can, since starting Chrome costs seconds.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from tackroom.core import (
    CAPABILITIES,
    ActionError,
    Click,
    ClickAt,
    InfraError,
    Press,
    Submit,
    Type,
    TypeText,
)

pytest.importorskip("miniwob")
pytest.importorskip("selenium")
from tackroom.suites.miniwob import EXPERTS, TASKS, MiniWoBPool, make_suite  # noqa: E402
from tackroom.suites.miniwob.env import EPISODE_MAX_TIME_MS, MiniWoBEnv, resolve_key  # noqa: E402
from tackroom.suites.miniwob.experts import run_expert  # noqa: E402

HAVE_CHROME = os.path.isfile(os.environ.get("MINIWOB_CHROME_BINARY", "/usr/bin/chromium"))
EXPERT_SEEDS = (0, 1, 2)


# -- catalog (no browser) -------------------------------------------------------


def test_catalog_size_and_capabilities():
    suite = make_suite()
    tasks = suite.tasks()
    assert suite.name == "miniwob"
    assert len(tasks) >= 40
    assert len({t.id for t in tasks}) == len(tasks)
    assert sum(t.has_expert for t in tasks) >= 20
    for task in tasks:
        assert task.suite == "miniwob" and task.key == f"miniwob/{task.id}"
        assert task.requires and task.requires <= set(CAPABILITIES), task.id
        assert not task.id.startswith("flight.")
        assert task.description
        assert (suite.expert(task) is not None) == task.has_expert
    assert all("drag" in t.requires for t in tasks if t.id.startswith(("drag-", "draw-")))
    assert "press" in TASKS["terminal"].requires
    assert TASKS["click-test-2"].requires == frozenset({"click"})
    assert TASKS["enter-text"].requires == frozenset({"click", "type"})


def test_experts_only_for_catalog_tasks():
    assert set(EXPERTS) <= set(TASKS)


def test_expert_gives_up_quietly_on_a_foreign_page():
    from tackroom.core import Observation

    state: dict = {}
    assert EXPERTS["click-test-2"](Observation(instruction="Click button ONE."), state) == []
    assert "no button ONE" in state["expert_error"]


def test_key_names():
    assert resolve_key("Enter") == "<Enter>"
    assert resolve_key("<Enter>") == "<Enter>"
    assert resolve_key("backspace") == "<Backspace>"
    assert resolve_key("ctrl+a") == "C-a"
    assert resolve_key("C-a") == "C-a"
    assert resolve_key("7") == "7"
    with pytest.raises(ActionError, match="allowed keys"):
        resolve_key("F13")


def test_unknown_task_is_rejected():
    from tackroom.core.errors import TaskNotFound

    with pytest.raises(TaskNotFound):
        MiniWoBEnv("no-such-task")
    with pytest.raises(TaskNotFound):
        MiniWoBEnv("flight.AA")


# -- one shared browser ------------------------------------------------------------


@pytest.fixture(scope="module")
def env():
    if not HAVE_CHROME:
        pytest.skip("needs chromium + chromedriver")
    e = MiniWoBEnv("click-test-2")
    yield e
    e.close()


@pytest.mark.browser
@pytest.mark.parametrize("task_id", sorted(EXPERTS))
def test_expert_solves_task(env, task_id):
    """Each expert, one action per call, solves every seed, using only what the task requires."""
    kinds: set[str] = set()

    def watched(obs, state):
        plan = EXPERTS[task_id](obs, state)
        kinds.update(action.kind for action in plan[:1])
        return plan

    env.retarget(task_id)
    results = [run_expert(env, watched, seed, first_only=True) for seed in EXPERT_SEEDS]
    assert all(r["success"] for r in results), [r for r in results if not r["success"]]
    assert kinds <= TASKS[task_id].requires
    assert env.starts == 1, "switching tasks must not start a new Chrome"


@pytest.mark.browser
def test_observation(env):
    env.retarget("click-test-2")
    env.with_html = True
    obs = env.reset(0)
    assert obs.instruction == "Click button ONE."
    (one,) = obs.find(tag="button", text="ONE")
    assert one.width > 0 and one.height > 0 and one.parent
    assert obs.element(one.parent) is not None
    assert obs.html is not None and 'id="wrap"' in obs.html and "ONE" in obs.html
    # MiniWoB's own 10 s timer is lifted: the harness's budget decides.
    assert env.driver.execute_script("return core.EPISODE_MAX_TIME") == EPISODE_MAX_TIME_MS
    env.with_html = False
    assert env.reset(1).html is None
    env.with_html = True


@pytest.mark.browser
def test_a_seed_starts_from_the_same_page_after_a_reused_browser(env):
    """The last episode's keyboard focus does not leak into the next one (click-button-
    sequence re-uses its buttons: a focused TWO would change what the next episode sees)."""
    env.retarget("click-button-sequence")
    first = env.reset(0)
    (two,) = first.find(tag="button", text="TWO")
    env.step(Click(two.ref))
    again = env.reset(0)
    assert [e.to_dict() for e in again.elements] == [e.to_dict() for e in first.elements]
    assert not next(e for e in again.elements if e.text == "TWO").focused


@pytest.mark.browser
def test_bad_actions_raise_action_error(env):
    env.retarget("enter-text")
    obs = env.reset(0)
    with pytest.raises(ActionError, match="no element with ref 9999"):
        env.step(Click(9999))
    with pytest.raises(ActionError, match="no element with ref"):
        env.step(Type(-12345, "x"))
    with pytest.raises(ActionError, match="allowed keys"):
        env.step(Press("F13"))
    with pytest.raises(ActionError, match="outside the page"):
        env.step(ClickAt(5000, 5))
    with pytest.raises(ActionError, match="cannot take"):
        env.step(Submit())
    # The episode goes on after a rejected action.
    text = obs.instruction.split('"')[1]
    (box,) = obs.find(tag="input_text")
    result = env.step(Type(box.ref, text))
    assert not result.terminated and result.observation.element(box.ref).value == text
    result = env.step(Click(obs.find(tag="button", text="Submit")[0].ref))
    assert result.terminated and result.success and result.reward == 1.0
    with pytest.raises(ActionError, match="over"):
        env.step(Click(box.ref))


@pytest.mark.browser
def test_click_at_element_centre(env):
    """A coordinate click at an element's centre lands on that element."""
    env.retarget("click-test-2")
    obs = env.reset(0)
    (target,) = obs.find(tag="button", text="ONE")
    result = env.step(ClickAt(*target.center))
    assert result.terminated and result.success

    env.retarget("click-checkboxes")
    obs = env.reset(3)
    boxes = obs.find(tag="input_checkbox")
    result = env.step(ClickAt(*boxes[0].center))
    assert result.observation.element(boxes[0].ref).value is True

    env.retarget("enter-text")
    obs = env.reset(2)
    (box,) = obs.find(tag="input_text")
    env.step(ClickAt(*box.center))
    result = env.step(TypeText("abc"))
    assert result.observation.element(box.ref).value == "abc"
    result = env.step(Press("Backspace"))
    assert result.observation.element(box.ref).value == "ab"


@pytest.mark.browser
@pytest.mark.parametrize("task_id", ["click-dialog", "navigate-tree", "click-tab-2"])
def test_expert_with_coordinate_clicks(env, task_id):
    """Experts' clicks also work as clicks at element centres (what a harness sends)."""
    env.retarget(task_id)
    results = [run_expert(env, EXPERTS[task_id], seed, coords=True) for seed in EXPERT_SEEDS]
    assert all(r["success"] for r in results), results


# -- pool ----------------------------------------------------------------------------


def _live_group_members(pgid: int) -> list[int]:
    """Processes (not zombies) in process group ``pgid``."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(name))
    return out


def _dead(pid: int, bound: float = 30.0) -> bool:
    """Whether ``pid`` is gone or a zombie, polled up to ``bound`` seconds."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def _group_gone(pgid: int, bound: float = 30.0) -> bool:
    """Whether process group ``pgid`` has no live member, polled up to ``bound`` seconds
    (a bound for "eventually", never a timing assertion)."""
    deadline = time.monotonic() + bound
    while _live_group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _live_group_members(pgid)


async def _episode(pool: MiniWoBPool, task_id: str, seed: int) -> bool:
    async with pool.acquire(TASKS[task_id]) as env:
        obs = await asyncio.to_thread(env.reset, seed)
        plan = EXPERTS[task_id](obs, {})
        result = await asyncio.to_thread(env.step, plan[0])
        return bool(result.success)


@pytest.mark.browser
@pytest.mark.skipif(not HAVE_CHROME, reason="needs chromium + chromedriver")
async def test_pool_reuses_browsers():
    pool = MiniWoBPool(1)
    try:
        for seed, task_id in enumerate(["click-test-2", "click-test", "click-test-2",
                                        "focus-text", "click-test"]):
            assert await _episode(pool, task_id, seed)
        assert pool.browsers == 1 and pool.starts == 1
    finally:
        await pool.aclose()
    assert pool.browsers == 0


@pytest.mark.browser
@pytest.mark.skipif(not HAVE_CHROME, reason="needs chromium + chromedriver")
async def test_pool_bounds_concurrency_and_cleans_up():
    pool = MiniWoBPool(2)
    try:
        ok = await asyncio.gather(*(_episode(pool, t, s) for s, t in enumerate(
            ["click-test", "click-test-2", "click-test", "click-test-2", "focus-text"])))
        assert all(ok)
        assert pool.browsers <= 2 and pool.starts <= 2
        groups = [env.driver_pid for env in pool._envs if env.driver_pid]
        assert groups
    finally:
        await pool.aclose()
    for pgid in groups:
        assert _group_gone(pgid), "browser processes outlived aclose()"


def _chrome_pid(driver_pid: int) -> int:
    """The main chromium process: a child of chromedriver."""
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == driver_pid:
                return int(name)
    raise AssertionError("no chromium child of chromedriver")


@pytest.mark.browser
@pytest.mark.skipif(not HAVE_CHROME, reason="needs chromium + chromedriver")
@pytest.mark.parametrize("victim", ["chromedriver", "chromium"])
async def test_crash_gives_infra_error_and_pool_recovers(victim):
    pool = MiniWoBPool(1)
    task = TASKS["click-test"]
    try:
        async with pool.acquire(task) as env:
            obs = await asyncio.to_thread(env.reset, 0)
            pgid = env.driver_pid
            pid = pgid if victim == "chromedriver" else _chrome_pid(pgid)
            os.kill(pid, signal.SIGKILL)
            assert await asyncio.to_thread(_dead, pid), f"{victim} survived SIGKILL"
            with pytest.raises(InfraError, match="browser failed"):
                await asyncio.to_thread(env.step, Click(obs.find(tag="button")[0].ref))
        assert await asyncio.to_thread(_group_gone, pgid), "the crashed browser was not cleaned up"
        assert await _episode(pool, "click-test", 1)
        assert pool.browsers == 1 and pool.starts == 2
    finally:
        await pool.aclose()
