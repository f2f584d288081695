"""Agent harnesses as files: the ``[agent]`` slot is validated, hashed and shown like any slot."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli

from tackroom.core.errors import HarnessError
from tackroom.harness.spec import load_harness

AGENT = '''
name = "{name}"
[agent]
cli = "mini-swe-agent"
version = "2.4.6"
install = {{ pip = ["mini-swe-agent==2.4.6"] }}
command = ["{{tool}}/bin/mini", "--task", "{{instruction}}"]
expert = "shell-tool"
expert_submit = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
[agent.env]
MSWEA_MODEL_NAME = "openai/{{model}}"
[agent.files]
".config/mini/config.yaml" = "{config}"
'''


def write(tmp_path: Path, name: str = "mini", config: str = "step_limit: 5") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(AGENT.format(name=name, config=config))
    return path


def test_an_agent_harness_loads_with_its_own_identity(tmp_path):
    h = load_harness(str(write(tmp_path)))
    assert h.kind == "agent" and h.agent["cli"] == "mini-swe-agent"
    assert h.agent["install"] == {"pip": ["mini-swe-agent==2.4.6"]}
    assert h.can_express(frozenset({"shell", "submit"}))
    assert not h.can_express(frozenset({"click"}))  # no browser in a sandbox
    # A changed config file is a different harness; the same content, the same hash.
    other = load_harness(str(write(tmp_path, "mini2", "step_limit: 6")))
    same = load_harness(str(write(tmp_path, "mini3")))
    assert other.hash != h.hash and same.hash == h.hash
    # Loop harnesses keep the hashes they had before agent harnesses existed.
    assert load_harness("som-tools").kind == "loop" and "agent" not in \
        load_harness("som-tools").content()


@pytest.mark.parametrize(("change", "says"), [
    (('["mini-swe-agent==2.4.6"]', '["mini-swe-agent"]'), "must be pinned"),
    (('install = {', 'install = { conda = "x", '), "one installer"),
    (('"--task"', '"--task={oops}"'), "unknown placeholder {oops}"),
    (('".config/mini/config.yaml"', '"../escape.yaml"'), "relative to the CLI's home"),
    (('expert = "shell-tool"', 'expert = "telepathy"'), "unknown expert format"),
    (('version = "2.4.6"', 'version = ""'), "version must be a non-empty string"),
    (('[agent.env]', 'memory_mb = 5\n[agent.env]'), "memory_mb = 5 is out of range"),
    (('MSWEA_MODEL_NAME', '"BAD NAME"'), "not an environment variable name"),
])
def test_a_bad_agent_slot_is_one_clear_error(tmp_path, change, says):
    path = write(tmp_path)
    path.write_text(path.read_text().replace(*change))
    with pytest.raises(HarnessError) as e:
        load_harness(str(path))
    assert says in e.value.line() and str(path) in e.value.line()


def test_harness_show_list_and_diff_work_on_agent_harnesses(tmp_path):
    a, b = write(tmp_path), write(tmp_path, "mini2", "step_limit: 9")
    shown = run_cli("harness", "show", str(a), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "mini-swe-agent 2.4.6 runs unmodified" in shown.stdout and '"install"' in shown.stdout
    diff = run_cli("harness", "diff", str(a), str(b), cwd=tmp_path)
    assert diff.returncode == 0, diff.stderr
    assert "agent.files" in diff.stdout and "step_limit: 9" in diff.stdout
    vs_loop = run_cli("harness", "diff", "terminal-bash", str(a), cwd=tmp_path)
    assert vs_loop.returncode == 0 and "agent.cli" in vs_loop.stdout, vs_loop.stderr
    path = tmp_path / "harnesses"
    path.mkdir()
    write(path)
    listed = run_cli("harness", "list", cwd=tmp_path)
    assert listed.returncode == 0 and "mini-swe-agent 2.4.6" in listed.stdout, listed.stdout
    (tmp_path / "bad.toml").write_text(AGENT.format(name="bad", config="x").replace(
        "2.4.6\"]", "\"]"))
    bad = run_cli("harness", "validate", str(tmp_path / "bad.toml"), cwd=tmp_path)
    assert bad.returncode == 2 and "must be pinned" in bad.stderr + bad.stdout
