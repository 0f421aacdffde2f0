"""The quality table's claims and targets are computed from the rows, not written by hand."""

import argparse

from benchmarks import quality_table


def _row(name, r1, **extra):
    row = {"name": name, "rouge1": r1, "rouge1_ci95": [r1 - 1, r1 + 1], "rouge2": r1 / 2,
           "rouge2_ci95": [0, r1], "rougeLsum": r1 - 2, "rougeLsum_ci95": [0, r1],
           "dup_3gram_pct": 1.0, "repeat_token_outputs_pct": 10.0, "novel_1gram_pct": 5.0,
           "novel_2gram_pct": 30.0, "unk_outputs_pct": 0.0, "reference_repeat_token_pct": 11.2}
    row.update(extra)
    return row


def _table(tmp_path, rows):
    args = argparse.Namespace(data_dir=str(tmp_path), work_dir=str(tmp_path / "w"),
                              minutes=15, score=100, tune=10)
    table = quality_table.Table(args)
    table.rows = rows
    return table


def _rows(cov_r1=41.0, cov_repeat=12.0, rl_lsum_gain=1.0, ppl=(40.0, 35.0, 27.0)):
    return [
        _row("lead-8 words", 30.0),
        _row("see2017 baseline", 20.0, unk_outputs_pct=80.0, repeat_token_outputs_pct=40.0),
        _row("see2017 pointer-generator", 38.0, unk_outputs_pct=5.0,
             repeat_token_outputs_pct=20.0),
        _row("see2017 pointer-generator + coverage", cov_r1,
             repeat_token_outputs_pct=cov_repeat),
        _row("paulus2017 ML", 40.0),
        _row("paulus2017 ML+RL", 40.0, rougeLsum=38.0 + rl_lsum_gain),
        _row("rush2015 ABS (bow encoder)", 20.0, perplexity=ppl[0]),
        _row("rush2015 ABS (conv encoder)", 21.0, perplexity=ppl[1]),
        _row("rush2015 ABS (attention encoder)", 22.0, perplexity=ppl[2]),
    ]


def test_claims_and_targets_follow_the_rows(tmp_path):
    claims = _table(tmp_path, _rows()).claims()
    assert claims[0].endswith("holds") and claims[1].endswith("holds")
    assert claims[2].endswith("holds") and claims[3].endswith("holds")
    assert claims[4].endswith("met by 0.45")  # 41.00 - 38.55 - 2
    assert claims[5].endswith("met by 18.00")  # 41 - 20 - 3
    assert claims[6].endswith("missed by 0.80")  # 12.0% of outputs vs the references' 11.2%

    claims = _table(tmp_path, _rows(cov_r1=39.0, cov_repeat=9.0, rl_lsum_gain=-1.0,
                                    ppl=(30.0, 35.0, 27.0))).claims()
    assert claims[2].endswith("does not hold") and claims[3].endswith("does not hold")
    assert claims[4].endswith("missed by 1.55")
    assert claims[6].endswith("met by 2.20")


def test_table_has_a_row_per_system_and_the_reference_rate(tmp_path):
    text = _table(tmp_path, _rows()).table()
    lines = [x for x in text.splitlines() if x.startswith("| ")]
    assert len(lines) == 1 + 9  # the header and one line per system
    assert "| 41.00 [40.00, 42.00] |" in text
    assert text.rstrip().endswith("References: 11.2% of them repeat a token.")
