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
#: A wide terminal and no colours, so output is the same on every machine.
CLI_ENV = {"COLUMNS": "200", "NO_COLOR": "1"}

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
