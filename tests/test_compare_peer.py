"""compare_peer reads the reference's bench.sh output: every figure, and a clear error when a
line is missing."""

import pytest

from benchmarks import compare_peer
from pgn_tf.errors import UserError

# bench.sh's output (both modes), its training log's parameter lines included.
OUTPUT = """\
[2026-11-20 10:00:01,123 INFO] encoder: 5923584
[2026-11-20 10:00:01,123 INFO] decoder: 5557249
[2026-11-20 10:00:01,124 INFO] * number of parameters: 11480833
peer training: 5437 source tokens/s, 0.373 s/step (steps 150-300)
peer decoding: 2865 articles in 33.1 s = 86.6 articles/s (translation time; 36.0 s wall with start-up)
"""


def test_every_figure_of_both_modes_is_read():
    assert compare_peer.parse_peer(OUTPUT) == {
        "train_src_tokens_per_sec": 5437.0, "train_sec_per_step": 0.373,
        "train_steps": "150-300", "params": 11480833, "decode_articles": 2865,
        "decode_seconds": 33.1, "decode_articles_per_sec": 86.6,
    }


def test_a_mode_needs_only_its_own_lines():
    decode_only = OUTPUT.splitlines()[-1]
    assert compare_peer.parse_peer(decode_only, "decode")["decode_articles_per_sec"] == 86.6
    train = compare_peer.parse_peer("\n".join(OUTPUT.splitlines()[:4]), "train")
    assert (train["params"], train["train_sec_per_step"]) == (11480833, 0.373)


def test_a_missing_line_is_named_with_the_output_tail():
    broken = OUTPUT.replace("peer decoding", "Traceback: onmt_translate failed\n#")
    with pytest.raises(UserError, match="(?s)no .peer decoding: .*onmt_translate failed"):
        compare_peer.parse_peer(broken)


def test_ratios_are_ours_over_the_peer_and_skip_missing_figures():
    mine = {"train_src_tokens_per_sec": 2718.5, "train_sec_per_step": 0.746, "params": 100}
    peer = {"train_src_tokens_per_sec": 5437.0, "train_sec_per_step": 0.373}
    assert compare_peer.ratios(mine, peer) == {"train_src_tokens_per_sec": 0.5,
                                               "train_sec_per_step": 2.0}


def test_the_peer_examples_per_second_come_from_its_batch_of_sentences(tmp_path):
    (tmp_path / "onmt-ref.yaml").write_text("batch_size: 32\nbatch_type: sents\n")
    assert compare_peer.peer_batch_size(str(tmp_path)) == 32
    (tmp_path / "onmt-ref.yaml").write_text("batch_size: 4096\nbatch_type: tokens\n")
    assert compare_peer.peer_batch_size(str(tmp_path)) is None


def test_a_variant_is_a_name_and_its_overrides():
    assert compare_peer.parse_variant("xla:train.jit_compile=true") == (
        "xla", ["train.jit_compile=true"])
    assert compare_peer.parse_variant(" both : data.cache_tokens=true, train.jit_compile=true") \
        == ("both", ["data.cache_tokens=true", "train.jit_compile=true"])
    for bad in ("train.jit_compile=true", "xla:", ":train.jit_compile=true", "xla:jit=true",
                "xla:train.jit_compile"):
        with pytest.raises(UserError, match="expected NAME:SECTION.KEY=VALUE"):
            compare_peer.parse_variant(bad)


def test_a_bad_variant_stops_the_run_before_anything_is_timed(tmp_path, capsys):
    args = ["--skip_peer", "--data_dir", str(tmp_path), "--config", "tiny",
            "--work_dir", str(tmp_path / "w")]
    assert compare_peer.main([*args, "--variant", "x:train.no_such_key=1"]) != 0
    assert "--variant x:train.no_such_key=1" in capsys.readouterr().err
    assert compare_peer.main([*args, "--variant", "x:train.jit_compile=true",
                              "--variant", "x:data.cache_tokens=true"]) != 0
    assert "given twice" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


def test_the_variant_lines_give_ratios_to_the_default_and_the_reference():
    default = {"src_tokens_per_sec": 2000.0}
    variants = {"xla": {"src_tokens_per_sec": 3000.0, "sec_per_step": 0.5,
                        "precision": "float32"}}
    line = compare_peer.variant_table(variants, default, {"train_src_tokens_per_sec": 6000.0})
    assert line == ("variant xla: 3,000.0 source tokens/s, 0.5 s/step (float32), 1.50x the "
                    "default 0.50x the reference")
    assert compare_peer.variant_table(variants, default, {}).endswith("1.50x the default")
