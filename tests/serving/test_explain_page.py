"""The explanation page (serving.explain), in a real headless Chromium: it loads, takes an
article, shows the summary with one p_gen-coloured span per output token and the attention on
hover, and its screenshot is not blank. No skip: a missing browser fails the test (Debian's
chromium and chromium-driver; tests/install_system.sh installs them when missing)."""

import io
import json
import os
import shutil

import pytest

from pgn_tf import config as config_lib
from pgn_tf.inference.api import article_tokens
from pgn_tf.serving import explain
from pgn_tf.serving.rest_service import RestApp
from pgn_tf.serving.server import build_parser, options_from_args
from tests.serving.browser import BrowserMissing, chromium, screenshot_stats
from tests.serving.helpers import ARTICLE, rest

# Text where a tokenizer port could go wrong: quotes, clitics, numbers, ellipses, brackets,
# Unicode quotes and spaces, case, tabs.
AWKWARD = [
    'He said "don\'t" -- it\'s 3.5% of 1,000 (roughly)... OK?',
    "“Quoted” ‘single’ rock 'n' roll 'tis the Dogs' bone; e.g. U.S. ... end.",
    "ÉCOLE Straße İstanbul ΣΟΦΙΑΣ tab\there\u00a0nbsp  double\u2003em [x]{y}<z>",
    "we'll they're I'm you've he'd can't won't o'clock 'quoted' x'",
]


def _page_url(server, tail="explain"):
    return f"http://127.0.0.1:{server.rest_port}/v1/models/pgn/{tail}"


def test_page_is_self_contained_and_can_be_switched_off(server):
    import urllib.request

    with urllib.request.urlopen(_page_url(server), timeout=30) as r:
        page = r.read().decode("utf-8")
        headers = r.headers
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert "connect-src 'self'" in headers["Content-Security-Policy"]
    assert "http://" not in page and "https://" not in page  # nothing fetched from elsewhere
    assert '"predict_path": "/v1/models/pgn:predict"' in page
    code, _ = rest(server.rest_port, "/v1/models/pgn/versions/1/explain")
    assert code == 200
    code, body = rest(server.rest_port, "/v1/models/pgn/explain", raw=b"{}", method="POST")
    assert code == 400 and "takes GET" in body["error"]
    code, body = rest(server.rest_port, "/v1/models/nope/explain")
    assert code == 404

    args = build_parser().parse_args(["--model_base_path", "x", "--no_explain_page"])
    assert options_from_args(args)[1].explain_page is False
    off = RestApp(server.predictor, server.registry, None, None, None,
                  explain_page=options_from_args(args)[1].explain_page)
    status = []
    body = off({"REQUEST_METHOD": "GET", "PATH_INFO": "/v1/models/pgn/explain",
                "wsgi.input": io.BytesIO()}, lambda s, h: status.append(s))
    assert status == ["404 Not Found"]
    assert "--no_explain_page" in json.loads(b"".join(body))["error"]


@pytest.mark.slow
def test_explain_page_in_headless_chromium(server, exported, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _, _, version_dir = exported
    with open(os.path.join(version_dir, "assets.extra", "config.json")) as f:
        data_cfg = config_lib.Config.from_dict(json.load(f)).data
    code, want = rest(server.rest_port, "/v1/models/pgn:predict",
                      {"signature_name": "summarize_verbose", "instances": [ARTICLE]})
    assert code == 200
    want = want["predictions"][0]
    want_tokens = [t for t in want["tokens"] if t]
    try:
        browser = chromium()
        driver = browser.__enter__()
    except BrowserMissing as e:
        pytest.fail(str(e))  # loudly: CI must have the browser
    try:
        driver.get(_page_url(server))
        assert "explain a summary" in driver.title
        # The page's tokenizer is pgn_tf's: same tokens on awkward text and a cut article.
        long_article = ("café " * 30 + "x" * 40) * 10
        for text in AWKWARD + [ARTICLE, long_article]:
            got = driver.execute_script("return window.pgnTokenize(arguments[0]);", text)
            assert got == article_tokens([text], data_cfg)[0], text

        area = driver.find_element(By.ID, "article")
        area.send_keys(ARTICLE)
        driver.find_element(By.ID, "run").click()
        WebDriverWait(driver, 60).until(
            lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-state") != "running")
        assert driver.find_element(By.TAG_NAME, "body").get_attribute("data-state") == "done", \
            driver.find_element(By.ID, "error").text
        assert driver.find_element(By.ID, "summary").text == want["summaries"]
        spans = driver.find_elements(By.CSS_SELECTOR, "#tokens .tok")
        assert [s.text for s in spans] == want_tokens  # one span per output token
        assert driver.find_element(By.ID, "tokens").get_attribute("data-count") == str(len(spans))
        for s, p in zip(spans, want["p_gen"]):
            assert abs(float(s.get_attribute("data-p-gen")) - p) < 1e-3
            assert s.value_of_css_property("background-color") not in ("rgba(0, 0, 0, 0)", "")
        source = driver.find_elements(By.CSS_SELECTOR, "#source .src")
        assert [s.text for s in source] == article_tokens([ARTICLE], data_cfg)[0]
        assert driver.find_element(By.ID, "warning").text == ""

        # Hovering a token shades the article by its attention: the most attended word fully.
        i = len(spans) // 2
        ActionChains(driver).move_to_element(spans[i]).perform()
        assert "active" in spans[i].get_attribute("class")
        caption = driver.find_element(By.ID, "caption").text
        assert caption.startswith(f'Attention of output token {i + 1} "{want_tokens[i]}"')
        row = want["attention"][i]
        best = max(range(len(row)), key=row.__getitem__)
        assert source[best].value_of_css_property("background-color") == "rgba(230, 60, 40, 1)"

        shot = tmp_path / "explain.png"
        assert driver.save_screenshot(str(shot))
        stats = screenshot_stats(shot.read_bytes())
        assert stats["width"] >= 1000 and stats["colours"] > 50 and stats["std"] > 10, stats
        if os.environ.get("PGN_SCREENSHOT_DIR"):  # keep it (docs/explain.png)
            shutil.copy(shot, os.environ["PGN_SCREENSHOT_DIR"])

        # An empty article is refused on the page, before any request.
        area.clear()
        driver.find_element(By.ID, "run").click()
        assert "Paste or open an article" in driver.find_element(By.ID, "error").text
    finally:
        browser.__exit__(None, None, None)


def test_js_rules_follow_pgn_tf_text():
    from pgn_tf import text

    rules = explain.js_rules()
    assert len(rules) == len(text._RULES)
    assert all("\\s" not in p and "\\S" not in p for p, _ in rules)  # RE2's ASCII spaces
    assert rules[2] == [r"\.([\t\n\f\r ]|$)", r" . $1"]
