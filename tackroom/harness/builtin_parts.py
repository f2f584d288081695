"""The built-in harness parts: every renderer, action interface and output parser tackroom ships.

The modules that implement the parts (``renderers``, ``interfaces``,
``parsers``, ``shell``, ``coding``, ``robot_vision``) only define them; this table names them,
and :mod:`tackroom.harness.registry` starts its tables from it. So the
dependencies run one way: implementations → this table → registry → specs,
sessions and user code.
"""

from __future__ import annotations

from tackroom.harness import coding, interfaces, parsers, renderers, robot, robot_vision, shell

#: ``name -> fn(observation, options) -> str``
RENDERERS = {
    # web pages
    "element_list": renderers.render_element_list,
    "html": renderers.render_html,
    "outline": renderers.render_outline,
    # repositories, terminals
    "code": coding.render_code,
    "terminal": shell.render_terminal,
    # the robot's 3D view (images)
    "robot_screenshot": robot_vision.render_robot_screenshot,
    # the robot simulator's state as JSON
    "robot_state": robot.render_robot_state,
}

#: Action interfaces, each registered under its ``name``.
INTERFACES: tuple[interfaces.ActionInterface, ...] = (
    interfaces.ElementRefInterface(),
    interfaces.ElementTextInterface(),
    interfaces.CoordinateInterface(),
    coding.EditBlockInterface(),
    coding.ACIInterface("aci", window=100, lint=True),
    coding.ACIInterface("aci_nolint", window=100, lint=False),
    coding.CodeActInterface(),
    coding.CodeToolsInterface(),
    shell.ShellCommandInterface(),
    shell.TerminalKeysInterface(),
    robot.RobotCommandInterface(),
    robot.RobotControllerInterface(),
)

#: Output parsers, each registered under its ``name``.
PARSERS: tuple[parsers.OutputParser, ...] = (
    parsers.ToolCallParser(),
    parsers.CommandParser(),
    parsers.JsonActionParser(),
    coding.EditBlockParser(),
    coding.ACIParser(),
    coding.CodeBlockParser(),
    shell.BashBlockParser(),
    shell.TerminalToolParser(),
    robot.RobotScriptParser(),
)
