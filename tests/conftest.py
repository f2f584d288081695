"""Helpers shared by the test files: the CLI as a process, ports, parse checks, tiny models.

Plain functions are imported by name (``from conftest import run_cli``); the
model fixtures are requested by name. Nothing heavy is imported here: torch,
transformers and peft load inside the fixtures that need them.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

#: Task directories used as data: their own tests run inside task environments, not here.
collect_ignore_glob = ["fixtures/*"]

#: ``tackroom`` as a user runs it, with this interpreter.
TACKROOM = [sys.executable, "-m", "tackroom.cli"]
#: ``tackroom`` that SIGKILLs itself the moment ``checkpoint-N`` is written (no handler, no
#: finalizer runs), whatever the machine's speed: a crash at a known point, for resume tests.
_KILLED_AFTER_CHECKPOINT = """
import os, runpy, signal, sys
from tackroom.train.engine import TrainEngine
name = sys.argv.pop(1)
save = TrainEngine.save_checkpoint
def save_then_crash(self, *args, **kwargs):
    path = save(self, *args, **kwargs)
    if path.name == name:
        os.kill(os.getpid(), signal.SIGKILL)
    return path
TrainEngine.save_checkpoint = save_then_crash
runpy.run_module("tackroom.cli", run_name="__main__", alter_sys=True)
"""


def tackroom_killed_after(checkpoint: str) -> list[str]:
    """The command line of ``tackroom`` that dies by SIGKILL right after writing
    ``checkpoint`` (e.g. ``"checkpoint-2"``); append the CLI's arguments to it."""
    return [sys.executable, "-c", _KILLED_AFTER_CHECKPOINT, checkpoint]


#: A wide terminal and no colours, so output is the same on every machine.
CLI_ENV = {"COLUMNS": "200", "NO_COLOR": "1"}
# The CLI's console takes its width from COLUMNS when it is first imported, and pytest-xdist
# workers start with COLUMNS=80 (a single process has none: 160). A CLI run in a test's
# own process (tests/inprocess_cli.py, typer's runner) then wrapped its lines at 80 columns
# under `make test` only, splitting the paths and lines the tests look for. The same width
# as a `tackroom` subprocess gets, whatever runs the tests:
os.environ["COLUMNS"] = CLI_ENV["COLUMNS"]

#: One ``click(ref: integer)`` tool, for tests that pass tool schemas to a model.
CLICK_TOOLS = [{"type": "function", "function": {
    "name": "click", "description": "Click an element by its number.",
    "parameters": {"type": "object", "properties": {"ref": {"type": "integer"}},
                   "required": ["ref"]}}}]


def run_cli(*args: str, cwd: Path | str, env_extra: Mapping[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``tackroom ARGS`` in a fresh process in ``cwd``; output captured as text.

    The environment is this one plus :data:`CLI_ENV`, then ``env_extra``.
    """
    env = {**os.environ, **CLI_ENV, **(env_extra or {})}
    return subprocess.run([*TACKROOM, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def import_rows(stdout: str) -> dict[str, list[str]]:
    """The rows of ``tackroom tasks import``'s table by task id (cells stripped; wrapped
    lines dropped)."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) >= 5 and cells[0] and cells[1] in ("yes", "skipped"):
            rows[cells[0]] = cells
    return rows


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    """The single ``error: …`` line of a CLI run that failed on bad input (exit status 2)."""
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    return lines[0]


def http_request(port: int, method: str, path: str, body: Any = None,
                 headers: Mapping[str, str] | None = None
                 ) -> tuple[int, Any, dict[str, str]]:
    """(status, parsed JSON body or None, headers) of one request to 127.0.0.1 on a fresh
    connection; ``body`` is bytes sent as they are, or an object sent as JSON."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        conn.request(method, path, body=data, headers=dict(headers or {}))
        resp = conn.getresponse()
        raw = resp.read()
        return resp.status, (json.loads(raw) if raw else None), dict(resp.getheaders())
    finally:
        conn.close()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (just now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_parse(session: Any, response: Any) -> Any:
    """``session.parse(response)``, checked: actions, or a model-facing error the feedback shows."""
    parsed = session.parse(response)
    if parsed.error is None:
        assert parsed.actions, "a successful parse yields at least one action"
    else:
        assert isinstance(parsed.error, str) and parsed.error.strip()
        assert parsed.error in session.feedback_for_parse_error(parsed.error)
    return parsed


def shared_dir(tmp_path_factory: pytest.TempPathFactory, name: str,
               build: Callable[[Path], object]) -> Path:
    """``build(path)`` run once for the whole test run, whatever the number of xdist workers.

    The directory lies beside the workers' own temporary roots; the first worker to get the
    lock builds it and writes a marker last, the others wait on the lock and reuse it. Only
    what never changes when used (a model read from disk) belongs here.
    """
    from tackroom.core.cache import locked

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker's basetemp is a child of one
        root = root.parent
    path, done = root / f"shared-{name}", root / f"shared-{name}.done"
    with locked(root / f"shared-{name}.lock"):
        if not done.exists():
            if path.exists():  # a worker died half-way: start again
                shutil.rmtree(path)
            build(path)
            done.touch()
    return path


def _build_tiny_chat(path: Path) -> None:
    from tackroom.models import init_model
    from tackroom.models.corpus import harness_corpus

    init_model(path, size="tiny", corpus=harness_corpus(seeds=(0,)), seed=0)


@pytest.fixture(scope="session")
def tiny_chat_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random chat model (``tackroom model init --size tiny``) named ``tiny-chat``."""
    return shared_dir(tmp_path_factory, "models", lambda root: _build_tiny_chat(
        root / "tiny-chat")) / "tiny-chat"


@pytest.fixture(scope="session")
def lora_adapter_dir(tiny_chat_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LoRA adapter on :func:`tiny_chat_dir` whose random ``B`` makes it change outputs."""

    def build(out: Path) -> None:
        import warnings

        import peft
        import torch
        from transformers import AutoModelForCausalLM

        base = AutoModelForCausalLM.from_pretrained(tiny_chat_dir, local_files_only=True)
        with warnings.catch_warnings():  # peft uses an API transformers 5 deprecates
            warnings.simplefilter("ignore", FutureWarning)
            lora = peft.get_peft_model(base, peft.LoraConfig(
                r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for name, param in lora.named_parameters():
                if "lora_B" in name:  # zero at init: make the adapter do something
                    param.copy_(torch.randn(param.shape, generator=gen) * 0.5)
        lora.save_pretrained(out)

    return shared_dir(tmp_path_factory, "adapter", build)


#: Fixtures that make a test slow wherever it is used (a model on disk, loaded by the test).
SLOW_FIXTURES = frozenset({"tiny_chat_dir", "lora_adapter_dir", "docker_daemon"})
#: Test files that are slow as a whole: each builds something costly once (a trained model,
#: sandboxes, task images, agent CLIs, Ray) or runs the CLI in subprocesses test after
#: test. Measured (``--junitxml`` times of a whole parallel run): a test is slow from about
#: a second on an idle 2-core machine. tests/test_structure.py checks that every name here
#: still exists.
SLOW_FILES: frozenset[str] = frozenset({
    "test_agents.py", "test_agents_budget.py", "test_agents_rl.py", "test_browser_reaper.py",
    "test_bundled.py", "test_cli.py", "test_critic_gym.py", "test_delegation.py",
    "test_delegation_models.py", "test_gateway_load.py", "test_hardening_records.py",
    "test_hostile_input.py", "test_miniwob_eval.py", "test_parser_fuzz.py",
    "test_ray_rollouts.py", "test_record_converter.py", "test_registry.py", "test_rl.py",
    "test_robot_agent.py", "test_sealed.py", "test_selfhpo.py", "test_sft.py", "test_signals.py",
    "test_terminal_escapes.py", "test_train_export.py",
})
#: Single slow tests in files that are otherwise quick, as ``file::name`` (no parameters).
SLOW_TESTS: frozenset[str] = frozenset({
    "test_agent_harness.py::test_harness_show_list_and_diff_work_on_agent_harnesses",
    "test_code_suite.py::test_every_harness_expert_solves_every_task_through_the_cli",
    "test_code_suite.py::test_every_variant_expert_solves_a_sample_of_tasks",
    "test_code_suite.py::test_reference_fix_passes_and_the_unfixed_repo_fails_only_the_requirement_tests",
    "test_fuzz_inputs.py::test_random_bytes_as_a_harness_file_fail_in_one_line",
    "test_fuzz_inputs.py::test_random_command_lines_exit_0_or_2_with_one_line",
    "test_fuzz_inputs.py::test_random_harness_files_load_or_fail_in_one_line",
    "test_gateway.py::test_connections_and_buffered_bodies_are_bounded",
    "test_hardening_env.py::test_a_ten_thousand_deep_extends_chain_is_one_clear_line",
    "test_images_egress.py::test_apt_get_update_through_the_proxy",
    "test_miniwob.py::test_crash_gives_infra_error_and_pool_recovers",
    "test_miniwob.py::test_expert_solves_task",
    "test_miniwob.py::test_pool_bounds_concurrency_and_cleans_up",
    "test_miniwob.py::test_pool_reuses_browsers",
    "test_models.py::test_tiny_loads_from_local_files",
    "test_openai_policy.py::test_a_lean_client_run_never_loads_the_sdk",
    "test_openai_policy.py::test_trickling_reply_is_bounded_by_the_whole_call_timeout",
    "test_optimize_audit.py::test_interval_coverage_is_near_nominal",
    "test_optimize_loop.py::test_a_killed_optimize_resumes_without_rerunning_finished_evaluations",
    "test_optimize_loop.py::test_bad_optimize_configs_are_one_clear_line",
    "test_pmd.py::test_training_is_deterministic_and_learns",
    "test_real_tasks.py::test_a_second_build_is_a_cache_hit_and_a_changed_file_a_new_layer",
    "test_real_tasks.py::test_episodes_run_the_cli_eval_on_built_tasks_through_both_shell_harnesses",
    "test_real_tasks.py::test_every_task_of_both_layouts_is_built_and_its_oracle_passes",
    "test_real_tasks.py::test_the_process_and_disk_limits_hold_on_a_built_tree",
    "test_real_tasks.py::test_what_cannot_be_built_is_skipped_with_the_reason",
    "test_records.py::test_sigkill_leaves_whole_episodes",
    "test_records.py::test_thousand_episodes_is_fast",
    "test_report.py::test_report_in_headless_chromium",
    "test_robot_browser.py::test_crashed_browser_is_an_infra_error_then_restarts",
    "test_robot_browser.py::test_expert_eval_through_the_screenshot_harness_and_its_report",
    "test_robot_browser.py::test_screenshot_shows_the_simulator_state",
    "test_robot_browser.py::test_screenshots_are_blobs_beside_the_store_and_in_the_report",
    "test_robot_browser.py::test_server_trouble_is_an_infra_error_then_recovers",
    "test_robot_sim.py::test_any_command_is_a_result_or_a_command_error",
    "test_robot_suite.py::test_env_screenshots_are_lazy_and_of_their_own_state",
    "test_robot_suite.py::test_experts_succeed_through_every_harness_from_the_cli",
    "test_sandbox.py::test_both_providers_are_registered_and_one_function_chooses",
    "test_sandbox.py::test_missing_bwrap_cli_is_one_line_and_unsafe_local_runs",
    "test_sandbox.py::test_missing_bwrap_refuses_and_names_unsafe_local",
    "test_serve.py::test_clients_coming_back_apart_still_share_a_batch",
    "test_serve.py::test_concurrent_requests_share_one_batch",
    "test_serve.py::test_serve_main_serves_until_interrupted",
    "test_serve.py::test_served_episodes_equal_in_process_episodes",
    "test_serve_hostile.py::test_random_chat_bodies_never_get_a_5xx",
    "test_serve_hostile.py::test_serve_options_are_bounded_before_the_model_loads",
    "test_terminal.py::test_a_verifier_that_cannot_run_is_an_infra_error_not_a_failure",
    "test_terminal.py::test_bad_input_is_one_clear_line",
    "test_terminal.py::test_cli_import_then_eval_the_imported_task",
    "test_terminal.py::test_every_solution_passes_and_every_untouched_task_fails",
    "test_terminal.py::test_expert_solves_every_task_through_both_shell_harnesses",
    "test_terminal.py::test_import_checks_each_task_in_the_sandbox_and_lists_every_folder",
    "test_terminal.py::test_import_harbor_and_terminal_bench_building_what_they_need",
    "test_terminal.py::test_keystroke_harness_keeps_a_live_shell",
    "test_tilt.py::test_bootstrap_interval_covers_the_true_tilt",
    "test_train_config.py::test_config_and_advantages_import_without_torch",
    "test_train_server.py::test_cli_says_in_one_line_that_the_server_is_down",
    "test_train_server.py::test_training_over_http_hot_loads_each_version_and_matches_in_process",
    "test_turn_storage.py::test_old_layout_migrates_and_shows_and_exports_unchanged",
})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``slow`` what the tables above and the slow fixtures say, so that one place
    decides the fast lane (``-m "not slow and not browser"``)."""
    for item in items:
        file = item.path.name
        name = getattr(item, "originalname", item.name)
        if (file in SLOW_FILES or f"{file}::{name}" in SLOW_TESTS
                or SLOW_FIXTURES & set(getattr(item, "fixturenames", ()))):
            item.add_marker(pytest.mark.slow)
    # Files with the most slow tests first: xdist hands out files in this order, so the
    # run ends on quick files and no worker idles while the other finishes a long one.
    # Deterministic (a stable sort), so every worker agrees on the order.
    slow_in: dict[str, int] = {}
    for item in items:
        slow_in[item.path.name] = slow_in.get(item.path.name, 0) + bool(
            item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow_in[item.path.name])


@pytest.fixture(scope="session")
def docker_daemon(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A Docker daemon answering for this test run (started as root when none does, and
    stopped after; shared by xdist workers: tests/docker_daemon.py), else a skip saying why."""
    from docker_daemon import acquire, release

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    reason = acquire(shared)
    if reason is not None:
        pytest.skip(f"--sandbox docker: {reason}")
    from tackroom.images.daemon import daemon_unavailable

    daemon_unavailable.cache_clear()
    yield
    release(shared)


@pytest.fixture(autouse=True)
def _no_stop_requested() -> None:
    """Each test starts with no stop requested: an in-process test that signalled a run
    (tackroom.core.cancel keeps the signal for the command's exit status) must not cancel
    the next test's runs in the same worker."""
    from tackroom.core import cancel

    cancel._requested = None
