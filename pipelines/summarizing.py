"""The library of `python -m pgn_tf.pipelines.summarize` (`summarize_files`): summarize a corpus with an exported SavedModel on Apache
Beam's RunInference, for corpora that need more than one machine.

    python -m pgn_tf.pipelines.summarize --saved_model BASE/NAME/VERSION \
        --input 'articles-*.jsonl.gz' --output OUT/summaries [--format jsonl|text] \
        [--runner DirectRunner | DaskRunner --dask_client_address HOST:PORT] [Beam options]

The single-machine form is `python -m pgn_tf.summarize --input`; this one reads through Beam's
file systems (local, gs://, s3://, hdfs://) and runs on a Beam runner: the DirectRunner (default)
and Beam's DaskRunner on a dask.distributed cluster are tested here and write the same files.

    match --input (MatchParts) -> read each file's lines (numbered; `.gz` decompressed)
      -> parse: JSONL objects with an `article` field, or one article a plain-text line
         (a line that is not UTF-8, not JSON, not an object, or has no article is a bad line)
      -> batch: up to WINDOW_BATCHES model batches, by a hash of (file, line) (Batches)
      -> RunInference(KeyedModelHandler(SavedModelHandler), pre-batched)   the export's
         serving_default, each batch sorted by length
         (pgn_tf.inference.saved_model.SavedModelSummarizer)
      -> OUT-SSSSS-of-NNNNN.jsonl   each record with `summary` added (plain-text lines become
                                    {"file", "line", "article", "summary"}), in (file, line) order
      -> OUT-errors-00000-of-00001.txt   "FILE:LINE: reason" for every bad line
      -> OUT-counts.json            lines, records, bad lines, summaries: printed at the end

It is built from the same portable pieces as pgn_tf.pipelines.preprocess, for the reasons its
docstring gives (Beam's DaskRunner has no metrics, drops finish_bundle outputs and tagged
outputs' routing, and computes only the last step): counts are `Count` elements summed by the
pipeline into OUT-counts.json, bad lines are `ErrorLine` elements told apart by type, batches
come from a GroupByKey (RunInference's own BatchElements would lose its last batch), and files
from WriteShards. A worker loads the SavedModel once: RunInference keeps it in a process-wide
`shared.Shared` handle across the bundles (dask tasks) it runs.
"""

from __future__ import annotations

import gzip
import json
import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.ml.inference.base import (
    KeyedModelHandler,
    ModelHandler,
    PredictionResult,
    RunInference,
)

from pgn_tf.data.articles import raw_lines
from pgn_tf.pipelines.portable import (
    MAX_READ_SHARDS,
    Batches,
    Count,
    Files,
    MatchParts,
    SplitCounts,
    WriteCounts,
    WriteShards,
    buckets_for,
    pipeline_options,
    read_counts,
    remove_temporaries,
    run_pipeline,
    shards_for,
)
from pgn_tf.utils.errors import UserError

log = logging.getLogger("pgn_tf.pipelines.summarize")
NAMESPACE = "pgn_tf.summarize"
WINDOW_BATCHES = 16  # model batches per RunInference batch: sorted by length, then decoded


class SavedModelHandler(ModelHandler[str, PredictionResult, Any]):
    """Beam's ModelHandler over a pgn_tf SavedModel: articles (str) in, summaries (str) out.

    Beam's own TFModelHandlerTensor loads Keras models through tensorflow_hub and stacks
    numeric tensors; a pgn_tf export is a plain SavedModel whose signatures take a string
    batch, so this handler calls them through
    pgn_tf.inference.saved_model.SavedModelSummarizer (which sorts each Beam batch by length
    and decodes it in model batches of `batch_size`).

    Args:
      path: the exported version dir (BASE/NAME/VERSION); batch_size: articles per model call
        (default: the export's decode.batch_size). The pipeline hands it batches of up to
        WINDOW_BATCHES model batches.
    """

    def __init__(self, path: str, batch_size: int):
        super().__init__()
        self.path = path
        self.batch_size = batch_size

    def load_model(self):
        from pgn_tf.inference.saved_model import SavedModelSummarizer

        return SavedModelSummarizer(self.path)

    def run_inference(self, batch: Sequence[str], model, inference_args=None
                      ) -> Iterable[PredictionResult]:
        results = model.decode(list(batch), self.batch_size)
        return [PredictionResult(article, r["summary"], model_id=self.path)
                for article, r in zip(batch, results)]

    def get_metrics_namespace(self) -> str:
        return NAMESPACE


def read_lines(readable) -> Iterable[tuple[str, int, bytes | None] | Count]:
    """(file, line number, line without its end) of one matched file; a damaged gzip ends it
    with (file, next line number, None). Then Count("lines", whole lines)."""
    path = readable.metadata.path
    with readable.open(compression_type=CompressionTypes.UNCOMPRESSED) as raw:
        f = gzip.GzipFile(fileobj=raw) if path.endswith(".gz") else raw
        whole = 0
        for lineno, line in raw_lines(f):
            yield path, lineno, line
            if line is not None:
                whole = lineno
    yield Count("lines", whole)


class ErrorLine(NamedTuple):
    """A line that holds no article, and why."""

    file: str
    line: int
    reason: str

    def text(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}"


class ParseLine(beam.DoFn):
    """(file, line, raw) -> ((file, line), record) with the article at `field`, or an ErrorLine;
    each with its Count (records, bad lines)."""

    def __init__(self, fmt: str, field: str):
        self.fmt = fmt
        self.field = field

    def process(self, item):
        from pgn_tf.data.articles import BadLine, detect_format, parse_line

        path, lineno, raw = item
        # By the name only (no first line, as pgn_tf.summarize gives): lines are parsed
        # apart from their file's first one.
        fmt = self.fmt or detect_format(path, articles=True)
        try:
            record = parse_line(raw, fmt, self.field)
        except BadLine as e:
            yield Count("bad lines")
            yield ErrorLine(path, lineno, str(e))
            return
        if record is None:
            return
        yield Count("records")
        if fmt == "text":
            record = {"file": path, "line": lineno, **record}
        yield (path, lineno), record


def _row(keyed_result, output_field: str) -> tuple[str, tuple[str, int], bytes]:
    """(((file, line), record), PredictionResult) -> ("rows", (file, line), JSON line)."""
    (where, record), result = keyed_result
    return "rows", where, json.dumps({**record, output_field: result.inference},
                             ensure_ascii=False).encode("utf-8")


def build(p, pattern: str, fmt: str | None, field: str, output_field: str, output: str,
          handler: SavedModelHandler, num_shards: int, read_parts: int = 1,
          buckets: int = 1) -> None:
    """Adds the job to pipeline p; its last step writes OUT-counts.json (read by counts())."""
    counts = []

    def apart(pcoll, label):
        data, counted = pcoll | label >> SplitCounts()
        counts.append(counted)
        return data

    lines = apart(p
                  | "Match" >> MatchParts([pattern], read_parts)
                  | "Open" >> fileio.ReadMatches()
                  | "Lines" >> beam.FlatMap(read_lines), "LineCounts")
    parsed = apart(lines | "Parse" >> beam.ParDo(ParseLine(fmt, field)), "ParseCounts")
    records = parsed | "Records" >> beam.Filter(lambda x: not isinstance(x, ErrorLine))
    errors = parsed | "Errors" >> beam.Filter(lambda x: isinstance(x, ErrorLine))
    rows = (records
            | "Articles" >> beam.Map(lambda kv: (kv, kv[1][field]))
            | "Batch" >> Batches(lambda item: item[0][0], handler.batch_size * WINDOW_BATCHES,
                                 buckets)
            | "Summarize" >> RunInference(KeyedModelHandler(handler).with_no_batching())
            | "Rows" >> beam.Map(_row, output_field))
    error_lines = errors | "ErrorText" >> beam.Map(
        lambda e: ("errors", (e.file, e.line), e.text().encode("utf-8")))
    files = {"rows": Files(output, ".jsonl", num_shards, "text", "summaries"),
             "errors": Files(output + "-errors", ".txt", 1, "text", "errors written")}
    counts.append((rows, error_lines) | "AllFiles" >> beam.Flatten()
                  | "Write" >> WriteShards(files))
    _ = counts | "AllCounts" >> beam.Flatten() | "WriteCounts" >> WriteCounts(
        output + "-counts.json")


def export_config(path: str):
    """The Config an export was written with (its assets.extra/config.json)."""
    from pgn_tf import config as config_lib

    cfg_path = FileSystems.join(path, "assets.extra", "config.json")
    if not FileSystems.exists(cfg_path):
        raise UserError(f"--saved_model {path} has no assets.extra/config.json: is it a pgn_tf "
                        "export (BASE/NAME/VERSION)?")
    with FileSystems.open(cfg_path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return config_lib.Config.from_dict(json.loads(f.read().decode("utf-8")))


def counts(output: str) -> dict:
    """The job's counts, from OUT-counts.json."""
    found = read_counts(output + "-counts.json")
    return {k: found.get(k, 0) for k in ("lines", "records", "bad lines", "summaries")}


def summarize_files(saved_model: str, input_path: str, output: str, *, fmt: str | None = None,
                    field: str = "article", output_field: str = "summary",
                    batch_size: int | None = None, num_shards: int = 0,
                    runner: str = "DirectRunner", beam_args: Sequence[str] = ()) -> dict:
    """Summarizes the articles of the files `input_path` matches with the export at
    `saved_model` into OUTPUT-SSSSS-of-NNNNN.jsonl (module docstring); returns the counts.
    fmt: "text" or "jsonl" (default: by file name); batch_size: articles per model call
    (default the export's decode.batch_size); num_shards: output files (0: by input size);
    runner and beam_args: Beam's. Raises UserError for a bad argument or path."""
    matched = FileSystems.match([input_path])[0].metadata_list
    if not matched:
        raise UserError(f"--input {input_path} matches no file")
    if batch_size is not None and batch_size <= 0:
        raise UserError("--batch_size must be positive")
    if num_shards < 0:
        raise UserError(f"--num_shards must be 0 (pick by size) or more, got {num_shards}")
    batch_size = batch_size or export_config(saved_model).decode.batch_size
    handler = SavedModelHandler(saved_model, batch_size)
    options = pipeline_options(runner, list(beam_args), "batch summarize")
    size = sum(m.size_in_bytes for m in matched)

    def build_fn(p):
        build(p, input_path, fmt, field, output_field, output, handler,
              num_shards or shards_for(size), read_parts=min(MAX_READ_SHARDS, len(matched)),
              buckets=buckets_for(size, batch_size * WINDOW_BATCHES))

    t0 = time.perf_counter()
    run_pipeline(build_fn, options, "batch summarize", runner)
    seconds = time.perf_counter() - t0
    directory, name = FileSystems.split(output)
    remove_temporaries(directory, f"{name}-")  # .tmp-OUT-... of killed writes
    stats = counts(output)
    stats.update(seconds=round(seconds, 2), runner=runner,
                 articles_per_sec=round(stats["summaries"] / seconds, 2) if seconds else 0.0)
    log.info(f"{stats['lines']} lines: {stats['records']} records, "
             f"{stats['summaries']} summarized, {stats['bad lines']} bad (listed in "
             f"{output}-errors-*.txt); {seconds:.1f} s, {stats['articles_per_sec']} "
             f"articles/s on {runner}")
    if stats["summaries"] != stats["records"]:
        raise RuntimeError(f"summaries and records do not add up: {stats}")
    return stats
