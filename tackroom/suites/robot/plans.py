"""Scripted plans: the command sequence that solves a robot task, computed from its state.

A plan reads only what every harness can show (:meth:`RobotSim.state`: object poses, the
zone, drawers with their pull direction) and the instruction's target, so the same plan
is what the command harnesses' expert posts one command at a time and what the
code-controller harness's expert writes as a script.
"""

from __future__ import annotations

import math
from typing import Any

#: Travel height: clear of blocks and the cabinet (m).
HIGH = 0.18


def target_of(state: dict[str, Any], instruction: str) -> str:
    """The object the instruction names by colour (``"the blue block"`` -> ``blue_block``)."""
    words = instruction.lower().replace(",", " ").replace(".", " ").split()
    for i, w in enumerate(words[:-1]):
        name = f"{w}_{words[i + 1]}"
        if name in state["objects"]:
            return name
    raise ValueError(f"no object of the scene is named in {instruction!r}")


def _mv(x: float, y: float, z: float) -> dict[str, Any]:
    return {"op": "move_ee", "x": round(x, 4), "y": round(y, 4), "z": round(z, 4)}


def plan(task: str, state: dict[str, Any], instruction: str) -> list[dict[str, Any]]:
    """Commands that solve ``task`` (``robot/reach`` …) from ``state``, ending with ``done``."""
    tid = task.split("/", 1)[-1]
    obj = state["objects"][target_of(state, instruction)]
    x, y, z = obj["pos"]
    if tid == "reach":
        return [_mv(x, y, z), {"op": "done"}]
    if tid == "pick-place":
        zx, zy, _ = state["zones"]["white_zone"]["pos"]
        return [{"op": "gripper", "action": "open"}, _mv(x, y, HIGH), _mv(x, y, 0.02),
                {"op": "gripper", "action": "close"}, _mv(x, y, HIGH), _mv(zx, zy, HIGH),
                _mv(zx, zy, 0.045), {"op": "gripper", "action": "open"}, _mv(zx, zy, HIGH),
                {"op": "done"}]
    if tid == "push":
        zx, zy, _ = state["zones"]["white_zone"]["pos"]
        dx, dy = zx - x, zy - y
        n = math.hypot(dx, dy) or 1.0
        ux, uy = dx / n, dy / n
        half = obj["size"][0] / 2
        # Start behind the block (away from the zone), low; push through to the zone centre.
        sx, sy = x - ux * (half * 1.5 + 0.04), y - uy * (half * 1.5 + 0.04)
        ex, ey = zx - ux * (half + 0.01), zy - uy * (half + 0.01)
        return [{"op": "gripper", "action": "close"}, _mv(sx, sy, HIGH), _mv(sx, sy, 0.03),
                _mv(ex, ey, 0.03), _mv(ex, ey, HIGH), {"op": "done"}]
    if tid == "open-drawer":
        px, py, _ = obj["pull_direction"]
        # Into the gap between the handle and the drawer front, then pull.
        gx, gy = x - px * 0.03, y - py * 0.03
        pull = 0.14
        return [{"op": "gripper", "action": "close"}, _mv(gx, gy, HIGH), _mv(gx, gy, 0.045),
                _mv(gx + px * pull, gy + py * pull, 0.045), _mv(gx + px * pull, gy + py * pull, HIGH),
                {"op": "done"}]
    raise ValueError(f"no plan for task {task!r}")
