"""What every summarization model shares: `model.fit` support and the extended-vocab embedding.

A subclass provides `call(features, training)` (teacher forcing), `loss_terms(features,
outputs)` (per-example losses, "total" among them, plus "p_gen_mean"), `encode()` and
`decode_step()` (the search interface, STYLE.md habit 5).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from pgn_tf.layers.pointer import target_log_prob
from pgn_tf.vocab import UNK_ID


class SummarizationModel(keras.Model):
    """Base class; `metric_names` are the Mean trackers model.fit reports."""

    def init_trackers(self, metric_names):
        self._trackers = {n: keras.metrics.Mean(name=n) for n in metric_names}

    def embed_ids(self, ids):
        """Extended-vocab ids -> embeddings; copied OOVs (id >= V) are fed back as [UNK]."""
        ids = tf.cast(ids, tf.int32)
        return self.embedding(tf.where(ids >= self.vocab_size, UNK_ID, ids))

    @staticmethod
    def copy_inputs(enc_ids, enc_ext_ids=None, num_oovs=None) -> dict:
        """The encoder-side entries every model's `enc` holds for the search and the pointer:
        ext_ids int32 [B, L] (extended-vocab ids) and max_oovs int32 scalar (OOV slots)."""
        ext = enc_ids if enc_ext_ids is None else enc_ext_ids
        max_oovs = (tf.constant(0, tf.int32) if num_oovs is None
                    else tf.reduce_max(tf.concat([tf.cast(num_oovs, tf.int32), [0]], 0)))
        return {"ext_ids": tf.cast(ext, tf.int32), "max_oovs": max_oovs}

    @staticmethod
    def batch_major(ta: tf.TensorArray) -> tf.Tensor:
        """A TensorArray written once per decoder step -> [batch, steps, ...]."""
        x = ta.stack()
        return tf.transpose(x, [1, 0] + list(range(2, len(x.shape))))

    def token_log_probs(self, features, outputs):
        """log p(y*_t) of every target step, [B, T]: the pointer mixture's (See et al. eq. 9,
        Paulus et al. eq. 12) when `self.pointer_gen`, else the vocabulary softmax's."""
        target = tf.cast(features["target"], tf.int32)
        if not self.pointer_gen:
            return target_log_prob(outputs["logits"], target)
        return target_log_prob(outputs["logits"], target, outputs["attn"],
                               outputs["p_gen_logit"], tf.cast(features["enc_ext_ids"], tf.int32))

    def train_step(self, data):
        """`model.fit` path: the same loss as pgn_tf.train's custom loop (clipping is the
        optimizer's global_clipnorm there)."""
        features = data[0] if isinstance(data, tuple) else data
        with tf.GradientTape() as tape:
            terms = self.loss_terms(features, self(features, training=True))
            loss = tf.reduce_mean(terms["total"])
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return self._report(terms)

    def test_step(self, data):
        features = data[0] if isinstance(data, tuple) else data
        return self._report(self.loss_terms(features, self(features, training=False)))

    def _report(self, terms):
        logs = {}
        for key, value in terms.items():
            name = "loss" if key == "total" else key
            if name in self._trackers:
                self._trackers[name].update_state(tf.reduce_mean(value))
                logs[name] = self._trackers[name].result()
        return logs

    @property
    def metrics(self):
        return list(self._trackers.values())
