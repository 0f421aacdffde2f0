"""Raw corpus -> split, deduplicated TFRecord shards + vocab: `preprocess_corpus`, the library
call of `python -m pgn_tf.pipelines.preprocess` (pipelines/preprocess.py) and the flow's
preprocess step.

    python -m pgn_tf.pipelines.preprocess --input 'stories/*.story' --format story \
        --output_dir OUT --vocab_size 50000 [--split train=0.9,validation=0.05,test=0.05 | --split_files url_lists/] \
        [--runner DirectRunner | DaskRunner --dask_client_address HOST:PORT] [other Beam options]

An Apache Beam pipeline, so a corpus too large for one machine runs unchanged on a Beam runner:
the DirectRunner (default) and Beam's DaskRunner on a dask.distributed cluster are tested here
and give the same files and counts. Files are read and written through Beam's file systems
(local paths, gs://, s3://, hdfs://), nothing is assumed local.

    read (jsonl | story | see_bin | tfds | parallel)   malformed records counted, never fatal;
                                                 a damaged gzip keeps the lines before the damage
      -> tokenize (pgn_tf.text.tokenize, the model's own tokenizer, batched)
      -> drop empty articles / summaries        counted
      -> dedupe by the hash of the tokenized article (one record kept per article: lowest id)
      -> split: by a hash of the id, or by the CNN/DM url lists (`--split_files`)
      -> OUT/<split>-SSSSS-of-NNNNN.tfrecord    (pgn_tf.data.tfrecord's schema: raw text)
      -> OUT/vocab.txt                          (training split's tokens, Beam combiners)
      -> OUT/counts.json -> OUT/stats.json      read = dropped + duplicates + sum(splits)

Portable by construction: the pipeline uses only what every runner runs the same way: Create,
ParDo (no outputs from finish_bundle, no tagged outputs, no side inputs), GroupByKey,
CombinePerKey and Flatten, and ends in one step that every other branch feeds. Beam's DaskRunner
(Beam 2.77) was found here to mishandle the rest:
  - counts: its result reports no metrics (asking raises), so every count is a `Count`
    element travelling with the data; the counts are summed with a CombinePerKey and written by
    the pipeline itself to OUT/counts.json, which the driver reads for stats.json. Counted as
    data, a retried bundle cannot count twice (a counter's "attempted" value can).
  - one leaf: it computes only the last step's graph, so the TFRecord and vocab writers emit
    the counts of what they wrote and the counts file, written last, depends on all of them;
  - tagged outputs (`with_outputs`, `beam.Partition`) reach every consumer of the step, so a
    step's kinds of output are told apart by type (`Count`) or by a tag value and a Filter;
  - a DoFn's finish_bundle outputs are dropped, which loses BatchElements' last batch, Top's
    per-bundle results and a runner-sharded file sink's files; side inputs are recomputed
    inside the task that reads them (Beam's file sinks re-ran their writes three times and
    left temp dirs). So batches come from a GroupByKey on hash buckets (`Batches`), the top
    words from a CombinePerKey, and files from `WriteShards`: records keyed to a fixed number
    of shards, grouped, each shard written sorted under a temporary name and renamed, so a
    retried write (a worker lost mid-run) rewrites the same file.
On the DaskRunner a step runs as one dask task per partition of the Create it descends from: the
files are matched in up to MAX_READ_SHARDS parts, which `--dask_npartitions` spreads over the
workers.
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import time
from collections.abc import Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pgn_tf.data.articles import PIPELINE_FORMATS
from pgn_tf.data.example import Example
from pgn_tf.pipelines.portable import (
    COUNTS_FILE,
    MAX_READ_SHARDS,
    Batches,
    Count,
    Files,
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
from pgn_tf.pipelines.readers import Read, data_fingerprint
from pgn_tf.pipelines.splits import HashSplit, UrlListSplit, parse_split, read_url_lists
from pgn_tf.utils.errors import UserError

# a command shows it as [pipelines.preprocess] lines (pgn_tf.utils.logs)
log = logging.getLogger("pgn_tf.pipelines.preprocess")

TOKENIZE_BATCH = 512  # examples per tokenizer call
VOCAB = ""  # WriteShards' name for vocab.txt: never a split's (parse_split refuses empty names)


# -- tokenizing, cleaning, dedupe -------------------------------------------------------------


class TokenizeBatch(beam.DoFn):
    """[Example] -> (Example, article tokens, summary tokens) | Count, with the model's tokenizer.

    Batched so one TF call tokenizes a few hundred examples (per-element calls would spend their
    time in TF dispatch). Examples whose article or summary has no token are dropped (counted).
    """

    def __init__(self, lowercase: bool = True, replace_digits: bool = False):
        self.lowercase = lowercase
        self.replace_digits = replace_digits

    def setup(self):
        import tensorflow as tf

        from pgn_tf import text

        def fn(articles, summaries):
            summaries = tf.strings.regex_replace(summaries, "\n", " ")
            return (text.tokenize(articles, self.lowercase, self.replace_digits),
                    text.tokenize(summaries, self.lowercase, self.replace_digits))

        spec = tf.TensorSpec([None], tf.string)
        self._tokenize = tf.function(fn, input_signature=[spec, spec], autograph=False)

    def process(self, batch: list[Example]):
        arts, sums = self._tokenize([e.article.encode() for e in batch],
                                    [e.summary.encode() for e in batch])
        for ex, a, s in zip(batch, arts.to_list(), sums.to_list()):
            if not a:
                yield Count("dropped: empty article")
            elif not s:
                yield Count("dropped: empty summary")
            else:
                yield ex, [t.decode() for t in a], [t.decode() for t in s]


def article_key(item) -> tuple[str, tuple]:
    """Keys a tokenized example by the hash of its tokenized article (case and spacing
    differences do not make a different article)."""
    return hashlib.sha1(" ".join(item[1]).encode()).hexdigest(), item


def keep_one(keyed):
    """One example per article: the lowest id (then text), so the choice is the same on every
    run and runner; the others are counted as duplicates."""
    _, items = keyed
    items = sorted(items, key=lambda it: (it[0].id, it[0].article, it[0].summary))
    if len(items) > 1:
        yield Count("duplicate article", len(items) - 1)
    yield items[0]


# -- writing --------------------------------------------------------------------------------


def serialize(item) -> bytes:
    """The tf.train.Example of a (Example, tokens, tokens) item, with its features in one order
    (byte-identical files on every runner)."""
    from pgn_tf.data import tfrecord

    return tfrecord.to_tf_example(item[0]).SerializeToString(deterministic=True)


def _split_record(tagged, split_names: list[str]):
    """(split index, item) -> (split name, id, serialized Example) for WriteShards; nothing for
    an example in no split."""
    index, item = tagged
    if index < len(split_names):
        yield split_names[index], item[0].id, serialize(item)


class _VocabOrder:
    """TopCombineFn key: higher count first, then the word in ascending order (pgn_tf.vocab's
    Vocab.from_counter order, so both ways of building a vocab agree)."""

    __slots__ = ("count", "word")

    def __init__(self, word_count):
        self.word, self.count = word_count

    def __lt__(self, other):
        return (self.count, other.word) < (other.count, self.word)


def vocab_lines(top: list[tuple[str, int]]) -> str:
    return "\n".join(f"{w} {c}" for w, c in top)


def _token_counts(batch) -> list[tuple[str, int]]:
    """[(Example, article tokens, summary tokens)] -> (token, count in the batch)."""
    counts = collections.Counter()
    for _, article, summary in batch:
        counts.update(article)
        counts.update(summary)
    return list(counts.items())


def _vocab_records(keyed_top):
    """(None, top words) -> (VOCAB, rank, b"word count") for WriteShards (sorted by rank)."""
    return [(VOCAB, rank, f"{w} {c}".encode()) for rank, (w, c) in enumerate(keyed_top[1])]


def _of_split(item, index: int):
    return [item[1]] if item[0] == index else []


def build(p: beam.Pipeline, input_path: str, fmt: str, output_dir: str, vocab_size: int,
          splitter, split_names: list[str], min_count: int = 1,
          num_shards: dict[str, int] | int = 1, lowercase: bool = True,
          replace_digits: bool = False, read_parts: int = 1, buckets: int = 1) -> None:
    """Adds the whole preprocessing graph to pipeline p; its last step writes
    OUT/counts.json (read by collect_stats).

    num_shards: TFRecord files per split ({split: n}, or one n for all); read_parts: MatchParts'
    parts; buckets: the tokenizer's batching buckets (Batches)."""
    from pgn_tf.vocab import SPECIAL_TOKENS

    counts = []  # every branch's PCollection[Count]; WriteCounts, applied last, gathers them

    def apart(pcoll, label):
        data, counted = pcoll | label >> SplitCounts()
        counts.append(counted)
        return data

    examples = apart(p | "Read" >> Read(input_path, fmt, read_parts), "ReadCounts")
    tokenized = apart(
        examples
        | "Batch" >> Batches(lambda ex: ex.id, TOKENIZE_BATCH, buckets)
        | "Tokenize" >> beam.ParDo(TokenizeBatch(lowercase, replace_digits)),
        "TokenizeCounts")
    unique = apart(
        tokenized
        | "KeyByArticle" >> beam.Map(article_key)
        | "GroupByArticle" >> beam.GroupByKey()
        | "Dedupe" >> beam.FlatMap(keep_one),
        "DedupeCounts")
    # The split is a tag on each example, not beam.Partition's tagged outputs (which reach
    # every consumer on the DaskRunner); all files are written by one WriteShards.
    n = len(split_names)
    tagged = unique | "Split" >> beam.Map(lambda item: (splitter(item, n + 1), item))
    counts.append(tagged | "Unlisted" >> beam.FlatMap(
        lambda item: [Count("dropped: not in any split")] if item[0] == n else []))
    files = {name: Files(FileSystems.join(output_dir, name), ".tfrecord",
                         num_shards[name] if isinstance(num_shards, dict) else num_shards,
                         "tfrecord", f"kept: {name}") for name in split_names}
    files[VOCAB] = Files(FileSystems.join(output_dir, "vocab"), ".txt", None, "text",
                         "vocab words")
    records = tagged | "Serialize" >> beam.FlatMap(_split_record, split_names)
    train = tagged | "Train" >> beam.FlatMap(_of_split, split_names.index("train"))
    vocab = (
        train
        # Counted per batch first: a CombinePerKey over every token would move each token on
        # the DaskRunner, which has no combiner lifting.
        | "VocabBatch" >> Batches(lambda item: item[0].id, TOKENIZE_BATCH, buckets)
        | "BatchTokens" >> beam.FlatMap(_token_counts)
        | "CountTokens" >> beam.CombinePerKey(sum)
        | "MinCount" >> beam.Filter(lambda wc: wc[1] >= min_count and wc[0] not in SPECIAL_TOKENS)
        # A CombinePerKey, not Top.Of (whose per-bundle tops come from finish_bundle)
        | "KeyAll" >> beam.Map(lambda wc: (None, wc))
        | "TopWords" >> beam.CombinePerKey(beam.combiners.TopCombineFn(
            vocab_size - len(SPECIAL_TOKENS), key=_VocabOrder))
        | "VocabLines" >> beam.FlatMap(_vocab_records))
    counts.append((records, vocab) | "AllFiles" >> beam.Flatten()
                  | "Write" >> WriteShards(files))
    _ = counts | "AllCounts" >> beam.Flatten() | "WriteCounts" >> WriteCounts(
        FileSystems.join(output_dir, COUNTS_FILE))


def collect_stats(counters: dict[str, int], split_names: list[str]) -> dict:
    """The pipeline's counts ({name: n}, OUT/counts.json) -> {read, kept: {split: n},
    dropped: {reason: n}, duplicates, accounted}."""
    stats = {
        "read": counters.get("read", 0),
        "kept": {n: counters.get(f"kept: {n}", 0) for n in split_names},
        "dropped": {k[len("dropped: "):]: v for k, v in sorted(counters.items())
                    if k.startswith("dropped: ") and v},
        "duplicates": counters.get("duplicate article", 0),
    }
    stats["accounted"] = (sum(stats["kept"].values()) + sum(stats["dropped"].values())
                          + stats["duplicates"])
    return stats


def format_stats(stats: dict) -> str:
    kept = ", ".join(f"{n} {c}" for n, c in stats["kept"].items())
    dropped = ", ".join(f"{c} {why}" for why, c in stats["dropped"].items()) or "none"
    return (f"read {stats['read']} = kept {sum(stats['kept'].values())} ({kept}) + duplicates "
            f"{stats['duplicates']} + dropped {sum(stats['dropped'].values())} ({dropped})")


def preprocess_corpus(input_path: str, output_dir: str, *, fmt: str, vocab_size: int = 50_000,
                      min_count: int = 1, split: str = "train=0.9,validation=0.05,test=0.05",
                      split_files: str | None = None, num_shards: int = 0,
                      lowercase: bool = True, replace_digits: bool = False,
                      runner: str = "DirectRunner", beam_args: Sequence[str] = ()) -> dict:
    """Runs the pipeline (module docstring) on `input_path` (a file, glob or story dir;
    tfds:DATA_DIR[:split]; parallel text) of format `fmt` into `output_dir`; returns the stats
    (also written to OUTPUT_DIR/stats.json). split: "name=share,..." by a hash of the id, or
    split_files: a dir of CNN/DM's url lists; num_shards: a split's TFRecord files (0: one per
    128 MiB of input); runner and beam_args: Beam's (`DaskRunner` with --dask_client_address
    ...). Raises UserError for a bad argument or path, before the pipeline starts."""
    if fmt not in PIPELINE_FORMATS:
        raise UserError(f"unknown --format '{fmt}' ({', '.join(PIPELINE_FORMATS)})")
    if vocab_size <= 4:
        raise UserError(f"--vocab_size must exceed the 4 special tokens, got {vocab_size}")
    if num_shards < 0:
        raise UserError(f"--num_shards must be 0 (pick by size) or more, got {num_shards}")
    if fmt == "tfds":
        data_dir = input_path.split(":")[0]
        if not FileSystems.exists(data_dir):
            raise UserError(f"--input {data_dir} does not exist")
    elif fmt == "story" and FileSystems.exists(input_path):
        pass  # a directory of stories
    elif fmt == "parallel":
        from pgn_tf.data import parallel

        for path in parallel.split_spec(input_path):
            if not FileSystems.exists(path):
                raise UserError(f"--input {path} does not exist")
    elif not FileSystems.match([input_path])[0].metadata_list:
        raise UserError(f"--input {input_path} matches no file")
    if split_files:
        splitter = UrlListSplit(read_url_lists(split_files))
    else:
        splitter = HashSplit(parse_split(split))
    names = splitter.names
    if not FileSystems.exists(output_dir):
        FileSystems.mkdirs(output_dir)
    stale = FileSystems.match([FileSystems.join(output_dir, "*.tfrecord")])[0].metadata_list
    if stale:
        raise UserError(f"--output_dir {output_dir} already holds TFRecords; use a new one")
    options = pipeline_options(runner, list(beam_args), "preprocess")

    data = data_fingerprint(input_path, fmt)
    shards = {n: num_shards or shards_for(data["bytes"] * splitter.shares.get(n, 0))
              for n in names}

    def build_fn(p):
        build(p, input_path, fmt, output_dir, vocab_size, splitter, names,
              min_count, shards, lowercase, replace_digits,
              read_parts=min(MAX_READ_SHARDS, data["files"]),
              buckets=buckets_for(data["bytes"], TOKENIZE_BATCH))

    t0 = time.perf_counter()
    run_pipeline(build_fn, options, "preprocess", runner)
    seconds = time.perf_counter() - t0
    remove_temporaries(output_dir)
    stats = collect_stats(read_counts(FileSystems.join(output_dir, COUNTS_FILE)), names)
    stats.update(seconds=round(seconds, 2),
                 records_per_sec=round(stats["read"] / seconds, 1) if seconds else 0.0,
                 input=input_path, format=fmt, runner=runner)
    with FileSystems.create(FileSystems.join(output_dir, "stats.json")) as f:
        f.write(json.dumps(stats, indent=2).encode())
    log.info("%s", format_stats(stats))
    log.info("%d records in %.1f s (%s records/s) on %s", stats["read"], seconds,
             stats["records_per_sec"], runner)
    if stats["accounted"] != stats["read"]:
        raise RuntimeError(f"record counts do not add up: {stats}")
    return stats
