"""The ``robot_screenshot`` renderer: the robot's 3D view as an image, with a short status.

The observation becomes OpenAI content parts — a text part, then the PNG the
environment's screenshotter took of the browser view
(``obs.extra["screenshot"]``, a zero-argument callable returning PNG bytes, see
:class:`~tackroom.suites.robot.browser.Screenshotter`)::

    [{"type": "text", "text": "<what the last command answered>\\nGripper open; ..."},
     {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}]

The status says what the environment wrote (``obs.text``: the last command's
result) and where the end effector is — never the objects' poses: under this
harness the model must *see* them (the ``robot_state`` renderer is the harness
that gives poses as JSON).

Options (the harness's ``[observation]`` table): ``status = false`` sends the image
alone; ``detail = "low" | "high" | "auto"`` is passed to the API as the image's
``detail``; ``max_chars`` cuts the text.
"""

from __future__ import annotations

from typing import Any

from tackroom.core.errors import InfraError
from tackroom.core.observation import Observation
from tackroom.core.registry import register
from tackroom.harness.content import RenderedParts, image_part, text_part

__all__ = ["render_robot_screenshot", "robot_status"]


def _vec(v: Any) -> str | None:
    if isinstance(v, dict):
        v = v.get("pos")
    if isinstance(v, list | tuple) and v and all(isinstance(x, int | float) for x in v):
        return "(" + ", ".join(f"{float(x):.3f}" for x in v) + ")"
    return None


def robot_status(state: dict[str, Any]) -> str:
    """One line: the end effector's position and the gripper (from the simulator state)."""
    bits = []
    ee = _vec(state.get("ee"))
    if ee:
        bits.append(f"end effector at {ee} m")
    g = state.get("gripper")
    holding = None
    if isinstance(g, dict):
        holding = g.get("holding")
        g = g.get("state", g.get("opening", g.get("width")))
    if isinstance(g, str):
        bits.append(f"gripper {g}")
    elif isinstance(g, int | float) and not isinstance(g, bool):
        bits.append(f"gripper opening {float(g):.3f} m")
    if holding:
        bits.append("holding an object")
    return ("Robot: " + "; ".join(bits) + ".") if bits else ""


@register("renderer", "robot_screenshot")
def render_robot_screenshot(obs: Observation, options: dict[str, Any]) -> RenderedParts | str:
    """The observation as a short status text and a PNG screenshot of the 3D view."""
    shot = obs.extra.get("screenshot") if obs.extra else None
    # An environment that takes no screenshots (the robot suite with screenshots = false, or
    # another suite's observation) still renders: the model is told, in words, that no
    # image came, rather than the episode ending on a renderer error.
    png = shot() if callable(shot) else None
    if png is None:
        text = (obs.text or "").strip()
        return (text + "\n" if text else "") + "[no screenshot: this environment takes none]"
    if not isinstance(png, bytes | bytearray) or not png:
        raise InfraError("the screenshotter returned no image", "renderer robot_screenshot",
                         "check the robot browser")
    parts: list[dict[str, Any]] = []
    if options.get("status", True):
        lines = []
        if obs.text:
            lines.append(obs.text.strip())
        state = obs.extra.get("state")
        if isinstance(state, dict):
            line = robot_status(state)
            if line:
                lines.append(line)
        lines.append("Camera view:")
        text = "\n".join(lines)
        limit = int(options.get("max_chars", 0) or 0)
        if limit and len(text) > limit:
            text = text[:limit] + " …"
        parts.append(text_part(text + "\n"))
    parts.append(image_part(bytes(png), "image/png", options.get("detail") or None))
    return RenderedParts(parts)
