import keras
import numpy as np
import pytest
import tensorflow as tf

from pgn_tf import objectives
from pgn_tf.data import dataset
from pgn_tf.layers.pointer import target_log_prob
from pgn_tf.models.pointer_generator import PointerGenerator


@pytest.mark.parametrize(
    "pointer_gen, coverage, expected",
    [(False, False, 21_499_600), (True, False, 21_499_600 + 1153),
     (True, True, 21_499_600 + 1153 + 512)],
)
def test_parameter_counts_match_see_et_al(pointer_gen, coverage, expected):
    model = PointerGenerator(50_000, 256, 128, pointer_gen=pointer_gen, coverage=coverage)
    assert model.count_params() == expected


def test_reference_onmt_sizes_and_parameter_count():
    """The peer's sizes: encoder 2 x 128, decoder 256, E = 128, 20k vocab, copy + coverage.
    OpenNMT-py prints 11,478,049 for its model: 2,560,000 of them a separate target embedding
    (See et al. share one), and its bridge, input feeding and attention differ by 50,176
    (README "Performance")."""
    from pgn_tf import config

    cfg = config.resolve("reference_onmt")
    model = PointerGenerator.from_config_obj(cfg.model, cfg.data.vocab_size)
    assert model.count_params() == 8_867_873
    assert model.count_params() + 128 * 20_000 + 50_176 == 11_478_049
    assert tuple(model.encoder.bilstm.forward_layer.cell.kernel.shape) == (128, 512)
    assert tuple(model.cell.lstm.kernel.shape) == (128, 1024)
    assert tuple(model.cell.attention.w_h.kernel.shape) == (256, 256)  # 2 x enc_hidden_dim


@pytest.fixture(scope="module")
def batch(corpus, vocab, tiny_cfg):
    files = sorted(tf.io.gfile.glob(corpus["train"]))
    ds = dataset.make_dataset(files, vocab, tiny_cfg.data, 4, True, training=False)
    return next(iter(ds))


@pytest.mark.parametrize("pointer_gen, coverage, enc_hidden",
                         [(False, False, 0), (True, False, 0), (True, True, 0), (True, True, 3)])
def test_decode_step_reproduces_teacher_forcing(batch, vocab, pointer_gen, coverage, enc_hidden):
    model = PointerGenerator(vocab.size, 8, 6, pointer_gen=pointer_gen, coverage=coverage,
                             enc_hidden_dim=enc_hidden)
    if not pointer_gen:  # the baseline's targets never point past the vocab
        batch = dict(batch, target=tf.where(batch["target"] >= vocab.size, 1, batch["target"]))
    if coverage:
        model.cell.attention.w_c.assign(tf.random.normal([2 * (enc_hidden or 8)]))
    out = model(batch)
    if pointer_gen:
        ref = target_log_prob(out["logits"], batch["target"], out["attn"], out["p_gen_logit"],
                              batch["enc_ext_ids"])
    else:
        ref = target_log_prob(out["logits"], batch["target"])
    enc, state = model.encode(batch["enc_ids"], batch["enc_len"], batch["enc_ext_ids"],
                              batch["num_oovs"])
    for t in range(int(tf.reduce_max(batch["dec_len"]))):
        log_probs, state, extras = model.decode_step(batch["dec_input"][:, t], t, state, enc)
        got = tf.gather(log_probs, batch["target"][:, t], batch_dims=1)
        valid = (t < batch["dec_len"]).numpy()
        np.testing.assert_allclose(got.numpy()[valid], ref.numpy()[valid, t], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(extras["attn"].numpy(), out["attn"].numpy()[:, t], atol=1e-6)


@pytest.mark.parametrize("pointer_gen", [False, True])
def test_token_log_probs_on_real_positions_equal_the_full_grid(batch, vocab, pointer_gen):
    """The vocabulary layer runs on the gathered non-padding rows only; the result must equal
    target_log_prob over the whole [B, T, V] grid at every real position."""
    model = PointerGenerator(vocab.size, 8, 6, pointer_gen=pointer_gen, coverage=True)
    for w in model.weights:  # away from the near-uniform init, so a mismatch shows
        w.assign(tf.random.normal(w.shape, stddev=0.3, seed=4))
    if not pointer_gen:
        batch = dict(batch, target=tf.where(batch["target"] >= vocab.size, 1, batch["target"]))
    out = model(batch)
    full = target_log_prob(out["logits"], batch["target"],
                           *((out["attn"], out["p_gen_logit"], batch["enc_ext_ids"])
                             if pointer_gen else ()))
    got = model.token_log_probs(batch, out)
    valid = tf.sequence_mask(batch["dec_len"], tf.shape(batch["target"])[1]).numpy()
    assert valid.sum() < valid.size  # the batch has padding to skip
    np.testing.assert_allclose(got.numpy()[valid], full.numpy()[valid], rtol=1e-5, atol=1e-5)
    assert np.all(np.isfinite(got.numpy()))


def test_coverage_weight_starts_at_zero_so_conversion_changes_nothing(batch, vocab):
    pgn = PointerGenerator(vocab.size, 8, 6, coverage=False)
    cov = PointerGenerator(vocab.size, 8, 6, coverage=True)
    ckpt = tf.train.Checkpoint(model=pgn)
    path = ckpt.write("/tmp/pgn_tf_test_convert/ckpt")
    tf.train.Checkpoint(model=cov).restore(path).expect_partial()
    a, b = pgn(batch), cov(batch)
    np.testing.assert_allclose(a["logits"].numpy(), b["logits"].numpy(), atol=1e-6)
    terms = objectives.MaximumLikelihood()(cov, batch, training=False)
    assert float(tf.reduce_mean(terms["coverage"])) > 0


def test_trains_through_model_fit(corpus, vocab, tiny_cfg):
    files = sorted(tf.io.gfile.glob(corpus["train"]))
    ds = dataset.make_dataset(files, vocab, tiny_cfg.data, 16, True, training=True, seed=0)
    ds = ds.map(dataset.model_features)
    keras.utils.set_random_seed(0)
    model = PointerGenerator(vocab.size, 32, 16, coverage=True)
    model.compile(optimizer=keras.optimizers.Adagrad(0.15, initial_accumulator_value=0.1,
                                                     global_clipnorm=2.0),
                  objective=objectives.MaximumLikelihood())
    hist = model.fit(ds, steps_per_epoch=15, epochs=3, verbose=0)
    losses = hist.history["loss"]
    assert set(hist.history) >= {"loss", "nll", "coverage", "p_gen_mean"}
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0] - 0.3
    val = model.evaluate(ds.take(2), verbose=0, return_dict=True)
    assert np.isfinite(val["loss"])


def test_dropout_acts_in_training_only(batch, vocab):
    model = PointerGenerator(vocab.size, 8, 6, dropout=0.5)
    plain = PointerGenerator(vocab.size, 8, 6)
    for a, b in zip(plain.weights, model.weights):  # weights large enough to show dropout
        b.assign(tf.random.normal(b.shape, stddev=0.3, seed=2))
        a.assign(b)
    inference = model(batch, training=False)["logits"].numpy()
    np.testing.assert_allclose(inference, plain(batch, training=False)["logits"].numpy(), atol=1e-6)
    assert not np.allclose(model(batch, training=True)["logits"].numpy(), inference, atol=1e-4)
