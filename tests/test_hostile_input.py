"""Hostile files and arguments: each user mistake is one clear line, never a traceback.

Harness files that are binary, not UTF-8, empty or missing; export targets that are
directories, symlinks, FIFOs or devices; numeric options out of range; a record store
on a read-only file system; values that look like rich markup or emoji codes.
"""

from __future__ import annotations

import os
import shutil
import stat

import pytest
from conftest import TACKROOM, one_line_error, run_cli

from tackroom.core.episode import Episode, Outcome, Turn
from tackroom.core.errors import ConfigError, HarnessError
from tackroom.core.policy import Sampling
from tackroom.harness.spec import load_harness
from tackroom.records import RecordStore

# ---------------------------------------------------------------------------
# 1. Harness files
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("content, needle", [
    (b"\x00\x01\x02\xff\xfe\x89PNG\r\n\x1a\n", "UTF-8"),
    (b'name = "caf\xe9"\n', "UTF-8"),
])
def test_binary_or_non_utf8_harness_file_is_one_clear_line(tmp_path, content, needle):
    bad = tmp_path / "bad.toml"
    bad.write_bytes(content)
    with pytest.raises(HarnessError, match=needle):
        load_harness(str(bad))
    line = one_line_error(run_cli("harness", "show", str(bad), cwd=tmp_path))
    assert str(bad) in line and needle in line


def test_empty_harness_file_is_refused_naming_the_missing_slots(tmp_path):
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    with pytest.raises(HarnessError) as e:
        load_harness(str(empty))
    line = e.value.line()
    assert str(empty) in line and "missing" in line
    for slot in ("[observation]", "[actions]"):
        assert slot in line, line
    assert "extends" in line  # the fix names the other way
    cli = one_line_error(run_cli("harness", "show", str(empty), cwd=tmp_path))
    assert "missing" in cli
    # An empty variant of another harness is complete: it inherits everything.
    variant = tmp_path / "variant.toml"
    variant.write_text('extends = "som-tools"\n')
    assert load_harness(str(variant)).hash == load_harness("som-tools").hash


def test_missing_harness_path_says_file_not_found(tmp_path):
    missing = tmp_path / "nope.toml"
    with pytest.raises(HarnessError) as e:
        load_harness(str(missing))
    assert "no harness named" not in e.value.line()
    assert "not found" in e.value.line() and str(missing) in e.value.line()
    line = one_line_error(run_cli("eval", "--suite", "toy", "--harness", str(missing),
                                  "--dry-run", cwd=tmp_path))
    assert "not found" in line and str(missing) in line
    # A directory named like a harness file is not one either.
    (tmp_path / "dir.toml").mkdir()
    with pytest.raises(HarnessError, match="not a file"):
        load_harness(str(tmp_path / "dir.toml"))


def test_harness_validate_exits_2_on_an_invalid_file_with_per_file_lines(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('extends = "som-tools"\n[loop]\nactions_per_turn = 0\n')
    v = run_cli("harness", "validate", str(bad), "som-tools", cwd=tmp_path)
    assert v.returncode == 2, (v.stdout, v.stderr)
    assert "Traceback" not in v.stdout + v.stderr
    assert "ok som-tools" in v.stdout and "invalid" in v.stderr and "actions_per_turn" in v.stderr
    ok = run_cli("harness", "validate", "som-tools", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr


# ---------------------------------------------------------------------------
# 2. Export targets
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A small recorded toy run: (its directory, the store path)."""
    root = tmp_path_factory.mktemp("hostile")
    db = root / "store" / "r.duckdb"
    p = run_cli("eval", "--suite", "toy", "--tasks", "click-button", "--harness", "som-tools",
                "--policy", "expert", "--seeds", "0-1", "--db", str(db), cwd=root)
    assert p.returncode == 0, p.stderr
    return root, db


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_to_a_directory_or_unwritable_path_is_one_clear_line(tmp_path, recorded, fmt):
    _, db = recorded
    (tmp_path / "adir").mkdir()
    line = one_line_error(run_cli("export", "latest", "-f", fmt, "-o", str(tmp_path / "adir"),
                                  "--db", str(db), cwd=tmp_path))
    assert "directory" in line and str(tmp_path / "adir") in line
    assert (tmp_path / "adir").is_dir() and not list((tmp_path / "adir").iterdir())
    (tmp_path / "plain").write_text("x")
    under_file = tmp_path / "plain" / f"out.{fmt}"
    line = one_line_error(run_cli("export", "latest", "-f", fmt, "-o", str(under_file),
                                  "--db", str(db), cwd=tmp_path))
    assert str(under_file) in line or str(tmp_path / "plain") in line
    assert (tmp_path / "plain").read_text() == "x"


def test_export_never_replaces_a_symlink_fifo_or_device(tmp_path, recorded):
    _, db = recorded
    target = tmp_path / "target.txt"
    target.write_text("keep me")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    dev = tmp_path / "null.jsonl"
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a /dev/null of our own
    except (PermissionError, OSError):
        dev = None
    for path in [link, fifo] + ([dev] if dev else []):
        for fmt in ("jsonl", "parquet"):
            line = one_line_error(run_cli("export", "latest", "-f", fmt, "-o", str(path),
                                          "--db", str(db), cwd=tmp_path, timeout=60))
            assert str(path) in line and "not a regular file" in line, line
    assert link.is_symlink() and target.read_text() == "keep me"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    if dev:
        assert stat.S_ISCHR(os.lstat(dev).st_mode)
    # An existing regular file is overwritten, as before.
    plain = tmp_path / "old.jsonl"
    plain.write_text("old\n")
    ok = run_cli("export", "latest", "-o", str(plain), "--db", str(db), cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert plain.read_text().startswith("{") and len(plain.read_text().splitlines()) == 2


def test_export_atif_onto_a_regular_file_is_one_clear_line(tmp_path, recorded):
    _, db = recorded
    f = tmp_path / "traj"
    f.write_text("x")
    line = one_line_error(run_cli("export", "latest", "-f", "atif", "-o", str(f),
                                  "--db", str(db), cwd=tmp_path))
    assert str(f) in line and "not a directory" in line
    assert f.read_text() == "x"


def test_report_to_a_directory_or_unwritable_path_is_one_clear_line(tmp_path, recorded):
    _, db = recorded
    (tmp_path / "adir").mkdir()
    line = one_line_error(run_cli("report", "latest", "-o", str(tmp_path / "adir"),
                                  "--db", str(db), cwd=tmp_path))
    assert "directory" in line and str(tmp_path / "adir") in line
    (tmp_path / "plain").write_text("x")
    line = one_line_error(run_cli("report", "latest", "-o", str(tmp_path / "plain" / "r.html"),
                                  "--db", str(db), cwd=tmp_path))
    assert str(tmp_path / "plain") in line
    link = tmp_path / "r.html"
    link.symlink_to(tmp_path / "plain")
    line = one_line_error(run_cli("report", "latest", "-o", str(link), "--db", str(db),
                                  cwd=tmp_path))
    assert "not a regular file" in line and (tmp_path / "plain").read_text() == "x"


# ---------------------------------------------------------------------------
# 3. Numeric options
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("args, needles", [
    (["--seeds", "0-99999999999"], ["--seeds", "1000000"]),
    (["--seeds", "4294967296"], ["--seeds", "2147483647"]),
    (["-n", "-1"], ["--concurrency", "0 to 4096"]),
    (["-n", "100000"], ["--concurrency", "0 to 4096"]),
    (["--temperature", "-1"], ["--temperature", "0 to 2"]),
    (["--temperature", "nan"], ["--temperature", "0 to 2"]),
    (["--max-tokens", "0"], ["--max-tokens", "at least 1"]),
    (["--top-p", "2"], ["--top-p", "(0, 1]"]),
    (["--top-p", "0"], ["--top-p", "(0, 1]"]),
    (["--timeout", "0"], ["--timeout", "more than 0"]),
    (["--seeds", "0-999999"], ["episodes", "--max-episodes"]),
    (["--max-episodes", "0"], ["--max-episodes", "at least 1"]),
])
def test_numeric_options_are_bounded_before_anything_runs(tmp_path, args, needles):
    p = run_cli("eval", "--suite", "toy", "--policy", "expert", *args, "--dry-run",
                "--db", str(tmp_path / "r.duckdb"), cwd=tmp_path, timeout=120)
    line = one_line_error(p)
    for n in needles:
        assert n in line, (n, line)
    assert not (tmp_path / "r.duckdb").exists()


def test_the_api_bounds_seeds_grid_and_sampling():
    from tackroom.app.evaluation import parse_seeds, plan, seed_list

    with pytest.raises(ConfigError, match="seeds"):
        parse_seeds("0-99999999999")
    with pytest.raises(ConfigError, match="seeds"):
        seed_list(range(10**12))
    with pytest.raises(ConfigError, match="seeds"):
        seed_list([-1])
    with pytest.raises(ConfigError, match="max_episodes"):
        plan("toy", tasks=["click-button"], harnesses=["som-tools"], seeds=range(20),
             max_episodes=10)
    assert plan("toy", tasks=["click-button"], harnesses=["som-tools"], seeds=range(20),
                max_episodes=20).n_episodes == 20
    for bad in (dict(concurrency=-1), dict(timeout=0.0), dict(timeout=float("inf")),
                dict(sampling=Sampling(temperature=3.0)), dict(sampling=Sampling(top_p=0.0)),
                dict(sampling=Sampling(max_tokens=0))):
        with pytest.raises(ConfigError):
            plan("toy", tasks=["click-button"], harnesses=["som-tools"], seeds=[0], **bad)


def test_runs_limit_is_bounded(tmp_path):
    line = one_line_error(run_cli("runs", "--limit", "-1", "--db", str(tmp_path / "r.duckdb"),
                                  cwd=tmp_path))
    assert "--limit" in line


# ---------------------------------------------------------------------------
# 4. Reading commands open the store read-only
# ---------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_reading_commands_work_on_a_read_only_file_system(tmp_path, recorded):
    import subprocess

    from conftest import CLI_ENV

    root, db = recorded
    probe = subprocess.run(["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                            "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"bwrap cannot run here: {probe.stderr.decode()[:200]}")
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, **CLI_ENV}

    def ro(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                               "--bind", str(out), str(out), "--chdir", str(out), *TACKROOM,
                               *args], capture_output=True, text=True, timeout=300, env=env)

    for args in (["runs"], ["show", "latest"],
                 ["export", "latest", "-o", str(out / "e.jsonl")],
                 ["export", "latest", "-f", "parquet", "-o", str(out / "e.parquet")],
                 ["export", "latest", "-f", "atif", "-o", str(out / "atif")],
                 ["report", "latest", "-o", str(out / "r.html")]):
        p = ro(*args, "--db", str(db))
        assert p.returncode == 0, (args, p.stdout, p.stderr)
    assert len((out / "e.jsonl").read_text().splitlines()) == 2
    assert (out / "r.html").stat().st_size > 0
    # Writing is still refused there, in one line.
    p = ro("eval", "--suite", "toy", "--tasks", "click-button", "--harness", "som-tools",
           "--seeds", "5", "--db", str(db))
    one_line_error(p)


def test_open_store_read_only_parameter(recorded):
    from tackroom.app.runs import open_store

    _, db = recorded
    with open_store(db, read_only=True) as a, open_store(str(db), read_only=True) as b:
        assert a.read_only and b.read_only
        assert a.runs() == b.runs()


# ---------------------------------------------------------------------------
# 5. Terminal output is never markup
# ---------------------------------------------------------------------------


def test_harness_diff_and_show_print_values_verbatim(tmp_path):
    a = tmp_path / "a.toml"
    b = tmp_path / "b.toml"
    a.write_text('extends = "som-tools"\nprompt.system = "Act by its [number]."\n')
    b.write_text('extends = "som-tools"\nprompt.system = "Use openai:x: [bold]now[/bold]."\n')
    d = run_cli("harness", "diff", str(a), str(b), cwd=tmp_path)
    assert d.returncode == 0, d.stderr
    assert "[number]" in d.stdout and "openai:x:" in d.stdout and "[bold]now[/bold]" in d.stdout
    s = run_cli("harness", "show", str(b), cwd=tmp_path)
    assert s.returncode == 0, s.stderr
    assert "Use openai:x: [bold]now[/bold]." in s.stdout


def test_show_run_table_prints_task_and_policy_verbatim(tmp_path):
    db = tmp_path / "r.duckdb"
    ep = Episode(episode_id="e1", run_id="r1", task="[red]t[/red]", suite="toy",
                 harness="som-tools", harness_hash="h", policy="openai:x:", seed=0,
                 outcome=Outcome.FAILURE,
                 turns=[Turn(index=0, messages=[{"role": "user", "content": "hi"}],
                             raw_text="ok :x:")])
    with RecordStore(db) as store:
        store.start_run("r1", "eval:x:", {}, n_planned=1)
        store.append(ep)
    p = run_cli("show", "r1", "--db", str(db), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "[red]t[/red]" in p.stdout and "openai:x:" in p.stdout and "❌" not in p.stdout
    r = run_cli("runs", "--db", str(db), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "eval:x:" in r.stdout and "❌" not in r.stdout
    e = run_cli("show", "r1", "e1", "--db", str(db), cwd=tmp_path)
    assert e.returncode == 0, e.stderr
    assert "ok :x:" in e.stdout and "openai:x:" in e.stdout and "❌" not in e.stdout


def test_error_lines_print_user_input_verbatim(tmp_path):
    line = one_line_error(run_cli("eval", "--suite", "toy", "--tasks", "[b]x[/b]:x:",
                                  "--dry-run", cwd=tmp_path))
    assert "[b]x[/b]:x:" in line and "❌" not in line


def test_result_tables_print_names_verbatim():
    """Harness, policy and task names in the result tables are text, never markup."""
    from rich.console import Console

    from tackroom.report.terminal import summary_table, task_matrix

    row = {"task": "toy/click[1]", "harness": "h[bold]x", "harness_hash": "abc",
           "policy": "p[/]:x:", "seed": 0, "attempt": 0, "sampling": {}, "outcome": "success",
           "n_turns": 1, "prompt_tokens": 1, "completion_tokens": 1, "parse_errors": 0}
    console = Console(width=200, record=True, emoji=False)
    console.print(summary_table([row]))
    console.print(task_matrix([row], ["h[bold]x"], "p[/]:x:"))
    text = console.export_text()
    assert "h[bold]x" in text and "p[/]:x:" in text and "click[1]" in text
