"""benchmarks/serve_load.py and benchmarks/peer_server.py: the load harness, the ratios, the
equal-work check, the reference's request format, and one real arm against pgn_tf's server."""

import json
import re

import pytest

from benchmarks import peer_server, serve_load
from pgn_tf.utils.errors import UserError

pytestmark = pytest.mark.study


def test_the_reference_reads_the_article_as_its_setup_tokenized_it():
    """setup_onmt.sh's tokenizer: lowercased, words with inner - ' . kept whole, punctuation
    apart, cut to the first N tokens."""
    setup = re.compile(r"\w+(?:[-'.]\w+)*|[^\w\s]")
    text = "GNU Emacs's X11 front-end (v2.0), e.g. for i386."
    assert peer_server.peer_tokens(text, 100) == " ".join(setup.findall(text.lower()))
    assert peer_server.peer_tokens(text, 100) == \
        "gnu emacs's x11 front-end ( v2.0 ) , e.g . for i386 ."
    assert peer_server.peer_tokens(text, 3) == "gnu emacs's x11"


def test_the_reference_model_is_the_newest_step_and_its_config_one_model(tmp_path):
    with pytest.raises(FileNotFoundError, match="bench.sh"):
        peer_server.newest_model(str(tmp_path))
    (tmp_path / "run").mkdir()
    for name in ("model_step_300.pt", "model_step_1500.pt", "model_step_x.pt", "other.pt"):
        (tmp_path / "run" / name).write_bytes(b"")
    model = peer_server.newest_model(str(tmp_path))
    assert model.endswith("model_step_1500.pt")
    conf = tmp_path / "conf.json"
    peer_server.write_config(str(conf), model, 4, 30, 30)
    got = json.loads(conf.read_text())
    (entry,) = got["models"]
    assert got["models_root"] == str(tmp_path / "run") and entry["model"] == "model_step_1500.pt"
    assert entry["opt"]["beam_size"] == 4 and entry["opt"]["gpu"] == -1
    assert (entry["opt"]["min_length"], entry["opt"]["max_length"]) == (30, 30)
    assert entry["load"] is True and entry["timeout"] == -1
    assert "_addcopykeys" in peer_server.LAUNCHER and "main()" in peer_server.LAUNCHER


def test_the_load_counts_every_answer_and_every_failure_by_its_kind():
    sent = []

    def make():
        def send(article):
            sent.append(article)
            if article == "bad":
                raise ConnectionError(article)
        return send, lambda: None

    res = serve_load.load(make, ["a", "bad", "c"], concurrency=2, seconds=0.2)
    assert res["requests"] + res["failures"] == len(sent) > 0
    assert res["failures"] == sent.count("bad") and res["failure_kinds"] in (
        [], ["ConnectionError"])
    assert res["requests_per_sec"] > 0 and res["p50_ms"] <= res["p99_ms"]


def test_the_table_gives_each_row_its_ratios_at_the_same_concurrency():
    rows = [{"arm": arm, "concurrency": c, "requests_per_sec": rps, "p50_ms": 1.0,
             "p99_ms": 2.0, "failures": 0, "peak_rss_mib": 900.0}
            for arm, c, rps in (("unbatched", 16, 10.0), ("batched", 16, 35.0),
                                ("reference", 16, 7.0), ("batched", 64, 40.0))]
    lines = serve_load.table(rows).splitlines()
    assert lines[2].endswith("| 1.43 |")  # unbatched: only the reference's ratio
    assert lines[3].endswith("| 3.50 | 5.00 |")
    assert lines[4].endswith("| 0.70 |  |")  # the reference over pgn_tf's unbatched, 0.70
    assert lines[5].endswith("|  |  |")  # nothing to compare at 64


def test_equal_work_refuses_an_export_that_decodes_another_length(tmp_path):
    serve_load.check_forced({"min_dec_steps": 30, "max_dec_steps": 30}, 30)
    serve_load.check_forced({"min_dec_steps": 1, "max_dec_steps": 30, "fixed_length": 30}, 30)
    with pytest.raises(UserError, match="decode.min_dec_steps=30"):
        serve_load.check_forced({"min_dec_steps": 3, "max_dec_steps": 30, "fixed_length": 0},
                                30)
    with pytest.raises(UserError, match="no numbered version"):
        serve_load.export_decoding(str(tmp_path))
    (tmp_path / "7").mkdir()
    with pytest.raises(UserError, match="missing or unreadable"):
        serve_load.export_decoding(str(tmp_path))


def test_the_reference_arm_needs_its_work_dir(capsys):
    assert serve_load.main(["--arms", "reference"]) != 0
    assert "needs --peer_work" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        serve_load.main(["--arms", "batched"])  # no --model_base_path


@pytest.mark.slow
def test_one_real_arm_of_pgn_tfs_server(exported, capsys):
    """The unbatched and batched arms against the tiny export: rows for each concurrency,
    no failures, the server's peak RSS read, the export's decoding named."""
    base, name, _ = exported
    a = serve_load.build_parser().parse_args(
        ["--model_base_path", f"{base}/{name}", "--model_name", name, "--concurrency", "1", "4",
         "--seconds", "1"])
    result = serve_load.run(a)
    rows = result["rows"]
    assert [(r["arm"], r["concurrency"]) for r in rows] == [
        ("unbatched", 1), ("unbatched", 4), ("batched", 1), ("batched", 4)]
    assert all(r["failures"] == 0 and r["requests"] > 0 and r["peak_rss_mib"] > 0
               for r in rows)
    assert result["export_decoding"]["version"] == 1
    assert "| batched | 4 |" in capsys.readouterr().out
