"""The HTML report, built from a real record store of toy-suite episodes.

The store is made by running the toy suite through the runner: the expert,
a "flaky" policy that answers garbage (a ``</script>`` injection among it)
on some cells, and two "tuned" policies, each good under the harness it was
"trained" under, so ceilings, mismatch, transfer and gain are non-trivial.
The browser test opens the report in headless Chromium.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import zlib
from pathlib import Path

import pytest

from tackroom.core import InfraError, Sampling
from tackroom.core.policy import PolicyRequest, PolicyResponse
from tackroom.harness.spec import load_harness
from tackroom.policies import make_policy
from tackroom.records.store import RecordStore
from tackroom.report import view as view_mod
from tackroom.report.html import build_report, render_html, report_data
from tackroom.report.terminal import (
    ceiling_mismatch_table,
    conflation_table,
    report_tables,
    summary_table,
)
from tackroom.report.view import ReportView, report_view
from tackroom.runner.grid import plan_grid, run_cells
from tackroom.suites import get_suite

EVIL = 'I will click </script><script>alert(1)</script> now <b>bold</b> & "quoted" \u2028'
HARNESSES = ["som-tools", "html-commands", "outline-coords"]
TASKS = ["click-button", "enter-text", "login-user", "choose-list", "simple-math"]
SEEDS = range(4)
TRAIN = {"tuned-som": "som-tools", "tuned-html": "html-commands"}
GAIN_PAIRS = [("flaky", "tuned-som", "som-tools"), ("flaky", "tuned-html", "html-commands"),
              ("flaky", "tuned-som", "outline-coords")]


def _draw(*parts: object) -> int:
    """A deterministic number in [0, 100) for a cell (no global random state)."""
    return zlib.crc32("/".join(map(str, parts)).encode()) % 100


class Mixed:
    """The expert on most cells, garbage on those ``fails(harness, task, seed)`` picks.

    ``infra`` cells raise an infrastructure error: ``"once"`` on the first
    attempt only (the retry succeeds), ``"always"`` on every attempt.
    """

    def __init__(self, pid: str, fails, infra: dict[tuple[str, str, int], str] | None = None):
        self.id = pid
        self.fails = fails
        self.infra = dict(infra or {})
        self.expert = make_policy("expert")

    async def act(self, request: PolicyRequest) -> PolicyResponse:
        v = request.view
        assert v is not None
        cell = (v.harness, v.task.id, v.seed)
        mode = self.infra.get(cell)
        if mode is not None:
            if mode == "once":
                del self.infra[cell]
            raise InfraError("browser crashed (test)")
        if self.fails(v.harness, v.task.id, v.seed):
            return PolicyResponse(text=EVIL)
        return await self.expert.act(request)

    async def aclose(self) -> None:
        return None


def _policies():
    return [
        make_policy("expert"),
        Mixed("flaky", lambda h, t, s: _draw("f", h, t, s) < 45,
              infra={("som-tools", "click-button", 0): "once",
                     ("outline-coords", "enter-text", 3): "always"}),
        Mixed("tuned-som", lambda h, t, s: _draw("a", h, t, s) < (5 if h == "som-tools" else 55)),
        Mixed("tuned-html",
              lambda h, t, s: _draw("b", h, t, s) < (10 if h == "html-commands" else 60)),
    ]


def _run(store: RecordStore, run_id: str, policies, tasks=TASKS, harnesses=HARNESSES) -> None:
    suite = get_suite("toy")
    by_id = {t.id: t for t in suite.tasks()}
    specs = [load_harness(h) for h in harnesses]
    plan = plan_grid([by_id[t] for t in tasks], specs, policies, SEEDS, Sampling())
    store.start_run(run_id, "eval", {"suite": "toy", "harnesses": list(harnesses),
                                     "policies": [p.id for p in policies]}, len(plan.cells))
    asyncio.run(run_cells(plan.cells, suite, run_id, store=store, concurrency=8))
    store.finish_run(run_id)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "records.duckdb"
    s = RecordStore(path)
    _run(s, "run-grid", _policies())
    # A second run without the expert: its ceilings come from the pass@k union alone.
    _run(s, "run-noexpert", [Mixed("solo", lambda h, t, s: _draw("s", h, t, s) < 30)],
         tasks=TASKS[:2], harnesses=HARNESSES[:2])
    yield s
    s.close()


@pytest.fixture(scope="module")
def report(store, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("html") / "report.html"
    return build_report(store, ["run-grid"], out, train_harness=TRAIN, gain_pairs=GAIN_PAIRS)


def _json_block(page: str, block_id: str):
    m = re.search(rf'<script type="application/json" id="{block_id}">(.*?)</script>', page,
                  re.S)
    assert m, block_id
    return json.loads(m.group(1))


# -- numbers -----------------------------------------------------------------------------------

def test_report_data_numbers(store):
    d = report_data(store, ["run-grid"], TRAIN, gain_pairs=GAIN_PAIRS)
    json.dumps(d, allow_nan=False)  # plain, finite data the CLI can print
    c = d["counts"]
    cells = len(TASKS) * len(HARNESSES) * 4 * len(SEEDS)
    # One retried infra error (superseded) and one cell whose retry failed too.
    assert c["cells"] == cells and c["recorded"] == cells + 2 and c["superseded"] == 2
    assert c["infra_errors"] == 1 and c["infra_attempts"] == 3
    assert c["scored"] == cells - 1
    assert d["harnesses"] == HARNESSES and d["policies"][0] == "expert"

    summary = {(s["harness"], s["policy"]): s for s in d["summary"]}
    assert all(summary[(h, "expert")]["rate"] == 1.0 for h in HARNESSES)
    flaky = summary[("outline-coords", "flaky")]
    assert flaky["infra_errors"] == 1 and flaky["n"] == len(TASKS) * len(SEEDS) - 1
    assert 0 < flaky["rate"] < 1 and flaky["lo"] < flaky["rate"] < flaky["hi"]
    assert len(d["matrix"]) == len(TASKS) * len(HARNESSES) * 4

    # Every ceiling says which estimator stands behind it.
    for h in HARNESSES:
        names = [e["estimator"] for e in d["ceilings"][h]]
        assert names[:2] == ["expert", "pass@k union"]
        assert all(e["detail"] for e in d["ceilings"][h])
    assert "retrained" in [e["estimator"] for e in d["ceilings"]["som-tools"]]
    assert d["best_ceiling"]["som-tools"]["estimator"] == "expert"
    m = {(x["policy"], x["harness"]): x for x in d["mismatch"]}
    fm = m[("flaky", "som-tools")]
    assert fm["ceiling_estimator"] == "expert"
    assert fm["mismatch"] == pytest.approx(fm["ceiling"] - fm["success"])
    assert fm["mismatch"] > 0 and fm["lo"] <= fm["mismatch"] <= fm["hi"]

    tm = d["transfer"]
    assert tm["train_harnesses"] == ["som-tools", "html-commands"]
    cell = {(x["train"], x["eval"]): x for x in tm["cells"]}
    assert cell[("som-tools", "som-tools")]["drop"] == 0
    assert cell[("som-tools", "html-commands")]["drop"] > 0.2  # success fell off-harness
    assert len(d["gain"]["points"]) == 3 and d["gain"]["fit"]["n"] == 3
    assert not {"ceiling", "mismatch", "transfer", "conflation", "gain"} & set(d["notes"])

    # Each trained policy is under its own harness; flaky under its best one.
    cf = d["conflation"]["pairs"]
    cells = {tuple(map(tuple, (p["a"], p["b"]))) for p in cf}
    assert (("tuned-som", "som-tools"), ("tuned-html", "html-commands")) in cells or \
        (("tuned-html", "html-commands"), ("tuned-som", "som-tools")) in cells
    for p in cf:
        assert p["gap"] >= 0  # the higher-scoring side first
        assert p["gap"] == pytest.approx(p["ceiling_part"] - p["mismatch_part"], abs=1e-12)
        assert p["gap"] == pytest.approx(p["success_a"] - p["success_b"], abs=1e-12)
        assert p["a"][0] != "expert" and p["b"][0] != "expert"
    # Asked-for pairs replace the default ones.
    d2 = report_data(store, ["run-grid"], TRAIN,
                     compare=[(("expert", "som-tools"), ("flaky", "outline-coords"))])
    (p,) = d2["conflation"]["pairs"]
    assert p["ceiling_part"] == 0 and p["mismatch_part"] == pytest.approx(-p["gap"])
    # One row per trained policy as well as per training harness.
    by_pol = {(c["policy"], c["eval"]): c for c in tm["by_policy"]}
    assert by_pol[("tuned-som", "som-tools")]["drop"] == 0
    assert by_pol[("tuned-som", "html-commands")]["rate"] == \
        cell[("som-tools", "html-commands")]["rate"]  # one policy per row here


def test_gain_ceilings_are_measured_before_further_training(tmp_path):
    """The further-trained policy's own successes must not raise C(h') (no expert here)."""
    with RecordStore(tmp_path / "g.duckdb") as s:
        _run(s, "gain", [Mixed("base", lambda h, t, x: _draw("g", t, x) < 70),
                         Mixed("trained", lambda h, t, x: _draw("t", t, x) < 10)],
             harnesses=["som-tools"])
        d = report_data(s, ["gain"], gain_pairs=[("base", "trained", "som-tools")])
        rows = s.episodes(run_id="gain")
    tasks = sorted({r["task"] for r in rows})
    assert len(tasks) == len(TASKS)
    solved = {r["task"] for r in rows if r["policy"] == "base" and r["outcome"] == "success"}
    per_task = {t: [r["outcome"] == "success" for r in rows
                    if r["policy"] == "base" and r["task"] == t] for t in tasks}
    after = {t: [r["outcome"] == "success" for r in rows
                 if r["policy"] == "trained" and r["task"] == t] for t in tasks}
    (p,) = d["gain"]["points"]
    # C = pass@k union of the policies *before*: the share of tasks base solved at least once.
    assert p["ceiling"] == pytest.approx(len(solved) / len(TASKS))
    j_before = sum(sum(v) / len(v) for v in per_task.values()) / len(TASKS)
    j_after = sum(sum(v) / len(v) for v in after.values()) / len(TASKS)
    assert p["mismatch"] == pytest.approx(p["ceiling"] - j_before)
    assert p["gain"] == pytest.approx(j_after - j_before) and p["gain"] > 0
    # The report's own ceiling section still uses every policy (the union is higher).
    union = {r["task"] for r in rows if r["outcome"] == "success"}
    assert d["best_ceiling"]["som-tools"]["value"] == pytest.approx(len(union) / len(TASKS))
    assert len(union) > len(solved)


def test_sections_degrade_with_notes(store, tmp_path, monkeypatch):
    # No expert and nothing trained: ceilings from the union only, no transfer, no gain.
    d = report_data(store, ["run-noexpert"])
    assert [e["estimator"] for e in d["ceilings"]["som-tools"]] == ["pass@k union"]
    assert "pass@k union" in d["notes"]["ceiling_expert"]
    assert d["transfer"] is None and "train_harness" in d["notes"]["transfer"]
    assert d["gain"] is None and "gain_pairs" in d["notes"]["gain"]
    page = build_report(store, ["run-noexpert"], tmp_path / "r.html").read_text()
    assert "No transfer matrix" in page and "No gain scatter" in page

    # Trained policies named that are not in these runs.
    d = report_data(store, ["run-noexpert"], {"nobody": "som-tools"})
    assert "none of the trained policies" in d["notes"]["transfer"]

    # An analysis module missing altogether: the section is a note, never a crash.
    real = view_mod._analysis
    monkeypatch.setattr(view_mod, "_analysis", lambda name: (
        (None, f"tackroom.analysis.{name} is not available") if name in ("ceiling", "gain")
        else real(name)))
    page = build_report(store, ["run-grid"], tmp_path / "r2.html", train_harness=TRAIN,
                        gain_pairs=GAIN_PAIRS).read_text()
    assert "No ceilings: tackroom.analysis.ceiling is not available" in page
    assert "No gain scatter" in page and 'class="plot heatmap transfer"' in page

    with pytest.raises(Exception, match="no run"):
        report_data(store, ["no-such-run"])


def _text(*tables) -> str:
    from rich.console import Console

    console = Console(width=200, record=True, no_color=True)
    for t in tables:
        console.print(t)
    return console.export_text()


def test_one_view_feeds_terminal_and_page(store, tmp_path, monkeypatch):
    """The ceilings are estimated once per report; the tables and the page only read the view."""
    from tackroom.analysis import ceiling as ceiling_mod
    from tackroom.analysis import gain as _gain  # noqa: F401 - binds the real estimator first

    calls = []
    real_table, real_rows = ceiling_mod.ceilings_from_table, ceiling_mod.ceilings
    monkeypatch.setattr(ceiling_mod, "ceilings_from_table",
                        lambda *a, **k: calls.append("table") or real_table(*a, **k))
    monkeypatch.setattr(ceiling_mod, "ceilings",
                        lambda *a, **k: calls.append("rows") or real_rows(*a, **k))
    view = report_view(store, ["run-grid"], train_harness=TRAIN, gain_pairs=GAIN_PAIRS)
    assert isinstance(view, ReportView) and view["harnesses"] == HARNESSES
    tables = report_tables(view)
    text = _text(*tables)
    page = render_html(view, store, tmp_path / "v.html").read_text()
    assert calls == ["table"]  # (the gain's pre-training ceilings, on other rows, are gain.py's)
    monkeypatch.undo()

    assert [t.title for t in tables] == [
        "Success by harness × policy", "Ceiling and mismatch: J_h(π) = C(h) − M(π, h)",
        "Conflation: a cross-harness gap = ceiling part − mismatch part"]  # none sealed
    assert view["sealed"] == [] and view["conflation_skipped"] == []
    assert view.ceiling_estimates is not None and len(view.mismatch_estimates) == \
        len(view["mismatch"])
    # The terminal shows the view's numbers ...
    fm = next(m for m in view["mismatch"] if (m["policy"], m["harness"]) == ("flaky", "som-tools"))
    assert f"{100 * fm['mismatch']:+.0f} pp" in text
    for p in view["conflation"]["pairs"]:
        assert f"{p['a'][0]} · {p['a'][1]}" in text
    # ... and so does the page, identical to build_report's apart from the time stamp.
    again = build_report(store, ["run-grid"], tmp_path / "b.html", train_harness=TRAIN,
                         gain_pairs=GAIN_PAIRS).read_text()
    stamp = re.compile(r"generated [^<]*|\"generated_at\":\"[^\"]*\"")
    assert stamp.sub("", page) == stamp.sub("", again)
    assert _json_block(page, "tr-data")["mismatch"] == view["mismatch"]

    # Plain rows still work (the summary in first-seen order; the others as the view's).
    rows = store.episodes(run_id="run-grid")
    assert _text(ceiling_mismatch_table(rows, TRAIN)) == _text(tables[1])
    assert _text(conflation_table(rows, TRAIN)) == _text(tables[2])
    assert sorted(_text(summary_table(rows)).splitlines()) == \
        sorted(_text(tables[0]).splitlines())
    # A pair that cannot be split keeps its place, with the reason.
    asked = [(("expert", "som-tools"), ("flaky", "outline-coords")),
             (("nobody", "som-tools"), ("expert", "html-commands")),
             (("tuned-som", "som-tools"), ("tuned-html", "html-commands"))]
    v2 = report_view(store, ["run-grid"], train_harness=TRAIN, compare=asked)
    (skip,) = v2["conflation_skipped"]
    assert skip["at"] == 1 and "nobody" in skip["reason"]
    lines = [ln for ln in _text(conflation_table(v2)).splitlines() if ln.startswith("│")]
    assert [ln.split("│")[1].strip() for ln in lines] == [
        "expert · som-tools", "nobody · som-tools", "tuned-som · som-tools"]


# -- the page ----------------------------------------------------------------------------------

def test_page_is_self_contained_and_escaped(report):
    page = report.read_text(encoding="utf-8")
    # No network: nothing loaded from anywhere, a CSP that forbids it anyway.
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert not re.search(r"""\s(?:src|href)=["']?(?:https?:)?//""", page)
    assert "@import" not in page and "url(" not in page
    # Model output cannot end the data block or inject markup.
    assert "</script><script>alert" not in page and "<b>bold</b>" not in page
    assert page.count("</script>") == page.count("<script") == 4
    turns = _json_block(page, "tr-turns")
    raws = [t.get("raw") for ep in turns.values() for t in ep["turns"]]
    assert EVIL in raws  # and it survives the round trip exactly
    index = _json_block(page, "tr-index")
    assert len(index["rows"]) == len(TASKS) * len(HARNESSES) * 4 * len(SEEDS) + 2
    assert index["embedded"] == len(index["rows"]) == len(turns)
    # Every section is there, each ceiling labelled by its estimator.
    for anchor in ("overview", "success", "tasks", "ceiling", "transfer", "conflation", "gain",
                   "episodes"):
        assert f'id="{anchor}"' in page
    assert page.count('class="est"') >= 2 * len(HARNESSES)
    assert page.count('class="plot heatmap tasks"') == 4


def test_browser_embeds_at_most_the_limit(store, tmp_path):
    out = build_report(store, ["run-grid"], tmp_path / "small.html", train_harness=TRAIN,
                       max_episodes_in_browser=25)
    page = out.read_text(encoding="utf-8")
    index, turns = _json_block(page, "tr-index"), _json_block(page, "tr-turns")
    assert index["embedded"] == len(turns) == 25
    assert sum(r[index["cols"].index("turns_embedded")] for r in index["rows"]) == 25
    assert len(index["rows"]) == len(TASKS) * len(HARNESSES) * 4 * len(SEEDS) + 2
    assert "Turns are embedded for 25 of" in page
    # Summary numbers still use every episode.
    data = _json_block(page, "tr-data")
    assert data["counts"]["recorded"] == len(index["rows"])


# -- in a real browser -------------------------------------------------------------------------

CHROME, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.mark.browser
def test_report_in_headless_chromium(report, tmp_path):
    webdriver = pytest.importorskip("selenium.webdriver")
    if not (os.path.isfile(CHROME) and os.path.isfile(DRIVER)):
        pytest.skip("needs chromium + chromedriver")
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync", "--window-size=1400,1000",
                 f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    options.binary_location = CHROME
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        # Record any alert() instead of blocking on it (runs before the page's scripts).
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {
            "source": "window.__alerts = []; window.alert = function (m) "
                      "{ window.__alerts.push(String(m)); };"})
        driver.get(report.resolve().as_uri())
        assert driver.title.startswith("tackroom report")

        # Plots are inline SVG with content.
        heat = driver.find_elements(By.CSS_SELECTOR, "svg.heatmap.tasks rect")
        assert len(heat) >= len(TASKS) * len(HARNESSES) * 4
        assert driver.find_elements(By.CSS_SELECTOR, "svg.heatmap.summary g.cell")
        assert driver.find_elements(By.CSS_SELECTOR, "svg.bars g.bar.ceiling")
        assert driver.find_elements(By.CSS_SELECTOR, "svg.heatmap.transfer g.cell")
        # The conflation view: three signed bars (gap, ceiling part, mismatch part) per pair.
        parts = driver.find_elements(By.CSS_SELECTOR, "svg.parts.conflation g.part rect")
        assert parts and len(parts) % 3 == 0
        assert len(driver.find_elements(By.CSS_SELECTOR, "svg.scatter circle.pt")) == 2 * 3

        shot = tmp_path / "report.png"
        height = driver.execute_script("return document.body.scrollHeight")
        driver.set_window_size(1400, min(int(height) + 100, 6000))
        driver.save_screenshot(str(shot))
        data = shot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000
        driver.set_window_size(1400, 1000)

        # The episode browser lists episodes; filters narrow the list.
        rows = driver.find_elements(By.CSS_SELECTOR, "#eplist tr.ep")
        assert len(rows) == 200  # the first page of the list
        Select(driver.find_element(By.CSS_SELECTOR, "select[data-f=policy]")) \
            .select_by_visible_text("flaky")
        Select(driver.find_element(By.CSS_SELECTOR, "select[data-f=outcome]")) \
            .select_by_visible_text("failure")
        rows = driver.find_elements(By.CSS_SELECTOR, "#eplist tr.ep")
        assert rows and all("flaky" in r.text and "failure" in r.text for r in rows)

        # Clicking an episode shows its turns, the hostile output as plain text.
        row = rows[0]
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", row)
        row.click()
        viewer = driver.find_element(By.ID, "viewer")
        assert "flaky" in viewer.text and viewer.find_elements(By.CSS_SELECTOR, ".turn")
        raw = viewer.find_element(By.CSS_SELECTOR, "pre.raw")
        assert "</script><script>alert(1)</script>" in raw.text and "<b>bold</b>" in raw.text
        assert viewer.find_elements(By.CSS_SELECTOR, ".msg.system")
        assert "Parse error".upper() in viewer.text.upper()
        turn_no = viewer.find_element(By.CSS_SELECTOR, ".turnno").text
        assert turn_no.startswith("turn 1 / ")
        viewer.find_element(By.CSS_SELECTOR, "button.next").click()
        assert driver.find_element(By.CSS_SELECTOR, "#viewer .turnno").text.startswith("turn 2 / ")

        # A heatmap cell filters the list to its (task, harness, policy).
        cell = driver.find_element(By.CSS_SELECTOR, "svg.heatmap.tasks g.cell.link")
        task, harness, policy = (cell.get_attribute(f"data-{k}")
                                 for k in ("task", "harness", "policy"))
        driver.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', "
                              "{bubbles: true}))", cell)
        rows = driver.find_elements(By.CSS_SELECTOR, "#eplist tr.ep")
        assert rows and all(harness in r.text and policy in r.text for r in rows)
        assert all(task.split("/", 1)[1] in r.text for r in rows)

        # The injected script never ran, and the page logged no error.
        assert driver.execute_script("return window.__alerts") == []
        with pytest.raises(NoAlertPresentException):
            driver.switch_to.alert.text  # noqa: B018 - the property read raises
        severe = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        assert not severe, severe
    finally:
        driver.quit()
