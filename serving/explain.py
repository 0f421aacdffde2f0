"""The explanation page: `GET /v1/models/NAME[/versions/V | /labels/L]/explain`.

A self-contained HTML page (serving/static/explain.html: inline CSS and JavaScript, nothing
fetched from elsewhere; its Content-Security-Policy allows requests to this server only). The
user pastes or opens an article; the page sends it to the server's own REST API,
`POST .../NAME[/versions/V]:predict` with `signature_name: "summarize_verbose"`, and shows the
summary with each output token coloured by its generation probability p_gen (See et al. 2017,
eq. 8) and, on hover, that step's attention over the article (eq. 2). Off with
`--no_explain_page`.

The attention's columns are the article tokens the encoder read. summarize_verbose does not
return them, so the page tokenizes the article itself with the model's tokenizer: the rules of
pgn_tf.text (core RE2 patterns, sent here in JavaScript's syntax) and the version's data config
(lowercasing, digits, the token cut), read from its assets.extra/config.json. A test checks the
page's tokens against pgn_tf.text on awkward text; where they could still differ the page says
so and numbers the positions.
"""

from __future__ import annotations

import functools
import html
import json
import os
import re
from importlib import resources

_SPACE = r"[\t\n\f\r ]"  # RE2's \s (Perl's class); JavaScript's \s also matches Unicode spaces
CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
       "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
       "frame-ancestors 'none'")


def js_rules() -> list[list[str]]:
    """pgn_tf.text's (pattern, rewrite) rules in JavaScript RegExp / String.replace syntax."""
    from pgn_tf import text

    out = []
    for pattern, rewrite in text._RULES:
        pattern = pattern.replace(r"\S", "[^" + _SPACE[1:]).replace(r"\s", _SPACE)
        rewrite = re.sub(r"\\(\d)", r"$\1", rewrite.replace("$", "$$"))
        out.append([pattern, rewrite])
    return out


@functools.lru_cache(maxsize=64)
def tokenizer_settings(version_path: str) -> dict:
    """What the page's tokenizer needs from a version's assets.extra/config.json (the pgn_tf
    defaults when the export has none)."""
    from pgn_tf import config as config_lib

    data = config_lib.Config().data
    path = os.path.join(version_path, "assets.extra", "config.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            data = config_lib.Config.from_dict(json.load(f)).data
    return {"rules": js_rules(), "lowercase": bool(data.lowercase),
            "replace_digits": bool(data.replace_digits),
            "max_chars": int(data.max_enc_steps) * 20, "max_tokens": int(data.max_enc_steps)}


@functools.cache
def _template() -> str:
    return resources.files("pgn_tf.serving").joinpath("static", "explain.html").read_text("utf-8")


def page(model: str, version: int | None, label: str | None, version_path: str) -> bytes:
    """The page for one model (and the version or label its path named)."""
    base = "/v1/models/" + model
    if version is not None:
        base += f"/versions/{version}"
    elif label is not None:
        base += f"/labels/{label}"
    config = {"model": model, "version": version, "label": label,
              "predict_path": base + ":predict", "tokenizer": tokenizer_settings(version_path)}
    # JSON inside <script type="application/json">: no "<" may close the element early.
    blob = json.dumps(config).replace("<", "\\u003c").replace(">", "\\u003e")
    body = _template().replace("__PGN_CONFIG__", blob)
    return body.replace("<title>pgn_tf: explain a summary</title>",
                        f"<title>pgn_tf: explain a summary ({html.escape(model)})</title>"
                        ).encode("utf-8")
