"""Harness specs, validation, registries, parsers and sessions through the public API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tackroom.core import Click, ClickAt, Element, HarnessError, Observation, Press, Type, TypeText
from tackroom.core.policy import PolicyResponse, ToolCall
from tackroom.core.registry import get, names, register, unregister
from tackroom.harness.session import HarnessSession
from tackroom.harness.spec import list_harnesses, load_harness

SHIPPED = ["som-tools", "html-commands", "outline-coords"]


def _obs() -> Observation:
    return Observation(
        instruction="Click button ONE.",
        elements=[
            Element(1, "body"),
            Element(2, "div", id="area", parent=1, width=160, height=160),
            Element(3, "button", "ONE", parent=2, left=10, top=20, width=40, height=20),
            Element(4, "input_text", "", parent=2, left=10, top=60, width=100, height=20,
                    value="ab"),
        ],
        html='<div id="area" data-wob_ref="2"><button data-wob_ref="3">ONE</button></div>',
    )


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / f"{name}.toml"
    p.write_text(text)
    return p


def test_shipped_harnesses_differ_along_the_research_axes():
    specs = [load_harness(n) for n in SHIPPED]
    assert len({h.observation["renderer"] for h in specs}) == 3
    assert len({h.actions["interface"] for h in specs}) == 2
    assert len({h.actions["parser"] for h in specs}) == 3
    assert {h.loop["actions_per_turn"] for h in specs} == {1, 5}
    assert {h.loop["on_action_error"] for h in specs} == {"feedback", "reflect"}
    assert len({h.hash for h in specs}) == 3
    assert set(SHIPPED) <= set(list_harnesses())


def test_three_line_variant_inherits_and_changes_the_hash(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = write(tmp_path, "mine", 'extends = "som-tools"\nloop.history = 1\n')
    base, mine = load_harness("som-tools"), load_harness(str(p))
    assert mine.name == "mine"
    assert mine.loop["history"] == 1
    assert mine.actions == base.actions and mine.prompt == base.prompt
    assert mine.hash != base.hash
    # Same content under another name: same hash (identity = name + content hash).
    same = write(tmp_path, "copy", 'extends = "som-tools"\n')
    assert load_harness(str(same)).hash == base.hash


def test_harness_found_by_name_in_local_harnesses_dir(tmp_path, monkeypatch):
    (tmp_path / "harnesses").mkdir()
    write(tmp_path / "harnesses", "local-one", 'extends = "outline-coords"\nbudget.turns = 3\n')
    monkeypatch.chdir(tmp_path)
    assert load_harness("local-one").budget["turns"] == 3


@pytest.mark.parametrize("text, needles", [
    ('name = "x"\n[promt]\nsystem = "hi"\n', ["unknown slot", "promt", "allowed"]),
    ('name = "x"\n[observation]\nrenderer = "nope"\n',
     ["[observation].renderer", "nope", "element_list"]),
    ('name = "x"\n[loop]\nactions_per_turn = 0\n', ["actions_per_turn", "out of range", "1 to 50"]),
    ('name = "x"\n[loop]\non_malformed = "ignore"\n',
     ["[loop].on_malformed", "not allowed", "feedback, end"]),
    ('name = "x"\n[budget]\nturns = "ten"\n', ["[budget].turns", "is not an integer"]),
    ('name = "x"\n[loop]\nhistroy = 3\n', ["unknown key", "histroy", "allowed"]),
    ('name = "x"\n[prompt]\nfirst_turn = "{goal}"\n', ["placeholder", "{goal}", "{instruction}"]),
    ('name = "x"\n[actions\n', ["not valid TOML", "line"]),
    ('name = "x"\n[[skills]]\ntitle = "a"\n', ["skills", "title"]),
    ('extends = "no-such-harness"\n', ["no harness named", "som-tools"]),
])
def test_invalid_harness_fails_at_load_naming_file_slot_and_allowed(tmp_path, text, needles):
    p = write(tmp_path, "bad", text)
    with pytest.raises(HarnessError) as e:
        load_harness(str(p))
    line = e.value.line()
    assert str(p) in line or "bad" in line
    for n in needles:
        assert n in line, (n, line)
    assert "\n" not in line


def test_circular_extends_is_reported(tmp_path):
    write(tmp_path, "a", 'extends = "b"\n')
    write(tmp_path, "b", 'extends = "a"\n')
    with pytest.raises(HarnessError, match="circular"):
        load_harness(str(tmp_path / "a.toml"))


def test_user_renderer_registered_in_python_is_usable_from_toml(tmp_path):
    @register("renderer", "shouting")
    def shouting(obs, options):
        return obs.instruction.upper()

    try:
        p = write(tmp_path, "loud", 'extends = "som-tools"\nobservation.renderer = "shouting"\n')
        session = HarnessSession(load_harness(str(p)), "click it")
        assert session.render(_obs()) == "CLICK BUTTON ONE."
    finally:
        unregister("renderer", "shouting")


def test_renderers_show_the_same_page_three_ways():
    obs = _obs()
    el = get("renderer", "element_list")(obs, {})
    assert '[3] button "ONE"' in el and "value='ab'" in el
    assert 'data-wob_ref="3"' in get("renderer", "html")(obs, {})
    outline = get("renderer", "outline")(obs, {"coords": True, "refs": False})
    assert 'button "ONE" at (30, 30)' in outline and "[3]" not in outline
    assert "textbox" in outline
    long = get("renderer", "html")(Observation("x", html="a" * 500), {"max_chars": 100})
    assert "truncated" in long and len(long) < 200


@pytest.mark.parametrize("name", SHIPPED)
def test_expert_encoding_round_trips_through_each_harness_parser(name):
    session = HarnessSession(load_harness(name), "task")
    obs = _obs()
    for action in [Click(3), Type(4, 'say "hi"'), Press("Enter")]:
        response = session.encode([action], obs)
        assert response is not None
        parsed = session.parse(response)
        assert parsed.error is None, parsed.error
        if session.interface.name == "coordinates":
            if isinstance(action, Click):
                assert parsed.actions == [ClickAt(30.0, 30.0)]
            elif isinstance(action, Type):
                assert parsed.actions == [ClickAt(20.0, 70.0), TypeText('say "hi"')]
            else:
                assert parsed.actions == [action]
        else:
            assert parsed.actions == [action]


def test_several_actions_per_turn_and_the_rest_dropped():
    multi = HarnessSession(load_harness("html-commands"), "t")
    r = PolicyResponse(text="I will click then type.\n```\nclick 3\ntype 4 \"x y\"\n```")
    assert multi.parse(r).actions == [Click(3), Type(4, "x y")]
    single = HarnessSession(load_harness("som-tools"), "t")
    r = PolicyResponse(tool_calls=[ToolCall("a", "click", '{"ref": 3}'),
                                   ToolCall("b", "click", '{"ref": 4}')])
    parsed = single.parse(r)
    assert parsed.actions == [Click(3)] and parsed.dropped == 1


@pytest.mark.parametrize("harness, response, needle", [
    ("som-tools", PolicyResponse(text="click 3"), "no tool call"),
    ("som-tools", PolicyResponse(tool_calls=[ToolCall("a", "click", '{"ref": ')]), "not valid JSON"),
    ("som-tools", PolicyResponse(tool_calls=[ToolCall("a", "fly", "{}")]), "unknown action 'fly'"),
    ("som-tools", PolicyResponse(tool_calls=[ToolCall("a", "click", '{"ref": "x"}')]),
     "must be integer"),
    ("som-tools", PolicyResponse(tool_calls=[ToolCall("a", "click", "{}")]), "missing argument"),
    ("html-commands", PolicyResponse(text="I think I should look around."), "no command found"),
    ("html-commands", PolicyResponse(text="```\njump 3\n```"), "unknown command 'jump'"),
    ("html-commands", PolicyResponse(text='```\ntype 3 "unclosed\n```'), "cannot read command"),
    ("outline-coords", PolicyResponse(text="click at the button"), "no JSON action"),
    ("outline-coords", PolicyResponse(text='{"action": "click", "x": 1}'), "missing argument 'y'"),
    ("outline-coords", PolicyResponse(text='{"act": "click"}'), 'no "action"'),
])
def test_malformed_output_becomes_a_model_facing_parse_error(harness, response, needle):
    session = HarnessSession(load_harness(harness), "t")
    parsed = session.parse(response)
    assert parsed.actions == []
    assert needle in parsed.error
    feedback = session.feedback_for_parse_error(parsed.error)
    assert needle in feedback and "required format" in feedback


def test_tool_schemas_are_openai_function_tools():
    session = HarnessSession(load_harness("som-tools"), "t")
    tools = session.tools
    assert [t["function"]["name"] for t in tools] == ["click", "type", "press"]
    assert tools[1]["function"]["parameters"]["required"] == ["ref", "text"]
    json.dumps(tools)
    assert HarnessSession(load_harness("html-commands"), "t").tools is None


def test_history_window_keeps_the_task_and_the_last_turns():
    spec = load_harness("html-commands")  # history = 2
    s = HarnessSession(spec, "Click button ONE.")
    s.add_observation("page0", None, "")
    for i in range(5):
        s.record_reply(PolicyResponse(text=f"reply{i}"), [])
        s.add_observation(f"page{i + 1}", f"fb{i}", "")
    msgs = s.messages()
    assert msgs[0]["role"] == "system" and "click <ref>" in msgs[0]["content"]
    users = [m["content"] for m in msgs if m["role"] == "user"]
    assert len(users) == 3
    assert "Task: Click button ONE." in users[0] and "3 earlier turn(s) omitted" in users[0]
    assert "page5" in users[-1] and "fb4" in users[-1]
    assert [m["content"] for m in msgs if m["role"] == "assistant"] == ["reply3", "reply4"]


def test_tool_results_follow_each_tool_call():
    s = HarnessSession(load_harness("som-tools"), "t")
    s.add_observation("p0", None, "")
    s.record_reply(PolicyResponse(tool_calls=[ToolCall("c1", "click", '{"ref": 3}')]),
                   ["error: no element 3"])
    s.add_observation("p1", "fb", "")
    msgs = s.messages()
    assert msgs[2]["tool_calls"][0]["id"] == "c1"
    assert msgs[3] == {"role": "tool", "tool_call_id": "c1", "content": "error: no element 3"}
    assert msgs[4]["role"] == "user"


def test_budget_and_skills_reach_the_model(tmp_path):
    p = write(tmp_path, "skilled", 'extends = "som-tools"\nbudget.tokens = 1000\n'
              '[[skills]]\nname = "forms"\ntext = "Fill every field before submitting."\n')
    s = HarnessSession(load_harness(str(p)), "t")
    assert "## Skill: forms" in s.messages()[0]["content"]
    line = s.budget_line(2, 300, 42.0)
    assert "turn 3 of 24" in line and "700 tokens left" in line and "42 s left" in line
    quiet = write(tmp_path, "quiet", 'extends = "som-tools"\nbudget.state_to_model = false\n')
    assert HarnessSession(load_harness(str(quiet)), "t").budget_line(0, 0, 1.0) == ""


def test_reflection_after_action_error_only_where_the_harness_says():
    assert "reflect" in HarnessSession(load_harness("html-commands"),
                                       "t").feedback_for_action_error("x").lower()
    assert "reflect" not in HarnessSession(load_harness("som-tools"),
                                           "t").feedback_for_action_error("x").lower()


def test_all_builtin_parsers_are_registered():
    assert {"tool_calls", "commands", "json"} <= set(names("parser"))


def _text_harness(tmp_path: Path, parser: str = "commands") -> HarnessSession:
    p = write(tmp_path, "by-text", 'extends = "som-tools"\nactions.interface = "element_text"\n'
              f'actions.parser = "{parser}"\n')
    return HarnessSession(load_harness(str(p)), "task")


def test_element_text_clicks_what_the_page_shows_that_text(tmp_path):
    session = _text_harness(tmp_path)
    obs = Observation("Click Go.", elements=[
        Element(1, "body"),
        Element(2, "div", "Go", parent=1),       # a box that only holds the button
        Element(3, "button", "Go", parent=2),
        Element(4, "a", "Stop", parent=1),
        Element(5, "a", "Stop", parent=1),
    ])
    session.render(obs)  # the page the next reply acts on

    def click(text: str):
        return session.parse(PolicyResponse(text=f'```\nclick "{text}"\n```'))

    assert click("Go").actions == [Click(3)]           # the innermost of the two
    assert click("Stop").actions == [Click(4)]         # of equals, the first
    assert click("  stop ").actions == [Click(4)]      # no exact match: case and space ignored
    missing = click("Submit")
    assert missing.actions == [] and "no element shows the text 'Submit'" in missing.error
    assert session.parse(PolicyResponse(text='```\npress "Enter"\n```')).actions == [
        Press("Enter")]
    # The next page is the one the next reply is read against.
    session.render(Observation("x", elements=[Element(1, "body"), Element(7, "button", "Go",
                                                                          parent=1)]))
    assert click("Go").actions == [Click(7)]


def test_element_text_expert_writes_a_label_and_only_one_that_leads_back(tmp_path):
    obs = Observation("x", elements=[
        Element(1, "body"), Element(3, "button", "ONE", parent=1),
        Element(4, "a", "two", parent=1), Element(5, "span", "TWO", parent=1),
        Element(6, "input_text", "", parent=1), Element(7, "a", "two", parent=1)])
    for parser in ("commands", "tool_calls"):
        session = _text_harness(tmp_path, parser)
        session.render(obs)
        response = session.encode([Click(3)], obs)
        assert response is not None
        assert session.parse(response).actions == [Click(3)]
        assert session.parse(session.encode([Click(5)], obs)).actions == [Click(5)]  # exact
        assert session.encode([Click(7)], obs) is None   # "two" reaches the first "two", 4
        assert session.encode([Click(6)], obs) is None   # no text to name it by
        assert session.encode([Type(6, "hi")], obs) is None
    tools = _text_harness(tmp_path, "tool_calls").tools
    assert tools is not None
    click = next(t for t in tools if t["function"]["name"] == "click")
    assert click["function"]["parameters"]["properties"]["text"]["type"] == "string"


def test_element_text_harness_runs_click_tasks_and_leaves_typing_out(tmp_path, monkeypatch):
    import tackroom

    (tmp_path / "harnesses").mkdir()
    (tmp_path / "harnesses" / "by-text.toml").write_text(
        'extends = "html-commands"\nobservation.renderer = "element_list"\n'
        'actions.interface = "element_text"\n')
    monkeypatch.setenv("TACKROOM_HARNESS_PATH", str(tmp_path / "harnesses"))
    run = tackroom.evaluate(suite="toy", tasks=["click-button", "click-link", "enter-text"],
                            harnesses=["by-text"], policies=["expert"], seeds=range(3),
                            store=tmp_path / "r.duckdb")
    episodes = run.load_episodes()
    assert sorted({ep.task for ep in episodes}) == ["toy/click-button", "toy/click-link"]
    assert all(ep.outcome.value == "success" for ep in episodes)
    assert all(ep.turns[-1].raw_text.count('click "') == 1 for ep in episodes)
