"""Screenshots of the robot's 3D view: one headless Chromium on the :class:`RobotServer` page.

:class:`Screenshotter` is what :class:`~tackroom.suites.robot.env.RobotEnv` takes to put
``extra["screenshot"]`` in its observations. ``capture(sim)`` returns a PNG of the
page showing exactly the simulator's current state: it asks the page to fetch and
draw the scene now, and waits until the page has drawn at least the version
``sim.state()`` reports. The viewport is fixed (640×480 CSS pixels at scale 1 by
default), so a pixel is the same pixel on every run.

WebGL runs on SwiftShader (``--use-angle=swiftshader``), Chromium's CPU rasteriser,
so no GPU or display is needed. The browser is the same Chromium and ChromeDriver
as the MiniWoB++ suite (``$MINIWOB_CHROME_BINARY``, ``$MINIWOB_CHROMEDRIVER``) and is
reaped the same way (:mod:`tackroom.suites.reaper`). A crashed or hung
browser raises :class:`InfraError` once; the next capture starts a fresh one.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import weakref
from typing import Any

from tackroom.core.errors import InfraError
from tackroom.suites import reaper
from tackroom.suites.chrome import QUIET_FLAGS
from tackroom.suites.robot.server import RobotServer

_CHROME = "/usr/bin/chromium"
_CHROMEDRIVER = "/usr/bin/chromedriver"

#: Chrome flags: headless with WebGL on SwiftShader, offline, quiet, no profile leftovers.
CHROME_FLAGS: tuple[str, ...] = (
    "--headless=new",
    "--no-sandbox",
    "--use-gl=angle",
    "--use-angle=swiftshader",
    "--enable-unsafe-swiftshader",
    "--ignore-gpu-blocklist",
    *QUIET_FLAGS,
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--force-device-scale-factor=1",
    "--remote-debugging-pipe",
)
#: Seconds to wait for the page's first drawing, and for one capture.
LOAD_TIMEOUT_S = 30.0
CAPTURE_TIMEOUT_S = 20.0

_REFRESH_JS = """
const done = arguments[arguments.length - 1];
if (typeof window.__tackroomRefresh !== "function") { done([-1, window.__tackroomError]); return; }
window.__tackroomRefresh().then(v => done([v, window.__tackroomError]),
                                e => done([-1, String(e)]));
"""


def _short(exc: BaseException) -> str:
    text = str(getattr(exc, "msg", None) or exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


class Screenshotter:
    """PNG screenshots of the simulator state, from a headless Chromium (one per instance).

    Args:
        width, height: the viewport in CSS pixels (device scale factor 1).

    The browser and the page's server start at the first :meth:`capture`; a
    capture of another simulator object re-points the same server at it.
    Call :meth:`close` when done (also on garbage collection and exit).
    """

    def __init__(self, width: int = 640, height: int = 480) -> None:
        self.width, self.height = int(width), int(height)
        self.server: RobotServer | None = None
        self.driver: Any = None
        self.starts = 0
        self._leftovers: dict[str, Any] = {}
        self._finalizer: Any = None

    # -- lifecycle -------------------------------------------------------------------
    def _ensure(self, sim: Any) -> None:
        if self.server is not None and self.server.closed:  # stopped under us: start anew
            self._kill()
            self.server = None
        if self.server is None:
            self.server = RobotServer(sim)
        elif self.server.sim is not sim:
            self.server.attach(sim)
        if self.driver is None:
            self._start()

    def _start(self) -> None:
        try:
            from selenium import webdriver
            from selenium.webdriver.chrome.service import Service
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise InfraError(f"robot screenshots need the 'web' extra ({exc})", "robot browser",
                             "pip install 'tackroom[web]'") from None
        self.starts += 1
        if self.starts == 1:
            reaper.reap_orphans()
        options = webdriver.ChromeOptions()
        for flag in CHROME_FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--window-size={self.width},{self.height}")
        base = reaper.make_browser_dir()
        self._leftovers = {"dir": base}
        self._finalizer = weakref.finalize(self, reaper.reap, self._leftovers)
        scratch = os.path.join(base, "tmp")
        os.mkdir(scratch)
        options.add_argument(f"--user-data-dir={os.path.join(base, 'profile')}")
        binary = os.environ.get("MINIWOB_CHROME_BINARY") or (
            _CHROME if os.path.isfile(_CHROME) else None)
        driver_path = os.environ.get("MINIWOB_CHROMEDRIVER") or (
            _CHROMEDRIVER if os.path.isfile(_CHROMEDRIVER) else None)
        if binary:
            options.binary_location = binary
        leftovers = self._leftovers

        class _Service(Service):
            def _start_process(self, path: str) -> None:
                def start() -> None:
                    Service._start_process(self, path)
                    leftovers["pgid"] = self.process.pid
                    reaper.record_owner(leftovers["dir"], self.process.pid)
                reaper.launch(start)

        service = _Service(executable_path=driver_path, log_output=subprocess.DEVNULL,
                           env={**os.environ, "TMPDIR": scratch},
                           popen_kw={"start_new_session": True,
                                     "preexec_fn": reaper.die_with_parent()})
        try:
            self.driver = webdriver.Chrome(service=service, options=options)
        except Exception as exc:  # noqa: BLE001 - any failure to start is infrastructure
            self._kill()
            raise InfraError(f"could not start Chromium for the robot view: {_short(exc)}",
                             "robot browser",
                             "check that chromium and chromedriver are installed and of the "
                             "same version (MINIWOB_CHROME_BINARY, MINIWOB_CHROMEDRIVER)"
                             ) from None
        try:
            with contextlib.suppress(AttributeError):  # private in selenium; best effort
                self.driver.command_executor._client_config.timeout = LOAD_TIMEOUT_S
            self.driver.set_script_timeout(CAPTURE_TIMEOUT_S)
            # An exact viewport, whatever the window decorations of this Chrome build.
            self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
                "width": self.width, "height": self.height, "deviceScaleFactor": 1,
                "mobile": False})
            assert self.server is not None
            self.driver.get(self.server.url + "?poll=0")
            self._wait_first_frame()
        except InfraError:
            self._kill()
            raise
        except Exception as exc:  # noqa: BLE001
            self._kill()
            raise InfraError(f"the robot page did not load in Chromium: {_short(exc)}",
                             "robot browser", "check the robot server and Chromium") from None

    def _wait_first_frame(self) -> None:
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while True:
            rendered, error = self.driver.execute_script(
                "return [window.__tackroomRendered, window.__tackroomError];")
            if isinstance(rendered, int) and rendered >= 0:
                return
            if error or time.monotonic() > deadline:
                why = error or f"no frame within {LOAD_TIMEOUT_S:.0f} s"
                raise InfraError(f"the robot page did not draw the scene: {why}",
                                 "robot browser",
                                 "check that WebGL works in this Chromium (SwiftShader) and "
                                 "that three.js is installed (python -m "
                                 "tackroom.suites.robot.web.assets)")
            time.sleep(0.05)

    def _kill(self) -> None:
        driver, self.driver = self.driver, None
        if driver is not None:
            with contextlib.suppress(Exception):
                driver.quit()
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        if driver is not None:
            with contextlib.suppress(Exception):
                driver.service.stop()

    def close(self) -> None:
        """Quit the browser and stop the server. Safe to call twice."""
        self._kill()
        if self.server is not None:
            self.server.close()
            self.server = None

    def __enter__(self) -> Screenshotter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- capture ---------------------------------------------------------------------
    def capture(self, sim: Any) -> bytes:
        """A PNG of the page showing ``sim``'s current state (its ``version`` or later).

        Raises:
            InfraError: the browser crashed or hung, or the page cannot draw; the
                next call starts a new browser.
        """
        self._ensure(sim)
        assert self.server is not None
        with self.server.lock:
            version = int(sim.state()["version"])
        try:
            deadline = time.monotonic() + CAPTURE_TIMEOUT_S
            while True:
                rendered, error = self.driver.execute_async_script(_REFRESH_JS)
                if isinstance(rendered, int) and rendered >= version:
                    break
                if error:  # the page could not fetch or draw the scene
                    raise InfraError(f"the robot page cannot show the state: {error}",
                                     "robot browser", "check the robot server; the next "
                                     "capture starts a new browser and server")
                if time.monotonic() > deadline:
                    raise InfraError(f"the robot page drew version {rendered}, not {version}, "
                                     f"within {CAPTURE_TIMEOUT_S:.0f} s"
                                     + (f" ({error})" if error else ""), "robot browser",
                                     "check the robot server")
                time.sleep(0.02)
            return self.driver.get_screenshot_as_png()
        except InfraError:
            self._kill()
            raise
        except Exception as exc:  # noqa: BLE001 - WebDriver, urllib3, OS errors: the browser
            self._kill()
            raise InfraError(f"Chromium failed while taking the robot screenshot: "
                             f"{_short(exc)}", "robot browser",
                             "retried with a new browser on the next capture") from None
