"""Rush et al. (2015): ABS consistency, ABS+ features, extractive decoding, the three encoders
through train / evaluate / tune / export / serving."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from pgn_tf.data import parallel
from pgn_tf.data.example import ReadStats
from pgn_tf.decoding import features
from pgn_tf.models.abs import ABS

V = 25


def batch(seed=0):
    rng = np.random.default_rng(seed)
    return {"enc_ids": tf.constant(rng.integers(4, V, (2, 8)), tf.int32),
            "enc_len": tf.constant([8, 3]),
            "dec_input": tf.constant(np.c_[[2, 2], rng.integers(4, V, (2, 5))], tf.int32),
            "target": tf.constant(rng.integers(4, V, (2, 6)), tf.int32),
            "dec_len": tf.constant([6, 2])}


@pytest.mark.parametrize("encoder", ["bow", "conv", "attention"])
def test_teacher_forcing_equals_step_by_step_decoding(encoder):
    model = ABS(V, hidden_dim=6, emb_dim=4, window=3, encoder=encoder)
    f = batch()
    logits = model(f)["logits"]
    enc, state = model.encode(f["enc_ids"], f["enc_len"])
    for t in range(6):
        log_probs, state, _ = model.decode_step(f["dec_input"][:, t], tf.constant(t), state, enc)
        np.testing.assert_allclose(log_probs.numpy(), tf.nn.log_softmax(logits[:, t]).numpy(),
                                   rtol=1e-4, atol=1e-5)


def test_parameter_count_of_the_paper_sizes():
    v, h, d, c = 1000, 400, 200, 5
    model = ABS(v, hidden_dim=h, emb_dim=d, window=c, encoder="attention")
    nnlm = v * d + (c * d * h + h) + (h * v + v) + h * v  # E, U, V, W (eq. 1)
    enc3 = v * h + v * d + c * d * h  # F, G, P (eq. 8)
    assert model.count_params() == nnlm + enc3


def test_match_features_against_a_hand_count():
    src = tf.constant([[5, 6, 7, 5, 8, -1]])
    uni, bi, tri, reorder = features.match_features(src, tf.constant([5]), tf.constant([7]), 10)
    ids = lambda x: sorted(np.flatnonzero(x.numpy()[0]).tolist())  # noqa: E731
    assert ids(uni) == [5, 6, 7, 8]
    assert ids(bi) == [6, 8]  # x_j after a 5
    assert ids(tri) == [8]  # x_j after "7 5"
    assert ids(reorder) == [5, 6, 7]  # before the last 5


def test_coordinate_ascent_finds_the_weights_a_toy_score_rewards():
    """Each indicator weight in turn takes its best grid value with the others held; alpha_0
    (log p) stays 1. The toy's best w_2 depends on w_1, so a second round is needed."""
    from pgn_tf.inference.tuning import coordinate_ascent

    calls = []

    def score(w):
        calls.append(list(w))
        return -(w[1] - w[2]) ** 2 - (w[2] - 1.0) ** 2 - abs(w[4] + 0.5)

    grid = [-1.0, -0.5, 0.0, 0.5, 1.0]
    one, best_one, history = coordinate_ascent(score, grid, rounds=1)
    # Round 1: w_1 stays 0 (w_2 is still 0), w_2 goes to 0.5 (best with w_1 = 0), w_4 to -0.5.
    assert one == [1.0, 0.0, 0.5, 0.0, -0.5] and best_one == -0.5
    assert [w for w, _ in history] == calls and history[0] == ([1.0, 0, 0, 0, 0], -1.5)
    two, best_two, _ = coordinate_ascent(score, grid, rounds=3)
    # Round 2 moves w_1 to 0.5; w_2 = 1 then only ties (not taken); round 3 changes nothing.
    assert two == [1.0, 0.5, 0.5, 0.0, -0.5] and best_two == -0.25


def test_parallel_reader_derives_the_title_file(tmp_path):
    (tmp_path / "train.article.txt").write_text("first article .\nsecond one .\nthird\n")
    (tmp_path / "train.title.txt").write_bytes(b"first title\nsec\xffond\n")
    stats = ReadStats()
    got = list(parallel.read_parallel(str(tmp_path / "train.article.txt"), stats))
    assert [(e.article, e.summary) for e in got] == [("first article .", "first title"),
                                                     ("second one .", "sec\ufffdond")]
    assert stats.dropped == {"no matching line in the other file": 1}
    pair = f"{tmp_path / 'train.article.txt'},{tmp_path / 'train.title.txt'}"
    assert len(list(parallel.read_parallel(pair))) == 2
    with pytest.raises(ValueError, match="SOURCE,TARGET"):
        parallel.split_spec(str(tmp_path / "x.txt"))


# The three encoders' training settings here and in tests/training/test_precision_policies.py. Plain SGD
# on summed NLL without clipping (the preset's, as the paper) is stable only up to a point: at
# lr 0.5 the conv model's eval loss oscillated (14-21 after 80 steps over seeds 1-5 where lr 0.2
# reached 4.4-5.2) and diverged outright for the default seed on an AVX2-only CPU, where oneDNN's
# float32 kernels round differently from the AVX-512 ones (research/records/2026-11-28-abs-lr-
# and-cpu-types.md). Precision and seed are named, not left to `auto` and the default.
ABS_TEST_SETTINGS = [
    "model.hidden_dim=32", "model.emb_dim=16", "data.vocab_size=200", "data.max_enc_steps=60",
    "data.max_dec_steps=14", "train.batch_size=32",
    "data.min_count=1",  # the paper keeps words seen 5 times: too few here
    "train.learning_rate=0.2", "train.seed=1234", "train.mixed_precision=",
    "train.max_steps=80", "train.eval_every=40", "train.eval_batches=2", "train.eval_samples=0",
    "decode.max_dec_steps=14"]


def parallel_text(corpus, out) -> str:
    """The synthetic corpus as parallel text (the layout of Rush et al.'s Gigaword release);
    returns the article file's path."""
    from pgn_tf.data import tfrecord

    exs = list(tfrecord.read_tfrecords(corpus["train"]))
    (out / "train.article.txt").write_text("".join(e.article + "\n" for e in exs))
    (out / "train.title.txt").write_text(
        "".join(e.summary.replace("\n", " ") + "\n" for e in exs))
    return str(out / "train.article.txt")


@pytest.mark.slow
def test_three_encoders_train_evaluate_tune_export_serve(corpus, tmp_path):
    from pgn_tf.inference import evaluator
    from pgn_tf.inference.summarizer import Summarizer
    from pgn_tf.saved_model import export
    from pgn_tf.serving.client import summarize
    from pgn_tf.serving.service import Server
    from pgn_tf.training.run import train

    train_data = parallel_text(corpus, tmp_path)
    ppl = {}
    for encoder in ("bow", "conv", "attention"):
        model_dir = str(tmp_path / encoder)
        result = train(model_dir, "rush2015_abs",
                       [*ABS_TEST_SETTINGS, f"model.abs_encoder={encoder}"],
                       train_data=train_data, eval_data=corpus["validation"],
                       progress=False).as_dict()
        assert result["eval_loss"] < result["initial_eval_loss"]
        metrics = evaluator.evaluate(evaluator.ModelDirSource(model_dir, batch_size=64),
                                     corpus["validation"], limit=20, progress=False,
                                     bootstrap=0).metrics  # plain means, as tune
        ppl[encoder] = metrics["perplexity"]
    assert all(np.isfinite(p) and p > 1 for p in ppl.values())

    model_dir = str(tmp_path / "attention")
    summarizer = Summarizer.from_model_dir(model_dir)
    summarizer.cfg.decode.extractive = True
    article = "zorblax , a pilot from quenton , sold 5512 boxes of apples on friday ."
    words = summarizer.summarize(tf.constant([article]))["tokens"].numpy()[0]
    source = set(summarizer.encode_text(tf.constant([article]))["enc_tokens"].numpy()[0])
    assert all(w in source for w in words if w)  # extractive: article words only

    from pgn_tf import tune
    from pgn_tf.inference import tuning

    tuned = tuning.tune(model_dir, corpus["validation"], limit=20, grid=[0.0, 1.0], rounds=1,
                        show_progress=False)
    assert tuned.decodes == 1 + 4  # the start, then each feature weight at 1
    with open(os.path.join(model_dir, "abs_plus.json")) as f:
        assert json.load(f)["weights"] == tuned.weights
    # The reported scores are reproduced by decoding again: ABS (no features; tune decodes it
    # through the rescoring step with weights 1,0,0,0,0), and ABS+ with the tuned weights,
    # which evaluate (as summarize and export) takes from the model dir's abs_plus.json.
    assert tuned.abs == metrics["rougeLsum"]
    again = evaluator.evaluate(evaluator.ModelDirSource(model_dir, batch_size=64),
                               corpus["validation"], limit=20, progress=False, bootstrap=0,
                               output_dir=str(tmp_path / "plus")).metrics
    assert again["rougeLsum"] == tuned.abs_plus
    # Tuned under the decoding it will be used with: tune's overrides reach its decodes (2-word
    # outputs score as evaluate scores them, not as the preset's 8-word ones above); non-decode
    # keys are refused, since the model is built
    short = ["decode.fixed_length=2"]
    two = tuning.tune(model_dir, corpus["validation"], limit=20, grid=[0.0], rounds=1,
                      overrides=short, show_progress=False)
    plain = [*short, "decode.abs_plus_weights="]  # --set overrides the tuned weights
    want = evaluator.evaluate(evaluator.ModelDirSource(model_dir, overrides=plain,
                                                       batch_size=64),
                              corpus["validation"], limit=20, progress=False,
                              bootstrap=0).metrics
    assert two.decodes == 1 and two.abs == want["rougeLsum"] != metrics["rougeLsum"]
    flags = ["--model_dir", model_dir, "--data", corpus["validation"], "--limit", "20",
             "--grid", "0", "--rounds", "1"]
    assert tune.main([*flags, "--set", "model.hidden_dim=8", "--quiet"]) == 2

    path = export.export(model_dir, str(tmp_path / "export"), "abs", version=1)
    with open(os.path.join(path, "assets.extra", "config.json")) as f:  # the tuned weights
        assert json.load(f)["decode"]["abs_plus_weights"] == two.weights
    server = Server({"abs": (os.path.dirname(path), 1)}, port=0, rest_port=None, poll_seconds=0)
    try:
        got = summarize(f"127.0.0.1:{server.port}", "abs", [article])[0]
        want = tf.saved_model.load(path).signatures["serving_default"](
            articles=tf.constant([article]))["summaries"].numpy()[0].decode()
        assert got == want
    finally:
        server.stop()
