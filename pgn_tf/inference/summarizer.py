"""Raw text in, summary out, entirely in the graph: the function that evaluate, summarize and the
exported SavedModel all run, so in-process and served summaries cannot differ.

`Summarizer.summarize(articles_tensor, request) -> dict of tensors` is the low-level call (the
search built by `decoding.search.Search.from_params`); `Summarizer.__call__` / `decode` /
`explain` (inference.api) run it as compiled calls, one tf.function per request, traced once per
batch-size bucket (inference.batching).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import tensorflow as tf

from pgn_tf import config as config_lib
from pgn_tf import text
from pgn_tf import vocab as vocab_lib
from pgn_tf.data import dataset
from pgn_tf.decoding import shortlist as shortlist_lib
from pgn_tf.decoding.beam_state import ARTICLE, ONCE, SHARED, tile_beams
from pgn_tf.decoding.search import DecodeRequest, Search
from pgn_tf.inference.api import SummarizerAPI
from pgn_tf.inference.batching import Buckets
from pgn_tf.layers.pointer import copy_slots
from pgn_tf.ops import lstm_recurrence

_BATCH_KEYS = ("summaries", "scores")
_VERBOSE_KEYS = ("summaries", "scores", "tokens", "attention", "p_gen")


def _request_keys(request: DecodeRequest) -> tuple[str, ...]:
    """The outputs a compiled call for `request` hands back."""
    if request.attention:
        return _VERBOSE_KEYS
    keys = _BATCH_KEYS
    if request.tokens or request.p_gen:
        keys += ("length",)
    if request.tokens:
        keys += ("tokens", "raw_tokens")
    if request.p_gen:
        keys += ("p_gen",)
    return keys


class CompiledCalls:
    """The compiled calls of one `summarize` function: a tf.function per request (its ABS+
    weights, when it has them, passed as a tensor, so new weights do not retrace), each traced
    once per padded batch size. Built at a Summarizer's first call, so decode.* settings changed
    before it are used; `Summarizer.recompile()` drops them."""

    def __init__(self, summarize: Callable, max_batch: int):
        self.summarize = summarize
        self.fns: dict[tuple[DecodeRequest, bool], Callable] = {}
        self.buckets = Buckets(max_batch)  # batch sizes the batch calls have been traced for

    def __call__(self, articles: tf.Tensor, request: DecodeRequest) -> dict:
        weights = request.feature_weights
        key = (dataclasses.replace(request, feature_weights=None), weights is not None)
        fn = self.fns.get(key)
        if fn is None:
            keys, plain = _request_keys(request), key[0]
            summarize = self.summarize
            if weights is None:
                fn = tf.function(lambda a: _pick(summarize(a, plain), keys), autograph=False)
            else:
                fn = tf.function(lambda a, w: _pick(
                    summarize(a, dataclasses.replace(plain, feature_weights=w)), keys),
                    autograph=False)
            self.fns[key] = fn
        if weights is None:
            return fn(articles)
        return fn(articles, tf.constant(weights, tf.float32))

    def tracing_count(self) -> int:
        """How many times the batch calls have been traced, over every request."""
        return sum(int(fn.experimental_get_tracing_count())
                   for (request, _), fn in self.fns.items() if not request.attention)


def pad_length(tokens: tf.Tensor, multiple: int, cap: int) -> tf.Tensor:
    """string [B, L] ("" pad) -> [B, L'] with L' = L rounded up to a multiple of `multiple`,
    at most max(L, cap): the extra columns are padding ("")."""
    n = tf.shape(tokens)[1]
    to = tf.maximum(tf.minimum((n + multiple - 1) // multiple * multiple, cap), n)
    return tf.pad(tokens, [[0, 0], [0, to - n]], constant_values="")


def _pick(out: dict, keys) -> dict:
    return {k: out[k] for k in keys if k in out}


class Summarizer(SummarizerAPI, tf.Module):
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
    def from_model_dir(cls, model_dir: str, which: str = "best",
                       overrides: Sequence[str] = (), where: str = "decoding") -> Summarizer:
        """The model of a model dir (`which`: best, latest or a checkpoint path) with its
        decoding config: the tuned ABS+ weights the dir holds (pgn_tf.tune), then `overrides`
        ("decode.key=value"; `where` names the caller in a refusal of another key):
        inference.loading.load_model."""
        from pgn_tf.inference.loading import load_model

        cfg, vocab, model, _ = load_model(model_dir, which, overrides, where)
        return cls(model, vocab, cfg)

    # -- the compiled calls (SummarizerAPI) -------------------------------------------------

    @property
    def compiled(self) -> CompiledCalls:
        calls = self.__dict__.get("_compiled_calls")
        if calls is None:
            calls = CompiledCalls(self.summarize, self.batch_size)
            object.__setattr__(self, "_compiled_calls", calls)  # not a tracked attribute
        return calls

    def recompile(self) -> None:
        """Forgets the traced calls (after a change of cfg.decode, say)."""
        self.__dict__.pop("_compiled_calls", None)
        self.__dict__.pop("_jit_steps", None)

    def _run_batch(self, articles: list[str], request: DecodeRequest) -> dict:
        n = len(articles)
        bucket = self.compiled.buckets.pick(n)
        # Padding rows repeat the last article: they finish when it does, and are dropped.
        padded = articles + [articles[-1]] * (bucket - n)
        out = self.compiled(tf.constant(padded, tf.string), request)
        return {k: v.numpy()[:n] for k, v in out.items()}

    def _run_verbose(self, article: str, request: DecodeRequest) -> dict:
        out = self.compiled(tf.constant([article], tf.string), request)
        return {k: v.numpy() for k, v in out.items()}

    # -- the graph ---------------------------------------------------------------------------

    def encode_text(self, articles: tf.Tensor) -> dict:
        d = self.cfg.data
        tokens = text.tokenize(articles, d.lowercase, d.replace_digits,
                               max_chars=d.max_enc_steps * 20)
        tokens = tokens[:, : d.max_enc_steps].to_tensor(default_value="")  # [B, L]
        if self.cfg.decode.jit_step:  # a few source lengths, each compiled once
            tokens = pad_length(tokens, config_lib.JIT_SOURCE_MULTIPLE, d.max_enc_steps)
        feats = dataset.encode_articles(tokens, self.vocab)
        feats["enc_tokens"] = tokens
        return feats

    def search_inputs(self, feats: dict, k, mixture: bool = False, shortlist: int = 0) -> tuple:
        """(initial state, step_fn) of the search interface for encoded articles `feats`
        (encode_text) with k hypotheses each. The state is {"dec": the decoder's state,
        ARTICLE: the encoder's outputs}, both tiled to [B*k, ...], and ONCE: the encoder's
        outputs the model names in `held_once`, once an article ([B, ...]): the encoder outputs
        travel in the state so that the beam search can drop finished articles from the batch.
        mixture: a pointer model's step returns its distribution in parts (layers.pointer.Mixture,
        for the beam search alone), the source's copy slots computed here once an article.
        shortlist: K > 0 (decode.shortlist) puts the batch's candidate columns and the
        vocabulary layer's kernel and bias at them into enc[SHARED], once for the search
        (pgn_tf.decoding.shortlist); the model's step then runs over them. An int32 scalar
        (an export's summarize_options input) always does, its 0 making every vocabulary
        word a candidate (the full search, through the same graph)."""
        with lstm_recurrence.forward_only():  # no gradient is taken through a search
            enc, state = self.model.encode(
                feats["enc_ids"], feats["enc_len"], feats["enc_ext_ids"], feats["num_oovs"],
                max_dec_steps=feats.get("max_dec_steps"),
            )
        mixture = mixture and getattr(self.model, "pointer_gen", False)
        if mixture:
            enc["copy_slot"], enc["copy_first"] = copy_slots(enc["ext_ids"], enc["mask"])
        if tf.is_tensor(shortlist):
            shortlist = tf.where(shortlist > 0, shortlist, self.model.vocab_size)
        if tf.is_tensor(shortlist) or shortlist:  # per batch: never tiled nor gathered (SHARED)
            enc[SHARED] = {**enc.get(SHARED, {}),
                           shortlist_lib.KEY: self._shortlist(feats["enc_ids"], shortlist)}
        # The model's largest per-article tensors held once an article, not tiled (ONCE)
        once = {key: enc.pop(key) for key in getattr(self.model, "held_once", ())}
        state = {"dec": tile_beams(state, k), ARTICLE: tile_beams(enc, k)}
        if once:
            state[ONCE] = once
        decode_step = self._decode_step(mixture)

        def step_fn(ids, step, st):
            enc = {**st[ARTICLE], **st[ONCE]} if once else st[ARTICLE]
            log_probs, dec, extras = decode_step(ids, step, st["dec"], enc)
            return log_probs, {**st, "dec": dec}, extras

        return state, step_fn

    def _shortlist(self, enc_ids: tf.Tensor, frequent: int) -> dict:
        """The batch's shortlist (shortlist_lib.candidates) with the model's vocabulary layer
        at its columns, and at the tail's sample with decode.shortlist_tail; a ValueError for
        a model without one such layer."""
        project = getattr(self.model, "shortlist_projection", None)
        if project is None:
            raise ValueError("decode.shortlist needs model.model_type=pointer_generator (the "
                             "other models' output layers have no shortlist), or set it to 0")
        short = shortlist_lib.candidates(enc_ids, self.model.vocab_size, frequent,
                                         tail=self.cfg.decode.shortlist_tail)
        short["kernel"], short["bias"] = project(short["columns"])
        if "tail_ids" in short:
            short["tail_kernel"], short["tail_bias"] = project(short["tail_ids"])
        return short

    def _decode_step(self, mixture: bool) -> Callable:
        """The model's decode_step(ids, step, dec, enc), compiled as one XLA cluster under
        decode.jit_step where its outputs' shapes follow its inputs' (the beam search's
        Mixture, a model without a pointer). A pointer model's dense distribution (greedy
        search, the ABS+ features) is V + the batch's OOV count wide, one compilation per
        count: that step stays plain. One tf.function a Summarizer, so that the compilations
        are kept across batches and traces. A model naming `held_once` tensors gets them once
        an article (search_inputs)."""
        kw = {"mixture": True} if mixture else {}
        if getattr(self.model, "held_once", ()):
            kw["per_article"] = True

        def step(ids, t, dec, enc):
            return self.model.decode_step(ids, t, dec, enc, **kw)

        if not self.cfg.decode.jit_step or (
                getattr(self.model, "pointer_gen", False) and not mixture):
            return step
        steps = self.__dict__.setdefault("_jit_steps", {})  # not a tracked attribute
        if mixture not in steps:
            steps[mixture] = tf.function(step, jit_compile=True, autograph=False)
        return steps[mixture]

    def summarize(self, articles, request: DecodeRequest | None = None) -> dict:
        """articles: string [B]. Returns summaries string [B] (detokenized), tokens string
        [B, T] ("" pad), length int32 [B], scores float32 [B], and raw_summaries / raw_tokens:
        the same before decode.replace_unk put source words in place of [UNK]. With
        request.attention: attention float32 [B, T, L], p_gen float32 [B, T] and source_tokens
        string [B, L]; with request.p_gen: p_gen alone (cheaper: no attention history is kept).

        The search is the config's decode.* (docs/summarizing.md "Decoding options") with
        what `request` asks of this call (beam size, step limits, method, ABS+ weights), put
        together by `Search.from_params`."""
        request = request or DecodeRequest()
        search = Search.from_params(self.cfg, request, self.vocab.words)
        articles = tf.reshape(tf.convert_to_tensor(articles, tf.string), [-1])
        feats = dict(self.encode_text(articles), max_dec_steps=search.max_steps)
        batch = tf.shape(articles)[0]
        src_len = tf.shape(feats["enc_ids"])[1]
        state, step_fn = self.search_inputs(feats, search.hypotheses, mixture=search.mixture,
                                            shortlist=search.shortlist)
        source_ids = None
        if search.rescores:  # Rush et al.'s ABS+ features / extractive decoding
            source_ids = tf.where(tf.sequence_mask(feats["enc_len"], src_len),
                                  feats["enc_ext_ids"], -1)
        res = search.run(step_fn, state, batch_size=batch, src_len=src_len,
                         source_ids=source_ids)
        words = vocab_lib.ids_to_words(res["ids"], self.words, feats["oovs"])
        keep = tf.range(tf.shape(words)[1])[None, :] < res["length"][:, None]
        raw_tokens = tf.where(keep, words, "")
        tokens = raw_tokens
        if search.replace_unk:  # OpenNMT's replace_unk: the most attended source word
            replaced = vocab_lib.replace_unk_ids(res["ids"], res["src_pos"],
                                                 feats["enc_ext_ids"], feats["enc_len"])
            tokens = tf.where(keep, vocab_lib.ids_to_words(replaced, self.words, feats["oovs"]),
                              "")
        lines = self.cfg.decode.sentence_lines  # one sentence a line in the output text
        out = {
            "summaries": text.detokenize(text.join_tokens(tokens, keep, lines)),
            "tokens": tokens,
            "raw_summaries": text.detokenize(text.join_tokens(raw_tokens, keep, lines)),
            "raw_tokens": raw_tokens,
            "length": res["length"],
            "scores": res["score"],
        }
        if "p_gen" in res and (request.attention or request.p_gen):
            out["p_gen"] = res["p_gen"]
        if request.attention and "attn" in res:
            out["attention"] = res["attn"]
            out["source_tokens"] = feats["enc_tokens"]
        return out
