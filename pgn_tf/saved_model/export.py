"""The export: a SavedModel at BASE/NAME/VERSION/ for TF Serving: raw text in, summary out, with
tokenization, vocab lookup, OOV mapping, beam search and detokenization inside the graph.

Signatures:
  serving_default      articles string [batch] -> summaries string [batch], scores float [batch]
  summarize_verbose    articles -> summaries, scores, tokens [batch, dec], attention
                       [batch, dec, enc], p_gen [batch, dec], raw_summaries and raw_tokens
                       (the output before decode.replace_unk)
  summarize_options    articles, beam_size, max_decode_steps, min_decode_steps (int32 scalars)
                       -> summaries, scores; an export decoding with a vocabulary shortlist
                       (decode.shortlist = K > 0) takes a fifth, shortlist: the request's K,
                       0 for the full vocabulary (the same summaries as an export without
                       one). TF Serving requires every input of a signature, so
                       the tunable scalars live in their own signature and serving_default
                       uses the checkpoint config's defaults. The scalars are capped
                       (`options_max_beam_size`, `options_max_decode_steps`): the graph
                       checks them (InvalidArgumentError, which a server answers with
                       INVALID_ARGUMENT) and the serving contract lists the caps so a server
                       can refuse a request before running it.
The serving contract (pgn_tf.saved_model.contract: signature and input names, the caps, the
decoding defaults that size a server's work budget) is stored inside the SavedModel, where a copy
of only saved_model.pb and variables/ keeps it; assets.extra/config.json (the resolved config,
read by pipelines and SavedModelSummarizer) and assets.extra/vocab.txt are written for other
tools. assets.extra/tf_serving_warmup_requests holds one PredictionLog per signature (TF
Serving's warm-up file format): a server replays them before it marks the version AVAILABLE.
The export is written to a temp dir, checked (reloaded and compared with in-process decoding,
and every op of its graphs found in core TensorFlow's registry and free of Python:
pgn_tf.saved_model.graph_check), then renamed into place, so a server polling BASE/NAME never
sees half a model. The command line is `python -m pgn_tf.export` (pgn_tf/export.py).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable

import keras
import tensorflow as tf

from pgn_tf.decoding.search import DecodeRequest
from pgn_tf.inference.summarizer import Summarizer
from pgn_tf.saved_model import contract as contract_lib
from pgn_tf.saved_model import graph_check
from pgn_tf.saved_model.contract import (
    ARTICLES,
    BEAM_SIZE,
    MAX_DECODE_STEPS,
    MIN_DECODE_STEPS,
    SERVING_DEFAULT,
    SHORTLIST,
    SIGNATURE_INPUTS,
    SUMMARIZE_OPTIONS,
    SUMMARIZE_VERBOSE,
)
from pgn_tf.utils.errors import UserError

CHECK_ARTICLES = [
    "the council said on monday that the bridge near the station would be repaired .",
    "",
    "zorblax , a pilot from quenton , sold 5512 boxes of apples on friday .",
]


DEFAULT_MAX_BEAM_SIZE = 16
DEFAULT_MAX_DECODE_STEPS = 400
WARMUP_ARTICLE = CHECK_ARTICLES[2]


def option_limits(cfg, max_beam_size: int | None = None,
                  max_decode_steps: int | None = None) -> dict:
    """{input: (low, high)} of summarize_options' scalars: the caps default to 16 beams and 400
    steps, raised to the export's own decode defaults if those are higher. With a shortlist
    (decode.shortlist > 0), its K from 0 (the full vocabulary) to the vocabulary's size: no K
    costs more than the full vocabulary does."""
    dc = cfg.decode
    beam = max_beam_size or max(DEFAULT_MAX_BEAM_SIZE, dc.beam_size)
    steps = max_decode_steps or max(DEFAULT_MAX_DECODE_STEPS, dc.max_dec_steps)
    if beam < 1 or steps < 1:
        raise UserError(f"options caps must be positive, got beam {beam}, steps {steps}")
    limits = {BEAM_SIZE: (1, beam), MAX_DECODE_STEPS: (1, steps), MIN_DECODE_STEPS: (0, steps)}
    if dc.shortlist:
        limits[SHORTLIST] = (0, cfg.data.vocab_size)
    return limits


def serving_contract(cfg, limits: dict) -> contract_lib.ServingContract:
    """What the export promises its server: the decoding defaults serving_default and
    summarize_verbose bake in (decode.fixed_length, when set, is the steps every signature
    runs: Summarizer.summarize), and summarize_options' caps (option_limits())."""
    dc = cfg.decode
    signatures = dict(SIGNATURE_INPUTS)
    signatures[SUMMARIZE_OPTIONS] = (ARTICLES, *limits)
    return contract_lib.ServingContract(
        beam_size=dc.beam_size, max_decode_steps=dc.fixed_length or dc.max_dec_steps,
        input_limits={SUMMARIZE_OPTIONS: limits}, signatures=signatures)


def _checked_options(limits: dict, values: dict) -> dict:
    """The scalars ({input: int32 scalar}, one for each of `limits`), each passed through an
    assertion of its (low, high) range and of min <= max, so decoding cannot start on an
    out-of-range request."""
    min_decode_steps, max_decode_steps = values[MIN_DECODE_STEPS], values[MAX_DECODE_STEPS]
    asserts = [tf.debugging.Assert(tf.logical_and(v >= limits[k][0], v <= limits[k][1]),
                                   [f"{k} must be between {limits[k][0]} and {limits[k][1]}, got",
                                    v], name=f"check_{k}")
               for k, v in values.items()]
    asserts.append(tf.debugging.Assert(
        min_decode_steps <= max_decode_steps,
        ["min_decode_steps must be at most max_decode_steps, got", min_decode_steps, "and",
         max_decode_steps], name="check_min_le_max"))
    with tf.control_dependencies(asserts):
        return {k: tf.identity(v) for k, v in values.items()}


def write_warmup_requests(path: str, name: str, cfg, limits: dict) -> None:
    """TF Serving's warm-up file: a TFRecord of PredictionLog protos, one small request per
    signature."""
    from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

    dc = cfg.decode
    scalars = {BEAM_SIZE: dc.beam_size, MAX_DECODE_STEPS: dc.max_dec_steps,
               MIN_DECODE_STEPS: dc.min_dec_steps, SHORTLIST: dc.shortlist}
    scalars = {k: min(max(scalars[k], low), high) for k, (low, high) in limits.items()}
    with tf.io.TFRecordWriter(path) as writer:
        for sig in (SERVING_DEFAULT, SUMMARIZE_VERBOSE, SUMMARIZE_OPTIONS):
            req = predict_pb2.PredictRequest()
            req.model_spec.name = name
            req.model_spec.signature_name = sig
            req.inputs[ARTICLES].CopyFrom(tf.make_tensor_proto([WARMUP_ARTICLE.encode()]))
            if sig == SUMMARIZE_OPTIONS:
                for k, v in scalars.items():
                    req.inputs[k].CopyFrom(tf.make_tensor_proto(v, dtype=tf.int32))
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=req))
            writer.write(log.SerializeToString())


def build_archive(summarizer: Summarizer, limits: dict | None = None) -> keras.export.ExportArchive:
    """limits: option_limits() of summarize_options (default: from the summarizer's config).
    The archive holds the serving contract (serving_contract(): pgn_tf.saved_model.contract)."""
    limits = limits or option_limits(summarizer.cfg)
    archive = keras.export.ExportArchive()
    archive.track(summarizer.model)
    archive.track(summarizer.table)
    contract_lib.attach(archive, serving_contract(summarizer.cfg, limits))
    articles = tf.TensorSpec([None], tf.string, name=ARTICLES)
    scalar = lambda name: tf.TensorSpec([], tf.int32, name=name)  # noqa: E731

    @tf.function(input_signature=[articles], autograph=False)
    def serve(articles):
        out = summarizer.summarize(articles)
        return {"summaries": out["summaries"], "scores": out["scores"]}

    @tf.function(input_signature=[articles], autograph=False)
    def verbose(articles):
        out = summarizer.summarize(articles, DecodeRequest(attention=True))
        return {k: out[k] for k in ("summaries", "scores", "tokens", "attention", "p_gen",
                                    "raw_summaries", "raw_tokens")}

    def summarize_with(articles, **scalars):
        v = _checked_options(limits, scalars)
        out = summarizer.summarize(articles, DecodeRequest(
            beam_size=v[BEAM_SIZE], max_steps=v[MAX_DECODE_STEPS],
            min_steps=v[MIN_DECODE_STEPS], shortlist=v.get(SHORTLIST)))
        return {"summaries": out["summaries"], "scores": out["scores"]}

    option_specs = [articles, scalar(BEAM_SIZE), scalar(MAX_DECODE_STEPS),
                    scalar(MIN_DECODE_STEPS)]
    if SHORTLIST in limits:  # the signature's inputs are its function's argument names
        @tf.function(input_signature=[*option_specs, scalar(SHORTLIST)], autograph=False)
        def options(articles, beam_size, max_decode_steps, min_decode_steps, shortlist):
            return summarize_with(articles, beam_size=beam_size, shortlist=shortlist,
                                  max_decode_steps=max_decode_steps,
                                  min_decode_steps=min_decode_steps)
    else:
        @tf.function(input_signature=option_specs, autograph=False)
        def options(articles, beam_size, max_decode_steps, min_decode_steps):
            return summarize_with(articles, beam_size=beam_size,
                                  max_decode_steps=max_decode_steps,
                                  min_decode_steps=min_decode_steps)

    archive.add_endpoint(SERVING_DEFAULT, serve)
    archive.add_endpoint(SUMMARIZE_VERBOSE, verbose)
    archive.add_endpoint(SUMMARIZE_OPTIONS, options)
    return archive


def verify(path: str, summarizer: Summarizer, articles: list[str]) -> None:
    """Reloads the export and checks it returns what in-process decoding returns, and that its
    serving contract reads back and describes its signatures."""
    loaded = tf.saved_model.load(path)
    contract = contract_lib.from_saved_model(loaded)
    contract.check_signatures({k: fn.structured_input_signature[1]
                               for k, fn in loaded.signatures.items()})
    got = loaded.signatures[SERVING_DEFAULT](**{ARTICLES: tf.constant(articles)})["summaries"]
    want = summarizer.summarize(tf.constant(articles))["summaries"]
    got, want = got.numpy().tolist(), want.numpy().tolist()
    if got != want:
        raise RuntimeError(f"export check failed: SavedModel says {got}, in-process says {want}")


def check_servable(path: str) -> None:
    """UserError naming every op of the export that stock TF Serving cannot run (a py_function,
    a tensorflow-text op: pgn_tf.saved_model.graph_check), before the export is published."""
    bad = graph_check.unservable_ops(path)
    if bad:
        raise UserError(f"the export holds ops TF Serving cannot run: "
                        f"{graph_check.describe(bad)}; nothing was published")


def write_servable(path: str, summarizer, limits: dict, name: str,
                   extra_files: dict[str, Callable[[str], object]] | None = None) -> None:
    """The archive (build_archive) at `path`, with assets.extra/: the warm-up requests of model
    `name`, and each of `extra_files` ({file name: a function writing that path}). Written for
    inference only: no gradient functions in the archive (the encoder's recurrence has a
    written-out backward pass, pgn_tf.ops.lstm_recurrence, whose function reads the forward
    loop's saved activations and cannot be serialized on its own)."""
    build_archive(summarizer, limits).write_out(
        path, options=tf.saved_model.SaveOptions(experimental_custom_gradients=False),
        verbose=False)
    extra = os.path.join(path, "assets.extra")
    os.makedirs(extra, exist_ok=True)
    for file_name, write in (extra_files or {}).items():
        write(os.path.join(extra, file_name))
    write_warmup_requests(os.path.join(extra, "tf_serving_warmup_requests"), name,
                          summarizer.cfg, limits)


def export(model_dir: str, export_base: str, name: str, version: int | None = None,
           which: str = "best", check: bool = True, overrides: list[str] | None = None,
           options_max_beam_size: int | None = None,
           options_max_decode_steps: int | None = None) -> str:
    """Writes the SavedModel; `overrides` ("decode.key=value") change the decoding defaults
    that serving_default bakes in (beam size, min/max steps, trigram blocking, ...; the model
    dir's tuned ABS+ weights, abs_plus.json, unless decode.abs_plus_weights is among them);
    `options_max_*` cap summarize_options' scalar inputs (option_limits)."""
    summarizer = Summarizer.from_model_dir(model_dir, which, overrides or [], "export")
    # TF Serving runs no XLA on the CPU unless told to: the served step stays plain, and the
    # config written beside the graph says so.
    summarizer.cfg.decode.jit_step = False
    limits = option_limits(summarizer.cfg, options_max_beam_size, options_max_decode_steps)
    version = int(version if version is not None else time.time())
    if version <= 0:
        raise UserError(f"--version must be a positive integer, got {version}")
    final = os.path.join(export_base, name, str(version))
    if os.path.exists(final):
        raise UserError(f"{final} already exists; choose another --version")
    os.makedirs(os.path.join(export_base, name), exist_ok=True)
    # A non-numeric name: TF Serving and serving.server ignore it while it is being written.
    tmp = os.path.join(export_base, name, f".tmp-{version}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        vocab = os.path.join(model_dir, "vocab.txt")
        write_servable(tmp, summarizer, limits, name, {
            "config.json": summarizer.cfg.save,  # with the decode overrides
            "vocab.txt": lambda path: shutil.copy(vocab, path)})
        if check:
            verify(tmp, summarizer, CHECK_ARTICLES)
            check_servable(tmp)
        os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
