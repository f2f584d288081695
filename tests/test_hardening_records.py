"""Hostile values that reach the records: secrets in policy specs, bad numbers from a model
server, a full disk. Each through the CLI or the public API with the real component.

* a password in an ``openai:MODEL@URL`` spec (``@`` inside it too) is in no stored config,
  report or terminal line;
* usage counts that are not counts (NaN, "lots") are recorded as missing, with a note, and
  the turn kept — never an infra error with a traceback;
* log-probs that are not finite (NaN, -inf) are refused where they enter and never exported;
* a full file system is named as such, and no temporary file is left behind.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from conftest import run_cli

from tackroom.core.policy import PolicyRequest, Sampling
from tackroom.policies.openai_policy import OpenAIPolicy, make_openai_policy
from tackroom.records import RecordStore
from tackroom.testing import Reply, ScriptedOpenAIServer, tool_call

PASSWORDS = ["pwSECRETpw77", "p@ss@", "sh0rt"]


def _chat_body(*, usage: dict | str, logprobs: list | None = None) -> str:
    """A chat completion written by hand, so that it may hold what no encoder writes."""
    lp = "null"
    if logprobs is not None:
        entries = ", ".join(f'{{"token": "t{i}", "logprob": {v}}}'
                            for i, v in enumerate(logprobs))
        lp = f'{{"content": [{entries}]}}'
    usage_text = usage if isinstance(usage, str) else json.dumps(usage)
    return ('{"id": "x", "object": "chat.completion", "model": "m", "choices": [{"index": 0, '
            '"message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop", '
            f'"logprobs": {lp}}}], "usage": {usage_text}}}')


# ---------------------------------------------------------------------------
# Credentials in policy specs
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("password", PASSWORDS)
def test_url_password_is_in_no_config_report_or_terminal_line(tmp_path, password):
    with ScriptedOpenAIServer(default=tool_call("click", {"ref": 1}), models=["chaos"]) as srv:
        url = f"http://bob:{password}@127.0.0.1:{srv.port}/v1"
        spec = f"openai:chaos@{url}"
        db = str(tmp_path / "runs.duckdb")
        ev = run_cli("eval", "--suite", "toy", "--tasks", "click-button", "--seeds", "0",
                     "--policy", spec, "--db", db, cwd=tmp_path)
        assert ev.returncode == 0, ev.stderr
        # The model and URL were split right: the server got the request, for model chaos.
        assert srv.requests and srv.requests[0]["model"] == "chaos"
    rep = run_cli("report", "latest", "--db", db, "-o", str(tmp_path / "r.html"), cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    with RecordStore(db, read_only=True) as store:
        (run,) = store.runs()
        stored = json.dumps(run["config"]) + run["command"]
        episodes = json.dumps([e.to_dict() for e in store.iter_episodes()], default=str)
    html = (tmp_path / "r.html").read_text()
    for where, text in [("runs.config/command", stored), ("episodes", episodes),
                        ("report", html), ("eval output", ev.stdout + ev.stderr),
                        ("report output", rep.stdout + rep.stderr)]:
        assert f"bob:{password}@" not in text, where
        assert f"bob:{password.replace('@', '%40')}@" not in text, where
    # What is kept says where the run went: the host and the model.
    assert f"127.0.0.1:{srv.port}" in json.dumps(run["config"]["policies"])
    assert "chaos" in json.dumps(run["config"]["policy_ids"])


def test_one_redaction_for_every_credential_in_a_spec_or_url():
    from tackroom.core.secrets import REDACTED, redact_url, scrub_text

    cases = {
        "openai:m@http://bob:p@ss@h:1/v1": ("p@ss", "openai:m@http://bob:"),
        "https://api.example.com/v1?api_key=k3y-VALUE&x=1": ("k3y-VALUE", "x=1"),
        "https://generativelanguage.googleapis.com/v1?key=AIzaSyTESTKEY": ("AIzaSyTESTKEY",
                                                                           "googleapis"),
        "curl -H 'Authorization: Bearer abcdefgh12345' http://h": ("abcdefgh12345", "curl"),
        "http://u:pw@h/v1 and https://x:y@z/": ("pw@", "and"),
    }
    for text, (secret, kept) in cases.items():
        out = scrub_text(text)
        assert secret not in out and REDACTED in out and kept in out, (text, out)
    assert redact_url("http://bob:p@ss@h:1/v1?token=t0k&a=b") == \
        f"http://bob:{REDACTED}@h:1/v1?token={REDACTED}&a=b"
    assert redact_url("http://h:1/v1") == "http://h:1/v1"  # nothing to hide: unchanged
    # A dict key is text too (runs.config's policy_ids are keyed by spec).
    from tackroom.core.secrets import scrub

    assert "p@ss" not in json.dumps(scrub({"openai:m@http://b:p@ss@h/v1": "openai:m"}))


@pytest.mark.parametrize("password", ["p@ss@", "a:b@c", "x%40y"])
def test_model_and_url_split_at_the_url_whatever_the_password_holds(password):
    policy = make_openai_policy(f"openai:org/m@v2@http://bob:{password}@127.0.0.1:9/v1")
    assert policy.model == "org/m@v2"
    assert policy.url == "http://127.0.0.1:9/v1"
    assert password not in repr(policy) + json.dumps(policy.describe())


# ---------------------------------------------------------------------------
# Bad numbers from a model server
# ---------------------------------------------------------------------------


def _act(srv: ScriptedOpenAIServer, logprobs: bool = False):  # noqa: ANN202
    import asyncio

    async def go():
        async with OpenAIPolicy("m", base_url=srv.base_url, max_retries=0) as policy:
            return await policy.act(PolicyRequest(
                messages=[{"role": "user", "content": "hi"}],
                sampling=Sampling(logprobs=logprobs)))

    return asyncio.run(go())


@pytest.mark.parametrize("usage", ['{"prompt_tokens": NaN, "completion_tokens": 3}',
                                   '{"prompt_tokens": "lots", "completion_tokens": 3}',
                                   '{"prompt_tokens": -5, "completion_tokens": Infinity}',
                                   '{"prompt_tokens": 1e300, "completion_tokens": 2.5}'])
def test_garbage_usage_is_recorded_as_missing_with_a_note(usage):
    with ScriptedOpenAIServer(default=Reply(body=_chat_body(usage=usage))) as srv:
        r = _act(srv)
    assert r.text == "hello"  # the turn is kept
    assert r.prompt_tokens == 0
    assert r.notes and "usage" in r.notes[0] and "prompt_tokens" in r.notes[0]


def test_garbage_usage_through_the_cli_keeps_the_episode_and_stores_no_traceback(tmp_path):
    body = _chat_body(usage='{"prompt_tokens": NaN, "completion_tokens": "lots"}')
    with ScriptedOpenAIServer(default=Reply(body=body), models=["m"]) as srv:
        db = str(tmp_path / "runs.duckdb")
        ev = run_cli("eval", "--suite", "toy", "--tasks", "click-button", "--seeds", "0",
                     "--policy", f"openai:m@{srv.base_url}", "--db", db, cwd=tmp_path)
    assert ev.returncode == 0, ev.stderr
    assert "Traceback" not in ev.stdout + ev.stderr and "infra error" not in ev.stdout
    with RecordStore(db, read_only=True) as store:
        episodes = list(store.iter_episodes())
    assert episodes
    for ep in episodes:
        # The model's own failure ("hello" is no action), never an infra error.
        assert ep.outcome.value != "infra_error", ep.error
        assert "Traceback" not in (ep.error or "") and "ValueError" not in (ep.error or "")
        assert ep.turns and all(t.raw_text == "hello" for t in ep.turns)
        assert all(any("usage" in n for n in t.notes) for t in ep.turns), ep.turns[0].notes


@pytest.mark.parametrize("bad", ["NaN", "-Infinity", "Infinity"])
def test_non_finite_logprobs_are_refused_where_they_enter(bad):
    body = _chat_body(usage={"prompt_tokens": 3, "completion_tokens": 2},
                      logprobs=["-0.5", bad])
    with ScriptedOpenAIServer(default=Reply(body=body)) as srv:
        r = _act(srv, logprobs=True)
    assert r.text == "hello"
    assert r.logprobs is None
    assert r.notes and "log-prob" in r.notes[0]


def test_non_finite_logprobs_never_reach_the_store_or_an_export(tmp_path):
    body = _chat_body(usage={"prompt_tokens": 3, "completion_tokens": 2},
                      logprobs=["-0.5", "-Infinity"])
    with ScriptedOpenAIServer(default=Reply(body=body), models=["m"]) as srv:
        db = str(tmp_path / "runs.duckdb")
        ev = run_cli("eval", "--suite", "toy", "--tasks", "click-button", "--seeds", "0",
                     "--policy", f"openai:m@{srv.base_url}", "--logprobs", "--db", db,
                     cwd=tmp_path)
    assert ev.returncode == 0, ev.stderr
    out = tmp_path / "eps.jsonl"
    ex = run_cli("export", "latest", "--db", db, "--format", "jsonl", "--out", str(out),
                 cwd=tmp_path)
    assert ex.returncode == 0, ex.stderr
    text = out.read_text()
    assert "-inf" not in text.lower() and "nan" not in text.lower().replace("nanos", "")
    turn = json.loads(text.splitlines()[0])["turns"][0]
    assert turn["logprobs"] is None
    assert any("log-prob" in n for n in turn["notes"])
    assert all(math.isfinite(x) for t in json.loads(text.splitlines()[0])["turns"]
               for x in (t["logprobs"] or []))


# ---------------------------------------------------------------------------
# A full disk
# ---------------------------------------------------------------------------


@pytest.fixture
def tiny_fs(tmp_path):
    """A 3 MiB tmpfs (we are root in the test machines), or the test is skipped."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(mnt: Path, leave: int = 0) -> None:
    """Fill ``mnt`` until at most ``leave`` bytes are free."""
    with open(mnt / f"filler-{uuid.uuid4().hex}", "wb") as f:
        chunk = b"\0" * 65536
        try:
            while os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize > leave + len(chunk):
                f.write(chunk)
                f.flush()
            f.write(b"\0" * max(0, os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize - leave))
        except OSError:
            pass


def test_eval_on_a_full_disk_names_the_full_disk(tiny_fs, tmp_path):
    db = str(tiny_fs / "runs.duckdb")
    ok = run_cli("eval", "--suite", "toy", "--tasks", "click-button", "--seeds", "0",
                 "--policy", "expert", "--db", db, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    _fill(tiny_fs)
    ev = run_cli("eval", "--suite", "toy", "--seeds", "0-199", "--policy", "expert",
                 "--db", db, cwd=tmp_path)
    assert ev.returncode != 0
    out = ev.stdout + ev.stderr
    assert "Traceback" not in out and "TransactionContext" not in out, out
    assert "no space left on device" in out.lower(), out
    assert str(tiny_fs) in out  # where
    assert "free" in out.lower()  # what to do


def test_report_onto_a_full_disk_names_it_and_leaves_no_temporary_file(tiny_fs, tmp_path):
    db = str(tmp_path / "runs.duckdb")
    ok = run_cli("eval", "--suite", "toy", "--seeds", "0-3", "--policy", "expert",
                 "--db", db, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    _fill(tiny_fs, leave=8192)
    target = tiny_fs / "report.html"
    rep = run_cli("report", "latest", "--db", db, "-o", str(target), cwd=tmp_path)
    assert rep.returncode != 0
    out = rep.stdout + rep.stderr
    assert "Traceback" not in out and "no space left on device" in out.lower(), out
    assert str(target) in out
    left = sorted(p.name for p in tiny_fs.iterdir() if not p.name.startswith("filler-"))
    assert left == [], left


def test_a_commit_on_a_full_disk_is_one_line_naming_it(tiny_fs):
    from tackroom.core.episode import Episode, Outcome, Turn
    from tackroom.core.errors import RecordStoreError

    def episode(i: int) -> Episode:
        return Episode(episode_id=f"e{i}", run_id="r", task="toy/t", suite="toy", harness="h",
                       harness_hash="x", policy="expert", seed=i, outcome=Outcome.SUCCESS,
                       turns=[Turn(index=0, raw_text="y" * 4000)])

    store = RecordStore(tiny_fs / "runs.duckdb", commit_interval=0)
    try:
        store.start_run("r", "test", {}, n_planned=1000)
        store.append(episode(0))
        _fill(tiny_fs)
        with pytest.raises(RecordStoreError) as info:
            for i in range(1, 1000):  # the WAL's last free pages go first
                store.append(episode(i))
        line = info.value.line()
        assert "no space left on device" in line and "rollback" not in line, line
        assert str(tiny_fs) in line and "--resume" in line
    finally:
        for f in tiny_fs.glob("filler-*"):
            f.unlink()
        with contextlib.suppress(RecordStoreError):
            store.close()
