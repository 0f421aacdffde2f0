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


@pytest.fixture(scope="module")
def batch(corpus, vocab, tiny_cfg):
    files = sorted(tf.io.gfile.glob(corpus["train"]))
    ds = dataset.make_dataset(files, vocab, tiny_cfg.data, 4, True, training=False)
    return next(iter(ds))


@pytest.mark.parametrize("pointer_gen, coverage", [(False, False), (True, False), (True, True)])
def test_decode_step_reproduces_teacher_forcing(batch, vocab, pointer_gen, coverage):
    model = PointerGenerator(vocab.size, 8, 6, pointer_gen=pointer_gen, coverage=coverage)
    if not pointer_gen:  # the baseline's targets never point past the vocab
        batch = dict(batch, target=tf.where(batch["target"] >= vocab.size, 1, batch["target"]))
    if coverage:
        model.cell.attention.w_c.assign(tf.random.normal([16]))
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


def test_coverage_weight_starts_at_zero_so_conversion_changes_nothing(batch, vocab, tmp_path):
    pgn = PointerGenerator(vocab.size, 8, 6, coverage=False)
    cov = PointerGenerator(vocab.size, 8, 6, coverage=True)
    ckpt = tf.train.Checkpoint(model=pgn)
    path = ckpt.write(str(tmp_path / "ckpt"))
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
