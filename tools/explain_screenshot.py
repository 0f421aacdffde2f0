"""A screenshot of the explanation page (serving.explain) for the documentation: serves a model
base path on free loopback ports, opens the page in headless Chromium (tests/serving/browser.py),
submits one article, hovers one output token and saves the page as PNG.

    python -m tools.explain_screenshot --model_base_path runs/export/pgn \
        --article article.txt --out docs/explain.png [--hover 3] [--name pgn]

Needs Debian's chromium and chromium-driver, and selenium (`pip install -e ".[test]"`).
"""

from __future__ import annotations

import argparse


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model_base_path", required=True)
    p.add_argument("--name", default="pgn")
    p.add_argument("--article", required=True, help="a text file holding one article")
    p.add_argument("--out", required=True, help="the PNG to write")
    p.add_argument("--hover", type=int, default=2, help="the output token to hover (0-based)")
    p.add_argument("--height", type=int, default=760)
    a = p.parse_args()

    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from pgn_tf.serving.service import Server
    from tests.serving.browser import chromium, screenshot_stats

    with open(a.article, encoding="utf-8") as f:
        article = f.read().strip()
    server = Server({a.name: a.model_base_path}, rest_port="auto")
    try:
        with chromium() as driver:
            driver.set_window_size(1280, a.height)
            driver.get(f"http://127.0.0.1:{server.rest_port}/v1/models/{a.name}/explain")
            driver.execute_script("document.getElementById('article').value = arguments[0];",
                                  article)
            driver.find_element(By.ID, "run").click()
            WebDriverWait(driver, 120).until(lambda d: d.find_element(
                By.TAG_NAME, "body").get_attribute("data-state") in ("done", "error"))
            spans = driver.find_elements(By.CSS_SELECTOR, "#tokens .tok")
            if spans:
                ActionChains(driver).move_to_element(spans[min(a.hover, len(spans) - 1)]).perform()
            driver.save_screenshot(a.out)
            print(f"summary: {driver.find_element(By.ID, 'summary').text}")
    finally:
        server.stop()
    with open(a.out, "rb") as f:
        print(f"wrote {a.out}: {screenshot_stats(f.read())}")


if __name__ == "__main__":
    main()
