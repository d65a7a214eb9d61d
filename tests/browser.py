"""Headless Chromium for the report tests: the DOM after scripts ran, console messages, screenshots.

Uses Debian's `chromium` (the README's test command installs it when missing) with the flags of
`docs/specs/environment.md` §9. Console messages are read from `--enable-logging=stderr`, where
Chromium prints every `console.*` call and uncaught error as an `INFO:CONSOLE` line.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run", "--disable-component-update",
         "--disable-sync", "--enable-logging=stderr", "--v=0")
CONSOLE = re.compile(r":CONSOLE(?::\d+)?\] (.*)")



@dataclass
class Page:
    dom: str
    console: list[str]
    seconds: float


def _run(url: str, *args: str, timeout: float = 180) -> tuple[str, str, float]:
    if CHROMIUM is None:  # a missing browser fails the report tests: the README's test command installs it
        pytest.fail("Debian's chromium is not installed: `apt-get install -y chromium` (the README's test command does this)")
    with tempfile.TemporaryDirectory() as profile:
        started = time.monotonic()
        done = subprocess.run(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args, url], capture_output=True, text=True, timeout=timeout,
        )
        return done.stdout, done.stderr, time.monotonic() - started


def load(path: Path, fragment: str = "", budget_ms: int = 5000) -> Page:
    """The page's DOM after its scripts ran (`--dump-dom`), the console messages and the wall time.

    `budget_ms` lets virtual time run on after load (timers); 0 dumps right after the load event."""
    budget = [f"--virtual-time-budget={budget_ms}"] if budget_ms else []
    dom, stderr, seconds = _run(path.resolve().as_uri() + fragment, "--dump-dom", *budget)
    return Page(dom, [m.group(1) for m in CONSOLE.finditer(stderr)], seconds)


def screenshot(path: Path, out: Path, width: int = 1400, height: int = 1800) -> Path:
    _run(path.resolve().as_uri(), f"--screenshot={out.resolve()}", f"--window-size={width},{height}", "--hide-scrollbars")
    return out
