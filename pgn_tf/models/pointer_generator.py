"""See et al. (2017): the attentional seq2seq baseline, the pointer-generator and coverage.

One class, switched by config: `pointer_gen=False` is the baseline (section 2.1),
`pointer_gen=True` adds eq. 8-9 (section 2.2), `coverage=True` adds eq. 10-13 (section 2.3).
With the paper's sizes (H=256, E=128, V=50k) the parameter counts are exactly the paper's:
21,499,600 for the baseline, +1,153 for the pointer, +512 for coverage. `enc_hidden_dim`
sets the encoder's units per direction apart from the decoder's H (OpenNMT-py's `brnn` splits
its size over the two directions: 2 x 128 with a 256 decoder); the context, the attention's
score space and W_h follow the encoder's width 2 x enc_hidden_dim.

Interface for the search (the one every search is written against, docs/design.md):
    enc, state = model.encode(enc_ids, enc_len, enc_ext_ids, num_oovs)
    log_probs, state, extras = model.decode_step(ids, step, state, enc)   # over V + max_oovs
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from pgn_tf.layers.decoder import AttentionDecoderCell
from pgn_tf.layers.encoder import BiLSTMEncoder
from pgn_tf.layers.pointer import (
    SHORTLIST_KEY,
    final_distribution,
    mix_copy,
    shortlist_to_vocab,
    vocab_log_prob,
)
from pgn_tf.models.base import SHARED, SummarizationModel
from pgn_tf.ops import resolve_rnn_impl

_FLOOR = 1e-30  # the smallest probability a step's log takes (no log 0)
_LOG_FLOOR = math.log(_FLOOR)


@keras.saving.register_keras_serializable(package="pgn_tf")
class PointerGenerator(SummarizationModel):
    """Args:
      vocab_size: V (with the 4 special tokens); hidden_dim: H (the decoder, and the encoder
      unless enc_hidden_dim > 0: its units per direction); emb_dim: E;
      pointer_gen: eq. 8-9 on/off; coverage: eq. 10-13 on/off; cov_loss_wt: lambda (eq. 13);
      init_mag: uniform init of the LSTMs; init_std: truncated-normal init of the embedding
      and vocabulary projection (See et al.'s code: 0.02 and 1e-4); emb_init_std: the
      embedding's own stddev if > 0; rnn_impl: "fused", "keras" or "auto" (pgn_tf.ops: the
      written-out loops and gradients, or the Keras layers and autodiff; the same variables).

    Example:
      >>> model = PointerGenerator(vocab_size=50, hidden_dim=8, emb_dim=4)
      >>> out = model(features)             # teacher forcing
      >>> log_p = model.token_log_probs(features, out)   # [B, T]; losses: pgn_tf.objectives
    """

    def __init__(
        self,
        vocab_size: int,
        hidden_dim: int = 256,
        emb_dim: int = 128,
        pointer_gen: bool = True,
        coverage: bool = False,
        cov_loss_wt: float = 1.0,
        init_mag: float = 0.02,
        init_std: float = 1e-4,
        emb_init_std: float = 0.0,
        dropout: float = 0.0,
        enc_hidden_dim: int = 0,
        rnn_impl: str = "auto",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.rnn_impl = resolve_rnn_impl(rnn_impl)
        self.vocab_size = vocab_size
        self.hidden_dim = hidden_dim
        self.enc_hidden_dim = enc_hidden_dim
        enc_dim = 2 * (enc_hidden_dim or hidden_dim)  # D: encoder outputs, context
        self.enc_dim = enc_dim
        self.emb_dim = emb_dim
        self.pointer_gen = pointer_gen
        self.coverage = coverage
        self.cov_loss_wt = cov_loss_wt
        self.init_mag = init_mag
        self.init_std = init_std
        self.emb_init_std = emb_init_std
        self.dropout = dropout
        # Not in See et al.: on a small corpus the model overfits within an hour
        # (docs/results/quality.md); dropout on the embeddings and on o_t, in teacher-forced training only.
        self.drop = keras.layers.Dropout(dropout, seed=5, name="dropout")
        normal = keras.initializers.TruncatedNormal(stddev=init_std, seed=3)
        emb_init = keras.initializers.TruncatedNormal(stddev=emb_init_std or init_std, seed=3)
        # One embedding for article and summary words, as in See et al.'s code.
        self.embedding = keras.layers.Embedding(
            vocab_size, emb_dim, embeddings_initializer=emb_init, name="embedding"
        )
        self.encoder = BiLSTMEncoder(enc_dim // 2, init_mag, state_dim=hidden_dim,
                                     rnn_impl=self.rnn_impl, name="encoder")
        self.cell = AttentionDecoderCell(
            hidden_dim, emb_dim, pointer_gen, coverage, init_mag, enc_dim,
            rnn_impl=self.rnn_impl, name="decoder"
        )
        self.vocab_proj = keras.layers.Dense(
            vocab_size, kernel_initializer=normal, bias_initializer=normal, name="vocab_proj"
        )
        # Everything is built here, so no variable is ever created inside a loop or a replica.
        self.embedding.build((None,))
        self.encoder.build((None, None, emb_dim))
        self.cell.build()
        self.vocab_proj.build((None, hidden_dim))
        self.built = True

    @classmethod
    def from_config_obj(cls, model_cfg, vocab_size: int) -> PointerGenerator:
        return cls(
            vocab_size=vocab_size,
            hidden_dim=model_cfg.hidden_dim,
            emb_dim=model_cfg.emb_dim,
            pointer_gen=model_cfg.pointer_gen,
            coverage=model_cfg.coverage,
            cov_loss_wt=model_cfg.cov_loss_wt,
            init_mag=model_cfg.rand_unif_init_mag,
            init_std=model_cfg.trunc_norm_init_std,
            emb_init_std=model_cfg.emb_init_std,
            dropout=model_cfg.dropout,
            enc_hidden_dim=model_cfg.enc_hidden_dim,
            rnn_impl=model_cfg.rnn_impl,
        )

    # The encoder outputs a search may hold once an article for the rows of its K hypotheses
    # (decoding.beam_state.ONCE; decode_step's per_article): the largest tensors of a beam
    # search, [B, L, D] each.
    held_once = ("features", "outputs")

    def get_config(self):
        return dict(
            vocab_size=self.vocab_size,
            hidden_dim=self.hidden_dim,
            emb_dim=self.emb_dim,
            pointer_gen=self.pointer_gen,
            coverage=self.coverage,
            cov_loss_wt=self.cov_loss_wt,
            init_mag=self.init_mag,
            init_std=self.init_std,
            emb_init_std=self.emb_init_std,
            dropout=self.dropout,
            enc_hidden_dim=self.enc_hidden_dim,
            rnn_impl=self.rnn_impl,
            name=self.name,
        )

    # -- encoder ---------------------------------------------------------------------------

    def encode(self, enc_ids, enc_len, enc_ext_ids=None, num_oovs=None, max_dec_steps=None,
               training=False):
        """Runs the encoder once per article (max_dec_steps is unused: the state does not
        depend on the summary length).

        Returns:
          enc: dict(outputs [B, L, D], features [B, L, D], mask bool [B, L],
                    ext_ids int32 [B, L], max_oovs int32 scalar)
          state: the decoder's initial state (AttentionDecoderCell).
        """
        enc_ids = tf.cast(enc_ids, tf.int32)
        mask = tf.sequence_mask(enc_len, tf.shape(enc_ids)[1])
        outputs, h, c = self.encoder(self.drop(self.embedding(enc_ids), training=training), mask)
        b = tf.shape(enc_ids)[0]
        enc = {
            "outputs": outputs,
            "features": self.cell.attention.precompute(outputs),
            "mask": mask,
            **self.copy_inputs(enc_ids, enc_ext_ids, num_oovs),
        }
        state = {
            "h": h,
            "c": c,
            "context": tf.zeros([b, self.enc_dim], outputs.dtype),
            "coverage": tf.zeros(tf.shape(mask), outputs.dtype),
        }
        return enc, state

    # -- one decoder step (search interface) --------------------------------------------------

    def decode_step(self, ids, step, state, enc, mixture: bool = False,
                    per_article: bool = False):
        """ids: int32 [N] previous tokens -> log_probs float32 [N, V (+ max_oovs)], new state,
        extras dict(attn [N, L], p_gen [N]). With mixture (pointer models) the distribution
        comes as its parts, a layers.pointer.Mixture, for the beam search to score only
        the tokens that can win. per_article: enc's `held_once` tensors hold each article
        once for its K consecutive rows (AttentionDecoderCell.call). `step` is unused here
        (kept for the interface). A shortlist in enc[SHARED] (decode.shortlist,
        pgn_tf.decoding.shortlist) runs the vocabulary layer over its C columns only, with the
        kernel and bias `shortlist_projection` gathered once a batch: the logits are [N, C],
        and a dense distribution gives every word outside the shortlist probability 0. With
        the shortlist's tail sample (decode.shortlist_tail) P_vocab over the candidates is
        scaled by Z_C / (Z_C + Z_rest), the estimated share of the full softmax they hold
        (the generation mass outside C is dropped: no word there is a candidate)."""
        del step
        output, state, extras = self.cell(self.embed_ids(ids), state, enc,
                                          per_article=per_article)
        short = enc.get(SHARED, {}).get(SHORTLIST_KEY)
        if short is None:
            logits = tf.cast(self.vocab_proj(output), tf.float32)  # [N, V]
        else:
            logits = tf.cast(tf.matmul(output, short["kernel"]) + short["bias"],
                             tf.float32)  # [N, C]
        p_gen = tf.sigmoid(tf.cast(extras["p_gen_logit"], tf.float32))
        extras = {"attn": extras["attn"], "p_gen": p_gen}
        log_kept = None  # log Z_C / (Z_C + Z_rest), [N]
        if short is not None and "tail_kernel" in short:
            tail = tf.cast(tf.matmul(output, short["tail_kernel"]) + short["tail_bias"],
                           tf.float32)  # [N, m]
            log_rest = tf.reduce_logsumexp(tail, -1) + short["tail_log_weight"]
            log_kept = -tf.nn.softplus(log_rest - tf.reduce_logsumexp(logits, -1))
        if not self.pointer_gen:
            log_probs = tf.nn.log_softmax(logits)
            if log_kept is not None:
                log_probs += log_kept[:, None]
            if short is not None:  # log 0 floored as the pointer's distribution is
                log_probs = shortlist_to_vocab(log_probs, short["position"], _LOG_FLOOR)
            return log_probs, state, extras
        kept = None if log_kept is None else tf.exp(log_kept)
        if mixture:
            return (self.mixture(logits, p_gen, extras["attn"], enc, vocab_scale=kept), state,
                    extras)
        vocab_dist = tf.nn.softmax(logits)
        if kept is not None:
            vocab_dist *= kept[:, None]
        if short is not None:
            vocab_dist = shortlist_to_vocab(vocab_dist, short["position"])  # [N, V]
        probs = final_distribution(
            vocab_dist,
            tf.cast(extras["attn"], tf.float32),
            p_gen[:, None],
            enc["ext_ids"],
            enc["max_oovs"],
            fused=self.rnn_impl == "fused",
        )  # [N, V + max_oovs]
        return tf.math.log(tf.maximum(probs, _FLOOR)), state, extras

    def shortlist_projection(self, columns):
        """The vocabulary layer's kernel [H, C] and bias [C] at the vocabulary ids `columns`
        int32 [C] (a batch's shortlist, pgn_tf.decoding.shortlist), in its compute dtype:
        gathered once for a whole search, not once a step."""
        dtype = self.vocab_proj.compute_dtype
        return (tf.cast(tf.gather(self.vocab_proj.kernel, columns, axis=1), dtype),
                tf.cast(tf.gather(self.vocab_proj.bias, columns), dtype))

    # -- teacher forcing ------------------------------------------------------------------------

    def call(self, features, training=False):
        """Teacher-forced pass.

        Only what feeds the recurrence runs inside the loop over steps (AttentionDecoderCell
        `step`); the embedding half of the decoder input before it, the contexts, o_t and p_gen
        after it, each as one matmul over all steps.

        Returns dict: output float [B, T, H] (o_t, after dropout: the vocabulary layer's
        input); logits float [B, T, V]; attn, coverage float [B, T, L]; p_gen_logit [B, T].
        The loss reads `output` through `token_log_probs`, which runs the vocabulary layer on
        the real target positions only; `logits` covers every position for inspection, and a
        compiled step that does not read it never computes it (unused ops are pruned).
        """
        enc, state = self.encode(
            features["enc_ids"], features["enc_len"], features.get("enc_ext_ids"),
            training=training,
        )
        dec_emb = self.drop(self.embed_ids(features["dec_input"]), training=training)  # [B, T, E]
        x_part = self.cell.embed_inputs(tf.transpose(dec_emb, [1, 0, 2]))  # [T, B, E]
        steps, batch = tf.shape(x_part)[0], tf.shape(x_part)[1]
        enc_fed = self.cell.feed_inputs(enc["outputs"])  # [B, L, E], once for all steps
        # rnn_impl "fused": the feed's and the LSTM's gradients summed after the loop
        # (pgn_tf.ops.summed_after_loop); "keras": None, autodiff of the loop
        summed = self.cell.loop_gradients(enc_fed, steps, batch)
        dtype = enc["outputs"].dtype
        keys = ("h", "c", "x", "attn", "coverage")
        arrays = {k: tf.TensorArray(dtype, size=steps) for k in keys}
        inputs = tf.TensorArray(dtype, size=steps).unstack(x_part)
        if summed is not None:
            feed, gates = summed
            enc_fed = feed.enc_fed  # its gradient stopped: FeedGradient forms it
            probes = tf.TensorArray(dtype, size=steps).unstack(feed.probes)
            gate_probes = tf.TensorArray(dtype, size=steps).unstack(gates.probes)
        state = {"h": state["h"], "c": state["c"], "coverage": state["coverage"],
                 "fed": tf.zeros([batch, self.emb_dim], dtype)}  # h*_0 = 0

        def body(t, state, arrays):
            if summed is None:
                state, extras = self.cell.step(inputs.read(t), state, enc, enc_fed)
            else:
                state, extras = self.cell.step(inputs.read(t), state, enc, enc_fed,
                                               probe=probes.read(t),
                                               gates=(gates, gate_probes.read(t)))
            values = dict(extras, h=state["h"], c=state["c"])
            arrays = {k: ta.write(t, values[k]) for k, ta in arrays.items()}
            return t + 1, state, arrays

        h0 = state["h"]
        _, _, arrays = tf.while_loop(lambda t, *_: t < steps, body,
                                     (tf.constant(0), state, arrays), maximum_iterations=steps)
        time_major = {k: ta.stack() for k, ta in arrays.items()}  # [T, B, ...]
        seq = {k: tf.transpose(v, [1, 0, 2]) for k, v in time_major.items()}  # [B, T, ...]
        if summed is not None:
            # the LSTM's inputs x_t and states h_{t-1}, [T, B, E] and [T, B, H]
            gates.close(time_major["x"], tf.concat([h0[None], time_major["h"]], 0)[:steps])
            feed.close(seq["attn"])
        context = self.cell.contexts(seq["attn"], enc["outputs"])  # [B, T, D], eq. 3
        output, p_gen_logit = self.cell.outputs(seq["h"], seq["c"], context, seq["x"])
        output = self.drop(output, training=training)
        return {"output": output, "logits": self.vocab_proj(output), "attn": seq["attn"],
                "coverage": seq["coverage"], "p_gen_logit": p_gen_logit}

    def token_log_probs(self, features, outputs):
        """log p(y*_t), float32 [B, T], for t < dec_len (padding positions hold finite values
        that the losses mask). The [rows, H] x [H, V] vocabulary layer and its softmax run on
        the N real target positions only, gathered from the [B, T] grid and scattered back."""
        target = tf.cast(features["target"], tf.int32)  # [B, T]
        real = tf.where(tf.sequence_mask(features["dec_len"], tf.shape(target)[1]))  # [N, 2]
        logits = self.vocab_proj(tf.gather_nd(outputs["output"], real))  # [N, V]
        log_p = vocab_log_prob(logits, tf.gather_nd(target, real), self.rnn_impl == "fused")
        log_p_vocab = tf.scatter_nd(real, log_p, tf.shape(target, out_type=tf.int64))  # [B, T]
        if not self.pointer_gen:
            return log_p_vocab
        return mix_copy(log_p_vocab, target, outputs["attn"], outputs["p_gen_logit"],
                        tf.cast(features["enc_ext_ids"], tf.int32))
