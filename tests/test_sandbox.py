"""The bubblewrap sandbox: its API, and a battery of hostile commands it must contain.

Every hostile command runs in a real sandbox (real bwrap) and must end with the
outcome written next to it; afterwards the host must be unchanged: no file
written outside the task directory, no process left behind, no mount left over.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from tackroom.sandbox import (
    OUTPUT_CAP,
    BubblewrapSandbox,
    CommandResult,
    Limits,
    SandboxUnavailable,
    sandbox_available,
)

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap cannot run here")

TOKEN = uuid.uuid4().hex[:10]
PWNED = [f"/tmp/tackroom-pwned-{TOKEN}", f"/root/tackroom-pwned-{TOKEN}",
         f"/etc/tackroom-pwned-{TOKEN}", f"/work/tackroom-pwned-{TOKEN}",
         f"/home/tackroom-pwned-{TOKEN}", f"/usr/tackroom-pwned-{TOKEN}"]
LIMITS = Limits(wall_s=2.0, memory_mb=256, processes=32, disk_mb=16)

#: (name, command, expected outcome). Outcomes: denied = the command fails, harmlessly;
#: contained = it may "succeed" but only inside the sandbox (checked by HOST_CHECKS and
#: the final host test); timeout / memory / processes / disk = killed at that limit.
HOSTILE: list[tuple[str, str, str]] = [
    # writing outside the task directory
    ("write-root-home", f"echo x > {PWNED[1]}", "denied"),
    ("write-etc", f"echo x > {PWNED[2]}", "denied"),
    ("write-usr-bin", "touch /usr/bin/tackroom-pwned", "denied"),
    ("write-work", f"mkdir -p {PWNED[3]}", "denied"),
    ("write-home", f"mkdir -p {PWNED[4]}", "denied"),
    ("write-host-tmp", f"echo x > {PWNED[0]} && cat {PWNED[0]}", "contained"),
    ("write-parent-of-task", "echo x > ../outside-file; echo x > /task/../escape", "denied"),
    ("hardlink-host-file", "ln /etc/passwd /task/passwd-link", "denied"),
    ("mount-tmpfs", "mount -t tmpfs none /usr", "denied"),
    ("chmod-system", "chmod 777 /usr/bin/env", "denied"),
    # reading what is not the task's
    ("read-root", "ls /root || cat /root/.bashrc", "denied"),
    ("read-work", "cat /work/main/pyproject.toml", "denied"),
    ("read-home", "ls /home/*", "denied"),
    ("read-shadow", "cat /etc/shadow", "denied"),
    ("symlink-to-root", "ln -s /root r && ls r/", "denied"),
    ("host-env-secrets", "env | grep -q TACKROOM_TEST_SECRET && echo LEAK; exit 1", "denied"),
    # processes and the host
    ("see-host-processes", "test $(ls /proc | grep -c '^[0-9]') -lt 10 && ! kill -0 {PID}",
     "contained"),
    ("kill-host-process", "kill -9 {PID}", "denied"),
    ("kill-parent", "kill -9 $PPID", "denied"),
    ("kill-everything", "sleep 30 & sleep 0.2; kill -9 -1; wait; echo alone", "contained"),
    ("setsid-escape", "setsid nohup sleep 300 >/dev/null 2>&1 & echo started", "contained"),
    ("double-fork-daemon", "(sleep 300 &) ; echo started", "contained"),
    ("become-root", "su -c id || sudo id", "denied"),
    ("set-hostname", "hostname evil", "denied"),
    ("set-clock", "date -s '2001-01-01'", "denied"),
    ("sysctl-write", "echo 1 > /proc/sys/kernel/sysrq", "denied"),
    # the network
    ("network-http", "curl -sS --max-time 2 http://example.com", "denied"),
    ("network-raw-ip", "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), "
     "timeout=2)\"", "denied"),
    ("network-host-loopback", "python3 -c \"import socket; socket.create_connection(("
     "'127.0.0.1', {PORT}), timeout=2)\"", "denied"),
    ("network-dns", "getent hosts example.com", "denied"),
    # resources
    ("fork-bomb", ":(){ :|:& };:; sleep 1", "processes"),
    ("python-fork-loop", "python3 -c \"import os\nwhile True: os.fork()\"", "processes"),
    ("memory-hog-python", "python3 -c \"x = bytearray(2 << 30)\"", "memory"),
    ("memory-hog-awk", "awk 'BEGIN { s = \"a\"; while (1) s = s s }'", "memory"),
    ("sleep-past-timeout", "sleep 60", "timeout"),
    ("busy-loop", "while :; do :; done", "timeout"),
    ("ignore-signals", "trap '' TERM INT HUP; sleep 60", "timeout"),
    ("close-pipes-and-linger", "exec >&- 2>&-; sleep 60", "timeout"),
    ("fill-task-dir", "head -c 100000000 /dev/zero > big", "disk"),
    ("fill-task-dir-many-files",
     "for i in $(seq 200); do head -c 1000000 /dev/zero > f$i || exit 1; done", "disk"),
    ("fill-tmp", "head -c 100000000 /dev/zero > /tmp/big", "disk"),
    ("flood-output", "yes tackroom | head -c 50000000", "contained"),
]


def outcome(res: CommandResult) -> str:
    """The one word a hostile command's result is recorded as."""
    if res.killed:
        return res.killed
    return "denied" if res.exit_code != 0 else "contained"


@pytest.fixture(scope="module")
def host_port():
    """A TCP service on the host's loopback: the sandbox must not reach it."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    hits: list[object] = []

    def serve() -> None:
        while True:
            try:
                hits.append(srv.accept())
            except OSError:
                return

    threading.Thread(target=serve, daemon=True).start()
    yield srv.getsockname()[1], hits
    srv.close()


@pytest.fixture(scope="module")
def battery(tmp_path_factory, host_port):
    """One sandbox for the whole battery, plus a snapshot of the host around it."""
    root = tmp_path_factory.mktemp("battery")
    (root / "task").mkdir()
    (root / "task" / "keep.txt").write_text("task file\n")
    outside = root / "outside"
    outside.mkdir()
    (outside / "canary.txt").write_text("do not touch\n")
    os.environ["TACKROOM_TEST_SECRET"] = "sk-should-not-leak"
    box = BubblewrapSandbox(root / "task", LIMITS)
    yield {"box": box, "root": root, "outside": outside, "port": host_port[0],
           "hits": host_port[1], "results": {}}
    box.close()
    os.environ.pop("TACKROOM_TEST_SECRET", None)


@pytest.mark.parametrize(("name", "command", "expected"), HOSTILE,
                         ids=[h[0] for h in HOSTILE])
def test_hostile_command_is_contained(battery, name, command, expected):
    box: BubblewrapSandbox = battery["box"]
    cmd = command.replace("{PID}", str(os.getpid())).replace("{PORT}", str(battery["port"]))
    res = box.run(cmd)
    got = outcome(res)
    battery["results"][name] = got
    assert got == expected, f"{name}: expected {expected}, got {got}: {res.output(600)}"
    if name == "flood-output":
        assert len(res.stdout) <= OUTPUT_CAP and res.stdout.startswith("tackroom\n")
    if name == "write-host-tmp":
        assert res.stdout == "x\n"  # it wrote to the sandbox's own /tmp


def test_battery_is_large_enough():
    assert len(HOSTILE) >= 30
    assert {"timeout", "memory", "processes", "disk", "denied", "contained"} == {
        h[2] for h in HOSTILE}


def test_host_unchanged_after_the_battery(battery):
    """Runs after the battery (file order): nothing outside the task dir changed."""
    box: BubblewrapSandbox = battery["box"]
    assert len(battery["results"]) == len(HOSTILE), "run the whole battery first"
    for path in PWNED + ["/usr/bin/tackroom-pwned"]:
        assert not os.path.lexists(path), path
    outside: Path = battery["outside"]
    assert sorted(p.name for p in outside.iterdir()) == ["canary.txt"]
    assert (outside / "canary.txt").read_text() == "do not touch\n"
    assert sorted(p.name for p in battery["root"].iterdir()) == ["outside", "task"]
    assert not battery["hits"], "the sandbox reached a service on the host's loopback"
    assert oct(os.stat("/usr/bin/env").st_mode & 0o777) == "0o755"
    # No process of the sandbox's uid survives its commands.
    leftovers = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _uid(p) == box.uid]
    assert leftovers == [], f"stray sandbox processes: {leftovers}"
    # The task file is still there; the disk-filling files were capped by the limit.
    assert (battery["root"] / "task" / "keep.txt").read_text() == "task file\n"
    size = sum(f.stat().st_size for f in (battery["root"] / "task").rglob("*") if f.is_file())
    assert size <= LIMITS.disk_mb << 20


def _uid(proc: Path) -> int | None:
    try:
        for line in (proc / "status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


# -- the API -----------------------------------------------------------------------------------
def test_run_captures_output_exit_code_stdin_and_env(tmp_path):
    with BubblewrapSandbox(tmp_path) as box:
        res = box.run("cat; echo \"$GREETING\" >&2; pwd; exit 3", stdin="from stdin\n",
                      env={"GREETING": "hi"})
        assert (res.exit_code, res.stdout, res.stderr) == (3, "from stdin\n/task\n", "hi\n")
        assert not res.timed_out and res.killed is None and res.duration_s > 0
        assert box.task_path == "/task"


def test_files_persist_between_commands_and_reach_the_host(tmp_path):
    (tmp_path / "in.txt").write_text("data\n")
    with BubblewrapSandbox(tmp_path) as box:
        assert box.run("cp in.txt out.txt && echo more >> out.txt").exit_code == 0
        assert box.run("cat out.txt").stdout == "data\nmore\n"
        assert (tmp_path / "out.txt").read_text() == "data\nmore\n"  # host sees it live
        (tmp_path / "host.txt").write_text("from host\n")
        assert box.run("cat host.txt").stdout == "from host\n"
    assert (tmp_path / "out.txt").read_text() == "data\nmore\n"  # and keeps it after close
    assert str(tmp_path) not in Path("/proc/self/mounts").read_text()


def test_timeout_override_and_output_marker(tmp_path):
    with BubblewrapSandbox(tmp_path, Limits(wall_s=30)) as box:
        res = box.run("echo start; sleep 20", timeout_s=0.5)
        assert res.timed_out and res.killed == "timeout" and res.stdout == "start\n"
        assert "timed out" in res.output()
        long = box.run("seq 1 100000")
        text = long.output(limit=200)
        assert "characters cut" in text and text.startswith("1\n2\n") and "100000" in text


def test_binds_are_writable_extra_mounts(tmp_path):
    work, logs = tmp_path / "work", tmp_path / "logs"
    work.mkdir()
    logs.mkdir()
    with BubblewrapSandbox(work, binds={"/logs": logs}) as box:
        assert box.run("echo 1 > /logs/reward.txt").exit_code == 0
        assert box.path("/logs/reward.txt") == "/logs/reward.txt"
    assert (logs / "reward.txt").read_text() == "1\n"


def test_process_limit_counts_only_the_sandbox(tmp_path):
    """The host runs far more than 8 processes as root; the sandbox still gets its 8."""
    with BubblewrapSandbox(tmp_path, Limits(processes=8)) as box:
        assert box.run("for i in 1 2 3; do sleep 0.2 & done; wait; echo ok").stdout == "ok\n"
        assert box.run("for i in $(seq 20); do sleep 0.3 & done; wait").killed == "processes"


def test_unsafe_local_runs_on_the_host_with_limits(tmp_path):
    with BubblewrapSandbox(tmp_path, Limits(wall_s=1), unsafe_local=True) as box:
        assert box.task_path == str(tmp_path)
        assert box.run("pwd").stdout == f"{tmp_path}\n"
        assert box.run("sleep 5").killed == "timeout"


def _path_without_bwrap(tmp_path: Path) -> str:
    """A PATH with every tool of /usr/bin except bwrap (a machine without bubblewrap)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for entry in os.scandir("/usr/bin"):
        if entry.name != "bwrap":
            os.symlink(entry.path, bin_dir / entry.name)
    return str(bin_dir)


def test_missing_bwrap_refuses_and_names_unsafe_local(tmp_path):
    code = ("from pathlib import Path; from tackroom.sandbox import BubblewrapSandbox, SandboxUnavailable\n"
            "try:\n    BubblewrapSandbox(Path('.'))\nexcept SandboxUnavailable as e:\n    print(e.line())")
    env = {**os.environ, "PATH": _path_without_bwrap(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=tmp_path, timeout=60)
    assert "'bwrap' is not installed" in out.stdout and "--unsafe-local" in out.stdout
    assert issubclass(SandboxUnavailable, Exception)


def test_missing_bwrap_cli_is_one_line_and_unsafe_local_runs(tmp_path):
    env = {**os.environ, "PATH": _path_without_bwrap(tmp_path),
           "TACKROOM_TASKS": str(tmp_path / "tasks")}
    tackroom = shutil.which("tackroom", path=str(Path(sys.executable).parent))
    assert tackroom
    args = [tackroom, "eval", "--suite", "terminal", "--tasks", "greet-script",
            "--harness", "terminal-bash", "--seeds", "0", "--db", str(tmp_path / "r.duckdb")]
    res = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr
    assert "'bwrap' is not installed" in lines[0] and "--unsafe-local" in lines[0]
    res = subprocess.run(args + ["--unsafe-local"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "100%" in res.stdout


# -- the contract and its providers --------------------------------------------------------
def test_both_providers_are_registered_and_one_function_chooses(tmp_path):
    from tackroom.core.errors import ConfigError
    from tackroom.core.registry import names
    from tackroom.sandbox import DEFAULT, Sandbox, provider
    from tackroom.sandbox.docker import DockerSandbox

    assert names("sandbox") == ["bubblewrap", "docker"] and DEFAULT == "bubblewrap"
    assert not provider().runs_images and provider("docker").runs_images
    assert provider().unavailable() is None
    with pytest.raises(ConfigError) as e:
        provider("dokcer")
    assert "--sandbox" in e.value.line() and "did you mean docker" in e.value.line()
    # Both providers' sandboxes meet the contract (Docker's checked on the class: no daemon).
    with BubblewrapSandbox(tmp_path) as box:
        assert isinstance(box, Sandbox)
    for name in ("run", "popen", "path", "copy_in", "copy_out", "close", "task_path"):
        assert hasattr(DockerSandbox, name), name
    out = subprocess.run([sys.executable, "-m", "tackroom.cli", "eval", "--suite", "terminal",
                          "--sandbox", "dokcer", "--seeds", "0", "--db",
                          str(tmp_path / "r.duckdb")], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "did you mean docker" in out.stderr


def test_copy_in_and_out_keep_files_and_leave_special_files_behind(tmp_path):
    work, src, back = tmp_path / "work", tmp_path / "src", tmp_path / "back"
    for d in (work, src, back):
        d.mkdir()
    (src / "a.txt").write_text("hello")
    with BubblewrapSandbox(work, binds={"/out": back}) as box:
        box.copy_in(src, "/task/in")
        res = box.run("cat in/a.txt && mkfifo in/pipe && ln -s a.txt in/link && "
                      "mkdir -p /out/sub && echo x > /out/sub/b.txt")
        assert res.exit_code == 0 and res.stdout == "hello", res.output()
        box.copy_out("/task/in", tmp_path / "copied")
    copied = tmp_path / "copied"
    assert (copied / "a.txt").read_text() == "hello" and (copied / "link").is_symlink()
    assert not (copied / "pipe").exists() and not (work / "in" / "pipe").exists()
    assert (back / "sub" / "b.txt").read_text() == "x\n"


def test_images_never_import_the_sandbox():
    """The sandbox runs what images builds: the dependency points one way."""
    import ast

    root = Path(__file__).resolve().parents[1] / "tackroom" / "images"
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(m.startswith("tackroom.sandbox") for m in mods), path


def _thread_status(field: str) -> str:
    for line in Path("/proc/thread-self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(field)


@pytest.mark.skipif(os.geteuid() != 0, reason="switching a thread's credentials needs root")
def test_a_thread_is_the_images_root_alone_and_comes_back_whole():
    from tackroom.images.userns import IMAGE_UID, thread_as_image_root, thread_creds_supported

    if not thread_creds_supported():
        pytest.skip(f"no system call numbers for {os.uname().machine}: setpriv is used")
    before = (os.getgroups(), _thread_status("CapEff"), _thread_status("Uid"))
    inside, release, seen = threading.Event(), threading.Event(), {}

    def switched() -> None:
        with thread_as_image_root():
            seen["uid"] = _thread_status("Uid").split()
            seen["gid"] = _thread_status("Gid").split()
            seen["groups"] = os.getgroups()
            out = subprocess.run(["sh", "-c", "grep -E '^(Uid|CapEff|CapPrm):' /proc/self/status"],
                                 capture_output=True, text=True, cwd="/")
            seen["child"] = out.stdout.split()
            inside.set()
            release.wait(30)
        seen["after"] = (os.getgroups(), _thread_status("CapEff"), _thread_status("Uid"))

    worker = threading.Thread(target=switched)
    worker.start()
    assert inside.wait(30)
    try:
        # Meanwhile the rest of the process is root, as it was.
        assert (os.geteuid(), _thread_status("Uid")) == (0, before[2])
    finally:
        release.set()
        worker.join(30)
    uid = str(IMAGE_UID)
    assert seen["uid"] == [uid, uid, "0", uid]  # real, effective, saved (to come back), fs
    assert seen["gid"][:2] == [uid, uid] and seen["groups"] == []
    # What it starts is that uid alone, with no capability left.
    assert seen["child"] == ["Uid:", uid, uid, uid, uid, "CapPrm:", "0000000000000000",
                             "CapEff:", "0000000000000000"]
    assert seen["after"] == before
