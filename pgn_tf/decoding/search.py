"""The one place a decode config and a per-call request become a search (OpenNMT-tf's
`DecodingStrategy.from_params`): `Search.from_params(cfg, request, vocab)` reads every decode.*
key once, takes what the caller asks of this call from a `DecodeRequest` (beam size, step
limits, greedy or beam, ABS+ weights, which outputs), and `Search.run` drives the beam or greedy
search with the constraints and rescoring they imply.

Every decode goes through it: the in-process Summarizer (evaluate, summarize, tune, validation
ROUGE, the studies), the exported signatures (serving runs them) and the export's check. Nobody
changes decoding by writing into a Config: a caller that wants another beam size or other
lengths says so in its request.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from pgn_tf import text
from pgn_tf import vocab as vocab_lib
from pgn_tf.decoding import features as features_lib
from pgn_tf.decoding import greedy
from pgn_tf.decoding.beam_search import beam_search
from pgn_tf.decoding.beam_state import tile_beams
from pgn_tf.decoding.constraints import Constraints

METHODS = ("beam", "greedy")  # the searches a request may ask for


@dataclasses.dataclass(frozen=True)
class DecodeRequest:
    """What one call asks of decoding beyond the config's decode.* defaults.

    Args:
      beam_size, max_steps, min_steps: ints or int32 scalars (an export's summarize_options
        passes its inputs); None: the config's (decode.fixed_length, when set, overrules the
        step limits).
      method: "beam" or "greedy".
      feature_weights: the five ABS+ weights (Rush et al. 2015) overriding
        decode.abs_plus_weights: floats, or a float32 [5] tensor (pgn_tf.inference.tuning
        passes a tensor so that trying weights does not retrace).
      attention: also return the attention [B, T, L], p_gen [B, T] and source tokens
        (explain, TensorBoard samples); p_gen: also return p_gen [B, T] alone (cheaper: no
        attention history is kept); tokens: the batched decode's rows carry their tokens
        (`SummarizerAPI.decode`; the in-graph call returns them always).
      shortlist: an int overriding decode.shortlist for this call (0: the full vocabulary;
        pgn_tf.decoding.shortlist), or an int32 scalar (a shortlisted export's
        summarize_options input): the graph then always runs the shortlisted step, with 0
        meaning every vocabulary word as a candidate, which is the full search.
    Hashable when its values are Python values: the compiled calls are kept per request.
    """

    beam_size: Any = None
    max_steps: Any = None
    min_steps: Any = None
    method: str = "beam"
    feature_weights: Any = None
    attention: bool = False
    p_gen: bool = False
    tokens: bool = False
    shortlist: int | None = None

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"unknown decoding method '{self.method}' ({', '.join(METHODS)})")
        if isinstance(self.beam_size, int) and self.beam_size < 1:
            raise ValueError(f"beam_size must be at least 1, got {self.beam_size}")
        if self.shortlist is not None and not tf.is_tensor(self.shortlist) and not (
                isinstance(self.shortlist, int) and not isinstance(self.shortlist, bool)
                and self.shortlist >= 0):
            raise ValueError(f"shortlist must be an int >= 0, got {self.shortlist!r}")
        if isinstance(self.feature_weights, list):  # a tuple keeps the request hashable
            object.__setattr__(self, "feature_weights", tuple(self.feature_weights))


@dataclasses.dataclass(frozen=True)
class Search:
    """A search, resolved from a config and a request (`from_params`); built inside the graph
    that runs it (its step limits are int32 scalars)."""

    method: str
    beam_size: tf.Tensor  # int32 []: at least 1
    max_steps: tf.Tensor  # int32 []: at least 1
    min_steps: tf.Tensor  # int32 []
    feature_weights: Any  # float32 [5] (ABS+), or None
    extractive: bool  # only article words (and [STOP]) may be emitted
    constraints: Constraints
    length_penalty: float
    coverage_penalty: float
    recombine_window: int  # Rush et al.'s recombination on the last N ids (0: off)
    extras: tuple[str, ...]  # the per-step extras the search returns (attn, p_gen, src_pos)
    replace_unk: bool  # an output [UNK] becomes the most attended source word
    row_buckets: bool = False  # the beam search's batch shrinks to powers of two only
    # K > 0: the vocabulary layer runs over the batch's shortlist (pgn_tf.decoding.shortlist:
    # the K most frequent words, the specials and the articles' words); 0: the full vocabulary.
    # The search itself is unchanged: the caller's step function reads it (Summarizer).
    shortlist: int = 0

    @classmethod
    def from_params(cls, cfg, request: DecodeRequest | None = None,
                    words: Sequence[str] | None = None) -> Search:
        """The search `cfg` (a pgn_tf Config: its decode section, and the model facts that
        decide [UNK] handling and recombination) and `request` ask for. words: the
        vocabulary's words, which decode.block_repeated_words needs (its exempt tokens)."""
        request = request or DecodeRequest()
        dc = cfg.decode
        weights = request.feature_weights
        if weights is None:
            weights = features_lib.parse_weights(dc.abs_plus_weights)
        if isinstance(weights, tuple):
            weights = list(weights)

        def pick(value, default):
            return tf.cast(default if value is None else value, tf.int32)

        beam_size = pick(request.beam_size, dc.beam_size)
        max_steps = pick(request.max_steps, dc.max_dec_steps)
        min_steps = pick(request.min_steps, dc.min_dec_steps)
        if dc.fixed_length > 0:  # Rush et al.: exactly N words, [STOP] never
            max_steps = min_steps = tf.constant(dc.fixed_length, tf.int32)
        exempt = None
        if dc.block_repeated_words:
            if words is None:
                raise ValueError("decode.block_repeated_words needs the vocabulary's words")
            word = text.is_content_word if dc.block_content_words_only else text.is_word
            exempt = tf.constant([w in vocab_lib.SPECIAL_TOKENS or not word(w)
                                  for w in words], tf.bool)  # [V]
        unk = vocab_lib.UNK_ID if cfg.avoids_unk() else None
        replace_unk = cfg.replaces_unk()
        if request.attention:
            extras = {"attn", "p_gen"}
        else:
            extras = {"p_gen"} if request.p_gen else set()
        if replace_unk:
            extras.add("src_pos")
        recombine = cfg.model.abs_window if (
            dc.fixed_length > 0 and cfg.model.model_type == "abs") else 0
        return cls(
            method=request.method, beam_size=tf.maximum(beam_size, 1),
            max_steps=tf.maximum(max_steps, 1), min_steps=min_steps, feature_weights=weights,
            extractive=dc.extractive,
            constraints=Constraints(vocab_lib.STOP_ID, min_steps=min_steps, unk_id=unk,
                                    block_trigrams=dc.block_trigrams, repeat_exempt=exempt),
            length_penalty=dc.length_penalty, coverage_penalty=dc.coverage_penalty,
            recombine_window=recombine, extras=tuple(sorted(extras)), replace_unk=replace_unk,
            row_buckets=dc.jit_step,
            shortlist=dc.shortlist if request.shortlist is None else request.shortlist)

    @property
    def hypotheses(self):
        """Hypotheses an article: 1 for greedy search, else the beam size."""
        return 1 if self.method == "greedy" else self.beam_size

    @property
    def rescores(self) -> bool:
        """Whether the model's step is wrapped by Rush et al.'s ABS+ features / extractive
        restriction (decoding/features.py)."""
        return self.feature_weights is not None or self.extractive

    @property
    def mixture(self) -> bool:
        """Whether a pointer model's step may hand over its distribution in parts
        (layers.pointer.Mixture): the beam search scores it so; greedy search and the
        rescoring features read it whole."""
        return not (self.method == "greedy" or self.rescores)

    def run(self, step_fn, state, *, batch_size, src_len, source_ids=None) -> dict:
        """Runs the search from `state` (tiled to `hypotheses` an article) and returns the
        search's dict (ids, length, score, and the extras asked for). source_ids: int32
        [B, L] the article's extended ids, -1 past its end (what the rescoring features
        match against; needed when `rescores`)."""
        if self.rescores:
            step_fn = features_lib.rescoring_step_fn(step_fn, vocab_lib.STOP_ID,
                                                     self.feature_weights, self.extractive)
            state = features_lib.initial_state(state, tile_beams(source_ids, self.hypotheses),
                                               vocab_lib.PAD_ID)
        if self.method == "greedy":
            return greedy.search(step_fn, state, batch_size=batch_size,
                                 max_steps=self.max_steps, start_id=vocab_lib.START_ID,
                                 constraints=self.constraints, return_src_pos=self.replace_unk)
        return beam_search(
            step_fn, state, batch_size=batch_size, beam_size=self.beam_size,
            max_steps=self.max_steps, start_id=vocab_lib.START_ID, constraints=self.constraints,
            length_penalty=self.length_penalty, return_extras=self.extras, src_len=src_len,
            coverage_penalty=self.coverage_penalty, recombine_window=self.recombine_window,
            row_buckets=self.row_buckets)
