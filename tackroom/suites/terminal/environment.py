"""A terminal task's built environment: its image, and the image its verifier runs on.

Real tasks install their test tools when the tests run (``pip install
pytest`` in ``tests/test.sh``, ``uv`` and ``pytest`` in Terminal-Bench's
``run-tests.sh``), but an episode has no network. So those installs are
hoisted out of the test scripts (:mod:`tackroom.images.testdeps`) into a
layer of their own, built once with network; the verifier runs the scripts
without them, over that layer. The agent never sees the layer: it is mounted
only under the verifier, over what the episode wrote.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from tackroom.images.build import Image, Progress, build_image, with_tests_layer
from tackroom.images.testdeps import split_test_script
from tackroom.suites.terminal.taskdir import TaskDir

#: The test scripts whose installs are hoisted (Harbor's, and Terminal-Bench's under it).
TEST_SCRIPTS = ("test.sh", "run-tests.sh")


@dataclass(frozen=True)
class Prepared:
    """A task's environments and its test scripts as the verifier runs them."""

    image: Image
    verify: Image
    #: ``tests/<name>`` -> its text without the hoisted installs (only scripts that had some).
    scripts: dict[str, str] = field(default_factory=dict)
    installs: tuple[str, ...] = ()

    @property
    def built(self) -> bool:
        """Whether any layer was built by this call (rather than found in the cache)."""
        return self.image.built or self.verify.built


def split_tests(tests: Path) -> tuple[dict[str, str], str, tuple[str, ...]]:
    """The test scripts in ``tests`` without their installs (only those that had some), the
    installs as one script (``set -e``; empty when none), and the installs one by one."""
    scripts: dict[str, str] = {}
    install: list[str] = []
    installs: list[str] = []
    # Other scripts of the folder with installs, which a test script may source or run
    # (Terminal-Bench's run-tests.sh: ``source $TEST_DIR/setup-uv-pytest.sh``).
    helpers = {}
    for path in sorted(tests.glob("*.sh")):
        if path.name not in TEST_SCRIPTS and path.is_file():
            split = split_test_script(path.read_text(errors="replace"))
            if split.installs:
                helpers[path.name] = split
    for name in TEST_SCRIPTS:
        path = tests / name
        if not path.is_file():
            continue
        split = split_test_script(path.read_text(errors="replace"), helpers)
        if split.installs:
            scripts[name] = split.verify
            install.append(split.install)
            installs += split.installs
            # the helper runs its verify part when the tests run; its installs ran at build
            scripts.update({h: helpers[h].verify for h in split.helpers})
    return scripts, ("set -e\n" + "\n".join(install) if install else ""), tuple(installs)


_lock = threading.Lock()
_prepared: dict[Path, Prepared] = {}


def prepare(td: TaskDir, progress: Progress | None = None) -> Prepared:
    """Build (or find in the cache) ``td``'s environments; remembered for this process."""
    assert td.dockerfile is not None, "a task without a Dockerfile has no environment to build"
    with _lock:
        if td.path in _prepared:
            return _prepared[td.path]
        image = build_image(td.dockerfile, td.dockerfile.parent, progress=progress)
        scripts, script, installs = split_tests(td.tests)
        verify = with_tests_layer(image, script, td.tests, env={**td.env, "TEST_DIR": "/tests"},
                                  progress=progress)
        done = Prepared(image, verify, scripts, installs)
        _prepared[td.path] = done
        return done
