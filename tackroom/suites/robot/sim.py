"""The robot simulator: a gantry arm with a parallel gripper on a table, in MuJoCo.

The robot is a *cartesian* (gantry) arm: three sliding joints ``x``, ``y``, ``z`` carry a
hand, a hinge ``wrist`` turns it about the vertical, and two sliding fingers close on
what lies between them. Every joint is driven by a position actuator through real
physics (MuJoCo steps, contacts and friction): ``move_ee`` moves the joint targets along a
straight line at a bounded speed and steps until the hand arrives or is blocked. A
cartesian arm makes inverse kinematics exact (the end effector is where the three slides
put it), so that a scripted controller can be reliable; the hand and fingers are
gravity-compensated, as a real gantry's motors hold their load. Grasps are friction
grasps: nothing welds a block to the fingers.

The scene is built per task and seed (:func:`build_mjcf`): a table with coloured blocks,
a target zone, coloured target markers or a two-drawer cabinet. Positions, colours and
distractors come from the seed, so a run is reproducible and a wrong-object outcome (the
red block in the zone instead of the blue) can happen and is detected by :meth:`verify`.

World frame: metres, z up, the table top at z = 0; a block that leaves the table falls to
the floor at z = -0.75.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

import mujoco
import numpy as np

#: Tasks the simulator builds scenes for (ids without the ``robot/`` prefix).
TASK_IDS = ("reach", "push", "pick-place", "open-drawer")
#: Named colours (rgba) objects are drawn from.
COLORS: dict[str, tuple[float, float, float, float]] = {
    "red": (0.85, 0.15, 0.15, 1.0),
    "blue": (0.15, 0.35, 0.90, 1.0),
    "green": (0.15, 0.70, 0.25, 1.0),
    "yellow": (0.95, 0.80, 0.10, 1.0),
    "purple": (0.60, 0.25, 0.75, 1.0),
    "orange": (1.00, 0.50, 0.10, 1.0),
}
#: Where ``move_ee`` may send the end effector (the point between the fingertips).
WORKSPACE = {"x": (-0.45, 0.45), "y": (-0.35, 0.35), "z": (0.015, 0.40)}
#: Joints ``move_joint`` drives: name -> (low, high, unit).
JOINTS = {"x": (-0.45, 0.45, "m"), "y": (-0.35, 0.35, "m"), "z": (0.015, 0.40, "m"),
          "wrist": (-math.pi, math.pi, "rad")}
#: Largest opening between the fingers (m); each finger travels half of it.
MAX_OPENING = 0.09
#: Physics steps per second of simulated time (timestep 2 ms).
TIMESTEP = 0.002
#: The end effector's speed along a ``move_ee`` path (m/s) and the wrist's (rad/s).
EE_SPEED = 0.4
WRIST_SPEED = 3.0
#: ``move_ee`` and ``move_joint`` stop after this much simulated time past the path (s).
SETTLE_S = 1.0
#: ``move_ee`` counts a target reached within this distance (m).
REACH_TOL = 0.004
#: The most physics steps one ``step`` command may ask for.
MAX_STEP_N = 10_000
#: A drawer counts as open past this much travel (m) of its 0.15 m.
DRAWER_OPEN = 0.10
DRAWER_TRAVEL = 0.15
#: ``reach`` succeeds within this distance (m) of the marker.
REACH_SUCCESS = 0.03
OPS = ("move_ee", "move_joint", "gripper", "step", "camera", "done")
DEFAULT_CAMERA = {"pos": [0.95, -1.05, 0.85], "target": [0.0, 0.0, 0.05], "fovy": 45.0}

_GEOM_TYPES = {int(mujoco.mjtGeom.mjGEOM_PLANE): "plane", int(mujoco.mjtGeom.mjGEOM_SPHERE): "sphere",
               int(mujoco.mjtGeom.mjGEOM_CAPSULE): "capsule",
               int(mujoco.mjtGeom.mjGEOM_CYLINDER): "cylinder", int(mujoco.mjtGeom.mjGEOM_BOX): "box"}


class CommandError(ValueError):
    """A command the robot cannot take; ``str()`` is the model-facing message."""


# -- scenes --------------------------------------------------------------------------------
@dataclass
class Scene:
    """What a seed chose: objects to place, the goal, and the instruction."""

    task: str
    instruction: str
    target: str  # the object the instruction names
    blocks: dict[str, dict[str, Any]] = field(default_factory=dict)   # name -> {color, pos, half}
    markers: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {color, pos}
    zone: dict[str, Any] | None = None   # {pos: [x, y], half: [hx, hy], color}
    cabinet: dict[str, Any] | None = None  # {x, front_y, drawers: {name: {color, dx}}}


def _task_id(task_id: str) -> str:
    tid = task_id.split("/", 1)[1] if isinstance(task_id, str) and task_id.startswith(
        "robot/") else task_id
    if not isinstance(tid, str) or tid not in TASK_IDS:
        raise CommandError(f"unknown robot task {_short(task_id)}; tasks: "
                           + ", ".join(f"robot/{t}" for t in TASK_IDS))
    return tid


def _far(p: tuple[float, float], others: list[tuple[float, float]], d: float) -> bool:
    return all(math.dist(p, q) >= d for q in others)


def _seg_dist(p: tuple[float, float], a: tuple[float, float], b: tuple[float, float]) -> float:
    ax, ay = a
    bx, by = b
    dx, dy = bx - ax, by - ay
    t = max(0.0, min(1.0, ((p[0] - ax) * dx + (p[1] - ay) * dy) / (dx * dx + dy * dy or 1.0)))
    return math.dist(p, (ax + t * dx, ay + t * dy))


def _place(rng: random.Random, taken: list[tuple[float, float]], d: float,
           xr: tuple[float, float], yr: tuple[float, float], ok: Any = None) -> tuple[float, float]:
    for _ in range(500):
        p = (round(rng.uniform(*xr), 3), round(rng.uniform(*yr), 3))
        if _far(p, taken, d) and (ok is None or ok(p)):
            taken.append(p)
            return p
    raise RuntimeError("could not place an object")  # pragma: no cover - ranges leave room


def plan_scene(task_id: str, seed: int) -> Scene:
    """The objects, goal and instruction of ``task_id`` for ``seed`` (deterministic)."""
    tid = _task_id(task_id)
    rng = random.Random(f"robot/{tid}/{seed}")
    colors = list(COLORS)
    rng.shuffle(colors)
    taken: list[tuple[float, float]] = []
    if tid == "reach":
        n = rng.randint(2, 3)
        markers = {}
        for c in colors[:n]:
            x, y = _place(rng, taken, 0.15, (-0.35, 0.35), (-0.28, 0.28))
            markers[f"{c}_marker"] = {"color": c, "pos": [x, y, round(rng.uniform(0.06, 0.3), 3)]}
        target = f"{colors[0]}_marker"
        return Scene(tid, f"Move the gripper to the {colors[0]} marker, then say you are done.",
                     target, markers=markers)
    if tid == "pick-place":
        zone_xy = _place(rng, taken, 0.0, (-0.3, 0.3), (-0.22, 0.22))
        zone = {"pos": list(zone_xy), "half": [0.06, 0.06], "color": "white"}
        n = rng.randint(2, 4)
        blocks = {}
        for c in colors[:n]:
            x, y = _place(rng, taken, 0.13, (-0.38, 0.38), (-0.28, 0.28))
            blocks[f"{c}_block"] = {"color": c, "pos": [x, y], "half": [0.02, 0.02, 0.02],
                                    "yaw": round(rng.uniform(-0.6, 0.6), 3)}
        target = f"{colors[0]}_block"
        return Scene(tid, f"Pick up the {colors[0]} block and place it in the white zone, "
                     "then say you are done.", target, blocks=blocks, zone=zone)
    if tid == "push":
        zone_xy = _place(rng, taken, 0.0, (-0.25, 0.25), (-0.18, 0.18))
        zone = {"pos": list(zone_xy), "half": [0.08, 0.08], "color": "white"}
        # The target block starts 0.18-0.28 m from the zone; distractors keep off its path.
        for _ in range(500):
            ang = rng.uniform(-math.pi, math.pi)
            r = rng.uniform(0.18, 0.28)
            b = (round(zone_xy[0] + r * math.cos(ang), 3), round(zone_xy[1] + r * math.sin(ang), 3))
            # Room behind the block for the hand to start the push from.
            back = (b[0] + 0.14 * math.cos(ang), b[1] + 0.14 * math.sin(ang))
            if abs(b[0]) <= 0.33 and abs(b[1]) <= 0.25 and abs(back[0]) <= 0.43 \
                    and abs(back[1]) <= 0.33:
                break
        taken.append(b)
        blocks = {f"{colors[0]}_block": {"color": colors[0], "pos": list(b),
                                         "half": [0.05, 0.05, 0.03], "yaw": 0.0}}
        for c in colors[1:rng.randint(2, 3)]:
            x, y = _place(rng, taken, 0.2, (-0.38, 0.38), (-0.28, 0.28),
                          ok=lambda p: _seg_dist(p, back, zone_xy) > 0.2)
            blocks[f"{c}_block"] = {"color": c, "pos": [x, y], "half": [0.05, 0.05, 0.03],
                                    "yaw": 0.0}
        return Scene(tid, f"Push the {colors[0]} block into the white zone (it is too wide to "
                     "grasp), then say you are done.", f"{colors[0]}_block", blocks=blocks,
                     zone=zone)
    # open-drawer: a cabinet with two drawers at the back of the table, opening towards -y.
    x = round(rng.uniform(-0.2, 0.2), 3)
    drawers = {f"{colors[0]}_drawer": {"color": colors[0], "dx": -0.1},
               f"{colors[1]}_drawer": {"color": colors[1], "dx": 0.1}}
    if rng.random() < 0.5:  # which side the target is on
        drawers = {f"{colors[0]}_drawer": {"color": colors[0], "dx": 0.1},
                   f"{colors[1]}_drawer": {"color": colors[1], "dx": -0.1}}
    cabinet = {"x": x, "front_y": 0.18, "drawers": drawers}
    blocks = {}
    for c in colors[2:2 + rng.randint(1, 2)]:
        bx, by = _place(rng, taken, 0.13, (-0.38, 0.38), (-0.28, -0.08))
        blocks[f"{c}_block"] = {"color": c, "pos": [bx, by], "half": [0.02, 0.02, 0.02],
                                "yaw": 0.0}
    return Scene(tid, f"Open the {colors[0]} drawer (pull it out by its handle), then say you "
                 "are done.", f"{colors[0]}_drawer", blocks=blocks, cabinet=cabinet)


def _rgba(color: str, alpha: float = 1.0) -> str:
    r, g, b, _ = COLORS.get(color, (0.95, 0.95, 0.95, 1.0))
    return f"{r} {g} {b} {alpha}"


def build_mjcf(scene: Scene) -> str:
    """The MJCF model of ``scene``: table, gantry arm, and the scene's objects."""
    objs: list[str] = []
    for name, b in scene.blocks.items():
        hx, hy, hz = b["half"]
        yaw = b.get("yaw", 0.0)
        mass = 0.05 if hx < 0.03 else 0.25
        objs.append(
            f'<body name="{name}" pos="{b["pos"][0]} {b["pos"][1]} {hz + 0.0005}" '
            f'euler="0 0 {yaw}"><freejoint name="{name}"/>'
            f'<geom name="{name}" type="box" size="{hx} {hy} {hz}" mass="{mass}" '
            f'rgba="{_rgba(b["color"])}" friction="1.0 0.01 0.001"/></body>')
    for name, m in scene.markers.items():
        x, y, z = m["pos"]
        objs.append(f'<geom name="{name}" type="sphere" size="0.015" pos="{x} {y} {z}" '
                    f'rgba="{_rgba(m["color"], 0.85)}" contype="0" conaffinity="0"/>')
    if scene.zone is not None:
        (zx, zy), (hx, hy) = scene.zone["pos"], scene.zone["half"]
        objs.append(f'<geom name="zone" type="box" size="{hx} {hy} 0.001" pos="{zx} {zy} 0.001" '
                    f'rgba="0.97 0.97 0.97 1" contype="0" conaffinity="0"/>')
    if scene.cabinet is not None:
        objs.append(_cabinet_xml(scene.cabinet))
    lo, hi = MAX_OPENING / 2, WORKSPACE
    return f"""<mujoco model="tackroom-robot">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="{TIMESTEP}" integrator="implicitfast" cone="elliptic" impratio="10"/>
  <default>
    <geom solref="0.005 1" solimp="0.95 0.99 0.001"/>
  </default>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1" pos="0 0 -0.75" rgba="0.55 0.57 0.6 1"/>
    <geom name="table" type="box" size="0.5 0.4 0.025" pos="0 0 -0.025" rgba="0.72 0.56 0.4 1"
          friction="0.6 0.005 0.0001"/>
    <geom name="rail_left" type="box" size="0.5 0.015 0.015" pos="0 -0.42 0.62"
          rgba="0.35 0.35 0.4 1" contype="0" conaffinity="0"/>
    <geom name="rail_right" type="box" size="0.5 0.015 0.015" pos="0 0.42 0.62"
          rgba="0.35 0.35 0.4 1" contype="0" conaffinity="0"/>
    <body name="bridge" pos="0 0 0.62">
      <joint name="x" type="slide" axis="1 0 0" range="{hi['x'][0]} {hi['x'][1]}" damping="5"/>
      <inertial pos="0 0 0" mass="2" diaginertia="0.1 0.1 0.1"/>
      <geom name="bridge" type="box" size="0.02 0.44 0.02" rgba="0.3 0.3 0.35 1"
            contype="0" conaffinity="0"/>
      <body name="carriage" pos="0 0 0">
        <joint name="y" type="slide" axis="0 1 0" range="{hi['y'][0]} {hi['y'][1]}" damping="5"/>
        <inertial pos="0 0 0" mass="1" diaginertia="0.01 0.01 0.01"/>
        <geom name="carriage" type="box" size="0.03 0.03 0.03" rgba="0.25 0.25 0.3 1"
              contype="0" conaffinity="0"/>
        <body name="hand" pos="0 0 -0.62" gravcomp="1">
          <joint name="z" type="slide" axis="0 0 1" range="{hi['z'][0]} {hi['z'][1]}" damping="5"/>
          <joint name="wrist" type="hinge" axis="0 0 1" range="-3.1416 3.1416" damping="0.5"/>
          <inertial pos="0 0 0.07" mass="0.5" diaginertia="0.002 0.002 0.002"/>
          <site name="ee" pos="0 0 0" size="0.005" rgba="1 0 0 0"/>
          <geom name="column" type="capsule" fromto="0 0 0.11 0 0 0.75" size="0.012"
                rgba="0.5 0.5 0.55 1" contype="0" conaffinity="0"/>
          <geom name="palm" type="box" size="0.055 0.02 0.012" pos="0 0 0.08"
                rgba="0.2 0.2 0.22 1"/>
          <body name="finger_left" pos="0 0 0" gravcomp="1">
            <joint name="finger_left" type="slide" axis="-1 0 0" range="0 {lo}" damping="2"/>
            <inertial pos="-0.006 0 0.03" mass="0.05" diaginertia="1e-5 1e-5 1e-5"/>
            <geom name="finger_left" type="box" size="0.006 0.01 0.033" pos="-0.006 0 0.023"
                  rgba="0.15 0.15 0.15 1" friction="1.5 0.02 0.002"/>
          </body>
          <body name="finger_right" pos="0 0 0" gravcomp="1">
            <joint name="finger_right" type="slide" axis="1 0 0" range="0 {lo}" damping="2"/>
            <inertial pos="0.006 0 0.03" mass="0.05" diaginertia="1e-5 1e-5 1e-5"/>
            <geom name="finger_right" type="box" size="0.006 0.01 0.033" pos="0.006 0 0.023"
                  rgba="0.15 0.15 0.15 1" friction="1.5 0.02 0.002"/>
          </body>
        </body>
      </body>
    </body>
    {chr(10).join('    ' + o for o in objs)}
  </worldbody>
  <actuator>
    <position name="x" joint="x" kp="3000" dampratio="1" forcerange="-200 200"/>
    <position name="y" joint="y" kp="3000" dampratio="1" forcerange="-200 200"/>
    <position name="z" joint="z" kp="3000" dampratio="1" forcerange="-200 200"/>
    <position name="wrist" joint="wrist" kp="20" dampratio="1" forcerange="-5 5"/>
    <position name="finger_left" joint="finger_left" kp="400" dampratio="1" forcerange="-15 15"/>
    <position name="finger_right" joint="finger_right" kp="400" dampratio="1" forcerange="-15 15"/>
  </actuator>
</mujoco>"""


def _cabinet_xml(cab: dict[str, Any]) -> str:
    """A fixed cabinet (two bays) whose drawers slide out towards -y by up to 0.15 m."""
    x, fy = cab["x"], cab["front_y"]
    depth, h = 0.2, 0.12
    cy = fy + depth / 2
    wood = "0.6 0.6 0.62 1"
    parts = [
        f'<geom name="cabinet_top" type="box" size="0.21 {depth / 2} 0.005" pos="{x} {cy} {h}" rgba="{wood}"/>',
        f'<geom name="cabinet_back" type="box" size="0.21 0.005 {h / 2}" pos="{x} {fy + depth} {h / 2}" rgba="{wood}"/>',
    ]
    for i, sx in enumerate((-0.205, 0.0, 0.205)):
        parts.append(f'<geom name="cabinet_wall{i}" type="box" size="0.005 {depth / 2} {h / 2}" '
                     f'pos="{x + sx} {cy} {h / 2}" rgba="{wood}"/>')
    for name, d in cab["drawers"].items():
        dx = x + d["dx"]
        rgba = _rgba(d["color"])
        parts.append(
            f'<body name="{name}" pos="{dx} {fy} 0">'
            f'<joint name="{name}" type="slide" axis="0 -1 0" range="0 {DRAWER_TRAVEL}" damping="3" '
            f'frictionloss="0.3"/>'
            f'<geom name="{name}_front" type="box" size="0.092 0.006 0.05" pos="0 0.006 0.055" rgba="{rgba}" mass="0.2"/>'
            f'<geom name="{name}_bottom" type="box" size="0.09 0.09 0.004" pos="0 0.1 0.009" rgba="{wood}" mass="0.1"/>'
            f'<geom name="{name}_side0" type="box" size="0.004 0.09 0.03" pos="-0.086 0.1 0.04" rgba="{wood}" mass="0.05"/>'
            f'<geom name="{name}_side1" type="box" size="0.004 0.09 0.03" pos="0.086 0.1 0.04" rgba="{wood}" mass="0.05"/>'
            f'<geom name="{name}_post0" type="box" size="0.005 0.024 0.005" pos="-0.06 -0.024 0.06" rgba="0.2 0.2 0.2 1" mass="0.01"/>'
            f'<geom name="{name}_post1" type="box" size="0.005 0.024 0.005" pos="0.06 -0.024 0.06" rgba="0.2 0.2 0.2 1" mass="0.01"/>'
            f'<geom name="{name}_handle" type="capsule" fromto="-0.065 -0.05 0.06 0.065 -0.05 0.06" size="0.006" '
            f'rgba="0.2 0.2 0.2 1" mass="0.01"/>'
            f'</body>')
    return "\n    ".join(parts)


# -- the simulator ---------------------------------------------------------------------------
def _finite(v: Any) -> float | None:
    """``v`` as a float if it is a finite number (not a bool), else ``None``."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:  # an integer too large for a float
        return None
    return f if math.isfinite(f) else None


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _num(cmd: dict[str, Any], key: str, op: str) -> float:
    if key not in cmd:
        raise CommandError(f"{op}: missing {key!r}")
    f = _finite(cmd[key])
    if f is None:
        raise CommandError(f"{op}: {key!r} must be a finite number, got {_short(cmd[key])}")
    return f


def _vec3(v: Any, what: str) -> list[float]:
    vals = [_finite(a) for a in v] if isinstance(v, (list, tuple)) and len(v) == 3 else None
    if vals is None or any(a is None for a in vals):
        raise CommandError(f"{what} must be a list of three finite numbers [x, y, z], "
                           f"got {_short(v)}")
    return vals  # type: ignore[return-value]


def _r(v: Any, nd: int = 4) -> list[float]:
    return [round(float(a), nd) for a in v]


class RobotSim:
    """One MuJoCo scene of a robot task; :meth:`reset` builds it, :meth:`command` acts."""

    def __init__(self) -> None:
        self.task: str | None = None
        self.seed: int | None = None
        self.scene_plan: Scene | None = None
        self.model: mujoco.MjModel | None = None
        self.data: mujoco.MjData | None = None
        self.version = 0
        self.done = False
        self.camera: dict[str, Any] = dict(DEFAULT_CAMERA)
        self.commands = 0  # commands executed since reset

    # -- lifecycle -------------------------------------------------------------------------
    def reset(self, task_id: str, seed: int) -> None:
        """Build the scene of ``task_id`` (``reach`` or ``robot/reach``) for ``seed``."""
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise CommandError(f"the seed must be an integer, got {_short(seed)}")
        plan = plan_scene(task_id, seed)
        model = mujoco.MjModel.from_xml_string(build_mjcf(plan))
        data = mujoco.MjData(model)
        self.model, self.data, self.scene_plan = model, data, plan
        self.task, self.seed = f"robot/{plan.task}", seed
        self._ids()
        # Start: hand above the table centre, fingers open.
        home = {"x": 0.0, "y": -0.2, "z": 0.25, "wrist": 0.0}
        for j, v in home.items():
            data.qpos[model.jnt_qposadr[self._jid[j]]] = v
            data.ctrl[self._aid[j]] = v
        for f in ("finger_left", "finger_right"):
            data.qpos[model.jnt_qposadr[self._jid[f]]] = MAX_OPENING / 2
            data.ctrl[self._aid[f]] = MAX_OPENING / 2
        mujoco.mj_forward(model, data)
        self._run(200)  # let blocks settle on the table
        data.time = 0.0
        self.done = False
        self.commands = 0
        self.camera = dict(DEFAULT_CAMERA)
        self.version += 1

    def _ids(self) -> None:
        m = self.model
        assert m is not None
        self._jid = {n: mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, n)
                     for n in ("x", "y", "z", "wrist", "finger_left", "finger_right")}
        self._aid = {n: mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, n)
                     for n in ("x", "y", "z", "wrist", "finger_left", "finger_right")}
        self._ee = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, "ee")
        self._fingers = {mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, n)
                         for n in ("finger_left", "finger_right")}
        plan = self.scene_plan
        assert plan is not None
        self._block_geom = {mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, n): n
                            for n in plan.blocks}

    def _need(self) -> tuple[mujoco.MjModel, mujoco.MjData]:
        if self.model is None or self.data is None:
            raise CommandError("the simulator has no scene yet; reset it with a task first")
        return self.model, self.data

    def _q(self, joint: str) -> float:
        m, d = self._need()
        return float(d.qpos[m.jnt_qposadr[self._jid[joint]]])

    def _qd(self, joint: str) -> float:
        m, d = self._need()
        return float(d.qvel[m.jnt_dofadr[self._jid[joint]]])

    def _run(self, n: int) -> None:
        m, d = self._need()
        for _ in range(n):
            mujoco.mj_step(m, d)

    def step(self, n: int = 1) -> None:
        """``n`` raw physics steps (2 ms each) with the current actuator targets."""
        self._run(int(n))
        self.version += 1

    # -- commands --------------------------------------------------------------------------
    def command(self, cmd: dict) -> dict:
        """Execute one API command (see the module doc of :mod:`tackroom.suites.robot`)."""
        if not isinstance(cmd, dict):
            raise CommandError(f'a command is a JSON object such as {{"op": "move_ee", "x": 0.1, '
                               f'"y": 0.0, "z": 0.1}}, got {type(cmd).__name__}')
        op = cmd.get("op")
        if op not in OPS:
            raise CommandError(f"unknown command op {_short(op)}; commands: {', '.join(OPS)}")
        self._need()
        if self.done and op != "camera":
            raise CommandError("the episode is over (done was sent); no more commands")
        allowed = {"move_ee": {"x", "y", "z", "pos"}, "move_joint": {"joint", "angle"},
                   "gripper": {"action"}, "step": {"n"}, "camera": {"pos", "target", "fovy"},
                   "done": set()}[op]
        extra = sorted(repr(k) for k in set(cmd) - allowed - {"op"})
        if extra:
            raise CommandError(f"{op}: unexpected field(s) {', '.join(extra)[:200]}; "
                               f"it takes: {', '.join(sorted(allowed)) or 'nothing'}")
        result = getattr(self, "_cmd_" + op)(cmd)
        if op != "camera":
            self.commands += 1
        self.version += 1
        return {"ok": True, **result}

    def _cmd_move_ee(self, cmd: dict) -> dict:
        if "pos" in cmd:
            if {"x", "y", "z"} & set(cmd):
                raise CommandError("move_ee: give either pos [x, y, z] or x, y and z, not both")
            x, y, z = _vec3(cmd["pos"], "move_ee: pos")
        else:
            x, y, z = (_num(cmd, k, "move_ee") for k in ("x", "y", "z"))
        for k, v in zip("xyz", (x, y, z), strict=True):
            lo, hi = WORKSPACE[k]
            if not lo - 1e-9 <= v <= hi + 1e-9:
                box = ", ".join(f"{a} {w[0]:g}..{w[1]:g}" for a, w in WORKSPACE.items())
                raise CommandError(f"move_ee: {k} = {v:g} is outside the reachable workspace "
                                   f"({box} m)")
        goal = np.array([x, y, z])
        return self._move({"x": x, "y": y, "z": z}, goal)

    def _cmd_move_joint(self, cmd: dict) -> dict:
        joint = cmd.get("joint")
        if joint not in JOINTS:
            raise CommandError(f"move_joint: unknown joint {_short(joint)}; joints: "
                               + ", ".join(f"{j} ({u})" for j, (_, _, u) in JOINTS.items()))
        angle = _num(cmd, "angle", "move_joint")
        lo, hi, unit = JOINTS[joint]
        if not lo - 1e-9 <= angle <= hi + 1e-9:
            raise CommandError(f"move_joint: {joint} = {angle:g} {unit} is out of range "
                               f"({lo:g} to {hi:g} {unit})")
        targets = {j: self._q(j) for j in ("x", "y", "z")}
        if joint == "wrist":
            return self._move({"wrist": angle}, None)
        targets[joint] = angle
        return self._move({joint: angle}, np.array([targets["x"], targets["y"], targets["z"]]))

    def _move(self, targets: dict[str, float], goal: np.ndarray | None) -> dict:
        """Move the joint targets linearly to ``targets`` at bounded speed, then settle."""
        m, d = self._need()
        start = {j: float(d.ctrl[self._aid[j]]) for j in targets}
        dist = max((abs(targets[j] - start[j]) / (WRIST_SPEED if j == "wrist" else EE_SPEED))
                   for j in targets)
        n_path = max(1, int(math.ceil(dist / TIMESTEP)))
        for i in range(1, n_path + 1):
            f = i / n_path
            for j, v in targets.items():
                d.ctrl[self._aid[j]] = start[j] + f * (v - start[j])
            mujoco.mj_step(m, d)
        steps = n_path
        settle = int(SETTLE_S / TIMESTEP)
        for _ in range(settle):
            err = max(abs(self._q(j) - v) for j, v in targets.items())
            speed = max(abs(self._qd(j)) for j in targets)
            if err < REACH_TOL / 2 and speed < 0.01:
                break
            mujoco.mj_step(m, d)
            steps += 1
        ee = d.site_xpos[self._ee].copy()
        out: dict[str, Any] = {"ee": _r(ee), "steps": steps}
        if goal is not None:
            miss = float(np.linalg.norm(ee - goal))
            out["reached"] = miss < REACH_TOL
            if not out["reached"]:
                # Stop where it is blocked, rather than keep pushing at the actuators' limit.
                for j in targets:
                    d.ctrl[self._aid[j]] = self._q(j)
                out["note"] = (f"stopped {miss * 100:.1f} cm short of the target; something "
                               "is in the way")
        else:
            out["reached"] = abs(self._q("wrist") - targets["wrist"]) < 0.02
        return out

    def _cmd_gripper(self, cmd: dict) -> dict:
        action = cmd.get("action")
        if action not in ("open", "close"):
            raise CommandError(f'gripper: action must be "open" or "close", got {_short(action)}')
        m, d = self._need()
        target = MAX_OPENING / 2 if action == "open" else 0.0
        for f in ("finger_left", "finger_right"):
            d.ctrl[self._aid[f]] = target
        steps = 0
        for i in range(int(0.6 / TIMESTEP)):
            mujoco.mj_step(m, d)
            steps += 1
            if i > 25 and abs(self._qd("finger_left")) < 1e-3 and abs(self._qd("finger_right")) < 1e-3:
                break
        return {"opening": round(self.opening(), 4), "holding": self.holding(), "steps": steps}

    def _cmd_step(self, cmd: dict) -> dict:
        n = cmd.get("n", 1)
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_STEP_N:
            raise CommandError(f"step: n must be an integer from 1 to {MAX_STEP_N}, "
                               f"got {_short(n)}")
        self._run(n)
        return {"steps": n, "time": round(float(self._need()[1].time), 4)}

    def _cmd_camera(self, cmd: dict) -> dict:
        cam = dict(self.camera)
        if "pos" in cmd:
            cam["pos"] = _vec3(cmd["pos"], "camera: pos")
        if "target" in cmd:
            cam["target"] = _vec3(cmd["target"], "camera: target")
        if "fovy" in cmd:
            f = _num(cmd, "fovy", "camera")
            if not 10 <= f <= 120:
                raise CommandError(f"camera: fovy must be between 10 and 120 degrees, got {f:g}")
            cam["fovy"] = f
        if math.dist(cam["pos"], cam["target"]) < 1e-3:
            raise CommandError("camera: pos and target must differ")
        self.camera = cam
        return {"camera": cam}

    def _cmd_done(self, cmd: dict) -> dict:
        self.done = True
        return {"done": True}

    # -- reading ---------------------------------------------------------------------------
    def opening(self) -> float:
        """The distance between the fingers (m)."""
        return self._q("finger_left") + self._q("finger_right")

    def holding(self) -> str | None:
        """The block both fingers touch, if any (a grasp, lifted or not)."""
        m, d = self._need()
        touch: dict[str, set[int]] = {}
        for i in range(d.ncon):
            c = d.contact[i]
            g1, g2 = int(c.geom1), int(c.geom2)
            for a, b in ((g1, g2), (g2, g1)):
                if a in self._fingers and b in self._block_geom:
                    touch.setdefault(self._block_geom[b], set()).add(a)
        for name, fingers in touch.items():
            if len(fingers) == 2:
                return name
        return None

    def state(self) -> dict:
        """The simulator state as JSON-able data (see the module doc)."""
        m, d = self._need()
        plan = self.scene_plan
        assert plan is not None
        objects: dict[str, Any] = {}
        for name, b in plan.blocks.items():
            body = d.body(name)
            objects[name] = {"pos": _r(body.xpos), "quat": _r(body.xquat), "kind": "block",
                             "color": b["color"], "size": _r([2 * h for h in b["half"]], 3)}
        for name, mk in plan.markers.items():
            objects[name] = {"pos": _r(mk["pos"]), "quat": [1.0, 0.0, 0.0, 0.0], "kind": "marker",
                             "color": mk["color"], "size": [0.03, 0.03, 0.03]}
        if plan.cabinet is not None:
            for name, dr in plan.cabinet["drawers"].items():
                hid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, f"{name}_handle")
                objects[name] = {"pos": _r(d.geom_xpos[hid]), "quat": [1.0, 0.0, 0.0, 0.0],
                                 "kind": "drawer", "color": dr["color"],
                                 "size": [0.13, 0.012, 0.012],
                                 "opening": round(self._drawer(name), 4),
                                 "pull_direction": [0.0, -1.0, 0.0]}
        zones = {}
        if plan.zone is not None:
            zones["white_zone"] = {"pos": _r([*plan.zone["pos"], 0.0]),
                                   "size": _r([2 * h for h in plan.zone["half"]], 3),
                                   "color": "white"}
        return {
            "task": self.task,
            "time": round(float(d.time), 4),
            "version": self.version,
            "ee": {"pos": _r(d.site_xpos[self._ee])},
            "gripper": {"opening": round(self.opening(), 4), "holding": self.holding()},
            "joints": [{"name": j, "value": round(self._q(j), 4), "unit": JOINTS[j][2]}
                       for j in JOINTS],
            "objects": objects,
            "zones": zones,
        }

    def _drawer(self, name: str) -> float:
        m, d = self._need()
        jid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, name)
        return float(d.qpos[m.jnt_qposadr[jid]])

    def scene(self) -> dict:
        """The geometry a renderer draws: every visible geom's shape and current pose."""
        m, d = self._need()
        geoms = []
        quat = np.zeros(4)
        for i in range(m.ngeom):
            t = _GEOM_TYPES.get(int(m.geom_type[i]))
            if t is None or m.geom_rgba[i][3] <= 0:
                continue
            mujoco.mju_mat2Quat(quat, d.geom_xmat[i])
            name = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_GEOM, i) or f"geom{i}"
            geoms.append({"name": name, "type": t, "size": _r(m.geom_size[i]),
                          "rgba": _r(m.geom_rgba[i], 3), "pos": _r(d.geom_xpos[i]),
                          "quat": _r(quat)})
        return {"version": self.version, "geoms": geoms, "camera": dict(self.camera)}

    # -- verdict ---------------------------------------------------------------------------
    def _in_zone(self, name: str) -> bool:
        plan = self.scene_plan
        assert plan is not None and plan.zone is not None
        p = self._need()[1].body(name).xpos
        (zx, zy), (hx, hy) = plan.zone["pos"], plan.zone["half"]
        return abs(p[0] - zx) <= hx and abs(p[1] - zy) <= hy and -0.01 < p[2] < 0.08

    def verify(self) -> tuple[bool, str | None]:
        """``(success, failure_mode)`` of the task on the current state."""
        m, d = self._need()
        plan = self.scene_plan
        assert plan is not None
        if plan.task == "reach":
            ee = d.site_xpos[self._ee]
            dists = {n: math.dist(ee, mk["pos"]) for n, mk in plan.markers.items()}
            if dists[plan.target] <= REACH_SUCCESS:
                return True, None
            if any(v <= REACH_SUCCESS for v in dists.values()):
                return False, "wrong_object"
            return False, "not_reached"
        if plan.task == "open-drawer":
            if self._drawer(plan.target) >= DRAWER_OPEN:
                return True, None
            if any(self._drawer(n) >= DRAWER_OPEN for n in plan.cabinet["drawers"]):  # type: ignore[index]
                return False, "wrong_object"
            return False, "not_open"
        target = d.body(plan.target).xpos
        if target[2] < -0.05:
            return False, "dropped"
        if self._in_zone(plan.target):
            if self.holding() == plan.target:
                return False, "not_released"
            return True, None
        if any(self._in_zone(n) for n in plan.blocks if n != plan.target):
            return False, "wrong_object"
        return False, "not_in_zone"

    @property
    def instruction(self) -> str:
        """The task's instruction for this seed."""
        if self.scene_plan is None:
            raise CommandError("the simulator has no scene yet; reset it with a task first")
        return self.scene_plan.instruction


__all__ = ["COLORS", "CommandError", "JOINTS", "OPS", "RobotSim", "Scene", "TASK_IDS",
           "WORKSPACE", "build_mjcf", "plan_scene"]
