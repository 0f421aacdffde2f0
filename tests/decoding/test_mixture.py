"""The beam search's scoring of a Mixture (pgn_tf.decoding.mixture) writes its bans into the
softmax it takes itself: one [N, V] buffer a step, and nothing of the caller's changed. Its
results against the dense distribution: tests/decoding/test_search.py."""

import numpy as np
import pytest
import tensorflow as tf

from pgn_tf.decoding.constraints import Constraints
from pgn_tf.decoding.mixture import _softmax_banned_in_place, mixture_candidates
from pgn_tf.layers.pointer import Mixture, copy_slots, dense_distribution
from tests.decoding.test_search import random_mixture

STOP = 3


def _banning_constraints(vocab):
    exempt = np.zeros(vocab, bool)
    exempt[:10] = True
    return Constraints(STOP, min_steps=9, unk_id=1, block_trigrams=True,
                       repeat_exempt=tf.constant(exempt))


def search_step(rng, vocab, b=8, beam=4, src_len=20, hidden=16, steps=12):
    """(a tf.function of one search step's scoring of a Mixture under banning constraints,
    its logits from an output layer's matmul inside it; N = b * beam, its hypotheses)."""
    n = b * beam
    ext = tf.constant(rng.integers(4, vocab, size=(n, src_len)).astype("int32"))
    slot, first = copy_slots(ext, tf.ones([n, src_len], tf.bool))
    out = tf.constant(rng.normal(size=(n, hidden)).astype("float32"))
    kernel = tf.constant(rng.normal(size=(hidden, vocab)).astype("float32"))
    attn = tf.nn.softmax(tf.constant(rng.normal(size=(n, src_len)).astype("float32")))
    seq = tf.constant(rng.integers(4, vocab, size=(n, steps)).astype("int32"))
    constraints = _banning_constraints(vocab)

    @tf.function
    def step():
        mix = Mixture(logits=tf.matmul(out, kernel), p_gen=tf.fill([n], 0.5), attn=attn,
                      ext_ids=ext, slot=slot, first=first, width=tf.constant(vocab))
        return mixture_candidates(mix, constraints, seq, tf.constant(5), tf.zeros([b, beam]),
                                  2 * beam)

    return step, n


def test_the_callers_mixture_is_left_as_it_was():
    """Eager, as a caller holding the Mixture runs it: the logits are not edited (the bans go
    into the softmax mixture_candidates takes), so a second call gives the same result."""
    rng = np.random.default_rng(0)
    b, beam, vocab, src_len, oovs, steps = 2, 3, 50, 7, 3, 6
    mix = random_mixture(rng, b * beam, vocab, src_len, oovs)
    before = mix.logits.numpy().copy()
    seq = tf.constant(rng.integers(0, vocab + oovs, size=(b * beam, steps)).astype("int32"))
    alive = tf.zeros([b, beam])
    constraints = _banning_constraints(vocab)
    first = mixture_candidates(mix, constraints, seq, tf.constant(4), alive, 2 * beam)
    np.testing.assert_array_equal(mix.logits.numpy(), before)
    second = mixture_candidates(mix, constraints, seq, tf.constant(4), alive, 2 * beam)
    for x, y in zip(first, second):
        np.testing.assert_array_equal(x.numpy(), y.numpy())


def test_a_search_step_holds_one_vocabulary_sized_buffer():
    """Under a tf.function, as the search runs it: P_vocab's logits come out of the output
    layer's matmul, the softmax takes their buffer and the bans are written into it, so the
    step's transient memory is one [N, V] buffer, not two (a scatter copies its input on the
    CPU). TensorFlow's allocator counts the bytes (oneDNN's, on by the suite's start-up), in
    the chunks it hands out: a free chunk under twice a request serves it whole, so one buffer
    counts as less than two (1.64 here) and two as at least two (2.64 with a scatter). The rest
    of the step is [N, L] and [N, pool] tensors."""
    vocab = 40000
    step, n = search_step(np.random.default_rng(1), vocab)
    want = [x.numpy() for x in step()]
    tf.config.experimental.reset_memory_stats("CPU:0")
    held = tf.config.experimental.get_memory_info("CPU:0")["current"]
    for x, y in zip(step(), want):
        np.testing.assert_array_equal(x.numpy(), y)
    transient = tf.config.experimental.get_memory_info("CPU:0")["peak"] - held
    full = n * vocab * 4
    assert full <= transient < 2 * full, (transient / full)


def test_the_flat_index_refuses_to_overflow():
    """The in-place write indexes the [N, V] buffer flat, in int32: past 2**31 entries it
    refuses instead of writing elsewhere."""
    logits = tf.math.log(tf.constant([[1.0, 2.0, 1.0], [2.0, 1.0, 1.0]]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="under 2\\*\\*31"):
        _softmax_banned_in_place(logits, tf.constant(2**31 // 3 + 1), tf.constant([0]),
                                 tf.constant([1]))
    got = _softmax_banned_in_place(logits, tf.constant(2), tf.constant([1, 0, 1]),
                                   tf.constant([2, 0, 2]))
    np.testing.assert_allclose(got.numpy(), [[-1, 0.5, 0.25], [0.5, 0.25, -1]], rtol=1e-6)


@pytest.fixture(params=["grappler", "no grappler"])
def graph_optimizer(request):
    """Grappler on (TensorFlow's default) and off: without it only TensorFlow's own graph
    optimizer runs, whose common-subexpression pass knows nothing of in-place writes."""
    before = tf.config.optimizer.get_experimental_options()
    tf.config.optimizer.set_experimental_options(
        {"disable_meta_optimizer": request.param == "no grappler"})
    try:
        yield request.param
    finally:
        tf.config.optimizer.set_experimental_options(
            {"disable_meta_optimizer": before.get("disable_meta_optimizer", False)})


def test_a_graph_reading_the_logits_twice_keeps_both_readings(graph_optimizer):
    """In one tf.function, the dense distribution and two searches' candidates of one Mixture
    under different constraints: three softmaxes of the same logits, which the graph's
    optimizers must keep apart (a merge would carry one search's bans to the others). Each
    equals its eager value, computed apart. It fails when the softmax does not depend on its
    bans."""
    rng = np.random.default_rng(3)
    b, beam, vocab, src_len, oovs, steps = 2, 3, 50, 7, 3, 6
    mix = random_mixture(rng, b * beam, vocab, src_len, oovs)
    seq = tf.constant(rng.integers(0, vocab + oovs, size=(b * beam, steps)).astype("int32"))
    alive = tf.zeros([b, beam])
    banning, plain = _banning_constraints(vocab), Constraints(STOP)

    @tf.function
    def three(logits):
        m = mix._replace(logits=logits * 1.0)  # a tensor of the graph's own
        return (dense_distribution(m),
                mixture_candidates(m, banning, seq, tf.constant(4), alive, 2 * beam),
                mixture_candidates(m, plain, seq, tf.constant(4), alive, 2 * beam))

    dense, got_banning, got_plain = three(mix.logits)
    np.testing.assert_array_equal(dense.numpy(), dense_distribution(mix).numpy())
    for got, constraints in ((got_banning, banning), (got_plain, plain)):
        want = mixture_candidates(mix, constraints, seq, tf.constant(4), alive, 2 * beam)
        for x, y in zip(got, want):
            np.testing.assert_array_equal(x.numpy(), y.numpy())
