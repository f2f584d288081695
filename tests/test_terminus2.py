"""terminus-2, Terminal-Bench's reference agent, reproduced as the harness ``terminus-2``.

The published package (``terminal-bench``, Python >= 3.12) is not installed: its wheel is
downloaded once into the shared cache and read. Its prompt template must equal ours byte
for byte; its JSON parser (pure Python, loaded by path) must read a table of replies as
ours does; the texts its loop sends (confirmation, parse errors, warnings, the output
limit, the terminal's new output) are taken from its source and compared with what our
session sends. Without PyPI those comparisons are skipped, saying so; the table's own
expectations and the loop's rules are checked either way.
"""

from __future__ import annotations

import ast
import importlib.util
import random
import socket
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

import tackroom
from tackroom.app.harnesses import describe_harness
from tackroom.core.actions import Press, Shell, Submit
from tackroom.core.cache import cache_home, locked
from tackroom.core.observation import Observation
from tackroom.core.policy import PolicyResponse, Sampling
from tackroom.harness.interfaces import Call
from tackroom.harness.session import HarnessSession
from tackroom.harness.shell import TypeKeys
from tackroom.harness.spec import load_harness
from tackroom.harness.terminus2 import (
    OUTPUT_CUT,
    REFERENCE,
    TEMPLATES,
    Terminus2Session,
    limit_output,
    read_reply,
    template,
)
from tackroom.sandbox import sandbox_available

PACKAGE = "terminal_bench/agents"


# -- the published package ---------------------------------------------------------------------
def _pypi_reachable() -> bool:
    try:
        with socket.create_connection(("pypi.org", 443), timeout=5):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def published() -> Path:
    """The extracted ``terminal-bench`` wheel (its ``terminal_bench/`` tree), cached once."""
    name, version = REFERENCE.split("==")
    root = cache_home() / "reference" / f"{name}-{version}"
    done = root / ".complete"
    with locked(cache_home() / "reference" / f".{name}.lock"):
        if not done.exists():
            if not _pypi_reachable():
                pytest.skip(f"PyPI is unreachable: cannot fetch {REFERENCE} to compare with")
            wheels = root / "wheel"
            wheels.mkdir(parents=True, exist_ok=True)
            p = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                                "--only-binary=:all:", "--python-version", "3.13", REFERENCE,
                                "-d", str(wheels)], capture_output=True, text=True, timeout=300)
            assert p.returncode == 0, p.stderr[-2000:]
            (wheel,) = wheels.glob("*.whl")
            with zipfile.ZipFile(wheel) as z:
                for member in z.namelist():
                    if member.startswith("terminal_bench/"):
                        z.extract(member, root)
            done.write_text(wheel.name)
    return root / PACKAGE


def _their_parser(published: Path) -> Any:
    """terminus-2's ``TerminusJSONPlainParser``, imported from the wheel by path."""
    path = published / "terminus_2" / "terminus_json_plain_parser.py"
    spec = importlib.util.spec_from_file_location("published_terminus_json_parser", path)
    assert spec is not None and spec.loader is not None
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TerminusJSONPlainParser()


def _function(source: str, name: str, namespace: dict[str, Any] | None = None) -> Any:
    """The function ``name`` of ``source`` (a method: called with a stand-in ``self``)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            node.decorator_list = []
            ns = dict(namespace or {})
            exec(compile(ast.Module(body=[node], type_ignores=[]), name, "exec"), ns)
            return ns[name]
    raise AssertionError(f"{name} is not in the published source")


def _assigned(source: str, function: str, target: str, contains: str) -> ast.expr:
    """The expression assigned to ``target`` inside ``function`` whose text has ``contains``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            for a in ast.walk(node):
                if (isinstance(a, ast.Assign) and isinstance(a.targets[0], ast.Name)
                        and a.targets[0].id == target and contains in ast.unparse(a.value)):
                    return a.value
    raise AssertionError(f"no {target} = …{contains}… in {function}")


class Theirs:
    """terminus-2's own texts, from its source: the loop's prompts and the tmux session's
    incremental output, run on a stand-in ``self``."""

    def __init__(self, published: Path) -> None:
        agent = (published / "terminus_2" / "terminus_2.py").read_text()
        tmux = (published.parent / "terminal" / "tmux_session.py")
        self.agent = agent
        self.parser = _their_parser(published)
        self.template = (published / "prompt-templates" / "terminus-json-plain.txt").read_text()
        me = SimpleNamespace(_parser_name="json")
        for name in ("_limit_output_length", "_get_completion_confirmation_message",
                     "_get_error_response_type"):
            setattr(me, name, _function(agent, name).__get__(me))
        self.me = me
        self.limit = me._limit_output_length
        self.confirm = me._get_completion_confirmation_message
        self._errors = _assigned(agent, "_run_agent_loop", "prompt", "parsing errors")
        self._warnings = _assigned(agent, "_run_agent_loop", "prompt", "had warnings")
        self.output_cut = ast.literal_eval(_assigned(agent, "_query_llm", "error_msg", "ERROR"))
        self._cut_warnings = _assigned(agent, "_query_llm", "warnings_text", "truncated")
        self.tmux_source = tmux.read_text() if tmux.exists() else None

    def feedback(self, reply: str) -> str:
        """``_handle_llm_interaction``'s feedback for a reply, from their parser's result."""
        r = self.parser.parse_response(reply)
        if r.error:
            return f"ERROR: {r.error}" + (f"\nWARNINGS: {r.warning}" if r.warning else "")
        return f"WARNINGS: {r.warning}" if r.warning else ""

    def errors_prompt(self, feedback: str) -> str:
        return eval(compile(ast.Expression(self._errors), "loop", "eval"),
                    {"self": self.me, "feedback": feedback})

    def warnings_prompt(self, feedback: str, terminal_output: str) -> str:
        return eval(compile(ast.Expression(self._warnings), "loop", "eval"),
                    {"self": self.me, "feedback": feedback, "terminal_output": terminal_output})

    def cut_prompt(self, truncated: str) -> str:
        r = self.parser.parse_response(truncated)
        if not r.warning:
            return self.output_cut
        return self.output_cut + eval(compile(ast.Expression(self._cut_warnings), "q", "eval"),
                                      {"parse_result": r})

    def screens(self) -> Any:
        """Their ``get_incremental_output``, fed the screens we pass it."""
        assert self.tmux_source is not None, "the wheel has no terminal/tmux_session.py"
        shown: dict[str, Any] = {"buffer": ""}
        me = SimpleNamespace(_previous_buffer=None)
        me.capture_pane = lambda capture_entire=False: shown["buffer"]
        for name in ("get_incremental_output", "_find_new_content", "_get_visible_screen"):
            setattr(me, name, _function(self.tmux_source, name).__get__(me))

        def incremental(screen: str) -> str:
            shown["buffer"] = screen
            return me.get_incremental_output()
        return incremental


@pytest.fixture(scope="module")
def theirs(published: Path) -> Theirs:
    return Theirs(published)


def test_the_prompt_templates_are_the_published_files_byte_for_byte(published):
    ours = sorted(TEMPLATES.glob("*.txt"))
    assert [p.name for p in ours] == ["terminus-json-plain.txt"]
    for p in ours:
        assert p.read_bytes() == (published / "prompt-templates" / p.name).read_bytes(), p.name
    # The harness shows it as what the model reads first (`tackroom harness show`).
    assert describe_harness("terminus-2").system_prompt == template()


# -- the parser: a table of replies ------------------------------------------------------------
OK = '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": 0.1}]}'
#: (reply, error it is refused with or None, commands, task complete, a warning it gets)
CASES: list[tuple[str, str | None, int, bool, str]] = [
    (OK, None, 1, False, ""),
    ("Sure!\n" + OK + "\nDone.", None, 1, False, "Extra text detected before JSON object"),
    ('{"analysis": "a", "plan": "p", "commands": [], "task_complete": true}', None, 0, True, ""),
    ('{"analysis": "a", "plan": "p", "commands": [], "task_complete": "Yes"}', None, 0, True,
     ""),
    ('{"analysis": "a", "plan": "p", "commands": [], "task_complete": "no"}', None, 0, False,
     ""),
    ('{"analysis": "a", "plan": "p", "commands": [], "task_complete": 1}', None, 0, True,
     "Field 'task_complete' should be a boolean or string"),
    ('{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls"}, {"keystrokes": "pwd\\n",'
     ' "duration": "x", "why": 1}]}', None, 2, False, "Command 1: Missing duration field"),
    ('{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls"}, {"keystrokes": "x"}]}',
     None, 2, False, "Command 1 should end with newline when followed by another command"),
    ('{"plan": "p", "analysis": "a", "commands": []}', None, 0, False,
     "Fields appear in wrong order. Found: plan → analysis → commands, expected: analysis → "
     "plan → commands"),
    ('{"analysis": 1, "plan": [], "commands": []}', None, 0, False,
     "Field 'analysis' should be a string"),
    (OK[:-1], None, 1, False, "AUTO-CORRECTED: Fixed incomplete JSON by adding missing closing"),
    ('x {"analysis": "a", "plan": "p", "commands": [],} y {"analysis": "b", "plan": "q", '
     '"commands": []}', None, 0, False, "AUTO-CORRECTED: Extracted JSON from mixed content"),
    ('{"analysis": "a", "plan": "p", "commands": [3], "task_complete": true}', None, 0, True,
     "Command 1 must be an object"),
    ('{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "", "duration": 10}]}', None,
     1, False, ""),
    ("no JSON at all", "No valid JSON found in response", 0, False,
     "No valid JSON object found"),
    ("", "No valid JSON found in response", 0, False, ""),
    ('{"analysis": "a", "plan": "p"}', "Missing required fields: commands", 0, False, ""),
    ('{"analysis": "a"}', "Missing required fields: plan, commands", 0, False, ""),
    ('{"analysis": "a", "plan": "p", "commands": {}}', "Field 'commands' must be an array", 0,
     False, ""),
    ('{"analysis": "a", "plan": "p", "commands": [3]}', "Command 1 must be an object", 0, False,
     ""),
    ('{"analysis": "a", "plan": "p", "commands": [{"duration": 1}]}',
     "Command 1 missing required 'keystrokes' field", 0, False, ""),
    ('{"analysis": "a", "plan": "p", "commands": [{"keystrokes": 5}]}',
     "Command 1 'keystrokes' must be a string", 0, False, ""),
    ('{"analysis": "a" "plan": "p", "commands": []}', "Invalid JSON: Expecting ',' delimiter",
     0, False, ""),
    ("[1, 2]", "No valid JSON found in response", 0, False, ""),
    ('{"a": 1} {"analysis": "a", "plan": "p", "commands": []}',
     "Missing required fields: analysis, plan, commands", 0, False, "after JSON object"),
]


@pytest.mark.parametrize("reply,error,n,complete,warning", CASES)
def test_replies_are_accepted_and_refused_as_terminus_2_does(reply, error, n, complete,
                                                             warning):
    r = read_reply(reply)
    if error is None:
        assert r.error == "" and len(r.commands) == n and r.complete is complete, r
    else:
        assert r.error.startswith(error) and not r.commands and not r.complete, r
    assert warning in r.warning


def _variants(seed: int = 0) -> list[str]:
    """The table's replies, cut short, with characters dropped and doubled."""
    rnd = random.Random(seed)
    out = []
    for reply, *_ in CASES:
        for _ in range(6):
            s = list(reply)
            if s and rnd.random() < 0.5:
                s = s[: rnd.randrange(len(s))]
            for _ in range(rnd.randrange(3)):
                if s:
                    i = rnd.randrange(len(s))
                    s[i:i + 1] = rnd.choice(([], [s[i], s[i]], ['"'], ["{"], ["}"], ["\\"]))
            out.append("".join(s))
    return out


#: Pieces random replies are made of.
_TOKENS = ['{', '}', '"analysis"', '"plan"', '"commands"', '"task_complete"', '"duration"',
           '"keystrokes"', ':', ',', '[', ']', '"a"', '"ls\\n"', 'true', '"yes"', '1', '0.5',
           'null', '\\', ' ', '\n', 'x', '"', '{"keystrokes": "pwd\\n", "duration": 1}']


def _random_replies(n: int, seed: int = 1) -> list[str]:
    rnd = random.Random(seed)
    return ["".join(rnd.choice(_TOKENS) for _ in range(rnd.randrange(1, 40))) for _ in range(n)]


def test_any_reply_is_actions_or_an_error_the_model_reads():
    """Garbage, bytes and JSON fragments: the session never raises, and what it answers is
    one of terminus-2's prompts."""
    rnd = random.Random(2)
    junk = [bytes(rnd.randrange(256) for _ in range(rnd.randrange(80))).decode(
        errors="replace") for _ in range(100)] + _random_replies(300)
    loop = Loop()
    for text in junk:
        actions = loop.reply(text, "/task$ ")
        assert all(isinstance(a, (TypeKeys, Press, Submit)) for a in actions), actions
        assert loop.last.startswith(("Previous response had", "New Terminal Output:",
                                     "Current Terminal Screen:", "Current terminal state:")), (
            text, loop.last[:200])


def test_their_parser_reads_every_reply_as_ours_does(theirs):
    """The table, ~150 mangled variants of it and 500 random replies: commands, completion,
    error and warnings equal to the published parser's (unknown fields: one per reply, as
    theirs lists a set)."""
    replies = [c[0] for c in CASES] + _variants() + _random_replies(500)
    for reply in replies:
        t = theirs.parser.parse_response(reply)
        o = read_reply(reply)
        assert ([(c.keystrokes, c.duration) for c in t.commands], bool(t.is_task_complete),
                t.error, t.warning) == (o.commands, o.complete, o.error, o.warning), reply


# -- the conversation --------------------------------------------------------------------------
def _obs(screen: str) -> Observation:
    return Observation(instruction="Write hi to out.txt.", text=screen)


class Loop:
    """Our session driven the way the runner drives it (parse, act, record, observe)."""

    def __init__(self) -> None:
        self.session = HarnessSession.open(load_harness("terminus-2"), "Write hi to out.txt.")
        assert isinstance(self.session, Terminus2Session)
        self.session.add_observation(self.session.render(_obs("/task$ ")), None, "")

    def reply(self, text: str, screen: str, finish_reason: str = "stop") -> list[Any]:
        response = PolicyResponse(text=text, finish_reason=finish_reason)
        parsed = self.session.parse(response)
        feedback = (self.session.feedback_for_parse_error(parsed.error)
                    if parsed.error is not None else None)
        self.session.record_reply(response, [])
        self.session.add_observation(self.session.render(_obs(screen)), feedback, "")
        return parsed.actions

    @property
    def last(self) -> str:
        return self.session.messages()[-1]["content"]


def _reply(*commands: str, complete: bool = False, extra: str = "") -> str:
    cmds = ", ".join(f'{{"keystrokes": "{c}", "duration": 0.1}}' for c in commands)
    flag = ', "task_complete": true' if complete else ""
    return f'{extra}{{"analysis": "a", "plan": "p", "commands": [{cmds}]{flag}}}'


def test_task_complete_must_be_said_twice_in_a_row():
    loop = Loop()
    msgs = loop.session.messages()
    assert [m["role"] for m in msgs] == ["user"]  # no system message
    assert msgs[0]["content"].startswith("You are an AI assistant tasked with solving")
    assert "Task Description:\nWrite hi to out.txt.\n" in msgs[0]["content"]
    assert msgs[0]["content"].endswith("Current terminal state:\nCurrent Terminal Screen:\n"
                                       "/task$ \n")
    acts = loop.reply(_reply("echo hi > out.txt\\n", complete=True), "/task$ echo hi > out.txt")
    assert acts == [TypeKeys("echo hi > out.txt\n", 0.1)]  # its commands run, no submit yet
    assert loop.last.startswith("Current terminal state:\nNew Terminal Output:\n")
    assert "Are you sure you want to mark the task as complete?" in loop.last
    assert loop.reply("oops", "-") == []  # a parse error between them does not reset it
    assert loop.last.startswith("Previous response had parsing errors:\nERROR: No valid JSON")
    assert loop.reply(_reply(complete=True), "-") == [Submit()]
    # A reply that is not complete resets it: the next complete asks again.
    loop = Loop()
    loop.reply(_reply(complete=True), "/task$ ")
    loop.reply(_reply("ls\\n"), "/task$ ls")
    assert loop.reply(_reply(complete=True), "/task$ ls") == []
    assert "Are you sure" in loop.last
    assert [m["role"] for m in loop.session.messages()] == ["user", "assistant"] * 3 + ["user"]


def test_keystrokes_become_typed_keys_key_presses_and_waits():
    iface = load_harness("terminus-2").interface
    assert iface.to_actions(Call("keystrokes", {"keystrokes": "C-c", "duration": 5})) == [
        Press("C-c")]
    assert iface.to_actions(Call("keystrokes", {"keystrokes": "Up"})) == [TypeKeys("\x1b[A", 1.0)]
    assert iface.to_actions(Call("keystrokes", {"keystrokes": "C-x", "duration": 99})) == [
        TypeKeys("\x18", 60.0)]
    assert iface.to_actions(Call("keystrokes", {"keystrokes": "", "duration": -3})) == [
        TypeKeys("", 0.0)]
    # The terminal suite's tasks are expressible; the code suite's (edits) are not.
    h = load_harness("terminus-2")
    assert h.can_express(frozenset({"shell", "submit"}))
    assert not h.can_express(frozenset({"edit", "submit"}))
    # The expert's script goes through the parser like a model's reply.
    session = HarnessSession.open(h, "t")
    response = session.encode([Shell("echo a\necho b"), Submit()],
                              Observation("t", extra={"command_timeout_s": 10.0}))
    assert response is not None
    reply = read_reply(response.text)
    assert reply.error == "" and reply.warning == "" and reply.complete
    assert reply.commands[0][0].startswith("bash <<'") and reply.commands[0][1] == 10.0


def test_every_text_the_loop_sends_is_theirs(theirs):
    """First prompt, parse errors, warnings, confirmation, the output limit and the terminal's
    new output, each built by terminus-2's own code on the same screens."""
    screens = theirs.screens()
    loop = Loop()
    assert loop.last == theirs.template.format(
        instruction="Write hi to out.txt.", terminal_state=theirs.limit(screens("/task$ ")))

    bad = 'Here: {"analysis": "a", "plan": "p", "commands": [{"keystrokes": 5}]}'
    loop.reply(bad, "ignored: nothing ran")
    assert loop.last == theirs.errors_prompt(theirs.feedback(bad))

    warned = _reply("ls", "pwd\\n", extra="Sure. ")
    loop.reply(warned, "/task$ ls\na.txt\n/task$ pwd\n/task\n/task$ ")
    out = theirs.limit(screens("/task$ ls\na.txt\n/task$ pwd\n/task\n/task$ "))
    assert loop.last == theirs.warnings_prompt(theirs.feedback(warned), out)

    long = "/task$ cat big\n" + "é" * 12_000 + "\n/task$ "  # past the 10 000-byte limit
    loop.reply(_reply("cat big\\n"), long)
    assert loop.last == theirs.limit(theirs.limit(screens(long)))
    assert limit_output("x" * 10_001) == theirs.limit("x" * 10_001)

    loop.reply(_reply("clear\\n", complete=True), "/task$ ")
    assert loop.last == theirs.confirm(theirs.limit(screens("/task$ ")))

    cut = '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls"}, {"keys'
    loop.reply(cut, "ignored", finish_reason="length")
    assert loop.last == theirs.cut_prompt(cut) and loop.last.startswith(OUTPUT_CUT)
    # Theirs records the cut reply and its error, then asks with the error again.
    assert [(m["role"], m["content"]) for m in loop.session.messages()[-3:]] == [
        ("assistant", cut), ("user", loop.last), ("user", loop.last)]
    assert theirs.output_cut == OUTPUT_CUT


# -- episodes ----------------------------------------------------------------------------------
SIX_TASKS = ["csv-column-sum", "git-tag-release", "count-errors", "json-merge",
             "fix-python-bug", "symlink-latest"]


@pytest.mark.slow
@pytest.mark.skipif(not sandbox_available(), reason="bubblewrap cannot run here")
def test_expert_solves_six_terminal_tasks_confirming_completion(tmp_path):
    """The harness applies to the terminal suite only (code tasks need edits): its expert
    writes the task's solution as keystrokes, says task_complete, and confirms it."""
    run = tackroom.evaluate("terminal", tasks=SIX_TASKS, harnesses=["terminus-2"],
                            policies=["expert"], seeds=[0], store=tmp_path / "r.duckdb")
    episodes = run.load_episodes()
    assert sorted(ep.task for ep in episodes) == sorted(f"terminal/{t}" for t in SIX_TASKS)
    for ep in episodes:
        assert ep.outcome.value == "success", (ep.task, ep.error, ep.meta.get("verifier"))
        first, second = ep.turns
        assert [m["role"] for m in first.messages] == ["user"]
        assert first.messages[0]["content"].startswith(template().split("{{")[0])
        assert second.messages[-1]["content"].startswith("Current terminal state:\n")
        assert [a["kind"] for a in second.actions] == ["submit"]
        assert first.parse_error is None and second.parse_error is None


@pytest.mark.skipif(not sandbox_available(), reason="bubblewrap cannot run here")
def test_a_tiny_model_through_tackroom_serve_completes_episodes(tmp_path, tiny_chat_dir,
                                                              monkeypatch):
    """`tackroom serve` behind the harness: every turn has token ids and log-probs, the
    random model's replies are answered in terminus-2's words, and nothing is infra_error."""
    from tackroom.serve import ServerThread

    monkeypatch.setenv("TACKROOM_HARNESS_PATH", str(tmp_path))
    (tmp_path / "terminus-2-short.toml").write_text(
        'extends = "terminus-2"\n[budget]\nturns = 3\nwall_seconds = 300\n')
    with ServerThread(tiny_chat_dir) as srv:
        run = tackroom.evaluate("terminal", tasks=["csv-column-sum", "count-errors"],
                                harnesses=["terminus-2-short"],
                                policies=[f"openai:{srv.model_name}"], base_url=srv.base_url,
                                seeds=[0], sampling=Sampling(max_tokens=8, logprobs=True),
                                store=tmp_path / "r.duckdb")
    episodes = run.load_episodes()
    assert len(episodes) == 2
    for ep in episodes:
        assert ep.outcome.value in ("failure", "budget_exhausted", "success"), ep.error
        assert len(ep.turns) == 3
        for turn in ep.turns:
            assert turn.token_ids and len(turn.token_ids) == len(turn.logprobs) <= 8
            assert turn.messages[0]["role"] == "user"
        # Eight tokens never make a whole reply: each is answered as terminus-2 would.
        later = [t.messages[-1]["content"] for t in ep.turns[1:]]
        assert all(m.startswith(("Previous response had parsing errors:", "ERROR!! NONE"))
                   for m in later), later
