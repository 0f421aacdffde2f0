"""Raw text in, summary out, entirely in the graph: the function that evaluate, summarize and the
exported SavedModel all run, so in-process and served summaries cannot differ.

    summarizer = Summarizer.from_model_dir("runs/quickstart")
    out = summarizer.summarize(tf.constant(["an article ..."]))   # dict of tensors
"""

from __future__ import annotations

import tensorflow as tf

from pgn_tf import config as config_lib
from pgn_tf import text
from pgn_tf import vocab as vocab_lib
from pgn_tf.data import dataset
from pgn_tf.decoding import features as features_lib
from pgn_tf.decoding import greedy
from pgn_tf.decoding.beam_search import beam_search, tile_beams
from pgn_tf.model_dir import ModelDir


def load_model(model_dir: str, which: str = "best"):
    """(cfg, vocab, model, checkpoint path) restored from a model dir (pgn_tf.model_dir)."""
    return ModelDir(model_dir).load_model(which)


class Summarizer(tf.Module):
    """Tokenize -> vocab + in-graph OOV mapping -> encode -> batched beam search -> words.

    Args:
      model: any model with the search interface (encode / decode_step).
      vocab: the model's Vocab; cfg: its Config (data and decode sections are used).
    """

    def __init__(self, model, vocab: vocab_lib.Vocab, cfg: config_lib.Config):
        super().__init__(name="summarizer")
        self.model = model
        self.vocab = vocab
        self.cfg = cfg
        self.table = vocab.lookup_table
        self.words = vocab.words_tensor

    @classmethod
    def from_model_dir(cls, model_dir: str, which: str = "best") -> Summarizer:
        cfg, vocab, model, _ = load_model(model_dir, which)
        return cls(model, vocab, cfg)

    def encode_text(self, articles: tf.Tensor) -> dict:
        d = self.cfg.data
        tokens = text.tokenize(articles, d.lowercase, d.replace_digits,
                               max_chars=d.max_enc_steps * 20)
        tokens = tokens[:, : d.max_enc_steps].to_tensor(default_value="")  # [B, L]
        feats = dataset.encode_articles(tokens, self.vocab)
        feats["enc_tokens"] = tokens
        return feats

    def summarize(self, articles, beam_size=None, max_steps=None, min_steps=None,
                  verbose: bool = False, method: str = "beam", feature_weights=None) -> dict:
        """articles: string [B]. Returns summaries string [B] (detokenized), tokens string
        [B, T] ("" pad), length int32 [B], scores float32 [B]; verbose adds attention
        float32 [B, T, L], p_gen float32 [B, T] and source_tokens string [B, L].

        feature_weights: float32 [5], ABS+ weights overriding decode.abs_plus_weights (a
        tensor, so tuning them does not retrace)."""
        dc = self.cfg.decode
        if feature_weights is None:
            feature_weights = features_lib.parse_weights(dc.abs_plus_weights)
        rescore = feature_weights is not None or dc.extractive
        beam_size = tf.cast(dc.beam_size if beam_size is None else beam_size, tf.int32)
        max_steps = tf.cast(dc.max_dec_steps if max_steps is None else max_steps, tf.int32)
        min_steps = tf.cast(dc.min_dec_steps if min_steps is None else min_steps, tf.int32)
        beam_size = tf.maximum(beam_size, 1)
        max_steps = tf.maximum(max_steps, 1)
        articles = tf.reshape(tf.convert_to_tensor(articles, tf.string), [-1])
        feats = self.encode_text(articles)
        batch = tf.shape(articles)[0]
        enc, state = self.model.encode(
            feats["enc_ids"], feats["enc_len"], feats["enc_ext_ids"], feats["num_oovs"],
            max_dec_steps=max_steps,
        )
        unk = vocab_lib.UNK_ID if dc.avoid_unk else None
        k = 1 if method == "greedy" else beam_size
        enc_k = tile_beams(enc, k) if method != "greedy" else enc
        state = tile_beams(state, k) if method != "greedy" else state
        step_fn = lambda ids, step, st: self.model.decode_step(ids, step, st, enc_k)  # noqa: E731
        if rescore:  # Rush et al.'s ABS+ features / extractive decoding
            src = tf.where(tf.sequence_mask(feats["enc_len"], tf.shape(feats["enc_ids"])[1]),
                           feats["enc_ext_ids"], -1)
            step_fn = features_lib.rescoring_step_fn(step_fn, tile_beams(src, k),
                                                     vocab_lib.STOP_ID, feature_weights,
                                                     dc.extractive)
            state = features_lib.initial_state(state, batch * k, vocab_lib.PAD_ID)
        if method == "greedy":
            res = greedy.search(step_fn, state, batch, max_steps, vocab_lib.START_ID,
                                vocab_lib.STOP_ID, min_steps, dc.block_trigrams, unk)
        else:
            res = beam_search(
                step_fn, state, batch, beam_size, max_steps,
                vocab_lib.START_ID, vocab_lib.STOP_ID, min_steps, dc.length_penalty,
                dc.block_trigrams, unk, return_extras=verbose,
                src_len=tf.shape(feats["enc_ids"])[1],
            )
        words = vocab_lib.ids_to_words(res["ids"], self.words, feats["oovs"])
        keep = tf.range(tf.shape(words)[1])[None, :] < res["length"][:, None]
        tokens = tf.where(keep, words, "")
        out = {
            "summaries": text.detokenize(text.join_tokens(tokens, keep)),
            "tokens": tokens,
            "length": res["length"],
            "scores": res["score"],
        }
        if verbose and method != "greedy":
            out["attention"] = res["attn"]
            out["p_gen"] = res["p_gen"]
            out["source_tokens"] = feats["enc_tokens"]
        return out


def tokens_to_sentences(tokens: list[str]) -> str:
    """Tokens -> text with one sentence a line (rougeLsum's input convention)."""
    lines, cur = [], []
    for t in tokens:
        cur.append(t)
        if t in (".", "!", "?"):
            lines.append(" ".join(cur))
            cur = []
    if cur:
        lines.append(" ".join(cur))
    return "\n".join(lines)
