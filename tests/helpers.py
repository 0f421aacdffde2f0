"""One shared layer check (after keras-hub's test_case.run_layer_test)."""

import keras
import numpy as np
import tensorflow as tf


def run_layer_test(layer_cls, init_kwargs, build, call, expected_num_weights, expected_shapes):
    """Config round trip, weight count, output shapes, and one gradient step that moves weights.

    build(layer) builds it; call(layer) returns a tensor or a tuple/dict of tensors.
    """
    layer = layer_cls(**init_kwargs)
    build(layer)
    assert len(layer.trainable_weights) == expected_num_weights
    clone = layer_cls.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    with tf.GradientTape() as tape:
        out = call(layer)
        flat = tf.nest.flatten(out)
        loss = tf.add_n([tf.reduce_sum(tf.square(tf.cast(t, tf.float32))) for t in flat
                         if t.dtype.is_floating])
    assert [tuple(t.shape) for t in flat] == [tuple(s) for s in expected_shapes]
    grads = tape.gradient(loss, layer.trainable_weights)
    before = [w.numpy().copy() for w in layer.trainable_weights]
    keras.optimizers.SGD(0.1).apply_gradients(zip(grads, layer.trainable_weights))
    moved = [not np.allclose(b, w.numpy()) for b, w in zip(before, layer.trainable_weights)]
    assert any(moved)
    return layer
