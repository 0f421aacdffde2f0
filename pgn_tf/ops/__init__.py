"""Kernels written for speed, kept apart from the plain Keras / autodiff path each replaces (which
stays, as the reference they are tested against), chosen for a whole model by one value,
`model.rnn_impl`:

  "fused"  the encoder's LSTM as one loop over both directions with its backward pass written
           out (`lstm_recurrence`), the decoder's loop with its weight gradients summed after
           it (`summed_after_loop`), the loss's log-softmax gradient (`log_softmax_at`) and the
           pointer's copy scatter as a weighted bincount with a registered gradient
           (`bincount_grad`). Measured faster on CPUs (docs/performance.md); each piece is
           tested against autodiff alone, and the assembled models' gradients against the
           "keras" path (tests/models/test_model_gradients.py).
  "keras"  the Keras layers themselves (`keras.layers.Bidirectional(LSTM)`, `LSTMCell`), so
           cuDNN runs the encoder on a GPU and every option of those layers is honoured, and
           autodiff for every gradient.
  "auto"   "keras" where a GPU is visible, "fused" elsewhere (`resolve_rnn_impl`).

Both read the same variables, so a checkpoint written with one restores into the other. The
fused kernels read only the Keras layers' weights: `check_lstm_options` refuses, with one error
naming the option, a layer option they would silently drop (a dropout, another activation).
Nothing here imports pgn_tf.layers or pgn_tf.models (they import this).
"""

from __future__ import annotations

from collections.abc import Sequence

RNN_IMPLS = ("auto", "fused", "keras")

# What the fused kernels implement of a Keras LSTM / LSTMCell, by config key: anything else
# changes the layer's computation in a way they would drop.
_FUSED_LSTM = {"activation": "tanh", "recurrent_activation": "sigmoid", "use_bias": True,
               "dropout": 0.0, "recurrent_dropout": 0.0, "stateful": False,
               "activity_regularizer": None}


def resolve_rnn_impl(setting: str, gpus: Sequence | None = None) -> str:
    """"fused" or "keras" for `model.rnn_impl` = setting; "auto" is "keras" when `gpus` (the
    visible GPUs; default: `tf.config.list_physical_devices("GPU")`) is not empty, so a GPU
    runs cuDNN's LSTM, else "fused"."""
    if setting not in RNN_IMPLS:
        raise ValueError(f"unknown model.rnn_impl '{setting}' "
                         f"({', '.join(repr(s) for s in RNN_IMPLS)})")
    if setting != "auto":
        return setting
    if gpus is None:
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
    return "keras" if gpus else "fused"


def check_lstm_options(layer, where: str) -> None:
    """Raises ValueError if the Keras LSTM or LSTMCell `layer` has an option the fused kernels
    do not implement (they read its weights only). where: what the layer is, for the message."""
    config = layer.get_config()
    for key, implemented in _FUSED_LSTM.items():
        value = config.get(key, implemented)
        if value != implemented:
            raise ValueError(
                f"{where}: model.rnn_impl='fused' does not implement the LSTM option "
                f"{key}={value!r} (only {key}={implemented!r}); set model.rnn_impl=keras, "
                "which runs the Keras layer itself and honours every option")
