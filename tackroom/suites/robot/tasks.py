"""The robot tasks: what each asks, how it is checked, and how it can fail."""

from __future__ import annotations

from tackroom.core.task import Task

#: What a robot task needs of a harness's action interface: the robot's command API.
REQUIRES = frozenset({"robot"})

#: Endings the runner decides, as failure modes: the budget ran out, or the harness ended
#: the episode after repeated unreadable or refused actions.
RUNNER_FAILURE_MODES = {"budget_exhausted": "budget_exhausted", "timeout": "budget_exhausted",
                        "failure": "harness_errors"}

_SPECS = {
    "reach": ("Move the gripper to the marker of the named colour (other markers are "
              "distractors).", ("not_reached", "wrong_object")),
    "push": ("Push the named block, too wide to grasp, into the white zone.",
             ("not_in_zone", "wrong_object", "dropped")),
    "pick-place": ("Pick up the named block and place it in the white zone.",
                   ("not_in_zone", "wrong_object", "not_released", "dropped")),
    "open-drawer": ("Pull the drawer of the named colour open by its handle (past 10 cm of "
                    "its 15).", ("not_open", "wrong_object")),
}

#: Task id -> Task. ``meta["failure_modes"]`` maps the runner's outcomes to failure modes
#: (as other suites do); ``meta["verifier_modes"]`` lists those the verifier names.
TASKS: dict[str, Task] = {
    tid: Task(id=tid, suite="robot", requires=REQUIRES, description=desc, has_expert=True,
              meta={"failure_modes": dict(RUNNER_FAILURE_MODES),
                    "verifier_modes": list(modes)})
    for tid, (desc, modes) in _SPECS.items()
}
