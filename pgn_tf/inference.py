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
from pgn_tf.decoding.beam_search import ARTICLE, beam_search, tile_beams
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

    def search_inputs(self, feats: dict, k) -> tuple:
        """(initial state, step_fn) of the search interface for encoded articles `feats`
        (encode_text) with k hypotheses each. The state is {"dec": the decoder's state,
        ARTICLE: the encoder's outputs}, both tiled to [B*k, ...]: the encoder outputs travel
        in the state so that the beam search can drop finished articles from the batch."""
        enc, state = self.model.encode(
            feats["enc_ids"], feats["enc_len"], feats["enc_ext_ids"], feats["num_oovs"],
            max_dec_steps=feats.get("max_dec_steps"),
        )
        state = {"dec": tile_beams(state, k), ARTICLE: tile_beams(enc, k)}

        def step_fn(ids, step, st):
            log_probs, dec, extras = self.model.decode_step(ids, step, st["dec"], st[ARTICLE])
            return log_probs, {"dec": dec, ARTICLE: st[ARTICLE]}, extras

        return state, step_fn

    def has_attention(self) -> bool:
        """Whether the model's attention points at source words (for replace_unk): every model
        but ABS with the bag-of-words or convolutional encoder (uniform / no attention)."""
        m = self.cfg.model
        return not (m.model_type == "abs" and m.abs_encoder != "attention")

    def summarize(self, articles, beam_size=None, max_steps=None, min_steps=None,
                  verbose: bool = False, method: str = "beam", feature_weights=None,
                  with_p_gen: bool = False) -> dict:
        """articles: string [B]. Returns summaries string [B] (detokenized), tokens string
        [B, T] ("" pad), length int32 [B], scores float32 [B], and raw_summaries / raw_tokens:
        the same before decode.replace_unk put source words in place of [UNK]. verbose adds
        attention float32 [B, T, L], p_gen float32 [B, T] and source_tokens string [B, L];
        with_p_gen adds p_gen alone (cheaper: no attention history is kept).

        The decode.* config keys choose the search (README "Decode, evaluate, explain"):
        decode.fixed_length = N > 0 emits exactly N words (Rush et al.: [STOP] never, min and
        max steps ignored), with hypothesis recombination on the last model.abs_window ids for
        ABS models. feature_weights: float32 [5], ABS+ weights overriding
        decode.abs_plus_weights (a tensor, so tuning them does not retrace)."""
        dc = self.cfg.decode
        if feature_weights is None:
            feature_weights = features_lib.parse_weights(dc.abs_plus_weights)
        rescore = feature_weights is not None or dc.extractive
        beam_size = tf.cast(dc.beam_size if beam_size is None else beam_size, tf.int32)
        max_steps = tf.cast(dc.max_dec_steps if max_steps is None else max_steps, tf.int32)
        min_steps = tf.cast(dc.min_dec_steps if min_steps is None else min_steps, tf.int32)
        if dc.fixed_length > 0:
            max_steps = min_steps = tf.constant(dc.fixed_length, tf.int32)
        beam_size = tf.maximum(beam_size, 1)
        max_steps = tf.maximum(max_steps, 1)
        articles = tf.reshape(tf.convert_to_tensor(articles, tf.string), [-1])
        feats = dict(self.encode_text(articles), max_dec_steps=max_steps)
        batch = tf.shape(articles)[0]
        src_len = tf.shape(feats["enc_ids"])[1]
        greedy_search = method == "greedy"
        k = 1 if greedy_search else beam_size
        state, step_fn = self.search_inputs(feats, k)
        if rescore:  # Rush et al.'s ABS+ features / extractive decoding
            src = tf.where(tf.sequence_mask(feats["enc_len"], src_len), feats["enc_ext_ids"], -1)
            step_fn = features_lib.rescoring_step_fn(step_fn, vocab_lib.STOP_ID,
                                                     feature_weights, dc.extractive)
            state = features_lib.initial_state(state, tile_beams(src, k), vocab_lib.PAD_ID)
        unk = vocab_lib.UNK_ID if dc.avoid_unk else None
        replace_unk = dc.replace_unk and not dc.avoid_unk and self.has_attention()
        exempt = None
        if dc.block_repeated_words:
            exempt = tf.constant([w in vocab_lib.SPECIAL_TOKENS or not is_word(w)
                                  for w in self.vocab.words], tf.bool)  # [V]
        extras = {"attn", "p_gen"} if verbose else ({"p_gen"} if with_p_gen else set())
        if replace_unk:
            extras.add("src_pos")
        if greedy_search:
            res = greedy.search(step_fn, state, batch, max_steps, vocab_lib.START_ID,
                                vocab_lib.STOP_ID, min_steps, dc.block_trigrams, unk,
                                repeat_exempt=exempt, return_src_pos=replace_unk)
        else:
            recombine = self.cfg.model.abs_window if (
                dc.fixed_length > 0 and self.cfg.model.model_type == "abs") else 0
            res = beam_search(
                step_fn, state, batch, beam_size, max_steps,
                vocab_lib.START_ID, vocab_lib.STOP_ID, min_steps, dc.length_penalty,
                dc.block_trigrams, unk, return_extras=tuple(sorted(extras)), src_len=src_len,
                coverage_penalty=dc.coverage_penalty, repeat_exempt=exempt,
                recombine_window=recombine,
            )
        words = vocab_lib.ids_to_words(res["ids"], self.words, feats["oovs"])
        keep = tf.range(tf.shape(words)[1])[None, :] < res["length"][:, None]
        raw_tokens = tf.where(keep, words, "")
        tokens = raw_tokens
        if replace_unk:  # OpenNMT's replace_unk: the most attended source word
            source = tf.pad(feats["enc_tokens"], [[0, 0], [0, 1]])  # "" column: never empty
            attended = tf.gather(source, res["src_pos"], batch_dims=1)  # [B, T]
            unk_out = keep & tf.equal(res["ids"], vocab_lib.UNK_ID) & tf.not_equal(attended, "")
            tokens = tf.where(unk_out, attended, raw_tokens)
        out = {
            "summaries": text.detokenize(text.join_tokens(tokens, keep)),
            "tokens": tokens,
            "raw_summaries": text.detokenize(text.join_tokens(raw_tokens, keep)),
            "raw_tokens": raw_tokens,
            "length": res["length"],
            "scores": res["score"],
        }
        if "p_gen" in res and (verbose or with_p_gen):
            out["p_gen"] = res["p_gen"]
        if verbose and "attn" in res:
            out["attention"] = res["attn"]
            out["source_tokens"] = feats["enc_tokens"]
        return out


def is_word(token: str) -> bool:
    """A word token holds a letter or a digit; punctuation holds neither. The repeated-word
    block (decode.block_repeated_words) and evaluate's word-repetition rates count these."""
    return any(c.isalnum() for c in token)


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
