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


def test_reference_onmt_parameter_count():
    """The reference sizes (encoder 2 x 128, decoder H = 256, E = 128, V = 20k, copy +
    coverage), counted layer by layer (one embedding table for article and summary, as See et
    al.). The OpenNMT-py model of the speed comparison has 11.48M."""
    from pgn_tf import config

    cfg = config.resolve("reference_onmt")
    model = PointerGenerator.from_config_obj(cfg.model, cfg.data.vocab_size)
    v, e, he, h = 20_000, 128, 128, 256
    d = 2 * he  # encoder outputs, context, attention space
    expected = (v * e  # the one embedding
                + 2 * 4 * he * (e + he + 1)  # BiLSTM, both directions
                + 2 * (d * h + h)  # reduce_h, reduce_c: 2 x 128 -> 256
                + (e + d) * e + e  # input feeding projection
                + 4 * h * (e + h + 1)  # decoder LSTM
                + d * d + 2 * h * d + 3 * d  # W_h, W_s, b_attn, v, w_c (eq. 11)
                + (h + d) * h + h  # first linear of eq. 4
                + (d + 2 * h + e) + 1  # p_gen (eq. 8)
                + h * v + v)  # vocabulary layer
    assert model.count_params() == expected == 8_867_873
    assert tuple(model.encoder.bilstm.forward_layer.cell.kernel.shape) == (e, 4 * he)
    assert tuple(model.cell.attention.w_h.kernel.shape) == (d, d)
    print(f"reference_onmt: {model.count_params():,} parameters (OpenNMT-py's model: 11.48M)")


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


def randomized(model, seed):
    """The model with weights away from the near-uniform init, so that a mismatch shows."""
    for w in model.weights:
        w.assign(tf.random.normal(w.shape, stddev=0.3, seed=seed))
    return model


def whole_steps_reference(model, batch):
    """The teacher-forced pass computed plainly, one whole decoder step at a time as before the
    loop was split: W_x [emb(y_{t-1}); h*_{t-1}] + b, the LSTM, attention (eq. 1-3 / 11), o_t
    (eq. 4's first layer) and p_gen (eq. 8) each step; the vocabulary layer on every o_t."""
    enc, state = model.encode(batch["enc_ids"], batch["enc_len"], batch["enc_ext_ids"])
    cell, dec_emb = model.cell, model.embed_ids(batch["dec_input"])  # [B, T, E]
    seq = {"output": [], "attn": [], "p_gen_logit": [], "coverage": []}
    for t in range(dec_emb.shape[1]):
        x = cell.input_proj(tf.concat([dec_emb[:, t], state["context"]], -1))
        _, (h, c) = cell.lstm(x, [state["h"], state["c"]])
        context, attn = cell.attention(enc["features"], enc["outputs"], enc["mask"],
                                       tf.concat([c, h], -1),
                                       state["coverage"] if cell.coverage else None)
        seq["output"].append(cell.output_proj(tf.concat([h, context], -1)))
        seq["p_gen_logit"].append(cell.switch([context, c, h, x])[:, 0] if model.pointer_gen
                                  else tf.fill(tf.shape(h)[:1], 30.0))
        seq["attn"].append(attn)
        seq["coverage"].append(state["coverage"])
        state = {"h": h, "c": c, "context": context, "coverage": state["coverage"] + attn}
    out = {k: tf.stack(v, axis=1) for k, v in seq.items()}  # [B, T, ...]
    out["logits"] = model.vocab_proj(out.pop("output"))
    return out


@pytest.mark.parametrize("pointer_gen, coverage, enc_hidden",
                         [(False, False, 0), (True, False, 0), (True, True, 0), (True, True, 3)])
def test_teacher_forcing_equals_whole_steps(batch, vocab, pointer_gen, coverage, enc_hidden):
    """The loop runs only the recurrence (the embedding half of the input projection before
    it, o_t and p_gen after it): logits, attention, p_gen and coverage as whole steps give."""
    model = randomized(PointerGenerator(vocab.size, 8, 6, pointer_gen=pointer_gen,
                                        coverage=coverage, enc_hidden_dim=enc_hidden), seed=7)
    got, want = model(batch), whole_steps_reference(model, batch)
    assert int(tf.shape(got["logits"])[1]) == int(tf.shape(batch["dec_input"])[1])
    for key in ("logits", "attn", "p_gen_logit", "coverage"):
        np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), rtol=1e-5, atol=1e-5,
                                   err_msg=key)


@pytest.mark.parametrize("pointer_gen", [False, True])
def test_loss_on_real_positions_equals_the_masked_full_loss(batch, vocab, pointer_gen):
    """token_log_probs runs the vocabulary layer on the real (non-padding) target positions
    only; the masked NLL over the full [B, T, V] grid (target_log_prob) must give the same
    per-example losses and the same gradient for every weight."""
    model = randomized(PointerGenerator(vocab.size, 8, 6, pointer_gen=pointer_gen,
                                        coverage=True), seed=4)
    if not pointer_gen:
        batch = dict(batch, target=tf.where(batch["target"] >= vocab.size, 1, batch["target"]))
    valid = tf.sequence_mask(batch["dec_len"], tf.shape(batch["target"])[1]).numpy()
    assert valid.sum() < valid.size  # the batch has padding to skip

    def full_grid(out):
        copy = (out["attn"], out["p_gen_logit"], batch["enc_ext_ids"]) if pointer_gen else ()
        return target_log_prob(out["logits"], batch["target"], *copy)

    results = []
    for log_probs in (lambda out: model.token_log_probs(batch, out), full_grid):
        with tf.GradientTape() as tape:
            log_p = log_probs(model(batch))
            nll = objectives.sequence_nll(log_p, batch["dec_len"])  # [B]
            total = tf.reduce_sum(nll)
        grads = tape.gradient(total, model.trainable_variables)
        results.append((log_p.numpy(), nll.numpy(), grads))
    (got_lp, got_nll, got_grads), (want_lp, want_nll, want_grads) = results
    assert np.all(np.isfinite(got_lp))
    np.testing.assert_allclose(got_lp[valid], want_lp[valid], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_nll, want_nll, rtol=1e-5, atol=1e-6)
    for var, g, w in zip(model.trainable_variables, got_grads, want_grads):
        g, w = tf.convert_to_tensor(g).numpy(), tf.convert_to_tensor(w).numpy()
        assert np.abs(w).max() > 0, var.path
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6, err_msg=var.path)


# The checkpoint variables of PointerGenerator(20, 8, 6, coverage=True), recorded with the code
# before the fused encoder and the split decoder loop: checkpoints written then must restore.
CHECKPOINT_VARIABLES = {
    "cell/attention/v": [16], "cell/attention/w_c": [16],
    "cell/attention/w_h/_kernel": [16, 16], "cell/attention/w_s/_kernel": [16, 16],
    "cell/attention/w_s/bias": [16], "cell/input_proj/_kernel": [22, 6],
    "cell/input_proj/bias": [6], "cell/lstm/bias": [32], "cell/lstm/kernel": [6, 32],
    "cell/lstm/recurrent_kernel": [8, 32], "cell/output_proj/_kernel": [24, 8],
    "cell/output_proj/bias": [8], "cell/switch/dense/_kernel": [38, 1],
    "cell/switch/dense/bias": [1], "embedding/_embeddings": [20, 6],
    "encoder/bilstm/backward_layer/cell/bias": [32],
    "encoder/bilstm/backward_layer/cell/kernel": [6, 32],
    "encoder/bilstm/backward_layer/cell/recurrent_kernel": [8, 32],
    "encoder/bilstm/forward_layer/cell/bias": [32],
    "encoder/bilstm/forward_layer/cell/kernel": [6, 32],
    "encoder/bilstm/forward_layer/cell/recurrent_kernel": [8, 32],
    "encoder/reduce_c/_kernel": [16, 8], "encoder/reduce_c/bias": [8],
    "encoder/reduce_h/_kernel": [16, 8], "encoder/reduce_h/bias": [8],
    "vocab_proj/_kernel": [8, 20], "vocab_proj/bias": [20],
}


def test_checkpoint_variables_are_unchanged(tmp_path):
    path = tf.train.Checkpoint(model=PointerGenerator(20, 8, 6, coverage=True)).write(
        str(tmp_path / "ckpt"))
    suffix = "/.ATTRIBUTES/VARIABLE_VALUE"
    got = {name[len("model/"):-len(suffix)]: shape for name, shape in tf.train.list_variables(path)
           if name.startswith("model/")}
    assert got == CHECKPOINT_VARIABLES


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


@pytest.mark.slow
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
