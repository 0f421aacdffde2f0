"""The decoder's loop gradients summed after the loop (model.rnn_impl = "fused",
pgn_tf.ops.summed_after_loop) against autodiff of the same loop on the Keras cell.
tests/models/test_model_gradients.py checks them assembled in the model."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from pgn_tf.ops.summed_after_loop import FeedGradient, GateGradient
from tests.layers.test_decoder import B, E, L, inputs, randomized_cell


def test_deferred_gradients_equal_autodiff_of_the_plain_loop():
    """FeedGradient and GateGradient (the feed's encoder-side gradient and the LSTM's weight
    gradients summed after the loop, from the probes' gradients and the loop's attention and
    inputs) against autodiff of the same while loop on the Keras LSTM cell reading enc_fed
    plainly: the same outputs, and the same gradients for every weight and for the encoder
    outputs."""
    cell = randomized_cell(True, True, enc_dim=6)
    enc_out, mask, state, _ = inputs(seed=4, enc_dim=6)
    steps = 4
    x_embs = tf.constant(np.random.default_rng(5).normal(size=(steps, B, E)).astype(np.float32))
    enc_out, mask = tf.constant(enc_out), tf.constant(mask)

    @tf.function
    def run(deferred):
        with tf.GradientTape() as tape:
            tape.watch(enc_out)
            enc = {"outputs": enc_out, "mask": mask,
                   "features": cell.attention.precompute(enc_out)}
            enc_fed = cell.feed_inputs(enc_out)
            feed = FeedGradient(enc_fed, steps) if deferred else None
            gates = GateGradient(cell.lstm, steps, B, tf.float32) if deferred else None
            x_parts = cell.embed_inputs(x_embs)
            s = {"h": tf.constant(state["h"]), "c": tf.constant(state["c"]),
                 "coverage": tf.constant(state["coverage"]), "fed": tf.zeros([B, E])}

            def body(t, s, hs, xs, attns):
                if deferred:
                    s, extras = cell.step(x_parts[t], s, enc, feed.enc_fed, probe=feed.probes[t],
                                          gates=(gates, gates.probes[t]))
                else:
                    s, extras = cell.step(x_parts[t], s, enc, enc_fed)
                return (t + 1, s, hs.write(t, s["h"]), xs.write(t, extras["x"]),
                        attns.write(t, extras["attn"]))

            arrays = [tf.TensorArray(tf.float32, size=steps) for _ in range(3)]
            _, s, hs, xs, attns = tf.while_loop(lambda t, *_: t < steps, body,
                                                (0, s, *arrays))
            attn = tf.transpose(attns.stack(), [1, 0, 2])  # [B, T, L]
            if deferred:
                feed.close(attn)
                h_prev = tf.concat([tf.constant(state["h"])[None], hs.stack()[:-1]], 0)
                gates.close(xs.stack(), h_prev)
            loss = (tf.reduce_sum(tf.sin(hs.stack())) + tf.reduce_sum(xs.stack() ** 2)
                    + tf.reduce_sum(tf.cos(3.0 * attn)) + tf.reduce_sum(s["fed"] ** 2))
        return loss, tape.gradient(loss, cell.trainable_weights + [enc_out])

    want_loss, want = run(False)
    got_loss, got = run(True)
    np.testing.assert_allclose(got_loss.numpy(), want_loss.numpy(), rtol=1e-6)
    assert len(got) == len(want) == len(cell.trainable_weights) + 1
    for g, w, name in zip(got, want, [v.path for v in cell.trainable_weights] + ["enc_out"]):
        if w is None:  # weights the loss does not reach (o_t, p_gen)
            assert g is None, name
            continue
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
    # the feed's context half of W_x reaches the loss only through the feed: it is tested
    (kernel,) = [i for i, v in enumerate(cell.trainable_weights)
                 if "input_proj" in v.path and v.path.endswith("kernel")]
    assert np.abs(want[kernel].numpy()[E:]).max() > 1e-2
    lstm = [i for i, v in enumerate(cell.trainable_weights) if "/lstm/" in v.path]
    assert len(lstm) == 3 and all(np.abs(want[i].numpy()).max() > 1e-2 for i in lstm)


def test_feed_gradient_without_close_is_named():
    """A gradient asked for before the loop's attention was handed over says what is missing."""
    enc_fed = tf.ones([B, L, E])
    with tf.GradientTape() as tape:
        tape.watch(enc_fed)
        loss = tf.reduce_sum(FeedGradient(enc_fed, 2).probes)
    with pytest.raises(RuntimeError, match="close"):
        tape.gradient(loss, enc_fed)
    cell = randomized_cell(True, False)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(GateGradient(cell.lstm, 2, B, tf.float32).probes)
    with pytest.raises(RuntimeError, match="close"):
        tape.gradient(loss, cell.trainable_weights)


def test_gate_gradient_refuses_a_cell_option_it_does_not_implement():
    cell = keras.layers.LSTMCell(4, recurrent_dropout=0.1)
    cell.build((None, E))
    with pytest.raises(ValueError, match="recurrent_dropout=0.1"):
        GateGradient(cell, 2, B, tf.float32)
