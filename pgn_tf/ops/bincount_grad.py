"""The gradient of a weighted bincount, which TF does not register: the pointer's copy scatter
(pgn_tf.layers.pointer.scatter_copy) with model.rnn_impl = "fused" is a `tf.math.bincount`,
and the self-critical objective differentiates through it. Importing this module registers it.

It is registered once for the op type, rather than as a tf.custom_gradient: a custom gradient
is saved into the export, and tf.saved_model.load registers it in TF's process-wide gradient
registry, which then keeps every loaded version's graphs alive (a server swapping versions
grew at every swap: the soak in docs/reliability.md).
"""

from __future__ import annotations

import tensorflow as tf


def dense_bincount_grad(op, grad):
    """d out[b, w] / d weights[b, i] = [ids[b, i] = w], so the upstream gradient is gathered
    at the ids: grad float [B, W] (or [W]) -> float [B, L] (or [L]) for the weights."""
    ids, weights = op.inputs[0], op.inputs[2]
    if op.get_attr("binary_output") or weights.shape.num_elements() == 0:
        return None, None, None
    batch_dims = 1 if ids.shape.rank == 2 else 0
    return None, None, tf.cast(tf.gather(grad, ids, batch_dims=batch_dims), weights.dtype)


try:
    tf.RegisterGradient("DenseBincount")(dense_bincount_grad)
except KeyError:  # registered already (a TF that has one, or this module loaded twice)
    pass
