"""What every summarization model shares: the extended-vocab embedding, `token_log_probs`, and
`model.fit` support driven by an objective.

A subclass provides `call(features, training)` (teacher forcing: logits [B, T, V], attn
[B, T, L], and p_gen_logit [B, T] for pointer models), `encode()` and `decode_step()` (the one
interface every search is written against, docs/design.md). Losses live in pgn_tf.objectives,
written once for every model:

    model.compile(optimizer=keras.optimizers.Adam(1e-3), objective=objectives.build(cfg))
    model.fit(dataset.map(dataset_lib.model_features), ...)
"""

from __future__ import annotations

import keras
import tensorflow as tf

from pgn_tf.layers.pointer import (
    SHORTLIST_KEY,
    Mixture,
    copy_slots,
    target_log_prob,
    vocab_width,
)
from pgn_tf.vocab import UNK_ID

SHARED = "shared"  # an `enc` key whose tensors are per batch, not per hypothesis (never tiled)


class SummarizationModel(keras.Model):
    """Base class of the models. `compile(objective=...)` sets the loss `fit`/`evaluate` use.
    A subclass sets `rnn_impl` ("fused" or "keras", pgn_tf.ops.resolve_rnn_impl): the
    written-out loops and gradients, or the Keras layers and autodiff."""

    objective = None
    rnn_impl = "fused"

    def embed_ids(self, ids):
        """Extended-vocab ids -> embeddings; copied OOVs (id >= V) are fed back as [UNK]."""
        ids = tf.cast(ids, tf.int32)
        return self.embedding(tf.where(ids >= self.vocab_size, UNK_ID, ids))

    @staticmethod
    def mixture(logits, p_gen, attn, enc, vocab_scale=None) -> Mixture:
        """eq. 9's parts for the beam search (layers.pointer.Mixture): P_vocab's logits
        float32 [N, V], p_gen [N], attn [N, L], with the source's copy slots from `enc` (the
        search's inputs compute them once an article: "copy_slot", "copy_first"), or here.
        With a shortlist in `enc` (pgn_tf.decoding.shortlist) the logits are its [N, C]
        columns' and the Mixture carries its id maps; vocab_scale [N] (or None) scales P_vocab
        (a shortlist's estimated share of the full softmax, Mixture)."""
        if "copy_slot" in enc:
            slot, first = enc["copy_slot"], enc["copy_first"]
        else:
            slot, first = copy_slots(enc["ext_ids"], enc["mask"])
        short = enc.get(SHARED, {}).get(SHORTLIST_KEY)
        columns = position = None
        vocab = vocab_width(logits)
        if short is not None:
            columns, position = short["columns"], short["position"]
            vocab = vocab_width(position[None, :])
        return Mixture(logits=logits, p_gen=p_gen, attn=tf.cast(attn, tf.float32),
                       ext_ids=enc["ext_ids"], slot=slot, first=first,
                       width=vocab + enc["max_oovs"], columns=columns, position=position,
                       vocab_scale=vocab_scale)

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
        fused = self.rnn_impl == "fused"
        if not self.pointer_gen:
            return target_log_prob(outputs["logits"], target, fused=fused)
        return target_log_prob(outputs["logits"], target, outputs["attn"],
                               outputs["p_gen_logit"], tf.cast(features["enc_ext_ids"], tf.int32),
                               fused=fused)

    # -- model.fit ----------------------------------------------------------------------------

    def compile(self, optimizer="adam", objective=None, **kwargs):
        """Keras compile plus the objective (pgn_tf.objectives) that fit and evaluate minimise:
        a callable (model, batch, training) -> dict of per-example terms with "total"."""
        super().compile(optimizer=optimizer, **kwargs)
        self.objective = objective
        names = objective.term_names(self) if objective is not None else []
        self._trackers = {n: keras.metrics.Mean(name=n)
                          for n in ["loss" if n == "total" else n for n in names]}

    def _terms(self, data, training):
        if self.objective is None:
            raise ValueError("compile the model with an objective first: "
                             "model.compile(optimizer, objective=pgn_tf.objectives.build(cfg))")
        features = data[0] if isinstance(data, tuple) else data
        return self.objective(self, features, training=training)

    def train_step(self, data):
        """One `fit` step: the per-replica mean of the objective's "total", divided by the
        number of replicas (tf.nn.compute_average_loss), because Keras sums the replicas'
        gradients; so a step on N devices equals the same global batch on one."""
        with tf.GradientTape() as tape:
            terms = self._terms(data, training=True)
            loss = tf.nn.compute_average_loss(terms["total"])
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return self._report(terms)

    def test_step(self, data):
        return self._report(self._terms(data, training=False))

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
        return list(getattr(self, "_trackers", {}).values())

    @classmethod
    def from_config(cls, config):
        return cls(**config)
