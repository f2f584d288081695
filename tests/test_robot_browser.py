"""The robot suite's browser side: three.js from npm, the local server, real Chromium
screenshots of the MuJoCo state, images in conversations, records and the report."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import math
import os
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tackroom.core.episode import Episode, Outcome, Turn
from tackroom.core.errors import InfraError
from tackroom.core.observation import Observation
from tackroom.core.policy import PolicyRequest, PolicyResponse, Sampling
from tackroom.harness.content import IMAGE_PLACEHOLDER, RenderedParts, text_only
from tackroom.harness.session import HarnessSession
from tackroom.harness.spec import load_harness
from tackroom.records.blobs import REF_SCHEME
from tackroom.records.store import RecordStore
from tackroom.suites.robot import server as server_mod
from tackroom.suites.robot.server import RobotServer
from tackroom.suites.robot.sim import RobotSim
from tackroom.suites.robot.web import assets

CHROME = os.environ.get("MINIWOB_CHROME_BINARY", "/usr/bin/chromium")
DRIVER = os.environ.get("MINIWOB_CHROMEDRIVER", "/usr/bin/chromedriver")
HAVE_CHROME = os.path.isfile(CHROME) and os.path.isfile(DRIVER)
needs_chrome = pytest.mark.skipif(not HAVE_CHROME, reason="needs chromium + chromedriver")
W, H = 640, 480


# -- helpers ---------------------------------------------------------------------------------
def http(url: str, body: object = None, raw: bytes | None = None) -> tuple[int, object]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method="GET" if data is None else "POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            payload = r.read()
            status = r.status
            ctype = r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        payload, status, ctype = e.read(), e.code, e.headers.get("Content-Type", "")
    return status, (json.loads(payload) if "json" in ctype else payload)


def png_pixels(png: bytes):
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    assert img.size == (W, H)
    return img.load()


def project(cam: dict, p: list[float]) -> tuple[float, float]:
    """World point -> pixel, for a perspective camera at ``pos`` looking at ``target``
    with z up and vertical field of view ``fovy`` (what three.js's PerspectiveCamera does)."""
    def sub(a, b):
        return [a[i] - b[i] for i in range(3)]

    def dot(a, b):
        return sum(a[i] * b[i] for i in range(3))

    def cross(a, b):
        return [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]

    def unit(a):
        n = math.sqrt(dot(a, a))
        return [x / n for x in a]

    f = unit(sub(cam["target"], cam["pos"]))
    r = unit(cross(f, [0.0, 0.0, 1.0]))
    u = cross(r, f)
    d = sub(p, cam["pos"])
    xc, yc, zc = dot(d, r), dot(d, u), dot(d, f)
    t = math.tan(math.radians(cam.get("fovy", 45.0)) / 2)
    nx, ny = xc / (zc * t * (W / H)), yc / (zc * t)
    return (nx + 1) / 2 * W, (1 - ny) / 2 * H


def colour_match(pix, xy: tuple[float, float], rgb: tuple[float, float, float]) -> float:
    """The best cosine similarity of a 5x5 patch's pixels to the colour ``rgb``."""
    best = 0.0
    x0, y0 = int(round(xy[0])), int(round(xy[1]))
    for dx in range(-2, 3):
        for dy in range(-2, 3):
            c = pix[x0 + dx, y0 + dy]
            num = sum(a * b for a, b in zip(c, rgb, strict=True))
            den = math.sqrt(sum(a * a for a in c) * sum(b * b for b in rgb)) or 1.0
            best = max(best, num / den)
    return best


# -- fixtures --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def shooter():
    if not HAVE_CHROME:
        pytest.skip("needs chromium + chromedriver")
    from tackroom.suites.robot.browser import Screenshotter

    s = Screenshotter(W, H)
    yield s
    s.close()


HARNESS = """name = "robot-vision-test"
description = "screenshots + text commands (test)"
[prompt]
system = "You control a robot arm."
first_turn = "{instruction}\\n\\n{observation}{budget}"
next_turn = "{feedback}{observation}{budget}"
[observation]
renderer = "robot_screenshot"
[actions]
interface = "element_refs"
parser = "commands"
[loop]
actions_per_turn = 1
history = 1
[budget]
turns = 10
wall_seconds = 60
state_to_model = false
"""


@pytest.fixture(scope="module")
def vision_spec(tmp_path_factory):
    path = tmp_path_factory.mktemp("h") / "robot-vision-test.toml"
    path.write_text(HARNESS)
    return load_harness(str(path))


# -- three.js from npm -----------------------------------------------------------------------
def test_three_is_installed_once_and_served_locally(monkeypatch, tmp_path):
    build = assets.ensure_three()
    assert (build / "three.module.js").is_file() and (build / "three.core.js").is_file()
    marker = json.loads((assets.three_dir() / assets.DONE).read_text())
    assert marker["version"] == assets.THREE_VERSION and marker["integrity"].startswith("sha")
    # The second call reuses the cache (npm is not even looked for) ...
    monkeypatch.setattr(assets.shutil, "which", lambda name: None)
    assert assets.ensure_three() == build
    # ... and a fresh cache without npm fails with one clear line.
    monkeypatch.setenv("TACKROOM_CACHE", str(tmp_path / "cache"))
    with pytest.raises(InfraError, match="npm is not installed"):
        assets.ensure_three()


# -- the HTTP API ----------------------------------------------------------------------------
def test_server_api_commands_errors_and_files():
    sim = RobotSim()
    sim.reset("robot/pick-place", 0)
    with RobotServer(sim) as srv:
        assert srv.host == "127.0.0.1" and srv.port > 0
        base = srv.url.rstrip("/")
        status, page = http(base + "/")
        assert status == 200 and b'"three": "/vendor/three.module.js"' in page
        assert b"http" not in page  # nothing from the network: no CDN
        status, js = http(base + "/vendor/three.module.js")
        assert status == 200 and b"three.core.js" in js
        assert http(base + "/vendor/../server.py")[0] == 404
        assert http(base + "/vendor/three.cjs")[0] == 404

        status, state = http(base + "/api/state")
        v0 = state["version"]
        assert status == 200 and state["task"] == "robot/pick-place" and state["objects"]
        status, scene = http(base + "/api/scene")
        assert status == 200 and scene["version"] == v0 and scene["camera"]["pos"]
        assert {g["type"] for g in scene["geoms"]} >= {"box", "plane"}

        # A good command answers the simulator's result; the version moves on.
        status, out = http(base + "/api/command", {"op": "move_ee", "pos": [0.1, 0.0, 0.2]})
        assert status == 200 and out["ok"] is True
        assert http(base + "/api/version")[1]["version"] > v0
        # Refused commands: 400 with the simulator's model-facing message.
        status, out = http(base + "/api/command", {"op": "fly"})
        assert status == 400 and "unknown command op 'fly'" in out["error"]
        status, out = http(base + "/api/command", {"op": "gripper", "action": "squeeze"})
        assert status == 400 and "gripper" in out["error"]
        status, out = http(base + "/api/command", raw=b"{not json")
        assert status == 400 and "not valid JSON" in out["error"]
        status, out = http(base + "/api/command", raw=b"[1, 2]")
        assert status == 400 and "JSON object" in out["error"]
        assert http(base + "/api/nothing")[0] == 404

        status, out = http(base + "/api/camera", {"pos": [1.0, -1.0, 1.0],
                                                  "target": [0.0, 0.0, 0.0]})
        assert status == 200 and http(base + "/api/scene")[1]["camera"]["pos"] == [1, -1, 1]
        status, out = http(base + "/api/reset", {"task": "robot/reach", "seed": 3})
        assert status == 200 and out["task"] == "robot/reach"
        assert http(base + "/api/reset", {"task": 5})[0] == 400
        assert "POST /api/command" in http(base + "/api")[1].decode()
    # Closed: the port no longer answers.
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(base + "/api/state", timeout=2)


def test_standalone_server_prints_its_url():
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "tackroom.suites.robot.server", "--task",
                             "robot/push", "--seed", "1"], stdout=subprocess.PIPE, text=True,
                            cwd=Path(server_mod.__file__).parents[3])
    try:
        line = proc.stdout.readline()
        url = line.split(": ", 1)[1].split()[0]
        assert url.startswith("http://127.0.0.1:")
        assert http(url + "api/state")[1]["task"] == "robot/push"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# -- screenshots -----------------------------------------------------------------------------
@needs_chrome
def test_screenshot_shows_the_simulator_state(shooter):
    """Move a block with real commands; the image changes where the block was and is."""
    sim = RobotSim()
    sim.reset("robot/pick-place", 0)
    state = sim.state()
    name, block = next((n, o) for n, o in state["objects"].items() if o["color"] == "red")
    cam = sim.scene()["camera"]
    red = (0.85, 0.15, 0.15)
    old = block["pos"]
    before = png_pixels(shooter.capture(sim))
    # WebGL drew: the page is not blank, and the block is where the simulator says.
    assert len({before[x, y] for x in range(0, W, 16) for y in range(0, H, 16)}) > 20
    old_px = project(cam, old)
    assert colour_match(before, old_px, red) > 0.97

    x, y, _ = old
    new = [-0.25, -0.15]
    for cmd in ({"op": "move_ee", "pos": [x, y, 0.12]}, {"op": "move_ee", "pos": [x, y, 0.02]},
                {"op": "gripper", "action": "close"}, {"op": "move_ee", "pos": [x, y, 0.15]},
                {"op": "move_ee", "pos": [*new, 0.15]}, {"op": "move_ee", "pos": [*new, 0.03]},
                {"op": "gripper", "action": "open"}, {"op": "move_ee", "pos": [*new, 0.25]}):
        sim.command(cmd)
    moved = sim.state()["objects"][name]["pos"]
    assert math.dist(moved[:2], new) < 0.02
    after = png_pixels(shooter.capture(sim))
    new_px = project(cam, moved)
    assert colour_match(after, new_px, red) > 0.97
    assert colour_match(after, old_px, red) < 0.9
    assert colour_match(before, new_px, red) < 0.9
    # A camera command moves the view: the block is drawn where the new camera sees it.
    sim.command({"op": "camera", "pos": [0.0, -0.9, 1.1], "target": [0.0, 0.0, 0.0]})
    top = png_pixels(shooter.capture(sim))
    assert colour_match(top, project(sim.scene()["camera"], moved), red) > 0.97


@needs_chrome
def test_crashed_browser_is_an_infra_error_then_restarts(shooter):
    sim = RobotSim()
    sim.reset("robot/reach", 1)
    shooter.capture(sim)
    starts = shooter.starts
    pgid = shooter._leftovers["pgid"]
    import signal

    os.killpg(pgid, signal.SIGKILL)
    with pytest.raises(InfraError, match="Chromium failed") as info:
        shooter.capture(sim)
    assert "\n" not in info.value.line()
    png = shooter.capture(sim)  # a fresh browser
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and shooter.starts == starts + 1


@needs_chrome
def test_server_trouble_is_an_infra_error_then_recovers(shooter):
    sim = RobotSim()
    sim.reset("robot/push", 0)
    shooter.capture(sim)
    # A server that cannot answer the scene: one clear line, at once (not a timeout).
    def broken() -> dict:
        raise RuntimeError("mj_forward: bad state")

    sim.scene = broken
    sim.command({"op": "step", "n": 5})
    with pytest.raises(InfraError, match="cannot show the state.*500: simulator error: RuntimeError") as info:
        shooter.capture(sim)
    assert "\n" not in info.value.line()
    del sim.scene
    # A stopped server: the next capture starts a new one (and a new browser).
    shooter.server.close()
    assert shooter.capture(sim)[:8] == b"\x89PNG\r\n\x1a\n"


# -- images in the conversation --------------------------------------------------------------
def _conversation(spec, sim, shooter, n: int = 3) -> list[list[dict]]:
    """The messages of ``n`` turns of a session under the screenshot harness."""
    session = HarnessSession(spec, sim.instruction)
    turns = []
    for k in range(n):
        obs = Observation(sim.instruction, text=f"step {k} ok",
                          extra={"state": sim.state(), "screenshot": lambda: shooter.capture(sim)})
        rendered = session.render(obs)
        assert isinstance(rendered, RenderedParts) and IMAGE_PLACEHOLDER in rendered
        session.add_observation(rendered, "Your last action failed: x." if k else None, "")
        turns.append(session.messages())
        session.record_reply(PolicyResponse(text="click 1"), [])
        sim.command({"op": "move_ee", "pos": [0.05 * k, 0.0, 0.2]})
    return turns


@needs_chrome
def test_screenshot_harness_sends_image_parts(vision_spec, shooter):
    sim = RobotSim()
    sim.reset("robot/reach", 0)
    turns = _conversation(vision_spec, sim, shooter)
    first = turns[0][1]
    assert first["role"] == "user" and isinstance(first["content"], list)
    kinds = [p["type"] for p in first["content"]]
    assert kinds == ["text", "image_url"]
    assert first["content"][0]["text"].startswith(sim.instruction)
    assert "end effector at" in first["content"][0]["text"]
    url = first["content"][1]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    # Later turns: feedback text before the image; the window keeps the task line.
    last = turns[-1]
    assert last[-1]["content"][0]["text"].startswith("Your last action failed")
    window_first = next(m for m in last if m["role"] == "user")
    assert window_first["content"][0]["text"].startswith("Task: ")
    # A text-only model sees a placeholder.
    flat = text_only(last)
    assert all(isinstance(p, dict) and p["type"] == "text" for m in flat
               if isinstance(m["content"], list) for p in m["content"])
    assert IMAGE_PLACEHOLDER in flat[-1]["content"][0]["text"]


@needs_chrome
@pytest.mark.parametrize("client", ["lean", "sdk"])
def test_vision_request_reaches_an_openai_server(vision_spec, shooter, client):
    from tackroom.policies.openai_policy import OpenAIPolicy
    from tackroom.testing import ScriptedOpenAIServer, text

    sim = RobotSim()
    sim.reset("robot/push", 2)
    messages = _conversation(vision_spec, sim, shooter, n=1)[0]
    with ScriptedOpenAIServer([text("click 1")]) as srv:
        assert srv.base_url.startswith("http://127.0.0.1:")
        policy = OpenAIPolicy("vision-model", base_url=srv.base_url, client=client)
        reply = asyncio.run(policy.act(PolicyRequest(messages=messages, tools=None,
                                                     sampling=Sampling(max_tokens=16))))
        assert reply.text == "click 1"
        sent = srv.chat_requests[-1].body["messages"]
    assert sent == messages  # the image part exactly as the harness made it
    part = sent[1]["content"][1]
    assert part["type"] == "image_url" and part["image_url"]["url"].startswith(
        "data:image/png;base64,iVBOR")


# -- records and the report ------------------------------------------------------------------
def _episode(turns: list[list[dict]], run_id: str) -> Episode:
    ts = [Turn(index=k, messages=m, raw_text="click 1", observation="step ok [image]",
               actions=[{"kind": "click", "ref": 1}]) for k, m in enumerate(turns)]
    return Episode(episode_id=f"ep-{run_id}", run_id=run_id, task="robot/reach", suite="robot",
                   harness="robot-vision-test", harness_hash="h1", policy="openai:vision",
                   seed=0, attempt=0, sampling={}, outcome=Outcome.SUCCESS, reward=1.0,
                   instruction="Reach the red marker.", turns=ts, started_at=1.0e9,
                   ended_at=1.0e9 + 3)


@needs_chrome
def test_screenshots_are_blobs_beside_the_store_and_in_the_report(vision_spec, shooter,
                                                                  tmp_path):
    from tackroom.records.export import export_jsonl, export_parquet
    from tackroom.report.html import build_report

    sim = RobotSim()
    sim.reset("robot/reach", 4)
    turns = _conversation(vision_spec, sim, shooter, n=3)
    ep = _episode(turns, "run-vision")
    db = tmp_path / "runs" / "tackroom.duckdb"
    with RecordStore(db) as store:
        store.start_run("run-vision", "test", {}, n_planned=1)
        store.append(ep)
        store.finish_run("run-vision")
        # One file per distinct screenshot, named by its sha256, beside the store.
        blobs = sorted((db.parent / "blobs").glob("*.png"))
        shots = {base64.b64decode(p["image_url"]["url"].split(",", 1)[1])
                 for msgs in turns for m in msgs if isinstance(m["content"], list)
                 for p in m["content"] if p["type"] == "image_url"}
        assert len(shots) == 3
        import hashlib

        assert {b.name for b in blobs} == {hashlib.sha256(s).hexdigest() + ".png"
                                           for s in shots}
        # The database holds references only.
        stored = store.query("SELECT CAST(messages AS VARCHAR) AS m FROM turns "
                             "WHERE run_id = 'run-vision'")
        assert all("base64" not in r["m"] for r in stored)
        # (The window's rewritten first message names turn 1's image again: one file.)
        refs = {ref for r in stored for ref in
                re.findall(re.escape(REF_SCHEME) + r"[0-9a-f]{64}\.png", r["m"])}
        assert {ref[len(REF_SCHEME):] for ref in refs} == {b.name for b in blobs}
        # Reading back resolves them: the messages are what the model was sent.
        back = store.load_episode(ep.episode_id)
        assert [t.messages for t in back.turns] == turns
        assert export_jsonl(store, "run-vision", tmp_path / "e.jsonl") == 1
        line = json.loads((tmp_path / "e.jsonl").read_text())
        assert line["turns"][-1]["messages"] == turns[-1]
        import pyarrow.parquet as pq

        export_parquet(store, "run-vision", tmp_path / "e.parquet")
        row = pq.read_table(tmp_path / "e.parquet").to_pylist()[0]
        assert [json.loads(t["messages"]) for t in row["turns"]] == turns
        report = build_report(store, ["run-vision"], tmp_path / "report.html")

    # The report is one file, each screenshot in it once, as a data URL.
    page = report.read_text()
    assert REF_SCHEME not in page and page.count("data:image/png;base64,") == len(shots)


def _report_shows_screenshots(driver, report: Path) -> None:
    """Open the report in Chromium, pick an episode, and find its screenshots drawn."""
    from selenium.webdriver.common.by import By

    driver.get(report.resolve().as_uri())
    row = driver.find_element(By.CSS_SELECTOR, "#eplist tr.ep")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", row)
    row.click()
    imgs = driver.find_elements(By.CSS_SELECTOR, "#viewer img.shot")
    assert imgs
    size = driver.execute_script(
        "const i = arguments[0]; return i.decode().then(() => [i.naturalWidth, "
        "i.naturalHeight, i.src.slice(0, 22)]);", imgs[0])
    assert size == [W, H, "data:image/png;base64,"]


@needs_chrome
def test_expert_eval_through_the_screenshot_harness_and_its_report(shooter, tmp_path):
    import tackroom

    run = tackroom.evaluate(suite="robot", harnesses=["robot-screenshot"], policies=["expert"],
                            seeds=range(10), store=tmp_path / "runs" / "tackroom.duckdb")
    eps = run.episodes()
    assert len(eps) == 40 and run.infra_errors == 0
    for task in ("robot/reach", "robot/push", "robot/pick-place", "robot/open-drawer"):
        ok = [e["outcome"] == "success" for e in eps if e["task"] == task]
        assert len(ok) == 10 and sum(ok) >= 9, task
    # Every model call showed a screenshot, stored as a file beside the store.
    blobs = list((tmp_path / "runs" / "blobs").glob("*.png"))
    assert len(blobs) >= sum(e["n_turns"] for e in eps) * 0.9
    rep = tackroom.report([run.id], store=tmp_path / "runs" / "tackroom.duckdb",
                          out=tmp_path / "report.html")
    page = Path(rep.path).read_text()
    assert page.count("data:image/png;base64,") >= len(blobs) * 0.9
    try:
        _report_shows_screenshots(shooter.driver or _started(shooter), Path(rep.path))
    finally:
        shooter._kill()  # the next capture starts a browser on the robot page again


def _started(shooter):
    sim = RobotSim()
    sim.reset("robot/reach", 0)
    shooter.capture(sim)
    return shooter.driver


def test_local_text_models_see_an_image_placeholder():
    """tackroom's own models read text: an image part is "[image]" in their prompt."""
    from transformers import AutoTokenizer

    from tackroom.policies import bundled
    from tackroom.train.samples import prompt_ids

    tok = AutoTokenizer.from_pretrained(str(Path(bundled.__file__).parent / "bundled_model"))
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(64)).decode()
    messages = [{"role": "system", "content": "You control a robot."},
                {"role": "user", "content": [
                    {"type": "text", "text": "Reach the red marker.\nCamera view:\n"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
                    {"type": "text", "text": "\nBudget: turn 1."}]}]
    text = tok.decode(prompt_ids(tok, messages, None))
    assert f"Camera view:\n{IMAGE_PLACEHOLDER}\nBudget: turn 1." in text
    assert png[:16] not in text
