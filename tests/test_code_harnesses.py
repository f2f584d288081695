"""The four coding harness families: formats, round trips, errors the model sees, pairing."""

from __future__ import annotations

import pytest

from tackroom.core import Observation, PolicyResponse, Sampling, ToolCall
from tackroom.core.actions import Edit, EditLines, Shell, Submit, ViewFile, WriteFile
from tackroom.harness.coding import fenced_blocks, line_span, render_code
from tackroom.harness.session import HarnessSession
from tackroom.harness.spec import load_harness
from tackroom.policies.expert import ExpertPolicy
from tackroom.runner.grid import plan_grid
from tackroom.suites import get_suite

FAMILIES = ("edit-blocks", "aci-viewer", "codeact", "json-tools")
VARIANTS = {"edit-blocks-oneshot": "edit-blocks", "aci-viewer-nolint": "aci-viewer",
            "codeact-context": "codeact", "json-tools-text": "json-tools"}
FILE = "pkg/mod.py"
CONTENT = "def add(a, b):\n    return a - b\n\n\ndef one():\n    return 1\n"


def session(name: str) -> HarnessSession:
    return HarnessSession(load_harness(name), "Fix add.")


def obs(viewer: str | None = None) -> Observation:
    return Observation("Fix add.", text="ok", extra={
        "files": {FILE: CONTENT},
        "viewer": {"path": viewer, "top": 1, "window": 100} if viewer else None})


def test_families_and_variants_load_with_their_parts():
    parts = {"edit-blocks": ("edit_blocks", "edit_blocks"), "aci-viewer": ("aci", "aci_commands"),
             "codeact": ("codeact", "code_blocks"), "json-tools": ("code_tools", "tool_calls")}
    for name, (interface, parser) in parts.items():
        spec = load_harness(name)
        assert (spec.actions["interface"], spec.actions["parser"]) == (interface, parser)
        assert spec.observation["renderer"] == "code"
    for variant, parent in VARIANTS.items():
        spec = load_harness(variant)
        assert spec.extends[0].endswith(f"{parent}.toml") and spec.hash != load_harness(parent).hash
    assert load_harness("edit-blocks-oneshot").budget["turns"] == 1
    assert load_harness("aci-viewer-nolint").actions["interface"] == "aci_nolint"
    assert load_harness("json-tools-text").actions["parser"] == "json"
    assert load_harness("codeact-context").observation["options"]["files"] == "contents"


@pytest.mark.parametrize("name", [*FAMILIES, *VARIANTS])
def test_abstract_actions_round_trip_through_each_format(name):
    """What an expert writes under a harness parses back to the actions it meant."""
    s = session(name)
    edit = Edit(FILE, "    return a - b\n", "    return a + b\n")
    viewer = FILE if "aci" in name else None
    response = s.encode([edit, Submit()], obs(viewer))
    assert response is not None
    parsed = s.parse(response)
    assert parsed.error is None, parsed.error
    if "edit-blocks" in name:
        assert parsed.actions == [edit, Submit()]  # many per turn: the whole answer at once
    elif "aci" in name:
        assert parsed.actions == [EditLines("", 2, 2, "    return a + b\n", name == "aci-viewer")]
    elif "codeact" in name:
        (action,) = parsed.actions
        assert isinstance(action, Shell) and action.cmd.startswith("python3 -c ")
    else:
        assert parsed.actions == [edit]
    assert s.parse(s.encode([Submit()], obs())).actions == [Submit()]


def test_aci_opens_the_file_before_it_can_edit_by_line():
    s = session("aci-viewer")
    edit = Edit(FILE, "    return a - b\n", "    return a + b\n")
    first = s.parse(s.encode([edit], obs(viewer=None)))
    assert first.actions == [ViewFile(FILE, 2, 100)]
    assert s.encode([edit], obs(viewer=FILE)).text == \
        "```\nedit 2:2\n    return a + b\nend_of_edit\n```"


def test_formats_as_the_model_writes_them():
    blocks = session("edit-blocks").parse(PolicyResponse(text=(
        "The sign is wrong.\n\npkg/mod.py\n```python\n<<<<<<< SEARCH\n    return a - b\n"
        "=======\n    return a + b\n>>>>>>> REPLACE\n```\n\n```python\n<<<<<<< SEARCH\n"
        "    return 1\n=======\n    return 1  # one\n>>>>>>> REPLACE\n```\nDONE")))
    assert blocks.actions == [Edit(FILE, "    return a - b\n", "    return a + b\n"),
                              Edit(FILE, "    return 1\n", "    return 1  # one\n"), Submit()]
    aci = session("aci-viewer")
    assert aci.parse(PolicyResponse(text="Let me look.\n```\nopen pkg/mod.py 40\n```")).actions \
        == [ViewFile(FILE, 40, 100)]
    assert aci.parse(PolicyResponse(text="```\nscroll_down\n```")).actions == \
        [ViewFile("", 0, 100, 1)]
    assert aci.parse(PolicyResponse(text="```\ngrep -n add pkg/*.py\n```")).actions == \
        [Shell("grep -n add pkg/*.py")]
    assert aci.parse(PolicyResponse(text="```\ncreate pkg/new.py\n```")).actions == \
        [Edit("pkg/new.py", "", ""), ViewFile("pkg/new.py", 0, 100)]
    act = session("codeact").parse(PolicyResponse(
        text="Check first.\n```bash\nls -R\n```\n```python\nprint(1)\n```\n<finish></finish>"))
    assert act.error is None
    tools = session("json-tools").parse(PolicyResponse(tool_calls=[
        ToolCall("c1", "write_file", '{"path": "pkg/x.py", "content": "X = 1\\n"}')]))
    assert tools.actions == [WriteFile("pkg/x.py", "X = 1\n")]
    text_tools = session("json-tools-text").parse(PolicyResponse(
        text='{"action": "read_file", "path": "pkg/mod.py"}'))
    assert text_tools.actions == [ViewFile(FILE)]


@pytest.mark.parametrize("name, reply, says", [
    ("edit-blocks", "I would change the sign.", "no SEARCH/REPLACE block and no DONE"),
    ("edit-blocks", "pkg/mod.py\n<<<<<<< SEARCH\nx\n>>>>>>> REPLACE", "lacks its ======= line"),
    ("edit-blocks", "pkg/mod.py\n<<<<<<< SEARCH\nx\n=======\ny\n", "lacks its >>>>>>> REPLACE"),
    ("edit-blocks", "Here is the fix:\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE",
     "must be the file path alone"),
    ("edit-blocks", "<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE", "has no file path"),
    ("edit-blocks", "y\n>>>>>>> REPLACE", "without a <<<<<<< SEARCH"),
    ("aci-viewer", "open pkg/mod.py", "no command found"),
    ("aci-viewer", "```\nedit 2\nx\nend_of_edit\n```", "edit needs a line range"),
    ("aci-viewer", "```\nedit 2:2\n    return a + b\n```", "end_of_edit"),
    ("aci-viewer", "```\ngoto ten\n```", "usage: goto <line>"),
    ("aci-viewer", "```\ngoto \u00b2\n```", "usage: goto <line>"),
    ("aci-viewer", "```\nopen pkg/mod.py \u00b2\n```", "usage: open <path> [<line>]"),
    ("aci-viewer", "```\nedit \u00b2:3\nx\nend_of_edit\n```", "edit needs a line range"),
    ("aci-viewer", "```\nopen\n```", "usage: open <path> [<line>]"),
    ("aci-viewer", "```\nsubmit\nls\n```", "one command per reply"),
    ("codeact", "```\nls\n```", "tag each block ```bash or ```python"),
    ("codeact", "```bash\n\n```", "block is empty"),
    ("codeact", "All done, I think.", "no code block found"),
    ("json-tools", "read pkg/mod.py", "no tool call found"),
])
def test_malformed_replies_get_a_clear_parse_error(name, reply, says):
    s = session(name)
    parsed = s.parse(PolicyResponse(text=reply))
    assert parsed.error is not None and says in parsed.error, parsed.error
    assert "could not be read as an action" in s.feedback_for_parse_error(parsed.error)


def test_wrong_tool_arguments_name_the_missing_argument():
    parsed = session("json-tools").parse(PolicyResponse(tool_calls=[
        ToolCall("c1", "replace", '{"path": "pkg/mod.py", "old_string": "a"}')]))
    assert "replace: missing argument 'new_string'" in parsed.error


def test_renderer_shows_result_files_and_viewer_status():
    o = obs(viewer=FILE)
    assert render_code(o, {}) == "ok"
    assert render_code(o, {"files": "tree"}) == f"ok\n\nFiles in /task:\n{FILE}"
    shown = render_code(o, {"files": "contents", "status": True})
    assert f"{FILE}\n```python\n{CONTENT}```" in shown
    assert shown.endswith("(Open file: /task/pkg/mod.py) (Current directory: /task)")
    tricky = Observation("x", extra={"files": {"a.md": "```\ncode\n```\n"}})
    assert "````\n```\ncode\n```\n````" in render_code(tricky, {"files": "contents"})


def test_helpers_fenced_blocks_and_line_span():
    blocks, outside = fenced_blocks("a\n```bash\nls\n```\nb\n````python\nx = '```'\n````\n"
                                    "```\nunclosed")
    assert blocks == [("bash", "ls"), ("python", "x = '```'"), ("", "unclosed")]
    assert outside == "a\nb"
    assert line_span(CONTENT, "a - b", "a + b") == (2, 2, "    return a - b\n",
                                                    "    return a + b\n")
    assert line_span(CONTENT, "return", "x") is None  # ambiguous


def test_code_and_web_harnesses_do_not_pair_with_each_others_tasks():
    code_tasks = get_suite("code").tasks()
    toy_tasks = get_suite("toy").tasks()
    coding = [load_harness(n) for n in FAMILIES]
    web = [load_harness(n) for n in ("som-tools", "html-commands", "outline-coords")]
    plan = plan_grid(code_tasks + toy_tasks, coding + web, [ExpertPolicy()], [0], Sampling())
    assert len(plan.cells) == len(code_tasks) * 4 + len(toy_tasks) * 3
    assert all((t.suite == "code") == (h.name in FAMILIES) for t, h in
               ((c.task, c.harness) for c in plan.cells))
    assert len(plan.inexpressible) == len(code_tasks) * 3 + len(toy_tasks) * 4
