"""The one switch (model.rnn_impl) and the fused kernels' refusal of options they would drop."""

import keras
import pytest

from pgn_tf import ops


@pytest.mark.parametrize("setting, gpus, expected", [
    ("auto", [], "fused"),  # CPU only: the loops measured faster there
    ("auto", ["/physical_device:GPU:0"], "keras"),  # a GPU: cuDNN's LSTM
    ("fused", ["/physical_device:GPU:0"], "fused"),
    ("keras", [], "keras"),
])
def test_auto_is_keras_exactly_where_a_gpu_is_visible(setting, gpus, expected):
    assert ops.resolve_rnn_impl(setting, gpus) == expected


def test_an_unknown_setting_is_named():
    with pytest.raises(ValueError, match="unknown model.rnn_impl 'cudnn'.*'fused'"):
        ops.resolve_rnn_impl("cudnn", [])


def test_the_choices_match_the_config():
    import typing

    from pgn_tf import config

    hint = typing.get_type_hints(config.ModelConfig)["rnn_impl"]
    assert typing.get_args(hint) == ops.RNN_IMPLS


@pytest.mark.parametrize("layer", [keras.layers.LSTMCell, keras.layers.LSTM])
def test_only_options_that_change_the_computation_are_refused(layer):
    """Initializers, regularizers and constraints act on the variables, which both paths share;
    dropout, activations, the bias and statefulness change what the layer computes."""
    ops.check_lstm_options(layer(3, kernel_initializer="zeros", kernel_regularizer="l2",
                                 recurrent_constraint="non_neg", unit_forget_bias=False,
                                 seed=4), "fine")
    for options in ({"dropout": 0.1}, {"recurrent_dropout": 0.1}, {"activation": "relu"},
                    {"recurrent_activation": "hard_sigmoid"}, {"use_bias": False}):
        with pytest.raises(ValueError, match="'the layer': model.rnn_impl='fused' does not"):
            ops.check_lstm_options(layer(3, **options), "'the layer'")
    if layer is keras.layers.LSTM:
        with pytest.raises(ValueError, match="stateful=True"):
            ops.check_lstm_options(layer(3, stateful=True), "x")
