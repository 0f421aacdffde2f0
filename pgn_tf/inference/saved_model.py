"""The SummarizerAPI over an exported SavedModel: the same calls as the in-process Summarizer,
run by the export's signatures (pgn_tf.saved_model.contract names them)."""

from __future__ import annotations

import json
import os

import numpy as np
import tensorflow as tf

from pgn_tf import config as config_lib
from pgn_tf.decoding.search import DecodeRequest
from pgn_tf.inference.api import SummarizerAPI
from pgn_tf.saved_model import contract
from pgn_tf.utils.errors import UserError

_BATCH_KEYS = ("summaries", "scores")
_VERBOSE_KEYS = ("summaries", "scores", "tokens", "attention", "p_gen")


class SavedModelSummarizer(SummarizerAPI):
    """The SummarizerAPI over an exported SavedModel (`Summarizer.from_saved_model(path)`): its
    serving_default, summarize_options (a request's beam size) and summarize_verbose (decode's
    tokens and p_gen, explain) signatures, whose batch dimension is already dynamic (nothing to
    trace). Reads the export's assets.extra/config.json for the decode batch size and the
    tokenizer settings. The export's search is fixed in its graph: a request may change its
    beam size (summarize_options) and, in an export decoding with a vocabulary shortlist, the
    shortlist (0: the full vocabulary), and nothing else."""

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
        # a shortlisted export's summarize_options takes the request's K
        self.takes_shortlist = contract.SHORTLIST in self.options.structured_input_signature[1]

    @staticmethod
    def _check(request: DecodeRequest, what: str) -> None:
        fixed = {"max_steps": request.max_steps, "min_steps": request.min_steps,
                 "feature_weights": request.feature_weights}
        asked = [k for k, v in fixed.items() if v is not None]
        if request.method != "beam":
            asked.append("method")
        if asked:
            raise UserError(f"an export's decoding is fixed in its graph: leave "
                            f"{', '.join(asked)} out (python -m pgn_tf.export --set ...)")
        for name, value in (("beam_size", request.beam_size), ("shortlist", request.shortlist)):
            if value is not None and what:
                raise UserError(f"an export's {what} come from its summarize_verbose signature, "
                                f"which decodes with the export's {name}: leave {name} out")

    def _run_batch(self, articles: list[str], request: DecodeRequest) -> dict:
        batch = tf.constant(articles, tf.string)
        if request.tokens or request.p_gen:
            self._check(request, "tokens")
            out = {k: v.numpy() for k, v in self.verbose(**{contract.ARTICLES: batch}).items()}
            out["length"] = np.sum(out["tokens"] != b"", axis=1).astype(np.int32)
            return out
        self._check(request, "")
        if request.beam_size is not None or request.shortlist is not None:
            dc = self.cfg.decode
            scalars = {contract.BEAM_SIZE: request.beam_size or dc.beam_size,
                       contract.MAX_DECODE_STEPS: dc.max_dec_steps,
                       contract.MIN_DECODE_STEPS: dc.min_dec_steps}
            if self.takes_shortlist:
                scalars[contract.SHORTLIST] = (dc.shortlist if request.shortlist is None
                                               else request.shortlist)
            elif request.shortlist is not None:
                raise UserError(f"{self.path} decodes over the full vocabulary (exported "
                                f"without decode.shortlist): leave shortlist out, or export "
                                f"with --set decode.shortlist=K")
            out = self.options(**{contract.ARTICLES: batch},
                               **{k: tf.constant(v, tf.int32) for k, v in scalars.items()})
        else:
            out = self.serve(**{contract.ARTICLES: batch})
        return {k: out[k].numpy() for k in _BATCH_KEYS}

    def _run_verbose(self, article: str, request: DecodeRequest) -> dict:
        self._check(request, "explanations")
        out = self.verbose(**{contract.ARTICLES: tf.constant([article], tf.string)})
        return {k: out[k].numpy() for k in _VERBOSE_KEYS if k in out}
