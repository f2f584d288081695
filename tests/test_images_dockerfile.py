"""Dockerfiles read into build steps, base images mapped to Debian, test-script installs hoisted."""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import textwrap

import pytest

from tackroom.core.errors import ConfigError, TackroomError
from tackroom.images.bases import BaseSpec, UnmappedBase, resolve_base
from tackroom.images.dockerfile import (
    DEFAULT_ENV,
    Copy,
    ImageConfig,
    Run,
    User,
    Workdir,
    parse_dockerfile,
)
from tackroom.images.testdeps import MARK, split_test_script

PATH = DEFAULT_ENV["PATH"]


def parse(text: str, **kw):
    return parse_dockerfile(textwrap.dedent(text).lstrip("\n"), **kw)


# -- Dockerfiles ---------------------------------------------------------------------------

HARBOR = """
    # syntax=docker/dockerfile:1
    FROM python:3.13-slim-bookworm

    ARG DEBIAN_FRONTEND=noninteractive
    ARG APP_USER=agent
    RUN apt-get update && apt-get install -y --no-install-recommends \\
            curl \\
            # the tests clone a repository
            git \\

        && rm -rf /var/lib/apt/lists/*
    WORKDIR /app
    COPY ./files/ /app/
    copy --chown=1000:1000 --chmod=755 --link scripts/*.sh ./bin/
    ENV PYTHONUNBUFFERED=1 GREETING="hello world"
    ENV PATH=/app/bin:$PATH
    RUN pip install --no-cache-dir numpy==2.0.0
    WORKDIR data
    USER ${APP_USER}
    EXPOSE 8000
    LABEL maintainer="someone"
    CMD ["bash"]
    """


def test_harbor_dockerfile_steps():
    df = parse(HARBOR, where="tasks/x/environment/Dockerfile")
    assert df.base == "python:3.13-slim-bookworm"
    assert df.unsupported is None
    apt, wd, files, scripts, pip, wd2, user = df.steps
    assert isinstance(apt, Run)
    # continuations joined, the comment and the blank line inside them dropped
    assert apt.argv[:2] == ("/bin/sh", "-c")
    assert apt.argv[2].split() == ["apt-get", "update", "&&", "apt-get", "install", "-y",
                                   "--no-install-recommends", "curl", "git", "&&", "rm",
                                   "-rf", "/var/lib/apt/lists/*"]
    assert apt.env == {"PATH": PATH, "DEBIAN_FRONTEND": "noninteractive", "APP_USER": "agent"}
    assert (apt.workdir, apt.user) == ("/", "root")
    assert apt.text.startswith("RUN apt-get update") and "# the tests" in apt.text
    assert wd == Workdir("/app")
    assert files == Copy(("./files/",), "/app", True, workdir="/app")
    assert scripts == Copy(("scripts/*.sh",), "/app/bin", True, chown="1000:1000",
                           chmod="755", workdir="/app")
    assert isinstance(pip, Run) and pip.argv[2] == "pip install --no-cache-dir numpy==2.0.0"
    assert pip.env["GREETING"] == "hello world" and pip.env["PYTHONUNBUFFERED"] == "1"
    assert pip.env["PATH"] == f"/app/bin:{PATH}"
    assert pip.workdir == "/app"
    assert wd2 == Workdir("/app/data") and user == User("agent")
    assert df.config == ImageConfig(
        env={"PATH": f"/app/bin:{PATH}", "PYTHONUNBUFFERED": "1", "GREETING": "hello world"},
        workdir="/app/data", user="agent", cmd=("bash",), entrypoint=None,
        shell=("/bin/sh", "-c"))


def test_heredoc_runs_and_copies():
    df = parse("""
        FROM debian:bookworm
        ENV NAME=world
        RUN <<EOF
        set -e
        echo "hello $NAME"
        EOF
        RUN python3 <<'PY' > /out.txt
        print("$NAME")
        PY
        RUN <<-EOF
        \t\techo tabs
        \tEOF
        RUN <<EOF
        #!/usr/bin/env python3
        print(1)
        EOF
        COPY <<EOF /etc/greeting
        hi $NAME \\$HOME
        EOF
        COPY <<"EOF" ./raw.txt
        hi $NAME
        EOF
        RUN echo after
        """.replace("\\t", "\t"))
    plain, fed, chomped, shebang, copied, raw, after = df.steps
    # a lone heredoc is the script passed to the shell; the shell expands it
    assert plain.argv == ("/bin/sh", "-c", 'set -e\necho "hello $NAME"\n')
    # a heredoc fed to a command: the whole thing goes to the shell, delimiter and all
    assert fed.argv == ("/bin/sh", "-c", "python3 <<'PY' > /out.txt\nprint(\"$NAME\")\nPY")
    assert chomped.argv == ("/bin/sh", "-c", "echo tabs\n")
    # a shebang heredoc runs as a file, through its interpreter
    assert shebang.argv[-1] == "#!/usr/bin/env python3\nprint(1)\n"
    assert shebang.argv[0] == "/bin/sh" and '"$f"' in shebang.argv[2]
    assert copied.sources == ("EOF",) and copied.dest == "/etc/greeting"
    assert copied.heredoc == {"EOF": "hi world $HOME\n"} and not copied.dest_is_dir
    assert raw.heredoc == {"EOF": "hi $NAME\n"} and raw.dest == "/raw.txt"
    assert after.argv == ("/bin/sh", "-c", "echo after")


def test_heredoc_after_a_space_and_run_flags():
    df = parse("""
        FROM debian
        RUN --mount=type=cache,target=/root/.cache/pip cat > /etc/app.conf << 'EOF'
        [server]
        port = $PORT
        EOF
        RUN --network=none echo offline
        """)
    conf, offline = df.steps
    # BuildKit reads "<< 'EOF'" as a heredoc too; the shell sees it closed up, quoted
    assert conf.argv[-1] == "cat > /etc/app.conf <<'EOF'\n[server]\nport = $PORT\nEOF"
    assert offline.argv[-1] == "echo offline" and df.unsupported is None
    secret = parse_dockerfile("FROM debian\nRUN --mount=type=secret,id=tok cat /run/secrets/tok\n")
    assert "--mount=type=secret" in secret.unsupported
    with pytest.raises(ConfigError, match="unknown flag --bogus"):
        parse_dockerfile("FROM debian\nRUN --bogus echo\n")


def test_escape_directive_backtick():
    df = parse("""
        # escape=`
        FROM debian:bookworm
        ENV WINPATH=C:\\tools\\bin
        RUN echo one `
            two
        COPY src\\file.txt `
             /dst/
        """)
    env, copy = df.steps[0].env, df.steps[1]
    assert env["WINPATH"] == "C:\\tools\\bin"  # the backslash is an ordinary character
    assert df.steps[0].argv[2] == "echo one     two"
    assert copy == Copy(("src\\file.txt",), "/dst", True)
    # with the default escape, the backslash escapes
    assert parse("FROM debian\nENV P=C:\\tools\n").config.env["P"] == "C:tools"


def test_args_are_scoped_as_docker_scopes_them():
    text = """
        ARG VERSION=1.0
        ARG SUITE=bookworm
        FROM debian:${SUITE}
        RUN echo $VERSION
        ARG VERSION
        ARG LEVEL=${VERSION}-x
        ARG UNSET
        RUN echo $VERSION
        ENV LEVEL=env-wins
        RUN echo $LEVEL
        """
    df = parse(text)
    assert df.base == "debian:bookworm"
    before, after, env_wins = df.steps
    assert before.env == {"PATH": PATH}  # an ARG before FROM is only for FROM
    assert after.env == {"PATH": PATH, "VERSION": "1.0", "LEVEL": "1.0-x"}
    assert env_wins.env["LEVEL"] == "env-wins"
    assert "VERSION" not in df.config.env  # ARGs do not persist in the image
    built = parse(text, build_args={"VERSION": "2.0", "SUITE": "trixie", "UNSET": "u",
                                    "UNDECLARED": "nope"})
    assert built.base == "debian:trixie"
    assert built.steps[1].env == {"PATH": PATH, "VERSION": "2.0", "LEVEL": "2.0-x", "UNSET": "u"}


def test_platform_args_are_predefined_but_scoped():
    df = parse("""
        FROM debian:bookworm
        RUN echo $TARGETARCH
        ARG TARGETARCH
        RUN echo $TARGETARCH
        """, build_args={"TARGETARCH": "riscv64"})
    assert "TARGETARCH" not in df.steps[0].env  # undeclared in the stage: not visible
    assert df.steps[1].env["TARGETARCH"] == "riscv64"
    declared = parse("FROM debian\nARG TARGETOS\nRUN true\n").steps[0].env
    assert declared["TARGETOS"] == "linux"


def test_variable_substitution_forms():
    df = parse("""
        FROM debian
        ARG SET=yes
        ARG EMPTY=
        ENV A=${SET:-no} B=${MISSING:-fallback} C=${SET:+alt} D=${MISSING:+alt} \\
            E=${EMPTY-dash} F=${EMPTY:-colon} G=\\$SET H='$SET' I="$SET and ${SET}" J=$MISSING
        ENV OLD a $SET value
        WORKDIR /srv/$SET
        ENV abc=hello
        ENV abc=bye def=$abc
        """)
    assert (df.config.env["abc"], df.config.env["def"]) == ("bye", "hello")  # Docker's example
    env = df.config.env
    assert [env[k] for k in "ABCDEFGHIJ"] == ["yes", "fallback", "alt", "", "", "colon", "$SET",
                                              "$SET", "yes and yes", ""]
    assert env["OLD"] == "a yes value"
    assert df.config.workdir == "/srv/yes"


def test_shell_and_exec_forms():
    df = parse("""
        FROM debian
        RUN ["/bin/echo", "exec form"]
        RUN [ -f /etc/passwd ] && echo shell form
        SHELL ["/bin/bash", "-o", "pipefail", "-c"]
        RUN echo $BASH_VERSION | cat
        ENTRYPOINT exec python3 -m server
        """)
    exec_, test_, bash = df.steps
    assert exec_.argv == ("/bin/echo", "exec form")
    assert test_.argv == ("/bin/sh", "-c", "[ -f /etc/passwd ] && echo shell form")
    assert bash.argv == ("/bin/bash", "-o", "pipefail", "-c", "echo $BASH_VERSION | cat")
    assert df.config.entrypoint == ("/bin/bash", "-o", "pipefail", "-c",
                                    "exec python3 -m server")
    assert df.config.shell == ("/bin/bash", "-o", "pipefail", "-c") and df.config.cmd is None


def test_copy_and_add_destinations():
    df = parse("""
        FROM debian
        WORKDIR /app
        COPY requirements.txt .
        COPY main.py ./server.py
        COPY ["with space.txt", "other dir/"]
        COPY a.py b.py lib/
        ADD https://example.com/tool.tar.gz /opt/
        ADD vendor.tar.gz /opt/vendor/
        ADD notes.txt /opt/notes.txt
        """)
    req, main, spaced, several, url, tar, plain = df.steps[1:]
    assert (req.dest, req.dest_is_dir) == ("/app", True)
    assert (main.dest, main.dest_is_dir) == ("/app/server.py", False)
    assert spaced.sources == ("with space.txt",) and spaced.dest == "/app/other dir"
    assert several.sources == ("a.py", "b.py") and several.dest == "/app/lib"
    assert (url.add, url.url, url.extract) == (True, True, False)
    assert (tar.add, tar.url, tar.extract) == (True, False, True)
    assert (plain.add, plain.url, plain.extract) == (True, False, False)
    assert not req.add and req.workdir == "/app"


@pytest.mark.parametrize(("text", "reason"), [
    ("FROM golang:1.22 AS build\nRUN go build\nFROM debian\nCOPY --from=build /x /x\n",
     "multi-stage"),
    ("FROM debian\nCOPY --from=ghcr.io/x/y:1 /bin/y /bin/y\n", "--from"),
    ("FROM scratch\nCOPY x /x\n", "scratch"),
])
def test_what_only_docker_builds_is_unsupported(text, reason):
    df = parse_dockerfile(text)
    assert df.unsupported and reason in df.unsupported and "\n" not in df.unsupported


def test_multi_stage_keeps_the_first_stage():
    df = parse_dockerfile("FROM debian\nRUN echo one\nFROM debian\nRUN echo two\n")
    assert [s.argv[-1] for s in df.steps] == ["echo one"] and df.base == "debian"


def test_onbuild_and_metadata_are_ignored():
    df = parse("""
        from debian
        onbuild RUN echo in the child image
        maintainer someone
        healthcheck CMD curl -f http://localhost/
        stopsignal SIGTERM
        volume /data
        run echo hi
        """)
    assert df.unsupported is None and [s.argv[-1] for s in df.steps] == ["echo hi"]


@pytest.mark.parametrize(("text", "line", "words"), [
    ("FROM debian\nRUN ok\nFROBNICATE x\n", 3, "unknown instruction FROBNICATE"),
    ("# just a comment\nARG X=1\n", 1, "no FROM"),
    ("FROM debian\n\nRUN <<EOF\necho never ends\n", 3, "unterminated heredoc"),
    ('FROM debian\nCMD ["python", "x.py"\n', 2, "bad JSON"),
    ("FROM debian\nENV LONELY\n", 2, "no value"),
    ("RUN echo hi\nFROM debian\n", 1, "before FROM"),
    ("FROM debian\nCOPY a b c\n", 2, "destination ending in /"),
    ("FROM debian\nENV A=${B:?required}\n", 2, "B is not set: required"),
    ('FROM debian\nSHELL /bin/bash -c\n', 2, "SHELL"),
    ("FROM debian\nRUN\n", 2, "needs arguments"),
])
def test_malformed_files_name_the_line(text, line, words):
    with pytest.raises(ConfigError) as err:
        parse_dockerfile(text, where="tasks/t/Dockerfile")
    assert err.value.where == f"tasks/t/Dockerfile:{line}"
    assert words in err.value.what
    assert "\n" not in err.value.line()


# -- base images ---------------------------------------------------------------------------

PY = ("python3", "python3-pip", "python3-venv", "python-is-python3")


@pytest.mark.parametrize(("image", "suite", "packages", "note"), [
    ("debian:bookworm", "bookworm", (), ""),
    ("debian:bookworm-slim", "bookworm", (), ""),
    ("debian:12.5", "bookworm", (), ""),
    ("debian:trixie-20250101-slim", "trixie", (), ""),
    ("debian:13", "trixie", (), ""),
    ("debian:bullseye", "bullseye", (), ""),
    ("debian:11-slim", "bullseye", (), ""),
    ("debian", "bookworm", (), ""),
    ("docker.io/library/debian:stable-slim", "bookworm", (), ""),
    ("python:3.11-slim", "bookworm", PY, ""),
    ("python:3.11.9-slim-bookworm", "bookworm", PY, ""),
    ("python:3.13-slim", "trixie", PY, ""),
    ("python:3.13-slim-bookworm", "bookworm", PY, "Python 3.11"),
    ("python:3.12-slim", "trixie", PY, "python:3.12-slim approximated by Debian trixie's Python 3.13"),
    ("python:3.10", "bookworm", PY, "Python 3.11"),
    ("python:3.9-slim", "bookworm", PY, "Python 3.11"),
    ("python:3.11-slim-bullseye", "bullseye", PY, "Python 3.9"),
    ("python:3", "trixie", PY, "Python 3.13"),
    ("python", "trixie", PY, "Python 3.13"),
    ("python:3.13@sha256:" + "a" * 64, "trixie", PY, ""),
    ("ubuntu:22.04", "bookworm", (), "Debian"),
    ("ubuntu:jammy", "bookworm", (), "Debian"),
    ("ubuntu:24.04", "trixie", (), "Debian"),
    ("ubuntu:noble", "trixie", (), "Debian"),
    ("ubuntu", "trixie", (), "Debian"),
    ("ghcr.io/laude-institute/t-bench/python-3-13:20250620", "trixie",
     (*PY, "tmux", "asciinema"), ""),
    ("ghcr.io/laude-institute/t-bench/ubuntu-24-04:latest", "trixie", ("tmux", "python3"),
     "Debian"),
])
def test_mapped_bases(image, suite, packages, note):
    spec = resolve_base(image)
    assert spec.suite == suite and spec.variant == "apt"
    assert set(packages) | {"ca-certificates"} <= set(spec.packages)
    assert spec.mirror == "http://deb.debian.org/debian" and spec.components == ("main",)
    assert (note in spec.note) if note else spec.note == ""
    if "python3-pip" in packages:
        assert spec.env["PIP_BREAK_SYSTEM_PACKAGES"] == "1"


def test_full_python_images_have_build_tools_and_slim_ones_do_not():
    assert {"build-essential", "git", "curl"} <= set(resolve_base("python:3.11").packages)
    assert "build-essential" not in resolve_base("python:3.11-slim").packages


def test_base_keys_follow_content():
    assert resolve_base("debian:12").key == resolve_base("debian:bookworm-slim").key
    keys = {resolve_base(i).key for i in ("debian:bookworm", "debian:trixie", "python:3.11-slim",
                                          "python:3.11", "python:3.13-slim")}
    assert len(keys) == 5
    assert BaseSpec(suite="trixie", packages=("b", "a")).key == \
        BaseSpec(suite="trixie", packages=("a", "b", "a")).key


def test_mirror_can_be_overridden(monkeypatch):
    before = resolve_base("debian:bookworm")
    monkeypatch.setenv("TACKROOM_DEBIAN_MIRROR", "http://mirror.local/debian")
    after = resolve_base("debian:bookworm")
    assert after.mirror == "http://mirror.local/debian" and after.key == before.key


@pytest.mark.parametrize("image", ["alpine:3.19", "node:20", "golang:1.22", "rust:1.79",
                                   "nvidia/cuda:12.4.1-runtime-ubuntu22.04",
                                   "python:3.11-alpine", "python:2.7", "debian:sid",
                                   "ghcr.io/someone/custom:1", "scratch"])
def test_unmapped_bases_say_what_to_do(image):
    with pytest.raises(UnmappedBase) as err:
        resolve_base(image)
    assert isinstance(err.value, TackroomError)
    reason = err.value.reason
    assert image in reason and "--sandbox docker" in reason and "debian" in reason
    assert "\n" not in reason


# -- test scripts --------------------------------------------------------------------------

TBENCH = """#!/bin/bash
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh
source $HOME/.local/bin/env
if [ "$PWD" = "/" ]; then echo "Error"; exit 1; fi
uv venv .tbench-testing
source .tbench-testing/bin/activate
uv pip install pytest==8.4.1
uv run pytest $TEST_DIR/test_outputs.py -rA
"""


def test_terminal_bench_run_tests():
    split = split_test_script(TBENCH)
    assert split.installs == ("apt-get update", "apt-get install -y curl",
                              "curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh",
                              "uv venv .tbench-testing", "uv pip install pytest==8.4.1")
    lines = split.verify.split("\n")
    assert len(lines) == len(TBENCH.split("\n"))
    kept = [line for line in lines if not line.startswith(MARK)]
    assert kept == ["#!/bin/bash", "source $HOME/.local/bin/env",
                    'if [ "$PWD" = "/" ]; then echo "Error"; exit 1; fi',
                    "source .tbench-testing/bin/activate",
                    "uv run pytest $TEST_DIR/test_outputs.py -rA", ""]
    assert lines[1] == MARK + "'apt-get update'"
    install = split.install.split("\n")
    assert install[0] == "#!/bin/bash" and "set -e" in install
    body = [line for line in install if line in (
        "apt-get update", "apt-get install -y curl", "tackroom_install_uv 0.7.13",
        "source $HOME/.local/bin/env", "uv venv .tbench-testing",
        "source .tbench-testing/bin/activate", "uv pip install pytest==8.4.1")]
    assert body == ["apt-get update", "apt-get install -y curl", "tackroom_install_uv 0.7.13",
                    "source $HOME/.local/bin/env", "uv venv .tbench-testing",
                    "source .tbench-testing/bin/activate", "uv pip install pytest==8.4.1"]
    # uv comes from PyPI, and its env file puts it on PATH as the real installer's does
    assert "uv${1:+==$1}" in split.install and "$HOME/.local/bin/env" in split.install
    assert "astral.sh" not in split.install and 'if [ "$PWD"' not in split.install
    assert "uv run pytest" not in split.install
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n"], input=split.install, text=True).returncode == 0


@pytest.mark.skipif(not shutil.which("bash"), reason="needs bash")
def test_uv_stand_in_installs_from_pypi_where_the_installer_would(tmp_path):
    function = re.search(r"tackroom_install_uv\(\) \{.*?\n\}\n",
                         split_test_script(TBENCH).install, re.S).group()
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "python3"  # stands in for pip: records what it was asked
    fake.write_text('#!/bin/sh\necho "$PIP_BREAK_SYSTEM_PACKAGES $*" >> "$HOME/pip.log"\n')
    fake.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    out = subprocess.run(
        ["bash", "-c", function + 'tackroom_install_uv 0.7.13 && . "$HOME/.local/bin/env" '
         '&& . "$HOME/.local/bin/env" && echo "$PATH"'],
        env={"HOME": str(home), "PATH": f"{tmp_path}/bin:/usr/bin:/bin"},
        capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"{home}/.local/bin:{tmp_path}/bin:/usr/bin:/bin"  # added once
    log = (home / "pip.log").read_text().splitlines()
    assert log[-1] == "1 -m pip install --user --no-warn-script-location uv==0.7.13"
    unversioned = split_test_script("wget -qO- https://astral.sh/uv/install.sh | sh\n")
    assert "\ntackroom_install_uv\n" in unversioned.install


HARBOR_TEST = """#!/bin/bash
set -u
cd /app

pip install pytest==8.3.4 requests && \\
    pytest /tests/test_outputs.py -rA
status=$?

if [ $status -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  pip install never-hoisted
  echo 0 > /logs/verifier/reward.txt
fi
"""


def test_harbor_test_sh():
    split = split_test_script(HARBOR_TEST)
    verify = split.verify.split("\n")
    assert len(verify) == len(HARBOR_TEST.split("\n"))
    # the install is a no-op in place; the test run and the reward lines stay
    assert verify[4] == MARK + "'pip install pytest==8.3.4 requests' && \\"
    assert verify[5] == "    pytest /tests/test_outputs.py -rA"
    assert verify[6:] == HARBOR_TEST.split("\n")[6:]
    assert "  echo 1 > /logs/verifier/reward.txt" in verify
    assert "  pip install never-hoisted" in verify  # inside an if block: left alone
    assert split.installs == ("pip install pytest==8.3.4 requests",)
    install = split.install.split("\n")
    assert install.index("cd /app") < install.index("pip install pytest==8.3.4 requests")
    assert "pytest /tests" not in split.install and "reward" not in split.install


def test_hoisted_commands_of_every_kind():
    script = textwrap.dedent("""\
        export DEBIAN_FRONTEND=noninteractive
        sudo -E apt-get -o Acquire::Retries=3 install -y jq
        DEBIAN_FRONTEND=noninteractive apt install -y \\
            ripgrep
        python3 -m pip install -q -r /tests/requirements.txt
        python -m venv /opt/venv
        virtualenv /opt/v2
        uv add pytest && uv sync
        npm ci
        npm i -g tsx
        wget https://example.com/data.csv
        curl -fsSLo /tmp/tool.zip https://example.com/tool.zip
        curl -fsSL https://deb.nodesource.com/setup_20.x | bash -
        curl -s http://localhost:8000/health
        curl -o out.json http://api:8080/items
        pytest -q /tests
        """)
    split = split_test_script(script)
    assert len(split.installs) == 12
    left = [line for line in split.verify.split("\n") if not line.startswith(MARK)]
    assert left == ["export DEBIAN_FRONTEND=noninteractive", "",
                    "curl -s http://localhost:8000/health",
                    "curl -o out.json http://api:8080/items", "pytest -q /tests", ""]
    assert split.install.split("\n")[3] == "export DEBIAN_FRONTEND=noninteractive"


def test_state_chained_to_an_install_stays_in_verify():
    script = "uv venv .tbench-testing && source .tbench-testing/bin/activate\nuv run pytest\n"
    split = split_test_script(script)
    assert split.verify == (MARK + "'uv venv .tbench-testing' && "
                            "source .tbench-testing/bin/activate\nuv run pytest\n")
    assert split.install.endswith("uv venv .tbench-testing\nsource .tbench-testing/bin/activate\n")


def test_failures_the_script_tolerated_stay_tolerated():
    split = split_test_script("pip install extra || echo optional\npytest\n")
    assert split.verify == MARK + "'pip install extra' || echo optional\npytest\n"
    assert "pip install extra || true" in split.install


def test_heredoc_bodies_are_data():
    script = "cat > /tmp/req.txt <<'EOF'\npip install not-a-command\nEOF\npytest\n"
    assert split_test_script(script).verify == script


def test_markers_are_inert_shell():
    split = split_test_script("pip install 'a;b' \"$(whoami)\" `id`\n")
    marker = split.verify.split("\n")[0]
    assert marker.startswith(MARK) and marker.count("'") % 2 == 0
    assert "$(whoami)" in marker and marker.index("'") < marker.index("$(whoami)")


KEEP = ["#!/bin/bash", "set -euo pipefail", "cd /app", "export TEST_DIR=/tests", "",
        'if [ -f x ]; then\n  pip install only-sometimes\nfi', "echo 1 > /logs/verifier/reward.txt",
        "python3 /tests/check.py && echo ok || echo bad", "for f in *.py; do\n  cat $f\ndone",
        "# pip install is only mentioned here", "ls | wc -l", "curl -s http://localhost/",
        'echo "apt-get install -y x"', "f() {\n  uv pip install inside-a-function\n}",
        "cat <<EOF\npip install x\nEOF", "while read -r line; do\n  npm install\ndone < list",
        "pytest /tests/test_outputs.py -rA", "RESULT=$?"]


@pytest.mark.parametrize("seed", range(25))
def test_scripts_without_installs_come_back_unchanged(seed):
    rng = random.Random(seed)
    script = "\n".join(rng.choice(KEEP) for _ in range(rng.randint(0, 30)))
    split = split_test_script(script)
    assert split == split_test_script(script)
    assert (split.install, split.verify, split.installs) == ("", script, ())


@pytest.mark.parametrize("seed", range(25))
def test_verify_keeps_every_line_number(seed):
    rng = random.Random(seed)
    pool = [*KEEP, "pip install pytest", "apt-get update && apt-get install -y \\\n  curl git",
            "uv pip install x && pytest -x \\\n  /tests", "npm install"]
    script = "\n".join(rng.choice(pool) for _ in range(rng.randint(1, 30)))
    split = split_test_script(script)
    verify = split.verify
    assert verify.count("\n") == script.count("\n")
    if shutil.which("bash"):  # both halves are still scripts bash can read
        for half in (split.install, verify):
            assert subprocess.run(["bash", "-n"], input=half, text=True).returncode == 0
    for before, after in zip(script.split("\n"), verify.split("\n"), strict=True):
        assert after == before or after.startswith(MARK) or after in ("", "  /tests")


def test_terminal_bench_bases_start_in_app_as_their_images_do():
    """Terminal-Bench's base images end in ``WORKDIR /app``: a task's ``COPY data.csv ./``
    without a WORKDIR of its own lands in /app (and the image's working directory is it)."""
    for image in ("ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624",
                  "ghcr.io/laude-institute/t-bench/python-3-13:latest"):
        df = parse_dockerfile(f"FROM {image}\nCOPY data.csv ./\nRUN ls\n")
        copy, run = df.steps
        assert (copy.dest, run.workdir, df.config.workdir) == ("/app", "/app", "/app")
        assert resolve_base(image).key == BaseSpec(
            suite="trixie", packages=resolve_base(image).packages,
            env=resolve_base(image).env).key  # the root file system is the same one
    df = parse_dockerfile("FROM debian:bookworm-slim\nCOPY data.csv ./\n")
    assert df.steps[0].dest == "/" and df.config.workdir == "/"


SETUP_UV = """#!/bin/bash
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh
source $HOME/.local/bin/env
if [ "$PWD" = "/" ]; then echo "no workdir"; exit 1; fi
uv init
uv add pytest==8.4.1
"""


def test_a_sourced_helper_scripts_installs_are_hoisted_with_it(tmp_path):
    """Terminal-Bench's later tasks: ``run-tests.sh`` sources ``$TEST_DIR/setup-uv-pytest.sh``,
    which installs curl, uv and pytest. Its installs run at build time in place of the
    ``source`` line; at verify time the line stays and the helper is its offline part."""
    from tackroom.suites.terminal.environment import split_tests

    (tmp_path / "setup-uv-pytest.sh").write_text(SETUP_UV)
    (tmp_path / "run-uv-pytest.sh").write_text("uv run pytest $TEST_DIR/test_outputs.py -rA\n")
    (tmp_path / "run-tests.sh").write_text(
        "#!/bin/bash\nsource $TEST_DIR/setup-uv-pytest.sh\nuv add pandas==2.3.0\n"
        "bash $TEST_DIR/run-uv-pytest.sh\n")
    (tmp_path / "unused.sh").write_text("pip install nothing-runs-this\n")
    scripts, install, installs = split_tests(tmp_path)
    assert installs == ("apt-get update", "apt-get install -y curl",
                        "curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh", "uv init",
                        "uv add pytest==8.4.1", "uv add pandas==2.3.0")
    assert set(scripts) == {"run-tests.sh", "setup-uv-pytest.sh"}  # not unused.sh
    order = [line for line in install.split("\n") if line in (
        "apt-get update", "tackroom_install_uv 0.7.13", "source $HOME/.local/bin/env",
        "uv init", "uv add pytest==8.4.1", "uv add pandas==2.3.0")]
    assert order == ["apt-get update", "tackroom_install_uv 0.7.13",
                     "source $HOME/.local/bin/env", "uv init", "uv add pytest==8.4.1",
                     "uv add pandas==2.3.0"]
    assert "astral.sh" not in install and "nothing-runs-this" not in install
    assert "source $TEST_DIR/setup-uv-pytest.sh" in scripts["run-tests.sh"]
    helper = scripts["setup-uv-pytest.sh"].split("\n")
    assert len(helper) == len(SETUP_UV.split("\n"))
    assert [line for line in helper if line and not line.startswith(MARK)] == [
        "#!/bin/bash", "source $HOME/.local/bin/env",
        'if [ "$PWD" = "/" ]; then echo "no workdir"; exit 1; fi']
    # run with bash (a subshell) rather than sourced: the same installs, in a subshell
    (tmp_path / "run-tests.sh").write_text("#!/bin/bash\nbash /tests/setup-uv-pytest.sh\n")
    _, install, _ = split_tests(tmp_path)
    assert "\n(\n#!/bin/bash" in install and install.rstrip().endswith(")")
    result = subprocess.run(["bash", "-n", "-c", install], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
