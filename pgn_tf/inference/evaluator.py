"""The one evaluator: decode examples with the one batched decode (`SummarizerAPI.decode`) and
score them (pgn_tf.metrics), returning an `Evaluation`.

    decode_and_score(summarizer, EvalSet.prepare(examples, cfg.data), request) -> Evaluation
    score_summaries(decoded, evalset, system=...) -> Evaluation     # a baseline, a file
    evaluate(source, data, limit=..., output_dir=...) -> Evaluation  # from paths

A source says what is scored: ModelDirSource (a model dir's checkpoint), ExportSource (an
export), BaselineSource (lead, lead_blocks) or DecodedFileSource (summaries already written);
each holds only the options that apply to it, checked when it is made.

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
from pgn_tf.metrics import fluency
from pgn_tf.metrics.scoring import (
    BASELINES,
    article_blocks,
    fit_reference_lm,
    fluency_scores,
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
                    rouge_recall_bytes: int | None = None,
                    lm: fluency.KneserNeyLM | None = None) -> Evaluation:
    """Scores summaries (token lists, in the order of evalset's examples): ROUGE with
    bootstrap intervals, repetition and novelty (pgn_tf.metrics.scoring), a digest's blocks
    (pgn_tf.metrics.digests, over the first max_enc_steps article tokens), and with lm (a
    model of the training references, scoring.fit_reference_lm) fluency: the outputs'
    perplexity beside the references' own, each row's score kept for paired tests."""
    metrics = {"system": system, "examples": len(evalset.examples)}
    metrics.update(score(decoded, evalset.references, evalset.articles, bootstrap,
                         rouge_recall_bytes))
    fluent = fluency_scores(lm, decoded) if lm else [None] * len(decoded)
    if lm:
        metrics["fluency_ppl"] = round(fluency.perplexity(fluent), 3)
        metrics["reference_fluency_ppl"] = round(fluency.perplexity(
            fluency_scores(lm, [r.split() for r in evalset.references])), 3)
    digest, per_digest = digest_metrics.score(
        decoded, evalset.references, [[len(x) for x in b] if b else None for b in evalset.blocks],
        max_enc_steps)
    metrics.update(digest)
    rows = []
    for ex, d, r, g, f in zip(evalset.examples, decoded, evalset.references, per_digest,
                              fluent):
        row = {"id": ex.id, "decoded": " ".join(d), "reference": r}
        if f:  # the summary's fluency, for paired tests (metrics.significance)
            row.update(fluency_nll=round(f[0], 4), fluency_tokens=f[1])
        if g:  # a digest's counts, for paired tests (digests.per_example_shares)
            row.update(blocks=g["blocks"], blocks_matched=g["matched"],
                       sentences=g["sentences"], repeated_sentences=g["repeated"])
        rows.append(row)
    return Evaluation(metrics, rows, decoded)


def decode_and_score(summarizer: SummarizerAPI, evalset: EvalSet,
                     request: DecodeRequest | None = None, *, batch_size: int | None = None,
                     bootstrap: int = 1000, rouge_recall_bytes: int | None = None,
                     lm: fluency.KneserNeyLM | None = None,
                     verbose: int | None = 0) -> Evaluation:
    """The one decode-and-score: evalset's articles decoded by `summarizer` (either
    SummarizerAPI; request: the decoding asked of it, default the config's), sorted by their
    token counts, then scored (score_summaries) with the model's own measures: [UNK]s before
    decode.replace_unk, mean p_gen, speed. bootstrap: resamples of the ROUGE intervals (0:
    plain means, as tuning and validation use); lm: the fluency model, as score_summaries'."""
    request = request or DecodeRequest()
    pointer = summarizer.pointer_gen
    out = decode_split(summarizer, evalset.examples, batch_size=batch_size,
                       request=dataclasses.replace(request, p_gen=pointer),
                       lengths=[len(a) for a in evalset.articles], verbose=verbose)
    result = score_summaries(out.tokens, evalset, summarizer.cfg.data.max_enc_steps,
                             system="model", bootstrap=bootstrap,
                             rouge_recall_bytes=rouge_recall_bytes, lm=lm)
    m = result.metrics
    m["raw_unk_outputs_pct"] = share_pct(["[UNK]" in t for t in out.raw_tokens])
    if pointer and out.p_gen:
        m["mean_p_gen"] = round(float(np.nanmean(out.p_gen)), 4)
    if out.seconds:
        m["decode_seconds"] = round(out.seconds, 2)
        m["articles_per_sec"] = round(len(evalset.examples) / out.seconds, 2)
        m["beam_size"] = request.beam_size or summarizer.cfg.decode.beam_size
    return result


def _overrides(value: Sequence[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise UserError(f"overrides are a list of 'section.key=value' strings, not one string "
                        f"('{value}')")
    return tuple(value)


def _at_least_one(**values: int | None) -> None:
    for name, value in values.items():
        if value is not None and value < 1:
            raise UserError(f"{name} must be at least 1, got {value}")


def _scoring_config(model_dir: str | None, overrides: Sequence[str]) -> config_lib.Config:
    cfg = config_lib.load_from_model_dir(model_dir) if model_dir else config_lib.Config()
    return config_lib.apply_overrides(cfg, list(overrides))  # data.*: the tokenizer, the cut


@dataclasses.dataclass(frozen=True)
class ModelDirSource:
    """A trained model dir, decoded in process: how well a checkpoint summarizes, with its
    perplexity. It decodes with the dir's config and the ABS+ weights `python -m pgn_tf.tune`
    wrote there; overrides ("decode.key=value") change the decoding, never what the model was
    trained with. checkpoint: best, latest or a checkpoint path; beam_size, batch_size:
    decoding's (default the config's)."""

    path: str
    checkpoint: str = "best"
    overrides: tuple[str, ...] = ()
    beam_size: int | None = None
    batch_size: int | None = None

    def __post_init__(self) -> None:
        if not self.path:
            raise UserError("a model dir source needs the model dir's path")
        if not self.checkpoint:
            raise UserError("checkpoint is best, latest or a checkpoint path, not empty")
        object.__setattr__(self, "overrides", _overrides(self.overrides))
        _at_least_one(beam_size=self.beam_size, batch_size=self.batch_size)

    def summarizer(self) -> SummarizerAPI:
        """The dir's model under its decoding config and the overrides."""
        return Summarizer.from_model_dir(self.path, self.checkpoint, list(self.overrides),
                                         "evaluate (of a model)")

    def request(self) -> DecodeRequest:
        """The decoding asked of it: the config's, with beam_size where given."""
        return DecodeRequest(beam_size=self.beam_size)


@dataclasses.dataclass(frozen=True)
class ExportSource:
    """An export's version dir (pgn_tf.saved_model.export): the summaries it would serve, from
    its summarize_verbose signature, to check an export before it is pushed. Its decoding, beam
    size included, is fixed in its graph, so it takes no overrides; it holds no training graph,
    so it gets no perplexity. batch_size: articles a call (default the config's)."""

    path: str
    batch_size: int | None = None

    def __post_init__(self) -> None:
        if not self.path:
            raise UserError("an export source needs the export's version dir")
        _at_least_one(batch_size=self.batch_size)

    def summarizer(self) -> SummarizerAPI:
        """The export's signatures behind the SummarizerAPI calls."""
        return Summarizer.from_saved_model(self.path)

    def request(self) -> DecodeRequest:
        """The decoding asked of it: none beyond the export's own."""
        return DecodeRequest()


@dataclasses.dataclass(frozen=True)
class BaselineSource:
    """A baseline that needs no model, the floor a model must beat: "lead" (an article's first
    lead_sentences sentences, 3 unless lead_words is given, or its first lead_words words) or
    "lead_blocks" (a digest's first sentence of each block the model would read). model_dir:
    whose config tokenizes and cuts the data (default: the default config); overrides:
    "section.key=value" on that config (data.*, decode.*)."""

    name: str
    lead_sentences: int | None = None
    lead_words: int | None = None
    model_dir: str | None = None
    overrides: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.name not in BASELINES:
            raise UserError(f"unknown baseline '{self.name}' ({', '.join(BASELINES)})")
        given = [k for k in ("lead_sentences", "lead_words") if getattr(self, k) is not None]
        if self.name == "lead_blocks" and given:
            raise UserError(f"the lead_blocks baseline takes each block's first sentence: "
                            f"give it no {' or '.join(given)}")
        if len(given) == 2:
            raise UserError("give the lead baseline lead_sentences or lead_words, not both")
        _at_least_one(lead_sentences=self.lead_sentences, lead_words=self.lead_words)
        if self.name == "lead" and not given:
            object.__setattr__(self, "lead_sentences", 3)
        object.__setattr__(self, "overrides", _overrides(self.overrides))

    @property
    def system(self) -> str:
        """The name its metrics carry: lead_blocks, lead3 (sentences) or lead8w (words)."""
        if self.name == "lead_blocks":
            return "lead_blocks"
        return f"lead{self.lead_words}w" if self.lead_words else f"lead{self.lead_sentences}"

    def config(self) -> config_lib.Config:
        """The config whose data section tokenizes the articles and references."""
        return _scoring_config(self.model_dir, self.overrides)

    def summaries(self, evalset: EvalSet, data: config_lib.DataConfig) -> list[list[str]]:
        """Each example's baseline summary as tokens."""
        if self.name == "lead":
            return [lead(a, self.lead_sentences, self.lead_words) for a in evalset.articles]
        if not any(evalset.blocks):
            raise UserError("the lead_blocks baseline needs digests (articles of blocks between "
                            "blank lines, one summary line per block); these examples have none")
        return [lead_blocks(b, data.max_enc_steps) if b else lead(a, 1, None)
                for a, b in zip(evalset.articles, evalset.blocks)]


@dataclasses.dataclass(frozen=True)
class DecodedFileSource:
    """Summaries another system wrote: a file of one summary a line, in the data's order (.gz
    read compressed), retokenized with this project's tokenizer so that every measure is the
    one a model gets. model_dir, overrides: as BaselineSource's."""

    path: str
    model_dir: str | None = None
    overrides: tuple[str, ...] = ()

    system = "decoded"

    def __post_init__(self) -> None:
        if not self.path:
            raise UserError("a decoded file source needs the file's path")
        object.__setattr__(self, "overrides", _overrides(self.overrides))

    def config(self) -> config_lib.Config:
        """The config whose data section tokenizes the summaries and references."""
        return _scoring_config(self.model_dir, self.overrides)

    def summaries(self, evalset: EvalSet, data: config_lib.DataConfig) -> list[list[str]]:
        """The file's first lines, one per example, as tokens."""
        return tokenize_texts(read_decoded_file(self.path, len(evalset.examples)), data)


Source = ModelDirSource | ExportSource | BaselineSource | DecodedFileSource


def evaluate(source: Source, data: str, *, data_format: str | None = None,
             limit: int | None = None, output_dir: str | None = None, bootstrap: int = 1000,
             rouge_recall_bytes: int | None = None, fluency_data: str | None = None,
             progress: bool = True) -> Evaluation:
    """Scores the summaries `source` gives for `data`: ROUGE with bootstrap intervals,
    repetition, novelty, the digests' blocks. A model dir or an export decodes
    (decode_and_score; perplexity too for a model dir); a baseline or a file is scored as it
    is (score_summaries).

    Args:
      source: a ModelDirSource, ExportSource, BaselineSource or DecodedFileSource.
      data: any pgn_tf data path (data_format: detected when None); limit: its first N examples.
      output_dir: where decoded.jsonl, decoded.txt, reference.txt and metrics_NAME.json go
        (default <model dir>/eval_<data name> where the source names a model dir; none without).
      bootstrap: resamples of the confidence intervals (0: none);
      rouge_recall_bytes: also ROUGE recall of summaries cut to N bytes (DUC: 75).
      fluency_data: a training split (any pgn_tf data path, its format detected) whose
        reference summaries fit the fluency model (scoring.fit_reference_lm): the outputs'
        perplexity under it is reported as fluency_ppl; None: no fluency.
      progress: a progress bar over the decoding.
    Raises UserError for a bad path or data the source cannot score.
    """
    scoring = {"bootstrap": bootstrap, "rouge_recall_bytes": rouge_recall_bytes}
    if isinstance(source, (BaselineSource, DecodedFileSource)):
        cfg = source.config()
        scoring["lm"] = fit_reference_lm(read_split(fluency_data, None, None), cfg.data) \
            if fluency_data else None
        evalset = EvalSet.prepare(read_split(data, data_format, limit), cfg.data)
        result = score_summaries(source.summaries(evalset, cfg.data), evalset,
                                 cfg.data.max_enc_steps, system=source.system, **scoring)
    elif isinstance(source, (ModelDirSource, ExportSource)):
        summarizer = source.summarizer()
        scoring["lm"] = fit_reference_lm(read_split(fluency_data, None, None),
                                         summarizer.cfg.data) if fluency_data else None
        examples = read_split(data, data_format, limit)
        evalset = EvalSet.prepare(examples, summarizer.cfg.data)
        result = decode_and_score(summarizer, evalset, source.request(),
                                  batch_size=source.batch_size, verbose=1 if progress else 0,
                                  **scoring)
        if isinstance(source, ModelDirSource):
            result.metrics["perplexity"] = round(perplexity(
                summarizer.model, summarizer.vocab, summarizer.cfg, examples), 3)
    else:
        raise TypeError(f"evaluate takes a ModelDirSource, ExportSource, BaselineSource or "
                        f"DecodedFileSource, not {type(source).__name__}")
    write_evaluation(result, evalset, output_dir or default_output_dir(source, data))
    return result


def default_output_dir(source: Source, data: str) -> str | None:
    """<model dir>/eval_<data name> where the source names a model dir; None where it does not
    (an export, a baseline or a file scored under the default config)."""
    if isinstance(source, ExportSource):
        return None
    model_dir = source.path if isinstance(source, ModelDirSource) else source.model_dir
    if not model_dir:
        return None
    return os.path.join(model_dir, "eval_" + os.path.basename(data.rstrip("/")).split(".")[0])


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
