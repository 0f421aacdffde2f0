"""`python -m pgn_tf.pipelines.summarize`: summarize a corpus with an exported SavedModel on Apache
Beam's RunInference, for corpora that need more than one machine.

    python -m pgn_tf.pipelines.summarize --saved_model BASE/NAME/VERSION \
        --input 'articles-*.jsonl.gz' \
        --output OUT/summaries [--format jsonl|text] [--runner DirectRunner] [Beam options]

The single-machine form is `python -m pgn_tf.summarize --input`; this one reads through Beam's
file systems (local, gs://, s3://, hdfs://) and runs on any Beam runner (DirectRunner here).

    match --input -> read each file's lines (numbered; `.gz` decompressed)
      -> parse: JSONL objects with an `article` field, or one article a plain-text line
         (a line that is not UTF-8, not JSON, not an object, or has no article is a bad line)
      -> RunInference(KeyedModelHandler(SavedModelHandler))   the export's serving_default,
         in batches of similar length (pgn_tf.inference.SavedModelSummarizer.decode)
      -> OUT-SSSSS-of-NNNNN.jsonl   each record with `summary` added (plain-text lines become
                                    {"file", "line", "article", "summary"})
      -> OUT-errors-SSSSS-of-NNNNN.txt   "FILE:LINE: reason" for every bad line
Counts (lines, records, bad lines, summaries) come from Beam metrics and are printed at the end.
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("pgn_tf.pipelines.summarize"))
import argparse
import gzip
import json
import time
from collections.abc import Iterable, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics.metric import Metrics, MetricsFilter
from apache_beam.ml.inference.base import (
    KeyedModelHandler,
    ModelHandler,
    PredictionResult,
    RunInference,
)
from apache_beam.options.pipeline_options import PipelineOptions

from pgn_tf.summarize import raw_lines
from pgn_tf.utils.errors import UserError, run_cli
from pgn_tf.utils.quiet import add_verbose_flag

NAMESPACE = "pgn_tf.summarize"
WINDOW_BATCHES = 16  # model batches per RunInference batch: sorted by length, then decoded


class SavedModelHandler(ModelHandler[str, PredictionResult, Any]):
    """Beam's ModelHandler over a pgn_tf SavedModel: articles (str) in, summaries (str) out.

    Beam's own TFModelHandlerTensor loads Keras models through tensorflow_hub and stacks
    numeric tensors; a pgn_tf export is a plain SavedModel whose signatures take a string
    batch, so this handler calls them through pgn_tf.inference.SavedModelSummarizer (which
    sorts each Beam batch by length and decodes it in model batches of `batch_size`).

    Args:
      path: the exported version dir (BASE/NAME/VERSION); batch_size: articles per model call
        (default: the export's decode.batch_size); Beam batches hold up to WINDOW_BATCHES of them.
    """

    def __init__(self, path: str, batch_size: int):
        super().__init__(min_batch_size=1, max_batch_size=batch_size * WINDOW_BATCHES)
        self.path = path
        self.batch_size = batch_size

    def load_model(self):
        from pgn_tf.inference import SavedModelSummarizer

        return SavedModelSummarizer(self.path)

    def run_inference(self, batch: Sequence[str], model, inference_args=None
                      ) -> Iterable[PredictionResult]:
        results = model.decode(list(batch), self.batch_size)
        Metrics.counter(NAMESPACE, "summaries").inc(len(results))
        return [PredictionResult(article, r["summary"], model_id=self.path)
                for article, r in zip(batch, results)]

    def get_metrics_namespace(self) -> str:
        return NAMESPACE


def read_lines(readable) -> Iterable[tuple[str, int, bytes | None]]:
    """(file, line number, line without its end) of one matched file; a damaged gzip ends it
    with (file, next line number, None)."""
    path = readable.metadata.path
    with readable.open(compression_type=CompressionTypes.UNCOMPRESSED) as raw:
        f = gzip.GzipFile(fileobj=raw) if path.endswith(".gz") else raw
        whole = 0
        for lineno, line in raw_lines(f):
            yield path, lineno, line
            if line is not None:
                whole = lineno
    Metrics.counter(NAMESPACE, "lines").inc(whole)


class ParseLine(beam.DoFn):
    """(file, line, raw) -> ((file, line), record) with the article at `field`; bad lines go
    to the tagged output "bad" as "FILE:LINE: reason"."""

    BAD = "bad"

    def __init__(self, fmt: str, field: str):
        self.fmt = fmt
        self.field = field

    def process(self, item):
        from pgn_tf.summarize import JSONL_SUFFIXES, BadLine, parse_line

        path, lineno, raw = item
        # By the name only (not by a first line, as pgn_tf.summarize can): lines are parsed
        # apart from their file's first one.
        fmt = self.fmt or ("jsonl" if path.lower().endswith(JSONL_SUFFIXES) else "text")
        try:
            record = parse_line(raw, fmt, self.field)
        except BadLine as e:
            Metrics.counter(NAMESPACE, "bad lines").inc()
            yield beam.pvalue.TaggedOutput(self.BAD, f"{path}:{lineno}: {e}")
            return
        if record is None:
            return
        Metrics.counter(NAMESPACE, "records").inc()
        if fmt == "text":
            record = {"file": path, "line": lineno, **record}
        yield (path, lineno), record


def build(p, pattern: str, fmt: str | None, field: str, output_field: str, output: str,
          handler: SavedModelHandler, num_shards: int) -> None:
    parsed = (p
              | "Match" >> fileio.MatchFiles(pattern)
              | "Open" >> fileio.ReadMatches()
              | "Lines" >> beam.FlatMap(read_lines)
              | "Parse" >> beam.ParDo(ParseLine(fmt, field)).with_outputs(ParseLine.BAD,
                                                                          main="records"))
    records = parsed.records
    (records
     | "Articles" >> beam.Map(lambda kv: ((kv[0], kv[1]), kv[1][field]))
     | "Summarize" >> RunInference(KeyedModelHandler(handler))
     | "Rows" >> beam.Map(lambda kv: json.dumps(
         {**kv[0][1], output_field: kv[1].inference}, ensure_ascii=False))
     | "Write" >> beam.io.WriteToText(output, file_name_suffix=".jsonl", num_shards=num_shards))
    (parsed[ParseLine.BAD]
     | "WriteErrors" >> beam.io.WriteToText(output + "-errors", file_name_suffix=".txt",
                                            num_shards=1))


def export_config(path: str):
    """The Config an export was written with (its assets.extra/config.json)."""
    from pgn_tf import config as config_lib

    cfg_path = FileSystems.join(path, "assets.extra", "config.json")
    if not FileSystems.exists(cfg_path):
        raise UserError(f"--saved_model {path} has no assets.extra/config.json: is it a pgn_tf "
                        "export (BASE/NAME/VERSION)?")
    with FileSystems.open(cfg_path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return config_lib.Config.from_dict(json.loads(f.read().decode("utf-8")))


def counts(result) -> dict:
    out = {"lines": 0, "records": 0, "bad lines": 0, "summaries": 0}
    for c in result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]:
        if c.key.metric.name in out:
            out[c.key.metric.name] += c.committed if c.committed is not None else c.attempted
    return out


def run(args, beam_args: list[str] | None = None) -> dict:
    """Runs the pipeline; returns the counts."""
    if not FileSystems.match([args.input])[0].metadata_list:
        raise UserError(f"--input {args.input} matches no file")
    if args.batch_size is not None and args.batch_size <= 0:
        raise UserError("--batch_size must be positive")
    batch_size = args.batch_size or export_config(args.saved_model).decode.batch_size
    handler = SavedModelHandler(args.saved_model, batch_size)
    options = PipelineOptions(beam_args or [], runner=args.runner)
    t0 = time.perf_counter()
    with beam.Pipeline(options=options) as p:
        build(p, args.input, args.format, args.field, args.output_field, args.output, handler,
              args.num_shards)
    seconds = time.perf_counter() - t0
    stats = counts(p.result)
    stats.update(seconds=round(seconds, 2), runner=args.runner,
                 articles_per_sec=round(stats["summaries"] / seconds, 2) if seconds else 0.0)
    print(f"[pipelines.summarize] {stats['lines']} lines: {stats['records']} records, "
          f"{stats['summaries']} summarized, {stats['bad lines']} bad (listed in "
          f"{args.output}-errors-*.txt); {seconds:.1f} s, {stats['articles_per_sec']} "
          f"articles/s on {args.runner}")
    if stats["summaries"] != stats["records"]:
        raise RuntimeError(f"summaries and records do not add up: {stats}")
    return stats


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pgn_tf.pipelines.summarize",
                                description=__doc__.splitlines()[0],
                                epilog="Unknown flags are passed to Beam as pipeline options.")
    p.add_argument("--saved_model", required=True, help="an exported version dir")
    p.add_argument("--input", required=True, help="a file pattern (Beam file systems)")
    p.add_argument("--output", required=True, help="output prefix: PREFIX-SSSSS-of-NNNNN.jsonl")
    p.add_argument("--format", choices=("text", "jsonl"),
                   help="the input's format (default: JSONL for .jsonl/.json(.gz) names, else "
                        "plain text)")
    p.add_argument("--field", default="article", help="JSONL field holding the article")
    p.add_argument("--output_field", default="summary", help="field the summary goes to")
    p.add_argument("--batch_size", type=int,
                   help="articles per model call (default: the export's decode.batch_size)")
    p.add_argument("--num_shards", type=int, default=0, help="output shards (0: the runner's)")
    p.add_argument("--runner", default="DirectRunner")
    add_verbose_flag(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args, beam_args = build_parser().parse_known_args(argv)
    return run_cli("pgn_tf.pipelines.summarize", run, args, beam_args)
