"""The digest table's pieces: the peer's config and clock, the claims' paired tests, the table
and the repetition figure, computed from rows and decoded files, never written by hand."""

import json
import sys
import xml.etree.ElementTree as ET

import pytest

from pgn_tf.utils import child_process
from research.studies import digest_peer, quality_table, svg_chart
from research.studies import digest_table as dt

pytestmark = pytest.mark.study  # research, apart from the product (pyproject.toml)


def test_the_peer_trains_bench_shs_digest_config_without_a_step_limit():
    ref = {"src_vocab_size": 20000, "tgt_vocab_size": 20000, "batch_size": 32,
           "train_steps": 60, "save_checkpoint_steps": 100000, "copy_attn": True,
           "save_model": "run/model", "data": {"corpus_1": {"path_src": "data/train.src"}}}
    cfg = digest_peer.peer_yaml(ref, "hour", 250)
    assert (cfg["src_vocab_size"], cfg["tgt_vocab_size"], cfg["batch_size"]) == (
        50_000, 50_000, 16)
    assert (cfg["bucket_size"], cfg["save_checkpoint_steps"], cfg["keep_checkpoint"]) == (
        16_384, 250, 2)
    assert cfg["train_steps"] >= 10**6 and cfg["save_model"] == "hour/model"
    assert cfg["copy_attn"] and cfg["data"] == ref["data"]  # the rest is the reference's
    assert ref["batch_size"] == 32  # not changed in place


def test_the_last_checkpoint_is_the_highest_step(tmp_path):
    assert digest_peer.latest_checkpoint(str(tmp_path)) is None
    assert digest_peer.latest_checkpoint(str(tmp_path / "missing")) is None
    for name in ("model_step_250.pt", "model_step_1000.pt", "model_step_750.pt", "other.pt",
                 "model_step_x.pt"):
        (tmp_path / name).write_bytes(b"")
    assert digest_peer.latest_checkpoint(str(tmp_path)) == (str(tmp_path / "model_step_1000.pt"), 1000)


def test_the_peers_clock_stops_it_at_the_deadline(tmp_path):
    log = str(tmp_path / "log.txt")
    assert child_process.run_for([sys.executable, "-c", "print('quick')"], 60, log) is False
    # a child of the command stops too: the whole process group gets the signal
    stopped = child_process.run_for(
        ["bash", "-c", f"{sys.executable} -c 'import signal; signal.pause()'; echo never"], 1.0, log)
    assert stopped is True
    lines = open(log).read().splitlines()
    assert "quick" in lines and "never" not in lines  # (the command line itself is logged)


def _decoded(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return str(path)


def _row(name, stage, decoded, **extra):
    row = {"name": name, "stage": stage, "rouge1": 40.0, "rouge1_ci95": [39.0, 41.0],
           "rouge2": 20.0, "rouge2_ci95": [19.0, 21.0], "rougeLsum": 37.0,
           "rougeLsum_ci95": [36.0, 38.0], "dup_1gram_pct": 20.0, "dup_2gram_pct": 3.0,
           "dup_3gram_pct": 1.0, "dup_4gram_pct": 0.5, "dup_sentence_pct": 2.0,
           "novel_2gram_pct": 30.0, "block_match_pct": 60.0, "block_match_pct_at_0.3": 80.0,
           "block_match_pct_at_0.7": 30.0, "repeated_sentence_pct": 5.0,
           "block_revisit_pct": 4.0, "sentences_per_summary": 4.2,
           "avg_summary_tokens": 35.0, "reference_dup_1gram_pct": 18.1,
           "reference_dup_2gram_pct": 1.3, "reference_dup_3gram_pct": 0.1,
           "reference_dup_4gram_pct": 0.0, "reference_dup_sentence_pct": 0.0,
           "reference_novel_2gram_pct": 70.6, "reference_repeated_sentence_pct": 0.1,
           "reference_block_revisit_pct": 0.0, "reference_sentences_per_summary": 4.4,
           "decoded": decoded}
    row.update(extra)
    return row


def _table(tmp_path, rows):
    work = tmp_path / "w"
    work.mkdir(exist_ok=True)
    (work / "settings.json").write_text(json.dumps(
        {"minutes": 60, "baseline_minutes": 45, "paulus_minutes": 60, "rl_minutes": 20,
         "peer_minutes": 60, "score": 8, "cpu_flags": "avx2"}))
    settings = dt.DigestSettings(data_dir=str(tmp_path), work_dir=str(work), score=8,
                                 figure=str(tmp_path / "docs" / "rep.svg"))
    table = dt.DigestTable(settings)
    table.rows = rows
    return table


def _digest_rows(matched, repeated, decoded="a b c . d e f ."):
    return [{"id": str(i), "decoded": decoded, "reference": f"ref {i} .\nmore {i} .",
             "blocks": 4, "blocks_matched": m, "sentences": 2, "repeated_sentences": r}
            for i, (m, r) in enumerate(zip(matched, repeated))]


def test_claims_are_paired_bootstraps_in_the_claimed_direction(tmp_path):
    n = 8
    pgn = _decoded(tmp_path / "pgn.jsonl", _digest_rows([1] * n, [1] * n))
    cov = _decoded(tmp_path / "cov.jsonl", _digest_rows([3] * n, [0] * n))
    table = _table(tmp_path, [_row(dt.PGN, "see", pgn), _row(dt.COV, "see", cov)])
    claims = {c["claim"]: c for c in table.claims()}
    # only the claims whose two rows exist
    assert set(claims) == {c[0] for c in dt.CLAIMS if {c[1], c[2]} == {dt.PGN, dt.COV}}
    blocks = claims["coverage covers more blocks"]
    # per digest: 25% vs 75% of 4 blocks matched, the same on every digest
    assert (blocks["mean_a"], blocks["mean_b"], blocks["delta"]) == (25.0, 75.0, 50.0)
    assert blocks["holds"] and blocks["p_value"] < 0.05
    rep = claims["coverage lowers the share of repeated sentences"]
    # lower is the claim: A - B = 50 - 0
    assert (rep["mean_a"], rep["mean_b"], rep["delta"], rep["holds"]) == (50.0, 0.0, 50.0, True)
    same = claims["coverage lowers the share of duplicate 3-grams"]  # identical outputs
    assert same["delta"] == 0.0 and not same["holds"]
    line = table.claim_line(rep)
    assert line.startswith("coverage lowers the share of repeated sentences (% sentences "
                           "repeated: ") and line.endswith("A - B +50.00 [50.00, 50.00], one-sided "
                                                           f"paired bootstrap p = {rep['p_value']:.4f}"
                                                           "): holds")


def test_claims_refuse_rows_scored_on_other_digests(tmp_path):
    a = _decoded(tmp_path / "a.jsonl", _digest_rows([1, 2], [0, 0]))
    other = _digest_rows([1, 2], [0, 0])
    other[1]["reference"] = "something else ."
    b = _decoded(tmp_path / "b.jsonl", other)
    table = _table(tmp_path, [_row(dt.PGN, "see", a), _row(dt.COV, "see", b)])
    with pytest.raises(SystemExit, match="not scored on the same digests"):
        table.claims()


def test_the_table_gives_budgets_the_digest_measures_and_the_references(tmp_path):
    rows = [_row(dt.LEAD_BLOCKS, "lead", "x"), _row(dt.COV, "see", "x", train_minutes=60.2,
                                                     train_steps=5000),
            _row(dt.SEE_RL, "see_rl", "x"), _row(dt.PEER, "peer", "x")]
    text = _table(tmp_path, rows).table()
    lines = [x for x in text.splitlines() if x.startswith("| ")]
    assert len(lines) == 1 + 4
    cov = next(x for x in lines if x.startswith(f"| {dt.COV} |"))
    assert "| 45 + 15 | 60.2 | 5000 | 40.00 [39.00, 41.00] |" in cov
    assert "| 20.0 / 3.0 / 1.0 / 0.5 | 2.0 | 30.0 | 80.0 / 60.0 / 30.0 | 5.0 | 4.0 |" in cov
    assert "| 45 + 15 + 20 |" in next(x for x in lines if x.startswith(f"| {dt.SEE_RL} |"))
    assert "| 60 (wall clock) |" in next(x for x in lines if x.startswith(f"| {dt.PEER} |"))
    assert text.rstrip().endswith("References: duplicate 1/2/3/4-grams 18.1 / 1.3 / 0.1 / 0.0%, "
                                  "duplicate sentences 0.0%, novel 2-grams 70.6%, sentences "
                                  "repeated 0.1%, blocks revisited 0.0%, 4.4 sentences a "
                                  "summary.")


def test_the_see_budgets_follow_the_recorded_coverage_split(tmp_path):
    table = _table(tmp_path, [])
    settings = json.loads((tmp_path / "w" / "settings.json").read_text())
    settings["coverage_minutes"] = 20
    (tmp_path / "w" / "settings.json").write_text(json.dumps(settings))
    budgets = table.budgets()
    assert (budgets[dt.PGN], budgets[dt.COV], budgets[dt.SEE_RL]) == ("40", "40 + 20",
                                                                      "40 + 20 + 20")


def test_the_coverage_phase_must_leave_the_pointer_generator_time(tmp_path):
    for minutes in ("60", "0"):
        with pytest.raises(SystemExit):
            dt.main(["--data_dir", str(tmp_path), "--work_dir", str(tmp_path / "w"),
                     "--stages", "see", "--coverage_minutes", minutes])
    assert not (tmp_path / "w").exists()


def test_the_repetition_figure_has_a_bar_per_system_and_category(tmp_path):
    rows = [_row(dt.PGN, "see", "x"), _row(dt.COV, "see", "x", dup_3gram_pct=0.2),
            _row(dt.BASE, "baseline", "x"), _row(dt.PEER, "peer", "x")]  # table rows only
    svg = ET.fromstring(_table(tmp_path, rows).figure())
    ns = "{http://www.w3.org/2000/svg}"
    bars = [r for r in svg.iter(f"{ns}rect") if r.find(f"{ns}title") is not None]
    assert len(bars) == 3 * 5  # pgn, coverage, references x 1-4-grams and sentences
    titles = [r.find(f"{ns}title").text for r in bars]
    assert f"{dt.COV}: 0.2" in titles and "references: 18.1" in titles


def test_a_chart_needs_a_value_per_category():
    with pytest.raises(ValueError, match="has 1 values for 2 categories"):
        svg_chart.grouped_bars(["a", "b"], {"s": [1.0]}, "t", "y")


def test_quality_table_names_the_digests_command():
    """digest_table builds on quality_table, so quality_table does not import it back: it names
    the command to run instead."""
    with pytest.raises(SystemExit, match="python -m research.studies.digest_table --data_dir D"):
        quality_table.main(["--corpus", "digests", "--data_dir", "D", "--minutes", "0.3"])


def _bar_heights(svg_text: str) -> dict[str, float]:
    ns = "{http://www.w3.org/2000/svg}"
    svg = ET.fromstring(svg_text)
    return {r.find(f"{ns}title").text: float(r.get("height")) for r in svg.iter(f"{ns}rect")
            if r.find(f"{ns}title") is not None}


def test_a_shared_axis_scales_every_group_to_the_largest_value():
    heights = _bar_heights(svg_chart.grouped_bars(["a", "b"], {"s": [20.0, 1.0], "t": [10.0, 0.5]},
                                                  "t", "y", height=420))
    assert heights["s: 20"] == pytest.approx(300.0)  # the plot's height: 420 - 70 - 50
    assert heights["s: 1"] == pytest.approx(15.0) and heights["t: 0.5"] == pytest.approx(7.5)


def test_groups_on_their_own_scales_each_reach_the_top():
    heights = _bar_heights(svg_chart.grouped_bars(["a", "b"], {"s": [20.0, 1.0], "t": [10.0, 0.5]},
                                                  "t", "y", height=420, shared_axis=False))
    assert heights["s: 20"] == pytest.approx(300.0) and heights["s: 1"] == pytest.approx(300.0)
    assert heights["t: 10"] == pytest.approx(150.0) and heights["t: 0.5"] == pytest.approx(150.0)


def test_the_default_coverage_split_is_the_digest_presets(tmp_path, monkeypatch):
    from pgn_tf import config

    seen = {}
    monkeypatch.setattr(dt.quality_table, "run",
                        lambda table, stages, render, **settings: seen.update(settings))
    dt.main(["--data_dir", str(tmp_path), "--work_dir", str(tmp_path / "w"), "--stages", "see"])
    pgn = config.resolve("digest_pgn").train.max_minutes
    cov = config.resolve("digest_coverage").train.max_minutes
    assert (pgn, cov) == (40, 20)  # set by the 2026-11-26 run (docs/results/digests.md)
    assert seen["coverage_minutes"] == pytest.approx(20.0) and seen["minutes"] == 60.0
    assert seen["baseline_minutes"] == pgn  # the baseline gets the pointer-generator's time
    dt.main(["--data_dir", str(tmp_path), "--work_dir", str(tmp_path / "w"), "--stages", "see",
             "--minutes", "30"])
    assert seen["coverage_minutes"] == pytest.approx(10.0)
