"""`tackroom train` against an inference server: adapter hot-loading over HTTP, async off-policy.

A real `tackroom serve` (:class:`~tackroom.serve.ServerThread`, port 0) on a tiny model
SFT'd on toy expert episodes; the trainer saves each weight version as a LoRA adapter,
loads it through ``/v1/load_lora_adapter`` and rolls out with ``"model": <version>``.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

import torch  # noqa: E402
from conftest import free_port, one_line_error  # noqa: E402
from inprocess_cli import run_here  # noqa: E402

from tackroom.core.errors import ConfigError, TackroomError  # noqa: E402
from tackroom.core.policy import Sampling  # noqa: E402
from tackroom.harness.spec import load_harness  # noqa: E402
from tackroom.models import init_model  # noqa: E402
from tackroom.models.corpus import harness_corpus  # noqa: E402
from tackroom.policies import make_policy  # noqa: E402
from tackroom.records import RecordStore  # noqa: E402
from tackroom.runner.grid import plan_grid, run_cells  # noqa: E402
from tackroom.serve import ServerThread  # noqa: E402
from tackroom.suites import get_suite  # noqa: E402
from tackroom.testing.harnesses import command_harness  # noqa: E402
from tackroom.train.config import RLConfig  # noqa: E402
from tackroom.train.engine import OptimSettings  # noqa: E402
from tackroom.train.rl import run_rl, weight_version  # noqa: E402
from tackroom.train.sft import Selection, SFTConfig, run_sft  # noqa: E402

torch.set_num_threads(1)

TASKS = "focus-text,click-dialog"
# One numbered element list, one `click N` command, one turn (as tests/test_rl.py).
HARNESS = command_harness("list-cmd1")
STEPS = 3
G = 4
TASKS_PER_STEP = 2


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A tiny model SFT'd on 16 toy expert episodes (it succeeds sometimes), and a store."""
    root = tmp_path_factory.mktemp("train-server")
    (root / "harnesses").mkdir()
    (root / "harnesses" / "list-cmd1.toml").write_text(HARNESS)
    old = os.environ.get("TACKROOM_HARNESS_PATH")
    os.environ["TACKROOM_HARNESS_PATH"] = str(root / "harnesses")
    init_model(root / "tiny", size="tiny", corpus=harness_corpus(seeds=(0,)), seed=0)
    suite = get_suite("toy")
    tasks = [suite.task(t) for t in TASKS.split(",")]
    db = root / "r.duckdb"
    with RecordStore(db) as store:
        store.start_run("expert", "eval", {}, n_planned=0)
        cells = plan_grid(tasks, [load_harness("list-cmd1")], [make_policy("expert")],
                          list(range(8)), Sampling()).cells
        asyncio.run(run_cells(cells, suite, "expert", store=store, concurrency=16))
        sft = run_sft(SFTConfig(model=str(root / "tiny"), out=str(root / "sft"),
                                selection=Selection(runs=("expert",)),
                                optim=OptimSettings(lr=1e-2, warmup_steps=2), epochs=30,
                                batch_size=8, threads=1, checkpoint_every=1000),
                      store, "sft")
    yield {"root": root, "db": str(db), "sft": str(sft.final)}
    if old is None:
        os.environ.pop("TACKROOM_HARNESS_PATH", None)
    else:
        os.environ["TACKROOM_HARNESS_PATH"] = old


@pytest.fixture(scope="module")
def server(env):
    """`tackroom serve` on the SFT'd model (the trainer's base model)."""
    with ServerThread(env["sft"], threads=1, max_batch=8) as srv:
        yield srv


def _cfg(env, out: Path, *overrides: str) -> RLConfig:
    return RLConfig.from_toml(None, [
        f"model.path={env['sft']}", "model.device=cpu", "data.suite=toy", f"data.tasks={TASKS}",
        "data.harnesses=list-cmd1", "rollout.max_tokens=16", "rollout.concurrency=8",
        f"run.out_dir={out}", "optim.micro_batch_size=8", f"optim.steps={STEPS}",
        f"grouping.group_size={G}", f"data.tasks_per_step={TASKS_PER_STEP}",
        "grouping.group=task + '|' + str(seed)", "algo.algorithm=dr_grpo",
        "algo.max_completion_length=16", "lora.rank=4", "lora.alpha=8", "optim.lr=5e-3",
        "run.checkpoint_every=0", "run.seed=0", *overrides])


def _by_version(store: RecordStore, run_id: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for ep in store.iter_episodes(run_id):
        out.setdefault(ep.policy, []).append(ep)
    return out


def _adapter_weights(final: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(final / "adapter_model.safetensors"))


def test_training_over_http_hot_loads_each_version_and_matches_in_process(env, server,
                                                                          tmp_path):
    """3 steps against `tackroom serve`: step k's rollouts come from adapter step-k (the
    weights after k updates, loaded over HTTP), and the run equals in-process training."""
    served = ["rollout.backend=openai", f"rollout.base_url={server.base_url}"]
    notes: list[str] = []
    with RecordStore(env["db"]) as store:
        http = run_rl(_cfg(env, tmp_path / "http", *served), store, "http", threads=1,
                      on_note=notes.append)
        local = run_rl(_cfg(env, tmp_path / "local"), store, "local", threads=1)
        http_steps, local_steps = store.train_steps("http"), store.train_steps("local")
        http_eps, local_eps = _by_version(store, "http"), _by_version(store, "local")
    assert http.steps == local.steps == STEPS
    assert any(n.startswith(f"rollouts: {server.base_url}") for n in notes), notes
    per_step = TASKS_PER_STEP * G
    for k in range(STEPS):
        version = weight_version("http", k)
        eps = http_eps[f"train:{version}"]
        assert len(eps) == per_step
        # The server said which adapter answered every turn: the previous step's weights.
        assert all(t.adapter == version for ep in eps for t in ep.turns), version
        assert all(t.token_ids and t.logprobs for ep in eps for t in ep.turns)
        assert server.answered[version] == per_step  # the server's own count
    # Every version was unloaded again: the server serves only its base model.
    assert list(server.served) == [server.model_name]
    # Same rollouts (same seeds, same weights), same updates.
    for k in range(STEPS):
        a = sorted((e.task, e.seed, e.sampling.get("seed"), tuple(e.turns[0].token_ids))
                   for e in http_eps[f"train:{weight_version('http', k)}"])
        b = sorted((e.task, e.seed, e.sampling.get("seed"), tuple(e.turns[0].token_ids))
                   for e in local_eps[f"train:{weight_version('local', k)}"])
        assert a == b, f"step {k}: the server's rollouts differ from in-process ones"
    for h, lo in zip(http_steps, local_steps, strict=True):
        assert h["recorded_logprobs"] == lo["recorded_logprobs"] == 1.0
        assert h["staleness_max"] == 0.0
        # The server's log-probs are the trainer's own π_old, up to float noise.
        assert h["kl_old"] < 1e-4 and abs(h["ratio_mean"] - 1.0) < 1e-3, h
        assert h["reward_mean"] == pytest.approx(lo["reward_mean"])
        assert h["loss"] == pytest.approx(lo["loss"], abs=1e-4)
    wa, wb = _adapter_weights(http.final), _adapter_weights(local.final)
    assert wa.keys() == wb.keys()
    # It learnt, when some batch had a signal (groups whose samples all tie give no gradient:
    # which do depends on the start model, and so on the tokenizer's corpus).
    moved = any(float(t.abs().max()) > 0 for k, t in wa.items() if "lora_B" in k)
    assert moved == any(s["grad_norm"] > 0 for s in http_steps), \
        [s["grad_norm"] for s in http_steps]
    # Within float noise: the server batches requests as they arrive (8 rows, padded),
    # in-process rollouts all 8 at once, so π_old differs in the 6th digit; Adam's first
    # steps amplify that on weights whose gradient is near zero. Measured: global relative
    # difference 1e-5 to 3e-4, the worst tensor up to 1.3e-3.
    num = sum(float((wa[k] - wb[k]).pow(2).sum()) for k in wa) ** 0.5
    den = sum(float(wb[k].pow(2).sum()) for k in wb) ** 0.5
    assert num / den < 5e-3, num / den
    for key in wa:
        rel = float((wa[key] - wb[key]).norm() / wb[key].norm().clamp_min(1e-12))
        assert rel < 5e-2 or float((wa[key] - wb[key]).abs().max()) < 1e-6, (key, rel)


def test_async_run_records_versions_within_the_staleness_bound(env, server, tmp_path):
    cfg = _cfg(env, tmp_path / "async", "rollout.backend=openai",
               f"rollout.base_url={server.base_url}", "rollout.max_staleness=1")
    with RecordStore(env["db"]) as store:
        result = run_rl(cfg, store, "async", threads=1)
        steps = store.train_steps("async")
        eps = list(store.iter_episodes("async"))
    assert result.steps == STEPS and [s["step"] for s in steps] == [1, 2, 3]
    # Iteration j plays with the weights of iteration max(0, j - 1): a fixed lag of 1.
    per_step = TASKS_PER_STEP * G
    assert len(eps) == STEPS * per_step  # nothing played past the last step
    counts: dict[str, int] = {}
    for ep in eps:
        assert ep.turns and all(t.adapter for t in ep.turns)  # every sample's version
        assert all(t.adapter == ep.policy.removeprefix("train:") for t in ep.turns)
        counts[ep.turns[0].adapter] = counts.get(ep.turns[0].adapter, 0) + 1
    assert counts == {weight_version("async", 0): 2 * per_step,
                      weight_version("async", 1): per_step}
    assert [s["staleness_max"] for s in steps] == [0.0, 1.0, 1.0]
    assert all(s["staleness_max"] <= 1 for s in steps)
    assert all(s["recorded_logprobs"] == 1.0 for s in steps)
    # Importance ratios use the recorded (stale) log-probs, not recomputed ones: the
    # first batch is on-policy, the later ones one update behind (measured: kl_old
    # 1e-10, then 2e-3 and 5e-5; recomputing would give ~1e-10 throughout). A batch is
    # behind only if the update before it moved the weights: Adam moves them from the
    # first step with a non-zero gradient on (a batch whose groups all tied has none;
    # which batches tie depends on how the server happened to batch the sampling).
    assert abs(steps[0]["kl_old"]) < 1e-6
    for i in range(1, STEPS):
        moved = any(s["grad_norm"] > 0 for s in steps[:i])
        if moved:
            assert steps[i]["kl_old"] > 1e-7, [(s["kl_old"], s["grad_norm"]) for s in steps]
        else:
            assert abs(steps[i]["kl_old"]) < 1e-6, [(s["kl_old"], s["grad_norm"]) for s in steps]
    assert list(server.served) == [server.model_name]


def _call(port: int, method: str, path: str, body=None):
    """(status, JSON body or text, headers) of one request on a fresh connection."""
    import http.client
    import json

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        data = None if body is None else json.dumps(body).encode()
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read().decode()
        headers = dict(resp.getheaders())
        kind = headers.get("Content-Type", "")
        return resp.status, (json.loads(raw) if kind.startswith("application/json") else raw), \
            headers
    finally:
        conn.close()


def test_lora_endpoints_over_http(tiny_chat_dir, lora_adapter_dir, tmp_path, monkeypatch):
    """vLLM's dynamic-LoRA endpoints: its answers, its errors, served by the adapter named."""
    load, unload = "/v1/load_lora_adapter", "/v1/unload_lora_adapter"
    adapter = str(lora_adapter_dir)
    with ServerThread(tiny_chat_dir, threads=1) as srv:
        def post(path, body):
            return _call(srv.port, "POST", path, body)

        def error(path, body):
            status, reply, _ = post(path, body)
            return status, reply["error"]["message"]

        status, msg = error(load, {"lora_name": "first"})
        assert status == 400 and "Both 'lora_name' and 'lora_path'" in msg
        status, msg = error(load, {"lora_name": "first", "lora_path": str(tmp_path / "nothing")})
        assert status == 404 and "No adapter found" in msg
        status, msg = error(load, {"lora_name": "x", "lora_path": "/tmp/\u0000" + "y" * 5000})
        assert status == 404 and "No adapter found" in msg
        status, msg = error(load, {"lora_name": "bad name!", "lora_path": adapter})
        assert status == 400 and "bad adapter name" in msg
        status, msg = error(load, {"lora_name": srv.model_name, "lora_path": adapter})
        assert status == 400 and "already been loaded" in msg
        status, msg = error(unload, {"lora_name": "ghost"})
        assert status == 404 and "cannot be found" in msg
        status, msg = error(unload, {"lora_name": srv.model_name})  # the base is no adapter
        assert status == 404
        status, msg = error(unload, {})
        assert status == 400
        assert _call(srv.port, "GET", load)[0] == 405

        # Success is vLLM's plain-text line; the adapter is then a model.
        status, text, headers = post(load, {"lora_name": "first", "lora_path": adapter})
        assert status == 200 and headers["Content-Type"].startswith("text/plain")
        assert text == "Success: LoRA adapter 'first' added successfully."
        status, msg = error(load, {"lora_name": "first", "lora_path": adapter})
        assert status == 400 and "already been loaded" in msg
        _, models, _ = _call(srv.port, "GET", "/v1/models")
        assert [m["id"] for m in models["data"]] == [srv.model_name, "first"]

        chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                "temperature": 0}
        status, reply, headers = post("/v1/chat/completions", {**chat, "model": "first"})
        assert status == 200 and reply["model"] == "first" and headers["X-Tackroom-Adapter"] == "first"
        status, reply, headers = post("/v1/chat/completions", {**chat, "model": srv.model_name})
        assert status == 200 and headers["X-Tackroom-Adapter"] == "base"
        base_reply = reply["choices"][0]["message"]["content"]

        status, text, _ = post(unload, {"lora_name": "first"})
        assert status == 200 and text == "Success: LoRA adapter 'first' removed successfully."
        status, reply, _ = post("/v1/chat/completions", {**chat, "model": "first"})
        assert status == 404 and reply["error"]["code"] == "model_not_found"
        assert error(unload, {"lora_name": "first"})[0] == 404
        # The base model answers as before (the adapter is off), and the name loads again.
        status, reply, _ = post("/v1/chat/completions", {**chat, "model": srv.model_name})
        assert status == 200 and reply["choices"][0]["message"]["content"] == base_reply
        assert post(load, {"lora_name": "first", "lora_path": adapter})[0] == 200
        assert post(load, {"lora_name": "second", "lora_path": adapter})[0] == 200
        assert post(unload, {"lora_name": "first"})[0] == 200
        status, reply, headers = post("/v1/chat/completions", {**chat, "model": "second"})
        assert status == 200 and headers["X-Tackroom-Adapter"] == "second"

        # Unloading and loading while requests are in flight: each is answered by the
        # adapter it named, or refused as unknown, never a server error; the unloaded
        # adapter is dropped once its last request is answered. The first batch on
        # "second" is held in generation until the unload and the load are done, so
        # the unload always finds requests of "second" in flight.
        import threading
        from concurrent.futures import ThreadPoolExecutor

        generating_second, release = threading.Event(), threading.Event()
        generate = srv.policy._generate

        def held(batch):
            if batch[0].adapter == "second" and not release.is_set():
                generating_second.set()
                assert release.wait(120), "the test never released the held batch"
            return generate(batch)

        monkeypatch.setattr(srv.policy, "_generate", held)
        long = {**chat, "max_tokens": 24}
        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(post, "/v1/chat/completions",
                                   {**long, "model": "second" if i % 2 else srv.model_name})
                       for i in range(8)]
            try:
                assert generating_second.wait(120), "no batch on adapter 'second' started"
                assert srv.engine.inflight.get("second", 0) >= 1
                assert post(unload, {"lora_name": "second"})[0] == 200
                assert "second" in srv.engine.retired  # still answering: not dropped yet
                assert post(load, {"lora_name": "third", "lora_path": adapter})[0] == 200
            finally:
                release.set()
            results = [f.result() for f in futures]
        for i, (status, reply, headers) in enumerate(results):
            if i % 2 == 0:
                assert status == 200 and headers["X-Tackroom-Adapter"] == "base"
            else:
                assert status in (200, 404), reply
                assert status == 404 or headers["X-Tackroom-Adapter"] == "second"
        assert any(status == 200 for status, _, _ in results[1::2])  # the held batch
        assert "second" not in srv.policy.adapters and "third" in srv.policy.adapters
        assert not srv.engine.inflight and not srv.engine.retired


def test_server_mistakes_are_one_clear_error(env, tmp_path):
    down = f"http://127.0.0.1:{free_port()}/v1"
    with RecordStore(tmp_path / "e.duckdb") as store, pytest.raises(TackroomError) as e:
        run_rl(_cfg(env, tmp_path / "down", "rollout.backend=openai",
                    f"rollout.base_url={down}"), store, "down", threads=1)
    assert "cannot reach the inference server at" in e.value.line()
    assert "rollout.base_url" in e.value.line()
    with pytest.raises(ConfigError, match="needs rollout.backend"):
        _cfg(env, tmp_path / "x", "rollout.max_staleness=1")
    with pytest.raises(ConfigError, match="rollout.base_url"):
        _cfg(env, tmp_path / "x", "rollout.backend=openai")


class _NoLoraServer:
    """An OpenAI-compatible stub without the dynamic-LoRA endpoints (vLLM without
    VLLM_ALLOW_RUNTIME_LORA_UPDATING): /v1/models answers, anything else is FastAPI's 404."""

    def __enter__(self):
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802 - stdlib name
                if self.path == "/v1/models":
                    self._answer(200, {"object": "list", "data": [{"id": "base"}]})
                else:
                    self._answer(404, {"detail": "Not Found"})

            def do_POST(self):  # noqa: N802 - stdlib name
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._answer(404, {"detail": "Not Found"})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_a_server_without_lora_endpoints_is_one_clear_error(env, tmp_path):
    with _NoLoraServer() as url, RecordStore(tmp_path / "e.duckdb") as store, \
            pytest.raises(TackroomError) as e:
        run_rl(_cfg(env, tmp_path / "nolora", "rollout.backend=openai",
                    f"rollout.base_url={url}"), store, "nolora", threads=1)
    line = e.value.line()
    assert "has no /v1/load_lora_adapter endpoint" in line, line
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" in line and "--enable-lora" in line


def test_cli_says_in_one_line_that_the_server_is_down(env, tmp_path):
    down = f"http://127.0.0.1:{free_port()}/v1"
    # `tackroom train` in this process: what it says and returns, without importing torch
    # again in a subprocess.
    proc = run_here("train", f"model.path={env['sft']}", "data.suite=toy", f"data.tasks={TASKS}",
                    "data.harnesses=list-cmd1", "rollout.backend=openai",
                    f"rollout.base_url={down}", f"run.out_dir={tmp_path / 'out'}",
                    "--db", str(tmp_path / "r.duckdb"), cwd=tmp_path,
                    env_extra={"TACKROOM_HARNESS_PATH": str(env["root"] / "harnesses")})
    line = one_line_error(proc)
    assert f"cannot reach the inference server at {down}" in line, line
    assert "tackroom serve" in line and "rollout.base_url" in line
