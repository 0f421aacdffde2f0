"""The one evaluator: decode examples with the one batched decode (`SummarizerAPI.decode`) and
score them (pgn_tf.metrics), returning an `Evaluation`.

    decode_and_score(summarizer, EvalSet.prepare(examples, cfg.data), request) -> Evaluation
    score_summaries(decoded, evalset, system=...) -> Evaluation     # a baseline, a file
    evaluate(data, model_dir=... | saved_model=..., ...) -> Evaluation   # from paths

Everything that scores summaries goes through these: `python -m pgn_tf.evaluate`, the pipeline's
evaluate and bless steps, tune (inference.tuning), validation ROUGE during training
(training.validation) and the research.studies.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from pgn_tf import config as config_lib
from pgn_tf import objectives
from pgn_tf.data import dataset, jsonl
from pgn_tf.data.dataset import read_split
from pgn_tf.data.example import Example
from pgn_tf.decoding.search import DecodeRequest
from pgn_tf.inference.api import SummarizerAPI
from pgn_tf.inference.summarizer import Summarizer
from pgn_tf.metrics import digests as digest_metrics
from pgn_tf.metrics.scoring import (
    BASELINES,
    article_blocks,
    lead,
    lead_blocks,
    reference_text,
    score,
    share_pct,
    tokenize_texts,
)
from pgn_tf.utils import progress as progress_lib
from pgn_tf.utils.errors import UserError


def perplexity(model, vocab, cfg: config_lib.Config, examples: list[Example],
               batch_size: int = 64, verbose: int | None = None) -> float:
    """exp(mean NLL per reference token) under teacher forcing (Rush et al. Table 2): the
    objectives' sequence_nll summed over tokens, divided by the token count. A progress bar
    counts the examples (verbose None: when stdout is a terminal)."""
    records = tf.data.Dataset.from_tensor_slices({
        "article": [e.article for e in examples], "summary": [e.summary for e in examples],
        "id": [e.id for e in examples]})
    ds = dataset.batch_records(records, vocab, cfg.data, batch_size, cfg.model.pointer_gen,
                               training=False, drop_empty=True).map(dataset.model_features)

    @tf.function(reduce_retracing=True, autograph=False)  # batches are padded to their own lengths
    def nll_sum(batch):
        log_p = model.token_log_probs(batch, model(batch, training=False))
        nll = objectives.sequence_nll(log_p, batch["dec_len"], "sum")
        return tf.reduce_sum(nll), tf.reduce_sum(tf.cast(batch["dec_len"], tf.float32))

    total = count = 0.0
    bar, done = progress_lib.progbar(len(examples), "example", verbose), 0
    for batch in ds:
        nll, n = nll_sum(batch)
        total, count = total + float(nll), count + float(n)
        done += int(batch["enc_len"].shape[0])
        bar.update(done)
    bar.update(len(examples), finalize=True)  # examples without a summary are not batched
    return float(np.exp(total / count)) if count else float("nan")


def read_decoded_file(path: str, n: int) -> list[str]:
    """The first n lines of a file of summaries (one a line; .gz read compressed)."""
    if not tf.io.gfile.exists(path):
        raise UserError(f"--decoded {path} does not exist")
    with jsonl.open_lines(path) as f:
        lines = [raw.decode("utf-8", "replace").rstrip("\n") for raw in f]
    if len(lines) < n:
        raise UserError(f"--decoded {path} has {len(lines)} lines for {n} examples")
    return lines[:n]


ROUGE_KEYS = ("rouge1", "rouge2", "rougeLsum")


@dataclasses.dataclass
class EvalSet:
    """Examples made ready to score once (a tuning loop scores them many times): the
    articles' and references' tokens under the model's tokenizer, and a digest's blocks."""

    examples: list[Example]
    articles: list[list[str]]  # each article's tokens
    references: list[str]  # each reference, tokens space-joined, one sentence a line
    blocks: list  # a digest's article blocks as tokens; None for other examples

    @classmethod
    def prepare(cls, examples: Sequence[Example], data: config_lib.DataConfig) -> EvalSet:
        examples = list(examples)
        references = [reference_text(e.summary, data) for e in examples]
        return cls(examples, tokenize_texts([e.article for e in examples], data), references,
                   article_blocks(examples, references, data))


@dataclasses.dataclass
class Evaluation:
    """What the evaluator returns: the metrics (the JSON line `python -m pgn_tf.evaluate`
    prints), one row per example (id, decoded, reference; a digest's block counts) and each
    summary's tokens, in the data's order."""

    metrics: dict
    rows: list[dict]
    decoded: list[list[str]]


@dataclasses.dataclass
class Decoding:
    """A split decoded by `decode_split`, in the order of its examples."""

    tokens: list[list[str]]  # the output tokens (after decode.replace_unk)
    raw_tokens: list[list[str]]  # the same before replace_unk
    p_gen: list[float]  # each summary's mean p_gen (nan without a pointer)
    seconds: float  # the decoding's wall-clock time


def decode_split(summarizer: SummarizerAPI, examples: Sequence[Example], *,
                 batch_size: int | None = None, request: DecodeRequest | None = None,
                 lengths: Sequence[int] | None = None, verbose: int | None = 0) -> Decoding:
    """examples' articles through `summarizer.decode` (the one batched decode) with their
    tokens (request: the decoding asked for; tokens are always returned); a progress bar
    counts the articles (verbose None: when stdout is a terminal)."""
    bar = progress_lib.progbar(len(examples), "article", verbose, interval=5.0)
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        bar.update(done)

    request = dataclasses.replace(request or DecodeRequest(), tokens=True)
    t0 = time.perf_counter()
    rows = summarizer.decode([e.article for e in examples], batch_size, advance,
                             request=request, lengths=lengths)
    seconds = time.perf_counter() - t0
    return Decoding([r["tokens"] for r in rows], [r["raw_tokens"] for r in rows],
                    [r.get("p_gen", float("nan")) for r in rows], seconds)


def score_summaries(decoded: list[list[str]], evalset: EvalSet, max_enc_steps: int, *,
                    system: str, bootstrap: int = 1000,
                    rouge_recall_bytes: int | None = None) -> Evaluation:
    """Scores summaries (token lists, in the order of evalset's examples): ROUGE with
    bootstrap intervals, repetition and novelty (pgn_tf.metrics.scoring), a digest's blocks
    (pgn_tf.metrics.digests, over the first max_enc_steps article tokens)."""
    metrics = {"system": system, "examples": len(evalset.examples)}
    metrics.update(score(decoded, evalset.references, evalset.articles, bootstrap,
                         rouge_recall_bytes))
    digest, per_digest = digest_metrics.score(
        decoded, evalset.references, [[len(x) for x in b] if b else None for b in evalset.blocks],
        max_enc_steps)
    metrics.update(digest)
    rows = []
    for ex, d, r, g in zip(evalset.examples, decoded, evalset.references, per_digest):
        row = {"id": ex.id, "decoded": " ".join(d), "reference": r}
        if g:  # a digest's counts, for paired tests (digests.per_example_shares)
            row.update(blocks=g["blocks"], blocks_matched=g["matched"],
                       sentences=g["sentences"], repeated_sentences=g["repeated"])
        rows.append(row)
    return Evaluation(metrics, rows, decoded)


def decode_and_score(summarizer: SummarizerAPI, evalset: EvalSet,
                     request: DecodeRequest | None = None, *, batch_size: int | None = None,
                     bootstrap: int = 1000, rouge_recall_bytes: int | None = None,
                     verbose: int | None = 0) -> Evaluation:
    """The one decode-and-score: evalset's articles decoded by `summarizer` (either
    SummarizerAPI; request: the decoding asked of it, default the config's), sorted by their
    token counts, then scored (score_summaries) with the model's own measures: [UNK]s before
    decode.replace_unk, mean p_gen, speed. bootstrap: resamples of the ROUGE intervals (0:
    plain means, as tuning and validation use)."""
    request = request or DecodeRequest()
    pointer = summarizer.pointer_gen
    out = decode_split(summarizer, evalset.examples, batch_size=batch_size,
                       request=dataclasses.replace(request, p_gen=pointer),
                       lengths=[len(a) for a in evalset.articles], verbose=verbose)
    result = score_summaries(out.tokens, evalset, summarizer.cfg.data.max_enc_steps,
                             system="model", bootstrap=bootstrap,
                             rouge_recall_bytes=rouge_recall_bytes)
    m = result.metrics
    m["raw_unk_outputs_pct"] = share_pct(["[UNK]" in t for t in out.raw_tokens])
    if pointer and out.p_gen:
        m["mean_p_gen"] = round(float(np.nanmean(out.p_gen)), 4)
    if out.seconds:
        m["decode_seconds"] = round(out.seconds, 2)
        m["articles_per_sec"] = round(len(evalset.examples) / out.seconds, 2)
        m["beam_size"] = request.beam_size or summarizer.cfg.decode.beam_size
    return result


def evaluate(data: str, model_dir: str | None = None, *, saved_model: str | None = None,
             data_format: str | None = None, limit: int | None = None,
             beam_size: int | None = None, batch_size: int | None = None,
             output_dir: str | None = None, checkpoint: str = "best",
             overrides: Sequence[str] = (), baseline: str | None = None,
             decoded: str | None = None, lead_sentences: int = 3, lead_words: int | None = None,
             bootstrap: int = 1000, rouge_recall_bytes: int | None = None,
             progress: bool = True) -> Evaluation:
    """Scores a model's summaries of `data` (decode_and_score), a baseline's, or a file's
    (score_summaries): ROUGE with bootstrap intervals, repetition, novelty, the digests'
    blocks; perplexity and p_gen for a model.

    Args:
      data: any pgn_tf data path; limit: its first N examples.
      model_dir: the model (its `checkpoint`: best, latest or a path), decoding with the ABS+
        weights `python -m pgn_tf.tune` wrote there unless overridden; overrides:
        "section.key=value" on its config: decode.* for a model (what it was trained with
        stays), decode.* and data.* for a baseline or a decoded file.
      saved_model: an export's version dir instead of model_dir: the summaries it serves
        (its summarize_verbose signature; no perplexity: an export holds no training graph).
      baseline: "lead" (lead_sentences, or lead_words) or "lead_blocks"; decoded: a file of
        summaries, one a line; either scores without decoding (model_dir then only gives the
        tokenizer's config).
      beam_size, batch_size: decoding's (default the config's).
      output_dir: where decoded.jsonl, decoded.txt, reference.txt and metrics_NAME.json go
        (default <model_dir>/eval_<data name> with a model dir; none without).
      bootstrap: resamples of the confidence intervals (0: none);
      rouge_recall_bytes: also ROUGE recall of summaries cut to N bytes (DUC: 75).
    Raises UserError for a bad combination or path.
    """
    decoded_file = decoded
    if baseline and baseline not in BASELINES:
        raise UserError(f"unknown baseline '{baseline}' ({', '.join(BASELINES)})")
    if baseline and decoded_file:
        raise UserError("give --baseline or --decoded, not both")
    if saved_model and model_dir:
        raise UserError("give --model_dir or --saved_model, not both")
    summarizer: SummarizerAPI | None = None
    if baseline or decoded_file:
        cfg = config_lib.Config()
        if model_dir:
            cfg = config_lib.load_from_model_dir(model_dir)
        config_lib.apply_overrides(cfg, list(overrides))  # data.* choose the tokenizer and the cut
    elif saved_model:
        if overrides:
            raise UserError("--set does not apply to an export: its decoding is in its graph")
        summarizer = Summarizer.from_saved_model(saved_model)
        cfg = summarizer.cfg
    else:
        if not model_dir:
            raise UserError("--model_dir or --saved_model is required unless --baseline or "
                            "--decoded is given")
        summarizer = Summarizer.from_model_dir(model_dir, checkpoint, list(overrides),
                                               "evaluate (of a model)")
        cfg = summarizer.cfg
    examples = read_split(data, data_format, limit)
    evalset = EvalSet.prepare(examples, cfg.data)
    scoring = {"bootstrap": bootstrap, "rouge_recall_bytes": rouge_recall_bytes}
    if decoded_file:
        summaries = tokenize_texts(read_decoded_file(decoded_file, len(examples)), cfg.data)
        result = score_summaries(summaries, evalset, cfg.data.max_enc_steps, system="decoded",
                                 **scoring)
    elif baseline == "lead_blocks":
        if not any(evalset.blocks):
            raise UserError(f"--baseline lead_blocks needs digests (articles of blocks between "
                            f"blank lines, one summary line per block); {data} has none")
        summaries = [lead_blocks(b, cfg.data.max_enc_steps) if b else lead(a, 1, None)
                     for a, b in zip(evalset.articles, evalset.blocks)]
        result = score_summaries(summaries, evalset, cfg.data.max_enc_steps,
                                 system="lead_blocks", **scoring)
    elif baseline:
        sentences = None if lead_words is not None else lead_sentences
        summaries = [lead(a, sentences, lead_words) for a in evalset.articles]
        name = f"lead{lead_words}w" if lead_words is not None else f"lead{sentences}"
        result = score_summaries(summaries, evalset, cfg.data.max_enc_steps, system=name,
                                 **scoring)
    else:
        result = decode_and_score(summarizer, evalset, DecodeRequest(beam_size=beam_size),
                                  batch_size=batch_size, verbose=1 if progress else 0,
                                  **scoring)
        if not saved_model:
            result.metrics["perplexity"] = round(perplexity(
                summarizer.model, summarizer.vocab, cfg, examples), 3)
    write_evaluation(result, evalset, output_dir or (
        os.path.join(model_dir, "eval_" + os.path.basename(data.rstrip("/")).split(".")[0])
        if model_dir else None))
    return result


def write_evaluation(result: Evaluation, evalset: EvalSet, out_dir: str | None) -> None:
    """decoded.jsonl, decoded.txt, reference.txt and metrics_<system>.json into out_dir (none
    when it is None); the metrics get its path as output_dir."""
    if not out_dir:
        return
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "decoded.jsonl"), "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in result.rows)
    with open(os.path.join(out_dir, "decoded.txt"), "w") as f:
        f.writelines(" ".join(d) + "\n" for d in result.decoded)
    with open(os.path.join(out_dir, "reference.txt"), "w") as f:
        f.writelines(r.replace("\n", " ") + "\n" for r in evalset.references)
    with open(os.path.join(out_dir, f"metrics_{result.metrics['system']}.json"), "w") as f:
        json.dump(result.metrics, f, indent=2)
    result.metrics["output_dir"] = out_dir
