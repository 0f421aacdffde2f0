"""One step of See et al.'s attention decoder against NumPy: input feeding, the LSTM, attention
with coverage (eq. 1-3, 11), the output layer's first linear map (eq. 4) and p_gen (eq. 8)."""

import numpy as np
import pytest
import tensorflow as tf

from pgn_tf.layers.decoder import AttentionDecoderCell
from tests.helpers import run_layer_test

B, L, E, H = 2, 5, 3, 4
CONFIGS = [(False, False), (True, False), (True, True)]  # (pointer_gen, coverage)


def decoder_weights(cell):
    """The cell's weights by role, as NumPy arrays (read from `cell.weights`; the one place
    that knows their layout):

      input_proj: (W [E + D, E], b [E]) on [emb(y_{t-1}); h*_{t-1}]
      lstm: (W [E, 4H], U [H, 4H], b [4H]), gate blocks i, f, c, o (Keras LSTMCell)
      w_h [D, D], w_s [2H, D], b_attn [D], v [D], w_c [D] (eq. 11; w_c with coverage)
      output_proj: (W [H + D, H], b [H]) on [h_t; h*_t]
      p_gen: (w [D + H + H + E, 1], b [1]) on [h*_t; c_t; h_t; x_t] (eq. 8)
    D = enc_dim, the encoder outputs' width (2H with See et al.'s sizes).
    """
    def pick(scope, name):  # the one weight whose path has `scope` and ends in `name`
        (w,) = [w.numpy() for w in cell.weights
                if f"/{scope}/" in w.path and w.path.rsplit("/", 1)[1] == name]
        return w

    out = {
        "input_proj": (pick("input_proj", "kernel"), pick("input_proj", "bias")),
        "lstm": tuple(pick("lstm", k) for k in ("kernel", "recurrent_kernel", "bias")),
        "w_h": pick("w_h", "kernel"), "w_s": pick("w_s", "kernel"), "b_attn": pick("w_s", "bias"),
        "v": pick("attention", "v"),
        "output_proj": (pick("output_proj", "kernel"), pick("output_proj", "bias")),
    }
    if cell.coverage:
        out["w_c"] = pick("attention", "w_c")
    if cell.pointer_gen:
        out["p_gen"] = (pick("pointer", "kernel"), pick("pointer", "bias"))
    return out


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def np_step(w, x_emb, state, enc_out, mask):
    """One decoder step in NumPy; returns (o_t [B, H], new state, attn [B, L], p_gen logit [B])."""
    x = np.concatenate([x_emb, state["context"]], -1) @ w["input_proj"][0] + w["input_proj"][1]
    kernel, recurrent, bias = w["lstm"]
    i, f, g, o = np.split(x @ kernel + state["h"] @ recurrent + bias, 4, axis=-1)
    c = sigmoid(f) * state["c"] + sigmoid(i) * np.tanh(g)
    h = sigmoid(o) * np.tanh(c)
    s_t = np.concatenate([c, h], -1)  # the decoder state as See et al.'s code feeds it
    feats = enc_out @ w["w_h"] + (s_t @ w["w_s"] + w["b_attn"])[:, None, :]
    if "w_c" in w:
        feats = feats + state["coverage"][:, :, None] * w["w_c"]  # (11)
    e = np.tanh(feats) @ w["v"]  # (1) / (11): e_i^t [B, L]
    e = np.where(mask, e, -np.inf)
    a = np.exp(e - e.max(-1, keepdims=True))
    a = a / a.sum(-1, keepdims=True)  # (2)
    context = np.einsum("bl,bld->bd", a, enc_out)  # (3): h*_t
    output = np.concatenate([h, context], -1) @ w["output_proj"][0] + w["output_proj"][1]
    if "p_gen" in w:  # (8)
        z = (np.concatenate([context, c, h, x], -1) @ w["p_gen"][0] + w["p_gen"][1])[:, 0]
    else:
        z = np.full(len(h), 30.0)  # no pointer: p_gen = sigmoid(30) = 1
    new_state = {"h": h, "c": c, "context": context, "coverage": state["coverage"] + a}
    return output, new_state, a, z


def randomized_cell(pointer_gen, coverage, enc_dim=None):
    cell = AttentionDecoderCell(H, E, pointer_gen=pointer_gen, coverage=coverage, enc_dim=enc_dim)
    cell.build()
    rng = np.random.default_rng(0)
    for v in cell.weights:  # far from the init (w_c starts at 0): every term matters
        v.assign(rng.normal(0.0, 0.5, v.shape).astype(np.float32))
    return cell


def inputs(seed=1, enc_dim=2 * H):
    rng = np.random.default_rng(seed)
    enc_out = rng.normal(size=(B, L, enc_dim)).astype(np.float32)
    mask = np.array([[True] * L, [True, True, True, False, False]])
    enc_out[~mask] = 0.0  # as the encoder returns them
    state = {"h": rng.normal(size=(B, H)), "c": rng.normal(size=(B, H)),
             "context": rng.normal(size=(B, enc_dim)),
             "coverage": rng.uniform(0, 1.5, (B, L)) * mask}
    state = {k: v.astype(np.float32) for k, v in state.items()}
    x_embs = rng.normal(size=(2, B, E)).astype(np.float32)  # two steps' emb(y_{t-1})
    return enc_out, mask, state, x_embs


@pytest.mark.parametrize("enc_dim", [2 * H, 6])  # See et al.'s 2H; an encoder of 2 x 3 units
@pytest.mark.parametrize("pointer_gen, coverage", CONFIGS)
def test_two_steps_match_numpy(pointer_gen, coverage, enc_dim):
    """Two steps, so the fed-back context, the LSTM state and the coverage of step 1 are used."""
    cell = randomized_cell(pointer_gen, coverage, enc_dim)
    enc_out, mask, state, x_embs = inputs(enc_dim=enc_dim)
    enc = {"outputs": tf.constant(enc_out), "mask": tf.constant(mask),
           "features": cell.attention.precompute(tf.constant(enc_out))}
    weights = decoder_weights(cell)
    tf_state = {k: tf.constant(v) for k, v in state.items()}
    for x_emb in x_embs:
        output, tf_state, extras = cell(tf.constant(x_emb), tf_state, enc)
        want_out, want_state, want_attn, want_z = np_step(weights, x_emb, state, enc_out, mask)
        np.testing.assert_allclose(extras["coverage"].numpy(), state["coverage"], rtol=1e-6)
        state = want_state
        np.testing.assert_allclose(extras["attn"].numpy(), want_attn, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(output.numpy(), want_out, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(extras["p_gen_logit"].numpy(), want_z, rtol=1e-5, atol=1e-5)
        for key in want_state:
            np.testing.assert_allclose(tf_state[key].numpy(), want_state[key], rtol=1e-5,
                                       atol=1e-5, err_msg=key)
    np.testing.assert_array_equal(extras["attn"].numpy()[1, 3:], 0.0)  # padding: no attention


@pytest.mark.parametrize("pointer_gen, coverage", CONFIGS)
def test_teacher_forcing_split_matches_numpy(pointer_gen, coverage):
    """The teacher-forced path: `embed_inputs` and `feed_inputs` before the loop, `step` (the
    recurrence alone, carrying W_x's context half of h*_{t-1}, not h*_{t-1}) inside it,
    `contexts` (eq. 3) and `outputs` (o_t and p_gen) over all steps after it; the same numbers
    as NumPy's whole steps."""
    cell = randomized_cell(pointer_gen, coverage, enc_dim=6)
    enc_out, mask, state, x_embs = inputs(seed=3, enc_dim=6)
    assert np.abs(state["context"]).max() > 0  # a non-zero h*_0, so `fed` is tested
    enc = {"outputs": tf.constant(enc_out), "mask": tf.constant(mask),
           "features": cell.attention.precompute(tf.constant(enc_out))}
    weights = decoder_weights(cell)
    x_parts = cell.embed_inputs(tf.constant(x_embs))  # [T, B, E], before the loop
    enc_fed = cell.feed_inputs(enc["outputs"])  # [B, L, E]
    fed = state["context"] @ weights["input_proj"][0][E:]
    tf_state = {"h": tf.constant(state["h"]), "c": tf.constant(state["c"]),
                "coverage": tf.constant(state["coverage"]), "fed": tf.constant(fed)}
    seq = []
    for t in range(len(x_embs)):
        tf_state, extras = cell.step(x_parts[t], tf_state, enc, enc_fed)
        seq.append(dict(extras, h=tf_state["h"], c=tf_state["c"]))
    stacked = {k: tf.stack([s[k] for s in seq], axis=1) for k in seq[0]}  # [B, T, ...]
    contexts = cell.contexts(stacked["attn"], enc["outputs"])  # after the loop, all steps
    outputs, p_gen_logit = cell.outputs(stacked["h"], stacked["c"], contexts, stacked["x"])
    for t, x_emb in enumerate(x_embs):
        want_out, want_state, want_attn, want_z = np_step(weights, x_emb, state, enc_out, mask)
        np.testing.assert_allclose(stacked["coverage"][:, t].numpy(), state["coverage"],
                                   rtol=1e-6)
        np.testing.assert_allclose(stacked["attn"][:, t].numpy(), want_attn, rtol=1e-5,
                                   atol=1e-6)
        np.testing.assert_allclose(contexts[:, t].numpy(), want_state["context"], rtol=1e-5,
                                   atol=1e-5)
        np.testing.assert_allclose(outputs[:, t].numpy(), want_out, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(p_gen_logit[:, t].numpy(), want_z, rtol=1e-5, atol=1e-5)
        state = want_state
    for key in ("h", "c", "coverage"):
        np.testing.assert_allclose(tf_state[key].numpy(), state[key], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tf_state["fed"].numpy(),
                               state["context"] @ weights["input_proj"][0][E:], rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("pointer_gen, coverage", CONFIGS)
def test_coverage_changes_attention_only_with_coverage_on(pointer_gen, coverage):
    """The coverage vector enters eq. 11 only when the cell has coverage (w_c); the state's
    coverage accumulates either way (eq. 10), for the coverage loss and for converting."""
    cell = randomized_cell(pointer_gen, coverage)
    enc_out, mask, state, x_embs = inputs()
    enc = {"outputs": tf.constant(enc_out), "mask": tf.constant(mask),
           "features": cell.attention.precompute(tf.constant(enc_out))}
    attns = []
    for cov in (state["coverage"], np.zeros_like(state["coverage"])):
        st = {k: tf.constant(v) for k, v in dict(state, coverage=cov).items()}
        _, new, extras = cell(tf.constant(x_embs[0]), st, enc)
        np.testing.assert_allclose(new["coverage"].numpy(), cov + extras["attn"].numpy(),
                                   rtol=1e-6)
        attns.append(extras["attn"].numpy())
    if coverage:
        assert np.abs(attns[0] - attns[1]).max() > 1e-3
    else:
        np.testing.assert_array_equal(attns[0], attns[1])


@pytest.mark.parametrize("pointer_gen, coverage, num_weights", [
    (False, False, 11),  # input_proj 2, LSTM 3, attention 4 (W_h, W_s, b_attn, v), output 2
    (True, False, 13),  # + the p_gen gate's w and b_ptr
    (True, True, 14),  # + w_c
])
def test_layer_contract(pointer_gen, coverage, num_weights):
    enc_out, mask, state, x_embs = inputs(seed=2)
    enc_t, mask_t = tf.constant(enc_out), tf.constant(mask)
    st = {k: tf.constant(v) for k, v in state.items()}

    def call(cell):
        enc = {"outputs": enc_t, "mask": mask_t, "features": cell.attention.precompute(enc_t)}
        return cell(tf.constant(x_embs[0]), st, enc)

    run_layer_test(
        AttentionDecoderCell, {"hidden_dim": H, "emb_dim": E, "pointer_gen": pointer_gen,
                               "coverage": coverage, "init_mag": 0.1},
        build=lambda cell: cell.build(), call=call, expected_num_weights=num_weights,
        # o_t; state (sorted keys): c, context, coverage, h; extras: attn, coverage, p_gen_logit
        expected_shapes=[(B, H), (B, H), (B, 2 * H), (B, L), (B, H), (B, L), (B, L), (B,)],
    )


def test_a_fused_cell_refuses_an_lstm_dropout_that_a_keras_cell_applies():
    """rnn_impl=fused sums the LSTM's weight gradients after the loop from its weights alone
    (pgn_tf.ops.summed_after_loop): a dropout on the LSTMCell is refused, with the way out;
    the Keras cell applies it in training."""
    with pytest.raises(ValueError, match="does not implement the LSTM option dropout=0.4.*"
                                         "model.rnn_impl=keras"):
        AttentionDecoderCell(H, E, rnn_impl="fused", lstm_options={"dropout": 0.4})
    cell = AttentionDecoderCell(H, E, rnn_impl="keras", lstm_options={"dropout": 0.4})
    cell.build()
    enc_out, mask, state, x_embs = inputs(seed=6)
    enc = {"outputs": tf.constant(enc_out), "mask": tf.constant(mask),
           "features": cell.attention.precompute(tf.constant(enc_out))}
    st = {k: tf.constant(v) for k, v in state.items()}
    infer = cell(tf.constant(x_embs[0]), st, enc, training=False)[0].numpy()
    cell.lstm.reset_dropout_mask()
    trained = cell(tf.constant(x_embs[0]), st, enc, training=True)[0].numpy()
    assert np.abs(trained - infer).max() > 1e-3
    assert cell.loop_gradients(enc["outputs"], 2, B) is None  # autodiff of the loop
