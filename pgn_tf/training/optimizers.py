"""Keras's Adagrad and Adam with each variable's update as one of TF's fused training kernels.

Keras 3 writes an optimizer step as element-wise ops: its Adagrad reads and writes a dense
variable five times a step (square, add, sqrt, divide, subtract), and for the sparse gradient
of the embedding it still adds epsilon to and takes the square root of the *whole*
accumulator. TF's `ResourceApplyAdagradV2` / `ResourceApplyAdam` do the same update in one
multi-threaded pass, and `ResourceSparseApplyAdagradV2` touches the gradient's rows only. At
the reference sizes (20k vocabulary) the optimizer's ops were a sizeable share of a training
step's op time in a profile (docs/performance.md).

The update rules are Keras's (the tests compare them, `tests/training/test_optimizers.py`), with two
differences that do not matter at these settings:
  * Adagrad's epsilon goes outside the square root, var -= lr g / (sqrt(acc) + eps), where
    Keras has sqrt(acc + eps); with the accumulator starting at 0.1 and eps = 1e-10 the two
    differ in the ninth digit.
  * A sparse gradient's repeated rows (a word in both article and summary) are summed before
    the update, as TF 1's optimizers did: the accumulator grows by the square of the row's
    summed gradient, which is what the dense gradient gives; Keras's scatter adds the square of
    each part.
Variables, their names and checkpoints are Keras's own: a model dir trained with either
resumes with the other. Under a multi-replica strategy (mirrored variables) the update is
Keras's: the fused kernels take one device's variable handle.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from pgn_tf import config as config_lib
from pgn_tf.utils.errors import UserError


def _local(variable):
    """The tf.Variable behind a Keras variable, or None where the fused kernel cannot take it
    (a mirrored variable of a multi-replica strategy)."""
    value = variable.value if isinstance(variable, keras.Variable) else variable
    if hasattr(value, "_distributed_container") or tf.distribute.has_strategy():
        return None
    return value


def _dedup(grad: tf.IndexedSlices):
    """(values summed per distinct row, the distinct rows) of a sparse gradient."""
    rows, pos = tf.unique(grad.indices)
    return tf.math.unsorted_segment_sum(grad.values, pos, tf.shape(rows)[0]), rows


class Adagrad(keras.optimizers.Adagrad):
    """keras.optimizers.Adagrad, each variable updated by one fused kernel (module docstring)."""

    def update_step(self, gradient, variable, learning_rate):
        var = _local(variable)
        acc = _local(self._accumulators[self._get_variable_index(variable)])
        if var is None or acc is None:
            return super().update_step(gradient, variable, learning_rate)
        lr = tf.cast(learning_rate, var.dtype)
        eps = tf.cast(self.epsilon, var.dtype)
        if isinstance(gradient, tf.IndexedSlices):
            values, rows = _dedup(gradient)
            tf.raw_ops.ResourceSparseApplyAdagradV2(
                var=var.handle, accum=acc.handle, lr=lr, epsilon=eps,
                grad=tf.cast(values, var.dtype), indices=rows)
        else:
            tf.raw_ops.ResourceApplyAdagradV2(var=var.handle, accum=acc.handle, lr=lr,
                                              epsilon=eps, grad=tf.cast(gradient, var.dtype))


class Adam(keras.optimizers.Adam):
    """keras.optimizers.Adam, each dense variable updated by one fused kernel (module
    docstring). A sparse gradient (TF has no fused sparse Adam) and amsgrad take Keras's path."""

    def update_step(self, gradient, variable, learning_rate):
        var = _local(variable)
        index = self._get_variable_index(variable)
        m, v = _local(self._momentums[index]), _local(self._velocities[index])
        if (var is None or m is None or v is None or self.amsgrad
                or isinstance(gradient, tf.IndexedSlices)):
            return super().update_step(gradient, variable, learning_rate)
        dtype = var.dtype
        step = tf.cast(self.iterations + 1, dtype)
        tf.raw_ops.ResourceApplyAdam(
            var=var.handle, m=m.handle, v=v.handle,
            beta1_power=tf.pow(tf.cast(self.beta_1, dtype), step),
            beta2_power=tf.pow(tf.cast(self.beta_2, dtype), step),
            lr=tf.cast(learning_rate, dtype), beta1=tf.cast(self.beta_1, dtype),
            beta2=tf.cast(self.beta_2, dtype), epsilon=tf.cast(self.epsilon, dtype),
            grad=tf.cast(gradient, dtype))


def make_optimizer(train_cfg: config_lib.TrainConfig) -> keras.optimizers.Optimizer:
    """train.optimizer; Adagrad and Adam update each variable with one fused TF kernel (the
    classes above), except in an XLA-compiled step (train.jit_compile), where XLA fuses Keras's
    element-wise update itself and the sparse path's tf.unique has no XLA kernel."""
    lr = initial_learning_rate(train_cfg)
    fused = not train_cfg.jit_compile
    if train_cfg.optimizer == "adagrad":
        cls = Adagrad if fused else keras.optimizers.Adagrad
        return cls(learning_rate=lr, initial_accumulator_value=train_cfg.adagrad_init_acc,
                   epsilon=1e-10)
    if train_cfg.optimizer == "adam":
        return (Adam if fused else keras.optimizers.Adam)(learning_rate=lr)
    if train_cfg.optimizer == "sgd":
        return keras.optimizers.SGD(learning_rate=lr)
    raise UserError(f"unknown train.optimizer '{train_cfg.optimizer}' (adagrad, adam, sgd)")


def initial_learning_rate(train_cfg: config_lib.TrainConfig) -> float:
    return train_cfg.learning_rate if train_cfg.objective == "ml" else train_cfg.rl_learning_rate
