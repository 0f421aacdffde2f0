"""What both summarizers answer (keras-hub style): `s(articles)`, `s.decode(...)` and
`s.explain(article)`, in-process (`Summarizer`) or over an export (`SavedModelSummarizer`)."""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from pgn_tf import config as config_lib
from pgn_tf import text
from pgn_tf.decoding.search import DecodeRequest
from pgn_tf.inference.batching import length_batches, length_key


def article_tokens(articles: Sequence[str], data: config_lib.DataConfig) -> list[list[str]]:
    """The tokens the encoder reads of each article (what attention is over): the model's
    tokenizer, cut to data.max_enc_steps, as Summarizer.encode_text does in the graph."""
    rag = text.tokenize(tf.constant(list(articles), tf.string), data.lowercase,
                        data.replace_digits, max_chars=data.max_enc_steps * 20)
    return [[t.decode("utf-8") for t in row[: data.max_enc_steps]] for row in rag.to_list()]


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
    def _run_verbose(self, article: str, request: DecodeRequest) -> dict:
        """One article -> numpy {summaries [1], tokens [1, T], attention [1, T, L],
        p_gen [1, T]} of the verbose decode (request.attention is set)."""

    def __call__(self, articles: Sequence[str] | str) -> list[str] | str:
        """Summaries of `articles` (a list gives a list in the same order; one str gives one)."""
        if isinstance(articles, str):
            return self.decode([articles])[0]["summary"]
        return [r["summary"] for r in self.decode(articles)]

    def decode(self, articles: Sequence[str], batch_size: int | None = None,
               on_batch: Callable[[int], None] | None = None, *,
               request: DecodeRequest | None = None,
               lengths: Sequence[int] | None = None) -> list[dict]:
        """The one batched decode every caller runs (the commands, summarize_corpus, the Beam
        pipelines, the evaluator, validation ROUGE, tune, the studies): one dict an article, in
        the order of `articles`: {"summary": str, "score": float}, and with request.tokens
        "tokens" (the output tokens, after decode.replace_unk) and "raw_tokens" (before it),
        with request.p_gen "p_gen" (the mean generation probability of the summary's tokens,
        See et al. eq. 8; nan for an empty summary or a model without a pointer).

        request: what this call asks of the search beyond the config (decoding.search:
        beam size, step limits, method, ABS+ weights; default: the config's decoding).
        Articles are decoded in batches of `batch_size` (default and cap: the model's
        decode.batch_size) of similar length: sorted by `lengths` (default: their whitespace
        words, capped where the encoder cuts). on_batch(n) is told after each batch how many
        articles it held."""
        articles = list(articles)
        for i, a in enumerate(articles):
            if not isinstance(a, str):
                raise TypeError(f"article {i} is a {type(a).__name__}, not a str")
        if lengths is not None and len(lengths) != len(articles):
            raise ValueError(f"{len(lengths)} lengths for {len(articles)} articles")
        request = request or DecodeRequest()
        want_p_gen = request.p_gen
        request = dataclasses.replace(request, p_gen=request.p_gen and self.pointer_gen)
        size = min(batch_size or self.batch_size, self.batch_size)
        if lengths is None:
            cap = self.data_config.max_enc_steps
            lengths = [length_key(a, cap) for a in articles]
        results: list = [None] * len(articles)
        for rows in length_batches(lengths, size):
            out = self._run_batch([articles[r] for r in rows], request)
            for j, r in enumerate(rows):
                results[r] = _row(out, j, request, want_p_gen)
            if on_batch is not None:
                on_batch(len(rows))
        return results

    def explain(self, article: str, request: DecodeRequest | None = None) -> dict:
        """One article's summary with what produced it:

        summary: str; tokens: `list[str]` [T], the output tokens; source_tokens: `list[str]`
        [L], the article tokens the encoder read; attention: float32 [T, L], each output step's
        attention over them (See et al. eq. 2); p_gen: float32 [T], the generation
        probability of each output token (eq. 8; None for models without a pointer).
        request: as decode's (its beam size, say)."""
        if not isinstance(article, str):
            raise TypeError(f"article is a {type(article).__name__}, not a str")
        request = dataclasses.replace(request or DecodeRequest(), attention=True)
        out = self._run_verbose(article, request)
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
    def from_saved_model(cls, path: str):
        """A summarizer over an exported SavedModel (pgn_tf.saved_model.export): the same
        calls, run by its serving_default and summarize_verbose signatures."""
        from pgn_tf.inference.saved_model import SavedModelSummarizer

        return SavedModelSummarizer(path)
