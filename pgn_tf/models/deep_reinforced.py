"""Paulus, Xiong & Socher (2017), A Deep Reinforced Model for Abstractive Summarization.

    encoder   bidirectional LSTM, H per direction; h_0^d = [h_n^fwd ; h_n^bwd]      (sec. 2)
    decoder   one LSTM of 2H over emb(y_{t-1}) (one embedding matrix for both sides)
    c_t^e     intra-temporal attention over the article                      eq. 2-5
    c_t^d     intra-decoder attention over earlier decoder states            eq. 6-8
    o_t       = [h_t^d ; c_t^e ; c_t^d]
    p(y|u=0)  = softmax(W_out o_t + b_out), W_out = tanh(W_emb W_proj)       eq. 9, 13
    p(y|u=1)  = a_t^e (copy, over the extended vocabulary)                   eq. 10
    p(u=1)    = sigmoid(W_u o_t + b_u)                                       eq. 11
    p(y)      = p(u=1) p(y|u=1) + p(u=0) p(y|u=0)                            eq. 12

Each of intra-temporal attention, intra-decoder attention and the shared projection is a config
switch. The switch is parameterised by the logit of p(u=0) (= -(W_u o_t + b_u)), so the
log-space mixture of pgn_tf.layers.pointer (shared with See et al.'s model) computes eq. 12.

In training, `call` replaces the previous ground-truth token by a sample of the model's own
distribution with probability 25% (appendix B). The objectives of section 3 (L_ml summed over
the summary, eq. 14; the self-critical L_rl, eq. 15; their mix, eq. 16; the supervised switch)
are in pgn_tf.objectives, written for every model.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from pgn_tf.layers.attention import IntraTemporalAttention
from pgn_tf.layers.decoder_attention import IntraDecoderAttention
from pgn_tf.layers.encoder import BiLSTMEncoder
from pgn_tf.layers.pointer import PointerSwitch, final_distribution
from pgn_tf.layers.tied_projection import TiedOutputProjection
from pgn_tf.models.base import SHARED, SummarizationModel
from pgn_tf.ops import resolve_rnn_impl


@keras.saving.register_keras_serializable(package="pgn_tf")
class DeepReinforced(SummarizationModel):
    """Args:
      vocab_size V; hidden_dim H (encoder, per direction; the decoder has 2H); emb_dim E;
      pointer_gen: eq. 10-12 on (else generation only); intra_temporal_attention: eq. 3 on;
      intra_decoder_attention: eq. 6-8 on; shared_embedding: eq. 13 on (else a free W_out);
      sample_replace_prob: probability of feeding the model's own sample instead of the
      ground-truth previous token in ML training (Paulus et al. appendix B: 0.25);
      rnn_impl: "fused", "keras" or "auto" (pgn_tf.ops): the encoder's LSTM and the loss's and
      the pointer's gradients (the decoder's loop is the Keras LSTMCell's either way).

    Example:
      >>> model = DeepReinforced(vocab_size=50, hidden_dim=8, emb_dim=4)
      >>> out = model(features, training=True)   # teacher forcing with 25% own samples
      >>> log_p = model.token_log_probs(features, out)
    """

    def __init__(
        self,
        vocab_size: int,
        hidden_dim: int = 200,
        emb_dim: int = 100,
        pointer_gen: bool = True,
        intra_temporal_attention: bool = True,
        intra_decoder_attention: bool = True,
        shared_embedding: bool = True,
        sample_replace_prob: float = 0.25,
        init_mag: float = 0.02,
        init_std: float = 1e-4,
        emb_init_std: float = 0.0,
        rnn_impl: str = "auto",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.rnn_impl = resolve_rnn_impl(rnn_impl)
        self.vocab_size = vocab_size
        self.hidden_dim = hidden_dim
        self.emb_dim = emb_dim
        self.pointer_gen = pointer_gen
        self.intra_temporal_attention = intra_temporal_attention
        self.intra_decoder_attention = intra_decoder_attention
        self.shared_embedding = shared_embedding
        self.sample_replace_prob = sample_replace_prob
        self.init_mag = init_mag
        self.init_std = init_std
        self.emb_init_std = emb_init_std
        dec_dim = 2 * hidden_dim
        self.dec_dim = dec_dim
        init = keras.initializers.RandomUniform(-init_mag, init_mag, seed=4)
        self.embedding = keras.layers.Embedding(
            vocab_size, emb_dim, name="embedding",
            embeddings_initializer=keras.initializers.TruncatedNormal(
                stddev=emb_init_std or init_std, seed=3))
        self.encoder = BiLSTMEncoder(hidden_dim, init_mag, reduce_states=False,
                                     rnn_impl=self.rnn_impl, name="encoder")
        self.lstm = keras.layers.LSTMCell(dec_dim, kernel_initializer=init,
                                          recurrent_initializer=init, name="decoder_lstm")
        self.enc_attention = IntraTemporalAttention(dec_dim, intra_temporal_attention,
                                                    name="enc_attention")
        self.dec_attention = (IntraDecoderAttention(dec_dim, name="dec_attention")
                              if intra_decoder_attention else None)
        feat_dim = dec_dim + 2 * hidden_dim + (dec_dim if intra_decoder_attention else 0)
        self.feat_dim = feat_dim
        if shared_embedding:
            self.out_proj = TiedOutputProjection(self.embedding, feat_dim, name="out_proj")
        else:
            self.out_proj = keras.layers.Dense(vocab_size, name="out_proj")
        self.switch = PointerSwitch(name="switch") if pointer_gen else None
        self.embedding.build((None,))
        self.encoder.build((None, None, emb_dim))
        self.lstm.build((None, emb_dim))
        self.enc_attention.build((None, None, 2 * hidden_dim))
        if self.dec_attention is not None:
            self.dec_attention.build()
        self.out_proj.build((None, feat_dim))
        if self.switch is not None:
            self.switch.build(feat_dim)
        self.built = True

    @classmethod
    def from_config_obj(cls, model_cfg, vocab_size: int) -> DeepReinforced:
        return cls(
            vocab_size=vocab_size,
            hidden_dim=model_cfg.hidden_dim,
            emb_dim=model_cfg.emb_dim,
            pointer_gen=model_cfg.pointer_gen,
            intra_temporal_attention=model_cfg.intra_temporal_attention,
            intra_decoder_attention=model_cfg.intra_decoder_attention,
            shared_embedding=model_cfg.shared_embedding,
            sample_replace_prob=model_cfg.sample_replace_prob,
            init_mag=model_cfg.rand_unif_init_mag,
            init_std=model_cfg.trunc_norm_init_std,
            emb_init_std=model_cfg.emb_init_std,
            rnn_impl=model_cfg.rnn_impl,
        )

    def get_config(self):
        return dict(
            vocab_size=self.vocab_size, hidden_dim=self.hidden_dim, emb_dim=self.emb_dim,
            pointer_gen=self.pointer_gen,
            intra_temporal_attention=self.intra_temporal_attention,
            intra_decoder_attention=self.intra_decoder_attention,
            shared_embedding=self.shared_embedding,
            sample_replace_prob=self.sample_replace_prob,
            init_mag=self.init_mag, init_std=self.init_std, emb_init_std=self.emb_init_std,
            rnn_impl=self.rnn_impl, name=self.name,
        )

    # -- encoder ------------------------------------------------------------------------------

    def encode(self, enc_ids, enc_len, enc_ext_ids=None, num_oovs=None, max_dec_steps=None):
        """Returns (enc, state).

        enc: outputs [B, L, 2H], features [B, L, 2H] (W_attn^e h_i^e), mask bool [B, L],
             ext_ids int32 [B, L], max_oovs int32 scalar, shared: {w_out [F, V]} (untiled).
        state: h, c [B, 2H]; past_lse [B, L] (eq. 3's running log-sum-exp);
               history [B, max_dec_steps, 2H] (earlier decoder states, eq. 6-8).
        """
        enc_ids = tf.cast(enc_ids, tf.int32)
        mask = tf.sequence_mask(enc_len, tf.shape(enc_ids)[1])
        outputs, h, c = self.encoder(self.embedding(enc_ids), mask)
        b = tf.shape(enc_ids)[0]
        enc = {
            "outputs": outputs,
            "features": self.enc_attention.precompute(outputs),
            "mask": mask,
            **self.copy_inputs(enc_ids, enc_ext_ids, num_oovs),
            SHARED: {"w_out": self.out_proj.kernel() if self.shared_embedding
                     else tf.zeros([0])},
        }
        state = {
            "h": h,
            "c": c,
            "past_lse": tf.fill(tf.shape(mask), IntraTemporalAttention.NEG_LSE),
        }
        if self.dec_attention is not None:
            steps = 1 if max_dec_steps is None else max_dec_steps
            state["history"] = tf.zeros([b, steps, self.dec_dim], outputs.dtype)
        return enc, state

    # -- one decoder step -----------------------------------------------------------------------

    def _step(self, ids, step, state, enc):
        """One step: (logits [N, V], gen_logit [N] = logit of p(u=0), attn [N, L], state)."""
        x = self.embed_ids(ids)
        h, (h, c) = self.lstm(x, [state["h"], state["c"]])
        ctx_e, attn, past_lse = self.enc_attention(
            enc["features"], enc["outputs"], enc["mask"], h, state["past_lse"])
        feats = [h, ctx_e]
        new_state = {"h": h, "c": c, "past_lse": past_lse}
        if self.dec_attention is not None:
            history = state["history"]
            ctx_d, _ = self.dec_attention(h, history, step)
            feats.append(ctx_d)
            here = tf.one_hot(step, tf.shape(history)[1], dtype=history.dtype)  # [T_max]
            new_state["history"] = history + here[None, :, None] * h[:, None, :]
        o = tf.concat(feats, axis=-1)  # [N, F]
        if self.shared_embedding:
            logits = self.out_proj(o, kernel=enc[SHARED]["w_out"])
        else:
            logits = self.out_proj(o)
        if self.switch is not None:
            gen_logit = self.switch([o])[:, 0]
        else:
            gen_logit = tf.fill(tf.shape(h)[:1], tf.constant(30.0, h.dtype))  # p(u=0) = 1
        return tf.cast(logits, tf.float32), tf.cast(gen_logit, tf.float32), attn, new_state

    def _log_probs(self, logits, gen_logit, attn, enc):
        """log p(y) over V + max_oovs (eq. 12)."""
        if not self.pointer_gen:
            return tf.nn.log_softmax(logits)
        probs = final_distribution(tf.nn.softmax(logits), attn, tf.sigmoid(gen_logit)[:, None],
                                   enc["ext_ids"], enc["max_oovs"], self.rnn_impl == "fused")
        return tf.math.log(tf.maximum(probs, 1e-30))

    def decode_step(self, ids, step, state, enc, mixture: bool = False):
        """The search interface: log_probs float32 [N, V + max_oovs], state, extras; with
        mixture (pointer models) the distribution's parts (PointerGenerator.decode_step)."""
        logits, gen_logit, attn, state = self._step(ids, step, state, enc)
        extras = {"attn": attn, "p_gen": tf.sigmoid(gen_logit)}
        if mixture and self.pointer_gen:
            return (self.mixture(logits, extras["p_gen"], attn, enc), state,
                    extras)
        return self._log_probs(logits, gen_logit, attn, enc), state, extras

    # -- teacher forcing (L_ml) -------------------------------------------------------------------

    def call(self, features, training=False):
        """Teacher-forced pass; in training, each step's input is (with sample_replace_prob)
        a sample of the previous step's distribution instead of the ground truth.

        Returns dict: logits [B, T, V], attn [B, T, L], p_gen_logit [B, T]."""
        dec_input = tf.cast(features["dec_input"], tf.int32)
        steps = tf.shape(dec_input)[1]
        enc, state = self.encode(features["enc_ids"], features["enc_len"],
                                 features.get("enc_ext_ids"), features.get("num_oovs"),
                                 max_dec_steps=steps)
        replace = training and self.sample_replace_prob > 0
        b = tf.shape(dec_input)[0]
        arrays = {k: tf.TensorArray(tf.float32, size=steps)
                  for k in ("logits", "attn", "p_gen_logit")}

        def body(t, prev_sample, state, arrays):
            ids = dec_input[:, t]
            if replace:
                use = tf.logical_and(t > 0, tf.random.uniform([b]) < self.sample_replace_prob)
                ids = tf.where(use, prev_sample, ids)
            logits, gen_logit, attn, state = self._step(ids, t, state, enc)
            if replace:
                log_p = tf.stop_gradient(self._log_probs(logits, gen_logit, attn, enc))
                prev_sample = tf.random.categorical(log_p, 1, dtype=tf.int32)[:, 0]
            out = {"logits": logits, "attn": tf.cast(attn, tf.float32),
                   "p_gen_logit": gen_logit}
            arrays = {k: ta.write(t, out[k]) for k, ta in arrays.items()}
            return t + 1, prev_sample, state, arrays

        _, _, _, arrays = tf.while_loop(
            lambda t, *_: t < steps, body, (tf.constant(0), dec_input[:, 0], state, arrays))

        return {k: self.batch_major(ta) for k, ta in arrays.items()}
