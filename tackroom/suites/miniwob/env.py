"""MiniWoB++ in headless Chromium, behind tackroom's :class:`Environment` contract.

One :class:`MiniWoBEnv` owns one browser (one ``chromedriver`` + ``chromium``
process group). It wraps the real ``miniwob`` package — its
``MiniWoBEnvironment`` (the class ``gymnasium.make("miniwob/<task>-v1")``
builds), its ``reset`` / ``step`` / ``create_action`` and its JavaScript task
pages — and changes only four things, each narrowly, by subclassing:

* **Chrome flags.** miniwob's ``create_driver`` passes only ``headless``,
  ``disable-gpu`` and ``no-sandbox``. Offline and as root Chrome also wants
  no background networking, component updates, sync or first-run work, a
  fixed window and ``/dev/shm``-free shared memory, and Chrome talks to
  chromedriver over a pipe (``--remote-debugging-pipe``) instead of a port, so
  it exits when chromedriver does.
* **No browser outlives tackroom.** Chromedriver leads its own process group,
  which its Chrome joins, so :meth:`MiniWoBEnv.close` (or a finalizer at
  garbage collection or interpreter exit: Ctrl-C and SIGTERM end that way)
  kills every process of that browser, and nothing else. If tackroom is
  killed outright (SIGKILL, a crash) the kernel kills chromedriver with it
  (``PR_SET_PDEATHSIG``, from a launcher thread that lives as long as the
  process), and the next pool reaps whatever a dead run left: see
  :mod:`tackroom.suites.reaper`.
* **One round trip per observation.** Each WebDriver call costs several
  milliseconds; miniwob's ``get_observation`` makes two (utterance, DOM) and
  we would need a third for the HTML. :class:`_Instance` fetches all three
  with a single ``execute_script`` using miniwob's own ``core.getUtterance``
  and ``core.getDOMInfo``, so the adapter is no slower than a bare loop.
* **Re-targeting.** All non-flight MiniWoB++ pages share one window and task
  size, so a browser moves to another task by navigating the same driver to
  the new page (about 0.1 s) instead of starting a new Chrome (about 2 s).

MiniWoB's own episode timer (``core.EPISODE_MAX_TIME``, 10 s by default, set
by each page at load) is raised after every page load: LLM calls are slow and
the harness's wall budget, not the page, decides when an episode is over.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import time
import urllib.parse
import weakref
from typing import Any

import tackroom.suites.reaper as reaper
from tackroom.core.actions import Action, Click, ClickAt, Press, Type, TypeText
from tackroom.core.errors import ActionError, InfraError, TaskNotFound
from tackroom.core.observation import Element, Observation
from tackroom.core.task import StepResult, Task
from tackroom.suites.chrome import QUIET_FLAGS

_CHROME = "/usr/bin/chromium"
_CHROMEDRIVER = "/usr/bin/chromedriver"
# miniwob reads these two at driver creation; they must be set together.
if os.path.isfile(_CHROME) and os.path.isfile(_CHROMEDRIVER):
    os.environ.setdefault("MINIWOB_CHROME_BINARY", _CHROME)
    os.environ.setdefault("MINIWOB_CHROMEDRIVER", _CHROMEDRIVER)

try:  # the ``web`` extra
    import numpy as np
    import urllib3.exceptions
    from miniwob.action import ActionTypes
    from miniwob.constants import DEFAULT_ALLOWED_KEYS
    from miniwob.dom import DOMElement
    from miniwob.environment import MiniWoBEnvironment
    from miniwob.observation import create_empty_screenshot, create_observation
    from miniwob.selenium_instance import DEFAULT_BASE_URL, SeleniumInstance
    from selenium import webdriver
    from selenium.common.exceptions import (
        MoveTargetOutOfBoundsException,
        TimeoutException,
        WebDriverException,
    )
    from selenium.webdriver.chrome.service import Service as ChromeService
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.remote_connection import RemoteConnection
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.wait import WebDriverWait
except ImportError as exc:  # pragma: no cover - depends on the install
    raise InfraError(
        f"the MiniWoB++ suite needs the 'web' extra ({exc})", "suite miniwob",
        "pip install 'tackroom[web]' (miniwob, selenium, gymnasium)",
    ) from exc

log = logging.getLogger(__name__)

#: Chrome flags. miniwob sets the first three itself; the quiet ones keep Chrome offline.
CHROME_FLAGS: tuple[str, ...] = (
    "--headless=new",
    "--disable-gpu",
    "--no-sandbox",
    *QUIET_FLAGS,
    "--window-size=800,600",
    # Chrome exits when this pipe closes, i.e. when chromedriver dies: a killed
    # chromedriver (see reaper.die_with_parent) takes its browser with it.
    "--remote-debugging-pipe",
)

#: What ``core.EPISODE_MAX_TIME`` is raised to (ms): one hour, far beyond any
#: harness budget, well below ``setTimeout``'s 2**31 ms limit.
EPISODE_MAX_TIME_MS = 3_600_000

#: Seconds a single WebDriver command may take before the browser counts as hung.
COMMAND_TIMEOUT_S = 30.0

#: Exceptions that mean the browser (not the agent) failed.
BROWSER_ERRORS: tuple[type[BaseException], ...] = (
    WebDriverException,
    urllib3.exceptions.HTTPError,
    ConnectionError,
    OSError,
    RuntimeError,  # miniwob: "Instance 0 does not load properly"
    TimeoutError,
)


class _ChromeService(ChromeService):
    """Selenium's service, forked from the launcher thread and recorded as it starts."""

    def __init__(self, leftovers: dict[str, Any], **kwargs: Any) -> None:
        self._tackroom_leftovers = leftovers
        super().__init__(**kwargs)

    def _start_process(self, path: str) -> None:
        def start() -> None:
            super(_ChromeService, self)._start_process(path)
            # Recorded at once, in the launcher thread, so that neither our
            # finalizer nor a later run's reaper can miss this process group.
            leftovers = self._tackroom_leftovers
            leftovers["pgid"] = self.process.pid
            reaper.record_owner(leftovers["dir"], self.process.pid)

        # The thread that forks chromedriver must live as long as tackroom,
        # or PR_SET_PDEATHSIG would kill a browser still in use.
        reaper.launch(start)


#: Whether this process has looked for browsers dead runs left behind.
_reaped_orphans = False


def task_url(task_id: str) -> str:
    """The ``file://`` URL of a MiniWoB++ task page shipped with the miniwob package."""
    return urllib.parse.urljoin(DEFAULT_BASE_URL, f"{task_id}.html")


def _check_task(task_id: str) -> str:
    path = urllib.parse.urlparse(task_url(task_id)).path
    if task_id.startswith("flight.") or not os.path.isfile(path):
        raise TaskNotFound(f"no MiniWoB++ task page for {task_id!r}", "suite miniwob",
                           "pick a task id from tackroom/suites/miniwob/tasks.py")
    return task_id


def _no_fields(utterance: str) -> list[tuple[str, str]]:
    """Field extractor that extracts nothing: tackroom never uses ``TYPE_FIELD``."""
    return []


class _Instance(SeleniumInstance):
    """miniwob's ``SeleniumInstance`` with our Chrome flags and a one-call observation."""

    with_html: bool = True
    last_html: str | None = None
    last_utterance: str = ""

    pgid: int | None = None

    def create_driver(self) -> None:
        """miniwob's ``create_driver`` plus the flags, process group and timeouts we need."""
        assert not hasattr(self, "driver"), f"Instance {self.index} already has a driver"
        global _reaped_orphans
        if not _reaped_orphans:  # pools do this too; this covers an env used on its own
            _reaped_orphans = True
            reaper.reap_orphans()
        options = webdriver.ChromeOptions()
        for flag in CHROME_FLAGS:
            options.add_argument(flag)
        # One temporary directory per browser holds its profile and, through
        # TMPDIR, every scratch file chromedriver and Chrome make; removing it
        # leaves nothing behind even after a crash. It also names its owner,
        # for the reaper of a later run should this process be killed.
        base = reaper.make_browser_dir()
        self._leftovers: dict[str, Any] = {"dir": base}
        self._finalizer = weakref.finalize(self, reaper.reap, self._leftovers)
        scratch = os.path.join(base, "tmp")
        os.mkdir(scratch)
        options.add_argument(f"--user-data-dir={os.path.join(base, 'profile')}")
        binary = os.environ.get("MINIWOB_CHROME_BINARY")
        driver_path = os.environ.get("MINIWOB_CHROMEDRIVER")
        if binary:
            options.binary_location = binary
        # start_new_session: chromedriver leads a new process group that its
        # Chrome children join, so kill() can end the whole browser by pgid
        # (and Ctrl-C at a terminal does not reach it before we close it).
        # preexec_fn: the kernel kills chromedriver if tackroom dies.
        service = _ChromeService(self._leftovers, executable_path=driver_path,
                                 log_output=subprocess.DEVNULL,
                                 env={**os.environ, "TMPDIR": scratch},
                                 popen_kw={"start_new_session": True,
                                           "preexec_fn": reaper.die_with_parent()})
        try:
            self.driver = webdriver.Chrome(service=service, options=options)
        except BaseException:
            self._finalizer()
            raise
        self.pgid = self._leftovers["pgid"]
        try:
            with contextlib.suppress(AttributeError):  # private in selenium; best effort
                executor = self.driver.command_executor
                if isinstance(executor, RemoteConnection):
                    executor._client_config.timeout = COMMAND_TIMEOUT_S
            self.driver.set_script_timeout(COMMAND_TIMEOUT_S)
            self.goto(self.url)
            self.inner_width, self.inner_height = self.driver.execute_script(
                "return [window.innerWidth, window.innerHeight];")
        except BaseException:
            self.kill(graceful=False)
            raise

    def kill(self, graceful: bool = True) -> None:
        """End this browser: ``quit()`` if asked, then SIGKILL its process group."""
        driver = getattr(self, "driver", None)
        if graceful and driver is not None:
            with contextlib.suppress(Exception):
                driver.quit()
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer()
        if driver is not None:
            with contextlib.suppress(Exception):
                driver.service.stop()  # reaps the chromedriver child
        self.pgid = None
        self.died = True

    def close(self) -> None:
        """miniwob's close(), made to leave no process or profile behind."""
        self.kill(graceful=True)

    def goto(self, url: str) -> None:
        """Load a task page, wait for its sync screen, and lift its episode timer."""
        self.url = url
        self.driver.get(url)
        try:
            WebDriverWait(self.driver, 10).until(
                EC.element_to_be_clickable((By.ID, self.SYNC_SCREEN_ID)))
        except TimeoutException as exc:
            raise RuntimeError(f"task page {url} did not load") from exc
        self.driver.execute_script(f"core.EPISODE_MAX_TIME = {EPISODE_MAX_TIME_MS};")

    def get_observation(self, use_cached_fields: bool = False) -> tuple[Any, dict[str, Any]]:
        """Like miniwob's, but utterance, DOM and (optionally) HTML in one WebDriver call."""
        utterance, dom_info, html = self.driver.execute_script(
            "var u = core.getUtterance(), d = core.getDOMInfo(),"
            " w = arguments[0] ? document.getElementById('wrap') : null;"
            " return [u, d, w ? w.outerHTML : null];", self.with_html)
        if isinstance(utterance, dict):
            utterance = utterance["utterance"]
        self.last_utterance = utterance
        self.last_html = html
        self.cached_fields: list[tuple[str, str]] = []
        root_dom = DOMElement(dom_info)
        img = create_empty_screenshot(self.task_width, self.task_height)
        return create_observation(utterance, root_dom, img, []), {"root_dom": root_dom}


class _MiniWoBEnvironment(MiniWoBEnvironment):
    """miniwob's gymnasium environment, started with :class:`_Instance`."""

    instance: _Instance

    def _hard_reset_instance(self) -> None:
        if getattr(self, "instance", None):
            self.instance.close()
        self.instance = _Instance(index=0, **self.instance_kwargs)
        self.instance.field_extractor = _no_fields
        self.instance.record_screenshots = False
        self.instance.start()


def _keymap() -> dict[str, str]:
    """Lower-cased spellings of every allowed MiniWoB key, to its canonical name."""
    out: dict[str, str] = {}
    for key in DEFAULT_ALLOWED_KEYS:
        out.setdefault(key, key)
        if key.startswith("<") and key.endswith(">"):
            out.setdefault(key[1:-1].lower(), key)
            out.setdefault(key.lower(), key)
        if key.startswith("C-"):
            for prefix in ("ctrl+", "control+", "ctrl-", "c-"):
                out.setdefault(prefix + key[2:].lower(), key)
    out.update({"return": "<Enter>", "esc": "<Escape>", "space": "<Space>", " ": "<Space>",
                "left": "<ArrowLeft>", "right": "<ArrowRight>", "up": "<ArrowUp>",
                "down": "<ArrowDown>"})
    return {k: v for k, v in out.items() if v in DEFAULT_ALLOWED_KEYS}


_KEYS = _keymap()
_KEY_INDEX = {key: i for i, key in enumerate(DEFAULT_ALLOWED_KEYS)}


def resolve_key(key: str) -> str:
    """The MiniWoB key name for ``key`` (``Enter`` → ``<Enter>``); ``ActionError`` if none."""
    if key in _KEY_INDEX:
        return key
    found = _KEYS.get(key) or _KEYS.get(key.lower())
    if found is None:
        raise ActionError(
            f"key {key!r} cannot be pressed here; allowed keys include Enter, Tab, Backspace, "
            "Delete, Space, ArrowUp/Down/Left/Right, PageUp, PageDown, single letters and "
            "digits, C-a, C-c, C-x, C-v")
    return found


class MiniWoBEnv:
    """One MiniWoB++ browser running one task at a time.

    Args:
        task: task id (``click-test-2``) or :class:`Task`; the page is loaded
            lazily, by the first :meth:`reset`.
        with_html: put the ``#wrap`` element's ``outerHTML`` in
            ``Observation.html`` (fetched in the same call as the DOM: nearly free).
        wait_ms: pause after every action, for pages that animate.

    ``reset`` and ``step`` block (Selenium); the runner calls them from a
    worker thread (``blocking = True``). Browser failures raise
    :class:`InfraError` and leave the environment ``broken``; the next
    ``reset`` starts a fresh browser.
    """

    blocking = True

    def __init__(self, task: str | Task, *, with_html: bool = True, wait_ms: float = 0.0) -> None:
        self.task_id = _check_task(task.id if isinstance(task, Task) else task)
        self.with_html = with_html
        self.wait_ms = wait_ms
        self.broken = False
        self.closed = False
        self.starts = 0  # how many browsers this environment has started
        self.episodes = 0
        self._gym: _MiniWoBEnvironment | None = None
        self._pgid: int | None = None
        self._refs: dict[int, Element] = {}
        self._instruction = ""
        self._done = True

    # -- browser lifecycle ---------------------------------------------------

    @property
    def driver(self) -> Any:
        """The Selenium driver (``None`` before the first ``reset``)."""
        return self._gym.instance.driver if self._gym is not None else None

    @property
    def driver_pid(self) -> int | None:
        """Process id of chromedriver (also the browser's process-group id)."""
        return self._pgid

    def alive(self) -> bool:
        """Cheap check: started, not broken, and chromedriver still running."""
        if self._gym is None or self.broken or self.closed:
            return False
        proc = getattr(self.driver.service, "process", None)
        return proc is not None and proc.poll() is None

    def retarget(self, task: str | Task) -> None:
        """Run ``task`` from the next ``reset`` on, in the same browser."""
        self.task_id = _check_task(task.id if isinstance(task, Task) else task)

    def _where(self) -> str:
        return f"miniwob/{self.task_id}"

    def _start(self) -> None:
        """Start a browser on the current task page (kills any previous one)."""
        self._kill(graceful=not self.broken)
        self.starts += 1
        try:
            gym_env = _MiniWoBEnvironment(subdomain=self.task_id,
                                          wait_ms=self.wait_ms)
        except BROWSER_ERRORS as exc:
            raise InfraError(
                f"could not start Chromium for MiniWoB++: {_short(exc)}", self._where(),
                "check that chromium and chromedriver are installed and of the same version "
                "(MINIWOB_CHROME_BINARY, MINIWOB_CHROMEDRIVER)") from exc
        self._gym = gym_env
        self._pgid = gym_env.instance.pgid
        self.broken = False

    def _ensure(self) -> None:
        """A live browser showing the current task's page."""
        if self.closed:
            raise InfraError("environment used after close()", self._where(),
                             "acquire a new environment from the pool")
        if not self.alive():
            self._start()
        assert self._gym is not None  # alive() or _start() made sure
        inst = self._gym.instance
        if inst.url != task_url(self.task_id):
            inst.goto(task_url(self.task_id))
            self._gym.subdomain = self.task_id
        inst.with_html = self.with_html

    def _kill(self, graceful: bool = True) -> None:
        """End the browser, leaving no process or profile directory behind."""
        gym_env, self._gym, self._pgid = self._gym, None, None
        if gym_env is not None:
            gym_env.instance.kill(graceful=graceful)

    def kill_browser(self) -> None:
        """Kill the browser now (e.g. after a crash); the next ``reset`` starts a new one."""
        self._kill(graceful=False)

    def close(self, quick: bool = False) -> None:
        """Kill the browser (``quick``: without asking Chrome to quit first). Idempotent."""
        self.closed = True
        self._kill(graceful=not quick)

    # -- the Environment contract -------------------------------------------

    def reset(self, seed: int) -> Observation:
        """Start a new episode of the current task with ``seed``."""
        self._refs = {}
        self._done = True
        for attempt in (0, 1):
            try:
                self._ensure()
                if self.driver is not None:
                    # A reused browser keeps the last episode's keyboard focus on elements
                    # the next episode re-uses (click-button-sequence's buttons): without
                    # this the same seed starts from a different page state.
                    self.driver.execute_script(
                        "if (document.activeElement && document.activeElement.blur)"
                        " document.activeElement.blur();")
                assert self._gym is not None  # _ensure() made sure
                obs, info = self._gym.reset(seed=seed, options={"record_screenshots": False})
                break
            except BROWSER_ERRORS as exc:
                # Nothing has happened in this episode yet, so a browser that
                # died between episodes is restarted once, transparently.
                self.broken = True
                if attempt == 1 or self.closed:
                    raise self._infra(exc, "reset") from exc
                log.warning("MiniWoB++ browser failed at reset (%s); restarting", _short(exc))
        self.episodes += 1
        self._done = False
        assert self._gym is not None  # the loop ends only after a reset on a live browser
        self._instruction = self._gym.instance.last_utterance
        return self._observation(info["root_dom"])

    def step(self, action: Action) -> StepResult:
        """Execute ``action``; ``ActionError`` if the page cannot take it."""
        if self._gym is None or self.broken:
            raise InfraError("step() without a live episode", self._where(),
                             "call reset() first (the browser may have crashed)")
        if self._done:
            raise ActionError("the episode is over; no further actions are possible")
        mw_action = self._translate(action)
        try:
            _, _, done, _, info = self._gym.step(mw_action)
        except MoveTargetOutOfBoundsException as exc:
            raise ActionError(f"cannot click outside the page: {_short(exc)}") from exc
        except BROWSER_ERRORS as exc:
            self.broken = True
            raise self._infra(exc, "step") from exc
        if done:
            self._done = True
            raw = float(info.get("raw_reward") or 0.0)
            reason = info.get("reason")
            obs = Observation(instruction=self._instruction)
            self._refs = {}
            return StepResult(obs, reward=raw, terminated=True,
                              truncated=reason == "timed out", success=raw > 0,
                              info={"raw_reward": raw, "reason": reason,
                                    "elapsed": info.get("elapsed")})
        return StepResult(self._observation(info["root_dom"]), reward=0.0, terminated=False)

    # -- translation --------------------------------------------------------

    def _observation(self, root: DOMElement) -> Observation:
        assert self._gym is not None  # called in an episode: reset() started the browser
        inst = self._gym.instance
        elements = []
        refs: dict[int, Element] = {}
        stack = [root]
        while stack:  # pre-order, document order
            node = stack.pop()
            parent = node.parent
            el = Element(
                ref=node.ref, tag=node.tag, text=node.text or "",
                parent=parent.ref if parent is not None else 0,
                value=node.value, id=node.id or "",
                classes=node.classes if isinstance(node.classes, str) else "",
                left=float(node.left), top=float(node.top),
                width=float(node.width), height=float(node.height),
                focused=bool(node.focused))
            elements.append(el)
            refs[el.ref] = el
            stack.extend(reversed(node.children))
        self._refs = refs
        return Observation(instruction=inst.last_utterance, elements=elements,
                           html=inst.last_html if self.with_html else None)

    def _bad_ref(self, ref: int) -> ActionError:
        some = [r for r in self._refs if r > 0][:12]
        return ActionError(f"there is no element with ref {ref} on the page now; "
                           f"refs in the current observation include {some}")

    def _translate(self, action: Action) -> dict[str, Any]:
        assert self._gym is not None  # step() checked
        create = self._gym.create_action
        if isinstance(action, Click):
            el = self._refs.get(action.ref)
            if el is None:
                raise self._bad_ref(action.ref)
            if el.ref < 0:
                # Text fragments have no DOM node of their own to click, so
                # click where they are drawn, as a person would.
                return self._click_at(*el.center)
            return create(ActionTypes.CLICK_ELEMENT, ref=el.ref)
        if isinstance(action, Type):
            el = self._refs.get(action.ref)
            if el is None or el.ref < 0:
                raise self._bad_ref(action.ref)
            return create(ActionTypes.FOCUS_ELEMENT_AND_TYPE_TEXT, ref=el.ref,
                          text=action.text)
        if isinstance(action, ClickAt):
            return self._click_at(action.x, action.y)
        if isinstance(action, TypeText):
            return create(ActionTypes.TYPE_TEXT, text=action.text)
        if isinstance(action, Press):
            return create(ActionTypes.PRESS_KEY, key=_KEY_INDEX[resolve_key(action.key)])
        raise ActionError(f"a MiniWoB++ page cannot take a {action.kind!r} action; "
                          "use click, type, click_at, type_text or press")

    def _click_at(self, x: float, y: float) -> dict[str, Any]:
        assert self._gym is not None  # step() checked
        inst = self._gym.instance
        if not (0 <= x < inst.inner_width and 0 <= y < inst.inner_height):
            raise ActionError(f"({x:g}, {y:g}) is outside the page "
                              f"({inst.inner_width}x{inst.inner_height} px)")
        return self._gym.create_action(ActionTypes.CLICK_COORDS,
                                       coords=np.array([x, y], dtype=np.float32))

    def _infra(self, exc: BaseException, phase: str) -> InfraError:
        return InfraError(f"browser failed during {phase}: {_short(exc)}", self._where(),
                          "transient: the pool restarts the browser; retry the episode "
                          "(--resume)")

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("live" if self.alive() else "idle")
        return f"MiniWoBEnv({self.task_id!r}, {state}, starts={self.starts})"


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:200]


def wait_for(predicate: Any, timeout: float = 5.0, interval: float = 0.05) -> bool:
    """Poll ``predicate`` until true or ``timeout`` seconds pass (test helper)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False
