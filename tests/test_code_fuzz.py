"""Malformed model output through every coding parser: actions or a parse error, never a raise.

The strategies build near-misses of each format (broken SEARCH/REPLACE blocks,
half-written ``edit`` commands, untagged fences, tool calls with wrong
arguments) as well as plain garbage.
"""

from __future__ import annotations

import json

from conftest import check_parse
from hypothesis import given, settings
from hypothesis import strategies as st

from tackroom.core.policy import PolicyResponse, ToolCall
from tackroom.harness.session import HarnessSession
from tackroom.harness.spec import load_harness

CODING = ["edit-blocks", "edit-blocks-oneshot", "aci-viewer", "aci-viewer-nolint", "codeact",
          "codeact-context", "json-tools", "json-tools-text"]
SESSIONS = [HarnessSession(load_harness(n), "Fix the bug.") for n in CODING]

MARKERS = ["<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE", "```", "```python", "```bash",
           "````", "~~~", "DONE", "pkg/mod.py", "Here is the fix:", "edit 3:4", "edit 0:-1",
           "edit 9999999999999999999999:1", "end_of_edit", "open", "open a b c", "goto x",
           "goto 12", "scroll_down", "create", "submit", "<finish>", "<finish/>", "</finish>",
           "goto \u00b2", "open a \u0663", "edit \u0663:4", "", " ", "\t", "    return x",
           "\x00", "\ud800", "'", '"', "\\"]
fragments = st.one_of(st.sampled_from(MARKERS), st.text(max_size=30))
texty = st.one_of(
    st.text(max_size=200),
    st.lists(fragments, max_size=14).map("\n".join),
    st.builds(lambda lang, body: f"```{lang}\n{body}\n```", st.sampled_from(
        ["", "bash", "python", "sh", "js", "py"]), st.lists(fragments, max_size=6).map("\n".join)),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["path", "content", "old_string", "new_string", "command", "action", "x"]),
        inner, max_size=4),
    max_leaves=8,
)
arguments = st.one_of(st.text(max_size=40), json_values.map(json.dumps))
tool_calls = st.lists(st.builds(
    ToolCall, st.text(max_size=4),
    st.sampled_from(["read_file", "write_file", "replace", "run_shell", "submit", "", "rm"]),
    arguments), max_size=3)


@settings(max_examples=1000, deadline=None)
@given(text=st.none() | texty, calls=tool_calls)
def test_coding_parsers_never_raise(text, calls):
    response = PolicyResponse(text=text, tool_calls=calls)
    for session in SESSIONS:
        check_parse(session, response)
