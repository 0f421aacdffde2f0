"""Debian's headless Chromium driven by Selenium through Debian's chromedriver (no driver or
browser is downloaded: both are found on PATH), and a check that a screenshot is not blank."""

from __future__ import annotations

import contextlib
import shutil
import tempfile

import numpy as np

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--window-size=1280,1000")


class BrowserMissing(RuntimeError):
    pass


@contextlib.contextmanager
def chromium():
    """A selenium webdriver over headless Chromium with a fresh profile; BrowserMissing when
    chromium or chromedriver is not installed (tests/install_system.sh installs both)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not binary or not driver_path:
        raise BrowserMissing("chromium and chromedriver must be installed: run `bash "
                             "tests/install_system.sh` (Debian's chromium and chromium-driver, "
                             "with apt-get as root or through sudo)")
    with tempfile.TemporaryDirectory(prefix="pgn-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = binary
        for flag in CHROMIUM_FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={profile}")
        driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
        try:
            driver.set_page_load_timeout(60)
            yield driver
        finally:
            driver.quit()


def screenshot_stats(png: bytes) -> dict:
    """Size and content figures of a PNG screenshot: a blank page has one colour."""
    import tensorflow as tf

    image = tf.io.decode_png(png, channels=3).numpy()
    flat = image.reshape(-1, 3)
    colours = np.unique(flat[:: max(1, len(flat) // 200_000)], axis=0)
    return {"height": image.shape[0], "width": image.shape[1], "colours": len(colours),
            "std": float(image.std())}
