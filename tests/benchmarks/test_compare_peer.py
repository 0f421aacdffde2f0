"""compare_peer reads the reference's bench.sh output: every figure, and a clear error when a
line is missing."""

import pytest

from benchmarks import compare_decoding, compare_peer, peer, peer_table
from pgn_tf.utils.errors import UserError

pytestmark = pytest.mark.study  # the speed tools, apart from the product (pyproject.toml)

# bench.sh's output (both modes), its training log's parameter lines included.
OUTPUT = """\
[2026-11-20 10:00:01,123 INFO] encoder: 5923584
[2026-11-20 10:00:01,123 INFO] decoder: 5557249
[2026-11-20 10:00:01,124 INFO] * number of parameters: 11480833
peer training: 5437 source tokens/s, 0.373 s/step (steps 150-300)
peer decoding: 2865 articles in 33.1 s = 86.6 articles/s (translation time; 36.0 s wall with start-up)
"""


def test_every_figure_of_both_modes_is_read():
    assert peer.parse_peer(OUTPUT) == {
        "train_src_tokens_per_sec": 5437.0, "train_sec_per_step": 0.373,
        "train_steps": "150-300", "params": 11480833, "decode_articles": 2865,
        "decode_seconds": 33.1, "decode_articles_per_sec": 86.6,
    }


def test_a_mode_needs_only_its_own_lines():
    decode_only = OUTPUT.splitlines()[-1]
    assert peer.parse_peer(decode_only, "decode")["decode_articles_per_sec"] == 86.6
    train = peer.parse_peer("\n".join(OUTPUT.splitlines()[:4]), "train")
    assert (train["params"], train["train_sec_per_step"]) == (11480833, 0.373)


def test_a_missing_line_is_named_with_the_output_tail():
    broken = OUTPUT.replace("peer decoding", "Traceback: onmt_translate failed\n#")
    with pytest.raises(UserError, match="(?s)no .peer decoding: .*onmt_translate failed"):
        peer.parse_peer(broken)


def test_ratios_are_ours_over_the_peer_and_skip_missing_figures():
    mine = {"train_src_tokens_per_sec": 2718.5, "train_sec_per_step": 0.746, "params": 100}
    peer = {"train_src_tokens_per_sec": 5437.0, "train_sec_per_step": 0.373}
    assert peer_table.ratios(mine, peer) == {"train_src_tokens_per_sec": 0.5,
                                               "train_sec_per_step": 2.0}


def test_the_peer_examples_per_second_come_from_its_batch_of_sentences(tmp_path):
    (tmp_path / "onmt-ref.yaml").write_text("batch_size: 32\nbatch_type: sents\n")
    assert peer.peer_batch_size(str(tmp_path)) == 32
    (tmp_path / "onmt-ref.yaml").write_text("batch_size: 4096\nbatch_type: tokens\n")
    assert peer.peer_batch_size(str(tmp_path)) is None
    # the yaml bench.sh trained with, where it wrote one (PEER_CORPUS=digests halves the batch)
    (tmp_path / "onmt-ref.yaml").write_text("batch_size: 32\nbatch_type: sents\n")
    work = tmp_path / "work"
    work.mkdir()
    assert peer.peer_batch_size(str(tmp_path), str(work)) == 32
    (work / "run-300.yaml").write_text("batch_size: 16\nbatch_type: sents\n")
    assert peer.peer_batch_size(str(tmp_path), str(work)) == 16


def test_the_token_rate_puts_summaries_of_unlike_lengths_on_one_scale():
    mine = peer_table.with_token_rate({"decode_articles_per_sec": 34.0,
                                         "decode_mean_tokens": 17.5})
    peer = peer_table.with_token_rate({"decode_articles_per_sec": 3.2,
                                         "decode_mean_tokens": 74.0})
    assert (mine["decode_tokens_per_sec"], peer["decode_tokens_per_sec"]) == (595.0, 236.8)
    assert peer_table.ratios(mine, peer)["decode_tokens_per_sec"] == 2.513
    assert "decode_tokens_per_sec" not in peer_table.with_token_rate(
        {"decode_articles_per_sec": 3.2})


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
    line = peer_table.variant_table(variants, default, {"train_src_tokens_per_sec": 6000.0})
    assert line == ("variant xla: 3,000.0 source tokens/s, 0.5 s/step (float32), 1.50x the "
                    "default 0.50x the reference")
    assert peer_table.variant_table(variants, default, {}).endswith("1.50x the default")


def test_a_decode_variant_changes_decode_settings_only(tmp_path):
    assert compare_peer.parse_decode_variant("sl:decode.shortlist=2000") == (
        "sl", ["decode.shortlist=2000"])
    for bad in ("sl:train.jit_compile=true", "sl", "sl:decode.shortlist=2000,model.x=1"):
        with pytest.raises(UserError, match="--decode_variant"):
            compare_peer.parse_decode_variant(bad)
    args = ["--skip_peer", "--data_dir", str(tmp_path)]
    assert compare_peer.main([*args, "--decode_variant", "default:decode.shortlist=5"]) != 0
    assert compare_peer.main([*args, "--decode_variant", "x:decode.no_such_key=5"]) != 0
    with pytest.raises(SystemExit):
        compare_peer.main([*args, "--decode_rounds", "0"])


def test_the_decode_variant_line_gives_its_ratios_and_identical_share():
    default = {"articles_per_sec": 200.0, "rounds_articles_per_sec": [190.0, 200.0, 210.0],
               "variants": {"sl": {"articles_per_sec": 300.0, "identical_to_default_pct": 97.5,
                                   "rounds_articles_per_sec": [300.0, 290.0, 310.0],
                                   "peak_rss_mib": 800.5}}}
    line = peer_table.decode_variant_table(default, {"decode_articles_per_sec": 100.0})
    assert line == ("decode variant sl: 300.0 articles/s (rounds [300.0, 290.0, 310.0]), 1.50x "
                    "the default (200.0, rounds [190.0, 200.0, 210.0]), 3.00x the reference; "
                    "97.5% of its summaries the default's; peak RSS 800.5 MiB")
    assert "the reference" not in peer_table.decode_variant_table(default, {})


@pytest.mark.slow
def test_the_interleaved_decodings_time_every_arm_each_round(trained_model_dir, corpus):
    """The default and two variants, two rounds each, on the trained tiny model (each run
    in process here, as the child runs it): every arm's rounds are kept in turn, its figure is
    its median round and its peak RSS its largest; a variant decoding as the default does (K
    as wide as the vocabulary) has every summary the default's. (The tiny vocabulary is
    narrower than one shortlist's column padding, so K = 1 decodes the same words too.)"""
    import json
    import os

    from pgn_tf.model_dir import ModelDir

    mdir = ModelDir(trained_model_dir)
    job = {"config": os.path.join(trained_model_dir, "config.json"), "set": [],
           "model_dir": trained_model_dir, "checkpoint": mdir.latest_checkpoint(),
           "data": corpus["validation"], "max_tokens": 8, "min_tokens": 8}
    seen = []

    def decode(j):
        seen.append(j["set"])
        return compare_decoding.run_decoding_job(json.dumps(j))

    variants = [("wide", ["decode.shortlist=100000"]), ("narrow", ["decode.shortlist=1"])]
    got = compare_decoding.interleaved_decoding(job, variants, rounds=2, decode=decode)
    assert seen == [[], ["decode.shortlist=100000"], ["decode.shortlist=1"]] * 2
    assert got["articles"] == 40 and len(got["rounds_articles_per_sec"]) == 2
    # the median of two rounds: the faster (the lower middle of their times)
    assert got["articles_per_sec"] == max(got["rounds_articles_per_sec"])
    assert set(got["variants"]) == {"wide", "narrow"}
    assert got["variants"]["wide"]["identical_to_default_pct"] == 100.0
    assert 0.0 <= got["variants"]["narrow"]["identical_to_default_pct"] <= 100.0
    assert len(got["variants"]["narrow"]["rounds_articles_per_sec"]) == 2
    assert got["mean_tokens"] == 8 and got["peak_rss_mib"] > 0
    assert "tokens" not in got and "tokens" not in got["variants"]["wide"]


# -- the digests mode and peak RSS ---------------------------------------------------------------

def test_the_digest_mode_runs_both_systems_at_see_et_als_lengths(tmp_path, monkeypatch):
    for name in ("train.jsonl.gz", "validation.jsonl.gz"):
        (tmp_path / name).write_bytes(b"")
    seen = {}

    def ours(a, cfg, variants):
        seen.update(config=a.config, data=cfg.data, decode=cfg.decode)
        return {"figures": {"train_peak_rss_mib": 900.0}}

    monkeypatch.setattr(compare_peer, "ours", ours)
    result = compare_peer.run(compare_peer.build_parser().parse_args(
        ["--skip_peer", "--corpus", "digests", "--data_dir", str(tmp_path),
         "--work_dir", str(tmp_path / "w")]))
    d = seen["data"]
    assert seen["config"] == "reference_onmt_digests" == result["config"]
    assert (d.max_enc_steps, d.max_dec_steps, d.vocab_size) == (400, 100, 50_000)
    assert result["decode"] == {"beam": 4, "batch": 64, "max_tokens": 100, "forced_length": None,
                                "train_steps": 1500}
    assert result["corpus"] == "digests"
    default = compare_peer.build_parser().parse_args(["--skip_peer", "--data_dir", "x"])
    assert (default.corpus, default.config) == ("descriptions", None)
    assert compare_peer.CORPORA["descriptions"]["max_tokens"] == 30


def test_the_peer_is_told_its_corpus_and_its_figures_read(tmp_path):
    # a stand-in bench.sh: the lines of the real one, and the corpus it was given
    bench = tmp_path / "bench.sh"
    bench.write_text("echo \"corpus=$PEER_CORPUS\"\ncat <<'OUT'\n" + OUTPUT + "OUT\n")
    figures = peer.run_peer(str(tmp_path), str(tmp_path / "work"), corpus="digests")
    assert figures["decode_articles_per_sec"] == 86.6 and figures["params"] == 11480833
    assert "train_peak_rss_mib" not in figures  # no onmt_train ran
    bench.write_text("echo \"corpus=$PEER_CORPUS\"; exit 3\n")
    with pytest.raises(UserError, match="(?s)exited with status 3.*corpus=digests"):
        peer.run_peer(str(tmp_path), str(tmp_path / "work"), corpus="digests")


def test_a_peer_work_dir_holds_one_corpus(tmp_path):
    from pgn_tf.utils import work_dirs

    work_dirs.claim(str(tmp_path / "p"), "digests")
    work_dirs.claim(str(tmp_path / "p"), "digests")  # the same corpus again: fine
    with pytest.raises(UserError, match="holds the digests corpus"):
        work_dirs.claim(str(tmp_path / "p"), "descriptions")
    assert (tmp_path / "p" / work_dirs.MARKER).read_text() == "digests\n"  # left as it was


def test_the_peers_processes_are_told_apart_by_their_command():
    from benchmarks.peak_rss import onmt_phase

    assert onmt_phase(["/w/venv/bin/python3", "/w/venv/bin/onmt_train", "-config", "x"]) \
        == "training"
    assert onmt_phase(["/w/venv/bin/python3", "/w/venv/bin/onmt_translate"]) == "decoding"
    assert onmt_phase(["/w/venv/bin/python3", "/w/venv/bin/onmt_build_vocab"]) is None
    assert onmt_phase(["bash", "bench.sh", "onmt_train"]) is None  # an argument, not the program
    assert onmt_phase([]) is None


def test_the_watcher_reads_a_child_processes_peak(tmp_path):
    import subprocess
    import sys
    import time

    from benchmarks import peak_rss

    # A stand-in onmt_train: touches 120 MiB, frees it, then waits for its stdin to close.
    script = tmp_path / "onmt_train"
    script.write_text("import sys\nb = bytearray(120 * 2**20)\nfor i in range(0, len(b), 4096):"
                      "\n    b[i] = 1\ndel b\nprint('ready', flush=True)\nsys.stdin.read()\n")
    proc = subprocess.Popen(["bash", "-c", f"{sys.executable} {script}"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    with peak_rss.TreeWatcher(proc.pid, peak_rss.onmt_phase, interval=0.05) as watcher:
        assert proc.stdout.readline() == "ready\n"  # its peak is behind it, its RSS low
        # read it now that its peak is behind it (the watcher's own thread may only have read it
        # before: while bash started it, or before the 120 MiB were touched)
        deadline = time.monotonic() + 60
        watcher.poll()
        while "training" not in watcher.peaks() and time.monotonic() < deadline:
            watcher.poll()
        proc.stdin.close()
        proc.wait()
    assert watcher.peaks()["training"] >= 120  # VmHWM: the peak, not the RSS when read
    assert set(watcher.peaks()) == {"training"}


def test_this_processes_peak_can_be_reset_to_now():
    from pgn_tf.utils import procfs

    b = bytearray(200 * 2**20)
    for i in range(0, len(b), 4096):
        b[i] = 1
    before = procfs.status_kib("self", "VmHWM")
    del b  # a large buffer goes back to the kernel: RSS falls, the peak stays (within the
    # kernel's per-thread RSS counter caching, a few hundred KiB either way: a counter flushed
    # late, or another thread of this process allocating, can still raise it a little)
    after = procfs.status_kib("self", "VmHWM")
    assert abs(after - before) <= 2048
    assert procfs.status_kib("self", "VmRSS") < after - 150 * 1024
    if procfs.reset_peak():
        assert procfs.status_kib("self", "VmHWM") < before - 150 * 1024
    else:  # a kernel that refuses the reset leaves the peak as it was
        assert procfs.status_kib("self", "VmHWM") >= before - 2048
    assert procfs.peak_mib() > 0


def test_a_failing_decoding_child_says_why(tmp_path):
    job = {"config": "tiny", "set": [], "model_dir": str(tmp_path / "none"),
           "checkpoint": "x", "data": str(tmp_path / "none.jsonl"), "max_tokens": 30}
    with pytest.raises(UserError, match="(?s)decoding child failed.*does not exist"):
        compare_decoding.decoding_in_child(job)


# -- decoding forced to one length ---------------------------------------------------------------

# A stand-in onmt_translate (run as `python .../onmt_translate ...`, as its console script runs,
# so the watcher counts it as decoding): writes one line of -max_length tokens an article, says
# which lengths it was given, and prints onmt's translation-time line.
FAKE_TRANSLATE = """\
import sys
a = sys.argv[1:]
arg = lambda k: a[a.index(k) + 1]
n = int(arg("-max_length"))
lines = open(arg("-src")).read().splitlines()
open(arg("-output"), "w").writelines(" ".join(["w"] * n) + "\\n" for _ in lines)
print("min", arg("-min_length"), "max", n, "beam", arg("-beam_size"), "model", arg("-model"))
print("Total translation time (s): 4.0")
"""


def fake_peer_work(tmp_path, translate=FAKE_TRANSLATE, articles=6):
    import stat
    import sys

    work = tmp_path / "peer_work"
    (work / "venv" / "bin").mkdir(parents=True)
    (work / "run").mkdir()
    (work / "data").mkdir()
    (work / "data" / "valid.src").write_text("an article\n" * articles)
    (work / "run" / "model_step_300.pt").write_bytes(b"")
    script = work / "venv" / "bin" / "onmt_translate"
    script.write_text(f"#!{sys.executable}\n" + translate)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return work


def test_the_peer_decodes_its_train_mode_model_to_exactly_the_forced_length(tmp_path, capsys):
    work = fake_peer_work(tmp_path)
    figures = peer.peer_forced_decoding(str(work), 40)
    assert figures["decode_articles"] == 6 and figures["decode_seconds"] == 4.0
    assert figures["decode_articles_per_sec"] == 1.5
    assert figures["decode_mean_tokens"] == 40  # read back from its output file
    assert (work / "run" / "valid.forced40.pred.txt").exists()
    echoed = capsys.readouterr().out
    assert "-min_length 40 -max_length 40" in echoed and "model_step_300.pt" in echoed


def test_a_forced_decoding_that_fails_or_prints_no_time_says_why(tmp_path):
    work = fake_peer_work(tmp_path, translate="print('IndexError: out of range')\n")
    with pytest.raises(UserError, match="(?s)printing no translation time.*IndexError"):
        peer.peer_forced_decoding(str(work), 40)
    (work / "run" / "model_step_300.pt").unlink()
    with pytest.raises(UserError, match="model_step_300.pt does not exist.*train"):
        peer.peer_forced_decoding(str(work), 40)


def test_a_train_mode_run_reads_no_earlier_runs_summaries(tmp_path):
    bench = tmp_path / "bench.sh"
    bench.write_text("cat <<'OUT'\n" + OUTPUT + "OUT\n")
    (tmp_path / "work" / "run").mkdir(parents=True)
    (tmp_path / "work" / "run" / "valid.pred.txt").write_text("a b c\n")  # a decode run's
    figures = peer.run_peer(str(tmp_path), str(tmp_path / "work"), "train")
    assert "decode_mean_tokens" not in figures and "decode_articles_per_sec" not in figures
    figures = peer.run_peer(str(tmp_path), str(tmp_path / "work"), "both")
    assert figures["decode_mean_tokens"] == 3


def test_forced_length_runs_the_peers_train_mode_and_both_at_that_length(tmp_path,
                                                                           monkeypatch):
    for name in ("train.jsonl.gz", "validation.jsonl.gz"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "bench.sh").write_text("")
    seen = {}

    def ours(a, cfg, variants):
        seen.update(forced=a.forced_length, steps=a.decode_train_steps)
        return {"figures": {"decode_articles_per_sec": 12.0, "decode_mean_tokens": 100.0}}

    def run_peer(peer_dir, peer_work, mode, corpus):
        seen.update(mode=mode, corpus=corpus)
        return {"train_src_tokens_per_sec": 2000.0}

    def forced(peer_work, length):
        seen["peer_length"] = length
        return {"decode_articles_per_sec": 2.0, "decode_mean_tokens": 100.0}

    monkeypatch.setattr(compare_peer, "ours", ours)
    monkeypatch.setattr(compare_peer, "run_peer", run_peer)
    monkeypatch.setattr(compare_peer, "peer_forced_decoding", forced)
    result = compare_peer.run(compare_peer.build_parser().parse_args(
        ["--corpus", "digests", "--data_dir", str(tmp_path), "--peer_dir", str(tmp_path),
         "--peer_work", str(tmp_path / "pw"), "--work_dir", str(tmp_path / "w"),
         "--forced_length", "100"]))
    assert seen == {"forced": 100, "steps": 300, "mode": "train", "corpus": "digests",
                    "peer_length": 100}
    assert result["decode"]["forced_length"] == 100 == result["decode"]["max_tokens"]
    assert result["ratios"]["decode_articles_per_sec"] == 6.0
    assert result["ratios"]["decode_tokens_per_sec"] == 6.0  # the same length: the same ratio


@pytest.mark.parametrize("value", ["0", "201"])
def test_a_forced_length_outside_its_bounds_is_refused(value, capsys):
    with pytest.raises(SystemExit):
        compare_peer.main(["--skip_peer", "--data_dir", "x", "--forced_length", value])
    assert "--forced_length must lie between 1 and 200" in capsys.readouterr().err


def test_our_search_forced_to_a_length_writes_exactly_that_many_tokens(trained_model_dir,
                                                                      corpus):
    from pgn_tf.model_dir import ModelDir

    cfg = ModelDir(trained_model_dir).read_config()
    checkpoint = ModelDir(trained_model_dir).latest_checkpoint()
    forced = compare_decoding.our_decoding(cfg, trained_model_dir, checkpoint, corpus["validation"],
                                       9, 9)
    assert forced["mean_tokens"] == 9 and forced["min_dec_steps"] == 9
    free = compare_decoding.our_decoding(cfg, trained_model_dir, checkpoint, corpus["validation"],
                                     9)  # the tiny model stops before 9 tokens on its own
    assert free["mean_tokens"] < 9 and free["min_dec_steps"] == min(cfg.decode.min_dec_steps, 9)


def test_a_peer_setting_runs_the_reference_from_a_copy_with_that_yaml(tmp_path, capsys):
    import yaml

    shared = tmp_path / "shared"
    peer_dir = shared / "peer"
    peer_dir.mkdir(parents=True)
    (shared / "data").mkdir()
    (peer_dir / "onmt-ref.yaml").write_text("share_vocab: true\nword_vec_size: 128\n")
    (peer_dir / "setup_onmt.sh").write_text("echo setup\n")
    # a stand-in bench.sh: prints its own yaml's setting, then the real one's lines
    (peer_dir / "bench.sh").write_text(
        "HERE=$(cd \"$(dirname \"$0\")\" && pwd)\ngrep share_embeddings \"$HERE/onmt-ref.yaml\"\n"
        "ls \"$HERE/../data\" >/dev/null && echo data-linked\ncat <<'OUT'\n" + OUTPUT + "OUT\n")
    copy = peer.peer_variant(str(peer_dir), ["share_embeddings=true"], str(tmp_path / "v"))
    ref = yaml.safe_load((tmp_path / "v" / "peer" / "onmt-ref.yaml").read_text())
    assert copy == str(tmp_path / "v" / "peer")
    assert ref == {"share_vocab": True, "word_vec_size": 128, "share_embeddings": True}
    assert "share_embeddings" not in (peer_dir / "onmt-ref.yaml").read_text()  # left as it was
    figures = peer.run_peer(copy, str(tmp_path / "work"))
    assert figures["params"] == 11480833
    out = capsys.readouterr().out
    assert "share_embeddings: true" in out and "data-linked" in out
    # a key the reference lacks and no known option, or a malformed setting: refused
    for bad, match in ((["share_embedding=true"], "neither in the reference"),
                       (["share_embeddings"], "KEY=VALUE"),
                       (["share_vocab=false", "share_embeddings=true"], "needs share_vocab")):
        with pytest.raises(UserError, match=match):
            peer.peer_variant(str(peer_dir), bad, str(tmp_path / "v2"))
