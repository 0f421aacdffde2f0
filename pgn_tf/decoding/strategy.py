"""A search as a decoding strategy run by one driver (OpenNMT-tf `DecodingStrategy` and
`dynamic_decode`): the strategy owns a typed loop state and says how to start it, advance it by
one token and read the result from it; `dynamic_decode` owns the tf.while_loop.
"""

from __future__ import annotations

import abc

import tensorflow as tf


class DecodingStrategy(abc.ABC):
    """initialize -> state; step(step, state) -> state while running(step, state);
    finalize(state) -> outputs. The state is any nest of tensors (a NamedTuple reads best)."""

    # Whether step 0 runs apart from the loop, by `first_step` (a strategy whose first step
    # can do less work, as beam search's K beams that start as copies of one).
    first_step_apart = False

    @abc.abstractmethod
    def initialize(self, model_state):
        """The state before step 0, around step_fn's initial state `model_state`."""

    @abc.abstractmethod
    def running(self, step: tf.Tensor, state) -> tf.Tensor:
        """bool []: whether to run step `step`."""

    @abc.abstractmethod
    def step(self, step: tf.Tensor, state):
        """The state after step `step` (int32 []), one token further."""

    def first_step(self, step: tf.Tensor, state):
        """Step 0 when `first_step_apart`; the same as `step` unless a strategy says otherwise."""
        return self.step(step, state)

    def shape_invariants(self, state):
        """The loop's shape invariants for `state` (default: every shape stays as it starts)."""
        return tf.nest.map_structure(lambda t: t.shape, state)

    @abc.abstractmethod
    def finalize(self, state):
        """The outputs, from the state after the last step."""


def dynamic_decode(strategy: DecodingStrategy, model_state):
    """Runs `strategy` to its end in one tf.while_loop and returns its outputs.

    Every step's state is held to the strategy's shape invariants (tf.ensure_shape): a gather
    by dynamic indices loses static shapes, which a beam size that is a graph constant would
    then not match.
    """
    state = strategy.initialize(model_state)
    invariants = strategy.shape_invariants(state)

    def body(step, state):
        state = strategy.step(step, state)
        return step + 1, tf.nest.map_structure(tf.ensure_shape, state, invariants)

    step = tf.constant(0)
    if strategy.first_step_apart:  # not where the loop would do nothing (no article, no step)
        # smart_cond: no cond where the trace can work the predicate out (a batch of known size:
        # it folds constant subgraphs, which tf.get_static_value alone does not), for a cond
        # that grappler proves but cannot prune (its branch reads the model's variables) has
        # its loop optimizer log a C++ warning. (TensorFlow's own, under tf.__internal__, as
        # Keras uses it; tests/test_quickstart_log.py fails if the warning comes back.)
        step, state = tf.__internal__.smart_cond.smart_cond(
            strategy.running(step, state), lambda: (step + 1, strategy.first_step(step, state)),
            lambda: (step, state))
    state = tf.nest.map_structure(tf.ensure_shape, state, invariants)
    _, state = tf.while_loop(strategy.running, body, (step, state),
                             shape_invariants=(step.shape, invariants))
    return strategy.finalize(state)
