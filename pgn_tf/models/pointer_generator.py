"""See et al. (2017): the attentional seq2seq baseline, the pointer-generator and coverage.

One class, switched by config: `pointer_gen=False` is the baseline (section 2.1),
`pointer_gen=True` adds eq. 8-9 (section 2.2), `coverage=True` adds eq. 10-13 (section 2.3).
With the paper's sizes (H=256, E=128, V=50k) the parameter counts are exactly the paper's:
21,499,600 for the baseline, +1,153 for the pointer, +512 for coverage.

Interface for the search (STYLE.md habit 5):
    enc, state = model.encode(enc_ids, enc_len, enc_ext_ids, num_oovs)
    log_probs, state, extras = model.decode_step(ids, step, state, enc)   # over V + max_oovs
"""

from __future__ import annotations

import keras
import tensorflow as tf

from pgn_tf import losses
from pgn_tf.layers.decoder import AttentionDecoderCell
from pgn_tf.layers.encoder import BiLSTMEncoder
from pgn_tf.layers.pointer import final_distribution
from pgn_tf.models.base import SummarizationModel

FEATURE_KEYS = ("enc_ids", "enc_ext_ids", "enc_len", "num_oovs", "dec_input", "target", "dec_len")


class PointerGenerator(SummarizationModel):
    """Args:
      vocab_size: V (with the 4 special tokens); hidden_dim: H; emb_dim: E;
      pointer_gen: eq. 8-9 on/off; coverage: eq. 10-13 on/off; cov_loss_wt: lambda (eq. 13);
      init_mag: uniform init of the LSTMs; init_std: truncated-normal init of the embedding
      and vocabulary projection (See et al.'s code: 0.02 and 1e-4).

    Example:
      >>> model = PointerGenerator(vocab_size=50, hidden_dim=8, emb_dim=4)
      >>> out = model(features)             # teacher forcing
      >>> terms = model.loss_terms(features, out)
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
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.hidden_dim = hidden_dim
        self.emb_dim = emb_dim
        self.pointer_gen = pointer_gen
        self.coverage = coverage
        self.cov_loss_wt = cov_loss_wt
        self.init_mag = init_mag
        self.init_std = init_std
        normal = keras.initializers.TruncatedNormal(stddev=init_std, seed=3)
        # One embedding for article and summary words, as in See et al.'s code.
        self.embedding = keras.layers.Embedding(
            vocab_size, emb_dim, embeddings_initializer=normal, name="embedding"
        )
        self.encoder = BiLSTMEncoder(hidden_dim, init_mag, name="encoder")
        self.cell = AttentionDecoderCell(
            hidden_dim, emb_dim, pointer_gen, coverage, init_mag, name="decoder"
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
        self.init_trackers(["loss", "nll", "p_gen_mean"] + (["coverage"] if coverage else []))

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
        )

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
            name=self.name,
        )

    # -- encoder ---------------------------------------------------------------------------

    def encode(self, enc_ids, enc_len, enc_ext_ids=None, num_oovs=None, max_dec_steps=None):
        """Runs the encoder once per article (max_dec_steps is unused: the state does not
        depend on the summary length).

        Returns:
          enc: dict(outputs [B, L, 2H], features [B, L, 2H], mask bool [B, L],
                    ext_ids int32 [B, L], max_oovs int32 scalar)
          state: the decoder's initial state (AttentionDecoderCell).
        """
        enc_ids = tf.cast(enc_ids, tf.int32)
        mask = tf.sequence_mask(enc_len, tf.shape(enc_ids)[1])
        outputs, h, c = self.encoder(self.embedding(enc_ids), mask)
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
            "context": tf.zeros([b, 2 * self.hidden_dim], outputs.dtype),
            "coverage": tf.zeros(tf.shape(mask), outputs.dtype),
        }
        return enc, state

    # -- one decoder step (search interface) --------------------------------------------------

    def decode_step(self, ids, step, state, enc):
        """ids: int32 [N] previous tokens -> log_probs float32 [N, V (+ max_oovs)], new state,
        extras dict(attn [N, L], p_gen [N]). `step` is unused here (kept for the interface)."""
        del step
        output, state, extras = self.cell(self.embed_ids(ids), state, enc)
        logits = tf.cast(self.vocab_proj(output), tf.float32)  # [N, V]
        p_gen = tf.sigmoid(tf.cast(extras["p_gen_logit"], tf.float32))
        if self.pointer_gen:
            probs = final_distribution(
                tf.nn.softmax(logits),
                tf.cast(extras["attn"], tf.float32),
                p_gen[:, None],
                enc["ext_ids"],
                enc["max_oovs"],
            )  # [N, V + max_oovs]
            log_probs = tf.math.log(tf.maximum(probs, 1e-30))
        else:
            log_probs = tf.nn.log_softmax(logits)
        return log_probs, state, {"attn": extras["attn"], "p_gen": p_gen}

    # -- teacher forcing ------------------------------------------------------------------------

    def call(self, features, training=False):
        """Teacher-forced pass.

        Returns dict: logits float [B, T, V]; attn, coverage float [B, T, L]; p_gen_logit [B, T].
        """
        enc, state = self.encode(
            features["enc_ids"], features["enc_len"], features.get("enc_ext_ids")
        )
        dec_emb = self.embed_ids(features["dec_input"])  # [B, T, E]
        steps = tf.shape(dec_emb)[1]
        dec_tm = tf.transpose(dec_emb, [1, 0, 2])  # [T, B, E]
        dtype = enc["outputs"].dtype
        arrays = {
            "output": tf.TensorArray(dtype, size=steps),
            "attn": tf.TensorArray(dtype, size=steps),
            "p_gen_logit": tf.TensorArray(dtype, size=steps),
            "coverage": tf.TensorArray(dtype, size=steps),
        }

        def body(t, state, arrays):
            output, state, extras = self.cell(dec_tm[t], state, enc)
            extras = dict(extras, output=output)
            arrays = {k: ta.write(t, extras[k]) for k, ta in arrays.items()}
            return t + 1, state, arrays

        _, _, arrays = tf.while_loop(lambda t, *_: t < steps, body, (tf.constant(0), state, arrays))

        out = {k: self.batch_major(ta) for k, ta in arrays.items()}
        # The vocabulary layer runs once over all steps: one [B*T, H] x [H, V] matmul.
        out["logits"] = self.vocab_proj(out.pop("output"))
        return out

    def loss_terms(self, features, outputs):
        """Per-example losses (each float32 [B]): nll (eq. 6-7 on eq. 9), coverage (eq. 12),
        total (eq. 13); plus p_gen_mean, a scalar over valid steps."""
        target = tf.cast(features["target"], tf.int32)
        log_p = self.token_log_probs(features, outputs)
        dec_len = features["dec_len"]
        nll = losses.nll_per_example(log_p, dec_len)
        terms = {"nll": nll}
        if self.coverage:
            cov = losses.coverage_loss_per_example(
                tf.cast(outputs["attn"], tf.float32),
                tf.cast(outputs["coverage"], tf.float32),
                dec_len,
            )
            terms["coverage"] = cov
            terms["total"] = nll + self.cov_loss_wt * cov
        else:
            terms["total"] = nll
        mask = tf.sequence_mask(dec_len, tf.shape(target)[1], tf.float32)
        p_gen = tf.sigmoid(tf.cast(outputs["p_gen_logit"], tf.float32))
        terms["p_gen_mean"] = tf.math.divide_no_nan(
            tf.reduce_sum(p_gen * mask), tf.reduce_sum(mask)
        )
        return terms
