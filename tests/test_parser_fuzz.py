"""Garbage model output never raises: every parser returns actions or a model-facing error."""

from __future__ import annotations

from conftest import check_parse
from hypothesis import given, settings
from hypothesis import strategies as st

from tackroom.core.policy import PolicyResponse, ToolCall
from tackroom.harness.session import HarnessSession
from tackroom.harness.spec import list_harnesses, load_harness

# tackroom's own loop harnesses: an agent CLI's output is parsed by the CLI.
SESSIONS = [HarnessSession(h, "task") for h in map(load_harness, sorted(list_harnesses()))
            if h.kind == "loop"]

json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12,
)
texty = st.one_of(
    st.text(max_size=300),
    st.builds(lambda a, b: f"```\n{a}\n```{b}", st.text(max_size=80), st.text(max_size=20)),
    st.builds(lambda v: __import__("json").dumps(v), json_like),
    st.sampled_from(['{"action": "click"', "click", "type 3 \"", "```\npress\n```", "[{}]",
                     '{"action": "type", "x": 1e999, "y": -0, "text": null}', "{" * 500]),
)
tool_calls = st.lists(st.builds(ToolCall, st.text(max_size=5),
                                st.sampled_from(["click", "type", "press", "", "evil"]),
                                texty), max_size=3)


# Each example goes through every loop harness's parser (19 sessions): 500 examples are 9,500
# parses; most of the time is hypothesis drawing examples, not parsing.
@settings(max_examples=500, deadline=None)
@given(text=st.none() | texty, calls=tool_calls)
def test_no_output_makes_a_parser_raise(text, calls):
    response = PolicyResponse(text=text, tool_calls=calls)
    for session in SESSIONS:
        check_parse(session, response)


# -- the shell harnesses (terminal suite): fences, submit lines, keystroke tool calls ----------
TERMINAL = [HarnessSession(load_harness(n), "task") for n in ("terminal-bash", "terminal-keys")]
_fence = st.sampled_from(["```", "````", "``` ", "```bash", "```sh", "```python", "```console",
                          "~~~", "`", "```bash extra"])
_shell_text = st.text(max_size=60) | st.sampled_from(
    ["submit", " SUBMIT. ", "`submit`", "ls\x00", "\ud800", "echo ```", "a" * 200, "", "\n"])
fenced = st.builds(lambda parts: "\n".join(parts),
                   st.lists(st.one_of(_fence, _shell_text), max_size=8))
keys_args = st.one_of(
    texty,
    st.builds(lambda d: __import__("json").dumps(d), st.dictionaries(
        st.sampled_from(["keystrokes", "wait_s", "command", "x"]),
        st.one_of(_shell_text, st.floats(allow_nan=True, allow_infinity=True),
                  st.integers(), st.none(), st.lists(st.integers(), max_size=2)),
        max_size=3)),
)
keys_calls = st.lists(st.builds(ToolCall, st.text(max_size=3),
                                st.sampled_from(["send_keys", "submit", "bash", "", "C-c"]),
                                keys_args), max_size=3)


@settings(max_examples=400, deadline=None)
@given(text=st.none() | fenced | texty, calls=keys_calls)
def test_shell_parsers_never_raise(text, calls):
    response = PolicyResponse(text=text, tool_calls=calls)
    for session in TERMINAL:
        for action in check_parse(session, response).actions:
            value = getattr(action, "cmd", None) or getattr(action, "text", "")
            assert "\x00" not in value
            value.encode("utf-8")
