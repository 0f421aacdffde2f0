"""Paulus et al. (2017): the model's pieces agree with each other and train, ML then ML+RL."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from pgn_tf import objectives
from pgn_tf.models.deep_reinforced import DeepReinforced

B, L, T, V = 3, 7, 5, 20


def features(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "enc_ids": tf.constant(rng.integers(4, V, (B, L)), tf.int32),
        "enc_ext_ids": tf.constant(np.where(rng.random((B, L)) < 0.2, V, rng.integers(4, V, (B, L))),
                                   tf.int32),
        "enc_len": tf.constant([7, 5, 0]),
        "num_oovs": tf.constant([1, 1, 0]),
        "dec_input": tf.constant(rng.integers(4, V, (B, T)), tf.int32),
        "target": tf.constant(rng.integers(4, V + 1, (B, T)), tf.int32),
        "dec_len": tf.constant([5, 3, 1]),
    }


def expected_params(v, h, e, intra_decoder=True, shared=True):
    d = 2 * h
    f = d + 2 * h + (d if intra_decoder else 0)
    n = v * e  # W_emb, shared by encoder, decoder and (eq. 13) the output layer
    n += 2 * (4 * h * (e + h) + 4 * h)  # bidirectional encoder
    n += 4 * d * (e + d) + 4 * d  # decoder LSTM
    n += 2 * h * d  # W_attn^e (eq. 2)
    n += d * d if intra_decoder else 0  # W_attn^d (eq. 6)
    n += e * f + v if shared else f * v + v  # W_proj and b_out (eq. 13), or a free W_out
    return n + f + 1  # the switch (eq. 11)


@pytest.mark.parametrize("intra_decoder, shared", [(True, True), (False, True), (True, False)])
def test_parameter_count_and_switches(intra_decoder, shared):
    model = DeepReinforced(V, hidden_dim=4, emb_dim=3, intra_decoder_attention=intra_decoder,
                           shared_embedding=shared)
    assert model.count_params() == expected_params(V, 4, 3, intra_decoder, shared)


def test_paper_sizes_parameter_count():
    # Appendix B sizes: encoder 2x200, decoder 400, embeddings 100, 50k vocab.
    model = DeepReinforced(50_000, hidden_dim=200, emb_dim=100)
    assert model.count_params() == expected_params(50_000, 200, 100) == 6_774_401


def test_teacher_forcing_equals_step_by_step_decoding():
    """call() + the summed NLL (log-space mixture, eq. 14) and decode_step (scatter, eq. 12)
    agree."""
    model = DeepReinforced(V, hidden_dim=4, emb_dim=3, sample_replace_prob=0.0)
    f = features()
    nll = objectives.MaximumLikelihood("sum")(model, f, training=False)["nll"].numpy()
    enc, state = model.encode(f["enc_ids"], f["enc_len"], f["enc_ext_ids"], f["num_oovs"],
                              max_dec_steps=T)
    total = np.zeros(B)
    for t in range(T):
        log_probs, state, _ = model.decode_step(f["dec_input"][:, t], tf.constant(t), state, enc)
        picked = tf.gather(log_probs, f["target"][:, t], batch_dims=1).numpy()
        total -= picked * (t < f["dec_len"].numpy())
    np.testing.assert_allclose(nll, total, rtol=1e-4)


@pytest.mark.parametrize("model_type", ["deep_reinforced", "pointer_generator"])
def test_the_step_in_parts_is_the_same_distribution(model_type):
    """decode_step(mixture=True) hands the search eq. 12 (eq. 9) in parts; formed densely they
    are decode_step's own distribution over the extended vocabulary, copied OOVs included."""
    from pgn_tf.layers.pointer import Mixture, dense_distribution
    from pgn_tf.models.pointer_generator import PointerGenerator

    model = (DeepReinforced(V, hidden_dim=4, emb_dim=3) if model_type == "deep_reinforced"
             else PointerGenerator(V, hidden_dim=4, emb_dim=3, coverage=True))
    f = features(3)
    enc, state = model.encode(f["enc_ids"], f["enc_len"], f["enc_ext_ids"], f["num_oovs"],
                              max_dec_steps=T)
    for t in range(3):
        ids = f["dec_input"][:, t]
        dense, _, _ = model.decode_step(ids, tf.constant(t), state, enc)
        parts, state, _ = model.decode_step(ids, tf.constant(t), state, enc, mixture=True)
        assert isinstance(parts, Mixture) and int(parts.width) == V + 1
        np.testing.assert_allclose(dense_distribution(parts).numpy(), dense.numpy(), atol=1e-5)


@pytest.mark.slow
def test_ml_then_mixed_training_then_export_and_serve(corpus, tmp_path):
    from pgn_tf.saved_model import export
    from pgn_tf.serving.client import summarize
    from pgn_tf.serving.service import Server
    from pgn_tf.training.run import train

    model_dir = str(tmp_path / "paulus")
    common = ["model.hidden_dim=16", "model.emb_dim=16", "data.vocab_size=200",
              "data.max_enc_steps=60", "data.max_dec_steps=12", "train.batch_size=16",
              "train.eval_batches=2", "train.eval_samples=1", "decode.max_dec_steps=14",
              "decode.min_dec_steps=1"]
    data = dict(train_data=corpus["train"], eval_data=corpus["validation"], progress=False)
    ml = train(model_dir, "paulus2017", [*common, "train.max_steps=60", "train.eval_every=30"],
               **data).metrics
    assert ml["eval_loss"] < ml["initial_eval_loss"]
    mixed = train(model_dir, "paulus2017", [*common, "train.objective=mixed", "train.max_steps=70",
                                            "train.eval_every=10", "train.log_every=5"],
                  **data).metrics
    assert "reward_sample" in mixed and "initial_eval_reward" in mixed
    with open(os.path.join(model_dir, "best", "best.json")) as f:
        assert json.load(f)["metric"].startswith("rouge")  # the RL phase picks by ROUGE

    base = str(tmp_path / "export")
    path = export.export(model_dir, base, "paulus", version=1)  # checks SavedModel == in-process
    server = Server({"paulus": (os.path.dirname(path), 1)}, port=0, rest_port=None,
                    poll_seconds=0)
    try:
        article = "zorblax , a pilot from quenton , sold 5512 boxes of apples on friday ."
        got = summarize(f"127.0.0.1:{server.port}", "paulus", [article])[0]
        loaded = tf.saved_model.load(path).signatures["serving_default"]
        want = loaded(articles=tf.constant([article]))["summaries"].numpy()[0].decode()
        assert got == want
    finally:
        server.stop()
