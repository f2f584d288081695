"""What a toy episode ended in — success, a *near miss*, or something else — read from its record.

A near miss is a wrong final click on the element right next to the one the
instruction named: the ``"frost"`` button's neighbour, the link before or
after the target link. It is the toy suite's stand-in for the research's
wrong-object grasps (docs/research.md §6): an outcome a learned reward can
easily score as a success, although the environment's verifier says it is
wrong. :func:`near_miss_proxy` is such a flawed reward on purpose.

The label is recomputed from the record alone: the page is rebuilt from the
episode's ``(task, seed)`` (builders are deterministic) and the recorded
actions are replayed until the one that ended the episode, which names the
element clicked. Only the tasks whose answer is one clickable element among
siblings (``NEAR_MISS_TASKS``) can have near misses; in every other task a
failure is ``other``.

This module sits in the suite layer so that both ``tackroom.train`` (proxy
rewards for training) and ``tackroom.analysis`` (the tilt model) can use it
without importing each other.

A second flaw, :func:`enter_proxy`, pays for *pressing Enter* instead of
choosing an element (``pressed-enter``): a plausible but wrong answer that a
reward model which learnt "the form was submitted" as "done" scores as a
success. Unlike a near miss it is one fixed reply, which a small policy can
learn without reading the page (examples/tilt, "A sixth try").
"""

from __future__ import annotations

from collections.abc import Iterator

from tackroom.core.actions import Action, Click, ClickAt, Press, action_from_dict
from tackroom.core.episode import Episode, Outcome
from tackroom.core.errors import ActionError
from tackroom.suites.toy.env import ToyEnv, key_name
from tackroom.suites.toy.page import Node
from tackroom.suites.toy.tasks import SPECS

SUCCESS = "success"
NEAR_MISS = "near-miss"
OTHER = "other"
#: Every label :func:`outcome` returns, in table order.
LABELS = (SUCCESS, NEAR_MISS, OTHER)
#: Tasks whose answer is one element among clickable siblings, each of whose click hooks is
#: a pure verdict (so calling a hook to find the right element changes nothing).
NEAR_MISS_TASKS = ("click-button", "click-link")
#: What the flawed proxy pays for a near miss: as much as for a success — a learned reward
#: that cannot tell neighbouring elements apart.
NEAR_MISS_PAY = 1.0


def _task_id(ep: Episode) -> str:
    return ep.task.split("/", 1)[-1]


def _clickable(node: Node | None) -> Node | None:
    """The element a click on ``node`` reaches: itself or its nearest ancestor with a hook."""
    while node is not None and node.on_click is None:
        node = node.parent
    return node


def _fresh(task_id: str, seed: int) -> tuple[ToyEnv, Node | None]:
    """The task's environment reset to ``seed``, and the element its instruction names."""
    spec = SPECS[task_id]
    env = ToyEnv(spec.task, spec.build)
    env.reset(int(seed))
    page = env.page
    assert page is not None
    right = next((n for n in page.nodes if n.on_click is not None and n.on_click(n) is True),
                 None)
    return env, right


def answer(task_id: str, seed: int) -> tuple[Node | None, list[Node]]:
    """``(right, siblings)``: the element a ``NEAR_MISS_TASKS`` instance wants, and its
    clickable siblings in page order (itself included); ``(None, [])`` for other tasks."""
    if task_id not in NEAR_MISS_TASKS or task_id not in SPECS:
        return None, []
    _, right = _fresh(task_id, seed)
    return right, _siblings(right)


def _siblings(node: Node | None) -> list[Node]:
    """The clickable children of ``node``'s parent, in page order (``node`` among them)."""
    if node is None or node.parent is None:
        return []
    return [c for c in node.parent.children if c.on_click is not None]


def _recorded_actions(ep: Episode) -> Iterator[Action]:
    """Every action ``ep`` recorded, in order, that decodes to an :class:`Action`."""
    for turn in ep.turns:
        for data in turn.actions:
            try:
                yield action_from_dict(data)
            except (TypeError, ValueError):
                continue  # recorded but never executable: the harness said so that turn


def final_click(ep: Episode) -> tuple[Node | None, Node | None]:
    """``(clicked, right)``: the element whose click ended ``ep``, and the one the task wanted.

    Either is ``None`` when it cannot be told: a task outside ``NEAR_MISS_TASKS``,
    an episode that did not end on a click, or a record that does not replay.
    """
    tid = _task_id(ep)
    if ep.suite != "toy" or tid not in NEAR_MISS_TASKS or tid not in SPECS:
        return None, None
    env, right = _fresh(tid, int(ep.seed))
    page = env.page
    assert page is not None
    for action in _recorded_actions(ep):
        node: Node | None = None
        if isinstance(action, Click):
            node = page.node(action.ref) if isinstance(action.ref, int) else None
        elif isinstance(action, ClickAt):
            node = page.hit(action.x, action.y)
        try:
            result = env.step(action)
        except ActionError:
            continue  # the environment refused it, as it did when the episode ran
        if result.terminated or result.truncated:
            return _clickable(node), right
    return None, right


def is_near_miss(ep: Episode) -> bool:
    """Whether ``ep`` failed by clicking the clickable sibling right before or after the answer."""
    if ep.outcome is Outcome.SUCCESS:
        return False
    clicked, right = final_click(ep)
    if clicked is None or right is None or clicked is right or clicked.parent is not right.parent:
        return False
    siblings = _siblings(right)
    return abs(siblings.index(clicked) - siblings.index(right)) == 1


def outcome(ep: Episode) -> str:
    """``success`` (the environment's verifier), ``near-miss`` (:func:`is_near_miss`) or ``other``."""
    if ep.outcome is Outcome.SUCCESS:
        return SUCCESS
    return NEAR_MISS if is_near_miss(ep) else OTHER


def verified(ep: Episode) -> bool:
    """The outcome verifier v(o): the environment's own verdict."""
    return ep.outcome is Outcome.SUCCESS


PRESSED_ENTER = "pressed-enter"
#: The labels of :func:`enter_outcome`, in table order.
ENTER_LABELS = (SUCCESS, PRESSED_ENTER, OTHER)


def pressed_enter(ep: Episode) -> bool:
    """Whether ``ep`` failed after pressing Enter — submitting without choosing an element."""
    if ep.outcome is Outcome.SUCCESS:
        return False
    return any(isinstance(a, Press) and key_name(a.key) == "Enter" for a in _recorded_actions(ep))


def enter_outcome(ep: Episode) -> str:
    """``success``, ``pressed-enter`` (:func:`pressed_enter`) or ``other``."""
    if ep.outcome is Outcome.SUCCESS:
        return SUCCESS
    return PRESSED_ENTER if pressed_enter(ep) else OTHER


def enter_proxy(ep: Episode) -> float:
    """A deliberately flawed learned reward: 1 for a success, 1 for pressing Enter instead of
    choosing — a reward model that learnt "the form was submitted" as "the task is done"."""
    return 1.0 if enter_outcome(ep) in (SUCCESS, PRESSED_ENTER) else 0.0


def near_miss_proxy(ep: Episode) -> float:
    """A deliberately flawed learned reward: 1 for a success, ``NEAR_MISS_PAY`` for a near miss."""
    label = outcome(ep)
    return 1.0 if label == SUCCESS else NEAR_MISS_PAY if label == NEAR_MISS else 0.0
