"""pgn_tf.training.optimizers (fused Adagrad and Adam kernels) against Keras's own update rules."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from pgn_tf.training import optimizers


def _run(opt, grads_per_step, shape=(5, 3), compiled=True):
    var = keras.Variable(np.linspace(-1, 1, np.prod(shape)).reshape(shape).astype("float32"))
    opt.build([var])

    def step(g):
        opt.apply_gradients([(g, var)])

    fn = tf.function(step) if compiled else step
    for g in grads_per_step:
        fn(g)
    return var.numpy()


def _dense_grads(n=4, shape=(5, 3)):
    rng = np.random.default_rng(0)
    return [tf.constant(rng.normal(size=shape).astype("float32")) for _ in range(n)]


@pytest.mark.parametrize("compiled", [True, False])
def test_adagrad_dense_matches_keras(compiled):
    kw = dict(learning_rate=0.15, initial_accumulator_value=0.1, epsilon=1e-10)
    got = _run(optimizers.Adagrad(**kw), _dense_grads(), compiled=compiled)
    want = _run(keras.optimizers.Adagrad(**kw), _dense_grads(), compiled=compiled)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert not np.allclose(got, _run(keras.optimizers.Adagrad(**kw), _dense_grads()[:3]))


@pytest.mark.parametrize("compiled", [True, False])
def test_adam_dense_matches_keras(compiled):
    got = _run(optimizers.Adam(1e-2), _dense_grads(), compiled=compiled)
    want = _run(keras.optimizers.Adam(1e-2), _dense_grads(), compiled=compiled)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_sparse_adagrad_with_repeated_rows_equals_the_dense_update():
    """An embedding's gradient repeats a row when a word occurs twice in a batch: the fused
    sparse update sums the repeats first, so it equals the dense gradient's update (NumPy)."""
    kw = dict(learning_rate=0.15, initial_accumulator_value=0.1, epsilon=1e-10)
    values = tf.constant([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0], [4.0, 0.0, -2.0]])
    sparse = tf.IndexedSlices(values, tf.constant([3, 0, 3]), tf.constant([5, 3]))
    got = _run(optimizers.Adagrad(**kw), [sparse, sparse])
    dense = tf.convert_to_tensor(sparse)
    want = _run(keras.optimizers.Adagrad(**kw), [dense, dense])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # NumPy: acc += g^2; var -= lr g / sqrt(acc), with g the summed rows
    var = np.linspace(-1, 1, 15).reshape(5, 3)
    acc = np.full((5, 3), 0.1)
    g = np.zeros((5, 3))
    g[3] = [5.0, 2.0, 1.0]
    g[0] = [0.5, -1.0, 2.0]
    for _ in range(2):
        acc += g * g
        var -= 0.15 * g / np.sqrt(acc)
    np.testing.assert_allclose(got, var, rtol=1e-5)


def test_sparse_adam_takes_keras_path_and_matches_it():
    values = tf.constant([[1.0, 2.0, 3.0], [4.0, 0.0, -2.0]])
    sparse = tf.IndexedSlices(values, tf.constant([3, 1]), tf.constant([5, 3]))
    np.testing.assert_allclose(_run(optimizers.Adam(1e-2), [sparse] * 3),
                               _run(keras.optimizers.Adam(1e-2), [sparse] * 3), rtol=1e-6)


def test_checkpoints_are_interchangeable_with_keras(tmp_path):
    """A model dir trained with Keras's Adagrad resumes with the fused one: same variables."""
    var = keras.Variable(np.ones((2, 2), "float32"))
    keras_opt = keras.optimizers.Adagrad(0.1, initial_accumulator_value=0.1)
    keras_opt.apply_gradients([(tf.ones((2, 2)), var)])
    path = tf.train.Checkpoint(v=var, optimizer=keras_opt).save(str(tmp_path / "ckpt"))
    var2 = keras.Variable(np.zeros((2, 2), "float32"))
    fused = optimizers.Adagrad(0.1, initial_accumulator_value=0.1)
    fused.build([var2])
    tf.train.Checkpoint(v=var2, optimizer=fused).restore(path).assert_existing_objects_matched()
    np.testing.assert_allclose(fused._accumulators[0].numpy(), np.full((2, 2), 1.1))
    assert int(fused.iterations.numpy()) == 1


@pytest.mark.parametrize("opt, kernel", [(optimizers.Adagrad(0.1), "ResourceApplyAdagradV2"),
                                         (optimizers.Adam(0.1), "ResourceApplyAdam")])
def test_the_compiled_step_runs_the_fused_kernel(opt, kernel):
    var = keras.Variable(np.ones((2, 2), "float32"))
    opt.build([var])
    fn = tf.function(lambda g: opt.apply_gradients([(g, var)]))
    graph = fn.get_concrete_function(tf.TensorSpec([2, 2], tf.float32)).graph
    ops = {op.type for op in graph.get_operations()}
    for f in graph._functions.values():  # the update may sit inside a nested function
        ops |= {op.type for op in f.graph.get_operations()} if hasattr(f, "graph") else set()
    assert kernel in ops


def test_an_xla_compiled_step_keeps_keras_optimizers():
    from pgn_tf import config as config_lib
    from pgn_tf.training.optimizers import make_optimizer

    cfg = config_lib.Config().train
    assert type(make_optimizer(cfg)) is optimizers.Adagrad
    cfg.jit_compile = True
    assert type(make_optimizer(cfg)) is keras.optimizers.Adagrad
    cfg.optimizer = "adam"
    assert type(make_optimizer(cfg)) is keras.optimizers.Adam
