"""Raw text in, summary out, entirely in the graph: the function that evaluate, summarize and the
exported SavedModel all run, so in-process and served summaries cannot differ.

The user-facing API (keras-hub style; both classes answer the same calls):

    import pgn_tf
    s = pgn_tf.Summarizer.from_model_dir("runs/pgn")       # or .from_saved_model("export/pgn/3")
    s(["article one ...", "article two ..."])              # -> ["summary one", "summary two"]
    s.explain("article ...")   # -> {summary, tokens, source_tokens, attention [T, L], p_gen [T]}

`Summarizer.__call__` decodes in batches of articles of similar length (sorted, answered in
input order), each padded up to a batch-size bucket (powers of two up to decode.batch_size;
a bucket already traced is preferred to tracing a smaller one), so the in-graph beam search is
traced once per bucket and then runs as one compiled graph call.
The low-level call stays `summarize(articles_tensor) -> dict of tensors`.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import os
from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from pgn_tf import config as config_lib
from pgn_tf import serving_contract as contract
from pgn_tf import text
from pgn_tf import vocab as vocab_lib
from pgn_tf.data import dataset
from pgn_tf.decoding import features as features_lib
from pgn_tf.decoding import greedy
from pgn_tf.decoding.beam_search import ARTICLE, beam_search, tile_beams
from pgn_tf.decoding.constraints import Constraints
from pgn_tf.layers.pointer import copy_slots
from pgn_tf.model_dir import ModelDir
from pgn_tf.utils.errors import UserError

METHODS = ("beam", "greedy")  # Summarizer.summarize's decoding methods


def load_model(model_dir: str, which: str = "best"):
    """(cfg, vocab, model, checkpoint path) restored from a model dir (pgn_tf.model_dir)."""
    return ModelDir(model_dir).load_model(which)


def batch_buckets(max_batch: int) -> list[int]:
    """The batch sizes one compiled call is traced for: powers of two below max_batch, and
    max_batch itself (32 -> [1, 2, 4, 8, 16, 32]; 48 -> [1, 2, 4, 8, 16, 32, 48])."""
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    return out + [max_batch]


def article_tokens(articles: Sequence[str], data: config_lib.DataConfig) -> list[list[str]]:
    """The tokens the encoder reads of each article (what attention is over): the model's
    tokenizer, cut to data.max_enc_steps, as Summarizer.encode_text does in the graph."""
    rag = text.tokenize(tf.constant(list(articles), tf.string), data.lowercase,
                        data.replace_digits, max_chars=data.max_enc_steps * 20)
    return [[t.decode("utf-8") for t in row[: data.max_enc_steps]] for row in rag.to_list()]


def _length_key(article: str, cap: int) -> int:
    """Sort key of an article: its whitespace words, capped where the encoder cuts anyway."""
    return min(len(article.split()), cap)


@dataclasses.dataclass(frozen=True)
class DecodeRequest:
    """What one `SummarizerAPI.decode` call asks of each batch: the beam size (None: the
    config's) and which outputs beyond the summaries and scores."""

    beam_size: int | None = None
    tokens: bool = False
    p_gen: bool = False


def _row(out: dict, j: int, request: DecodeRequest, want_p_gen: bool) -> dict:
    """Row j of a batch's numpy outputs as decode's dict."""
    row = {"summary": out["summaries"][j].decode("utf-8"), "score": float(out["scores"][j])}
    if request.tokens:
        n = int(out["length"][j])
        row["tokens"] = [t.decode("utf-8") for t in out["tokens"][j][:n]]
        row["raw_tokens"] = [t.decode("utf-8") for t in out["raw_tokens"][j][:n]]
    if want_p_gen:
        n = int(out["length"][j]) if request.p_gen else 0
        row["p_gen"] = float(np.mean(out["p_gen"][j][:n])) if n else float("nan")
    return row


class SummarizerAPI(abc.ABC):
    """What both summarizers answer: `s(articles)`, `s.explain(article)` and `s.decode(...)`.

    Subclasses hold `cfg` (the model's Config: decode.batch_size is the largest batch of one
    model call) and run one batch (`_run_batch`) and one verbose article (`_run_verbose`).
    """

    cfg: config_lib.Config

    @property
    def batch_size(self) -> int:
        return self.cfg.decode.batch_size

    @property
    def data_config(self) -> config_lib.DataConfig:
        return self.cfg.data

    @property
    def pointer_gen(self) -> bool:
        return bool(self.cfg.model.pointer_gen)

    @abc.abstractmethod
    def _run_batch(self, articles: list[str], request: DecodeRequest) -> dict:
        """articles: at most batch_size -> numpy {"summaries": bytes [n], "scores": float32
        [n]}, and with request.tokens "tokens" / "raw_tokens" bytes [n, T] ("" pad) and
        "length" int32 [n], with request.p_gen "p_gen" float32 [n, T]."""

    @abc.abstractmethod
    def _run_verbose(self, article: str) -> dict:
        """One article -> numpy {summaries [1], tokens [1, T], attention [1, T, L],
        p_gen [1, T]} of the verbose decode."""

    def __call__(self, articles: Sequence[str] | str) -> list[str] | str:
        """Summaries of `articles` (a list gives a list in the same order; one str gives one)."""
        if isinstance(articles, str):
            return self.decode([articles])[0]["summary"]
        return [r["summary"] for r in self.decode(articles)]

    def decode(self, articles: Sequence[str], batch_size: int | None = None,
               on_batch: Callable[[int], None] | None = None, *,
               beam_size: int | None = None, tokens: bool = False, p_gen: bool = False,
               lengths: Sequence[int] | None = None) -> list[dict]:
        """The one batched decode every caller runs (the commands, summarize_corpus, the Beam
        pipelines, evaluation, validation ROUGE, the benchmarks): one dict an article, in the
        order of `articles`: {"summary": str, "score": float}, and with tokens=True
        "tokens" (the output tokens, after decode.replace_unk) and "raw_tokens" (before it),
        with p_gen=True "p_gen" (the mean generation probability of the summary's tokens, See
        et al. eq. 8; nan for an empty summary or a model without a pointer).

        Articles are decoded in batches of `batch_size` (default and cap: the model's
        decode.batch_size) of similar length, so little of a batch is padding and its articles
        finish close together: sorted by `lengths` (default: their whitespace words, capped
        where the encoder cuts). beam_size overrides decode.beam_size. on_batch(n) is told
        after each batch how many articles it held."""
        articles = list(articles)
        for i, a in enumerate(articles):
            if not isinstance(a, str):
                raise TypeError(f"article {i} is a {type(a).__name__}, not a str")
        if lengths is not None and len(lengths) != len(articles):
            raise ValueError(f"{len(lengths)} lengths for {len(articles)} articles")
        if beam_size is not None and beam_size < 1:
            raise ValueError(f"beam_size must be at least 1, got {beam_size}")
        request = DecodeRequest(beam_size, tokens, p_gen and self.pointer_gen)
        size = min(batch_size or self.batch_size, self.batch_size)
        if lengths is None:
            cap = self.data_config.max_enc_steps
            lengths = [_length_key(a, cap) for a in articles]
        order = sorted(range(len(articles)), key=lambda i: lengths[i])
        results: list = [None] * len(articles)
        for start in range(0, len(order), size):
            rows = order[start : start + size]
            out = self._run_batch([articles[r] for r in rows], request)
            for j, r in enumerate(rows):
                results[r] = _row(out, j, request, p_gen)
            if on_batch is not None:
                on_batch(len(rows))
        return results

    def explain(self, article: str) -> dict:
        """One article's summary with what produced it:

        summary: str; tokens: list[str] [T], the output tokens; source_tokens: list[str] [L],
        the article tokens the encoder read; attention: float32 [T, L], each output step's
        attention over them (See et al. eq. 2); p_gen: float32 [T], the generation
        probability of each output token (eq. 8; None for models without a pointer)."""
        if not isinstance(article, str):
            raise TypeError(f"article is a {type(article).__name__}, not a str")
        out = self._run_verbose(article)
        tokens = [t.decode("utf-8") for t in out["tokens"][0]]
        n = len(tokens) - next((i for i, t in enumerate(reversed(tokens)) if t), len(tokens))
        source = article_tokens([article], self.data_config)[0]
        return {
            "summary": out["summaries"][0].decode("utf-8"),
            "tokens": tokens[:n],
            "source_tokens": source,
            "attention": np.asarray(out["attention"][0][:n, : len(source)], np.float32),
            "p_gen": (np.asarray(out["p_gen"][0][:n], np.float32) if self.pointer_gen
                      else None),
        }

    @classmethod
    def from_saved_model(cls, path: str) -> SavedModelSummarizer:
        """A summarizer over an exported SavedModel (pgn_tf.export): the same calls, run by
        its serving_default and summarize_verbose signatures."""
        return SavedModelSummarizer(path)


class _Compiled:
    """The compiled calls of an in-process Summarizer: one tf.function per DecodeRequest for
    batches (each traced once per batch-size bucket) and one for explain (batch 1). Built at
    the first call, so decode.* settings changed before it are used; `Summarizer.recompile()`
    drops them."""

    def __init__(self, summarizer: Summarizer):
        self.summarizer = summarizer
        self.batch: dict[DecodeRequest, Callable] = {}
        self.verbose = tf.function(
            lambda a: _pick(summarizer.summarize(a, verbose=True), _VERBOSE_KEYS))
        self.buckets: set[int] = set()  # batch sizes the batch calls have been traced for

    def batch_fn(self, request: DecodeRequest) -> Callable:
        fn = self.batch.get(request)
        if fn is None:
            keys = _request_keys(request)
            s = self.summarizer
            fn = tf.function(lambda a: _pick(
                s.summarize(a, beam_size=request.beam_size, with_p_gen=request.p_gen), keys))
            self.batch[request] = fn
        return fn

    def tracing_count(self) -> int:
        """How many times the batch calls have been traced, over every request."""
        return sum(int(fn.experimental_get_tracing_count()) for fn in self.batch.values())

    def bucket(self, n: int, max_batch: int) -> int:
        """The batch size n articles are padded to: the smallest bucket already traced that
        holds them (a trace costs seconds, a few padding rows milliseconds), else the
        smallest bucket that holds them (traced now)."""
        fits = [b for b in batch_buckets(max_batch) if b >= n]
        traced = [b for b in fits if b in self.buckets]
        size = traced[0] if traced else fits[0]
        self.buckets.add(size)
        return size


_BATCH_KEYS = ("summaries", "scores")
_VERBOSE_KEYS = ("summaries", "scores", "tokens", "attention", "p_gen")


def _request_keys(request: DecodeRequest) -> tuple[str, ...]:
    keys = _BATCH_KEYS
    if request.tokens or request.p_gen:
        keys += ("length",)
    if request.tokens:
        keys += ("tokens", "raw_tokens")
    if request.p_gen:
        keys += ("p_gen",)
    return keys


def _pick(out: dict, keys) -> dict:
    return {k: out[k] for k in keys if k in out}


class _InProcessCalls(SummarizerAPI):
    """SummarizerAPI for Summarizer: batches padded to a bucket, run by _Compiled."""

    @property
    def compiled(self) -> _Compiled:
        calls = self.__dict__.get("_compiled_calls")
        if calls is None:
            calls = _Compiled(self)
            object.__setattr__(self, "_compiled_calls", calls)  # not a tracked attribute
        return calls

    def recompile(self) -> None:
        """Forgets the traced calls (after a change of cfg.decode, say)."""
        self.__dict__.pop("_compiled_calls", None)

    def _run_batch(self, articles: list[str], request: DecodeRequest) -> dict:
        n = len(articles)
        bucket = self.compiled.bucket(n, self.batch_size)
        # Padding rows repeat the last article: they finish when it does, and are dropped.
        padded = articles + [articles[-1]] * (bucket - n)
        out = self.compiled.batch_fn(request)(tf.constant(padded, tf.string))
        return {k: v.numpy()[:n] for k, v in out.items()}

    def _run_verbose(self, article: str) -> dict:
        out = self.compiled.verbose(tf.constant([article], tf.string))
        return {k: v.numpy() for k, v in out.items()}


class Summarizer(_InProcessCalls, tf.Module):
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

    def search_inputs(self, feats: dict, k, mixture: bool = False) -> tuple:
        """(initial state, step_fn) of the search interface for encoded articles `feats`
        (encode_text) with k hypotheses each. The state is {"dec": the decoder's state,
        ARTICLE: the encoder's outputs}, both tiled to [B*k, ...]: the encoder outputs travel
        in the state so that the beam search can drop finished articles from the batch.
        mixture: a pointer model's step returns its distribution in parts (layers.pointer.Mixture,
        for the beam search alone), the source's copy slots computed here once an article."""
        enc, state = self.model.encode(
            feats["enc_ids"], feats["enc_len"], feats["enc_ext_ids"], feats["num_oovs"],
            max_dec_steps=feats.get("max_dec_steps"),
        )
        mixture = mixture and getattr(self.model, "pointer_gen", False)
        if mixture:
            enc["copy_slot"], enc["copy_first"] = copy_slots(enc["ext_ids"], enc["mask"])
        state = {"dec": tile_beams(state, k), ARTICLE: tile_beams(enc, k)}
        kw = {"mixture": True} if mixture else {}

        def step_fn(ids, step, st):
            log_probs, dec, extras = self.model.decode_step(ids, step, st["dec"], st[ARTICLE],
                                                            **kw)
            return log_probs, {"dec": dec, ARTICLE: st[ARTICLE]}, extras

        return state, step_fn

    def summarize(self, articles, beam_size=None, max_steps=None, min_steps=None,
                  verbose: bool = False, method: str = "beam", feature_weights=None,
                  with_p_gen: bool = False) -> dict:
        """articles: string [B]. Returns summaries string [B] (detokenized), tokens string
        [B, T] ("" pad), length int32 [B], scores float32 [B], and raw_summaries / raw_tokens:
        the same before decode.replace_unk put source words in place of [UNK]. verbose adds
        attention float32 [B, T, L], p_gen float32 [B, T] and source_tokens string [B, L];
        with_p_gen adds p_gen alone (cheaper: no attention history is kept).

        The decode.* config keys choose the search (docs/usage.md "Decode, evaluate, explain"):
        decode.fixed_length = N > 0 emits exactly N words (Rush et al.: [STOP] never, min and
        max steps ignored), with hypothesis recombination on the last model.abs_window ids for
        ABS models. feature_weights: float32 [5], ABS+ weights overriding
        decode.abs_plus_weights (a tensor, so tuning them does not retrace). method: "beam" or
        "greedy" (ValueError for anything else)."""
        if method not in METHODS:
            raise ValueError(f"unknown decoding method '{method}' ({', '.join(METHODS)})")
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
        # The beam search scores a pointer model's distribution in parts (layers.pointer.Mixture);
        # greedy search and the rescoring features read it whole.
        state, step_fn = self.search_inputs(feats, k, mixture=not (greedy_search or rescore))
        if rescore:  # Rush et al.'s ABS+ features / extractive decoding
            src = tf.where(tf.sequence_mask(feats["enc_len"], src_len), feats["enc_ext_ids"], -1)
            step_fn = features_lib.rescoring_step_fn(step_fn, vocab_lib.STOP_ID,
                                                     feature_weights, dc.extractive)
            state = features_lib.initial_state(state, tile_beams(src, k), vocab_lib.PAD_ID)
        unk = vocab_lib.UNK_ID if self.cfg.avoids_unk() else None
        replace_unk = self.cfg.replaces_unk()
        exempt = None
        if dc.block_repeated_words:
            exempt = tf.constant([w in vocab_lib.SPECIAL_TOKENS or not is_word(w)
                                  for w in self.vocab.words], tf.bool)  # [V]
        extras = {"attn", "p_gen"} if verbose else ({"p_gen"} if with_p_gen else set())
        if replace_unk:
            extras.add("src_pos")
        constraints = Constraints(vocab_lib.STOP_ID, min_steps=min_steps, unk_id=unk,
                                  block_trigrams=dc.block_trigrams, repeat_exempt=exempt)
        if greedy_search:
            res = greedy.search(step_fn, state, batch_size=batch, max_steps=max_steps,
                                start_id=vocab_lib.START_ID, constraints=constraints,
                                return_src_pos=replace_unk)
        else:
            recombine = self.cfg.model.abs_window if (
                dc.fixed_length > 0 and self.cfg.model.model_type == "abs") else 0
            res = beam_search(
                step_fn, state, batch_size=batch, beam_size=beam_size, max_steps=max_steps,
                start_id=vocab_lib.START_ID, constraints=constraints,
                length_penalty=dc.length_penalty, return_extras=tuple(sorted(extras)),
                src_len=src_len, coverage_penalty=dc.coverage_penalty,
                recombine_window=recombine,
            )
        words = vocab_lib.ids_to_words(res["ids"], self.words, feats["oovs"])
        keep = tf.range(tf.shape(words)[1])[None, :] < res["length"][:, None]
        raw_tokens = tf.where(keep, words, "")
        tokens = raw_tokens
        if replace_unk:  # OpenNMT's replace_unk: the most attended source word
            replaced = vocab_lib.replace_unk_ids(res["ids"], res["src_pos"],
                                                 feats["enc_ext_ids"], feats["enc_len"])
            tokens = tf.where(keep, vocab_lib.ids_to_words(replaced, self.words, feats["oovs"]),
                              "")
        lines = dc.sentence_lines  # one sentence a line in the output text
        out = {
            "summaries": text.detokenize(text.join_tokens(tokens, keep, lines)),
            "tokens": tokens,
            "raw_summaries": text.detokenize(text.join_tokens(raw_tokens, keep, lines)),
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
        if t in text.SENTENCE_END_TOKENS:
            lines.append(" ".join(cur))
            cur = []
    if cur:
        lines.append(" ".join(cur))
    return "\n".join(lines)


class SavedModelSummarizer(SummarizerAPI):
    """The SummarizerAPI over an exported SavedModel (`Summarizer.from_saved_model(path)`): its
    serving_default, summarize_options (decode(beam_size=...)) and summarize_verbose (decode's
    tokens and p_gen, explain) signatures, whose batch dimension is already dynamic (nothing to
    trace). Reads the export's assets.extra/config.json for the decode batch size and the
    tokenizer settings."""

    def __init__(self, path: str):
        if not tf.io.gfile.isdir(path):
            raise UserError(f"SavedModel {path} does not exist")
        cfg_path = os.path.join(path, "assets.extra", "config.json")
        if not tf.io.gfile.exists(cfg_path):
            raise UserError(f"{path} has no assets.extra/config.json: is it a pgn_tf export?")
        with tf.io.gfile.GFile(cfg_path) as f:
            self.cfg = config_lib.Config.from_dict(json.load(f))
        self.path = path
        self.loaded = tf.saved_model.load(path)
        names = (contract.SERVING_DEFAULT, contract.SUMMARIZE_VERBOSE, contract.SUMMARIZE_OPTIONS)
        missing = set(names) - set(self.loaded.signatures)
        if missing:
            raise UserError(f"SavedModel {path} lacks the signature(s) {sorted(missing)}")
        self.serve = self.loaded.signatures[contract.SERVING_DEFAULT]
        self.verbose = self.loaded.signatures[contract.SUMMARIZE_VERBOSE]
        self.options = self.loaded.signatures[contract.SUMMARIZE_OPTIONS]

    def _run_batch(self, articles: list[str], request: DecodeRequest) -> dict:
        batch = tf.constant(articles, tf.string)
        if request.tokens or request.p_gen:
            if request.beam_size is not None:
                raise UserError("an export's tokens come from its summarize_verbose signature, "
                                "which decodes with the export's beam size: leave beam_size out")
            out = {k: v.numpy() for k, v in self.verbose(**{contract.ARTICLES: batch}).items()}
            out["length"] = np.sum(out["tokens"] != b"", axis=1).astype(np.int32)
            return out
        if request.beam_size is not None:
            dc = self.cfg.decode
            out = self.options(**{
                contract.ARTICLES: batch, contract.BEAM_SIZE: tf.constant(request.beam_size),
                contract.MAX_DECODE_STEPS: tf.constant(dc.max_dec_steps),
                contract.MIN_DECODE_STEPS: tf.constant(dc.min_dec_steps)})
        else:
            out = self.serve(**{contract.ARTICLES: batch})
        return {k: out[k].numpy() for k in _BATCH_KEYS}

    def _run_verbose(self, article: str) -> dict:
        out = self.verbose(**{contract.ARTICLES: tf.constant([article], tf.string)})
        return {k: out[k].numpy() for k in _VERBOSE_KEYS if k in out}
