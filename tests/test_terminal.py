"""The terminal suite: built-in tasks, both shell harnesses, experts, import, limits shown.

Everything runs in the real bubblewrap sandbox; the expert runs go through the
real CLI and runner.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import one_line_error, run_cli

from tackroom.core.actions import Press, Shell, Submit, TypeText
from tackroom.core.policy import PolicyResponse, ToolCall
from tackroom.harness.session import HarnessSession
from tackroom.harness.spec import load_harness
from tackroom.records import RecordStore
from tackroom.sandbox import sandbox_available
from tackroom.suites import get_suite
from tackroom.suites.terminal import TerminalSuite
from tackroom.suites.terminal.check import check_task
from tackroom.suites.terminal.importer import NOT_A_TASK, import_tasks
from tackroom.suites.terminal.taskdir import load_task

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap cannot run here")


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> TerminalSuite:
    return TerminalSuite(unsafe_local=False, store=tmp_path_factory.mktemp("empty-store"))


def write_task(root: Path, name: str, *, instruction: str = "Create done.txt.",
               test: str = '[ -f done.txt ] && echo 1 > /logs/verifier/reward.txt || '
                           'echo 0 > /logs/verifier/reward.txt',
               solve: str | None = "touch done.txt", toml: str = "",
               env: dict[str, str] | None = None) -> Path:
    d = root / name
    (d / "tests").mkdir(parents=True)
    (d / "instruction.md").write_text(instruction + "\n")
    (d / "task.toml").write_text('version = "1.0"\n' + toml)
    (d / "tests" / "test.sh").write_text("#!/bin/bash\n" + test + "\n")
    if solve is not None:
        (d / "solution").mkdir()
        (d / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solve + "\n")
    for rel, text in (env or {}).items():
        (d / "environment" / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / "environment" / rel).write_text(text)
    return d


# -- the built-in tasks ------------------------------------------------------------------------
def test_builtin_tasks_cover_the_categories(suite):
    tasks = suite.tasks()
    assert len(tasks) >= 30
    cats = Counter(t.meta["category"] for t in tasks)
    for cat in ("file-operations", "text-processing", "data-wrangling", "scripting", "git"):
        assert cats[cat] >= 5, cats
    assert all(t.has_expert and t.requires == {"shell", "submit"} for t in tasks)
    assert all(t.description for t in tasks)


@pytest.mark.slow
def test_every_solution_passes_and_every_untouched_task_fails(suite):
    """Each task's tests run twice in the sandbox: on the untouched task, and after solve.sh."""
    dirs = list(suite.task_dirs().values())
    with ThreadPoolExecutor(4) as pool:
        checks = list(pool.map(check_task, dirs))
    bad = [(c.id, c.unsolved, c.solved, c.solve_output[-300:], c.tests_output[-300:])
           for c in checks if not c.ok]
    assert not bad
    assert all(c.unsolved == 0.0 and c.solved == 1.0 for c in checks)


@pytest.mark.slow
def test_expert_solves_every_task_through_both_shell_harnesses(tmp_path):
    """`tackroom eval --suite terminal --policy expert`: the real CLI, runner and parsers."""
    db = str(tmp_path / "r.duckdb")
    p = run_cli("eval", "--suite", "terminal", "--policy", "expert", "--seeds", "0", "-n", "8",
                "--db", db, cwd=tmp_path, env_extra={"TACKROOM_TASKS": str(tmp_path / "none")})
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    with RecordStore(db) as store:
        (run,) = store.runs()
        rows = store.episodes(run_id=run["run_id"])
    n_tasks = len(TerminalSuite(store=tmp_path / "none").tasks())
    assert Counter(r["harness"] for r in rows) == {"terminal-bash": n_tasks,
                                                    "terminal-keys": n_tasks}
    failed = [(r["task"], r["harness"], r["outcome"], r["error"]) for r in rows
              if r["outcome"] != "success"]
    assert not failed
    assert all(r["parse_errors"] == 0 for r in rows)


# -- the environment and what the model sees ---------------------------------------------------
def test_the_model_is_told_one_time_left_the_sooner_of_harness_and_task(tmp_path):
    """The harness allows 600 s (terminal-bash) and the task 90 s: every turn says one
    `s left`, at most 90, never both clocks."""
    import tackroom

    write_task(tmp_path / "store", "short", toml="[agent]\ntimeout_sec = 90\n")
    suite = TerminalSuite(store=tmp_path / "store")
    run = tackroom.evaluate(suite, tasks=["short"], harnesses=["terminal-bash"],
                            policies=["expert"], seeds=[0], store=tmp_path / "r.duckdb")
    (ep,) = run.load_episodes()
    users = [m["content"] for t in ep.turns for m in t.messages if m["role"] == "user"]
    assert users
    for text in users:
        lefts = re.findall(r"(\d+) s left", text)
        assert len(lefts) == 1 and int(lefts[0]) <= 90, text


def test_command_harness_shows_output_exit_code_and_the_limits(tmp_path):
    write_task(tmp_path / "store", "sums", env={"sales.csv": "date,region,product,amount\n"},
               toml="[agent]\ntimeout_sec = 90\n[tackroom]\ncommand_timeout_sec = 1.0\n")
    suite = TerminalSuite(store=tmp_path / "store")
    env = suite.make_env(suite.task("sums"))
    try:
        obs = env.reset(0)
        session = HarnessSession(load_harness("terminal-bash"), obs.instruction)
        first = session.render(obs)
        assert "sales.csv" in first
        assert "each command may run 1 s" in first and "the episode 90 s" in first
        parsed = session.parse(PolicyResponse(text="Let me look.\n```bash\ncd /tmp\nhead -2 "
                                              "/task/sales.csv; false\n```\n```sh\npwd\n```"))
        assert parsed.error is None and parsed.actions == [
            Shell("cd /tmp\nhead -2 /task/sales.csv; false"), Shell("pwd")]
        step = env.step(parsed.actions[0])
        text = session.render(step.observation)
        assert "date,region,product,amount" in text and "[exit code 1]" in text
        assert "s left" not in text  # the time left is the budget line's, stated once
        assert "/task" in env.step(parsed.actions[1]).observation.text  # cd did not persist
        slow = env.step(Shell("echo begun; sleep 30"))
        assert "begun" in slow.observation.text and "timed out after" in slow.observation.text
        done = env.step(Submit())
        assert done.terminated and done.success is False and done.reward == 0.0
    finally:
        env.close()


def test_keystroke_harness_keeps_a_live_shell(tmp_path):
    # Each keystroke waits for the prompt (an event) for at most the per-command limit:
    # 5 s leaves a loaded machine's shell ample time, while the limit itself stays testable.
    write_task(tmp_path / "store", "live", toml="[tackroom]\ncommand_timeout_sec = 5.0\n")
    suite = TerminalSuite(store=tmp_path / "store")
    env = suite.make_env(suite.task("live"))
    try:
        env.reset(0)
        h = HarnessSession(load_harness("terminal-keys"), "task")
        assert h.tools and {t["function"]["name"] for t in h.tools} == {"send_keys", "submit"}

        def keys(k: str, wait: float | None = None) -> str:
            args = {"keystrokes": k, **({"wait_s": wait} if wait is not None else {})}
            call = ToolCall("c1", "send_keys", json.dumps(args))
            parsed = h.parse(PolicyResponse(tool_calls=[call]))
            assert parsed.error is None, parsed.error
            return env.step(parsed.actions[0]).observation.text

        keys("mkdir sub && cd sub && export NAME=Ada\n")
        screen = keys("pwd; echo $NAME\n")
        assert "/task/sub\nAda" in screen  # cd and variables persist
        screen = keys("sleep 30\n", wait=0.3)
        assert screen.rstrip().endswith("sleep 30")  # still running: no prompt yet
        screen = keys("C-c")
        assert screen.rstrip().endswith("$")  # interrupted: back at the prompt
        screen = keys("sleep 30\n", wait=60)  # runs into the 5 s per-command limit
        assert "per-command limit: sent C-c" in screen
        rendered = h.render(env.step(TypeText("echo back\n")).observation)
        assert "back" in rendered and "each command may run 5 s" in rendered
        keys("cd /task && touch done.txt\n")
        done = env.step(Submit())
        assert done.terminated and done.success and done.reward == 1.0
    finally:
        env.close()
    assert env.session is None


def test_ctrl_c_reaches_the_agents_shell_when_tackroom_started_with_sigint_ignored(tmp_path):
    """``tackroom eval … &`` from a script starts with SIGINT ignored, which an exec'd
    program inherits and bash cannot undo: the sandbox gives its programs SIGINT back."""
    import signal

    write_task(tmp_path / "store", "live", toml="[tackroom]\ncommand_timeout_sec = 30.0\n")
    suite = TerminalSuite(store=tmp_path / "store")
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        env = suite.make_env(suite.task("live"))
        try:
            env.reset(0)
            h = HarnessSession(load_harness("terminal-keys"), "task")

            def keys(k: str, wait: float) -> str:
                call = ToolCall("c1", "send_keys", json.dumps({"keystrokes": k, "wait_s": wait}))
                parsed = h.parse(PolicyResponse(tool_calls=[call]))
                assert parsed.error is None, parsed.error
                return env.step(parsed.actions[0]).observation.text

            assert keys("sleep 300\n", 0.3).rstrip().endswith("sleep 300")
            # Waiting for the prompt: it comes back only if sleep died of the C-c.
            screen = keys("C-c", 25)
            assert screen.rstrip().endswith("$"), screen
            assert "per-command limit" not in screen
        finally:
            env.close()
    finally:
        signal.signal(signal.SIGINT, before)


def test_episode_wall_time_ends_the_episode_with_the_tests_verdict(tmp_path):
    write_task(tmp_path / "store", "quick", toml="[agent]\ntimeout_sec = 1.5\n")
    suite = TerminalSuite(store=tmp_path / "store")
    env = suite.make_env(suite.task("quick"))
    try:
        obs = env.reset(0)
        assert obs.extra["episode_timeout_s"] == 1.5
        env.step(Shell("touch done.txt"))
        res = env.step(Shell("sleep 5"))  # capped by the time the episode has left
        if not res.truncated:
            res = env.step(Shell("true"))
        assert res.truncated and not res.terminated and res.success and res.reward == 1.0
    finally:
        env.close()


def test_reward_json_and_dockerfile_subset(tmp_path):
    """On the host system (``environment = "host"``) a Dockerfile is read as a subset."""
    d = write_task(tmp_path, "jsonreward", toml='[tackroom]\nenvironment = "host"\n',
                   test='python3 -c "import json; json.dump({\'reward\': 1.0 if open(\'/app/'
                        'out.txt\').read() == \'$GREETING\\\\n\' else 0.0}, '
                        'open(\'/logs/verifier/reward.json\', \'w\'))"',
                   solve='echo "$GREETING" > out.txt',
                   env={"Dockerfile": "FROM ubuntu:24.04\nWORKDIR /app\nCOPY data.txt /app/\n"
                                      "ENV GREETING=hello\nRUN cp data.txt copy.txt\n",
                        "data.txt": "x\n", "unused.txt": "not copied\n"})
    td = load_task(d)
    assert (td.workdir, td.env, td.setup) == ("/app", {"GREETING": "hello"}, ["cp data.txt copy.txt"])
    check = check_task(td)
    assert check.ok and check.solved == 1.0, check


# -- import ------------------------------------------------------------------------------------
def _terminal_bench_task(root: Path, name: str, *, run_tests: str | None, compose: str = "",
                         solution_yaml: bool = False) -> Path:
    d = root / name
    (d / "tests").mkdir(parents=True)
    (d / "task.yaml").write_text(
        "# a Terminal-Bench task\ninstruction: |-\n  Write the word 'tackroom' into\n"
        "  /app/answer.txt.\nauthor_email: someone@example.com\ndifficulty: easy\n"
        "category: file-operations\ntags:\n  - files\nparser_name: pytest\n"
        "max_agent_timeout_sec: 60.0\nmax_test_timeout_sec: 30.0\n")
    (d / "Dockerfile").write_text("FROM ghcr.io/laude-institute/t-bench/python-3-13:20250620\n"
                                  "WORKDIR /app\nCOPY seed.txt /app/seed.txt\n")
    (d / "seed.txt").write_text("seed\n")
    (d / "docker-compose.yaml").write_text(compose or (
        "services:\n  client:\n    build:\n      dockerfile: Dockerfile\n"
        "    command: [\"sh\", \"-c\", \"sleep infinity\"]\n"))
    (d / "tests" / "check_answer.sh").write_text(
        "grep -qx tackroom /app/answer.txt && [ -f /app/seed.txt ]\n")
    if run_tests is not None:
        (d / "run-tests.sh").write_text(run_tests)
    if solution_yaml:
        (d / "solution.yaml").write_text("- command: echo tackroom > answer.txt\n"
                                         "  min_timeout_sec: 1\n")
    else:
        (d / "solution.sh").write_text("#!/bin/bash\necho tackroom > /app/answer.txt\n")
    return d


def test_import_harbor_and_terminal_bench_building_what_they_need(tmp_path):
    """Tasks with a Dockerfile are built (the Terminal-Bench base image, an apt-get install);
    what only Docker can run (extra services) or what the task lacks is skipped, with why."""
    src = tmp_path / "src"
    write_task(src, "harbor-ok", env={"notes.txt": "hello\n"})
    write_task(src, "harbor-apt", env={"Dockerfile": "FROM ubuntu\nRUN apt-get update && "
                                                     "apt-get install -y jq\n"})
    write_task(src, "harbor-pip-tests", test="pip install pytest && pytest /tests")
    (src / "broken").mkdir()
    (src / "broken" / "instruction.md").write_text("no tests here\n")
    _terminal_bench_task(src, "tb-ok", run_tests="#!/bin/bash\nbash $TEST_DIR/check_answer.sh\n")
    _terminal_bench_task(src, "tb-yaml-solution", run_tests="bash /tests/check_answer.sh\n",
                         solution_yaml=True)
    _terminal_bench_task(src, "tb-uv", run_tests="uv run pytest $TEST_DIR/test_outputs.py -rA\n")
    _terminal_bench_task(src, "tb-no-run-tests", run_tests=None)
    _terminal_bench_task(src, "tb-services", run_tests="bash /tests/check_answer.sh\n",
                         compose="services:\n  client:\n    build: .\n  search:\n"
                                 "    image: elasticsearch\n")  # redis would run: mapped
    store = tmp_path / "store"
    results = {r.id: r for r in import_tasks(src, store)}
    assert {k for k, r in results.items() if r.imported} == {
        "harbor-ok", "harbor-apt", "tb-ok", "tb-yaml-solution"}, results
    assert results["harbor-apt"].environment in ("built", "cached")
    assert results["harbor-ok"].environment == ""  # no Dockerfile: the host system
    # Without a Dockerfile there is no build to put a test install in.
    assert "pip" in results["harbor-pip-tests"].reason
    assert "tests/test.sh" in results["broken"].reason
    assert "uv not found" in results["tb-uv"].reason
    assert "run-tests.sh" in results["tb-no-run-tests"].reason
    assert "services" in results["tb-services"].reason and "docker" in results["tb-services"].reason
    imported = load_task(store / "tb-ok")
    assert imported.instruction.startswith("Write the word 'tackroom'")
    assert (imported.workdir, imported.agent_timeout_s, imported.builds) == ("/app", 60.0, True)
    for name in ("tb-ok", "tb-yaml-solution", "harbor-ok", "harbor-apt"):
        check = check_task(load_task(store / name))
        assert check.ok and check.solved == 1.0, (name, check)


def test_import_checks_each_task_in_the_sandbox_and_lists_every_folder(tmp_path):
    """A task is kept only when its tests fail untouched and pass solved; what the sandbox
    lacks is named; a folder that is not a task is listed, never skipped in silence."""
    src = tmp_path / "src"
    write_task(src, "good")
    write_task(src, "always-passes", test="echo 1 > /logs/verifier/reward.txt")
    write_task(src, "wrong-solution", solve="echo nothing to see")
    write_task(src, "needs-a-runner", test="tackroom-missing-runner /tests")
    (src / "docs").mkdir()
    (src / "docs" / "README.md").write_text("not a task\n")
    store = tmp_path / "store"
    seen: list[str] = []
    results = {r.id: r for r in import_tasks(src, store, on_task=lambda r: seen.append(r.id))}
    assert seen == sorted(results) and len(results) == 5
    assert results["good"].imported and results["good"].checked
    assert (store / "good" / "instruction.md").is_file()
    for name in ("always-passes", "wrong-solution", "needs-a-runner", "docs"):
        assert not results[name].imported and not (store / name).exists(), name
    assert "tests pass on the untouched task" in results["always-passes"].reason
    assert "reference solution does not pass its tests" in results["wrong-solution"].reason
    lacks = results["needs-a-runner"].reason
    assert "sandbox lacks" in lacks and "tackroom-missing-runner not found" in lacks
    assert results["docs"].reason == NOT_A_TASK
    # --no-check keeps what can be laid out, and says it was not checked.
    unchecked = {r.id: r for r in import_tasks(src, store, check=False)}
    assert unchecked["always-passes"].imported and not unchecked["always-passes"].checked
    assert not unchecked["docs"].imported
    p = run_cli("tasks", "import", str(src / "always-passes"), "--no-check", cwd=tmp_path,
                env_extra={"TACKROOM_TASKS": str(tmp_path / "tasks")})
    assert p.returncode == 0, p.stderr
    row = next(line for line in p.stdout.splitlines()
               if line.startswith("│") and "always-passes" in line)
    assert "yes" in row and "not run" in row, p.stdout


def test_cli_import_then_eval_the_imported_task(tmp_path):
    src = tmp_path / "src"
    _terminal_bench_task(src, "tb-cli", run_tests="bash $TEST_DIR/check_answer.sh\n")
    write_task(src, "needs-net", test="curl -s http://example.com > /dev/null")
    env = {"TACKROOM_TASKS": str(tmp_path / "tasks")}
    p = run_cli("tasks", "import", str(src), cwd=tmp_path, env_extra=env)
    assert p.returncode == 0, p.stderr
    rows = {line.split()[1]: line for line in p.stdout.splitlines() if line.startswith("│")}
    assert "yes" in rows["tb-cli"] and "passes" in rows["tb-cli"], p.stdout
    assert "skipped" in rows["needs-net"], p.stdout
    assert "tests/test.sh runs 'curl' (needs the network)" in " ".join(p.stdout.split())
    assert "1 of 2 folder(s) imported" in p.stdout
    listing = run_cli("tasks", "--suite", "terminal", cwd=tmp_path, env_extra=env)
    assert "tb-cli" in listing.stdout and "csv-column-sum" in listing.stdout
    db = str(tmp_path / "r.duckdb")
    p = run_cli("eval", "--suite", "terminal", "--tasks", "tb-cli", "--seeds", "0", "--db", db,
                cwd=tmp_path, env_extra=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("100%") >= 2  # both harnesses


def test_bad_input_is_one_clear_line(tmp_path):
    err = one_line_error(run_cli("tasks", "import", str(tmp_path / "nope"), cwd=tmp_path))
    assert "no such directory" in err
    (tmp_path / "empty").mkdir()
    err = one_line_error(run_cli("tasks", "import", str(tmp_path / "empty"), cwd=tmp_path))
    assert "no task directories found" in err
    err = one_line_error(run_cli("eval", "--suite", "terminal", "--tasks", "no-such-task",
                                 "--db", str(tmp_path / "r.duckdb"), cwd=tmp_path))
    assert "no-such-task" in err
    write_task(tmp_path / "tasks" / "terminal", "bad-toml", toml="[agent\n")
    err = one_line_error(run_cli("tasks", "--suite", "terminal", cwd=tmp_path,
                                 env_extra={"TACKROOM_TASKS": str(tmp_path / "tasks")}))
    assert "task.toml is not valid TOML" in err and "bad-toml" in err


# -- the two shell parsers ---------------------------------------------------------------------
def test_bash_block_parser_reads_blocks_and_submit():
    h = HarnessSession(load_harness("terminal-bash"), "t")

    def parse(text: str):
        return h.parse(PolicyResponse(text=text))

    assert parse("```bash\nls\n```\nsubmit").actions == [Shell("ls"), Submit()]
    assert parse("All done.\n\nSubmit.").actions == [Submit()]
    assert parse("```python\nprint(1)\n```\n```\necho plain\n```").actions == [
        Shell("echo plain")]
    assert "only ```bash blocks run" in parse("```python\nprint(1)\n```").error
    assert "not closed" in parse("```bash\nls -la\n").error
    assert "no ```bash block" in parse("I think we should list the files.").error
    # Commands that contain ``` survive the expert's encoding and the parser.
    cmd = "cat > README.md <<'EOF'\n```\ncode\n```\nEOF"
    encoded = h.encode([Shell(cmd), Submit()], obs=None)  # type: ignore[arg-type]
    assert h.parse(encoded).actions == [Shell(cmd), Submit()]


def test_terminal_tool_parser_and_key_names():
    h = HarnessSession(load_harness("terminal-keys"), "t")

    def parse(*calls: tuple[str, str]):
        return h.parse(PolicyResponse(tool_calls=[ToolCall(f"c{i}", n, a)
                                                  for i, (n, a) in enumerate(calls)]))

    (typed,) = parse(("send_keys", '{"keystrokes": "ls\\n"}')).actions
    assert isinstance(typed, TypeText) and typed.text == "ls\n" and typed.wait_s == 10.0
    assert parse(("send_keys", '{"keystrokes": "C-c", "wait_s": 1}'),
                 ("submit", "")).actions == [Press("C-c"), Submit()]
    assert "not valid JSON" in parse(("send_keys", '{"keystrokes": ')).error
    assert "wait_s must be between" in parse(("send_keys", '{"keystrokes": "x", '
                                                           '"wait_s": -1}')).error
    assert "NUL" in parse(("send_keys", '{"keystrokes": "a\\u0000b"}')).error
    assert "no tool call" in h.parse(PolicyResponse(text="```bash\nls\n```")).error


def test_get_suite_knows_terminal_and_default_harnesses():
    s = get_suite("terminal")
    assert s.name == "terminal" and tuple(s.default_harnesses) == ("terminal-bash",
                                                                   "terminal-keys")


def test_a_verifier_that_cannot_run_is_an_infra_error_not_a_failure(tmp_path):
    """A missing test runner judged nothing: `infra_error` with its output. A missing *path*
    (what the agent had to build) is a real failure. Either way the output is recorded."""
    import tackroom

    store = tmp_path / "store"
    write_task(store, "no-runner", test="echo checking; tackroom-no-such-runner /tests")
    write_task(store, "no-binary", test="echo checking; ./built-by-the-agent")
    write_task(store, "prints", test="echo the-verifier-says-hello; "
               "echo 1 > /logs/verifier/reward.txt", solve="true")
    suite = TerminalSuite(store=store)
    run = tackroom.evaluate(suite, tasks=["no-runner", "no-binary", "prints"],
                            harnesses=["terminal-bash"], policies=["expert"], seeds=[0],
                            store=tmp_path / "r.duckdb")
    final = {r["task"].split("/")[-1]: r for r in run.final_episodes()}
    assert final["no-runner"]["outcome"] == "infra_error"
    assert "verifier could not run" in final["no-runner"]["error"]
    assert "tackroom-no-such-runner not found" in final["no-runner"]["error"]
    assert final["no-binary"]["outcome"] == "failure"
    assert final["prints"]["outcome"] == "success"
    eps = {ep.task.split("/")[-1]: ep for ep in run.load_episodes()}
    assert "the-verifier-says-hello" in eps["prints"].meta["verifier"]["output"]
    assert eps["prints"].meta["verifier"]["exit"] == 0
    assert "built-by-the-agent" in eps["no-binary"].meta["verifier"]["output"]
    shown = run_cli("show", run.id, eps["prints"].episode_id, "--db", str(tmp_path / "r.duckdb"),
                    cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "verifier (exit 0)" in shown.stdout and "the-verifier-says-hello" in shown.stdout


def test_the_tests_run_when_the_budget_ends_the_episode(tmp_path):
    """Terminal-Bench's rule: the tests run whenever the agent stops. One action per turn and
    one turn: the expert's command runs, its `submit` never does — the tests decide."""
    import tackroom

    (tmp_path / "one-turn.toml").write_text(
        'extends = "terminal-bash"\nname = "one-turn"\n[loop]\nactions_per_turn = 1\n'
        "[budget]\nturns = 1\n")
    write_task(tmp_path / "store", "solved-on-budget")
    write_task(tmp_path / "store", "unsolved-on-budget", solve="touch other.txt")
    suite = TerminalSuite(store=tmp_path / "store")
    run = tackroom.evaluate(suite, tasks=["solved-on-budget", "unsolved-on-budget"],
                            harnesses=[str(tmp_path / "one-turn.toml")], policies=["expert"],
                            seeds=[0], store=tmp_path / "r.duckdb")
    eps = {ep.task.split("/")[-1]: ep for ep in run.load_episodes()}
    solved, unsolved = eps["solved-on-budget"], eps["unsolved-on-budget"]
    assert [len(solved.turns), len(unsolved.turns)] == [1, 1]
    assert solved.outcome.value == "success" and solved.reward == 1.0
    assert solved.meta["verified_on_stop"] is True
    assert unsolved.outcome.value == "budget_exhausted" and unsolved.reward == 0.0
    assert unsolved.meta["verified_on_stop"] is True and "verifier" in unsolved.meta
    assert unsolved.error == "turn budget of 1 used"
