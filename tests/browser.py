"""Headless-browser check for self-contained HTML reports (test helper, not a test file).

Drives Debian's Chromium through its ChromeDriver with Selenium. Both paths are handed to
Selenium explicitly (``binary_location`` and ``Service(executable_path=...)``), so Selenium
Manager is never run and nothing is fetched from the network.

``ensure_chromium()`` finds (or apt-installs) the browser and driver and raises if it
cannot: a machine without them must fail the browser tests, not skip them.
``check_page()`` loads one HTML file and reports its images, console log and a screenshot;
``assert_page_ok()`` turns that report into assertions.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

CHROMIUM_NAMES = ("chromium", "chromium-browser")
CHROMEDRIVER_NAMES = ("chromedriver",)
APT_PACKAGES = ("chromium", "chromium-driver")

# Exactly the flags the report check runs under; --window-size and --user-data-dir are
# added per call.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
)

MAX_SCREENSHOT_HEIGHT = 12000
LOAD_TIMEOUT_S = 30.0
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _find(names: tuple[str, ...]) -> str | None:
    for name in names:
        found = shutil.which(name) or (
            f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None
        )
        if found:
            return found
    return None


def _apt_install() -> str:
    """Run apt-get update + install of Chromium and its driver; return the combined log."""
    if os.geteuid() == 0:
        prefix: list[str] = []
    elif (
        shutil.which("sudo")
        and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0
    ):
        prefix = ["sudo", "-n"]
    else:
        return "not root and `sudo -n` is not available; cannot run apt-get"
    if shutil.which("apt-get") is None:
        return "apt-get not found (not a Debian-like system)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    log = []
    for cmd in (
        [*prefix, "apt-get", "update"],
        [
            *prefix,
            "env",
            "DEBIAN_FRONTEND=noninteractive",
            "apt-get",
            "install",
            "-y",
            "--no-install-recommends",
            *APT_PACKAGES,
        ],
    ):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        log.append(
            f"$ {' '.join(cmd)} -> {proc.returncode}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
        if proc.returncode != 0:
            break
    return "\n".join(log)


def ensure_chromium() -> tuple[str, str]:
    """Return ``(chromium_path, chromedriver_path)``, installing Debian's packages if needed.

    Raises ``RuntimeError`` when either is still missing afterwards.
    """
    chromium, driver = _find(CHROMIUM_NAMES), _find(CHROMEDRIVER_NAMES)
    if chromium and driver:
        return chromium, driver
    log = _apt_install()
    chromium, driver = _find(CHROMIUM_NAMES), _find(CHROMEDRIVER_NAMES)
    if chromium and driver:
        return chromium, driver
    raise RuntimeError(
        "Chromium and ChromeDriver are required for the browser tests but were not found "
        f"(chromium={chromium!r}, chromedriver={driver!r}). Install them with "
        "`apt-get install -y --no-install-recommends chromium chromium-driver`.\n"
        f"Automatic install attempt:\n{log}"
    )


_IMAGES_JS = """
return Array.from(document.images).map(function (img) {
    return {src: (img.getAttribute('src') || '').slice(0, 40),
            naturalWidth: img.naturalWidth,
            naturalHeight: img.naturalHeight};
});
"""

_LOADED_JS = """
return document.readyState === 'complete'
    && Array.from(document.images).every(function (img) { return img.complete; });
"""


def check_page(
    html_path: str | os.PathLike[str],
    screenshot_path: str | os.PathLike[str],
    *,
    width: int = 1280,
    height: int = 2000,
) -> dict[str, Any]:
    """Load ``html_path`` in headless Chromium and report what it rendered.

    Returns ``{"images": [{"src", "naturalWidth", "naturalHeight"}, ...],
    "console_errors": [...], "console": [...], "screenshot": Path, "title": str}``.
    ``console_errors`` holds the browser-log entries of level SEVERE (``console.error``,
    uncaught exceptions, failed loads); ``console`` holds every other entry.
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    chromium, chromedriver = ensure_chromium()
    url = Path(html_path).resolve().as_uri()
    screenshot = Path(screenshot_path)
    screenshot.parent.mkdir(parents=True, exist_ok=True)

    profile = tempfile.mkdtemp(prefix="attncoda-chromium-")
    driver = None
    try:
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for flag in CHROMIUM_FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--window-size={width},{height}")
        options.add_argument(f"--user-data-dir={profile}")
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Chrome(options=options, service=Service(executable_path=chromedriver))
        driver.set_page_load_timeout(LOAD_TIMEOUT_S)
        driver.get(url)
        WebDriverWait(driver, LOAD_TIMEOUT_S, poll_frequency=0.05).until(
            lambda d: d.execute_script(_LOADED_JS)
        )
        images = driver.execute_script(_IMAGES_JS)
        title = driver.title
        # Headless Chromium still reserves room for browser UI: the viewport is shorter than
        # the window by (outerHeight - innerHeight), so add that or the bottom is cut off.
        # documentElement.scrollHeight also counts the body's margins.
        content, ui = driver.execute_script(
            "return [Math.max(document.body.scrollHeight,"
            " document.documentElement.scrollHeight),"
            " window.outerHeight - window.innerHeight];"
        )
        target = int(content or 0) + max(int(ui or 0), 0)
        driver.set_window_size(width, max(1, min(target, MAX_SCREENSHOT_HEIGHT)))
        if not driver.save_screenshot(str(screenshot)):
            raise RuntimeError(f"Chromium could not save a screenshot to {screenshot}")
        log = driver.get_log("browser")
    finally:
        if driver is not None:
            driver.quit()
        shutil.rmtree(profile, ignore_errors=True)

    return {
        "images": images,
        "console_errors": [e for e in log if e.get("level") == "SEVERE"],
        "console": [e for e in log if e.get("level") != "SEVERE"],
        "screenshot": screenshot,
        "title": title,
    }


def assert_page_ok(result: dict[str, Any]) -> None:
    """Assert the page rendered: images decoded, no console errors, a PNG screenshot."""
    images = result["images"]
    assert images, "the page has no <img> elements"
    bad = [img for img in images if not (img["naturalWidth"] > 0 and img["naturalHeight"] > 0)]
    assert not bad, f"{len(bad)} of {len(images)} images did not decode: {bad}"
    errors = result["console_errors"]
    assert not errors, "console errors:\n" + "\n".join(
        f"  {e.get('source', '?')}: {e.get('message', e)}" for e in errors
    )
    shot = Path(result["screenshot"])
    assert shot.is_file(), f"screenshot missing: {shot}"
    assert shot.stat().st_size > 0, f"screenshot is empty: {shot}"
    with shot.open("rb") as fh:
        assert fh.read(8) == PNG_SIGNATURE, f"screenshot is not a PNG: {shot}"
