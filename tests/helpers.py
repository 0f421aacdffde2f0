"""One shared layer check (after keras-hub's test_case.run_layer_test)."""

import keras
import numpy as np
import tensorflow as tf


def run_layer_test(layer_cls, init_kwargs, build, call, expected_num_weights, expected_shapes,
                   shared_kwargs=None):
    """Config round trip, weight count, output shapes, and one gradient step that moves every
    weight.

    build(layer) builds it; call(layer) returns a tensor or a tuple/dict of tensors, and must be
    deterministic (fixed inputs), because the clone's outputs are compared with the layer's.
    shared_kwargs: constructor arguments that are objects shared with other layers, not config
    (TiedOutputProjection's embedding); passed to the constructor and to from_config.

    Checks:
      - the layer has expected_num_weights trainable weights;
      - from_config(get_config()) gives the same config, and, built and given the same weights,
        the same outputs (a constructor argument left out of get_config changes them);
      - the outputs have expected_shapes (in tf.nest.flatten order);
      - one SGD step on sum(outputs^2) gives every trainable weight a finite gradient and
        moves it (a weight the outputs do not depend on is a bug).
    """
    shared_kwargs = shared_kwargs or {}
    layer = layer_cls(**init_kwargs, **shared_kwargs)
    build(layer)
    assert len(layer.trainable_weights) == expected_num_weights, [
        w.path for w in layer.trainable_weights]
    rng = np.random.default_rng(0)
    for w in layer.weights:  # away from the init (zeros, tiny uniforms): every weight matters
        w.assign(rng.normal(0.0, 0.5, w.shape).astype(w.dtype))

    clone = layer_cls.from_config({**layer.get_config(), **shared_kwargs})
    assert clone.get_config() == layer.get_config()
    build(clone)
    clone.set_weights(layer.get_weights())
    for got, want in zip(tf.nest.flatten(call(clone)), tf.nest.flatten(call(layer))):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)

    with tf.GradientTape() as tape:
        out = call(layer)
        flat = tf.nest.flatten(out)
        loss = tf.add_n([tf.reduce_sum(tf.square(tf.cast(t, tf.float32))) for t in flat
                         if t.dtype.is_floating])
    assert [tuple(t.shape) for t in flat] == [tuple(s) for s in expected_shapes]
    grads = tape.gradient(loss, layer.trainable_weights)
    for w, g in zip(layer.trainable_weights, grads):
        assert g is not None and np.all(np.isfinite(tf.convert_to_tensor(g).numpy())), w.path
    before = [w.numpy().copy() for w in layer.trainable_weights]
    keras.optimizers.SGD(0.1).apply_gradients(zip(grads, layer.trainable_weights))
    for b, w in zip(before, layer.trainable_weights):
        assert not np.allclose(b, w.numpy(), rtol=0, atol=1e-9), f"{w.path} did not move"
    return layer
