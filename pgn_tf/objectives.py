"""Training objectives, written once against the model interface, for every model.

A model offers a teacher-forced `call(batch, training) -> outputs` (logits [B, T, V], attn
[B, T, L], p_gen_logit [B, T], and coverage [B, T, L] when it has coverage), `token_log_probs
(batch, outputs) -> [B, T]` and the search interface `encode` / `decode_step`. An objective maps
(model, batch) to per-example terms (float32 [B] each, "total" among them, plus the scalar
"p_gen_mean"); the training loop minimises the global-batch mean of "total". Models hold
architecture only; nothing in pgn_tf.models imports this module.

    sequence_nll          See et al. eq. 6-7 (mean over steps), Paulus et al. eq. 14 and Rush
                          et al. section 4 (sum over the summary)
    coverage_term         See et al. eq. 12, averaged over steps; lambda of eq. 13 weights it
    switch_supervised_log_probs
                          Paulus et al. section 2.3 and appendix A.3: the ground truth u_t = 1
                          (copy, from the first occurrence in the article) for out-of-vocabulary
                          summary words found in the article, u_t = 0 otherwise (the named-
                          entity part needs a tagger and is left out)
    self_critical_term    Paulus et al. eq. 15: (r(y^) - r(y^s)) * sum_t log p(y^s_t)
    leave_one_out_baseline
                          with k samples an article, each sample's baseline is the mean reward
                          of the other k - 1 (Kool et al. 2019), in place of the greedy y^
    mixed                 Paulus et al. eq. 16: gamma * L_rl + (1 - gamma) * L_ml

`build(cfg)` picks the objective from `train.objective` (ml | mixed | rl) and the model config.
"""

from __future__ import annotations

import tensorflow as tf

from pgn_tf import vocab
from pgn_tf.decoding import greedy, sampling
from pgn_tf.decoding.beam_state import tile_beams
from pgn_tf.decoding.constraints import Constraints
from pgn_tf.layers import pointer
from pgn_tf.metrics import rewards
from pgn_tf.vocab import START_ID, STOP_ID, UNK_ID

_NEG = -1e30


# -- the terms ---------------------------------------------------------------------------------


def sequence_nll(log_probs: tf.Tensor, lengths: tf.Tensor, reduction: str = "mean") -> tf.Tensor:
    """-log p(y*) of each example over its valid steps.

    log_probs: float [B, T] log p(y*_t); lengths: int [B]. reduction "mean" divides by the
    length (See et al. eq. 7's 1/T; 0 for an empty summary), "sum" does not (Paulus et al. eq.
    14). Returns float32 [B]."""
    log_probs = tf.cast(log_probs, tf.float32)
    mask = tf.sequence_mask(lengths, tf.shape(log_probs)[1], tf.float32)
    total = -tf.reduce_sum(log_probs * mask, axis=1)
    if reduction == "sum":
        return total
    if reduction != "mean":
        raise ValueError(f"unknown NLL reduction '{reduction}' (mean, sum)")
    return tf.math.divide_no_nan(total, tf.cast(lengths, tf.float32))


def coverage_term(attn: tf.Tensor, coverage: tf.Tensor, lengths: tf.Tensor) -> tf.Tensor:
    """See et al. eq. 12 averaged over the valid steps: covloss_t = sum_i min(a_i^t, c_i^t).

    attn, coverage: float [B, T, L] (coverage[t] = sum of the attention of steps < t);
    lengths int [B]. Returns float32 [B]."""
    step_loss = tf.reduce_sum(tf.minimum(tf.cast(attn, tf.float32),
                                         tf.cast(coverage, tf.float32)), axis=-1)  # [B, T]
    return sequence_nll(-step_loss, lengths, "mean")


def switch_supervised_log_probs(outputs: dict, batch: dict, vocab_size: int,
                                fused: bool = True) -> tf.Tensor:
    """log p(u*_t) + log p(y*_t | u*_t) of every target step, float32 [B, T].

    Paulus et al. provide "the ground-truth value for u_t and the corresponding i index of the
    target input token when u_t = 1 ... at every decoding step during training" (section 2.3);
    u_t = 1 "when y_t is an out-of-vocabulary token" present in the input (appendix A.3; the
    named-entity case needs a tagger and is not implemented). Here u*_t = 1 exactly when the
    target id is an article OOV (id >= V), with i* its first occurrence in the article, so
        u* = 1: log p(u=1) + log a_{t,i*}          u* = 0: log p(u=0) + log p_vocab(y*_t).
    `p_gen_logit` is the logit of p(u=0) (the generation probability); fused: the model's
    rnn_impl is "fused" (pointer.vocab_log_prob's)."""
    target = tf.cast(batch["target"], tf.int32)
    logits = tf.cast(outputs["logits"], tf.float32)
    z = tf.cast(outputs["p_gen_logit"], tf.float32)
    in_vocab = target < vocab_size
    log_vocab = tf.math.log_sigmoid(z) + pointer.vocab_log_prob(logits, target, fused)
    ext = tf.cast(batch["enc_ext_ids"], tf.int32)  # [B, L]
    hit = tf.equal(ext[:, None, :], target[:, :, None])  # [B, T, L]
    first = tf.argmax(tf.cast(hit, tf.int32), axis=-1, output_type=tf.int32)  # [B, T]
    attn = tf.cast(outputs["attn"], tf.float32)
    a_first = tf.gather(attn, first, batch_dims=2)  # [B, T]
    found = tf.reduce_any(hit, axis=-1)
    log_copy = tf.where(found & (a_first > 0),
                        tf.math.log(tf.maximum(a_first, 1e-30)), _NEG) + tf.math.log_sigmoid(-z)
    return tf.where(in_vocab, log_vocab, log_copy)


def self_critical_term(sample_log_prob: tf.Tensor, reward_sample: tf.Tensor,
                       reward_baseline: tf.Tensor) -> tf.Tensor:
    """Paulus et al. eq. 15 per sample: (r(y^) - r(y^s)) * sum_t log p(y^s_t | ...).

    sample_log_prob float [N] (summed over the sampled sequence, [STOP] included); rewards
    float [N]: the sample's, and its baseline's (Paulus et al.: the greedy y^;
    `leave_one_out_baseline` with several samples an article). The advantage carries no
    gradient."""
    advantage = tf.stop_gradient(reward_baseline - reward_sample)
    return advantage * sample_log_prob


def leave_one_out_baseline(rewards_k: tf.Tensor) -> tf.Tensor:
    """float [B, k] rewards of k >= 2 samples an article -> [B, k]: for each sample, the mean
    reward of the article's other k - 1 samples. A baseline that does not depend on the sample
    it scores keeps eq. 15's estimator unbiased; unlike the greedy output, it sits at the
    samples' own mean, so about half of an article's samples are pushed up and half down
    (Kool, van Hoof & Welling 2019, "Buy 4 REINFORCE samples, get a baseline for free")."""
    k = tf.cast(tf.shape(rewards_k)[1], rewards_k.dtype)
    return (tf.reduce_sum(rewards_k, axis=1, keepdims=True) - rewards_k) / (k - 1.0)


def p_gen_mean(outputs: dict, lengths: tf.Tensor) -> tf.Tensor:
    """Mean p_gen over the valid target steps of the batch (a scalar)."""
    p_gen = tf.sigmoid(tf.cast(outputs["p_gen_logit"], tf.float32))
    mask = tf.sequence_mask(lengths, tf.shape(p_gen)[1], tf.float32)
    return tf.math.divide_no_nan(tf.reduce_sum(p_gen * mask), tf.reduce_sum(mask))


def reference_ids(target: tf.Tensor, dec_len: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """The reference summary's ids from the training target (w_1 .. w_n [STOP], maybe cut):
    ([B, T] ids with [UNK] -> -1, so it matches nothing, lengths [B] without [STOP])."""
    target = tf.cast(target, tf.int32)
    dec_len = tf.cast(dec_len, tf.int32)
    last = tf.gather(target, tf.maximum(dec_len - 1, 0), batch_dims=1)
    ref_len = dec_len - tf.cast(tf.equal(last, STOP_ID) & (dec_len > 0), tf.int32)
    return tf.where(tf.equal(target, UNK_ID), -1, target), ref_len


def replace_unk_ids(result: dict, batch: dict) -> tf.Tensor:
    """decode.replace_unk on a search result's ids (`vocab.replace_unk_ids`), as the decoder's
    output text gets it; int32 [B, T]."""
    return vocab.replace_unk_ids(result["ids"], result["src_pos"],
                                 batch.get("enc_ext_ids", batch["enc_ids"]), batch["enc_len"])


def rouge_l_reward(result: dict, batch: dict, replace_unk: bool = False) -> tf.Tensor:
    """ROUGE-L F1 of a search result against the batch's reference ids, float32 [B]
    (Paulus et al. section 3.2's reward; [UNK] on either side matches nothing). replace_unk:
    the result's [UNK]s are first replaced as decoding replaces them (`replace_unk_ids`)."""
    ref, ref_len = reference_ids(batch["target"], batch["dec_len"])
    ids = replace_unk_ids(result, batch) if replace_unk else result["ids"]
    pred = tf.where(tf.equal(ids, UNK_ID), -2, ids)
    return rewards.rouge_l_f1(pred, result["length"], ref, ref_len)


# -- objectives --------------------------------------------------------------------------------


class MaximumLikelihood:
    """Teacher-forced NLL (plus See et al.'s coverage term when the model has coverage).

    Args:
      reduction: "mean" (per token, See et al. eq. 7) or "sum" (over the summary).
      coverage_weight: lambda of See et al. eq. 13 (used when the model has coverage).
      pointer_supervision: Paulus et al.'s supervised switch (switch_supervised_log_probs)
        instead of the marginal mixture of eq. 12.
    """

    name = "ml"

    def __init__(self, reduction: str = "mean", coverage_weight: float = 1.0,
                 pointer_supervision: bool = False):
        self.reduction = reduction
        self.coverage_weight = coverage_weight
        self.pointer_supervision = pointer_supervision

    def term_names(self, model) -> list[str]:
        """The keys __call__ returns for this model."""
        return ["total", "nll", "p_gen_mean"] + (["coverage"] if getattr(model, "coverage", False)
                                                 else [])

    def __call__(self, model, batch: dict, training: bool = True) -> dict:
        outputs = model(batch, training=training)
        lengths = batch["dec_len"]
        if self.pointer_supervision and model.pointer_gen:
            log_p = switch_supervised_log_probs(outputs, batch, model.vocab_size,
                                                model.rnn_impl == "fused")
        else:
            log_p = model.token_log_probs(batch, outputs)
        terms = {"nll": sequence_nll(log_p, lengths, self.reduction)}
        terms["total"] = terms["nll"]
        if getattr(model, "coverage", False):
            terms["coverage"] = coverage_term(outputs["attn"], outputs["coverage"], lengths)
            terms["total"] = terms["nll"] + self.coverage_weight * terms["coverage"]
        terms["p_gen_mean"] = (p_gen_mean(outputs, lengths) if "p_gen_logit" in outputs
                               else tf.constant(1.0))
        return terms


class SelfCritical:
    """Paulus et al. section 3.2: the self-critical policy gradient (eq. 15) mixed with the ML
    objective (eq. 16); gamma = 1 is eq. 15 alone.

    The sampled sequence and the greedy baseline run from the same encoding for up to
    max_steps tokens with [STOP] barred before min_steps, exactly as decoding does at
    inference (no knowledge of the reference's length). samples = k > 1 draws k sequences an
    article from k copies of its encoding and scores each against the mean reward of the other
    k - 1 (`leave_one_out_baseline`) instead of the greedy output, a variance reduction the
    paper does not use; eq. 15's term is then the mean over the k. The greedy output is still
    decoded, for the reward_greedy diagnostic. Terms add: rl, reward_sample (the mean over an
    article's samples), reward_greedy (ROUGE-L F1 [B]), sample_capped (share of the samples
    that hit max_steps), advantage_abs and advantage_zero (share of samples that score as
    their baseline: no gradient), and two diagnostics of the policy the samples come from:
    sample_entropy (mean entropy, in nats, of each sampled step's distribution) and
    sample_p_gen (mean p_gen along the sample)."""

    def __init__(self, ml: MaximumLikelihood, gamma: float, max_steps: int, min_steps: int = 0,
                 seed: int | None = None, replace_unk: bool = False, samples: int = 1):
        if samples < 1:
            raise ValueError(f"samples must be at least 1, got {samples}")
        self.ml = ml
        self.gamma = gamma
        self.max_steps = max_steps
        self.min_steps = min_steps
        self.seed = seed
        self.replace_unk = replace_unk  # rouge_l_reward's
        self.samples = samples
        self.name = "rl" if gamma >= 1.0 else "mixed"

    def term_names(self, model) -> list[str]:
        return self.ml.term_names(model) + ["rl", "reward_sample", "reward_greedy",
                                            "sample_capped", "advantage_abs", "advantage_zero",
                                            "sample_entropy", "sample_p_gen"]

    def _encode(self, model, batch):
        return model.encode(batch["enc_ids"], batch["enc_len"], batch.get("enc_ext_ids"),
                            batch.get("num_oovs"), max_dec_steps=self.max_steps)

    @staticmethod
    def _step_fn(model, enc):
        return lambda ids, t, st: model.decode_step(ids, t, st, enc)

    def constraints(self) -> Constraints:
        """What the greedy baseline and the samples may not emit: [STOP] before min_steps."""
        return Constraints(STOP_ID, min_steps=self.min_steps)

    def greedy_search(self, model, batch: dict, enc=None, state=None) -> dict:
        """The greedy baseline y^ (greedy.search's result, B rows)."""
        if enc is None:
            enc, state = self._encode(model, batch)
        return greedy.search(self._step_fn(model, enc), state,
                             batch_size=tf.shape(batch["enc_ids"])[0], max_steps=self.max_steps,
                             start_id=START_ID, constraints=self.constraints(),
                             return_src_pos=self.replace_unk)

    def sample(self, model, batch: dict, enc=None, state=None) -> tuple[dict, dict]:
        """self.samples = k sequences an article: (sampling.search's result over B * k rows, row
        i * k + j the j-th of article i, with stats; the batch with each row repeated to match)."""
        if enc is None:
            enc, state = self._encode(model, batch)
        k, on = self.samples, batch
        if k > 1:
            enc, state, on = tile_beams(enc, k), tile_beams(state, k), tile_beams(batch, k)
        sampled = sampling.search(self._step_fn(model, enc), state,
                                  batch_size=tf.shape(batch["enc_ids"])[0] * k,
                                  max_steps=self.max_steps, start_id=START_ID,
                                  constraints=self.constraints(), seed=self.seed,
                                  return_stats=True, return_src_pos=self.replace_unk)
        return sampled, on

    def rl_terms(self, model, batch: dict) -> dict:
        enc, state = self._encode(model, batch)
        best = self.greedy_search(model, batch, enc, state)
        r_greedy = rouge_l_reward(best, batch, self.replace_unk)
        sampled, on = self.sample(model, batch, enc, state)
        r_sample = rouge_l_reward(sampled, on, self.replace_unk)
        log_p = tf.reduce_sum(sampled["step_log_probs"], axis=1)  # [STOP] included
        b, k = tf.shape(batch["enc_ids"])[0], self.samples
        if k > 1:
            r_base = tf.reshape(leave_one_out_baseline(tf.reshape(r_sample, [b, k])), [-1])
        else:
            r_base = r_greedy
        advantage = r_base - r_sample

        def per_article(x):  # [B * k] -> [B], the mean over an article's samples
            return tf.reduce_mean(tf.reshape(tf.cast(x, tf.float32), [b, k]), axis=1)

        return {"rl": per_article(self_critical_term(log_p, r_sample, r_base)),
                "reward_sample": per_article(r_sample), "reward_greedy": r_greedy,
                "sample_capped": per_article(sampled["length"] >= self.max_steps),
                # the gradient signal: |advantage|, and the samples that give none
                "advantage_abs": per_article(tf.abs(advantage)),
                "advantage_zero": per_article(tf.equal(advantage, 0.0)),
                "sample_entropy": per_article(sampled["entropy"]),
                "sample_p_gen": per_article(sampled["p_gen"])}

    def __call__(self, model, batch: dict, training: bool = True) -> dict:
        terms = self.ml(model, batch, training) if self.gamma < 1.0 else {
            "nll": tf.zeros(tf.shape(batch["dec_len"])), "p_gen_mean": tf.constant(0.0)}
        ml_total = terms.get("total", terms["nll"])
        rl = self.rl_terms(model, batch)
        terms.update(rl, total=self.gamma * rl["rl"] + (1.0 - self.gamma) * ml_total)
        return terms

    def greedy_reward(self, model, batch: dict) -> tf.Tensor:
        """Validation reward: ROUGE-L F1 of greedy decoding, float32 [B] (no gradient)."""
        return rouge_l_reward(self.greedy_search(model, batch), batch, self.replace_unk)


OBJECTIVES = ("ml", "mixed", "rl")


def build(cfg) -> MaximumLikelihood | SelfCritical:
    """The objective a Config asks for (train.objective, train.nll_reduction, model.cov_loss_wt,
    train.pointer_supervision, train.rl_gamma, train.rl_samples; RL searches run to
    decode.max_dec_steps, and their reward replaces [UNK] as decoding does when
    train.reward_replace_unk and decode.replace_unk both hold)."""
    t = cfg.train
    ml = MaximumLikelihood(t.nll_reduction, cfg.model.cov_loss_wt, t.pointer_supervision)
    if t.objective == "ml":
        return ml
    if t.objective not in OBJECTIVES:
        raise ValueError(f"unknown train.objective '{t.objective}' ({', '.join(OBJECTIVES)})")
    gamma = t.rl_gamma if t.objective == "mixed" else 1.0
    return SelfCritical(ml, gamma, cfg.decode.max_dec_steps, cfg.decode.min_dec_steps,
                        replace_unk=t.reward_replace_unk and cfg.replaces_unk(),
                        samples=t.rl_samples)
