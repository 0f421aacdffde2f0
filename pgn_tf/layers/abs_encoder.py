"""The three encoders of Rush, Chopra & Weston (2015) section 3.2, each returning the H-vector
enc(x, y_c) that the NNLM decoder adds to its output (eq. 1).

    bag-of-words   enc_1 = p^T x~,  p = [1/M, ..., 1/M],  x~ = [F x_1, ..., F x_M]    (2-3)
    convolutional  enc_2 = max_i x~^L_i                                             (5)
                   x~^l_i = tanh(max(x-^l_{2i-1}, x-^l_{2i}))    2-element max pooling  (6)
                   x-^l_i = Q^l x~^{l-1}_{[i-Q, ..., i+Q]}       temporal convolution   (7)
                   (conv_norm: x-^l_i layer-normalised over its H channels before (6); not in
                   the paper, see `conv_norm` below)
    attention      enc_3 = p^T x-                                                    (8)
                   p ∝ exp(x~ P y~'_c),  y~'_c = [G y_{i-C+1}, ..., G y_i]
                   x-_i = sum_{q=i-Q}^{i+Q} x~_q / Q             local smoothing (as published, / Q)

Interface: `precompute(ids, mask)` runs once per article (dict of tensors, batch first);
`call(pre, mask, context)` with context int32 [B, T, C] returns (enc [B, T, H], attn
[B, T, M]; uniform for bag-of-words, zero for the convolutional encoder, which has none).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from pgn_tf.layers.attention import masked_softmax

ENCODERS = ("bow", "conv", "attention")


class ABSEncoder(keras.layers.Layer):
    """Args:
      kind: "bow", "conv" or "attention"; vocab_size V; hidden_dim H (input embeddings F are H
      wide); emb_dim D and window C (the attention's context embedding G); smoothing Q (conv
      width 2Q+1 and the attention's smoothing window); conv_layers L; conv_norm: layer
      normalisation (Ba et al. 2016) of each convolution's output before the pooling and tanh.
      Without it the trained convolutions grow a low-rank component that amplifies what every
      position shares (on the Debian corpus the third layer's inputs to the tanh grew far past
      its unit range: docs/results/quality.md "Rush et al.'s ABS, re-run"), the final max sits at +-1
      for every article and no gradient reaches the convolutions again; normalised, a tanh
      input has unit scale at each position (times a learned gain).

    Example:
      >>> enc = ABSEncoder("attention", 50, 8, 4, 5); enc.build(None)
      >>> pre = enc.precompute(ids, mask)
      >>> vec, attn = enc(pre, mask, context)   # context int32 [B, T, 5]
    """

    def __init__(self, kind: str, vocab_size: int, hidden_dim: int, emb_dim: int, window: int,
                 smoothing: int = 2, conv_layers: int = 3, conv_norm: bool = False, **kwargs):
        super().__init__(**kwargs)
        if kind not in ENCODERS:
            raise ValueError(f"unknown model.abs_encoder '{kind}' ({', '.join(ENCODERS)})")
        self.kind = kind
        self.vocab_size = vocab_size
        self.hidden_dim = hidden_dim
        self.emb_dim = emb_dim
        self.window = window
        self.smoothing = smoothing
        self.conv_layers = conv_layers
        self.conv_norm = conv_norm and kind == "conv"
        self.f = keras.layers.Embedding(vocab_size, hidden_dim, name="F")
        if kind == "conv":
            # One attribute a layer: a Python list of layers is invisible to tf.train.Checkpoint
            # (Keras 3 wraps it in a list type TF's tracking does not walk), so a checkpoint
            # restored into the model alone would leave the convolutions at their random
            # initialisation (tests/models/test_checkpoint_restore.py checks every model).
            for i in range(conv_layers):
                setattr(self, f"q{i + 1}", keras.layers.Conv1D(
                    hidden_dim, 2 * smoothing + 1, padding="same", name=f"Q{i + 1}"))
                if self.conv_norm:
                    setattr(self, f"n{i + 1}", keras.layers.LayerNormalization(
                        epsilon=1e-5, name=f"N{i + 1}"))
        if kind == "attention":
            self.g = keras.layers.Embedding(vocab_size, emb_dim, name="G")
            self.p = keras.layers.Dense(hidden_dim, use_bias=False, name="P")

    @property
    def convs(self) -> list:
        """The convolutional encoder's layers Q^1..Q^L (eq. 7)."""
        return [getattr(self, f"q{i + 1}") for i in range(self.conv_layers)]

    @property
    def norms(self) -> list:
        """The layer normalisations after Q^1..Q^L (conv_norm), else none."""
        return [getattr(self, f"n{i + 1}") for i in range(self.conv_layers)] \
            if self.conv_norm else []

    def build(self, input_shape=None):
        self.f.build((None,))
        if self.kind == "conv":
            for conv in self.convs:
                conv.build((None, None, self.hidden_dim))
            for norm in self.norms:
                norm.build((None, None, self.hidden_dim))
        if self.kind == "attention":
            self.g.build((None,))
            self.p.build((None, self.window * self.emb_dim))
        self.built = True

    def precompute(self, ids, mask):
        """Per-article tensors: bow/conv {"vector": [B, H]}; attention {"x_tilde", "x_bar":
        [B, M, H]}."""
        m = tf.cast(mask, self.compute_dtype)[:, :, None]
        x = self.f(ids) * m  # x~ [B, M, H], zero at padding
        if self.kind == "bow":
            n = tf.reduce_sum(m, axis=1)
            return {"vector": tf.math.divide_no_nan(tf.reduce_sum(x, axis=1), n)}  # (2-3)
        if self.kind == "conv":
            return {"vector": self._tdnn(x, mask)}
        q = self.smoothing
        padded = tf.pad(x, [[0, 0], [q + 1, q], [0, 0]])
        cs = tf.cumsum(padded, axis=1)  # window sums from a prefix sum
        x_bar = (cs[:, 2 * q + 1:] - cs[:, : -2 * q - 1]) / float(q)  # [B, M, H]
        return {"x_tilde": x, "x_bar": x_bar * m}

    def _tdnn(self, x, mask):
        """Eq. 5-7; padding is excluded from every max, an empty article gives zeros."""
        neg = tf.constant(-1e9, x.dtype)
        for conv, norm in zip(self.convs, self.norms or [None] * self.conv_layers):
            y = conv(x)  # (7)
            if norm is not None:
                y = norm(y)
            y = tf.where(mask[:, :, None], y, neg)
            y = tf.nn.max_pool1d(y, 2, 2, padding="SAME")  # (6), pairs
            mask = tf.cast(tf.nn.max_pool1d(tf.cast(mask, tf.float32)[:, :, None], 2, 2,
                                            padding="SAME")[:, :, 0], tf.bool)
            x = tf.where(mask[:, :, None], tf.tanh(y), tf.zeros_like(y))
        best = tf.reduce_max(tf.where(mask[:, :, None], x, neg), axis=1)  # (5)
        return tf.where(tf.reduce_any(mask, axis=1)[:, None], best, tf.zeros_like(best))

    def call(self, pre, mask, context):
        b, t = tf.shape(context)[0], tf.shape(context)[1]
        m = tf.shape(mask)[1]
        if self.kind != "attention":
            vec = tf.broadcast_to(pre["vector"][:, None, :], [b, t, self.hidden_dim])
            if self.kind == "bow":
                uniform = tf.cast(mask, tf.float32) / tf.maximum(
                    tf.reduce_sum(tf.cast(mask, tf.float32), axis=1, keepdims=True), 1.0)
                return vec, tf.broadcast_to(uniform[:, None, :], [b, t, m])
            return vec, tf.zeros([b, t, m])
        g = self.g(context)  # [B, T, C, D]
        y_c = tf.reshape(g, [b, t, self.window * self.emb_dim])  # y~'_c
        scores = tf.einsum("bmh,bth->btm", pre["x_tilde"], self.p(y_c))  # x~ P y~'_c
        valid = tf.broadcast_to(mask[:, None, :], tf.shape(scores))
        attn = masked_softmax(tf.cast(scores, tf.float32), valid)  # (8), p
        enc = tf.einsum("btm,bmh->bth", tf.cast(attn, pre["x_bar"].dtype), pre["x_bar"])
        return enc, attn

    def get_config(self):
        config = super().get_config()
        config.update(kind=self.kind, vocab_size=self.vocab_size, hidden_dim=self.hidden_dim,
                      emb_dim=self.emb_dim, window=self.window, smoothing=self.smoothing,
                      conv_layers=self.conv_layers, conv_norm=self.conv_norm)
        return config
