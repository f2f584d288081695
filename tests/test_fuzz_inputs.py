"""Fuzzing what users type and write: harness files and the command line.

Hypothesis writes harness TOML files (structurally random tables of every TOML type,
wrong types for known keys, numbers out of any range, unknown slots, ``extends`` to
missing files, to the file itself and in cycles, control characters), and random
bytes, and loads each through :func:`load_harness` and ``tackroom harness validate``.
It then builds command lines for ``eval`` (always ``--dry-run``), ``seal``, ``runs``,
``show``, ``export``, ``report``, ``harness …`` and ``tasks``, with odd values, on a
private record store holding one small run.

The properties: the API returns a harness or raises a :class:`TackroomError` whose
line names where and what; the CLI exits 0 or 2 (2 for a user's mistake: click's
usage errors too), never shows a traceback, and says what went wrong in one line;
the recorded run keeps every episode and a dry run records nothing. (``main`` has
other statuses, none of them for a mistake in the arguments: 1 for click's ``Abort``
(end of input at a prompt), 130 for Ctrl-C, 143 for SIGTERM.) The CLI runs in this process (as ``tackroom``
does: :func:`tackroom.cli.main`, output captured by typer's runner), so an exception
that would be a traceback fails the test with its own traceback.

Not fuzzed here: ``sft``, ``train``, ``model init`` and ``export-groups`` (their
options are being bounded in ``cli/training.py``), ``serve`` (it would start a server)
and ``tasks import``. Deterministic: derandomized, no example database, no deadline.
"""

from __future__ import annotations

import itertools
import json
import math
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import one_line_error
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from inprocess_cli import run_here

from tackroom.core.errors import HarnessError, TackroomError
from tackroom.core.observation import Element, Observation
from tackroom.harness.session import HarnessSession
from tackroom.harness.spec import DEFAULTS, HarnessSpec, list_harnesses, load_harness

FUZZ = settings(derandomize=True, database=None, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
BUILTIN = sorted(list_harnesses())
_counter = itertools.count()


# ---------------------------------------------------------------------------------------------
# The CLI in this process
# ---------------------------------------------------------------------------------------------
def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``tackroom ARGS`` run by :func:`tackroom.cli.main` in this process, in ``cwd``, with
    no default store, harness path or model server from this machine's environment."""
    return run_here(*args, cwd=cwd, env_extra={
        "TACKROOM_DB": str(cwd / "default.duckdb"), "TACKROOM_HARNESS_PATH": "",
        "OPENAI_API_KEY": "", "OPENAI_BASE_URL": ""})


#: Lines a command prints on stderr on purpose before its result (not errors).
NOTICES = ("--unsafe-local:",)


def check_outcome(proc: subprocess.CompletedProcess[str]) -> None:
    """Exit 0, or 2 with one ``error:`` line (or typer's help); never a traceback.

    ``harness validate`` reports each file on its own line (``invalid FILE: …``).
    """
    assert proc.returncode in (0, 2), (proc.args, proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stdout + proc.stderr, proc
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith(NOTICES)]
    if proc.returncode == 0:
        assert not any(ln.startswith("error:") for ln in lines), proc
        return
    if not lines:  # no arguments to a group: typer prints its help
        assert "Usage" in proc.stdout, proc
        return
    if "validate" in proc.args and all(ln.startswith("invalid ") for ln in lines):
        return
    one_line_error(subprocess.CompletedProcess(proc.args, 2, proc.stdout, "\n".join(lines)))


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module")
def recorded(home: Path) -> dict[str, Any]:
    """A private store with one small toy run (2 episodes), a manifest, a harness file."""
    db = home / "store" / "r.duckdb"
    p = cli("eval", "--suite", "toy", "--tasks", "click-button", "--harness", "som-tools",
            "--policy", "expert", "--seeds", "0-1", "--db", str(db), cwd=home)
    assert p.returncode == 0, (p.stdout, p.stderr)
    from tackroom.records import RecordStore

    with RecordStore(db, read_only=True) as store:
        run_id = store.latest_run_id()
        episodes = sorted(r["episode_id"] for r in store.episodes(run_id=run_id))
    assert len(episodes) == 2
    manifest = home / "manifest.json"
    p = cli("seal", "--suite", "toy", "--tasks", "click-button", "--harness", "som-tools",
            "--seeds", "0-1", "--out", str(manifest), cwd=home)
    assert p.returncode == 0, p.stderr
    (home / "variant.toml").write_text('extends = "som-tools"\n[loop]\nhistory = 2\n')
    (home / "garbage.bin").write_bytes(b"\x00\xff{not json")
    (home / "adir").mkdir()
    return {"db": db, "run": run_id, "episodes": episodes, "manifest": manifest}


def store_contents(db: Path, run_id: str) -> tuple[list[str], list[str]]:
    """The store's runs and ``run_id``'s episodes, read in one opening of the store."""
    from tackroom.records import RecordStore

    with RecordStore(db, read_only=True) as store:
        return ([r["run_id"] for r in store.runs()],
                sorted(r["episode_id"] for r in store.episodes(run_id=run_id)))


# ---------------------------------------------------------------------------------------------
# 1. Harness files
# ---------------------------------------------------------------------------------------------
def toml_string(s: str) -> str:
    """``s`` as a TOML basic string (control characters escaped)."""
    out = []
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def toml_key(k: str) -> str:
    return k if k and all(c.isascii() and (c.isalnum() or c in "-_") for c in k) \
        else toml_string(k)


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, _Raw):
        return v.text
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(v)


class _Raw:
    """A TOML value written as is (dates and times, numbers in TOML's other notations)."""

    def __init__(self, text: str) -> None:
        self.text = text


def to_toml(doc: dict[str, Any]) -> str:
    """Scalars and arrays first, then each table as a ``[section]`` (nested ones inline)."""
    head = [f"{toml_key(k)} = {toml_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    body = []
    for k, v in doc.items():
        if isinstance(v, dict):
            body.append(f"\n[{toml_key(k)}]")
            body += [f"{toml_key(kk)} = {toml_value(vv)}" for kk, vv in v.items()]
    return "\n".join(head + body) + "\n"


_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
_strings = _text | st.sampled_from(
    ["", "x" * 300, "{instruction}", "{observation}{budget}", "{feedback", "{0}", "{}",
     "{instruction.__class__}", "{instruction[0]}", "{observation:>{budget}}", "{budget!z}",
     "a\nb\r\n\u2028c", "\x00\x1b[31m", "[bold]x[/bold]", "café 🐎", "\\", "'"])
_ints = st.integers(-2**63, 2**63 - 1) | st.sampled_from([0, 1, -1, 50, 51, 10_000, 10_001])
_floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.5, 1e308, -0.0])
_raw = st.sampled_from(["1979-05-27", "07:32:00", "1979-05-27T07:32:00Z",
                        "1979-05-27T00:32:00.999999-07:00", "0x_ff", "0o17", "0b1", "1_000",
                        "1e999", "-nan", "+inf", "-0x1"]).map(_Raw) \
    | st.integers(19, 5000).map(lambda n: _Raw("9" * n))  # past 64 bits, past int()'s limit
_scalars = st.one_of(_strings, _ints, _floats, st.booleans(), _raw)
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(_text, inner, max_size=3), max_leaves=6)

#: Values a known key might well hold, so that some files load (and some only just fail).
_PLAUSIBLE = {
    "renderer": ["element_list", "html", "outline", "terminal", "code", "nope"],
    "interface": ["element_refs", "coords", "nope"],
    "parser": ["tool_calls", "json", "commands", "nope"],
    "on_malformed": ["feedback", "end", "reflect"],
    "on_action_error": ["feedback", "reflect", "end", "ignore"],
    "options": [{}, {"max_chars": 10}, {"max_chars": "x"}, {"files": "tree"}, {"files": [1]},
                {"coords": True, "refs": "no"}, {"limits": False}, {"show_ids": 0},
                {"status": True}],
}


_NUMBERS = [0, 1, -1, 2, 50, 51, 1000, 1001, 10_000, 10_001, 10**9, 0.5, 300.0, 1e-9]


def _slot(slot: str) -> st.SearchStrategy[dict[str, Any]]:
    keys = list(DEFAULTS[slot]) + ["nope", "Renderer", ""]

    def value(key: str) -> st.SearchStrategy[Any]:
        default = DEFAULTS[slot].get(key, 1)
        plausible = st.sampled_from(_PLAUSIBLE.get(key) or (
            [default, *_NUMBERS] if isinstance(default, (int, float)) and
            not isinstance(default, bool) else [default]))
        return st.sampled_from([plausible] * 3 + [_values]).flatmap(lambda s: s)  # mostly

    return st.lists(st.sampled_from(keys), max_size=4, unique=True).flatmap(
        lambda ks: st.fixed_dictionaries({k: value(k) for k in ks}))


_SLOTS = [s for s in DEFAULTS if s != "skills"]
_skills = st.lists(st.fixed_dictionaries({"name": _strings, "text": _strings},
                                         optional={"extra": _values}) | _values, max_size=3)


@st.composite
def harness_doc(draw: st.DrawFn, siblings: list[str]) -> dict[str, Any]:
    """A harness file's content: known and unknown slots, ``extends`` to anything."""
    doc: dict[str, Any] = {}
    if draw(st.integers(0, 3)):  # mostly: a variant of another harness
        kind = draw(st.sampled_from(["builtin"] * 6 + ["odd"] * 3 + ["any"]))
        doc["extends"] = draw({"builtin": st.sampled_from(BUILTIN), "any": _values,
                               "odd": st.sampled_from(siblings + [
                                   "missing-name", "missing.toml", "sub/missing.toml", "/", ".",
                                   "", "a" * 300, "b" * 300 + ".toml", "a\x00b",
                                   "../" * 40 + "x.toml"])}[kind])
    if not draw(st.integers(0, 3)):
        doc["name"] = draw(st.sampled_from(["ok-name", "bad name", "", "x.y", "名前"]) | _values)
    for slot in draw(st.lists(st.sampled_from(_SLOTS), max_size=3, unique=True)):
        doc[slot] = draw(st.sampled_from([_slot(slot), _slot(slot), _values]).flatmap(
            lambda s: s))
    if not draw(st.integers(0, 3)):
        doc["skills"] = draw(_skills)
    if not draw(st.integers(0, 3)):
        for key in draw(st.lists(st.sampled_from(["description", "version", "nope", "Prompt"]),
                                 max_size=2, unique=True)):
            doc[key] = draw(_values)
    return doc


#: One observation with something for every renderer (elements, HTML, terminal text).
OBSERVATION = Observation("Click OK.", elements=[Element(1, "button", "OK", id="ok")],
                          html="<button id=ok>OK</button>", text="$ ls\nREADME\n",
                          extra={"files": {"a.py": "x = 1\n"}})


def check_loaded(path: Path, home: Path) -> HarnessSpec | None:
    """``load_harness(path)``: a usable harness, or a HarnessError saying where and what."""
    try:
        h = load_harness(str(path))
    except TackroomError as e:
        assert isinstance(e, HarnessError), e
        line = e.line()
        assert e.what and e.where, line
        assert "\n" not in line and "\r" not in line and line.isprintable(), line
        assert str(home) in line or "--harness" in line, line  # names the file
        return None
    # A harness that loads is one an episode can use: identity, prompt, rendering, turns.
    assert h.ident == f"{h.name}@{h.hash}"
    json.dumps(h.content(), allow_nan=False)
    session = HarnessSession(h, "Click the button.")
    rendered = session.render(OBSERVATION)
    assert isinstance(rendered, str)
    session.add_observation(rendered, None, session.budget_line(0, 0, 60.0))
    session.add_observation(rendered, "That did nothing.", "")
    assert session.messages()[0]["role"] == "system"
    return h


def check_validate(path: Path, home: Path, loaded: HarnessSpec | None) -> None:
    """``tackroom harness validate FILE`` agrees with the API, in one line."""
    p = cli("harness", "validate", str(path), cwd=home)
    check_outcome(p)
    if loaded is None:
        assert p.returncode == 2 and p.stderr.startswith("invalid "), p
        assert len([ln for ln in p.stderr.splitlines() if ln.strip()]) == 1, p.stderr
    else:
        assert p.returncode == 0 and p.stdout.startswith("ok "), p


@settings(FUZZ, max_examples=250)
@given(data=st.data())
def test_random_harness_files_load_or_fail_in_one_line(home, data):
    d = home / f"h{next(_counter)}"
    d.mkdir()
    names = ["a", "b", "c"]
    # Up to three files that may extend each other (and themselves): cycles and chains.
    for n in names[:data.draw(st.integers(1, 3), label="files")]:
        doc = data.draw(harness_doc([n, "a", "b.toml", "./c.toml", str(d / "a.toml")]),
                        label=n)
        (d / f"{n}.toml").write_text(to_toml(doc), encoding="utf-8")
    target = d / "a.toml"
    loaded = check_loaded(target, home)
    event("loads" if loaded else "refused")
    check_validate(target, home, loaded)


_junk_lines = st.lists(st.one_of(
    st.sampled_from(["[prompt]", "[[skills]]", "[budget", "extends = ", 'extends = "a.toml"',
                     "turns = 1", "a.b.c = 1", "a = 1\na = 2", '"""', "'''", "= 1", "[a]\n[a]",
                     "x = [1, 2", "y = {z = 1", "\ufeffname = 'x'", "k = 1e999", "k = 09",
                     "k = 1979-13-45", "k = \"\\q\""]),
    st.text(max_size=30)), max_size=8).map("\n".join)


@settings(FUZZ, max_examples=150)
@given(content=st.binary(max_size=200) | _junk_lines.map(lambda t: t.encode("utf-8", "replace")))
def test_random_bytes_as_a_harness_file_fail_in_one_line(home, content):
    path = home / f"junk{next(_counter)}.toml"
    path.write_bytes(content)
    loaded = check_loaded(path, home)
    check_validate(path, home, loaded)


# -- regressions the fuzzing found (plain tests) -----------------------------------------------
@pytest.mark.parametrize("content, needle", [
    ('[observation]\nrenderer = ["element_list"]\n',  # unhashable
     "renderer = ['element_list'] is not a string"),
    ('[actions]\nparser = {a = 1}\n', "parser = {'a': 1} is not a string"),
    ('[loop]\non_malformed = [1]\n', "on_malformed = [1] is not a string"),
    ('[budget]\ntokens = ' + "9" * 400 + "\n", "budget.tokens"),  # past a float's range
    ('[loop]\nhistory = ' + "9" * 400 + "\n", "out of range"),
    ('[prompt]\nfirst_turn = "{instruction.__class__}"\n', "unknown placeholder"),
    ('[prompt]\nfirst_turn = "{instruction[x]}"\n', "unknown placeholder"),
    ('[prompt]\nnext_turn = "{feedback[0]}"\n', "unknown placeholder"),
    ('[prompt]\nnext_turn = "{}"\n', "unknown placeholder"),
    ('[observation]\noptions = {since = 1979-05-27}\n', "date or time"),
    ('[observation]\noptions = {at = [07:32:00]}\n', "date or time"),
    ('[observation]\noptions = {x = nan}\n', "finite"),
    ('[observation]\noptions = {max_chars = "x"}\n', "max_chars"),
    ('[budget]\nturns = ' + "9" * 5000 + "\n", "not valid TOML"),
    ('extends = "' + "a" * 300 + '"\n', "cannot use harness path"),
    ('extends = "/"\n', "bad.toml extends /: not a file"),  # names the extending file
    ('extends = "gone.toml"\n', "bad.toml extends"),
])
def test_harness_values_of_the_wrong_kind_are_one_clear_line(tmp_path, content, needle):
    path = tmp_path / "bad.toml"
    path.write_text('extends = "som-tools"\n' + content if "extends" not in content
                    else content)
    with pytest.raises(HarnessError) as e:
        load_harness(str(path))
    line = e.value.line()
    assert needle in line and str(path) in line and "\n" not in line, line
    v = cli("harness", "validate", str(path), cwd=tmp_path)
    assert v.returncode == 2 and v.stderr.count("\n") == 1 and needle in v.stderr, v


def test_a_harness_name_or_path_too_long_for_the_file_system_is_one_line(tmp_path):
    for ref in ("x" * 300, "y" * 300 + ".toml", str(tmp_path / ("z" * 300 + ".toml"))):
        with pytest.raises(HarnessError, match="cannot use harness path"):
            load_harness(ref)
        line = one_line_error(cli("harness", "show", ref, cwd=tmp_path))
        assert "File name too long" in line and "--harness" in line


def test_user_text_with_newlines_or_escapes_stays_on_one_line(tmp_path):
    line = one_line_error(cli("harness", "show", "a\nb\x1b[2J\u2028.toml", cwd=tmp_path))
    assert "a\\nb\\x1b[2J\\u2028.toml" in line and "not found" in line
    from tackroom.core.errors import ConfigError

    assert ConfigError("bad\r\nvalue\x00", "--x\t", "fix it").line() == \
        "--x\\t: bad\\r\\nvalue\\x00 — fix it"
    assert ConfigError("café 🐎 ok", "--x").line() == "--x: café 🐎 ok"


# ---------------------------------------------------------------------------------------------
# 2. Command lines
# ---------------------------------------------------------------------------------------------
_ODD = ["", " ", "-", "--", "nope", "x" * 300, "a\nb", "[b]x[/b]", ":x:", "\x1b[2J", "é",
        "--dry-run", "latest"]
_int_text = st.one_of(st.integers(-2**70, 2**70).map(str),
                      st.sampled_from(["0", "1", "-1", "1.5", "nan", "inf", "1e3", "", "x",
                                       "0x10", "٣", "99999999999999999999"]))
_float_text = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(str),
                        st.sampled_from(["0", "0.5", "2", "-1", "nan", "-inf", "1e309", "",
                                         "x", "1,5"]))
# Not a grid of a million: a dry run would plan each episode of it (slow, not wrong).
_seeds = st.sampled_from(["0-1", "0", "0,1", "5-1", "0-99999999999", "4294967296", "-1", "1e3",
                          "", ",,", "0-", "-", "0--1", " 1 ", "a", "٣", "0-99", "1-1"]) \
    | _text


def mostly(valid: list[str], odd: list[str] | st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """A valid value about half the time, else an odd one."""
    odd_ = odd if isinstance(odd, st.SearchStrategy) else st.sampled_from(odd)
    return st.sampled_from(valid) | odd_


def _eval_like(recorded: dict[str, Any], home: Path) -> dict[str, st.SearchStrategy[str]]:
    harness_refs = ["som-tools", "html-commands", "terminal-bash", "edit-blocks", "nope", "",
                    str(home / "variant.toml"), str(home / "missing.toml"),
                    str(home / "adir"), str(home / "garbage.bin"), "x" * 300, "a,b,,"]
    return {
        "--suite": mostly(["toy"], ["code", "terminal", "nope", "", "TOY"]),
        "--tasks": mostly(["click-button", "click-*", "@expert", "@all"],
                          ["nope", "[", "*", ",", "a\nb", ""]),
        "--harness": mostly(["som-tools", "html-commands,som-tools", str(home / "variant.toml")],
                            harness_refs),
        "--policy": mostly(["expert", "expert,expert", f"replay:{recorded['run']}", "openai:m"],
                           ["nope", "openai:", "openai:m@http://127.0.0.1:9/v1", "hf:",
                            "hf:/missing", "replay:", "replay:nope", "", ":"]),
        "--seeds": mostly(["0-1", "0", "3,1"], _seeds),
        "--temperature": mostly(["0", "0.7"], _float_text),
        "--top-p": mostly(["1", "0.9"], _float_text),
        "--max-tokens": mostly(["64"], _int_text),
        # Only well-formed URLs: a malformed one is a known defect of openai_policy.py
        # (see test_a_malformed_base_url_is_one_line below).
        "--base-url": st.sampled_from(["http://127.0.0.1:9/v1", "http://localhost", ""]),
        "--logprobs": _FLAG, "--no-logprobs": _FLAG,
    }


#: An option that takes no value.
_FLAG = st.just("")


def _options(pool: dict[str, st.SearchStrategy[str]]) -> st.SearchStrategy[list[str]]:
    """Some of ``pool``'s options, each with a value ("" = a flag), in any order."""
    def one(name: str) -> st.SearchStrategy[list[str]]:
        return pool[name].map(lambda v: [name] if pool[name] is _FLAG else [name, v])

    return st.lists(st.sampled_from(sorted(pool)), max_size=5).flatmap(
        lambda names: st.tuples(*(one(n) for n in names)).map(
            lambda parts: [x for p in parts for x in p]))


@st.composite
def argv(draw: st.DrawFn, recorded: dict[str, Any], home: Path) -> list[str]:
    db_choices = [str(recorded["db"])] * 4 + [str(home / "none.duckdb"), str(home / "adir"),
                                               str(home / "garbage.bin"), ""]
    db = ["--db", draw(st.sampled_from(db_choices), label="db")]
    run_ref = st.sampled_from([recorded["run"], "latest", "nope", "", recorded["run"][:6]])
    out = st.sampled_from([str(home / f"out{next(_counter)}"), str(home / "adir"),
                           str(home / "garbage.bin"), str(home / "new" / "deeper" / "o"), "",
                           str(home / ("o" * 300))])
    eval_like = _eval_like(recorded, home)
    junk = st.lists(st.sampled_from(_ODD + ["--bogus", "-z", "--db"]), max_size=2)
    command = draw(st.sampled_from(["eval", "eval", "eval", "seal", "runs", "show", "export",
                                    "report", "harness show", "harness diff",
                                    "harness validate", "harness list", "tasks", "junk"]),
                   label="command")
    if command == "eval":
        pool = {**eval_like,
                "--concurrency": _int_text, "-n": _int_text, "--timeout": _float_text,
                "--max-episodes": _int_text,
                "--resume": run_ref, "--sealed": st.sampled_from(
                    [str(recorded["manifest"]), str(home / "missing.json"), str(home / "adir"),
                     str(home / "garbage.bin"), ""]),
                "--by-task": _FLAG, "--no-by-task": _FLAG, "--unsafe-local": _FLAG,
                "--ray-address": st.sampled_from(["", "auto"])}
        # --dry-run first, where no stray token can take it as its value (``--db --dry-run``).
        args = ["eval", "--dry-run", *draw(_options(pool)), *draw(junk), "--dry-run", *db]
    elif command == "seal":
        pool = {**eval_like, "--held-out": st.sampled_from(["outline-coords", "nope", ""]),
                "--train-harness": st.sampled_from(["som-tools", "nope", ""]),
                "--force": _FLAG}
        args = ["seal", *draw(_options(pool)), "--out", draw(out)]
    elif command == "runs":
        args = ["runs", *draw(_options({"--limit": _int_text})), *db]
    elif command == "show":
        episode = st.sampled_from(recorded["episodes"] + [recorded["episodes"][0][:4], "zz", ""])
        args = ["show", draw(run_ref), *draw(st.lists(episode, max_size=1)),
                *draw(_options({"--full": _FLAG, "--no-full": _FLAG})), *db]
    elif command == "export":
        args = ["export", draw(run_ref), *draw(_options({
            "--format": st.sampled_from(["jsonl", "parquet", "atif", "xml", ""]),
            "-o": out})), *db]
    elif command == "report":
        item = st.sampled_from(["expert=som-tools", "=", "a=", "expert", "a=b@c", "a@b", "@",
                                "expert@som-tools", "", "x" * 300])
        args = ["report", *draw(st.lists(run_ref, min_size=1, max_size=2)), *draw(_options({
            "--trained": item, "--gain": item, "--compare": item,
            "-o": out.map(lambda p: p + ".html")})), *db]
    elif command in ("harness show", "harness diff", "harness validate"):
        n = {"harness show": 1, "harness diff": 2, "harness validate": 2}[command]
        refs = st.sampled_from(BUILTIN[:3] + [str(home / "variant.toml"),
                                              str(home / "garbage.bin"), str(home / "adir"),
                                              "nope", "", "x" * 300])
        args = [*command.split(), *draw(st.lists(refs, min_size=0, max_size=n))]
    elif command == "harness list":
        args = ["harness", "list", *draw(junk)]
    elif command == "tasks":
        args = ["tasks", *draw(_options({"--suite": st.sampled_from(
            ["toy", "code", "terminal", "nope", ""])}))]
    else:
        args = draw(st.lists(st.sampled_from(_ODD + ["eval", "harness", "tasks", "--help"]),
                             max_size=3))
    if draw(st.integers(0, 9), label="typo") == 0 and len(args) > 2:  # a stray token
        args.insert(draw(st.integers(2, len(args)), label="at"),
                    draw(st.sampled_from(_ODD + ["--bogus", "--db"])))
    return args


@settings(FUZZ, max_examples=300)
@given(data=st.data())
def test_random_command_lines_exit_0_or_2_with_one_line(home, recorded, data):
    args = data.draw(argv(recorded, home), label="argv")
    proc = cli(*args, cwd=home)
    event(f"{' '.join(args[:1])} exit {proc.returncode}")
    check_outcome(proc)
    # No command line, however odd, loses a recorded episode; a dry run records nothing.
    runs, episodes = store_contents(recorded["db"], recorded["run"])
    assert episodes == recorded["episodes"]
    assert runs == [recorded["run"]]


# -- regressions the fuzzing found (plain tests) -----------------------------------------------
@pytest.mark.parametrize("args, needles", [
    (["eval", "--max-tokens", "1.5", "--dry-run"], ["tackroom eval", "--max-tokens", "--help"]),
    (["eval", "-n", "x", "--dry-run"], ["--concurrency", "--help"]),
    (["eval", "--seeds"], ["--seeds", "requires an argument"]),
    (["--bogus"], ["No such option", "--bogus"]),
    (["runs", "--limit", "nan"], ["--limit"]),
    (["show"], ["Missing argument", "tackroom show --help"]),
    (["harness", "diff", "som-tools"], ["Missing argument"]),
    (["eval", "--dry-run", "extra"], ["unexpected extra argument", "extra"]),
])
def test_click_usage_errors_are_one_line_exit_2(tmp_path, args, needles):
    line = one_line_error(cli(*args, cwd=tmp_path))
    for n in needles:
        assert n in line, (n, line)


def test_help_and_bare_groups_are_not_errors(tmp_path):
    h = cli("eval", "--help", cwd=tmp_path)
    assert h.returncode == 0 and "--dry-run" in h.stdout and not h.stderr
    g = cli("harness", cwd=tmp_path)
    assert g.returncode == 2 and "Usage" in g.stdout and not g.stderr.strip()


def test_seal_onto_a_directory_or_unwritable_path_is_one_line(tmp_path):
    (tmp_path / "adir").mkdir()
    line = one_line_error(cli("seal", "--suite", "toy", "--out", str(tmp_path / "adir"),
                              "--force", cwd=tmp_path))
    assert "is a directory" in line and str(tmp_path / "adir") in line
    (tmp_path / "plain").write_text("x")
    line = one_line_error(cli("seal", "--suite", "toy", "--out",
                              str(tmp_path / "plain" / "m.json"), cwd=tmp_path))
    assert "Not a directory" in line and (tmp_path / "plain").read_text() == "x"
    line = one_line_error(cli("seal", "--suite", "toy", "--out",
                              str(tmp_path / ("m" * 300)), cwd=tmp_path))
    assert "--out" in line
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "plain")
    line = one_line_error(cli("seal", "--suite", "toy", "--out", str(link), "--force",
                              cwd=tmp_path))
    assert "not a regular file" in line and (tmp_path / "plain").read_text() == "x"


def test_a_malformed_base_url_is_one_line(tmp_path):
    line = one_line_error(cli("eval", "--suite", "toy", "--policy", "openai:m",
                              "--base-url", "::::", "--dry-run",
                              "--db", str(tmp_path / "r.duckdb"), cwd=tmp_path))
    assert "::::" in line
