"""A real headless Chromium for the dashboard's browser tests, driven by Selenium.

It uses the machine's own executables (Debian's `chromium` and `chromium-driver`): Selenium
Manager, which would download a browser, never runs. The browser reaches only the loopback
interface: every host name and address other than 127.0.0.1 and localhost resolves to nothing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"  # tests/artifacts
# Debian's /usr/bin/chromium is a shell script that sources /etc/chromium.d (Google API keys,
# remote extensions, a /dev/shm check that fails on some machines) before it runs this binary.
DEBIAN_CHROMIUM = Path("/usr/lib/chromium/chromium")
LOOPBACK_ONLY = "MAP * ~NOTFOUND , EXCLUDE 127.0.0.1, EXCLUDE localhost"
FLAGS = (
    "--headless=new",
    # Root in a container: no user namespaces for Chromium's sandbox, and a small /dev/shm.
    "--no-sandbox",
    "--disable-dev-shm-usage",
    "--disable-gpu",
    f"--host-resolver-rules={LOOPBACK_ONLY}",
    # No proxy from the environment: the resolver rule alone decides what the browser reaches.
    "--proxy-server=direct://",
    # Nothing the browser would fetch by itself: updates, sync, metrics, first-run pages.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-breakpad",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--disable-features=Translate,OptimizationHints,MediaRouter",
    "--metrics-recording-only",
    "--no-default-browser-check",
    "--no-first-run",
    "--no-pings",
)


def _chromium_path() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        return None
    with open(found, "rb") as file:
        is_script = file.read(2) == b"#!"
    if is_script and os.access(DEBIAN_CHROMIUM, os.X_OK):
        return str(DEBIAN_CHROMIUM)
    return found


def _chromedriver_path() -> str | None:
    return shutil.which("chromedriver") or shutil.which("chromedriver", path="/usr/bin")


def chromium_missing() -> str | None:
    """Why the browser tests cannot run here (for skipif), or None when they can."""
    missing = [name for name, path in (("chromium", _chromium_path()),
                                       ("chromedriver", _chromedriver_path())) if path is None]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip)")
    if not missing:
        return None
    return f"{' and '.join(missing)} not installed (apt-get install chromium chromium-driver)"


@contextlib.contextmanager
def open_browser(width: int = 1400, height: int = 900, page_load_timeout: float = 10.0) -> Iterator:
    """A headless Chromium (a Selenium WebDriver) with a fresh profile whose pages see a width x
    height viewport; the browser is quit and the profile removed on the way out, also on errors."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    reason = chromium_missing()
    if reason:
        raise RuntimeError(reason)
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    options = webdriver.ChromeOptions()
    options.binary_location = _chromium_path()
    for flag in (*FLAGS, f"--window-size={width},{height}", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = None
    try:
        driver = webdriver.Chrome(service=Service(_chromedriver_path()), options=options)
        driver.set_page_load_timeout(page_load_timeout)
        driver.set_script_timeout(page_load_timeout)
        _size_viewport(driver, width, height)
        yield driver
    finally:
        if driver is not None:
            driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def driver():
    """One browser (open_browser's defaults) for a module's tests: a module imports this fixture to name it."""
    with open_browser() as browser:
        yield browser


def _size_viewport(driver, width: int, height: int) -> None:
    """--window-size sizes the window, toolbars included (even headless): grow it by their size
    so pages and screenshots get width x height."""
    inner_width, inner_height = driver.execute_script("return [innerWidth, innerHeight]")
    driver.set_window_size(2 * width - inner_width, 2 * height - inner_height)


def artifacts_dir() -> Path:
    """Where screenshots go: $TEST_ARTIFACTS, else tests/artifacts/ (ignored by git)."""
    folder = Path(os.environ.get("TEST_ARTIFACTS") or ARTIFACTS)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def screenshot(driver, name: str) -> Path:
    """Saves the visible page as artifacts/<name>.png and returns its path."""
    path = artifacts_dir() / f"{Path(name).name.removesuffix('.png')}.png"
    if not driver.save_screenshot(str(path)):
        raise RuntimeError(f"the browser could not save the screenshot {path}")
    return path


def js_errors(driver) -> list[dict]:
    """The console's SEVERE entries since the last call (uncaught errors, console.error, failed
    loads); reading them empties Chromium's log."""
    return [entry for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]
