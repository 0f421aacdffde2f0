"""The evaluation library: `evaluate(data, model_dir=... | saved_model=..., ...) -> Evaluation`
decodes a split with the one batched decode (`SummarizerAPI.decode`) and scores it
(pgn_tf.scoring), or scores a baseline or another system's summaries the same way. The command
`python -m pgn_tf.evaluate` parses its flags and calls it.
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
from pgn_tf import digest_metrics, objectives
from pgn_tf.data import dataset, jsonl
from pgn_tf.data.dataset import read_split
from pgn_tf.data.example import Example
from pgn_tf.inference import Summarizer, SummarizerAPI
from pgn_tf.scoring import (
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

    @tf.function(reduce_retracing=True)  # batches are padded to their own lengths
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


@dataclasses.dataclass
class Evaluation:
    """What `evaluate` returns: the metrics (the JSON line `python -m pgn_tf.evaluate` prints)
    and one row per example (id, decoded, reference; a digest's block counts), in the data's
    order."""

    metrics: dict
    rows: list[dict]


@dataclasses.dataclass
class Decoding:
    """A split decoded by `decode_split`, in the order of its examples."""

    tokens: list[list[str]]  # the output tokens (after decode.replace_unk)
    raw_tokens: list[list[str]]  # the same before replace_unk
    p_gen: list[float]  # each summary's mean p_gen (nan without a pointer)
    seconds: float  # the decoding's wall-clock time


def decode_split(summarizer: SummarizerAPI, examples: Sequence[Example], *,
                 batch_size: int | None = None, beam_size: int | None = None,
                 p_gen: bool = False, lengths: Sequence[int] | None = None,
                 verbose: int | None = 0) -> Decoding:
    """examples' articles through `summarizer.decode` (the one batched decode) with their
    tokens; a progress bar counts the articles (verbose None: when stdout is a terminal)."""
    bar = progress_lib.progbar(len(examples), "article", verbose, interval=5.0)
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        bar.update(done)

    t0 = time.perf_counter()
    rows = summarizer.decode([e.article for e in examples], batch_size, advance,
                             beam_size=beam_size, tokens=True, p_gen=p_gen, lengths=lengths)
    seconds = time.perf_counter() - t0
    return Decoding([r["tokens"] for r in rows], [r["raw_tokens"] for r in rows],
                    [r.get("p_gen", float("nan")) for r in rows], seconds)


def evaluate(data: str, model_dir: str | None = None, *, saved_model: str | None = None,
             data_format: str | None = None, limit: int | None = None,
             beam_size: int | None = None, batch_size: int | None = None,
             output_dir: str | None = None, checkpoint: str = "best",
             overrides: Sequence[str] = (), baseline: str | None = None,
             decoded: str | None = None, lead_sentences: int = 3, lead_words: int | None = None,
             bootstrap: int = 1000, rouge_recall_bytes: int | None = None,
             progress: bool = True) -> Evaluation:
    """Scores a model's summaries of `data` (decoded here by `SummarizerAPI.decode`), a
    baseline's, or a file's (ROUGE with bootstrap intervals, repetition, novelty, the
    digests' blocks; perplexity and p_gen for a model).

    Args:
      data: any pgn_tf data path; limit: its first N examples.
      model_dir: the model (its `checkpoint`: best, latest or a path); overrides:
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
    no_model = bool(baseline or decoded_file)
    summarizer: SummarizerAPI | None = None
    if no_model:
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
        summarizer = Summarizer.from_model_dir(model_dir, checkpoint)
        cfg = summarizer.cfg
        config_lib.apply_decode_overrides(cfg, list(overrides), "evaluate (of a model)")
    examples = read_split(data, data_format, limit)
    art_tokens = tokenize_texts([e.article for e in examples], cfg.data)
    references = [reference_text(e.summary, cfg.data) for e in examples]
    blocks = article_blocks(examples, references, cfg.data)
    pgens: list[float] = []
    if decoded_file:
        decoded = tokenize_texts(read_decoded_file(decoded_file, len(examples)), cfg.data)
        seconds = 0.0
        name = "decoded"
    elif baseline == "lead_blocks":
        if not any(blocks):
            raise UserError(f"--baseline lead_blocks needs digests (articles of blocks between "
                            f"blank lines, one summary line per block); {data} has none")
        decoded = [lead_blocks(b, cfg.data.max_enc_steps) if b else lead(a, 1, None)
                   for a, b in zip(art_tokens, blocks)]
        seconds = 0.0
        name = "lead_blocks"
    elif baseline:
        words = lead_words
        sentences = None if words is not None else lead_sentences
        decoded = [lead(a, sentences, words) for a in art_tokens]
        seconds = 0.0
        name = f"lead{words}w" if words is not None else f"lead{sentences}"
    else:
        out = decode_split(summarizer, examples, batch_size=batch_size, beam_size=beam_size,
                           p_gen=cfg.model.pointer_gen, lengths=[len(a) for a in art_tokens],
                           verbose=1 if progress else 0)
        decoded, raw, seconds = out.tokens, out.raw_tokens, out.seconds
        pgens = out.p_gen if cfg.model.pointer_gen else []
        name = "model"
    metrics = {"system": name, "examples": len(examples)}
    metrics.update(score(decoded, references, art_tokens, bootstrap,
                         rouge_recall_bytes))
    digest, per_digest = digest_metrics.score(
        decoded, references, [[len(x) for x in b] if b else None for b in blocks],
        cfg.data.max_enc_steps)
    metrics.update(digest)
    if summarizer is not None:
        metrics["raw_unk_outputs_pct"] = share_pct(["[UNK]" in t for t in raw])
        if not saved_model:
            metrics["perplexity"] = round(perplexity(summarizer.model, summarizer.vocab, cfg,
                                                     examples), 3)
    if pgens:
        metrics["mean_p_gen"] = round(float(np.nanmean(pgens)), 4)
    if seconds:
        metrics["decode_seconds"] = round(seconds, 2)
        metrics["articles_per_sec"] = round(len(examples) / seconds, 2)
        metrics["beam_size"] = beam_size or cfg.decode.beam_size
    out_dir = output_dir or (
        os.path.join(model_dir, "eval_" + os.path.basename(data.rstrip("/")).split(".")[0])
        if model_dir else None)
    rows = []
    for ex, d, r, g in zip(examples, decoded, references, per_digest):
        row = {"id": ex.id, "decoded": " ".join(d), "reference": r}
        if g:  # a digest's counts, for paired tests (digest_metrics.per_example_shares)
            row.update(blocks=g["blocks"], blocks_matched=g["matched"],
                       sentences=g["sentences"], repeated_sentences=g["repeated"])
        rows.append(row)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "decoded.jsonl"), "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
        with open(os.path.join(out_dir, "decoded.txt"), "w") as f:
            f.writelines(" ".join(d) + "\n" for d in decoded)
        with open(os.path.join(out_dir, "reference.txt"), "w") as f:
            f.writelines(r.replace("\n", " ") + "\n" for r in references)
        with open(os.path.join(out_dir, f"metrics_{name}.json"), "w") as f:
            json.dump(metrics, f, indent=2)
        metrics["output_dir"] = out_dir
    return Evaluation(metrics, rows)
