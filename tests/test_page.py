"""nmt/serve/page.py, the web page of `nmt serve`: in Debian's chromium (skipped without it), and with an
engine that has no attention maps."""

from __future__ import annotations

import os
import shutil

import pytest

pytest.importorskip("fastapi", reason="nmt[serve] not installed (pip install 'nmt[serve]')")
from serve_fixtures import SENTENCES, Server  # noqa: E402


def headless_chromium(webdriver, chromium: str, driver: str, server: Server, *, mobile: dict | None = None):
    """Debian's chromium, headless (``mobile``: its mobileEmulation); ``server`` stopped where it
    does not start."""
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    if mobile is not None:
        options.add_experimental_option("mobileEmulation", mobile)
    try:
        return webdriver.Chrome(service=webdriver.ChromeService(executable_path=driver), options=options)
    except Exception:
        server.stop()
        raise


def test_page_in_chromium(run_dir, tmp_path):
    """Types, clicks, waits, checks that the heatmap is drawn; screenshot (phone-sized window) to
    tmp_path and, with NMT_SCREENSHOT=FILE, to FILE. NMT_SERVE_TEST_CHECKPOINT serves another model."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        pytest.skip("chromium / chromedriver not installed (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    checkpoint = os.environ.get("NMT_SERVE_TEST_CHECKPOINT", str(run_dir))
    sentence = os.environ.get("NMT_SERVE_TEST_SENTENCE", SENTENCES[0])
    server = Server(f"en-de={checkpoint}", log=tmp_path / "serve.log", wait=False)  # up while chromium starts
    # a phone-sized screen (headless windows are at least 500 px wide; emulation is not)
    phone = {"deviceMetrics": {"width": 390, "height": 844, "pixelRatio": 2}}
    browser = headless_chromium(webdriver, chromium, driver, server, mobile=phone)
    try:
        server.wait_until_up()
        browser.get(server.url + "/")
        WebDriverWait(browser, 30).until(lambda b: b.find_element(By.ID, "model").get_attribute("value"))
        browser.find_element(By.ID, "source").send_keys(sentence)
        browser.find_element(By.ID, "go").click()
        WebDriverWait(browser, 60).until(
            lambda b: b.find_element(By.ID, "heatmap").get_attribute("data-drawn")
        )
        translation = browser.find_element(By.ID, "translation").text
        assert translation.strip() != ""
        assert len(browser.find_elements(By.CSS_SELECTOR, "#nbestlist li")) >= 1
        canvas = browser.find_element(By.ID, "heatmap")
        assert canvas.size["width"] > 50 and canvas.size["height"] > 50
        # something other than white was painted in the heatmap's cells
        colours = browser.execute_script(
            "const c = document.getElementById('heatmap'); const d = c.getContext('2d')"
            ".getImageData(0, 0, c.width, c.height).data; const s = new Set();"
            "for (let i = 0; i < d.length; i += 4) s.add(d[i] + ',' + d[i+1] + ',' + d[i+2]); return s.size;"
        )
        assert colours > 5
        # no horizontal scrolling of the page on a phone-sized screen
        assert browser.execute_script("return window.innerWidth") == 390
        assert browser.execute_script("return document.documentElement.scrollWidth") <= 390
        shot = tmp_path / "serve-page.png"
        browser.save_screenshot(str(shot))
        assert shot.stat().st_size > 5000
        if os.environ.get("NMT_SCREENSHOT"):
            shutil.copyfile(shot, os.environ["NMT_SCREENSHOT"])
    finally:
        browser.quit()
        server.stop()


def test_page_translates_with_an_engine_without_attention_maps(run_dir, tmp_path):
    """`--engine ctranslate2`: /attention is a 400, the page still shows the translation and says
    why there is no heatmap (it used to show only the 400's message)."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        pytest.skip("chromium / chromedriver not installed (apt-get install chromium chromium-driver)")
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    env_cache = os.environ.get("NMT_CACHE_DIR")
    os.environ["NMT_CACHE_DIR"] = str(tmp_path / "cache")  # the on-the-fly export, for the server too
    try:
        # up while chromium starts
        server = Server(f"en-de={run_dir}", "--engine", "ctranslate2", log=tmp_path / "serve.log", wait=False)
    finally:
        if env_cache is None:
            del os.environ["NMT_CACHE_DIR"]
        else:
            os.environ["NMT_CACHE_DIR"] = env_cache
    browser = headless_chromium(webdriver, chromium, driver, server)
    try:
        server.wait_until_up()
        browser.get(server.url + "/")
        WebDriverWait(browser, 30).until(lambda b: b.find_element(By.ID, "model").get_attribute("value"))
        browser.find_element(By.ID, "source").send_keys(SENTENCES[0])
        browser.find_element(By.ID, "go").click()
        WebDriverWait(browser, 60).until(lambda b: b.find_element(By.ID, "go").is_enabled())
        WebDriverWait(browser, 60).until(lambda b: b.find_element(By.ID, "translation").text.strip())
        status = browser.find_element(By.ID, "status")
        assert status.get_attribute("class") != "error"
        assert status.text.startswith("no heatmap:") and "torch engine" in status.text
        assert len(browser.find_elements(By.CSS_SELECTOR, "#nbestlist li")) >= 1
    finally:
        browser.quit()
        server.stop()
