"""Rush, Chopra & Weston (2015): the attention-based summarizer (ABS) and its ablations.

An NNLM decoder over the last C summary words (pgn_tf.layers.nnlm, eq. 1) plus one of the
paper's encoders (pgn_tf.layers.abs_encoder: bag-of-words, convolutional, attention-based).
No copying: the output vocabulary is the model's vocabulary. The decoder state is just the
window of the last C ids, which the project's beam search carries and reorders like any other
state (ABS+ features and the extractive restriction: pgn_tf.decoding.features).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from pgn_tf.layers.abs_encoder import ABSEncoder
from pgn_tf.layers.nnlm import NNLMDecoder, context_windows
from pgn_tf.models.base import SummarizationModel
from pgn_tf.ops import resolve_rnn_impl
from pgn_tf.vocab import START_ID, UNK_ID


@keras.saving.register_keras_serializable(package="pgn_tf")
class ABS(SummarizationModel):
    """Args: vocab_size V; hidden_dim H (paper: 400); emb_dim D (200); window C (5);
    encoder "bow" | "conv" | "attention"; smoothing Q (2); conv_layers L (3); conv_norm: layer
    normalisation before each convolution's tanh (not in the paper; ABSEncoder says why);
    rnn_impl: "fused", "keras" or "auto" (pgn_tf.ops; no recurrence here: the loss's gradient).

    Example:
      >>> model = ABS(vocab_size=50, hidden_dim=16, emb_dim=8, encoder="attention")
      >>> log_p = model.token_log_probs(features, model(features))   # [B, T]
    """

    pointer_gen = False

    def __init__(self, vocab_size: int, hidden_dim: int = 400, emb_dim: int = 200,
                 window: int = 5, encoder: str = "attention", smoothing: int = 2,
                 conv_layers: int = 3, conv_norm: bool = False, rnn_impl: str = "auto",
                 **kwargs):
        super().__init__(**kwargs)
        self.rnn_impl = resolve_rnn_impl(rnn_impl)
        self.vocab_size = vocab_size
        self.hidden_dim = hidden_dim
        self.emb_dim = emb_dim
        self.window = window
        self.encoder_kind = encoder
        self.smoothing = smoothing
        self.conv_layers = conv_layers
        self.conv_norm = conv_norm
        self.encoder = ABSEncoder(encoder, vocab_size, hidden_dim, emb_dim, window, smoothing,
                                  conv_layers, conv_norm, name="encoder")
        self.decoder = NNLMDecoder(vocab_size, emb_dim, hidden_dim, window, name="nnlm")
        self.encoder.build()
        self.decoder.build()
        self.built = True

    @classmethod
    def from_config_obj(cls, model_cfg, vocab_size: int) -> ABS:
        return cls(vocab_size=vocab_size, hidden_dim=model_cfg.hidden_dim,
                   emb_dim=model_cfg.emb_dim, window=model_cfg.abs_window,
                   encoder=model_cfg.abs_encoder, smoothing=model_cfg.abs_smoothing,
                   conv_layers=model_cfg.abs_conv_layers, conv_norm=model_cfg.abs_conv_norm,
                   rnn_impl=model_cfg.rnn_impl)

    def get_config(self):
        return dict(vocab_size=self.vocab_size, hidden_dim=self.hidden_dim,
                    emb_dim=self.emb_dim, window=self.window, encoder=self.encoder_kind,
                    smoothing=self.smoothing, conv_layers=self.conv_layers,
                    conv_norm=self.conv_norm, rnn_impl=self.rnn_impl, name=self.name)

    def _ids(self, ids):
        ids = tf.cast(ids, tf.int32)
        return tf.where(ids >= self.vocab_size, UNK_ID, ids)

    def encode(self, enc_ids, enc_len, enc_ext_ids=None, num_oovs=None, max_dec_steps=None):
        """enc: the encoder's per-article tensors + mask, ext_ids, max_oovs (0: no copying);
        state: {"context": int32 [B, C]}, the window, [START] at first."""
        enc_ids = self._ids(enc_ids)
        mask = tf.sequence_mask(enc_len, tf.shape(enc_ids)[1])
        enc = dict(self.encoder.precompute(enc_ids, mask), mask=mask,
                   **self.copy_inputs(enc_ids, enc_ext_ids))  # max_oovs 0: no copying
        state = {"context": tf.fill([tf.shape(enc_ids)[0], self.window], START_ID)}
        return enc, state

    def decode_step(self, ids, step, state, enc):
        """Shifts the previous token into the window; log_probs float32 [N, V]."""
        del step
        context = tf.concat([state["context"][:, 1:], self._ids(ids)[:, None]], axis=1)
        vec, attn = self.encoder({k: v for k, v in enc.items() if k in ("vector", "x_tilde",
                                                                        "x_bar")},
                                 enc["mask"], context[:, None, :])
        logits = self.decoder(context, vec[:, 0])
        n = tf.shape(ids)[0]
        return (tf.nn.log_softmax(tf.cast(logits, tf.float32)), {"context": context},
                {"attn": attn[:, 0], "p_gen": tf.ones([n])})

    def call(self, features, training=False):
        """Teacher forcing, every position at once: logits [B, T, V], attn [B, T, M]."""
        ids = self._ids(features["enc_ids"])
        mask = tf.sequence_mask(features["enc_len"], tf.shape(ids)[1])
        context = context_windows(self._ids(features["dec_input"]), self.window, START_ID)
        vec, attn = self.encoder(self.encoder.precompute(ids, mask), mask, context)
        return {"logits": self.decoder(context, vec), "attn": attn}
