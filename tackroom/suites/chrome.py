"""Headless Chromium flags shared by the suites that drive a browser (miniwob, robot)."""

from __future__ import annotations

#: Keep Chrome from reaching the network, updating itself or writing a first-run profile,
#: which matters offline, as root and in containers with a small /dev/shm.
QUIET_FLAGS: tuple[str, ...] = (
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-crash-reporter",
    "--disable-breakpad",
    "--disable-dev-shm-usage",
    "--mute-audio",
    "--password-store=basic",
)
