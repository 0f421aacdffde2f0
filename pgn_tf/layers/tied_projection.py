"""The token-generation layer of Paulus et al. (2017) with the weight sharing of section 2.4:

    p(y_t | u_t = 0) = softmax(W_out [h_t^d ; c_t^e ; c_t^d] + b_out)       (9)
    W_out = tanh(W_emb W_proj)                                              (13)

W_emb is the model's (shared) embedding matrix; W_proj maps the decoder features into the
embedding space. W_out is computed once per batch (`kernel()`), not once per step.
"""

from __future__ import annotations

import keras
import tensorflow as tf


class TiedOutputProjection(keras.layers.Layer):
    """Args: embedding (a built keras.layers.Embedding [V, E]); input_dim: size of the decoder
    features. Call: features float [..., input_dim], kernel from kernel() (optional) ->
    logits [..., V].

    Example:
      >>> emb = keras.layers.Embedding(10, 4); emb.build((None,))
      >>> proj = TiedOutputProjection(emb, 6); proj.build(None)
      >>> logits = proj(tf.zeros([2, 6]))   # [2, 10]
    """

    def __init__(self, embedding, input_dim: int, **kwargs):
        super().__init__(**kwargs)
        self.embedding = embedding
        self.input_dim = input_dim

    def build(self, input_shape=None):
        v, e = self.embedding.input_dim, self.embedding.output_dim
        self.w_proj = self.add_weight(shape=(e, self.input_dim), initializer="glorot_uniform",
                                      name="w_proj")
        self.b_out = self.add_weight(shape=(v,), initializer="zeros", name="b_out")
        self.built = True

    def kernel(self):
        """W_out^T = tanh(W_emb W_proj)^T: [input_dim, V]."""
        emb = tf.cast(self.embedding.embeddings, self.compute_dtype)
        return tf.transpose(tf.tanh(tf.matmul(emb, tf.cast(self.w_proj, self.compute_dtype))))

    def call(self, features, kernel=None):
        kernel = self.kernel() if kernel is None else kernel
        return tf.matmul(features, kernel) + tf.cast(self.b_out, self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(input_dim=self.input_dim)
        return config
